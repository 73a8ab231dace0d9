// CPU kernels of rope and attention_kv (ops/llm_ops.h), AVX2/FMA/F16C (the build targets x86-64-v3).
//
// rope computes its cos/sin table the way llama.cpp's ggml CPU rope does (ops.cpp, ggml_rope_cache_init and
// rope_yarn with ext_factor 0): in float, theta starts at (float)p and is multiplied by powf(base, -2/dim) once per
// pair, the angle is freq_scale * (theta / freq_factor), and cosf/sinf of it are taken. The reference computes the
// exact angle in double; the float recurrence differs from it by a few ulps of the angle (up to ~2e-4 rad at
// position 4000), and matching llama.cpp's angles is what keeps our logits next to llama.cpp's.
//
// attention_kv is batch invariant: the output of (query position P, head h) has the same bits whether it is
// computed in a decode call (T = 1, keys before P in the cache) or as a row of a prefill call, and whatever the
// thread count. New key/value rows are first rounded to the cache dtype (in their own scratch, laid out like
// k_new), so a key has the same bits from the cache or from this call. One task per (token, kv head, slice of at
// most 4 of its q heads), which share each K/V row as it is loaded; per (token, q head):
//   1. s_j = scale * dot(q, k_j) for j = 0..P; each dot is one 8-lane FMA chain over the 8-blocks of D, a fixed
//      horizontal sum and a scalar FMA tail, the same operations whichever keys and heads it is computed with;
//   2. max, then e_j = exp(s_j - max) with our own vectorized expf and the sum of e_j in 8 lanes where lane l
//      holds j = l mod 8, j ascending (the scores are padded to a multiple of 8 with -inf, whose exp is 0);
//   3. out[d] = (sum_j e_j v_j[d]) * (1 / sum), each element one FMA chain over j ascending.
// Nothing depends on where a key came from, on T or on the thread count; parallel_for never splits j.
// A pooled cache [S, Hkv, C, D] (continuous batching) is split into runs of tokens, one per sequence
// (llm_ops::attention_runs), and each run's tokens are computed against their slot's cache exactly as in a
// single-cache call: a token's bits do not depend on which other sequences share the call.
// An i8 cache (row j stands for sc_j * q_j, ops/llm_kv_quant.h; the new rows are quantized by the same function that
// writes the cache) runs the same steps on the int8 values, converted to f32 exactly, with each row's scale applied
// once per row instead of once per element: s_j = (scale * dot(q, kq_j)) * ksc_j, and step 3 weighs row j by
// e_j * vsc_j. That is the same sum as with dequantized rows up to f32 rounding, and it keeps every step a function
// of the row alone.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/families.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "ops/llm_kv_quant.h"
#include "ops/llm_ops.h"

