// TODO(issue 2): spore demo
#include <cstdio>

#include "tools/spore/commands.h"

namespace spore::cli {
int cmd_demo(int argc, char** argv) {
  std::fprintf(stderr, "spore demo: not implemented yet\n");
  return 1;
}
}  // namespace spore::cli
