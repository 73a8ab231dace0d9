#include "runtime/trace.h"

#include <atomic>

#include "ops/graph_ops.h"

namespace spore {
namespace {
thread_local Tracer* tls_tracer = nullptr;
std::atomic<uint64_t> g_next_trace_id{1};
}  // namespace

Tracer::Tracer(Graph& g) : g_(g), id_(g_next_trace_id.fetch_add(1)), prev_(tls_tracer) { tls_tracer = this; }
Tracer::~Tracer() { tls_tracer = prev_; }
Tracer* Tracer::active() { return tls_tracer; }

Tensor Tracer::symbolic(Value* v) {
  Shape shape;
  for (const Dim& d : v->type.dims) shape.push_back(d.is_static() ? d.size : -1);
  SymbolicRef ref;
  ref.trace_id = id_;
  ref.value_id = static_cast<int64_t>(values_.size());
  ref.producer = v->producer ? v->producer->label() : std::string("?");
  values_.push_back(v);
  return Tensor::symbolic(std::move(shape), v->type.dtype, std::move(ref));
}

Value* Tracer::value_of(const Tensor& t) {
  if (const SymbolicRef* r = t.symbolic_ref()) {
    SPORE_CHECK(r->trace_id == id_, ErrorCode::invalid_argument,
                "a symbolic tensor from another trace (made by op {}) was used in this trace", r->producer);
    return values_.at(r->value_id);
  }
  // Concrete tensor captured by the traced function: a constant (one per distinct tensor view).
  const void* key = t.raw_data();
  auto it = constants_.find(key);
  if (it != constants_.end() && it->second->type == TensorType::of(t.dtype(), t.shape())) return it->second;
  Value* v = g_.add_constant(t.contiguous(), "");
  constants_[key] = v;
  return v;
}

std::vector<Tensor> Tracer::record(const OpDef& def, std::span<const Tensor> inputs, const Attrs& attrs) {
  std::vector<Value*> ins;
  ins.reserve(inputs.size());
  for (const Tensor& t : inputs) ins.push_back(value_of(t));
  Node* n = build_node(g_, def.id, std::move(ins), attrs);
  std::vector<Tensor> outs;
  for (Value* v : n->outputs) outs.push_back(symbolic(v));
  return outs;
}

std::unique_ptr<Graph> trace_function(const TensorFn& fn, const std::vector<TensorType>& input_types,
                                      const std::vector<std::string>& input_names) {
  auto g = std::make_unique<Graph>("main");
  std::vector<Tensor> args;
  {
    Tracer tracer(*g);
    for (size_t i = 0; i < input_types.size(); ++i) {
      std::string name = i < input_names.size() ? input_names[i] : "in" + std::to_string(i);
      args.push_back(tracer.symbolic(g->add_input(input_types[i], name)));
    }
    std::vector<Tensor> outs = fn(args);
    std::vector<Value*> out_values;
    for (const Tensor& t : outs) {
      SPORE_CHECK(t.defined(), ErrorCode::invalid_argument, "traced function returned an undefined tensor");
      out_values.push_back(tracer.value_of(t));
    }
    g->set_outputs(std::move(out_values));
  }
  verify_graph(*g);
  return g;
}

}  // namespace spore
