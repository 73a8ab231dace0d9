// TODO(issue 2): reference kernels of the norm family.
#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {

void register_norm(KernelRegistry& r) {}

}  // namespace spore::reference
