// PLACEHOLDER: replaced by its owner.
#include "base/error.h"
#include "tools/spore/commands.h"
namespace spore::cli {
int cmd_bench(int, char**) { SPORE_FAIL(ErrorCode::unsupported, "not yet"); }
}  // namespace spore::cli
