// Rematerialization (PassOptions::recompute): trade a few cheap kernels for activation memory.
//
// In a training graph the forward's activations stay live until the backward reads them. When an activation
// comes from a cheap elementwise node (relu, sigmoid, tanh, gelu, silu, a cast, an add/mul with a constant...)
// whose inputs are live at the activation's late uses anyway (graph inputs, constants, or values the backward
// reads later still, such as relu's input that its gradient reads), the node is cloned right before the first
// late use and the late uses read the clone: the original dies after its early uses. The clone is the same op
// with the same attributes on the same input values, so it runs the same kernel on the same bytes and gives
// the same bits as the original (graph mode stays bit-identical to PyNative).
//
// A value's uses are split where the schedule has the widest gap between them (from its definition on);
// only gaps of at least kMinGap nodes are worth a kernel, and values under kMinBytes are left alone.
//
// What it finds depends on the schedule: e.g. once fold_constants has re-sorted a training graph, relu's
// backward mask gt(x, 0) is computed during the forward (it depends on nothing folded), so x dies there and
// the relu output has no live input left to be recomputed from; the mask (1 byte per element) already is the
// cheaper thing to keep.
//
// The graph keeps nodes in schedule order and topo_sort() would put a clone (new, so last in that order)
// after unrelated ready nodes rather than right before its user; so the pass rebuilds the schedule from the
// first insertion point on, appending the nodes again in the wanted order (same ops, names and attributes).
#include <algorithm>
#include <map>
#include <unordered_map>

#include "ops/registry.h"
#include "passes/pass.h"

namespace spore {
namespace {

constexpr size_t kMinGap = 4;        // nodes between the early and the late uses
constexpr int64_t kMinBytes = 1024;  // smaller values are not worth an extra kernel

bool cheap(const Node* n) {
  if (n->outputs.size() != 1 || n->inputs.empty()) return false;
  if (n->op == "fused_elementwise"_op) return true;
  const OpDef* d = op_registry().find(n->op);
  if (d == nullptr) return false;
  if (d->traits.has(Trait::random) || d->traits.has(Trait::nondeterministic) || d->traits.has(Trait::graph_structure))
    return false;
  if (!d->traits.has(Trait::elementwise) && !d->traits.has(Trait::broadcast)) return false;
  return d->fusion == FusionKind::elementwise || d->fusion == FusionKind::broadcast;
}

int64_t bytes_of(const Value* v) { return std::max<int64_t>(v->type.numel(), 1) * static_cast<int64_t>(dtype_size(v->type.dtype)); }

struct Remat {
  Node* src;
  size_t at;              // schedule position of the first late use: the clone goes right before it
  std::vector<Use> late;  // the uses that will read the clone
};

class RematerializePass final : public Pass {
 public:
  std::string name() const override { return "rematerialize"; }

  bool run(Graph& g, const PassOptions& opts) override {
    if (!opts.recompute) return false;
    const std::vector<Node*> order = g.nodes();
    std::unordered_map<const Node*, size_t> pos;
    for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
    auto last_use = [&](const Value* v) {
      size_t last = pos.at(v->producer);
      for (const Use& u : v->uses) last = std::max(last, pos.at(u.user));
      return last;
    };
    auto always_live = [&](const Value* v) {
      const OpDef* d = op_registry().find(v->producer->op);
      return d != nullptr && d->traits.has(Trait::graph_structure);
    };

    std::vector<Remat> todo;
    for (Node* n : order) {
      Value* v = n->outputs[0];
      if (!cheap(n) || v->uses.empty() || g.is_output(v) || !v->type.is_static() || bytes_of(v) < kMinBytes) continue;
      std::vector<Use> uses = v->uses;
      std::sort(uses.begin(), uses.end(), [&](const Use& a, const Use& b) { return pos.at(a.user) < pos.at(b.user); });
      // The widest gap in def, use_1, ..., use_k.
      size_t prev = pos.at(n), best_gap = 0, split = 0;
      for (size_t i = 0; i < uses.size(); ++i) {
        const size_t p = pos.at(uses[i].user);
        if (p - prev > best_gap) best_gap = p - prev, split = i;
        prev = p;
      }
      if (best_gap < kMinGap) continue;
      const size_t at = pos.at(uses[split].user);
      bool inputs_live = true;
      for (const Value* in : n->inputs) inputs_live &= always_live(in) || last_use(in) >= at;
      if (!inputs_live) continue;
      todo.push_back({n, at, std::vector<Use>(uses.begin() + static_cast<std::ptrdiff_t>(split), uses.end())});
    }
    if (todo.empty()) return false;
    rebuild(g, order, todo);
    return true;
  }

