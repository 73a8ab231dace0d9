#include "backend/cpu/onednn_util.h"

#include <immintrin.h>
#include <omp.h>

#include <cstdlib>
#include <exception>
#include <vector>

#include "base/half.h"
#include "base/thread_pool.h"

namespace spore::cpu {

// oneDNN's kernels are capped at AVX2 (its "avx2" ISA) unless the user asks otherwise, so that every machine
// computes the same bits. On AVX-512 CPUs oneDNN otherwise picks other kernels (16-channel blocks, brgemm, native
// bf16 dot products) whose summation order differs from the AVX2 ones: measured on an AVX-512 (Zen 5) machine,
// PyNative and graph-mode evaluation of the same conv net stopped being bit-identical, and results differed from
// an AVX2 machine's. ONEDNN_MAX_CPU_ISA (oneDNN's own variable) set by the user wins: e.g. ONEDNN_MAX_CPU_ISA=ALL
// trades that reproducibility for the wider kernels. Called by register_cpu_kernels (runtime::init), before any
// kernel can query or use the ISA.
void pin_onednn_isa() {
  static const bool done = [] {
    if (std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr || std::getenv("DNNL_MAX_CPU_ISA") != nullptr) return true;
    try {
      dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
    } catch (const dnnl::error&) {
      // the ISA was already fixed by an earlier oneDNN call: keep what it chose
    }
    return true;
  }();
  (void)done;
}

dnnl::engine& dnnl_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream s(dnnl_engine());
  return s;
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
  std::exception_ptr error;
  TaskRanges ranges(tasks, threads);  // base/thread_pool.h: owned contiguous ranges, back-stealing
#pragma omp parallel num_threads(ranges.team())
  {
    const int me = omp_get_thread_num();
    for (int64_t task = 0; ranges.next(me, task);) {
      try {
        fn(task);
      } catch (...) {
#pragma omp critical(spore_onednn_task_error)
        if (!error) error = std::current_exception();
      }
    }
  }
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
