// TODO(issue 2): reference kernels of the shape family.
#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {

void register_shape(KernelRegistry& r) {}

}  // namespace spore::reference