 private:
  // Appends, from the first insertion point on, each node again (clones right before their first late use),
  // then moves the uses over and erases the old nodes.
  static void rebuild(Graph& g, const std::vector<Node*>& order, const std::vector<Remat>& todo) {
    std::multimap<size_t, const Remat*> before;
    size_t first = order.size();
    for (const Remat& r : todo) {
      before.emplace(r.at, &r);
      first = std::min(first, r.at);
    }
    std::unordered_map<const Value*, Value*> repl;
    std::map<std::pair<const Node*, int>, Value*> late_input;  // (old user, input index) -> clone output
    auto mapped = [&](Value* v) {
      auto it = repl.find(v);
      return it == repl.end() ? v : it->second;
    };
    auto types_of = [](const Node* n) {
      std::vector<TensorType> t;
      for (const Value* v : n->outputs) t.push_back(v->type);
      return t;
    };
    std::vector<Node*> old_nodes;
    for (size_t i = first; i < order.size(); ++i) {
      auto [lo, hi] = before.equal_range(i);
      for (auto it = lo; it != hi; ++it) {
        const Remat& r = *it->second;
        std::vector<Value*> ins;
        for (Value* v : r.src->inputs) ins.push_back(mapped(v));
        Node* c = g.add_node(r.src->op, std::move(ins), r.src->attrs, types_of(r.src), r.src->name);
        const std::string clone_name = r.src->outputs[0]->name + ".remat";
        if (g.find_value(clone_name) == nullptr) g.rename_value(c->outputs[0], clone_name);
        for (const Use& u : r.late) late_input[{u.user, u.index}] = c->outputs[0];
      }
      Node* n = order[i];
      const OpDef* d = op_registry().find(n->op);
      if (d != nullptr && d->traits.has(Trait::graph_structure)) continue;  // inputs/constants stay where they are
      std::vector<Value*> ins;
      for (size_t k = 0; k < n->inputs.size(); ++k) {
        auto it = late_input.find({n, static_cast<int>(k)});
        ins.push_back(it != late_input.end() ? it->second : mapped(n->inputs[k]));
      }
      // The new node takes over the old values' names (the old ones move to temporary names first).
      std::vector<std::string> names;
      for (Value* v : n->outputs) {
        names.push_back(v->name);
        g.rename_value(v, fmt::format("{}.pre_remat{}", v->name, v->id));
      }
      Node* m = g.add_node(n->op, std::move(ins), n->attrs, types_of(n), n->name);
      m->payload = n->payload;
      for (size_t k = 0; k < n->outputs.size(); ++k) {
        repl[n->outputs[k]] = m->outputs[k];
        g.rename_value(m->outputs[k], names[k]);
      }
      old_nodes.push_back(n);
    }
    for (Node* n : old_nodes)
      for (Value* v : n->outputs) g.replace_all_uses(v, repl.at(v));
    for (auto it = old_nodes.rbegin(); it != old_nodes.rend(); ++it) g.erase_node(*it);
    // Originals whose every use moved to the clone (the uses were all late) are dead now.
    for (const Remat& r : todo) {
      Value* orig = mapped(r.src->outputs[0]);
      if (orig->uses.empty() && !g.is_output(orig)) g.erase_node(orig->producer);
    }
  }
};

}  // namespace

std::unique_ptr<Pass> make_rematerialize_pass() { return std::make_unique<RematerializePass>(); }

}  // namespace spore
