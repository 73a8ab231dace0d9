#pragma once
// Custom-op plugins: shared libraries that export the plain-C ABI of include/spore/custom_op_abi.h
// (docs/CUSTOM_OPS.md). Loading one registers each of its ops with the same registries as the built-in
// ops (OpDef + a cpu/reference kernel per dtype), so the ops run in eager and graph mode, differentiate
// through their `grad_op`, are saved in .spore files with the plugin's name, and import from ONNX.
//
//   spore::load_custom_ops("libmyops.so");   // the CLI: spore run --custom-ops libmyops.so model.spore
//
// Plugins are never unloaded. Load them before running models on other threads (registration is not
// synchronized with kernel dispatch running concurrently).
#include <string>
#include <vector>

namespace spore {

struct PluginInfo {
  std::string path;     // as given to load_custom_ops
  std::string name;     // the plugin's own name (stored in .spore files)
  std::string version;
  std::string domain;   // ONNX domain of its ops
  std::vector<std::string> ops;
};

// Loads a plugin and registers its ops; returns what it registered. A path without '/' is a file in the current
// directory (not a search of the library path). Loading the same library again (by any
// path that reaches the same file) is a no-op returning the first load's info. Throws spore::Error naming
// the library (and the op) for: a file dlopen cannot load, a missing entry symbol, another ABI version,
// a malformed description (NULL/invalid name, no kernels, bad dtype, bad arity...), or an op whose name a
// built-in op, an in-process custom op or another plugin already uses. A failed load registers nothing.
const PluginInfo& load_custom_ops(const std::string& path);

// Every plugin loaded so far, in load order.
std::vector<PluginInfo> loaded_plugins();

}  // namespace spore
