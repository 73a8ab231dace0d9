// TODO(issue 2): spore graph
#include <cstdio>

#include "tools/spore/commands.h"

namespace spore::cli {
int cmd_graph(int argc, char** argv) {
  std::fprintf(stderr, "spore graph: not implemented yet\n");
  return 1;
}
}  // namespace spore::cli
