// CPU kernels of the norm family. f32 batch_norm and layer_norm run own loops; rms_norm, group_norm,
// dropout and every f64 kernel run loops over independent rows (statistics summed in double, in index
// order, so any thread count gives the same bits). f16/bf16 are staged through f32.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "backend/cpu/elementwise_simd.h"
#include "backend/cpu/families.h"
#include "backend/cpu/onednn_util.h"
#include "base/thread_pool.h"

namespace spore::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
namespace nf = dnnl;

// Rows of `size` elements, chunked so each task handles about `grain` elements.
template <typename F>
void for_rows(int64_t rows, int64_t size, F&& f) {
  const int64_t per = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(size, 1));
  parallel_for(num_chunks(rows, per), [&](int64_t c) {
    for (int64_t r = c * per; r < std::min(rows, (c + 1) * per); ++r) f(r);
  });
}

// Mean and 1/sqrt(var + eps) of n values, two passes in double.
template <typename T>
std::pair<double, double> moments(const T* x, int64_t n, double eps) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < n; ++i) mean += static_cast<double>(x[i]);
  mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    var += d * d;
  }
  return {mean, 1.0 / std::sqrt(var / static_cast<double>(n) + eps)};
}

// The same moments with the sums in 8 double lanes (element i in lane i % 8, lanes combined in a fixed tree), so the
// compiler vectorises them: a per-channel InstanceNorm row of 4096 elements ran at ~1.5 GB/s as one dependent chain
// of double adds. The order depends only on n, never on threads.
template <typename T>
std::pair<double, double> moments_lanes(const T* __restrict x, int64_t n, double eps) {
  const auto lane_sum = [](double* a) {
    for (int h = 4; h >= 1; h /= 2)
      for (int i = 0; i < h; ++i) a[i] += a[i + h];
    return a[0];
  };
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += static_cast<double>(x[i + l]);
  for (; i < n; ++i) acc[i % 8] += static_cast<double>(x[i]);
  const double mean = lane_sum(acc) / static_cast<double>(n);
  double sq[8] = {};
  for (i = 0; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      const double d = static_cast<double>(x[i + l]) - mean;
      sq[l] += d * d;
    }
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    sq[i % 8] += d * d;
  }
  return {mean, 1.0 / std::sqrt(lane_sum(sq) / static_cast<double>(n) + eps)};
}

int64_t row_size(const Tensor& x, int64_t axis) {
  if (axis < 0) axis += x.rank();
  int64_t s = 1;
  for (int i = static_cast<int>(axis); i < x.rank(); ++i) s *= x.shape()[i];
  return s;
}

// ---- batch_norm

template <typename T>
void loops_batch_norm(KernelContext& k) {
  const Tensor& xt = k.in(0);
  const int64_t n = xt.dim(0), c = xt.dim(1), inner = n * c != 0 ? xt.numel() / (n * c) : 0;
  const double eps = k.attrs.f("epsilon");
  const T *x = xt.data<T>(), *scale = k.in(1).data<T>(), *bias = k.in(2).data<T>();
  const T *mean = k.in(3).data<T>(), *var = k.in(4).data<T>();
  T* y = k.out(0).data<T>();
  for_rows(n * c, inner, [&](int64_t r) {
    const int64_t ch = r % c;
    const T a = static_cast<T>(scale[ch] / std::sqrt(static_cast<double>(var[ch]) + eps));
    const T b = static_cast<T>(bias[ch] - mean[ch] * a);
    for (int64_t i = r * inner; i < (r + 1) * inner; ++i) y[i] = x[i] * a + b;
  });
}

