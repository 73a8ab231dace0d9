#pragma once
// Op-aware graph utilities: building nodes with inferred types, full verification, re-inference.
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/registry.h"

namespace spore {

// Normalizes attrs against the op's schema, infers output types and appends the node.
Node* build_node(Graph& g, OpId op, std::vector<Value*> inputs, const Attrs& attrs, std::string name = "");
// verify_structure plus, for every node: a known op, valid attributes, and output types equal to
// what inference gives. Errors name the node.
void verify_graph(const Graph& g);
// Re-runs inference over the graph in order (after input types changed, e.g. symbolic dims bound).
void reinfer_types(Graph& g);
// Binds symbolic dims of the graph inputs to the given static shapes and re-infers every type.
void specialize_inputs(Graph& g, const std::vector<Shape>& shapes);

}  // namespace spore
