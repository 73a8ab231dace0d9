#pragma once
// Graph mode for a function of tensors: traced once per input signature, compiled to a Plan,
// cached and replayed.
//
//   CompiledFunction f([](std::span<const Tensor> in) { return std::vector{ops::relu(in[0])}; });
//   auto y = f({x});   // first call traces + compiles; later calls with the same signature replay
//
// Compile options come from set_context() at each compile (memory_optimize_level, max_device_memory,
// recompute, save_graphs), unless the function was built with explicit CompileOptions; even then the
// context's max_device_memory and save_graphs apply where the explicit options leave them unset. The cache
// is keyed on the options too, so a set_context() between calls compiles a new plan rather than reusing one
// built under other settings.
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/plan.h"
#include "runtime/trace.h"

namespace spore {

// What a compile of a CompiledFunction takes from the context besides the memory settings.
struct CompileRole {
  std::string name = "graph";  // names the save_graphs subdirectory: DIR/<name>_<n>/NN_<pass>.ir
  bool inference = false;      // CompileOptions::inference (eval/predict graphs; never a training step)
};

// The options set_context() implies for a compile (save_graphs_dir is the context's directory itself; each
// CompiledFunction compile writes into a fresh subdirectory of it).
CompileOptions context_compile_options(bool inference = false);

class CompiledFunction {
 public:
  explicit CompiledFunction(TensorFn fn, CompileRole role = {}) : fn_(std::move(fn)), role_(std::move(role)) {}
  CompiledFunction(TensorFn fn, CompileOptions opts) : fn_(std::move(fn)), fixed_(std::move(opts)) {}
  std::vector<Tensor> operator()(std::span<const Tensor> inputs);
  std::vector<Tensor> operator()(std::initializer_list<Tensor> inputs) {
    return (*this)(std::span<const Tensor>(inputs.begin(), inputs.size()));
  }
  // The plan for a signature, compiling it if needed.
  Plan& plan_for(std::span<const Tensor> inputs);
  // The plan the last call ran (or plan_for returned); null before the first.
  const Plan* last_plan() const { return last_; }
  size_t cache_size() const { return cache_.size(); }
  // The options the next compile would use (the context's as of now, or the explicit ones merged with it).
  CompileOptions effective_options() const;

 private:
  static std::string signature(std::span<const Tensor> inputs, const CompileOptions& o);
  TensorFn fn_;
  CompileRole role_;
  std::optional<CompileOptions> fixed_;
  std::map<std::string, std::unique_ptr<Plan>> cache_;
  const Plan* last_ = nullptr;
  std::mutex mu_;
};

}  // namespace spore
