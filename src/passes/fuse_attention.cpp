// Placeholder: being written (issue 5).
#include "passes/pass.h"

namespace spore {
namespace {

class FuseAttentionPass final : public Pass {
 public:
  std::string name() const override { return "fuse_attention"; }
  int min_opt_level() const override { return 1; }
  bool run(Graph&, const PassOptions&) override { return false; }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_attention_pass() { return std::make_unique<FuseAttentionPass>(); }

}  // namespace spore
