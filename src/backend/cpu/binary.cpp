// TODO(issue 2): cpu kernels of the binary family.
#include "backend/cpu/families.h"

namespace spore::cpu {

void register_binary(KernelRegistry& r) {}

}  // namespace spore::cpu
