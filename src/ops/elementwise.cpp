// TODO(issue 2): ops of the elementwise family.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

void register_elementwise_ops(OpRegistry& r) {}

}  // namespace spore