// f32: y = x * a[c] + b[c] with a, b per channel from the statistics in double (as loops_batch_norm), rows of
// `inner` contiguous elements in parallel, one fma per element. oneDNN's primitive on this [N, C, inner] view ran
// its reference kernel: 0.44 GB/s, 69% of densenet121 (pre-activation BN, not foldable into a conv).
// layout nchw8c (a blocked chain, passes/layout.cpp): x is [N, C/8, H, W, 8]; each element gets its channel's
// a, b by the same fma, so the bits are the NCHW kernel's.
void batch_norm_kernel(KernelContext& k) {
  const bool blocked = k.attrs.has("layout") && k.attrs.s("layout") == "nchw8c";
  if (k.out(0).dtype() == DType::f64 && !blocked) return loops_batch_norm<double>(k);
  SPORE_CHECK(k.out(0).dtype() == DType::f32 || !blocked, ErrorCode::unsupported,
              "[batch_norm] layout nchw8c is f32 only, got {}", dtype_name(k.out(0).dtype()));
  const Tensor& xt = k.in(0);
  const int64_t n = xt.dim(0), c = blocked ? xt.dim(1) * 8 : xt.dim(1), inner = n * c != 0 ? xt.numel() / (n * c) : 0;
  if (xt.numel() == 0) return;
  const double eps = k.attrs.f("epsilon");
  const float *scale = k.in(1).data<float>(), *shift = k.in(2).data<float>();
  const float *mean = k.in(3).data<float>(), *var = k.in(4).data<float>();
  std::vector<float> a(static_cast<size_t>(c)), b(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    a[ch] = static_cast<float>(scale[ch] / std::sqrt(static_cast<double>(var[ch]) + eps));
    b[ch] = static_cast<float>(shift[ch] - mean[ch] * static_cast<double>(a[ch]));
  }
  const float* x = xt.data<float>();
  float* y = k.out(0).data<float>();
  if (blocked) {  // planes of [H, W, 8]: lane l of block cb is channel cb * 8 + l
    const int64_t blocks = c / 8;
    for_rows(n * blocks, inner * 8, [&](int64_t r) {
      const float* ar = a.data() + (r % blocks) * 8;
      const float* br = b.data() + (r % blocks) * 8;
      const float* xr = x + r * inner * 8;
      float* yr = y + r * inner * 8;
      const __m256 av = _mm256_loadu_ps(ar), bv = _mm256_loadu_ps(br);  // lane l: the fma of std::fma
      for (int64_t i = 0; i < inner; ++i) _mm256_storeu_ps(yr + i * 8, _mm256_fmadd_ps(_mm256_loadu_ps(xr + i * 8), av, bv));
    });
    return;
  }
  for_rows(n * c, inner, [&](int64_t r) {
    const float ar = a[r % c], br = b[r % c];
    const float* xr = x + r * inner;
    float* yr = y + r * inner;
    for (int64_t i = 0; i < inner; ++i) yr[i] = std::fma(xr[i], ar, br);
  });
}

// ---- layer_norm / rms_norm

template <typename T, bool rms>
void loops_row_norm(KernelContext& k) {
  const int64_t size = row_size(k.in(0), k.attrs.i("axis"));
  const int64_t rows = size ? k.in(0).numel() / size : 0;
  const double eps = k.attrs.f("epsilon");
  const T* x = k.in(0).data<T>();
  const T* w = k.num_inputs() > 1 ? k.in(1).data<T>() : nullptr;
  const T* b = !rms && k.num_inputs() > 2 ? k.in(2).data<T>() : nullptr;
  T* y = k.out(0).data<T>();
  for_rows(rows, size, [&](int64_t r) {
    const T* xr = x + r * size;
    T* yr = y + r * size;
    double mean = 0, inv = 0;
    if constexpr (rms) {
      double ss = 0;
      for (int64_t i = 0; i < size; ++i) ss += static_cast<double>(xr[i]) * static_cast<double>(xr[i]);
      inv = 1.0 / std::sqrt(ss / static_cast<double>(size) + eps);
    } else {
      std::tie(mean, inv) = moments(xr, size, eps);
    }
    const T m = static_cast<T>(mean), s = static_cast<T>(inv);
    for (int64_t i = 0; i < size; ++i) {
      T v = (xr[i] - m) * s;
      if (w) v *= w[i];
      if (b) v += b[i];
      yr[i] = v;
    }
  });
}

// f32 layer_norm, own loops (oneDNN's primitive is slow on small tensors, a large share of the transformer encoder's
// batch-1 time): per row, the mean and then the variance as 16 partial sums (element i into sum i % 16, in element
// order), added pairwise in a fixed order and divided by the size; then y = (x - mean) * rstd (* w) (+ b) element by
// element. Plain C++ built for the baseline ISA: the same bits on every machine, for any row count (batch-invariant)
// and thread count. SPORE_LAYER_NORM=onednn keeps oneDNN (read per call, for A/B runs).
float lane_sum16(float* acc) {
  for (int h = 8; h >= 1; h /= 2)
    for (int i = 0; i < h; ++i) acc[i] += acc[i + h];
  return acc[0];
}

