#pragma once
// What the extension's files share: the error helper (a spore::Error becomes the spore.Error subclass of its code,
// module.cpp's translator) and the entry points of the binding files.
#include <pybind11/pybind11.h>

#include <string>

#include "base/error.h"

namespace spore_py {

[[noreturn]] inline void fail(spore::ErrorCode code, const std::string& msg) { throw spore::Error(code, msg); }

// The Python type name of an object, for error messages.
inline std::string type_name(pybind11::handle o) {
  return pybind11::str(pybind11::type::of(o).attr("__name__")).cast<std::string>();
}

// nn (Cell, Parameter, layers, losses), train (optimizers, schedules, callbacks, Model), data and export.
void bind_nn_train(pybind11::module_& m);
// convert and profile (deploy_bindings.cpp).
void bind_deploy(pybind11::module_& m);
// spore.serve / spore.Server (serve_bindings.cpp).
void bind_serve(pybind11::module_& m);

}  // namespace spore_py
