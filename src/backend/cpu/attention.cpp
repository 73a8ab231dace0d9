// CPU kernel of the fused attention op (ops/attention.h). One task per (batch, block of query rows): the
// scores block S = scale * Q K^T (+ mask) stays in cache, each row goes through the Highway softmax the
// softmax op uses, then O = P V. Both products run an AVX2/FMA register-blocked loop (4 rows x 16 columns)
// whose every output element is one in-order FMA chain over the inner dim, whatever the blocking (edge
// columns use std::fma in the same order), so a row's bits never depend on the block or the thread count.
// The row block depends only on Lk, never on the thread count. The scale multiplies each finished dot product
// as it is stored; a key that is not already transposed is transposed once per task into scratch (8x8 AVX
// blocks) so both products take the same broadcast-and-FMA form. f16/bf16 compute in f32; f64 uses plain loops.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/families.h"
#include "backend/cpu/transpose8.h"
#include "base/thread_pool.h"
#include "ops/attention.h"

namespace spore::cpu {

void softmax_row_f32(const float* x, float* y, int64_t n, bool log);  // reduce_hwy.cpp
void half_to_f32(const uint16_t* src, bool bf16, float* dst, int64_t n);
void f32_to_half(const float* src, bool bf16, uint16_t* dst, int64_t n);

namespace {

// C[m x n] = A[m x k] B[k x n] (row-major, leading dims lda/ldb/ldc), each element fma(a, b, acc) over p in order.
template <int R>
inline void gemm_rows_f32(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t n,
                          int64_t k, float alpha) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < k; ++p) {
      const __m256 b0 = _mm256_loadu_ps(b + p * ldb + j), b1 = _mm256_loadu_ps(b + p * ldb + j + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 av = _mm256_broadcast_ss(a + r * lda + p);
        acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(c + r * ldc + j, _mm256_mul_ps(acc[r][0], va));
      _mm256_storeu_ps(c + r * ldc + j + 8, _mm256_mul_ps(acc[r][1], va));
    }
  }
  for (; j + 8 <= n; j += 8) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t p = 0; p < k; ++p) {
      const __m256 b0 = _mm256_loadu_ps(b + p * ldb + j);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + r * lda + p), b0, acc[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(c + r * ldc + j, _mm256_mul_ps(acc[r], va));
  }
  for (; j < n; ++j)
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
      for (int64_t p = 0; p < k; ++p) s = std::fma(a[r * lda + p], b[p * ldb + j], s);
      c[r * ldc + j] = s * alpha;
    }
}

void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
          int64_t ldc, float alpha) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) gemm_rows_f32<4>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, n, k, alpha);
  for (; i < m; ++i) gemm_rows_f32<1>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, n, k, alpha);
}

void gemm(int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b, int64_t ldb, double* c,
          int64_t ldc, double alpha) {
  for (int64_t i = 0; i < m; ++i) {
    double* cr = c + i * ldc;
    std::fill(cr, cr + n, 0.0);
    for (int64_t p = 0; p < k; ++p) {
      const double av = a[i * lda + p];
      const double* br = b + p * ldb;
      for (int64_t j = 0; j < n; ++j) cr[j] = std::fma(av, br[j], cr[j]);
    }
    for (int64_t j = 0; j < n; ++j) cr[j] *= alpha;
  }
}

// kt[p * lk + j] = k[j * d + p]: K [Lk x D] to K^T [D x Lk], 8x8 AVX blocks where both sizes allow.
void transpose_into(const float* k, float* kt, int64_t lk, int64_t d) {
  int64_t j = 0;
  for (; j + 8 <= lk; j += 8) {
    int64_t p = 0;
    for (; p + 8 <= d; p += 8) {
      __m256 r[8];
      for (int x = 0; x < 8; ++x) r[x] = _mm256_loadu_ps(k + (j + x) * d + p);
      transpose8(r);  // r[x]: column p + x of rows j..j+7
      for (int x = 0; x < 8; ++x) _mm256_storeu_ps(kt + (p + x) * lk + j, r[x]);
    }
    for (; p < d; ++p)
      for (int x = 0; x < 8; ++x) kt[p * lk + j + x] = k[(j + x) * d + p];
  }
  for (; j < lk; ++j)
    for (int64_t p = 0; p < d; ++p) kt[p * lk + j] = k[j * d + p];
}
void transpose_into(const double* k, double* kt, int64_t lk, int64_t d) {
  for (int64_t j = 0; j < lk; ++j)
    for (int64_t p = 0; p < d; ++p) kt[p * lk + j] = k[j * d + p];
}

