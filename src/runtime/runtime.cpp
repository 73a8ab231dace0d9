#include "runtime/runtime.h"

#include <mutex>

#include "base/thread_pool.h"
#include "ops/backend.h"
#include "ops/registry.h"
#include "runtime/eager.h"

namespace spore {
namespace {
ContextOptions g_context;
thread_local int tls_backend = -1;
}  // namespace

bool init() {
  static std::once_flag once;
  std::call_once(once, [] {
    op_registry();  // builds every OpDef
    register_reference_backend();
    register_cpu_backend();
    register_null_backend();
    KernelRegistry& k = kernel_registry();
    for (BackendImpl* b : registered_backends()) b->register_kernels(k);
    static EagerDispatcher dispatcher;
    set_dispatcher(&dispatcher);
    for (BackendImpl* b : registered_backends()) b->set_num_threads(num_threads());
  });
  return true;
}

void set_threads(int n) {
  if (n <= 0) n = hardware_threads();
  set_num_threads(n);
  for (BackendImpl* b : registered_backends()) b->set_num_threads(n);
}

void set_context(const ContextOptions& o) {
  init();
  SPORE_CHECK(o.memory_optimize_level >= 0 && o.memory_optimize_level <= 2, ErrorCode::invalid_argument,
              "memory_optimize_level must be 0, 1 or 2, got {}", o.memory_optimize_level);
  g_context = o;
  set_threads(o.threads);
}

const ContextOptions& context() { return g_context; }

Backend current_backend() { return tls_backend >= 0 ? static_cast<Backend>(tls_backend) : g_context.backend; }

BackendScope::BackendScope(Backend b) : prev_(tls_backend) { tls_backend = static_cast<int>(b); }
BackendScope::~BackendScope() { tls_backend = prev_; }

std::string version() { return SPORE_VERSION; }
std::string build_type() { return SPORE_BUILD_TYPE; }
BackendInfo backend_info() {
  init();
  BackendInfo bi;
  for (const auto& [key, value] : backend_impl(Backend::cpu).info()) {
    if (key == "simd_target") bi.simd_target = value;
    if (key == "cpu_features") bi.cpu_features = value;
    if (key == "onednn") bi.onednn_version = value;
    if (key == "kernels") bi.kernels = value;
  }
  return bi;
}

}  // namespace spore
