// Placeholder: being written (issue 5).
#include "passes/pass.h"

namespace spore {
namespace {

class RecognizePatternsPass final : public Pass {
 public:
  std::string name() const override { return "recognize_patterns"; }
  int min_opt_level() const override { return 1; }
  bool run(Graph&, const PassOptions&) override { return false; }
};

}  // namespace

std::unique_ptr<Pass> make_recognize_patterns_pass() { return std::make_unique<RecognizePatternsPass>(); }

}  // namespace spore
