// CPU kernels of the linalg family. f32 matmul and linear run spore's own kernels (linear_f32: a dot kernel for
// <= 16 outputs, gemm_linear.h above), transposes and batch broadcasting read through strides; f64 runs loops;
// f16 is staged through f32, and bf16 too where the CPU has no AVX512_BF16 (else gemm_bf16.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <immintrin.h>

#include "backend/cpu/families.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_linear.h"
#include "backend/cpu/onednn_util.h"
#include "base/half.h"
#include "base/thread_pool.h"

namespace spore::cpu {
namespace {

// Logical [batch..., M, K] x [batch..., K, N] -> [batch..., M, N] over the operands' contiguous buffers.
struct MatmulGeom {
  Shape a_dims, a_strides, b_dims, b_strides, c_dims;
  int64_t m = 0, k = 0, n = 0;
};

MatmulGeom matmul_geom(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Shape sa = a.shape(), sb = b.shape();
  ta = ta && sa.size() >= 2;
  tb = tb && sb.size() >= 2;
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  const size_t r = std::max(sa.size(), sb.size());
  sa.insert(sa.begin(), r - sa.size(), 1);
  sb.insert(sb.begin(), r - sb.size(), 1);
  MatmulGeom g;
  g.a_dims = sa;
  g.b_dims = sb;
  g.a_strides = contiguous_strides(sa);
  g.b_strides = contiguous_strides(sb);
  if (ta) {
    std::swap(g.a_dims[r - 1], g.a_dims[r - 2]);
    std::swap(g.a_strides[r - 1], g.a_strides[r - 2]);
  }
  if (tb) {
    std::swap(g.b_dims[r - 1], g.b_dims[r - 2]);
    std::swap(g.b_strides[r - 1], g.b_strides[r - 2]);
  }
  g.m = g.a_dims[r - 2];
  g.k = g.a_dims[r - 1];
  g.n = g.b_dims[r - 1];
  g.c_dims.resize(r);
  for (size_t i = 0; i + 2 < r; ++i) g.c_dims[i] = std::max(g.a_dims[i], g.b_dims[i]);
  g.c_dims[r - 2] = g.m;
  g.c_dims[r - 1] = g.n;
  return g;
}


// Batch offsets (in elements) of A and B for every output batch index, with broadcasting.
void batch_offsets(const MatmulGeom& g, std::vector<int64_t>& a_off, std::vector<int64_t>& b_off) {
  const size_t r = g.c_dims.size();
  const int64_t batches = shape_numel(std::span<const int64_t>(g.c_dims.data(), r - 2));
  a_off.resize(batches);
  b_off.resize(batches);
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t rem = bi, ao = 0, bo = 0;
    for (int i = static_cast<int>(r) - 3; i >= 0; --i) {
      const int64_t idx = rem % g.c_dims[i];
      rem /= g.c_dims[i];
      if (g.a_dims[i] != 1) ao += idx * g.a_strides[i];
      if (g.b_dims[i] != 1) bo += idx * g.b_strides[i];
    }
    a_off[bi] = ao;
    b_off[bi] = bo;
  }
}

// f64: each output row block is one task; every element sums over K in order, so any thread count
// gives the same bits. B contiguous along N -> axpy form; contiguous along K -> dot form.
void loops_matmul_f64(const MatmulGeom& g, const double* a, const double* b, const double* bias, double* c) {
  const size_t r = g.c_dims.size();
  std::vector<int64_t> a_off, b_off;
  batch_offsets(g, a_off, b_off);
  const int64_t batches = static_cast<int64_t>(a_off.size());
  const int64_t am = g.a_strides[r - 2], ak = g.a_strides[r - 1], bk = g.b_strides[r - 2], bn = g.b_strides[r - 1];
  const int64_t m = g.m, k = g.k, n = g.n;
  constexpr int64_t row_grain = 8;
  const int64_t row_chunks = num_chunks(m, row_grain);
  parallel_for(batches * row_chunks, [&](int64_t task) {
    const int64_t bi = task / row_chunks, i0 = (task % row_chunks) * row_grain, i1 = std::min(m, i0 + row_grain);
    const double* ab = a + a_off[bi];
    const double* bb = b + b_off[bi];
    for (int64_t i = i0; i < i1; ++i) {
      double* crow = c + (bi * m + i) * n;
      if (bn == 1) {
        for (int64_t j = 0; j < n; ++j) crow[j] = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double av = ab[i * am + p * ak];
          const double* brow = bb + p * bk;
          for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
        }
      } else {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) s += ab[i * am + p * ak] * bb[j * bn + p * bk];
          crow[j] = s;
        }
      }
      if (bias)
        for (int64_t j = 0; j < n; ++j) crow[j] += bias[j];
    }
  });
}

