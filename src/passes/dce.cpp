// Dead-code elimination: removes nodes whose outputs reach no graph output. Graph inputs stay
// (they are the signature) even when unused.
#include <unordered_set>

#include "passes/pass.h"

namespace spore {
namespace {
class DcePass final : public Pass {
 public:
  std::string name() const override { return "dce"; }
  bool run(Graph& g, const PassOptions&) override {
    std::unordered_set<const Node*> live;
    std::vector<const Node*> stack;
    for (const Value* v : g.outputs()) stack.push_back(v->producer);
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!live.insert(n).second) continue;
      for (const Value* v : n->inputs) stack.push_back(v->producer);
    }
    bool changed = false;
    const std::vector<Node*> order = g.nodes();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* n = *it;
      if (live.count(n) || n->is_input()) continue;
      g.erase_node(n);
      changed = true;
    }
    return changed;
  }
};
}  // namespace

std::unique_ptr<Pass> make_dce_pass() { return std::make_unique<DcePass>(); }

}  // namespace spore
