#pragma once
// Op-aware graph utilities: building nodes with inferred types, full verification, re-inference.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ops/registry.h"

namespace spore {

// Normalizes attrs against the op's schema, infers output types and appends the node.
Node* build_node(Graph& g, OpId op, std::vector<Value*> inputs, const Attrs& attrs, std::string name = "");
// For rewrites that try a replacement: like build_node, but nullptr (and nothing added) where the op rejects these
// inputs or attributes (a shape, dtype or attribute error from its inference). Other errors (internal, out of
// memory) propagate.
Node* try_build_node(Graph& g, OpId op, std::vector<Value*> inputs, const Attrs& attrs, std::string name = "");
// The output types the op infers for these input types, or nullopt where it rejects them (as try_build_node).
std::optional<std::vector<TensorType>> try_infer_types(const OpDef& def, std::span<const TensorType> inputs,
                                                       const Attrs& normalized, std::string_view where);
// verify_structure plus, for every node: a known op, valid attributes, and output types equal to
// what inference gives. Errors name the node.
void verify_graph(const Graph& g);
// Re-runs inference over the graph in order (after input types changed, e.g. symbolic dims bound).
void reinfer_types(Graph& g);
// Binds symbolic dims of the graph inputs to the given static shapes and re-infers every type.
void specialize_inputs(Graph& g, const std::vector<Shape>& shapes);

}  // namespace spore
