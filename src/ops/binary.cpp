// TODO(issue 2): ops of the binary family.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

void register_binary_ops(OpRegistry& r) {}

}  // namespace spore
