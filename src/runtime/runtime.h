#pragma once
// Process-wide runtime settings and initialization.
//
//   spore::init();                                   // idempotent; <spore/spore.h> calls it for you
//   spore::set_context({.mode = spore::ExecMode::graph, .threads = 2});
//   { spore::BackendScope ref(spore::Backend::reference); auto y = ops::relu(x); }  // per-thread override
#include <cstddef>
#include <string>

#include "ops/kernel.h"

namespace spore {

enum class ExecMode { pynative, graph };

struct ContextOptions {
  ExecMode mode = ExecMode::pynative;
  bool deterministic = true;
  int threads = 0;  // 0 = all available cores
  Backend backend = Backend::cpu;
  int memory_optimize_level = 1;  // 0: no buffer reuse, 1: liveness-based reuse, 2: + in place, tighter packing
  size_t max_device_memory = 0;   // 0 = unlimited; plans needing more fail at compile time
  bool profile = false;
  // A directory: every graph-mode compile writes its graph after each pass (NN_<pass>.ir and .dot) into its own
  // subdirectory <name>_<n> (MindSpore's save_graphs + save_graphs_path). Empty: no dumps.
  std::string save_graphs;
  // Rematerialization: cheap elementwise activations are recomputed next to their late (backward) uses instead
  // of staying live across the forward (the "rematerialize" pass); same bits, less activation memory.
  bool recompute = false;
};

// Registers kernels and installs the dispatcher. Safe to call many times and from many threads.
bool init();
void set_context(const ContextOptions& o);
const ContextOptions& context();

// Sets the thread count for spore's pool and the libraries it uses.
void set_threads(int n);

// The backend eager ops on this thread run on (context().backend unless overridden).
Backend current_backend();
class BackendScope {
 public:
  explicit BackendScope(Backend b);
  ~BackendScope();
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;

 private:
  int prev_;
};

std::string version();
std::string build_type();
// What the CPU backend runs on here, for `spore info`: "simd_target" (Highway's pick), "cpu_features", "onednn",
// "kernels" (the ISA each family of spore's own kernels picked).
struct BackendInfo {
  std::string simd_target, cpu_features, onednn_version, kernels;
};
BackendInfo backend_info();

}  // namespace spore