namespace spore::cpu {
namespace {

// ---------------------------------------------------------------------------------------------------------------
// rope

// Tokens per task: each task builds the cos/sin rows of its tokens and rotates all their heads.
constexpr int64_t rope_tokens_per_task = 8;

void rope_kernel(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& pos = k.in(1);
  const float* ff = k.num_inputs() > 2 ? k.in(2).data<float>() : nullptr;
  const int64_t t_n = x.shape()[0], h_n = x.shape()[1], d = x.shape()[2];
  const int64_t rd = k.attrs.i("dim") == 0 ? d : k.attrs.i("dim"), half = rd / 2;
  const bool neox = k.attrs.s("mode") == "neox";
  const float theta_scale = std::pow(static_cast<float>(k.attrs.f("theta")), -2.0f / static_cast<float>(rd));
  const float freq_scale = static_cast<float>(k.attrs.f("freq_scale"));
  const float* xs = x.data<float>();
  const int64_t* ps = pos.data<int64_t>();
  float* ys = k.out(0).data<float>();
  for (int64_t t = 0; t < t_n; ++t)
    SPORE_CHECK(ps[t] >= 0, ErrorCode::invalid_argument, "rope: positions[{}] = {} is negative", t, ps[t]);
  if (k.out(0).numel() == 0) return;
  parallel_for(num_chunks(t_n, rope_tokens_per_task), [&](int64_t task) {
    // Per token: cos and sin of each pair, laid out to match x. normal: c[e] = cos_(e/2) and sn[e] = -sin / +sin
    // for even / odd e (so y = x * c + swap_pairs(x) * sn); neox: c[i] = cos_i, sn[i] = sin_i for i < rd/2.
    thread_local std::vector<float> table;
    table.resize(static_cast<size_t>(2 * rd));
    float* c = table.data();
    float* sn = c + rd;
    const int64_t t_end = std::min(t_n, (task + 1) * rope_tokens_per_task);
    for (int64_t t = task * rope_tokens_per_task; t < t_end; ++t) {
      float th = static_cast<float>(ps[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = freq_scale * (th / (ff ? ff[i] : 1.0f));
        const float ci = std::cos(angle), si = std::sin(angle);
        if (neox) {
          c[i] = ci;
          sn[i] = si;
        } else {
          c[2 * i] = c[2 * i + 1] = ci;
          sn[2 * i] = -si;
          sn[2 * i + 1] = si;
        }
        th *= theta_scale;
      }
      for (int64_t h = 0; h < h_n; ++h) {
        const float* xr = xs + (t * h_n + h) * d;
        float* yr = ys + (t * h_n + h) * d;
        if (neox) {
          // y[i] = a c - b s, y[i + half] = a s + b c with a = x[i], b = x[i + half].
          int64_t i = 0;
          for (; i + 8 <= half; i += 8) {
            const __m256 a = _mm256_loadu_ps(xr + i), b = _mm256_loadu_ps(xr + i + half);
            const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(sn + i);
            _mm256_storeu_ps(yr + i, _mm256_fnmadd_ps(b, sv, _mm256_mul_ps(a, cv)));
            _mm256_storeu_ps(yr + i + half, _mm256_fmadd_ps(a, sv, _mm256_mul_ps(b, cv)));
          }
          for (; i < half; ++i) {
            const float a = xr[i], b = xr[i + half];
            yr[i] = std::fma(-b, sn[i], a * c[i]);
            yr[i + half] = std::fma(a, sn[i], b * c[i]);
          }
        } else {
          int64_t e = 0;
          for (; e + 8 <= rd; e += 8) {
            const __m256 v = _mm256_loadu_ps(xr + e);
            const __m256 swapped = _mm256_permute_ps(v, 0xB1);  // (x1, x0, x3, x2, ...)
            _mm256_storeu_ps(yr + e, _mm256_fmadd_ps(swapped, _mm256_loadu_ps(sn + e),
                                                     _mm256_mul_ps(v, _mm256_loadu_ps(c + e))));
          }
          for (; e < rd; ++e) yr[e] = std::fma(xr[e ^ 1], sn[e], xr[e] * c[e]);
        }
        if (rd < d) std::memcpy(yr + rd, xr + rd, static_cast<size_t>(d - rd) * sizeof(float));
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// attention_kv

enum class Cache { f32, f16, bf16, i8 };
template <Cache C>
using elem_t = std::conditional_t<C == Cache::f32, float, std::conditional_t<C == Cache::i8, int8_t, uint16_t>>;

template <Cache C>
inline __m256 load8(const elem_t<C>* p) {
  if constexpr (C == Cache::f32) {
    return _mm256_loadu_ps(p);
  } else if constexpr (C == Cache::i8) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (C == Cache::f16) return _mm256_cvtph_ps(h);
    else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <Cache C>
inline float load1(const elem_t<C>* p) {
  if constexpr (C == Cache::f32 || C == Cache::i8) return static_cast<float>(*p);
  else if constexpr (C == Cache::f16) return half_bits_to_float(*p);
  else return bf16_bits_to_float(*p);
}

// Fixed horizontal sum: halves, then pairs, then lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// s[r][j + n] = scale * dot(q[r], rows[n]) for R query heads and N keys at once (R * N independent chains keep the
// FMA units busy, and each q block loaded serves N keys). Every (head, key) pair goes through the same operations in
// the same order whatever R and N: one 8-lane FMA chain over the 8-blocks of D, a fixed horizontal sum, then the
// D % 8 tail with scalar FMAs.
template <Cache C, int R, int N>
inline void dot_block(const float* const* q, const elem_t<C>* const* rows, int64_t d, float scale, float* const* s,
                      int64_t j) {
  __m256 acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) acc[r][n] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 8 <= d; p += 8) {
    __m256 kv[N];
    for (int n = 0; n < N; ++n) kv[n] = load8<C>(rows[n] + p);
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_loadu_ps(q[r] + p);
      for (int n = 0; n < N; ++n) acc[r][n] = _mm256_fmadd_ps(qv, kv[n], acc[r][n]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      float v = hsum(acc[r][n]);
      for (int64_t e = p; e < d; ++e) v = std::fma(q[r][e], load1<C>(rows[n] + e), v);
      s[r][j + n] = v * scale;
    }
}

// s[r][j0 + j] for keys j = 0..n-1 whose rows are base + j * stride: N keys at a time, the rest one by one.
template <Cache C, int R>
void scores_range(const float* const* q, const elem_t<C>* base, int64_t stride, int64_t n, int64_t d, float scale,
                  float* const* s, int64_t j0) {
  constexpr int N = R == 1 ? 8 : R == 2 ? 4 : 2;
  const elem_t<C>* rows[N];
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    for (int x = 0; x < N; ++x) rows[x] = base + (j + x) * stride;
    dot_block<C, R, N>(q, rows, d, scale, s, j0 + j);
  }
  for (; j < n; ++j) {
    rows[0] = base + j * stride;
    dot_block<C, R, 1>(q, rows, d, scale, s, j0 + j);
  }
}

// exp(x) for x <= 0 (softmax arguments), within 1.3 ulp (checked on every 37th float of [-87, 0]): x = n ln2 + r,
// |r| <= ln2/2, a degree-6 polynomial for e^r (Cephes' expf coefficients), times 2^n built in the exponent field.
// x < -87 gives 0 (e^-87 ~ 1.6e-38 is nothing next to the max term, which is 1), so -inf padding gives exactly 0;
// NaN stays NaN.
inline __m256 exp_nonpos(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  // n is in [-126, 0] wherever the result is kept, so 2^n is a normal float.
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// acc[r][0..8*NV) += w[r][j] * rows_j[0..8*NV) for keys j = 0..n-1 (rows base + j * stride), j ascending.
template <Cache C, int R, int NV>
inline void accumulate_v(const float* const* w, int64_t j0, const elem_t<C>* base, int64_t stride, int64_t n,
                         __m256 (&acc)[R][NV]) {
  for (int64_t j = 0; j < n; ++j) {
    const elem_t<C>* row = base + j * stride;
    __m256 v[NV];
    for (int c = 0; c < NV; ++c) v[c] = load8<C>(row + 8 * c);
    for (int r = 0; r < R; ++r) {
      const __m256 wj = _mm256_broadcast_ss(w[r] + j0 + j);
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_fmadd_ps(wj, v[c], acc[r][c]);
    }
  }
}

struct KvView {
  const void* cache = nullptr;  // [Hkv, C, D], cache dtype (a pooled cache: the slot's)
  const void* fresh = nullptr;  // [T, Hkv, D], rounded to the cache dtype (pooled: from the run's first row)
  const float* cache_scale = nullptr;  // i8: [Hkv, C]
  const float* fresh_scale = nullptr;  // i8: [T, Hkv]
};

struct Geometry {
  int64_t t_n, hq, hkv, ctx, d, p0, group;
};

// Columns [d0, d0 + 8 NV) of the R outputs: the V rows of keys 0..n-1 (cache rows before p0, then new rows).
template <Cache C, int R, int NV>
void weighted_block(const Geometry& g, const KvView& v, int64_t kvh, int64_t n, int64_t d0, const float* const* w,
                    const float* inv, float* const* out) {
  __m256 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t n_cache = std::min(n, g.p0);
  accumulate_v<C, R, NV>(w, 0, static_cast<const elem_t<C>*>(v.cache) + kvh * g.ctx * g.d + d0, g.d, n_cache, acc);
  accumulate_v<C, R, NV>(w, n_cache, static_cast<const elem_t<C>*>(v.fresh) + kvh * g.d + d0, g.hkv * g.d,
                         n - n_cache, acc);
  for (int r = 0; r < R; ++r) {
    const __m256 iv = _mm256_set1_ps(inv[r]);
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(out[r] + d0 + 8 * c, _mm256_mul_ps(acc[r][c], iv));
  }
}

// exp(s_j - max) in place for j < npad (a multiple of 8, padded with -inf); returns 1 / sum, the sum taken in 8
// lanes (lane = j mod 8, j ascending) and then across lanes in a fixed order.
inline float softmax_numerators(float* s, int64_t npad) {
  __m256 mx = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < npad; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const __m256 mv = _mm256_set1_ps(_mm_cvtss_f32(m4));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = 0; j < npad; j += 8) {
    const __m256 e = exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  return 1.0f / hsum(sum);
}

// Token t, q heads h0 .. h0+R-1, all reading kv head kvh: they share each K and V row as it is loaded. The bits of
// one head's output do not depend on R (see dot_block and accumulate_v), so the head split is free to change.
template <Cache C, int R>
void attend(const Geometry& g, const float* qs, const KvView& k, const KvView& v, int64_t t, int64_t h0, float scale,
            float* ys) {
  using E = elem_t<C>;
  const int64_t kvh = h0 / g.group;
  const int64_t n = g.p0 + t + 1;  // keys 0..P
  const int64_t n_cache = std::min(n, g.p0);
  const int64_t npad = (n + 7) / 8 * 8;
  thread_local std::vector<float> s_buf;
  if (static_cast<int64_t>(s_buf.size()) < R * npad) s_buf.resize(static_cast<size_t>(R * npad));
  const float* q[R];
  float* s[R];
  float* out[R];
  float inv[R];
  for (int r = 0; r < R; ++r) {
    q[r] = qs + (t * g.hq + h0 + r) * g.d;
    out[r] = ys + (t * g.hq + h0 + r) * g.d;
    s[r] = s_buf.data() + r * npad;
  }
  // 1. scores
  scores_range<C, R>(q, static_cast<const E*>(k.cache) + kvh * g.ctx * g.d, g.d, n_cache, g.d, scale, s, 0);
  scores_range<C, R>(q, static_cast<const E*>(k.fresh) + kvh * g.d, g.hkv * g.d, n - n_cache, g.d, scale, s,
                     n_cache);
  // i8: j's key row scale, after the dot product.
  const auto row_scale = [&](const KvView& x, int64_t j) {
    return j < g.p0 ? x.cache_scale[kvh * g.ctx + j] : x.fresh_scale[(j - g.p0) * g.hkv + kvh];
  };
  if constexpr (C == Cache::i8)
    for (int64_t j = 0; j < n; ++j) {
      const float ks = row_scale(k, j);
      for (int r = 0; r < R; ++r) s[r][j] *= ks;
    }
  // 2. softmax numerators, 1 / their sum
  for (int r = 0; r < R; ++r) {
    for (int64_t j = n; j < npad; ++j) s[r][j] = -INFINITY;
    inv[r] = softmax_numerators(s[r], npad);
  }
  // i8: the weight of V row j is e_j times its scale.
  if constexpr (C == Cache::i8)
    for (int64_t j = 0; j < n; ++j) {
      const float vs = row_scale(v, j);
      for (int r = 0; r < R; ++r) s[r][j] *= vs;
    }
  // 3. weighted sum of V: as many columns at a time as registers allow, then 8 at a time, then one by one
  constexpr int nv = R == 1 ? 8 : R == 2 ? 4 : 2;
  int64_t d0 = 0;
  for (; d0 + 8 * nv <= g.d; d0 += 8 * nv) weighted_block<C, R, nv>(g, v, kvh, n, d0, s, inv, out);
  for (; d0 + 8 <= g.d; d0 += 8) weighted_block<C, R, 1>(g, v, kvh, n, d0, s, inv, out);
  const E* vcache = static_cast<const E*>(v.cache) + kvh * g.ctx * g.d;
  const E* vfresh = static_cast<const E*>(v.fresh) + kvh * g.d;
  for (int r = 0; r < R; ++r)
    for (int64_t e = d0; e < g.d; ++e) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n_cache; ++j) acc = std::fma(s[r][j], load1<C>(vcache + j * g.d + e), acc);
      for (int64_t j = n_cache; j < n; ++j)
        acc = std::fma(s[r][j], load1<C>(vfresh + (j - g.p0) * g.hkv * g.d + e), acc);
      out[r][e] = acc * inv[r];
    }
}

// New rows in the cache dtype (f32: k_new itself). Same rounding (nearest even) as base/half.h, which is how a
// caller stores them into the cache afterwards; i8: llm_ops::kv_quantize_row per row, the scales into *scales.
const void* fresh_rows(KernelContext& k, const Tensor& x, DType cdt, const float** scales) {
  const float* src = x.data<float>();
  if (cdt == DType::f32) return src;
  const int64_t n = x.numel();
  if (cdt == DType::i8) {
    const int64_t d = x.shape()[2], nrows = n / d;
    auto* sc = static_cast<float*>(k.scratch(static_cast<size_t>(nrows) * sizeof(float)));
    auto* dst = static_cast<int8_t*>(k.scratch(static_cast<size_t>(n)));
    for (int64_t r = 0; r < nrows; ++r) sc[r] = llm_ops::kv_quantize_row(src + r * d, d, dst + r * d);
    *scales = sc;
    return dst;
  }
  auto* dst = static_cast<uint16_t*>(k.scratch(static_cast<size_t>(n) * sizeof(uint16_t)));
  if (cdt == DType::bf16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16_bits(src[i]);
  } else {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) dst[i] = float_to_half_bits(src[i]);
  }
  return dst;
}

void attention_kv_kernel(KernelContext& k) {
  const Tensor& q = k.in(0);
  const Tensor& kc = k.in(1);
  const Tensor& vc = k.in(2);
  const Tensor& pos = k.in(5);
  const bool pooled = kc.shape().size() == 4;  // [S, Hkv, C, D] with slots i64 [T] as the last input
  const size_t lead = pooled ? 1 : 0;
  Geometry g;
  g.t_n = q.shape()[0];
  g.hq = q.shape()[1];
  g.d = q.shape()[2];
  g.hkv = kc.shape()[lead];
  g.ctx = kc.shape()[lead + 1];
  g.group = g.hq / g.hkv;
  g.p0 = 0;
  if (g.t_n == 0) return;
  const int64_t n_slots = pooled ? kc.shape()[0] : 1;
  const std::vector<llm_ops::AttentionRun> runs = llm_ops::attention_runs(
      pos.data<int64_t>(), pooled ? k.in(k.num_inputs() - 1).data<int64_t>() : nullptr, g.t_n, n_slots, g.ctx);
  if (g.d == 0 || g.hq == 0) return;
  const DType cdt = kc.dtype();
  const void* fresh_k = nullptr;
  const void* fresh_v = nullptr;
  const float* fresh_ks = nullptr;
  const float* fresh_vs = nullptr;
  fresh_k = fresh_rows(k, k.in(3), cdt, &fresh_ks);
  fresh_v = fresh_rows(k, k.in(4), cdt, &fresh_vs);
  // One view of the cache and the new rows per run: the slot's [Hkv, C, D] cache and the run's first new row, so
  // a token of a run is computed exactly as token (t - first) of a single-cache call with p0 = the run's p0.
  const int64_t esize = static_cast<int64_t>(dtype_size(cdt));
  const int64_t slot_elems = g.hkv * g.ctx * g.d, slot_rows = g.hkv * g.ctx;
  std::vector<KvView> kvs(runs.size()), vvs(runs.size());
  std::vector<int64_t> run_of(static_cast<size_t>(g.t_n));
  for (size_t r = 0; r < runs.size(); ++r) {
    const llm_ops::AttentionRun& run = runs[r];
    for (int64_t t = run.first; t < run.first + run.count; ++t) run_of[static_cast<size_t>(t)] = static_cast<int64_t>(r);
    if (run.slot < 0) continue;
    const int64_t s = run.slot;
    kvs[r].cache = static_cast<const uint8_t*>(kc.raw_data()) + s * slot_elems * esize;
    vvs[r].cache = static_cast<const uint8_t*>(vc.raw_data()) + s * slot_elems * esize;
    kvs[r].fresh = static_cast<const uint8_t*>(fresh_k) + run.first * g.hkv * g.d * esize;
    vvs[r].fresh = static_cast<const uint8_t*>(fresh_v) + run.first * g.hkv * g.d * esize;
    if (cdt == DType::i8) {
      kvs[r].cache_scale = k.in(6).data<float>() + s * slot_rows;
      vvs[r].cache_scale = k.in(7).data<float>() + s * slot_rows;
      kvs[r].fresh_scale = fresh_ks + run.first * g.hkv;
      vvs[r].fresh_scale = fresh_vs + run.first * g.hkv;
    }
  }
  const float scale = static_cast<float>(k.attrs.f("scale"));
  float* ys = k.out(0).data<float>();
  // Tasks: (token, kv head, slice of that head's q heads), slices of at most 4 heads, as even as possible (a
  // group of 7 is 4 + 3). The split depends only on the shapes.
  const int64_t slices = (g.group + 3) / 4;
  const auto run = [&](auto tag) {
    constexpr Cache C = decltype(tag)::value;
    parallel_for(g.t_n * g.hkv * slices, [&](int64_t task) {
      const int64_t t = task / (g.hkv * slices), kvh = task / slices % g.hkv, sl = task % slices;
      const int64_t base = g.group / slices, extra = g.group % slices;
      const int64_t h0 = kvh * g.group + sl * base + std::min(sl, extra);
      const int64_t nh = base + (sl < extra ? 1 : 0);
      const auto r = static_cast<size_t>(run_of[static_cast<size_t>(t)]);
      const llm_ops::AttentionRun& rn = runs[r];
      if (rn.slot < 0) {  // padding row
        std::memset(ys + (t * g.hq + h0) * g.d, 0, static_cast<size_t>(nh * g.d) * sizeof(float));
        return;
      }
      Geometry gr = g;
      gr.p0 = rn.p0;
      const int64_t tl = t - rn.first;  // the token's index within its sequence's new rows
      const float* qs = q.data<float>() + rn.first * g.hq * g.d;
      float* yr = ys + rn.first * g.hq * g.d;
      switch (nh) {
        case 1: attend<C, 1>(gr, qs, kvs[r], vvs[r], tl, h0, scale, yr); break;
        case 2: attend<C, 2>(gr, qs, kvs[r], vvs[r], tl, h0, scale, yr); break;
        case 3: attend<C, 3>(gr, qs, kvs[r], vvs[r], tl, h0, scale, yr); break;
        default: attend<C, 4>(gr, qs, kvs[r], vvs[r], tl, h0, scale, yr); break;
      }
    });
  };
  switch (cdt) {
    case DType::f16: run(std::integral_constant<Cache, Cache::f16>{}); break;
    case DType::bf16: run(std::integral_constant<Cache, Cache::bf16>{}); break;
    case DType::i8: run(std::integral_constant<Cache, Cache::i8>{}); break;
    default: run(std::integral_constant<Cache, Cache::f32>{}); break;
  }
}

}  // namespace

void register_llm_attention(KernelRegistry& r) {
  r.add(Backend::cpu, "rope"_op, DTypeSet{DType::f32}, rope_kernel, "avx2");
  r.add(Backend::cpu, "attention_kv"_op, DTypeSet{DType::f32}, attention_kv_kernel, "avx2");
}

}  // namespace spore::cpu
