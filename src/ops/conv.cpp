// TODO(issue 2): ops of the conv family.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

void register_conv_ops(OpRegistry& r) {}

}  // namespace spore
