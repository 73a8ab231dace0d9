// TODO(issue 2): reference kernels of the binary family.
#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {

void register_binary(KernelRegistry& r) {}

}  // namespace spore::reference
