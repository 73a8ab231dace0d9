// TODO(issue 2): ops of the norm family.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

void register_norm_ops(OpRegistry& r) {}

}  // namespace spore