// K == 0 (or any empty dim): oneDNN is not asked; the result is the bias (or zeros).
bool handle_empty(const MatmulGeom& g, const Tensor* bias, const Tensor& c) {
  if (g.m > 0 && g.n > 0 && g.k > 0 && c.numel() > 0) return false;
  if (c.numel() == 0) return true;
  std::memset(c.raw_data(), 0, c.nbytes());
  if (bias) {
    const size_t es = dtype_size(c.dtype());
    char* out = static_cast<char*>(c.raw_data());
    for (int64_t row = 0; row < c.numel() / g.n; ++row) std::memcpy(out + row * g.n * es, bias->raw_data(), g.n * es);
  }
  return true;
}

// ---- f32 linear with few outputs (N <= 16: classifier heads): oneDNN's sgemm ran SimpleNet's head
// ([32, 12544] x [10, 12544]^T) at ~37 GFLOP/s on one thread, and as one task (one 256-row tile). Here every
// output is a dot product over K: 16 lanes of partial sums, lane l adding the products of k = l mod 16 in K order
// by fma (masked loads zero-fill the last partial vector), then a fixed pairwise lane sum, then the bias. The order
// depends on K only, never on M, the row's place in the batch, the thread count or the ISA: the AVX-512 tiles
// hold the 16 lanes in one register, the AVX2 tiles in two, with the same operations per lane. Tiles of up to
// 4 rows x 6 outputs (AVX2: 2 x 2) share each load of x and w. SPORE_LINEAR_DOT=0 uses the GEMM instead,
// SPORE_LINEAR_DOT=avx2 forces the AVX2 tiles (read per call, for tests).
enum class DotIsa { off, avx2, avx512 };
DotIsa few_outputs_isa(int64_t n, int64_t k) {
  static const bool has512 = __builtin_cpu_supports("avx512f");
  if (n > 16 || k < 16) return DotIsa::off;
  const char* e = std::getenv("SPORE_LINEAR_DOT");
  if (e && std::string_view(e) == "0") return DotIsa::off;
  return has512 && !(e && std::string_view(e) == "avx2") ? DotIsa::avx512 : DotIsa::avx2;
}

// The pairwise sum of 16 lanes (both builds), then the bias.
inline float finish_dot(float* l, const float* bias, int c) {
  for (int h = 8; h >= 1; h /= 2)
    for (int i = 0; i < h; ++i) l[i] += l[i + h];
  return bias ? l[0] + bias[c] : l[0];
}

