#include <algorithm>
#include <unordered_set>

#include "ir/graph.h"

namespace spore {

void verify_structure(const Graph& g) {
  std::unordered_set<const Value*> defined;
  for (const Node* n : g.nodes()) {
    SPORE_CHECK(!n->dead, ErrorCode::internal, "[verify] dead node {} still in the order", n->label());
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Value* v = n->inputs[i];
      SPORE_CHECK(v != nullptr, ErrorCode::invalid_argument, "[verify] node {}: input {} is null", n->label(), i);
      SPORE_CHECK(defined.count(v), ErrorCode::invalid_argument,
                  "[verify] node {}: input {} (%{}) is used before it is defined", n->label(), i, v->name);
      const bool listed = std::any_of(v->uses.begin(), v->uses.end(),
                                      [&](const Use& u) { return u.user == n && u.index == static_cast<int>(i); });
      SPORE_CHECK(listed, ErrorCode::internal, "[verify] node {}: input {} missing from %{}'s use-list", n->label(), i, v->name);
    }
    if (n->op == "input"_op || n->op == "constant"_op) {
      SPORE_CHECK(n->inputs.empty(), ErrorCode::invalid_argument, "[verify] node {} must have no inputs", n->label());
    }
    if (n->op == "constant"_op) {
      SPORE_CHECK(n->payload.defined(), ErrorCode::invalid_argument, "[verify] constant {} has no data", n->label());
      SPORE_CHECK(TensorType::of(n->payload.dtype(), n->payload.shape()) == n->outputs[0]->type, ErrorCode::invalid_argument,
                  "[verify] constant {}: data is {}{} but the type says {}", n->label(), dtype_name(n->payload.dtype()),
                  shape_str(n->payload.shape()), n->outputs[0]->type.str());
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      const Value* v = n->outputs[i];
      SPORE_CHECK(v->producer == n && v->output_index == static_cast<int>(i), ErrorCode::internal,
                  "[verify] node {}: output {} has a wrong producer link", n->label(), i);
      for (const Use& u : v->uses) {
        SPORE_CHECK(!u.user->dead && u.index < static_cast<int>(u.user->inputs.size()) && u.user->inputs[u.index] == v,
                    ErrorCode::internal, "[verify] %{} has a stale use", v->name);
      }
      for (const Dim& d : v->type.dims) {
        SPORE_CHECK(!d.is_static() || d.size >= 0, ErrorCode::invalid_argument, "[verify] node {}: negative dim in {}",
                    n->label(), v->type.str());
      }
      defined.insert(v);
    }
  }
  for (const Value* v : g.outputs()) {
    SPORE_CHECK(v && defined.count(v), ErrorCode::invalid_argument, "[verify] graph output %{} is not defined by a live node",
                v ? v->name : "<null>");
  }
}

}  // namespace spore
