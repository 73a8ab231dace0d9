#pragma once
// The reference backend: naive scalar kernels for every op, computing in double (f64 inputs) or in
// double-then-round (all other dtypes). It is the executable definition of each op and the test
// oracle; it favours obviousness over speed.
#include "ops/kernel.h"

namespace spore {
void register_reference_kernels(KernelRegistry& r);
}
