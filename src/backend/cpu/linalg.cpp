// TODO(issue 2): cpu kernels of the linalg family.
#include "backend/cpu/families.h"

namespace spore::cpu {

void register_linalg(KernelRegistry& r) {}

}  // namespace spore::cpu
