#pragma once
// The backend interface (docs/BACKENDS.md): everything the runtime and the passes know of a backend. A backend
// lives in src/backend/<name>/, implements BackendImpl and registers it through its entry point below, which
// runtime::init calls (explicit calls, no static registrars). The runtime never includes a backend's headers.
//
//   - kernels: register_kernels fills the KernelRegistry rows of its Backend id;
//   - supports(): asked at plan time, so that "no kernel" means decompose or a compile-time error, never a run-time
//     fallback;
//   - set_num_threads(): applies the process-wide thread count to the libraries it uses;
//   - make_executor(): how a compiled plan's steps run (in order on the calling thread by default; the CPU backend
//     groups steps into team sessions and runs small steps alone where that was measured faster);
//   - info(): facts for `spore info`;
//   - write_kv_rows(): stores new attention keys/values into an LLM's KV cache, which lives in the backend's memory.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ops/kernel.h"

namespace spore {

// Runs one plan's steps, in schedule order: run_step(i) binds and runs step i (the plan's part: kernel call,
// profiling). Made once per plan by the plan's backend and kept with it, so it may learn across runs. Results must
// not depend on how it runs them: kernels split work into the same tasks whatever thread runs them.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual void run(size_t num_steps, const std::function<void(size_t)>& run_step) = 0;
  // Whether the executor has finished learning how to run the plan (spore bench warms up until it has).
  virtual bool calibrated() const { return true; }
  // Steps it runs on the calling thread alone (a CPU executor's decision; 0 elsewhere).
  virtual int64_t serial_steps() const { return 0; }
};

struct ExecutorOptions {
  // Whether the executor may time steps during the first runs to choose how to run them (CompileOptions).
  bool calibrate_threads = true;
};

class BackendImpl {
 public:
  virtual ~BackendImpl() = default;
  virtual Backend id() const = 0;
  // Where its kernels read and write (tensor/device.h). A plan for a backend off the host allocates its arena
  // there, uploads the constants once at compile time and copies inputs in and outputs out as plan steps.
  virtual Device device() const { return host_device; }
  virtual void register_kernels(KernelRegistry& r) = 0;
  // Plan-time query: can this backend run op with these (normalized) attributes on these input/output dtypes
  // (dispatch: the OpDef's dispatch dtype)? Default: a kernel is registered for (op, dispatch dtype).
  virtual bool supports(OpId op, const Attrs& attrs, DType dispatch) const;
  virtual void set_num_threads(int n) {}
  // Default: steps in order on the calling thread.
  virtual std::unique_ptr<StepExecutor> make_executor(const ExecutorOptions& o) const;
  virtual std::vector<std::pair<std::string, std::string>> info() const { return {}; }
  // Writes rows [0, n) of `rows` (f32 [T, H, D], contiguous) at positions p0 .. p0+n-1 of `cache` ([H, ctx, D]:
  // f32, f16, bf16, or i8 with `scales` f32 [H, ctx] taking each row's scale), converted to the cache's dtype as
  // attention_kv converts new rows (i8: llm_ops::kv_quantize_row), so cached and fresh keys give the same bits.
  // Default: host loops (every backend whose memory is host memory).
  virtual void write_kv_rows(Tensor& cache, Tensor* scales, const Tensor& rows, int64_t p0, int64_t n) const;
};

// A backend that is only a kernel table (the reference and null backends): the defaults for everything else.
std::unique_ptr<BackendImpl> make_kernel_table_backend(Backend id, void (*register_kernels)(KernelRegistry&));

// Installs (or replaces) the implementation of b.id(). Not thread-safe against concurrent lookups: call at init.
void register_backend(std::unique_ptr<BackendImpl> b);
// The implementation of a backend; throws not_found naming it when none is registered.
BackendImpl& backend_impl(Backend b);
// The registered backends, in Backend order. A backend outside the built-in three takes an id from
// register_backend_id, registers its implementation here and its kernels with register_kernels.
std::vector<BackendImpl*> registered_backends();

// Entry points of the built-in backends (each defined in its own library under src/backend/).
void register_reference_backend();
void register_cpu_backend();
void register_null_backend();

}  // namespace spore
