#include "ops/graph_ops.h"

namespace spore {
namespace {
std::vector<TensorType> input_types(const Node* n) {
  std::vector<TensorType> t;
  t.reserve(n->inputs.size());
  for (const Value* v : n->inputs) t.push_back(v->type);
  return t;
}
}  // namespace

Node* build_node(Graph& g, OpId op, std::vector<Value*> inputs, const Attrs& attrs, std::string name) {
  const OpDef& def = op_registry().get(op);
  std::string where = name.empty() ? std::string(op_name(op)) : name;
  Attrs a = def.normalize(attrs, where);
  std::vector<TensorType> in;
  for (Value* v : inputs) in.push_back(v->type);
  auto outs = def.infer_types(in, a, where);
  return g.add_node(op, std::move(inputs), std::move(a), std::move(outs), std::move(name));
}

namespace {
// The error codes by which an op's normalize/inference says "not these inputs": a rewrite that asked may go on.
bool is_rejection(const Error& e) {
  switch (e.code()) {
    case ErrorCode::invalid_argument:
    case ErrorCode::shape_mismatch:
    case ErrorCode::dtype_mismatch:
    case ErrorCode::unsupported: return true;
    default: return false;
  }
}
}  // namespace

std::optional<std::vector<TensorType>> try_infer_types(const OpDef& def, std::span<const TensorType> inputs,
                                                       const Attrs& normalized, std::string_view where) {
  try {
    return def.infer_types(inputs, normalized, where);
  } catch (const Error& e) {
    if (!is_rejection(e)) throw;
    return std::nullopt;
  }
}

Node* try_build_node(Graph& g, OpId op, std::vector<Value*> inputs, const Attrs& attrs, std::string name) {
  try {
    return build_node(g, op, std::move(inputs), attrs, std::move(name));  // adds nothing unless inference passed
  } catch (const Error& e) {
    if (!is_rejection(e)) throw;
    return nullptr;
  }
}

void verify_graph(const Graph& g) {
  verify_structure(g);
  for (const Node* n : g.nodes()) {
    const OpDef* def = op_registry().find(n->op);
    SPORE_CHECK(def != nullptr, ErrorCode::unsupported, "[verify] node {}: unknown op", n->label());
    if (def->traits.has(Trait::graph_structure)) continue;
    Attrs a = def->normalize(n->attrs, n->label());
    auto outs = def->infer_types(input_types(n), a, n->label());
    SPORE_CHECK(outs.size() == n->outputs.size(), ErrorCode::invalid_argument, "[verify] node {}: has {} outputs, op gives {}",
                n->label(), n->outputs.size(), outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      SPORE_CHECK(outs[i] == n->outputs[i]->type, ErrorCode::invalid_argument,
                  "[verify] node {}: output {} is typed {} but inference gives {}", n->label(), i,
                  n->outputs[i]->type.str(), outs[i].str());
    }
  }
}

void reinfer_types(Graph& g) {
  for (Node* n : g.nodes()) {
    const OpDef& def = op_registry().get(n->op);
    if (def.traits.has(Trait::graph_structure)) continue;
    n->attrs = def.normalize(n->attrs, n->label());
    auto outs = def.infer_types(input_types(n), n->attrs, n->label());
    SPORE_ASSERT(outs.size() == n->outputs.size(), "output count changed for {}", n->label());
    for (size_t i = 0; i < outs.size(); ++i) n->outputs[i]->type = outs[i];
  }
}

void specialize_inputs(Graph& g, const std::vector<Shape>& shapes) {
  SPORE_CHECK(shapes.size() == g.inputs().size(), ErrorCode::invalid_argument, "graph '{}' takes {} inputs, got {}", g.name(),
              g.inputs().size(), shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    Value* v = g.inputs()[i];
    SPORE_CHECK(static_cast<int>(shapes[i].size()) == v->type.rank(), ErrorCode::shape_mismatch,
                "input %{}: expected rank {} ({}), got shape {}", v->name, v->type.rank(), v->type.str(), shape_str(shapes[i]));
    for (int d = 0; d < v->type.rank(); ++d) {
      const Dim& dim = v->type.dims[d];
      SPORE_CHECK(!dim.is_static() || dim.size == shapes[i][d], ErrorCode::shape_mismatch,
                  "input %{}: expected {}, got shape {}", v->name, v->type.str(), shape_str(shapes[i]));
    }
    v->type = TensorType::of(v->type.dtype, shapes[i]);
  }
  reinfer_types(g);
}

}  // namespace spore
