// TODO(issue 2): spore ops
#include <cstdio>

#include "tools/spore/commands.h"

namespace spore::cli {
int cmd_ops(int argc, char** argv) {
  std::fprintf(stderr, "spore ops: not implemented yet\n");
  return 1;
}
}  // namespace spore::cli
