// TODO(issue 2): ops of the shape family.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

void register_shape_ops(OpRegistry& r) {}

}  // namespace spore
