#include "ir/graph.h"

#include <algorithm>
#include <unordered_map>

namespace spore {

std::string Node::label() const {
  std::string s(op_name(op));
  if (!name.empty()) s += " '" + name + "'";
  if (!outputs.empty()) s += " (%" + outputs[0]->name + ")";
  return s;
}

std::string Graph::unique_name(std::string base) {
  if (base.empty()) base = std::to_string(next_value_id_);
  std::string name = base;
  for (int k = 1; names_in_use_.count(name); ++k) name = base + "_" + std::to_string(k);
  names_in_use_.insert(name);
  return name;
}

std::string Graph::fresh_name(const std::string& base) const {
  std::string name = base;
  for (int k = 1; name.empty() || names_in_use_.count(name); ++k) name = base + "_" + std::to_string(k);
  return name;
}

Value* Graph::new_value(TensorType type, std::string name) {
  Value& v = value_arena_.emplace_back();
  v.id = next_value_id_;
  v.type = std::move(type);
  v.name = unique_name(std::move(name));  // an unnamed value is named after its id
  ++next_value_id_;
  return &v;
}

Value* Graph::add_input(TensorType type, std::string name) {
  Node* n = add_node("input"_op, {}, {}, {std::move(type)}, name);
  Value* v = n->outputs[0];
  if (!name.empty() && v->name != name) SPORE_FAIL(ErrorCode::invalid_argument, "duplicate graph input name '{}'", name);
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_constant(Tensor value, std::string name) {
  SPORE_CHECK(value.defined() && !value.is_symbolic(), ErrorCode::invalid_argument, "constant needs concrete data");
  Node* n = add_node("constant"_op, {}, {}, {TensorType::of(value.dtype(), value.shape())}, std::move(name));
  n->payload = value.contiguous();
  return n->outputs[0];
}

Node* Graph::add_node(OpId op, std::vector<Value*> inputs, Attrs attrs, std::vector<TensorType> out_types,
                      std::string name) {
  Node& n = node_arena_.emplace_back();
  n.id = next_node_id_++;
  n.op = op;
  n.attrs = std::move(attrs);
  n.inputs = std::move(inputs);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    SPORE_ASSERT(n.inputs[i] != nullptr, "null input {} to {}", i, op_name(op));
    n.inputs[i]->uses.push_back({&n, static_cast<int>(i)});
  }
  for (size_t i = 0; i < out_types.size(); ++i) {
    std::string vname = name.empty() ? "" : (out_types.size() == 1 ? name : name + "." + std::to_string(i));
    Value* v = new_value(std::move(out_types[i]), vname);
    v->producer = &n;
    v->output_index = static_cast<int>(i);
    n.outputs.push_back(v);
  }
  n.name = std::move(name);
  order_.push_back(&n);
  return &n;
}

void Graph::rename_value(Value* v, std::string name) {
  if (v->name == name) return;
  SPORE_CHECK(!name.empty() && !names_in_use_.count(name), ErrorCode::invalid_argument, "value name '%{}' is already used", name);
  names_in_use_.erase(v->name);
  v->name = std::move(name);
  names_in_use_.insert(v->name);
}

void Graph::set_outputs(std::vector<Value*> outs) { outputs_ = std::move(outs); }

void Graph::set_input(Node* n, int index, Value* v) {
  Value* old = n->inputs.at(index);
  auto& u = old->uses;
  u.erase(std::find_if(u.begin(), u.end(), [&](const Use& x) { return x.user == n && x.index == index; }));
  n->inputs[index] = v;
  v->uses.push_back({n, index});
}

void Graph::replace_all_uses(Value* from, Value* to) {
  if (from == to) return;
  std::vector<Use> uses = from->uses;
  for (const Use& u : uses) set_input(u.user, u.index, to);
  for (auto& o : outputs_) if (o == from) o = to;
  order_dirty_ = true;  // `to` may have been created after some users
}

bool Graph::is_output(const Value* v) const { return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end(); }

void Graph::erase_node(Node* n) {
  for (Value* o : n->outputs) {
    SPORE_ASSERT(o->uses.empty() && !is_output(o), "erasing node {} whose output %{} is still used", n->label(), o->name);
  }
  for (size_t i = 0; i < n->inputs.size(); ++i) {
    auto& u = n->inputs[i]->uses;
    u.erase(std::find_if(u.begin(), u.end(), [&](const Use& x) { return x.user == n && x.index == static_cast<int>(i); }));
  }
  n->inputs.clear();
  n->dead = true;
  if (n->op == "input"_op) inputs_.erase(std::remove(inputs_.begin(), inputs_.end(), n->outputs[0]), inputs_.end());
  order_dirty_ = true;
}

const std::vector<Node*>& Graph::nodes() const {
  if (order_dirty_) {
    std::erase_if(order_, [](Node* n) { return n->dead; });
    order_dirty_ = false;
  }
  return order_;
}

void Graph::topo_sort() {
  std::erase_if(order_, [](Node* n) { return n->dead; });
  // Kahn's algorithm seeded in current order; iterative (no recursion over user-sized graphs).
  std::unordered_map<const Node*, int> pending;
  std::unordered_map<const Node*, size_t> pos;
  for (size_t i = 0; i < order_.size(); ++i) {
    pos[order_[i]] = i;
    int deps = 0;
    for (Value* v : order_[i]->inputs) if (v->producer) ++deps;
    pending[order_[i]] = deps;
  }
  std::vector<Node*> ready, out;
  auto cmp = [&](Node* a, Node* b) { return pos[a] > pos[b]; };  // min-heap by old position
  for (Node* n : order_) if (pending[n] == 0) ready.push_back(n);
  std::make_heap(ready.begin(), ready.end(), cmp);
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), cmp);
    Node* n = ready.back();
    ready.pop_back();
    out.push_back(n);
    for (Value* v : n->outputs) {
      for (const Use& u : v->uses) {
        if (--pending[u.user] == 0) {
          ready.push_back(u.user);
          std::push_heap(ready.begin(), ready.end(), cmp);
        }
      }
    }
  }
  SPORE_CHECK(out.size() == order_.size(), ErrorCode::invalid_argument, "graph '{}' has a cycle", name_);
  order_ = std::move(out);
  order_dirty_ = false;
}

Value* Graph::find_value(std::string_view name) const {
  for (Node* n : nodes())
    for (Value* v : n->outputs)
      if (v->name == name) return v;
  return nullptr;
}

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>(name_);
  std::unordered_map<const Value*, Value*> map;
  for (Node* n : nodes()) {
    std::vector<Value*> ins;
    for (Value* v : n->inputs) ins.push_back(map.at(v));
    std::vector<TensorType> types;
    for (Value* v : n->outputs) types.push_back(v->type);
    Node* c = g->add_node(n->op, std::move(ins), n->attrs, std::move(types), n->name);
    c->payload = n->payload;
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      Value* nv = c->outputs[i];
      // keep the exact value names (they are unique in the source graph)
      g->names_in_use_.erase(nv->name);
      nv->name = n->outputs[i]->name;
      g->names_in_use_.insert(nv->name);
      nv->arena_offset = n->outputs[i]->arena_offset;
      map[n->outputs[i]] = nv;
    }
  }
  for (Value* v : inputs_) g->inputs_.push_back(map.at(v));
  for (Value* v : outputs_) g->outputs_.push_back(map.at(v));
  return g;
}

}  // namespace spore
