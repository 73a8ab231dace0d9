// TODO(issue 2): cpu kernels of the conv family.
#include "backend/cpu/families.h"

namespace spore::cpu {

void register_conv(KernelRegistry& r) {}

}  // namespace spore::cpu
