// spore CLI entry point: dispatches to one file per subcommand (tools/spore/cmd_*.cpp).
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/spore/commands.h"

int main(int argc, char** argv) {
  return spore::cli::main_dispatch(argc, argv);
}