template <int R, int NC>
void dot_tile_avx2(const float* x, const float* w, int64_t k, const float* bias, float* y, int64_t n) {
  __m256 lo[R][NC], hi[R][NC];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) lo[r][c] = hi[r][c] = _mm256_setzero_ps();
  const int64_t kv = k / 16 * 16;
  for (int64_t p = 0; p < kv; p += 16) {
    __m256 xl[R], xh[R];
    for (int r = 0; r < R; ++r) {
      xl[r] = _mm256_loadu_ps(x + r * k + p);
      xh[r] = _mm256_loadu_ps(x + r * k + p + 8);
    }
    for (int c = 0; c < NC; ++c) {
      const __m256 wl = _mm256_loadu_ps(w + c * k + p), wh = _mm256_loadu_ps(w + c * k + p + 8);
      for (int r = 0; r < R; ++r) {
        lo[r][c] = _mm256_fmadd_ps(xl[r], wl, lo[r][c]);
        hi[r][c] = _mm256_fmadd_ps(xh[r], wh, hi[r][c]);
      }
    }
  }
  if (kv < k) {
    const int rem = static_cast<int>(k - kv);
    alignas(32) int32_t ml[8], mh[8];
    for (int i = 0; i < 8; ++i) {
      ml[i] = i < rem ? -1 : 0;
      mh[i] = i + 8 < rem ? -1 : 0;
    }
    const __m256i mlo = _mm256_load_si256(reinterpret_cast<const __m256i*>(ml));
    const __m256i mhi = _mm256_load_si256(reinterpret_cast<const __m256i*>(mh));
    __m256 xl[R], xh[R];
    for (int r = 0; r < R; ++r) {
      xl[r] = _mm256_maskload_ps(x + r * k + kv, mlo);
      xh[r] = _mm256_maskload_ps(x + r * k + kv + 8, mhi);
    }
    for (int c = 0; c < NC; ++c) {
      const __m256 wl = _mm256_maskload_ps(w + c * k + kv, mlo), wh = _mm256_maskload_ps(w + c * k + kv + 8, mhi);
      for (int r = 0; r < R; ++r) {
        lo[r][c] = _mm256_fmadd_ps(xl[r], wl, lo[r][c]);
        hi[r][c] = _mm256_fmadd_ps(xh[r], wh, hi[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) {
      alignas(32) float l[16];
      _mm256_store_ps(l, lo[r][c]);
      _mm256_store_ps(l + 8, hi[r][c]);
      y[r * n + c] = finish_dot(l, bias, c);
    }
}

template <int R, int NC>
__attribute__((target("avx512f"))) void dot_tile(const float* x, const float* w, int64_t k, const float* bias,
                                                 float* y, int64_t n) {
  __m512 acc[R][NC];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  const int64_t kv = k / 16 * 16;
  for (int64_t p = 0; p < kv; p += 16) {
    __m512 xv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_ps(x + r * k + p);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const __m512 wv = _mm512_loadu_ps(w + c * k + p);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (kv < k) {
    const auto m = static_cast<__mmask16>((1u << (k - kv)) - 1);
    __m512 xv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) xv[r] = _mm512_maskz_loadu_ps(m, x + r * k + kv);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const __m512 wv = _mm512_maskz_loadu_ps(m, w + c * k + kv);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      alignas(64) float l[16];
      _mm512_store_ps(l, acc[r][c]);
      y[r * n + c] = finish_dot(l, bias, c);
    }
}

using DotTile = void (*)(const float*, const float*, int64_t, const float*, float*, int64_t);
template <int R>
constexpr DotTile dot_tiles[6] = {dot_tile<R, 1>, dot_tile<R, 2>, dot_tile<R, 3>,
                                  dot_tile<R, 4>, dot_tile<R, 5>, dot_tile<R, 6>};

constexpr DotTile dot_tiles_avx2[2][2] = {{dot_tile_avx2<1, 1>, dot_tile_avx2<1, 2>},
                                          {dot_tile_avx2<2, 1>, dot_tile_avx2<2, 2>}};

// y [m, n] = x [m, k] @ w[n, k]^T (+ bias), n <= 16.
void few_outputs_linear(DotIsa isa, int64_t m, int64_t k, int64_t n, const float* x, const float* w, const float* bias,
                        float* y) {
  const bool wide = isa == DotIsa::avx512;
  const int64_t kRows = wide ? 4 : 2, kCols = wide ? 6 : 2;
  const int64_t groups = num_chunks(n, kCols);
  // ~16 tasks of whole 4-row tiles (any split gives the same bits).
  const int64_t per = num_chunks(num_chunks(m, 16), 4) * 4;
  parallel_for(num_chunks(m, per), [&](int64_t task) {
    const int64_t r1 = std::min(m, (task + 1) * per);
    for (int64_t r0 = task * per; r0 < r1; r0 += kRows) {
      const int64_t rows = std::min(kRows, r1 - r0);
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t c0 = g * n / groups, nc = (g + 1) * n / groups - c0;  // near-equal column groups
        const DotTile fn = wide ? (rows == 4   ? dot_tiles<4>
                                   : rows == 3 ? dot_tiles<3>
                                   : rows == 2 ? dot_tiles<2>
                                               : dot_tiles<1>)[nc - 1]
                                : dot_tiles_avx2[rows - 1][nc - 1];
        fn(x + r0 * k, w + c0 * k, k, bias ? bias + c0 : nullptr, y + r0 * n + c0, n);
      }
    }
  });
}

// Every f32 y[M, N] = x[M, K] @ W + bias, whichever op asked (linear, matmul, their fused and staged forms) and
// whichever layout W has ([N, K] for linear and matmul's transpose_b, [K, N] otherwise): the dot kernel above for
// N <= 16 (K >= 16), spore's GEMM (gemm_linear.h) for the rest. Both fix each output's summation order from K
// alone, so the bits do not depend on the op, W's layout, M, a row's place in the batch, the thread count or the
// ISA. x is [M, K] row-major. owner: W's storage when W is a plan constant (derived copies are then kept).
void linear_f32(int64_t m, int64_t k, int64_t n, const float* x, const float* w, bool w_kn, const float* bias,
                float* y, const std::shared_ptr<Storage>& owner) {
  if (const DotIsa isa = few_outputs_isa(n, k); isa != DotIsa::off) {
    note_kernel_impl(isa == DotIsa::avx512 ? "dot_avx512" : "dot_avx2");
    if (!w_kn) return few_outputs_linear(isa, m, k, n, x, w, bias, y);
    std::vector<float> wt(static_cast<size_t>(n * k));  // at most 16 x K: [K, N] -> [N, K]
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t c = 0; c < n; ++c) wt[c * k + kk] = w[kk * n + c];
    return few_outputs_linear(isa, m, k, n, x, wt.data(), bias, y);
  }
  note_kernel_impl("gemm");
  gemm_linear(m, k, n, x, w, bias, y, owner, w_kn);
}

// matmul over matmul_geom's batches (broadcast by offsets), each batch one linear(m, k, n, x, w, w_kn, y, owner,
// parallel) of element type T: A is used in place when its rows are contiguous, else (transpose_a) copied to
// [M, K]; B in place as [K, N] or [N, K]. A B shared by every batch, with A's batches back to back (a [B, T, K]
// activation times a weight: backward's dx = dy @ W), is one product of B*M rows, not B products that pack W
// again each. Many batches (attention's per-head products) run as one task each when batch_tasks is set (the
// kernel called with parallel = false), else each batch splits into tasks itself. None of these choices changes a
// bit: the kernels fix every output's summation order from K alone.
template <typename T, typename Linear>
void matmul_batches(const MatmulGeom& g, const Tensor& a, const Tensor& b, const Tensor& c, bool constant_b,
                    const Linear& linear, bool batch_tasks = false) {
  const size_t r = g.c_dims.size();
  const int64_t am = g.a_strides[r - 2], ak = g.a_strides[r - 1], bk = g.b_strides[r - 2], bn = g.b_strides[r - 1];
  const int64_t m = g.m, k = g.k, n = g.n;
  std::vector<int64_t> a_off, b_off;
  batch_offsets(g, a_off, b_off);
  const bool a_rows = ak == 1 && (m == 1 || am == k);
  const bool w_kn = bn == 1 && (k == 1 || bk == n);
  SPORE_CHECK(a_rows || (am == 1 && (k == 1 || ak == m)), ErrorCode::internal, "[matmul] unexpected A strides {},{}",
              am, ak);
  SPORE_CHECK(w_kn || (bk == 1 && (n == 1 || bn == k)), ErrorCode::internal, "[matmul] unexpected B strides {},{}",
              bk, bn);
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* pc = static_cast<T*>(c.raw_data());
  const std::shared_ptr<Storage> owner = constant_b ? b.storage() : nullptr;
  const auto batches = static_cast<int64_t>(a_off.size());
  bool stacked = a_rows && batches > 1;  // one product of batches * m rows
  for (int64_t bi = 0; stacked && bi < batches; ++bi) stacked = b_off[bi] == 0 && a_off[bi] == bi * m * k;
  if (stacked) return linear(batches * m, k, n, pa, pb, w_kn, pc, owner, true);
  const auto one = [&](int64_t bi, std::vector<T>& at, bool parallel) {
    const T* x = pa + a_off[bi];
    if (!a_rows) {  // [K, M] -> [M, K] in cache tiles (a scalar column walk ran weight-gradient products at 65-127
                    // GFLOP/s against 170-185 for plain ones in LM training)
      at.resize(static_cast<size_t>(m * k));
      transpose_2d(x, at.data(), k, m, sizeof(T));
      x = at.data();
    }
    linear(m, k, n, x, pb + b_off[bi], w_kn, pc + bi * m * n, owner, parallel);
  };
  if (batch_tasks && batches > 1) {
    parallel_for(batches, [&](int64_t bi) {
      std::vector<T> at;
      one(bi, at, false);
    });
    return;
  }
  std::vector<T> at;
  for (int64_t bi = 0; bi < batches; ++bi) one(bi, at, true);
}

void matmul_f32(const MatmulGeom& g, const Tensor& a, const Tensor& b, const Tensor& c, bool constant_b) {
  matmul_batches<float>(
      g, a, b, c, constant_b,
      [](int64_t m, int64_t k, int64_t n, const float* x, const float* w, bool w_kn, float* y,
         const std::shared_ptr<Storage>& owner, bool) { linear_f32(m, k, n, x, w, w_kn, nullptr, y, owner); });
}

void run_matmul(const MatmulGeom& g, const Tensor& a, const Tensor& b, const Tensor& c, bool constant_b) {
  if (handle_empty(g, nullptr, c)) return;
  if (c.dtype() == DType::f64)
    loops_matmul_f64(g, a.data<double>(), b.data<double>(), nullptr, c.data<double>());
  else
    matmul_f32(g, a, b, c, constant_b);
}

void matmul_kernel(KernelContext& k) {
  // [M, K] @ [K, N], both packed, f32: what matmul_f32 would do for one batch, without building the broadcast
  // geometry (a dozen small vectors that cost more than a tiny product).
  const Tensor &a = k.in(0), &b = k.in(1);
  if (a.rank() == 2 && b.rank() == 2 && a.dtype() == DType::f32 && a.is_contiguous() && b.is_contiguous() &&
      !k.attrs.b("transpose_a") && !k.attrs.b("transpose_b") && a.numel() > 0 && b.numel() > 0) {
    const int64_t m = a.dim(0), kk = a.dim(1), n = b.dim(1);
    return linear_f32(m, kk, n, a.data<float>(), b.data<float>(), /*w_kn=*/true, nullptr, k.out(0).data<float>(),
                      (k.constant_inputs >> 1) & 1 ? b.storage() : nullptr);
  }
  run_matmul(matmul_geom(k.in(0), k.in(1), k.attrs.b("transpose_a"), k.attrs.b("transpose_b")), k.in(0), k.in(1),
             k.out(0), (k.constant_inputs >> 1) & 1);
}

// linear = [rows, in] @ w^T + bias: linear_f32 (f32) or the f64 loops, w^T described by strides (no copy).
void linear_kernel(KernelContext& k) {
  const int64_t in = k.in(1).dim(1), out = k.in(1).dim(0);
  MatmulGeom g;
  g.m = in ? k.in(0).numel() / in : k.out(0).numel() / std::max<int64_t>(out, 1);
  g.k = in;
  g.n = out;
  g.a_dims = {g.m, in};
  g.a_strides = {in, 1};
  g.b_dims = {in, out};
  g.b_strides = {1, in};
  g.c_dims = {g.m, out};
  const Tensor* bias = k.num_inputs() > 2 ? &k.in(2) : nullptr;
  if (handle_empty(g, bias, k.out(0))) return;
  if (k.out(0).dtype() == DType::f64)
    return loops_matmul_f64(g, k.in(0).data<double>(), k.in(1).data<double>(), bias ? bias->data<double>() : nullptr,
                            k.out(0).data<double>());
  const bool constant_w = (k.constant_inputs >> 1) & 1;
  linear_f32(g.m, in, out, k.in(0).data<float>(), k.in(1).data<float>(), false, bias ? bias->data<float>() : nullptr,
             k.out(0).data<float>(), constant_w ? k.in(1).storage() : nullptr);
}

// f16 and bf16 compute in f32 (the same kernels, so a low-precision matmul is the f32 one on the widened operands,
// rounded once): oneDNN's native bf16 matmul split K across threads, giving different bits for 1 and 2 threads.
template <KernelFn kernel>
void low_precision(KernelContext& k) {
  run_in_f32(k, kernel);
}

// bf16 on a CPU with AVX512_BF16: gemm_bf16 (vdpbf16ps, gemm_bf16.h says what it does to the bits) on the bf16
// operands; elsewhere, with SPORE_PORTABLE_NUMERICS=1 or SPORE_GEMM_BF16=0, the widened f32 path above. The choice
// depends on the machine and the environment only, never on the shape.
void bf16_gemm(int64_t m, int64_t k, int64_t n, const uint16_t* x, const uint16_t* w, bool w_kn, uint16_t* y,
               const std::shared_ptr<Storage>& owner, bool parallel) {
  gemm_bf16(m, k, n, x, w, w_kn, nullptr, y, owner, parallel);
}

void matmul_bf16_kernel(KernelContext& k) {
  if (!gemm_bf16_enabled()) return run_in_f32(k, matmul_kernel);
  const MatmulGeom g = matmul_geom(k.in(0), k.in(1), k.attrs.b("transpose_a"), k.attrs.b("transpose_b"));
  if (handle_empty(g, nullptr, k.out(0))) return;
  note_kernel_impl("gemm_bf16_avx512");
  // Batches as tasks when there are enough of them and each is small (attention's per-head products).
  const int64_t batches = g.m ? k.out(0).numel() / (g.m * g.n) : 0;
  const bool batch_tasks = batches >= 8 && g.m * g.n * g.k <= (int64_t{1} << 18);
  matmul_batches<uint16_t>(g, k.in(0), k.in(1), k.out(0), (k.constant_inputs >> 1) & 1, bf16_gemm, batch_tasks);
}

void linear_bf16_kernel(KernelContext& k) {
  if (!gemm_bf16_enabled()) return run_in_f32(k, linear_kernel);
  const Tensor &x = k.in(0), &w = k.in(1), &y = k.out(0);
  const int64_t in = w.dim(1), out = w.dim(0);
  MatmulGeom g;
  g.m = in ? x.numel() / in : y.numel() / std::max<int64_t>(out, 1);
  g.k = in;
  g.n = out;
  const Tensor* bias = k.num_inputs() > 2 ? &k.in(2) : nullptr;
  if (handle_empty(g, bias, y)) return;
  note_kernel_impl("gemm_bf16_avx512");
  std::vector<float> b32;
  if (bias) {
    b32.resize(static_cast<size_t>(out));
    const auto* b = static_cast<const uint16_t*>(bias->raw_data());
    for (int64_t c = 0; c < out; ++c) b32[c] = bf16_bits_to_float(b[c]);
  }
  gemm_bf16(g.m, in, out, static_cast<const uint16_t*>(x.raw_data()), static_cast<const uint16_t*>(w.raw_data()), false,
            bias ? b32.data() : nullptr, static_cast<uint16_t*>(y.raw_data()),
            (k.constant_inputs >> 1) & 1 ? w.storage() : nullptr);
}

}  // namespace

void register_linalg(KernelRegistry& r) {
  r.add(Backend::cpu, "matmul"_op, {DType::f32, DType::f64}, matmul_kernel, "gemm+dot");  // own kernels
  r.add(Backend::cpu, "matmul"_op, {DType::f16}, low_precision<matmul_kernel>, "gemm+dot");
  r.add(Backend::cpu, "matmul"_op, {DType::bf16}, matmul_bf16_kernel, "gemm_bf16|gemm+dot");
  r.add(Backend::cpu, "linear"_op, {DType::f32, DType::f64}, linear_kernel, "gemm+dot");
  r.add(Backend::cpu, "linear"_op, {DType::f16}, low_precision<linear_kernel>, "gemm+dot");
  r.add(Backend::cpu, "linear"_op, {DType::bf16}, linear_bf16_kernel, "gemm_bf16|gemm+dot");
}

}  // namespace spore::cpu
