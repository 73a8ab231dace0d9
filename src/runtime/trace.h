#pragma once
// Tracing: while a Tracer is active on a thread, ops:: calls record nodes into its graph and return
// symbolic tensors. Concrete tensors a traced function touches become constants.
//
//   auto g = trace_function([](std::span<const Tensor> in) { return std::vector{ops::relu(in[0])}; },
//                           {TensorType(DType::f32, {Dim::symbol("batch"), 4})});
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ops/registry.h"

namespace spore {

using TensorFn = std::function<std::vector<Tensor>(std::span<const Tensor>)>;

class Tracer {
 public:
  explicit Tracer(Graph& g);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Symbolic tensor for a graph value of this trace.
  Tensor symbolic(Value* v);
  // The graph value for a tensor: its own value if symbolic, else a (deduplicated) constant.
  Value* value_of(const Tensor& t);
  std::vector<Tensor> record(const OpDef& def, std::span<const Tensor> inputs, const Attrs& normalized);

  static Tracer* active();

 private:
  Graph& g_;
  uint64_t id_;
  Tracer* prev_;
  std::vector<Value*> values_;  // by SymbolicRef::value_id
  std::unordered_map<const void*, Value*> constants_;
};

std::unique_ptr<Graph> trace_function(const TensorFn& fn, const std::vector<TensorType>& input_types,
                                      const std::vector<std::string>& input_names = {});

}  // namespace spore
