#include "backend/cpu/onednn_util.h"

#include <immintrin.h>
#include <omp.h>

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <string_view>
#include <exception>
#include <vector>

#include <fmt/format.h>

#include "base/half.h"
#include "base/thread_pool.h"

namespace spore::cpu {

// oneDNN runs its best kernels for the CPU (AVX-512, brgemm, native bf16/VNNI where the CPU has them): spore
// promises determinism per machine (thread count, runs, batch composition, eager == graph), and oneDNN's
// kernels keep those; they do not give the same bits on CPUs with different ISAs. SPORE_PORTABLE_NUMERICS=1
// caps oneDNN at its AVX2 kernels so every AVX2-or-better x86 machine computes the same bits (spore's own
// kernels give one set of bits on AVX2 and AVX-512 either way, except the bf16 GEMM on AVX512_BF16, gemm_bf16.h,
// which the switch turns off); the cost is measured in docs/PERFORMANCE.md.
// ONEDNN_MAX_CPU_ISA (oneDNN's own variable) set by the user wins over both. Called by register_cpu_kernels
// (runtime::init), before any kernel can query or use the ISA.
bool portable_numerics() {
  static const bool on = [] {
    const char* e = std::getenv("SPORE_PORTABLE_NUMERICS");
    return e != nullptr && *e != 0 && std::string_view(e) != "0";
  }();
  return on;
}

void pin_onednn_isa() {
  static const bool done = [] {
    if (std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr || std::getenv("DNNL_MAX_CPU_ISA") != nullptr) return true;
    if (!portable_numerics()) return true;
    try {
      dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
    } catch (const dnnl::error&) {
      // the ISA was already fixed by an earlier oneDNN call: keep what it chose
    }
    return true;
  }();
  (void)done;
}

// The profiler's name of a oneDNN primitive: its implementation, e.g. "onednn:brg:avx512_core"; oneDNN's
// reference (unoptimized C++) kernels are marked, since no model should land on them silently.
const char* onednn_impl_name(const std::string& info) {
  const bool ref = info.rfind("ref", 0) == 0 || info.find(":ref") != std::string::npos;
  return intern_impl_name(fmt::format("onednn:{}{}", info, ref ? " (REFERENCE)" : ""));
}

dnnl::engine& dnnl_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

namespace {
thread_local int64_t tls_team_primitives = 0;  // team_primitive_calls()
}  // namespace

dnnl::stream& dnnl_stream() {
  // Every oneDNN primitive runs on this stream. One asked for outside any parallel region with more than one
  // thread allowed parallelizes itself over OpenMP's team: run_in_team's callers must keep such a step outside.
  if (omp_get_max_threads() > 1 && !omp_in_parallel()) ++tls_team_primitives;
  thread_local dnnl::stream s(dnnl_engine());
  return s;
}

int64_t team_primitive_calls() { return tls_team_primitives; }

namespace {

// run_in_team's state: the calling thread posts each parallel_for as a job; the other members of the OpenMP region
// wait for it spinning on `posted_`. A job costs a few cache-line transfers (the post, the task ranges, the done
// count), several times cheaper than a fork/join of a fresh OpenMP region (figures in docs/PERFORMANCE.md).
class TeamSession {
 public:
  void set_team(int team) { team_ = team; }

