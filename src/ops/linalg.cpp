// TODO(issue 2): ops of the linalg family.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

void register_linalg_ops(OpRegistry& r) {}

}  // namespace spore
