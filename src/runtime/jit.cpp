#include "runtime/jit.h"

namespace spore {

std::string CompiledFunction::signature(std::span<const Tensor> inputs, const CompileOptions& o) {
  std::string key = fmt::format("b{}o{}m{}c{};", static_cast<int>(o.backend), o.opt_level, o.memory_optimize_level, o.max_memory);
  for (const Tensor& t : inputs) key += std::string(dtype_name(t.dtype())) + shape_str(t.shape()) + ";";
  return key;
}

Plan& CompiledFunction::plan_for(std::span<const Tensor> inputs) {
  const std::string key = signature(inputs, opts_);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return *it->second;
  std::vector<TensorType> types;
  for (const Tensor& t : inputs) types.push_back(TensorType::of(t.dtype(), t.shape()));
  auto g = trace_function(fn_, types);
  auto plan = std::make_unique<Plan>(compile_plan(std::move(g), opts_));
  return *cache_.emplace(key, std::move(plan)).first->second;
}

std::vector<Tensor> CompiledFunction::operator()(std::span<const Tensor> inputs) { return plan_for(inputs).run(inputs); }

}  // namespace spore