void softmax_row(float* x, int64_t n) { softmax_row_f32(x, x, n, false); }
void softmax_row(double* x, int64_t n) {  // as the f64 softmax kernel: NaN row when the max is not finite
  double mx = -INFINITY;
  bool nan = false;
  for (int64_t j = 0; j < n; ++j) {
    nan |= std::isnan(x[j]);
    mx = std::max(mx, x[j]);
  }
  if (nan || !std::isfinite(mx)) {
    std::fill(x, x + n, std::nan(""));
    return;
  }
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += (x[j] = std::exp(x[j] - mx));
  const double inv = 1.0 / s;
  for (int64_t j = 0; j < n; ++j) x[j] *= inv;
}

// Query rows per task: the scores block (rows x Lk) stays within ~32 KB; a multiple of the 4-row micro-kernel.
int64_t row_block(int64_t lk) { return std::clamp<int64_t>(8192 / std::max<int64_t>(lk, 1) / 4 * 4, 4, 64); }

template <typename T>
void attention_core(const attention::Geometry& g, const T* q, const T* k, const T* v, const T* mask,
                    const attention::MaskStrides& ms, double scale_d, T* out) {
  const int64_t rb = row_block(g.lk), chunks = num_chunks(g.lq, rb);
  const T scale = static_cast<T>(scale_d);
  parallel_for(g.batch * chunks, [&](int64_t task) {
    const int64_t b = task / chunks, i0 = task % chunks * rb, rows = std::min(rb, g.lq - i0);
    thread_local std::vector<T> kt_buf, s_buf;
    // K^T [D x Lk] for the axpy-form product.
    const T* kt = k + b * g.lk * g.d;
    if (!g.k_transposed) {
      kt_buf.resize(static_cast<size_t>(g.d * g.lk));
      transpose_into(kt, kt_buf.data(), g.lk, g.d);
      kt = kt_buf.data();
    }
    s_buf.resize(static_cast<size_t>(rows * g.lk));
    T* s = s_buf.data();
    gemm(rows, g.lk, g.d, q + (b * g.lq + i0) * g.d, g.d, kt, g.lk, s, g.lk, scale);
    const int64_t moff = mask ? ms.batch_offset(b) : 0;
    for (int64_t i = 0; i < rows; ++i) {
      T* sr = s + i * g.lk;
      if (mask) {
        const T* mr = mask + moff + (i0 + i) * ms.row;
        if (ms.col == 1)
          for (int64_t j = 0; j < g.lk; ++j) sr[j] += mr[j];
        else
          for (int64_t j = 0; j < g.lk; ++j) sr[j] += mr[0];
      }
      softmax_row(sr, g.lk);
    }
    gemm(rows, g.dv, g.lk, s, g.lk, v + b * g.lk * g.dv, g.dv, out + (b * g.lq + i0) * g.dv, g.dv, T(1));
  });
}

void attention_kernel(KernelContext& kc) {
  const Tensor& q = kc.in(0);
  const Tensor& k = kc.in(1);
  const Tensor& v = kc.in(2);
  const Tensor* mask = kc.num_inputs() > 3 ? &kc.in(3) : nullptr;
  Tensor& y = kc.out(0);
  const attention::Geometry g = attention::geometry(q.shape(), k.shape(), v.shape(), kc.attrs.b("k_transposed"));
  if (y.numel() == 0) return;
  attention::MaskStrides ms;
  if (mask) {
    Shape scores = q.shape();
    scores.back() = g.lk;
    ms = attention::mask_strides(mask->shape(), scores);
  }
  const double scale = kc.attrs.f("scale");
  const DType t = y.dtype();
  if (t == DType::f64) {
    attention_core<double>(g, q.data<double>(), k.data<double>(), v.data<double>(),
                           mask ? mask->data<double>() : nullptr, ms, scale, y.data<double>());
    return;
  }
  if (t == DType::f32) {
    attention_core<float>(g, q.data<float>(), k.data<float>(), v.data<float>(), mask ? mask->data<float>() : nullptr,
                          ms, scale, y.data<float>());
    return;
  }
  // f16 / bf16: widen the operands to f32, compute, narrow the result once.
  const bool bf16 = t == DType::bf16;
  const auto widen = [&](const Tensor& x) {
    float* buf = static_cast<float*>(kc.scratch(static_cast<size_t>(x.numel()) * sizeof(float)));
    half_to_f32(static_cast<const uint16_t*>(x.raw_data()), bf16, buf, x.numel());
    return buf;
  };
  const float* qf = widen(q);
  const float* kf = widen(k);
  const float* vf = widen(v);
  const float* mf = mask ? widen(*mask) : nullptr;
  float* yf = static_cast<float*>(kc.scratch(static_cast<size_t>(y.numel()) * sizeof(float)));
  attention_core<float>(g, qf, kf, vf, mf, ms, scale, yf);
  f32_to_half(yf, bf16, static_cast<uint16_t*>(y.raw_data()), y.numel());
}

}  // namespace

void register_attention(KernelRegistry& r) {
  r.add(Backend::cpu, "attention"_op, dtypes::floating, attention_kernel, "avx2");
}

}  // namespace spore::cpu
