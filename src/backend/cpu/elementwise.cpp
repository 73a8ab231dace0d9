// TODO(issue 2): cpu kernels of the elementwise family.
#include "backend/cpu/families.h"

namespace spore::cpu {

void register_elementwise(KernelRegistry& r) {}

}  // namespace spore::cpu
