#include "runtime/runtime.h"

#include <mutex>

#include "backend/cpu/cpu.h"
#include "backend/null/null_backend.h"
#include "backend/reference/reference.h"
#include "base/thread_pool.h"
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
    KernelRegistry& k = kernel_registry();
    register_reference_kernels(k);
    register_cpu_kernels(k);
    register_null_kernels(k);
    static EagerDispatcher dispatcher;
    set_dispatcher(&dispatcher);
    cpu_set_num_threads(num_threads());
  });
  return true;
}

void set_threads(int n) {
  if (n <= 0) n = hardware_threads();
  set_num_threads(n);
  cpu_set_num_threads(n);
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
BackendInfo backend_info() { return {cpu_simd_target(), cpu_features(), onednn_version()}; }

}  // namespace spore
