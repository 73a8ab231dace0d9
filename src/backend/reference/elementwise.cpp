// TODO(issue 2): reference kernels of the elementwise family.
#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {

void register_elementwise(KernelRegistry& r) {}

}  // namespace spore::reference
