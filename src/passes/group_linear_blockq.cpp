// Sibling linear_blockq nodes -> one linear_blockq_multi (ops/llm_ops.h).
//
// A decoder layer projects the same normalized activations three times (Q, K, V) and the MLP input twice (gate,
// up). As separate nodes each prepares the activations (quantizes them to Q8_0 or rounds them to f16) and runs its
// own parallel region; in a one-token decode step the K/V projections are only ~100 KB of weights each, too short
// to keep two threads streaming, and every region ends with a wait. linear_blockq_multi prepares x once and runs
// all the weights' column tasks in one region. Its outputs are bit-identical to the separate nodes' (the same
// tiles run the same sequence per element), so the pass runs in training and inference graphs alike.
//
// Groups: linear_blockq nodes reading the same x value with the same format and either all with a bias or all
// without, in graph order, at most llm_ops::max_multi_weights per group. Each output keeps its value name.
//
// Then a SwiGLU: mul(silu(gate), up) over a grouped pair, with nothing else reading gate, silu(gate) or up, becomes
// the node with epilogue silu_mul: each task applies silu and the product to its region while it is in cache
// (unary_f32's silu and an f32 multiply: the bits of the fused_elementwise kernel it replaces). It runs before
// fuse_elementwise, which would otherwise take the silu and the mul.
#include <map>
#include <tuple>

#include "ops/graph_ops.h"
#include "ops/llm_ops.h"
#include "passes/pass.h"

namespace spore {
namespace {

class GroupLinearBlockqPass final : public Pass {
 public:
  std::string name() const override { return "group_linear_blockq"; }
  int min_opt_level() const override { return 1; }

  bool run(Graph& g, const PassOptions&) override {
    const OpId lin = "linear_blockq"_op;
    // (x, format, has bias) -> members in graph order.
    std::map<std::tuple<const Value*, std::string, bool>, std::vector<Node*>> groups;
    std::vector<std::tuple<const Value*, std::string, bool>> order;
    for (Node* n : g.nodes()) {
      if (n->dead || n->op != lin) continue;
      auto key = std::make_tuple(static_cast<const Value*>(n->input(0)), n->attrs.s("format"), n->inputs.size() > 2);
      auto [it, fresh] = groups.try_emplace(key);
      if (fresh) order.push_back(key);
      it->second.push_back(n);
    }
    bool changed = false;
    for (const auto& key : order) {
      const std::vector<Node*>& all = groups.at(key);
      for (size_t at = 0; at + 1 < all.size(); at += static_cast<size_t>(llm_ops::max_multi_weights)) {
        const size_t end = std::min(all.size(), at + static_cast<size_t>(llm_ops::max_multi_weights));
        if (end - at < 2) break;
        const std::vector<Node*> members(all.begin() + static_cast<std::ptrdiff_t>(at),
                                         all.begin() + static_cast<std::ptrdiff_t>(end));
        const bool bias = std::get<2>(key);
        std::vector<Value*> ins{members[0]->input(0)};
        for (Node* m : members) ins.push_back(m->input(1));
        if (bias)
          for (Node* m : members) ins.push_back(m->input(2));
        Attrs attrs;
        attrs.set("format", std::get<1>(key));
        attrs.set("count", static_cast<int64_t>(members.size()));
        std::string name;
        for (Node* m : members)
          if (!m->name.empty()) name += (name.empty() ? "" : "+") + m->name;
        Node* f = build_node(g, "linear_blockq_multi"_op, std::move(ins), attrs, name);
        for (size_t i = 0; i < members.size(); ++i) {
          Value* old = members[i]->output(0);
          Value* now = f->output(static_cast<int>(i));
          SPORE_ASSERT(old->type == now->type, "group_linear_blockq: output {} of {} changed type", i, f->label());
          const std::string keep = old->name;
          g.replace_all_uses(old, now);
          g.erase_node(members[i]);
          if (!keep.empty()) {
            g.rename_value(old, fmt::format("{}.grouped{}", keep, old->id));  // frees the name
            g.rename_value(now, keep);
          }
        }
        changed = true;
      }
    }
    if (changed) g.topo_sort();
    if (fuse_glu(g)) {
      changed = true;
      g.topo_sort();
    }
    return changed;
  }

 private:
  static bool single_use(const Graph& g, const Value* v) { return v->uses.size() == 1 && !g.is_output(v); }

  // mul(silu(y0), y1) (either operand order) over the two outputs of a count-2 linear_blockq_multi, each used only
  // there -> the same node with epilogue silu_mul and one output (the mul's).
  static bool fuse_glu(Graph& g) {
    bool changed = false;
    for (Node* mul : std::vector<Node*>(g.nodes())) {
      if (mul->dead || mul->op != "mul"_op || mul->inputs.size() != 2) continue;
      for (int side = 0; side < 2; ++side) {
        Value* a = mul->input(side);
        Value* b = mul->input(1 - side);
        Node* silu = a->producer;
        if (!silu || silu->op != "silu"_op || !single_use(g, a)) continue;
        Value* y0 = silu->input(0);
        Node* lin = y0->producer;
        if (!lin || lin->op != "linear_blockq_multi"_op || lin->attrs.i("count") != 2 ||
            !lin->attrs.s("epilogue").empty() || lin->outputs.size() != 2)
          continue;
        // The gate may be either output (a traced mul(silu(gate(h)), up(h)) may record up first): the fused node
        // takes the gate's weight (and bias) first.
        const int gi = y0 == lin->output(0) ? 0 : 1;
        if (y0 != lin->output(gi) || b != lin->output(1 - gi) || !single_use(g, y0) || !single_use(g, b)) continue;
        if (a->type != y0->type || b->type != y0->type || mul->output(0)->type != y0->type) continue;
        Attrs attrs = lin->attrs;
        attrs.set("epilogue", std::string("silu_mul"));
        std::vector<Value*> ins = lin->inputs;
        if (gi == 1) {
          std::swap(ins[1], ins[2]);
          if (ins.size() == 5) std::swap(ins[3], ins[4]);
        }
        Node* f = build_node(g, "linear_blockq_multi"_op, std::move(ins), attrs, lin->name);
        Value* out = mul->output(0);
        const std::string keep = out->name;
        g.replace_all_uses(out, f->output(0));
        g.erase_node(mul);
        g.erase_node(silu);
        g.erase_node(lin);
        if (!keep.empty()) {
          g.rename_value(out, fmt::format("{}.unfused{}", keep, out->id));
          g.rename_value(f->output(0), keep);
        }
        changed = true;
        break;
      }
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_group_linear_blockq_pass() { return std::make_unique<GroupLinearBlockqPass>(); }

}  // namespace spore
