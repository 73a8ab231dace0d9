#include "backend/null/null_backend.h"

#include <atomic>
#include <memory>

#include "ops/backend.h"

namespace spore {
namespace {
std::atomic<int64_t> g_kernels{0}, g_read{0}, g_written{0};

void count_kernel(KernelContext& k) {
  g_kernels.fetch_add(1, std::memory_order_relaxed);
  int64_t r = 0, w = 0;
  for (const Tensor& t : k.inputs) r += static_cast<int64_t>(t.nbytes());
  for (const Tensor& t : k.outputs) w += static_cast<int64_t>(t.nbytes());
  g_read.fetch_add(r, std::memory_order_relaxed);
  g_written.fetch_add(w, std::memory_order_relaxed);
}
}  // namespace

void register_null_kernels(KernelRegistry& r) {
  for (int op = 0; op < num_builtin_ops(); ++op) r.add(Backend::null, op_at(op), dtypes::all, count_kernel, "null");
}

void register_null_backend() { register_backend(make_kernel_table_backend(Backend::null, register_null_kernels)); }

NullBackendStats null_backend_stats() { return {g_kernels.load(), g_read.load(), g_written.load()}; }
void reset_null_backend_stats() {
  g_kernels = 0;
  g_read = 0;
  g_written = 0;
}

}  // namespace spore