  // On the calling thread: runs one job on the team and waits for every member to finish it.
  void run(int64_t tasks, const std::function<void(int64_t)>& fn) {
    TaskRanges ranges(tasks, team_);
    fn_ = &fn;
    ranges_ = &ranges;
    pending_.store(team_ - 1, std::memory_order_relaxed);
    posted_.fetch_add(1, std::memory_order_release);
    work(0);
    while (pending_.load(std::memory_order_acquire) != 0) _mm_pause();
    fn_ = nullptr;
    ranges_ = nullptr;
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

  // On every other member: take jobs until finish().
  void serve(int me) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g;
      // Spin: a session lasts one plan run and jobs follow each other within microseconds. Yield now and then so
      // that a core shared with another process (more threads than cores) is not held for nothing.
      for (unsigned spins = 0; (g = posted_.load(std::memory_order_acquire)) == seen;) {
        _mm_pause();
        if (++spins == (1u << 14)) {
          spins = 0;
          sched_yield();
        }
      }
      seen = g;
      if (quit_) return;
      work(me);
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  void finish() {
    quit_ = true;
    posted_.fetch_add(1, std::memory_order_release);
  }

 private:
  void work(int me);

  alignas(64) std::atomic<uint64_t> posted_{0};
  const std::function<void(int64_t)>* fn_ = nullptr;  // the job: written before posted_'s release
  TaskRanges* ranges_ = nullptr;
  bool quit_ = false;
  int team_ = 1;
  alignas(64) std::atomic<int> pending_{0};  // members still in the current job
  std::exception_ptr error_;  // the job's first (run_member_tasks)
};

thread_local TeamSession* tls_session = nullptr;  // on the thread that runs the body, outside jobs
thread_local bool tls_in_job = false;

void TeamSession::work(int me) {
  tls_in_job = true;
  run_member_tasks(*ranges_, me, *fn_, error_);
  tls_in_job = false;
}

}  // namespace

bool in_team_body() { return tls_session != nullptr && !tls_in_job; }

void run_in_team(const std::function<void()>& body) {
  const int threads = omp_get_max_threads();
  if (threads <= 1 || omp_in_parallel() || tls_session != nullptr) return body();
  // One session in the process at a time: plans run by several threads at once (a server) would otherwise each
  // hold a team of spinning threads on the same cores. The others run their steps as before (a region per call).
  static std::atomic<int> active{0};
  if (active.fetch_add(1, std::memory_order_acq_rel) != 0) {
    active.fetch_sub(1, std::memory_order_acq_rel);
    return body();
  }
  struct Release {
    ~Release() { active.fetch_sub(1, std::memory_order_acq_rel); }
  } release;
  TeamSession session;
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    if (omp_get_thread_num() == 0) {
      session.set_team(omp_get_num_threads());  // before the first post; the others only read what a post carries
      tls_session = &session;
      try {
        body();
      } catch (...) {
        error = std::current_exception();
      }
      tls_session = nullptr;
      session.finish();
    } else {
      session.serve(omp_get_thread_num());
    }
  }
  if (error) std::rethrow_exception(error);
}

void run_onednn_tasks(int64_t tasks, const std::function<void(int64_t)>& fn) {
  if (tasks <= 0) return;
  if (tasks == 1 || SerialScope::active()) {  // no team to spin up: run the tasks here, oneDNN serial inside
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    try {
      for (int64_t t = 0; t < tasks; ++t) fn(t);
    } catch (...) {
      omp_set_num_threads(saved);
      throw;
    }
    omp_set_num_threads(saved);
    return;
  }
  run_omp_tasks(tasks, omp_get_max_threads(), fn);
}

void run_omp_tasks(int64_t tasks, int threads, const std::function<void(int64_t)>& fn) {
  if (tls_session != nullptr && !tls_in_job) return tls_session->run(tasks, fn);
  std::exception_ptr error;
  TaskRanges ranges(tasks, threads);  // base/thread_pool.h: owned contiguous ranges, back-stealing
#pragma omp parallel num_threads(ranges.team())
  run_member_tasks(ranges, omp_get_thread_num(), fn, error);
  if (error) std::rethrow_exception(error);
}

dnnl::memory scratch_memory(const dnnl::memory::desc& md, std::vector<char>& buf) {
  const size_t bytes = md.get_size() + 64;
  if (buf.size() < bytes) buf.resize(bytes);
  const auto a = reinterpret_cast<uintptr_t>(buf.data());
  return dnnl::memory(md, dnnl_engine(), buf.data() + (64 - a % 64) % 64);
}

dnnl::memory user_memory(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, dnnl_engine(), t.raw_data());
}

bool onednn_declined(const dnnl::error& e, std::string_view what) {
  if (e.status == dnnl_unimplemented || e.status == dnnl_invalid_arguments) return true;
  if (e.status == dnnl_out_of_memory)
    throw_error(ErrorCode::out_of_memory, fmt::format("[{}] oneDNN: out of memory", what));
  throw_error(ErrorCode::internal,
              fmt::format("[{}] oneDNN failed (status {}): {}", what, static_cast<int>(e.status), e.what()));
}

bool native_bf16() {
  static const bool yes = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_bf16;
  return yes;
}

std::string key_dims(const dnnl::memory::dims& d) { return fmt::format("[{}]", fmt::join(d, ",")); }

namespace {

constexpr int64_t convert_grain = 1 << 16;

// x86-64-v3 includes F16C: hardware f16 conversions round to nearest even and handle nan/inf/subnormals.
void widen(const Tensor& src, float* dst) {
  const int64_t n = src.numel();
  const uint16_t* s = static_cast<const uint16_t*>(src.raw_data());
  const bool half = src.dtype() == DType::f16;
  parallel_for(num_chunks(n, convert_grain), [&](int64_t c) {
    int64_t i = c * convert_grain;
    const int64_t end = std::min(n, i + convert_grain);
    if (half) {
      for (; i + 8 <= end; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
      for (; i < end; ++i) dst[i] = half_bits_to_float(s[i]);
    } else {
      for (; i < end; ++i) dst[i] = bf16_bits_to_float(s[i]);
    }
  });
}

void narrow(const float* src, const Tensor& dst) {
  const int64_t n = dst.numel();
  uint16_t* d = static_cast<uint16_t*>(dst.raw_data());
  const bool half = dst.dtype() == DType::f16;
  parallel_for(num_chunks(n, convert_grain), [&](int64_t c) {
    int64_t i = c * convert_grain;
    const int64_t end = std::min(n, i + convert_grain);
    if (half) {
      for (; i + 8 <= end; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
      for (; i < end; ++i) d[i] = float_to_half_bits(src[i]);
    } else {
      for (; i < end; ++i) d[i] = float_to_bf16_bits(src[i]);
    }
  });
}

}  // namespace

void run_in_f32(KernelContext& k, KernelFn f32_kernel) {
  std::vector<Tensor> ins;
  ins.reserve(k.inputs.size());
  for (const Tensor& t : k.inputs) {
    if (!is_low_precision(t.dtype())) {
      ins.push_back(t);
      continue;
    }
    Tensor f = Tensor::empty(t.shape(), DType::f32);
    widen(t, f.data<float>());
    ins.push_back(f);
  }
  std::vector<Tensor> outs;
  outs.reserve(k.outputs.size());
  for (const Tensor& t : k.outputs)
    outs.push_back(is_low_precision(t.dtype()) ? Tensor::empty(t.shape(), DType::f32) : t);
  KernelContext sub{ins, outs, k.attrs, k.op, {}};
  f32_kernel(sub);
  for (size_t i = 0; i < outs.size(); ++i)
    if (is_low_precision(k.outputs[i].dtype())) narrow(outs[i].data<float>(), k.outputs[i]);
}

}  // namespace spore::cpu
