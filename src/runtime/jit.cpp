#include "runtime/jit.h"

#include <atomic>

#include "runtime/runtime.h"

namespace spore {

CompileOptions context_compile_options(bool inference) {
  const ContextOptions& c = context();
  CompileOptions o;
  o.backend = c.backend;
  o.memory_optimize_level = c.memory_optimize_level;
  o.max_memory = c.max_device_memory;
  o.save_graphs_dir = c.save_graphs;
  o.recompute = c.recompute;
  o.inference = inference;
  return o;
}

CompileOptions CompiledFunction::effective_options() const {
  if (!fixed_) return context_compile_options(role_.inference);
  CompileOptions o = *fixed_;
  if (o.max_memory == 0) o.max_memory = context().max_device_memory;
  if (o.save_graphs_dir.empty()) o.save_graphs_dir = context().save_graphs;
  return o;
}

std::string CompiledFunction::signature(std::span<const Tensor> inputs, const CompileOptions& o) {
  std::string key = fmt::format("b{}o{}m{}c{}i{}r{};", static_cast<int>(o.backend), o.opt_level, o.memory_optimize_level,
                                o.max_memory, o.inference, o.recompute);
  for (const std::string& d : o.disabled_passes) key += "-" + d + ";";
  for (const Tensor& t : inputs) key += std::string(dtype_name(t.dtype())) + shape_str(t.shape()) + ";";
  return key;
}

Plan& CompiledFunction::plan_for(std::span<const Tensor> inputs) {
  CompileOptions opts = effective_options();
  const std::string key = signature(inputs, opts);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    last_ = it->second.get();
    return *it->second;
  }
  std::vector<TensorType> types;
  for (const Tensor& t : inputs) types.push_back(TensorType::of(t.dtype(), t.shape()));
  auto g = trace_function(fn_, types);
  if (!opts.save_graphs_dir.empty()) {
    // One subdirectory per compile (numbered process-wide), so the dumps of several functions, or of one
    // function at several signatures, do not overwrite each other.
    static std::atomic<int> compiles{0};
    const std::string name = fixed_ ? g->name() : role_.name;
    opts.save_graphs_dir = fmt::format("{}/{}_{}", opts.save_graphs_dir, name, compiles.fetch_add(1));
  }
  auto plan = std::make_unique<Plan>(compile_plan(std::move(g), opts));
  last_ = plan.get();
  return *cache_.emplace(key, std::move(plan)).first->second;
}

std::vector<Tensor> CompiledFunction::operator()(std::span<const Tensor> inputs) { return plan_for(inputs).run(inputs); }

}  // namespace spore
