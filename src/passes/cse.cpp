// Common-subexpression elimination: two nodes with the same op, inputs and attributes compute the
// same values (every op is pure; random ops are keyed by their seed attribute), so the later one is
// replaced by the earlier. Constants are merged when their bytes are equal.
#include <cstring>
#include <unordered_map>

#include "ops/registry.h"
#include "passes/pass.h"

namespace spore {
namespace {
class CsePass final : public Pass {
 public:
  std::string name() const override { return "cse"; }
  bool run(Graph& g, const PassOptions&) override {
    std::unordered_map<size_t, std::vector<Node*>> seen;
    bool changed = false;
    for (Node* n : std::vector<Node*>(g.nodes())) {
      if (n->is_input()) continue;
      size_t h = std::hash<int>{}(static_cast<int>(n->op)) ^ (n->attrs.hash() << 1);
      for (Value* v : n->inputs) h = h * 1000003u ^ std::hash<int64_t>{}(v->id);
      if (n->is_constant()) h ^= std::hash<std::string>{}(n->outputs[0]->type.str());
      Node* same = nullptr;
      for (Node* c : seen[h]) {
        if (equivalent(c, n)) { same = c; break; }
      }
      if (!same) {
        seen[h].push_back(n);
        continue;
      }
      for (size_t i = 0; i < n->outputs.size(); ++i) g.replace_all_uses(n->outputs[i], same->outputs[i]);
      g.erase_node(n);
      changed = true;
    }
    return changed;
  }

 private:
  static bool equivalent(const Node* a, const Node* b) {
    if (a->op != b->op || a->inputs != b->inputs || !(a->attrs == b->attrs) || a->outputs.size() != b->outputs.size())
      return false;
    for (size_t i = 0; i < a->outputs.size(); ++i)
      if (!(a->outputs[i]->type == b->outputs[i]->type)) return false;
    if (a->is_constant()) return a->payload.bit_equal(b->payload);
    return true;
  }
};
}  // namespace

std::unique_ptr<Pass> make_cse_pass() { return std::make_unique<CsePass>(); }

}  // namespace spore
