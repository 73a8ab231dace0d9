#pragma once
// The SSA graph. The Graph owns every Node and Value in arenas (stable addresses, no shared_ptr
// webs); values keep use-lists; nodes are kept in a topological order.
//
//   Graph g("main");
//   Value* x = g.add_input(TensorType(DType::f32, {Dim::symbol("batch"), 3}), "x");
//   Node* n = g.add_node("relu"_op, {x}, {}, {x->type}, "act");   // types usually come from ops::infer
//   g.set_outputs({n->output(0)});
//   verify(g);  print_graph(g);
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_set>
#include <string>
#include <vector>

#include "base/attrs.h"
#include "ir/op_id.h"
#include "ir/type.h"
#include "tensor/tensor.h"

namespace spore {

struct Node;

struct Use {
  Node* user;
  int index;  // which input of `user`
};

struct Value {
  int64_t id = 0;
  std::string name;  // unique within the graph (the printer's %name)
  TensorType type;
  Node* producer = nullptr;
  int output_index = 0;
  std::vector<Use> uses;
  int64_t arena_offset = -1;  // written by the memory-planning pass; -1 = not planned
};

struct Node {
  int64_t id = 0;
  OpId op = "identity"_op;
  std::string name;  // user-facing node name (import names, layer names); may be empty
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  Attrs attrs;
  Tensor payload;  // the data of a `constant` node
  bool dead = false;

  Value* input(int i) const { return inputs.at(i); }
  Value* output(int i = 0) const { return outputs.at(i); }
  // The graph's own structure (add_input, add_constant): a graph input, a constant holding `payload`.
  bool is_input() const { return op == "input"_op; }
  bool is_constant() const { return op == "constant"_op; }
  // "relu 'act' (%3)" for error messages.
  std::string label() const;
};

class Graph {
 public:
  explicit Graph(std::string name = "main") : name_(std::move(name)) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }

  Value* add_input(TensorType type, std::string name = "");
  Value* add_constant(Tensor value, std::string name = "");
  // Appends a node (it must come after its inputs' producers; call topo_sort() after out-of-order edits).
  Node* add_node(OpId op, std::vector<Value*> inputs, Attrs attrs, std::vector<TensorType> out_types,
                 std::string name = "");
  void set_outputs(std::vector<Value*> outs);

  void set_input(Node* n, int index, Value* v);  // keeps use-lists right
  // Gives a value a new unique name; throws invalid_argument if the name is taken.
  void rename_value(Value* v, std::string name);
  // `base` if no value (live or erased: erased values keep their names) has it, else the first free base_1,
  // base_2, ...; reserves nothing, so pass it to rename_value or a builder straight away.
  std::string fresh_name(const std::string& base) const;
  // Whether a value (live or erased: erased values keep their names) is called `name`.
  bool name_taken(const std::string& name) const { return names_in_use_.count(name) != 0; }
  void replace_all_uses(Value* from, Value* to);  // including graph outputs
  // Removes a node whose outputs have no uses (and are not graph outputs).
  void erase_node(Node* n);
  // Restores a topological order after rewrites (stable: keeps the existing order where it can).
  void topo_sort();

  // Live nodes in order (input nodes first, in declaration order).
  const std::vector<Node*>& nodes() const;
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  bool is_output(const Value* v) const;
  Value* find_value(std::string_view name) const;
  size_t num_live_nodes() const { return nodes().size(); }

  // Deep copy; `map` (optional) receives old->new value mapping by value id.
  std::unique_ptr<Graph> clone() const;

 private:
  Value* new_value(TensorType type, std::string name);
  std::string unique_name(std::string base);

  std::string name_;
  std::deque<Node> node_arena_;
  std::deque<Value> value_arena_;
  mutable std::vector<Node*> order_;
  mutable bool order_dirty_ = false;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::unordered_set<std::string> names_in_use_;
  int64_t next_value_id_ = 0;
  int64_t next_node_id_ = 0;
};

// Structural checks (SSA, def-before-use, use-lists, types present). Errors name the node.
// ops::verify_graph adds op-level checks (arity, attrs, inferred types).
void verify_structure(const Graph& g);

// Text IR; print -> parse -> print is the identity (with default options).
struct PrintOptions {
  // Constants larger than this print as `elided<N bytes>` (for reading, not re-parsing); -1 = all data.
  int64_t max_constant_bytes = -1;
  // When set, constants print as `= tensor<K>` instead of their bytes and the printer appends each
  // constant node here, K being its position: containers (.spore) store the data outside the text.
  std::vector<const Node*>* external_constants = nullptr;
};
struct ParseOptions {
  // The data of `= tensor<K>` constants: K indexes this span, whose tensor must have the constant's
  // dtype and shape and be contiguous (the constant then shares its storage). Empty: `tensor<K>` is an error.
  std::span<const Tensor> external_constants;
};
std::string print_graph(const Graph& g, const PrintOptions& opts = {});
std::unique_ptr<Graph> parse_graph(std::string_view text, std::string_view source_name = "<text>",
                                   const ParseOptions& opts = {});
// Graphviz DOT.
std::string graph_to_dot(const Graph& g);

}  // namespace spore
