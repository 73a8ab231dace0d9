// spore.convert and spore.profile's C++ half (docs/PYTHON.md).
#include <pybind11/pybind11.h>

#include "common.h"

namespace spore_py {

void bind_deploy(pybind11::module_&) {}

}  // namespace spore_py
