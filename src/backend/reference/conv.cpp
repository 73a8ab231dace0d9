// TODO(issue 2): reference kernels of the conv family.
#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {

void register_conv(KernelRegistry& r) {}

}  // namespace spore::reference
