// TODO(issue 2): cpu kernels of the shape family.
#include "backend/cpu/families.h"

namespace spore::cpu {

void register_shape(KernelRegistry& r) {}

}  // namespace spore::cpu
