// TODO(issue 2): cpu kernels of the norm family.
#include "backend/cpu/families.h"

namespace spore::cpu {

void register_norm(KernelRegistry& r) {}

}  // namespace spore::cpu
