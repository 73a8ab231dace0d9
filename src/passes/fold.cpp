// Constant folding: a node whose inputs are all constants (and that is not random) is evaluated once
// at compile time with the same kernels as eager mode and replaced by a constant. Outputs larger than
// a cap are left alone, so folding never bloats a model (e.g. a broadcast of a scalar to a big shape).
#include "ops/dispatch.h"
#include "ops/registry.h"
#include "passes/pass.h"

namespace spore {
namespace {
constexpr int64_t fold_max_elements = 1 << 20;

class FoldPass final : public Pass {
 public:
  std::string name() const override { return "fold_constants"; }
  bool run(Graph& g, const PassOptions& opts) override {
    bool changed = false;
    for (Node* n : std::vector<Node*>(g.nodes())) {
      if (n->dead) continue;
      const OpDef& def = op_registry().get(n->op);
      if (def.traits.has(Trait::graph_structure) || def.traits.has(Trait::random)) continue;
      bool all_const = true;
      for (Value* v : n->inputs) all_const &= v->producer->is_constant();
      if (!all_const) continue;
      bool small = true;
      for (Value* v : n->outputs) small &= v->type.is_static() && v->type.numel() <= fold_max_elements;
      if (!small) continue;
      if (opts.fold_keeps_size) {
        int64_t in_bytes = 0, out_bytes = 0;
        for (Value* v : n->inputs) in_bytes += v->type.numel() * static_cast<int64_t>(dtype_size(v->type.dtype));
        for (Value* v : n->outputs) out_bytes += v->type.numel() * static_cast<int64_t>(dtype_size(v->type.dtype));
        if (out_bytes > in_bytes) continue;
      }
      std::vector<Tensor> ins;
      for (Value* v : n->inputs) ins.push_back(v->producer->payload);
      std::vector<Tensor> outs = ops::call(n->op, ins, n->attrs);
      for (size_t i = 0; i < outs.size(); ++i) {
        Value* c = g.add_constant(outs[i].contiguous(), "");
        g.replace_all_uses(n->outputs[i], c);
      }
      g.erase_node(n);
      changed = true;
    }
    if (changed) g.topo_sort();
    return changed;
  }
};
}  // namespace

std::unique_ptr<Pass> make_fold_constants_pass() { return std::make_unique<FoldPass>(); }

}  // namespace spore
