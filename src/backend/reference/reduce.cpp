// TODO(issue 2): reference kernels of the reduce family.
#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {

void register_reduce(KernelRegistry& r) {}

}  // namespace spore::reference
