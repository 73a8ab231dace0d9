#pragma once
// Graph mode for a function of tensors: traced once per input signature, compiled to a Plan,
// cached and replayed.
//
//   CompiledFunction f([](std::span<const Tensor> in) { return std::vector{ops::relu(in[0])}; });
//   auto y = f({x});   // first call traces + compiles; later calls with the same signature replay
#include <map>
#include <mutex>
#include <string>

#include "runtime/plan.h"
#include "runtime/trace.h"

namespace spore {

class CompiledFunction {
 public:
  explicit CompiledFunction(TensorFn fn, CompileOptions opts = {}) : fn_(std::move(fn)), opts_(std::move(opts)) {}
  std::vector<Tensor> operator()(std::span<const Tensor> inputs);
  std::vector<Tensor> operator()(std::initializer_list<Tensor> inputs) {
    return (*this)(std::span<const Tensor>(inputs.begin(), inputs.size()));
  }
  // The plan for a signature, compiling it if needed.
  Plan& plan_for(std::span<const Tensor> inputs);
  size_t cache_size() const { return cache_.size(); }

 private:
  static std::string signature(std::span<const Tensor> inputs, const CompileOptions& o);
  TensorFn fn_;
  CompileOptions opts_;
  std::map<std::string, std::unique_ptr<Plan>> cache_;
  std::mutex mu_;
};

}  // namespace spore
