// TODO(issue 2): ops of the reduce family.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

void register_reduce_ops(OpRegistry& r) {}

}  // namespace spore
