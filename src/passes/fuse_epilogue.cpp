// Epilogue fusion: conv2d / linear -> [add(residual)] -> [activation] (-> [max_pool2d 2x2/2] after a conv2d)
// becomes one conv2d_fused / linear_fused node (ops/fused.h), whose kernel applies the add and the activation to the output while it is
// still in cache and without the intermediate buffers; the kernels give the unfused ops' bits exactly.
//
// A step is absorbed only when the value it consumes has exactly one use and is not a graph output, so a
// training graph whose backward reads the conv output (or the pre-activation sum) keeps its nodes. The
// residual must have the output's exact type (a broadcast add is left alone). The add may take the conv
// output as either operand: float addition is commutative. The fused value keeps the name of the last
// absorbed node's output, the node keeps the base node's name.
//
// Not done, on purpose: folding a following add of a per-channel constant into a conv without bias. The conv
// kernels start their sums at the bias (the direct AVX2 path) or add it in their own order, so the bits
// would differ from conv-then-add.
#include "ops/fused.h"
#include "ops/graph_ops.h"
#include "passes/pass.h"

namespace spore {
namespace {

bool single_use(const Graph& g, const Value* v) { return v->uses.size() == 1 && !g.is_output(v); }

bool same_type(const TensorType& a, const TensorType& b) { return a == b; }

// max_pool2d that conv2d_fused's pool="max2x2" computes: 2x2 windows, stride 2, no padding or dilation, floor.
bool is_max_pool_2x2(const Node& n) {
  if (n.op != "max_pool2d"_op || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  using V = std::vector<int64_t>;
  const Attrs& a = n.attrs;  // absent attributes have max_pool2d's defaults
  const auto ints = [&](const char* k, const V& def) { return a.find(k) ? a.ints(k) : def; };
  const V stride = ints("stride", {});
  const std::string pad_mode = a.find("pad_mode") ? a.s("pad_mode") : "pad";
  return ints("kernel", {2, 2}) == V{2, 2} && (stride.empty() || stride == V{2, 2}) &&
         ints("padding", {0, 0, 0, 0}) == V{0, 0, 0, 0} && ints("dilation", {1, 1}) == V{1, 1} &&
         !(a.find("ceil_mode") && a.b("ceil_mode")) && (pad_mode == "pad" || pad_mode == "valid");
}

class FuseEpiloguePass final : public Pass {
 public:
  std::string name() const override { return "fuse_epilogue"; }
  int min_opt_level() const override { return 1; }

  bool run(Graph& g, const PassOptions&) override {
    bool changed = false;
    for (Node* n : std::vector<Node*>(g.nodes())) {
      if (n->dead) continue;
      const auto fop = fused::fused_op_of(n->op);
      if (!fop || n->outputs.size() != 1) continue;
      Value* cur = n->output(0);
      Node* add = nullptr;
      Node* act = nullptr;
      Value* residual = nullptr;
      if (single_use(g, cur)) {
        Node* u = cur->uses[0].user;
        if (u->op == "add"_op && u->inputs.size() == 2 && u->inputs[0] != u->inputs[1]) {
          Value* other = u->inputs[u->inputs[0] == cur ? 1 : 0];
          if (same_type(other->type, cur->type) && same_type(u->output(0)->type, cur->type)) {
            add = u;
            residual = other;
            cur = u->output(0);
          }
        }
      }
      if (single_use(g, cur)) {
        Node* u = cur->uses[0].user;
        if (fused::activation_name(u->op) && u->inputs.size() == 1 && same_type(u->output(0)->type, cur->type)) {
          act = u;
          cur = u->output(0);
        }
      }
      Node* pool = nullptr;
      if (n->op == "conv2d"_op && single_use(g, cur) && is_max_pool_2x2(*cur->uses[0].user)) {
        pool = cur->uses[0].user;
        cur = pool->output(0);
      }
      if (!add && !act && !pool) continue;
      Attrs a = n->attrs;
      a.set("activation", std::string(act ? *fused::activation_name(act->op) : "none"));
      if (act)
        for (const auto& [k, v] : act->attrs.items()) a.set(k, v);
      a.set("residual", residual != nullptr);
      if (n->op == "conv2d"_op) a.set("pool", std::string(pool ? "max2x2" : "none"));
      std::vector<Value*> ins = n->inputs;
      if (residual) ins.push_back(residual);
      Node* f = build_node(g, *fop, std::move(ins), a, n->name);
      const std::string keep = cur->name;
      g.replace_all_uses(cur, f->output(0));
      if (pool) g.erase_node(pool);
      if (act) g.erase_node(act);
      if (add) g.erase_node(add);
      g.erase_node(n);
      if (!keep.empty()) {
        g.rename_value(cur, fmt::format("{}.unfused{}", keep, cur->id));  // frees the name
        g.rename_value(f->output(0), keep);
      }
      changed = true;
    }
    if (changed) g.topo_sort();
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_epilogue_pass() { return std::make_unique<FuseEpiloguePass>(); }

}  // namespace spore