void layer_norm_f32(KernelContext& k) {
  const int64_t size = row_size(k.in(0), k.attrs.i("axis"));
  const int64_t rows = size ? k.in(0).numel() / size : 0;
  const float eps = static_cast<float>(k.attrs.f("epsilon")), inv_n = 1.0f / static_cast<float>(size);
  const float* x = k.in(0).data<float>();
  const float* w = k.num_inputs() > 1 ? k.in(1).data<float>() : nullptr;
  const float* b = k.num_inputs() > 2 ? k.in(2).data<float>() : nullptr;
  float* y = k.out(0).data<float>();
  for_rows(rows, size, [&](int64_t r) {
    const float* __restrict xr = x + r * size;
    float* __restrict yr = y + r * size;
    float acc[16] = {};
    int64_t i = 0;
    for (; i + 16 <= size; i += 16)
      for (int l = 0; l < 16; ++l) acc[l] += xr[i + l];
    for (; i < size; ++i) acc[i % 16] += xr[i];
    const float mean = lane_sum16(acc) * inv_n;
    float sq[16] = {};
    for (i = 0; i + 16 <= size; i += 16)
      for (int l = 0; l < 16; ++l) {
        const float d = xr[i + l] - mean;
        sq[l] += d * d;
      }
    for (; i < size; ++i) {
      const float d = xr[i] - mean;
      sq[i % 16] += d * d;
    }
    const float rstd = 1.0f / std::sqrt(lane_sum16(sq) * inv_n + eps);
    for (i = 0; i < size; ++i) {
      float v = (xr[i] - mean) * rstd;
      if (w) v *= w[i];
      if (b) v += b[i];
      yr[i] = v;
    }
  });
}

void layer_norm_kernel(KernelContext& k) {
  if (k.out(0).dtype() == DType::f64) return loops_row_norm<double, false>(k);
  if (k.in(0).numel() == 0) return;
  const char* e = std::getenv("SPORE_LAYER_NORM");
  if (!(e && std::string_view(e) == "onednn")) return layer_norm_f32(k);
  const int64_t size = row_size(k.in(0), k.attrs.i("axis"));
  const int64_t rows = size ? k.in(0).numel() / size : 0;
  if (k.in(0).numel() == 0) return;
  const bool has_w = k.num_inputs() > 1, has_b = k.num_inputs() > 2;
  const float eps = static_cast<float>(k.attrs.f("epsilon"));
  const memory::desc data({rows, size}, memory::data_type::f32, tag::ab);
  const memory::desc param({size}, memory::data_type::f32, tag::a);
  static PrimitiveCache<nf::layer_normalization_forward> cache;
  const auto prim = cache.get(fmt::format("{},{}:{}:{}{}", rows, size, eps, has_w, has_b), [&] {
    auto flags = nf::normalization_flags::none;
    if (has_w) flags |= nf::normalization_flags::use_scale;
    if (has_b) flags |= nf::normalization_flags::use_shift;
    const nf::layer_normalization_forward::desc d(nf::prop_kind::forward_inference, data, eps, flags);
    return nf::layer_normalization_forward(nf::layer_normalization_forward::primitive_desc(d, dnnl_engine()));
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, user_memory(data, k.in(0))},
                                       {DNNL_ARG_DST, user_memory(data, k.out(0))}};
  if (has_w) args.emplace(DNNL_ARG_SCALE, user_memory(param, k.in(1)));
  if (has_b) args.emplace(DNNL_ARG_SHIFT, user_memory(param, k.in(2)));
  prim.execute(dnnl_stream(), args);
  dnnl_stream().wait();
}

void rms_norm_kernel(KernelContext& k) {
  if (k.out(0).dtype() == DType::f64)
    loops_row_norm<double, true>(k);
  else
    loops_row_norm<float, true>(k);
}

// ---- group_norm: one row per (image, group), weights per channel.

template <typename T>
void loops_group_norm(KernelContext& k) {
  const Tensor& xt = k.in(0);
  const int64_t n = xt.dim(0), c = xt.dim(1), groups = k.attrs.i("num_groups");
  const int64_t inner = n * c != 0 ? xt.numel() / (n * c) : 0, cg = c / groups, size = cg * inner;
  const double eps = k.attrs.f("epsilon");
  const T* x = xt.data<T>();
  const T* w = k.num_inputs() > 1 ? k.in(1).data<T>() : nullptr;
  const T* b = k.num_inputs() > 2 ? k.in(2).data<T>() : nullptr;
  T* y = k.out(0).data<T>();
  for_rows(n * groups, size, [&](int64_t r) {
    const auto [mean, inv] = moments_lanes(x + r * size, size, eps);
    const T m = static_cast<T>(mean), s = static_cast<T>(inv);
    for (int64_t j = 0; j < cg; ++j) {
      const int64_t ch = (r % groups) * cg + j;
      const T a = w ? s * w[ch] : s, sh = b ? b[ch] : T(0);
      const T* xr = x + r * size + j * inner;
      T* yr = y + r * size + j * inner;
      for (int64_t i = 0; i < inner; ++i) yr[i] = (xr[i] - m) * a + sh;
    }
  });
}

