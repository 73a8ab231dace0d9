// TODO(issue 2): cpu kernels of the reduce family.
#include "backend/cpu/families.h"

namespace spore::cpu {

void register_reduce(KernelRegistry& r) {}

}  // namespace spore::cpu
