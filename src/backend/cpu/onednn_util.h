#pragma once
// Shared plumbing of the oneDNN-backed kernels (linalg, conv, norm): one process-wide engine, a stream
// per thread, a small primitive cache so graph replays do not recreate primitives, and f16/bf16 <-> f32
// staging for CPUs without native low-precision support.
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "base/thread_pool.h"
#include "ops/kernel.h"

namespace spore::cpu {

dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();
// Runs fn(0) .. fn(tasks - 1) on the OpenMP team. oneDNN calls inside a task run single-threaded (nested
// parallelism is off), so what a task computes does not depend on the thread count. Rethrows the first error.
void run_onednn_tasks(int64_t tasks, const std::function<void(int64_t)>& fn);  // one stream per calling thread
// The loop itself: fn(0 .. tasks-1) on a team of `threads`, tasks handed out as base/thread_pool.h's TaskRanges
// says, first error rethrown (also spore's parallel_for runner, register.cpp).
void run_omp_tasks(int64_t tasks, int threads, const std::function<void(int64_t)>& fn);
// cpu.h's cpu_run_in_team / cpu_team_primitive_calls.
void run_in_team(const std::function<void()>& body);
int64_t team_primitive_calls();
bool in_team_body();  // on run_in_team's calling thread, outside a job: parallel_for posts a job to the team

// Primitive (plus whatever the op needs beside it) per shape/attr key. Creation is rare, so it runs
// under the lock. Cleared when it grows past `capacity` so dynamic shapes cannot grow it without bound.
template <typename Entry>
class PrimitiveCache {
 public:
  Entry get(const std::string& key, const std::function<Entry()>& make) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second;
    if (map_.size() >= capacity) map_.clear();
    return map_.emplace(key, make()).first->second;
  }

 private:
  static constexpr size_t capacity = 1024;
  std::mutex mu_;
  std::unordered_map<std::string, Entry> map_;
};

// A user buffer as oneDNN memory (no copy). oneDNN takes non-const pointers even for inputs.
dnnl::memory user_memory(const dnnl::memory::desc& md, const Tensor& t);
// Memory of `md`'s layout over `buf` (grown as needed, 64-byte aligned), which the caller keeps between calls
// (thread_local): a fresh buffer per call (memory(md, engine)) is a fresh mmap for large activations whose page
// faults cost more than the reorder itself.
dnnl::memory scratch_memory(const dnnl::memory::desc& md, std::vector<char>& buf);

// For a dnnl::error from creating a primitive: true where oneDNN declines the configuration (unimplemented, or
// arguments it does not take), so the caller can pick another kernel. Any other status (out of memory, a runtime
// failure) is rethrown as spore::Error naming `what`: those are never a reason to fall back silently.
bool onednn_declined(const dnnl::error& e, std::string_view what);
// Whether oneDNN runs bf16 primitives natively here (avx512_bf16 / AMX); else bf16 is staged through f32.
bool native_bf16();
// SPORE_PORTABLE_NUMERICS=1: oneDNN capped at AVX2, and spore's AVX512_BF16 GEMM off (gemm_bf16.h), so AVX2 and
// AVX-512 machines give the same bits.
bool portable_numerics();
// The profiler's name of a oneDNN primitive from its impl_info_str(): "onednn:<name>", reference kernels marked
// " (REFERENCE)"; interned (note_kernel_impl).
const char* onednn_impl_name(const std::string& info);
// Applies portable_numerics() to oneDNN unless ONEDNN_MAX_CPU_ISA is set (onednn_util.cpp says why). Idempotent.
void pin_onednn_isa();

// Runs `f32_kernel` on f32 copies of the f16/bf16 inputs and rounds its f32 outputs back (RNE).
void run_in_f32(KernelContext& k, KernelFn f32_kernel);

// "[2,3,4]" for cache keys.
std::string key_dims(const dnnl::memory::dims& d);

}  // namespace spore::cpu
