// TODO(issue 2): reference kernels of the linalg family.
#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {

void register_linalg(KernelRegistry& r) {}

}  // namespace spore::reference
