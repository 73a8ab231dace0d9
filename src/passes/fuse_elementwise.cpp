// Elementwise-chain fusion: a connected group of elementwise/broadcast nodes (chain or tree) becomes one
// fused_elementwise node that reads each group input once and writes the group's output once.
//
// Groups grow from a root (visited in reverse order) towards producers: a producer joins when its op is
// elementwise or broadcast (OpDef traits) and one the fused kernel computes, its dtype is f32 (the cpu
// kernel's; plans are lowered before passes run, so a fused node must have a kernel), and every use of its
// output is inside the group, or else (an extra output) its type equals the root's. A group whose extra
// output feeds back into it through other nodes would become a cycle; it is regrown without that one.
// The fused node takes over the root's node name and every escaping value's name. Groups of one node stay.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ops/fused_elementwise.h"
#include "ops/graph_ops.h"
#include "ops/registry.h"
#include "passes/pass.h"

namespace spore {
namespace {

bool fusable(const Node* n) {
  if (n->dead || n->outputs.size() != 1 || fused::fusable_arity(n->op) == 0) return false;
  const OpDef* d = op_registry().find(n->op);
  if (d == nullptr || (d->fusion != FusionKind::elementwise && d->fusion != FusionKind::broadcast)) return false;
  if (n->output()->type.dtype != DType::f32) return false;
  for (const Value* v : n->inputs)
    if (v->type.dtype != DType::f32) return false;
  return true;
}

class FuseElementwisePass final : public Pass {
 public:
  std::string name() const override { return "fuse_elementwise"; }
  int min_opt_level() const override { return 1; }

  bool run(Graph& g, const PassOptions&) override {
    const std::vector<Node*> order = g.nodes();
    std::unordered_map<const Node*, size_t> pos;
    for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
    std::unordered_set<const Node*> taken;
    bool changed = false;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* root = *it;
      if (taken.count(root) || !fusable(root)) continue;
      // An extra output that closes a cycle is banned (the farthest from the root first) and the group regrown.
      std::unordered_set<const Node*> banned;
      Group grp = grow(g, root, taken, banned);
      while (!grp.extra.empty() && has_cycle(grp)) {
        banned.insert(grp.extra.back());
        grp = grow(g, root, taken, banned);
      }
      if (grp.members.size() < 2) continue;
      for (const Node* m : grp.members) taken.insert(m);
      fuse(g, root, grp, pos);
      changed = true;
    }
    if (changed) g.topo_sort();
    return changed;
  }

 private:
  struct Group {
    std::unordered_set<const Node*> set;
    std::vector<Node*> members;
    std::vector<Node*> extra;  // members whose value is also used outside the group: extra outputs
  };

  // Grows a group from `root` towards producers to a fixed point (a producer may become eligible once all
  // of its users have joined). A producer whose value is also used outside the group (or is a graph output)
  // joins as an extra output when its type equals the root's and it is not `banned`.
  static Group grow(const Graph& g, Node* root, const std::unordered_set<const Node*>& taken,
                    const std::unordered_set<const Node*>& banned) {
    Group grp;
    grp.set.insert(root);
    grp.members.push_back(root);
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t m = 0; m < grp.members.size(); ++m) {
        for (const Value* v : grp.members[m]->inputs) {
          Node* p = v->producer;
          if (p == nullptr || grp.set.count(p) || taken.count(p) || !fusable(p)) continue;
          const bool inside = !g.is_output(v) && std::all_of(v->uses.begin(), v->uses.end(), [&](const Use& u) {
            return grp.set.count(u.user) != 0;
          });
          const bool extra = !inside && !banned.count(p) && v->type == root->output()->type;
          if (!inside && !extra) continue;
          grp.set.insert(p);
          grp.members.push_back(p);
          grew = true;
        }
      }
    }
    // Extra outputs by the final group (a value may have looked escaping before its other users joined).
    for (Node* m : grp.members) {
      const Value* v = m->output();
      if (m != root && (g.is_output(v) || std::any_of(v->uses.begin(), v->uses.end(),
                                                      [&](const Use& u) { return grp.set.count(u.user) == 0; })))
        grp.extra.push_back(m);
    }
    return grp;
  }

  // An extra output may reach back into the group through outside nodes (x -> outside -> group input):
  // contracting the group would then make a cycle. Walks backwards from the group's inputs.
  static bool has_cycle(const Group& grp) {
    std::vector<const Node*> stack;
    std::unordered_set<const Node*> seen;
    for (const Node* m : grp.members)
      for (const Value* v : m->inputs)
        if (v->producer && !grp.set.count(v->producer)) stack.push_back(v->producer);
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (grp.set.count(n)) return true;
      if (!seen.insert(n).second) continue;
      for (const Value* v : n->inputs)
        if (v->producer) stack.push_back(v->producer);
    }
    return false;
  }

  static void fuse(Graph& g, Node* root, const Group& grp, const std::unordered_map<const Node*, size_t>& pos) {
    std::vector<Node*> members = grp.members;
    std::sort(members.begin(), members.end(), [&](const Node* a, const Node* b) { return pos.at(a) < pos.at(b); });
    // Slots: external inputs first (in order of first use), then one per member.
    std::vector<Value*> inputs;
    std::unordered_map<const Value*, int> slot;
    for (const Node* m : members)
      for (Value* v : m->inputs)
        if (!slot.count(v) && !grp.set.count(v->producer)) {
          slot[v] = static_cast<int>(inputs.size());
          inputs.push_back(v);
        }
    std::vector<int64_t> program;
    std::vector<double> params;
    for (size_t j = 0; j < members.size(); ++j) {
      const Node* m = members[j];
      program.push_back(static_cast<int64_t>(m->op));
      for (int a = 0; a < 3; ++a) program.push_back(a < static_cast<int>(m->inputs.size()) ? slot.at(m->inputs[a]) : -1);
      double p0 = 0, p1 = 0;
      fused::encode_params(m->op, m->attrs, p0, p1);
      params.push_back(p0);
      params.push_back(p1);
      slot[m->output()] = static_cast<int>(inputs.size() + j);
    }
    // Output 0 is the root's value, then the extra outputs in program order.
    std::vector<Value*> escaping{root->output()};
    for (const Node* m : members)
      if (std::find(grp.extra.begin(), grp.extra.end(), m) != grp.extra.end()) escaping.push_back(m->output());
    std::vector<int64_t> results;
    for (const Value* v : escaping) results.push_back(slot.at(v));
    Attrs attrs{{"program", program}, {"params", params}, {"results", results}};
    Node* f = build_node(g, "fused_elementwise"_op, inputs, attrs, root->name);
    for (size_t k = 0; k < escaping.size(); ++k) g.replace_all_uses(escaping[k], f->output(static_cast<int>(k)));
    for (auto it = members.rbegin(); it != members.rend(); ++it) g.erase_node(*it);
    for (size_t k = 0; k < escaping.size(); ++k) {
      Value* old = escaping[k];
      const std::string value_name = old->name;
      if (value_name.empty()) continue;
      // Erased values keep their names reserved: move the old one aside first.
      g.rename_value(old, fmt::format("{}.unfused{}", value_name, old->id));
      g.rename_value(f->output(static_cast<int>(k)), value_name);
    }
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_elementwise_pass() { return std::make_unique<FuseElementwisePass>(); }

}  // namespace spore