void group_norm_kernel(KernelContext& k) {
  if (k.out(0).dtype() == DType::f64)
    loops_group_norm<double>(k);
  else
    loops_group_norm<float>(k);
}

// ---- dropout: the mask rule (keep iff philox_uniform(seed, offset, i) >= p) is the op's definition.

// The optional offset input: an i64 or i32 scalar (rank 0 or [1]); 0 when absent. run_in_f32 passes
// integer inputs through unconverted, so the f16/bf16 wrapper sees the same offset.
uint64_t dropout_offset(const KernelContext& k) {
  if (k.num_inputs() < 2) return 0;
  const Tensor& o = k.in(1);
  const int64_t v = o.dtype() == DType::i64 ? o.data<int64_t>()[0] : static_cast<int64_t>(o.data<int32_t>()[0]);
  return static_cast<uint64_t>(v);
}

// The mask rule as an integer compare: philox_uniform is (word >> 8) / 2^24, exact in double, so `uniform >= p` is
// `word >> 8 >= ceil(p * 2^24)` (p * 2^24 is exact too). p <= 0 keeps everything, p >= 1 (or NaN) nothing.
uint32_t dropout_threshold(double p) {
  if (!(p < 1.0)) return 1u << 24;
  return p <= 0.0 ? 0u : static_cast<uint32_t>(std::ceil(p * 16777216.0));
}

template <typename T>
void loops_dropout(KernelContext& k) {
  const int64_t n = k.in(0).numel();
  const T* x = k.in(0).data<T>();
  T* y = k.out(0).data<T>();
  if (!k.attrs.b("training")) {
    if (y != x) std::copy(x, x + n, y);
    return;
  }
  const double p = k.attrs.f("p");
  const uint64_t seed = static_cast<uint64_t>(k.attrs.i("seed"));
  const uint64_t offset = dropout_offset(k);
  const uint32_t threshold = dropout_threshold(p);
  const T scale = static_cast<T>(p < 1 ? 1.0 / (1.0 - p) : 0.0);
  constexpr int64_t grain = 1 << 14;
  parallel_for(num_chunks(n, grain), [&](int64_t c) {
    const int64_t begin = c * grain, end = std::min(n, begin + grain);
    uint8_t keep[grain];
    philox_keep(seed, offset, static_cast<uint64_t>(begin), static_cast<size_t>(end - begin), threshold, keep);
    for (int64_t i = begin; i < end; ++i) y[i] = keep[i - begin] ? x[i] * scale : T(0);
  });
}

void dropout_kernel(KernelContext& k) {
  if (k.out(0).dtype() == DType::f64)
    loops_dropout<double>(k);
  else
    loops_dropout<float>(k);
}

template <KernelFn f32_kernel>
void low(KernelContext& k) {
  run_in_f32(k, f32_kernel);
}

}  // namespace

void register_norm(KernelRegistry& r) {
  const DTypeSet full{DType::f32, DType::f64}, half{DType::f16, DType::bf16};
  r.add(Backend::cpu, "batch_norm"_op, full, batch_norm_kernel, "own");
  r.add(Backend::cpu, "batch_norm"_op, half, low<batch_norm_kernel>, "own");
  r.add(Backend::cpu, "layer_norm"_op, full, layer_norm_kernel, "own");
  r.add(Backend::cpu, "layer_norm"_op, half, low<layer_norm_kernel>, "own");
  r.add(Backend::cpu, "rms_norm"_op, full, rms_norm_kernel, "loops");
  r.add(Backend::cpu, "rms_norm"_op, half, low<rms_norm_kernel>, "loops");
  r.add(Backend::cpu, "group_norm"_op, full, group_norm_kernel, "loops");
  r.add(Backend::cpu, "group_norm"_op, half, low<group_norm_kernel>, "loops");
  r.add(Backend::cpu, "dropout"_op, full, dropout_kernel, "loops");
  r.add(Backend::cpu, "dropout"_op, half, low<dropout_kernel>, "loops");
}

}  // namespace spore::cpu
