// CPU kernels of linear_blockq and embed_blockq (ops/llm_ops.h), AVX2 + FMA + F16C (the build's x86-64-v3
// baseline). The reference backend (reference/blockq.cpp) holds the definition; these differ from it only in
// summing in f32.
//
// Batch invariance. Every y[m, n] is computed by one fixed sequence of operations that depends only on K:
//   quant formats  acc (8 f32 lanes) = 0; per block b in order: acc = fma(f32(int32 lanes of the block's 32 integer
//                  products, 4 consecutive products per lane), broadcast(dw_b * dx_b), acc);
//   f32/f16/bf16   acc (8 lanes) = 0; per 8 values in order: acc = fma(x, w, acc); the last K % 8 values are added
//                  after the horizontal sum, one std::fma each;
// then s = hsum(acc) (lane i + lane i+4, then i + i+2, then 0 + 1) and y = s + bias[n].
// A register tile of R rows x C columns (tile<R, C>) runs exactly this sequence for each of its R*C elements, so
// the tile shape, which rows share a tile (the number of rows M), how the columns are chunked into tasks and the
// number of threads change nothing in the bits: M = 1 (decode) and M = 512 (prefill) give the same row. Work is
// split over N only (never over K), in chunks whose size depends on the row size only, never on the threads.
// Decode (M = 1) runs 1 x 4 tiles whose 4 columns lie a quarter of the task's chunk apart: 4 independent FMA chains
// and 4 weight streams in separate pages (4 adjacent short rows made the hardware prefetchers several times slower
// on 1 KB rows). Prefill runs 4 x 2 (quant) or 4 x 3 (float) tiles, each weight block loaded once for 4 rows.
//
// The integer dot of a q8_0 block is llama.cpp's AVX2 form: maddubs(|w|, sign(x, w)) (u8 x s8 -> pairs in i16,
// exact: at most 2 * 128 * 127) then madd with ones (-> 8 x i32); q4_0 uses the nibbles as the unsigned operand and
// subtracts 8 * sum(x) per lane (block_dot). Activations are quantized once per call into scratch (int8 rows, f32
// block scales, and for q4_0 the lane sums), f16/bf16 activations rounded once into an f32 scratch row.
//
// Not done: AVX-512 / AVX-512 VNNI variants (vpdpbusd would replace maddubs + madd): the development machine has
// AVX2 only, so they could not be tested. They would keep the same per-element sequence only if they keep 8 lanes
// per block; a 16-lane (two blocks per register) variant changes the summation order and so the bits across ISAs.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/families.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "ops/llm_ops.h"

namespace spore::cpu {
namespace {

using llm_ops::WeightFormat;
using llm_ops::qk;

WeightFormat format_of(const KernelContext& k) {
  const std::string& s = k.attrs.s("format");
  auto f = llm_ops::parse_format(s);
  SPORE_CHECK(f.has_value(), ErrorCode::invalid_argument, "format '{}' is not one of f32, f16, bf16, q8_0, q4_0", s);
  return *f;
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The one horizontal sum every output uses.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---- activations -------------------------------------------------------------------------------------------------

// One row of K (a multiple of 32) values to Q8_0, as llama.cpp's x86 quantize_row_q8_0 (the one it runs on this
// hardware): per block d = amax / 127, q = x * (127 / amax) rounded to nearest, ties to even; q goes to q[K], the f32 value of the f16-rounded d to d[K / 32] and,
// when s8 is given (q4_0 weights), 8 * the sums of 4 consecutive q to s8[K / 4] (see block_dot).
void quantize_row_q8_0(const float* x, int64_t k, int8_t* q, float* d, int32_t* s8) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < k / qk; ++b) {
    const float* xb = x + b * qk;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                             _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float db = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i iv[4];
    for (int i = 0; i < 4; ++i)
      iv[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    // packs interleave the 128-bit lanes; the permute puts the 8 groups of 4 back in order.
    const __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]), p16b = _mm256_packs_epi32(iv[2], iv[3]);
    const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * qk), p8);
    if (s8) {
      const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p8), _mm256_set1_epi16(1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(s8 + b * 8), _mm256_slli_epi32(sums, 3));
    }
    d[b] = half_bits_to_float(float_to_half_bits(db));
  }
}

// x rounded to f16 (nearest even, F16C) and back to f32.
void round_row_f16(const float* x, float* y, int64_t k) {
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  for (; i < k; ++i) y[i] = half_bits_to_float(float_to_half_bits(x[i]));
}

// x rounded to bf16 (nearest even; nan stays a quiet nan, as base/half.h) and back to f32.
void round_row_bf16(const float* x, float* y, int64_t k) {
  int64_t i = 0;
  const __m256i lsb = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), hi = _mm256_set1_epi32(-65536);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
                quiet = _mm256_set1_epi32(0x00400000);
  for (; i + 8 <= k; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), lsb)));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i v = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), is_nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_and_si256(v, hi));
  }
  for (; i < k; ++i) y[i] = bf16_bits_to_float(float_to_bf16_bits(x[i]));
}

// ---- weights -----------------------------------------------------------------------------------------------------

// The 32 values of a weight block as int8 (Q4_0: nibble - 8; low nibbles are values 0..15, high ones 16..31).
template <WeightFormat F>
inline __m256i load_block(const uint8_t* blk) {
  if constexpr (F == WeightFormat::q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
    return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
  }
}

template <WeightFormat F>
constexpr int64_t block_bytes() {
  return F == WeightFormat::q8_0 ? llm_ops::q8_0_block_bytes : llm_ops::q4_0_block_bytes;
}

// 8 weights as f32.
template <WeightFormat F>
inline __m256 load8(const uint8_t* p) {
  if constexpr (F == WeightFormat::f32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (F == WeightFormat::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
}

template <WeightFormat F>
inline float load1(const uint8_t* p) {
  if constexpr (F == WeightFormat::f32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  } else if constexpr (F == WeightFormat::f16) {
    return _cvtsh_ss(load_u16(p));
  } else {
    return bf16_bits_to_float(load_u16(p));
  }
}

// ---- tiles -------------------------------------------------------------------------------------------------------

// What a tile reads. Rows: prepared activations (x_f: f32 rows of k values; x_q/x_d: q8_0 rows and block scales).
// Columns: weight rows of w_row bytes. Output y[m * ldy + n].
struct Problem {
  const float* x_f = nullptr;
  const int8_t* x_q = nullptr;
  const float* x_d = nullptr;
  const int32_t* x_s = nullptr;  // q4_0 only: per block, 8 lanes of 8 * (sum of 4 consecutive q), see block_dot
  const uint8_t* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t k = 0, w_row = 0, ldy = 0;
};

// A weight block prepared for the integer dot with any number of activation blocks.
//   q8_0: a = |w| (-128 becomes 128, right as the unsigned operand of maddubs), w = w; per x block: sign(x, w)
//         (x is in [-127, 127], so sign() never has to negate -128).
//   q4_0: a = the nibbles 0..15 as unsigned bytes; the dot is sum(nibble * x) - 8 * sum(x), the second term
//         precomputed per activation block in the same 4-value lanes (xs8), so no sign trick is needed.
// Either way lane i of the result is the exact integer sum of w_j * x_j over j = 4i..4i+3.
struct WBlock {
  __m256i a, w;
};

template <WeightFormat F>
inline WBlock prepare_block(const uint8_t* blk) {
  if constexpr (F == WeightFormat::q8_0) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    return {_mm256_abs_epi8(w), w};
  } else {
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    return {_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f)), _mm256_setzero_si256()};
  }
}

template <WeightFormat F>
inline __m256i block_dot(const WBlock& wb, __m256i xv, const int32_t* xs8, __m256i ones) {
  if constexpr (F == WeightFormat::q8_0) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wb.a, _mm256_sign_epi8(xv, wb.w)), ones);
  } else {
    return _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wb.a, xv), ones),
                            _mm256_load_si256(reinterpret_cast<const __m256i*>(xs8)));
  }
}

// Rows m0..m0+R-1 x columns n0, n0 + cs, ..., n0 + (C-1) * cs of a quant format. The `#pragma GCC unroll` lines
// unroll the small tile loops fully so acc[R][C] lives in registers (without them GCC kept it on the stack).
template <WeightFormat F, int R, int C>
void tile_q(const Problem& p, int64_t m0, int64_t n0, int64_t cs) {
  constexpr int64_t bb = block_bytes<F>();
  const int64_t nb = p.k / qk;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const uint8_t* wc[C];
  for (int c = 0; c < C; ++c) wc[c] = p.w + (n0 + c * cs) * p.w_row;
  const int8_t* xr[R];
  const float* dr[R];
  const int32_t* sr[R];
  for (int r = 0; r < R; ++r) {
    xr[r] = p.x_q + (m0 + r) * p.k;
    dr[r] = p.x_d + (m0 + r) * nb;
    sr[r] = p.x_s ? p.x_s + (m0 + r) * nb * 8 : nullptr;
  }
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (R == 1) {
      // Decode: one column at a time, so few registers are live (the same operations as below, in the same order
      // per element).
      const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(xr[0] + b * qk));
      const __m256 dx = _mm256_broadcast_ss(dr[0] + b);
      const int32_t* xs = sr[0] ? sr[0] + b * 8 : nullptr;
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const uint8_t* blk = wc[c] + b * bb;
        const __m256 dw = _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(load_u16(blk))));
        const __m256 dot = _mm256_cvtepi32_ps(block_dot<F>(prepare_block<F>(blk), xv, xs, ones));
        acc[0][c] = _mm256_fmadd_ps(dot, _mm256_mul_ps(dw, dx), acc[0][c]);
      }
    } else {
      WBlock wb[C];
      alignas(16) float dw[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        const uint8_t* blk = wc[c] + b * bb;
        wb[c] = prepare_block<F>(blk);
        dw[c] = _cvtsh_ss(load_u16(blk));
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(xr[r] + b * qk));
        const __m256 dx = _mm256_broadcast_ss(dr[r] + b);
        const int32_t* xs = sr[r] ? sr[r] + b * 8 : nullptr;
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256 dot = _mm256_cvtepi32_ps(block_dot<F>(wb[c], xv, xs, ones));
          acc[r][c] = _mm256_fmadd_ps(dot, _mm256_mul_ps(_mm256_broadcast_ss(&dw[c]), dx), acc[r][c]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      float s = hsum(acc[r][c]);
      if (p.bias) s += p.bias[n0 + c * cs];
      p.y[(m0 + r) * p.ldy + n0 + c * cs] = s;
    }
}

// Rows x columns of a float format (f32, f16, bf16 weights; x already rounded to the weight dtype).
template <WeightFormat F, int R, int C>
void tile_f(const Problem& p, int64_t m0, int64_t n0, int64_t cs) {
  constexpr int64_t es = F == WeightFormat::f32 ? 4 : 2;
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const uint8_t* wc[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) wc[c] = p.w + (n0 + c * cs) * p.w_row;
  const float* xr[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) xr[r] = p.x_f + (m0 + r) * p.k;
  const int64_t k8 = p.k / 8 * 8;
  for (int64_t i = 0; i < k8; i += 8) {
    __m256 wv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) wv[c] = load8<F>(wc[c] + i * es);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(xr[r] + i);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      float s = hsum(acc[r][c]);
      for (int64_t i = k8; i < p.k; ++i) s = std::fma(xr[r][i], load1<F>(wc[c] + i * es), s);
      if (p.bias) s += p.bias[n0 + c * cs];
      p.y[(m0 + r) * p.ldy + n0 + c * cs] = s;
    }
}

template <WeightFormat F, int R, int C>
inline void tile(const Problem& p, int64_t m0, int64_t n0, int64_t cs = 1) {
  if constexpr (F == WeightFormat::q8_0 || F == WeightFormat::q4_0) tile_q<F, R, C>(p, m0, n0, cs);
  else tile_f<F, R, C>(p, m0, n0, cs);
}

// Columns [n_lo, n_hi) x all rows. Prefill tiles have as many accumulators as AVX2's 16 registers hold next to the
// operands; the row tile is the outer loop, so the chunk's weights stay in L2 while each 4-row block of activations
// sits in L1.
template <WeightFormat F>
void run_columns(const Problem& p, int64_t m_lo, int64_t m_hi, int64_t n_lo, int64_t n_hi) {
  auto cols = [&]<int R>(int64_t m0) {
    int64_t n = n_lo;
    if constexpr (R == 1) {
      // Decode: 4 columns a quarter of the chunk apart, so the 4 weight streams run through separate pages.
      const int64_t q = (n_hi - n_lo) / 4;
      for (int64_t i = 0; i < q; ++i) tile<F, 1, 4>(p, m0, n_lo + i, q);
      n = n_lo + 4 * q;
    } else {
      constexpr bool quant = F == WeightFormat::q8_0 || F == WeightFormat::q4_0;
      constexpr int CT = quant ? 2 : 3;
      for (; n + CT <= n_hi; n += CT) tile<F, R, CT>(p, m0, n);
    }
    switch (n_hi - n) {
      case 3: tile<F, R, 3>(p, m0, n); break;
      case 2: tile<F, R, 2>(p, m0, n); break;
      case 1: tile<F, R, 1>(p, m0, n); break;
      default: break;
    }
  };
  int64_t r = m_lo;
  for (; r + 4 <= m_hi; r += 4) cols.template operator()<4>(r);
  switch (m_hi - r) {
    case 3: cols.template operator()<3>(r); break;
    case 2: cols.template operator()<2>(r); break;
    case 1: cols.template operator()<1>(r); break;
    default: break;
  }
}

// Columns per task: about 192 KiB of weights (so a prefill task's weights stay in L2), a multiple of 12, at least 12
// and at most 384. Depends on the row size only; the bits do not depend on it at all.
int64_t column_grain(int64_t w_row) {
  const int64_t g = std::clamp<int64_t>((192 << 10) / std::max<int64_t>(w_row, 1), 12, 384);
  return g / 12 * 12;
}

// Tasks: column chunks of column_grain, made smaller when that gives fewer than 4 tasks per thread (decode of the
// 896-row attention matrices had 5 chunks for 2 threads), and for prefill also row blocks (multiples of 4) when the
// columns alone are too few (the 128-row K/V projections ran on one thread). Which task computes an element never
// changes its bits (each element is one fixed sequence), so the split may depend on the thread count.
template <WeightFormat F>
void run(const Problem& p, int64_t m, int64_t n) {
  const int64_t want = 4 * static_cast<int64_t>(num_threads());
  int64_t grain = column_grain(p.w_row);
  if (num_chunks(n, grain) < want) grain = std::max<int64_t>(8, (n + want - 1) / want);
  const int64_t nc = num_chunks(n, grain);
  int64_t mrows = m;
  if (m > 4 && nc < want) {
    const int64_t parts = (want + nc - 1) / nc;
    mrows = std::max<int64_t>(4, ((m + parts - 1) / parts + 3) / 4 * 4);
  }
  const int64_t mc = num_chunks(m, mrows);
  parallel_for(nc * mc, [&](int64_t t) {
    const int64_t i = t % nc, j = t / nc;
    run_columns<F>(p, j * mrows, std::min(m, (j + 1) * mrows), i * grain, std::min(n, (i + 1) * grain));
  });
}

void linear_blockq_kernel(KernelContext& k) {
  const WeightFormat f = format_of(k);
  const Tensor& x = k.in(0);
  const Tensor& w = k.in(1);
  const int64_t n = w.dim(0);
  const int64_t kk = x.dim(-1);
  int64_t m = 1;
  for (int i = 0; i + 1 < x.rank(); ++i) m *= x.dim(i);
  if (m == 0 || n == 0) return;
  Problem p;
  p.w = static_cast<const uint8_t*>(w.raw_data());
  p.bias = k.num_inputs() > 2 ? k.in(2).data<float>() : nullptr;
  p.y = k.out(0).data<float>();
  p.k = kk;
  p.w_row = llm_ops::row_bytes(f, kk);
  p.ldy = n;
  SPORE_CHECK(w.dim(1) * static_cast<int64_t>(dtype_size(w.dtype())) == p.w_row, ErrorCode::internal,
              "linear_blockq: {} weight rows of {} bytes, expected {} for K={}", llm_ops::format_name(f),
              w.dim(1) * static_cast<int64_t>(dtype_size(w.dtype())), p.w_row, kk);
  const float* xp = x.data<float>();
  // Activations are prepared once per call, per row (so a row's prepared values never depend on the other rows).
  const size_t rows = static_cast<size_t>(m), kz = static_cast<size_t>(kk);
  switch (f) {
    case WeightFormat::q8_0:
    case WeightFormat::q4_0: {
      auto* q = static_cast<int8_t*>(k.scratch(std::max<size_t>(rows * kz, 1)));
      auto* d = static_cast<float*>(k.scratch(std::max<size_t>(rows * kz / qk * sizeof(float), 1)));
      int32_t* s8 = nullptr;
      if (f == WeightFormat::q4_0) s8 = static_cast<int32_t*>(k.scratch(std::max<size_t>(rows * kz / 4 * sizeof(int32_t), 1)));
      parallel_for(m, [&](int64_t r) {
        quantize_row_q8_0(xp + r * kk, kk, q + r * kk, d + r * (kk / qk), s8 ? s8 + r * (kk / 4) : nullptr);
      });
      p.x_q = q;
      p.x_d = d;
      p.x_s = s8;
      break;
    }
    case WeightFormat::f16:
    case WeightFormat::bf16: {
      auto* xr = static_cast<float*>(k.scratch(std::max<size_t>(rows * kz * sizeof(float), 1)));
      const bool half = f == WeightFormat::f16;
      parallel_for(m, [&](int64_t r) {
        (half ? round_row_f16 : round_row_bf16)(xp + r * kk, xr + r * kk, kk);
      });
      p.x_f = xr;
      break;
    }
    case WeightFormat::f32: p.x_f = xp; break;
  }
  switch (f) {
    case WeightFormat::f32: run<WeightFormat::f32>(p, m, n); break;
    case WeightFormat::f16: run<WeightFormat::f16>(p, m, n); break;
    case WeightFormat::bf16: run<WeightFormat::bf16>(p, m, n); break;
    case WeightFormat::q8_0: run<WeightFormat::q8_0>(p, m, n); break;
    case WeightFormat::q4_0: run<WeightFormat::q4_0>(p, m, n); break;
  }
}

// ---- embed -------------------------------------------------------------------------------------------------------

// One table row of K values to f32 (exact: d * q fits f32's mantissa).
void dequantize_row(WeightFormat f, const uint8_t* src, float* dst, int64_t k) {
  switch (f) {
    case WeightFormat::f32: std::memcpy(dst, src, static_cast<size_t>(k) * sizeof(float)); return;
    case WeightFormat::f16: {
      int64_t i = 0;
      for (; i + 8 <= k; i += 8) _mm256_storeu_ps(dst + i, load8<WeightFormat::f16>(src + 2 * i));
      for (; i < k; ++i) dst[i] = load1<WeightFormat::f16>(src + 2 * i);
      return;
    }
    case WeightFormat::bf16: {
      int64_t i = 0;
      for (; i + 8 <= k; i += 8) _mm256_storeu_ps(dst + i, load8<WeightFormat::bf16>(src + 2 * i));
      for (; i < k; ++i) dst[i] = load1<WeightFormat::bf16>(src + 2 * i);
      return;
    }
    case WeightFormat::q8_0:
    case WeightFormat::q4_0: {
      const int64_t bb = f == WeightFormat::q8_0 ? llm_ops::q8_0_block_bytes : llm_ops::q4_0_block_bytes;
      for (int64_t b = 0; b < k / qk; ++b) {
        const uint8_t* blk = src + b * bb;
        const __m256i v = f == WeightFormat::q8_0 ? load_block<WeightFormat::q8_0>(blk) : load_block<WeightFormat::q4_0>(blk);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(blk)));
        const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int i = 0; i < 4; ++i)
          _mm256_storeu_ps(dst + b * qk + 8 * i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[i]))));
      }
      return;
    }
  }
}

void embed_blockq_kernel(KernelContext& k) {
  const WeightFormat f = format_of(k);
  const Tensor& w = k.in(0);
  const Tensor& ids = k.in(1);
  const int64_t v = w.dim(0);
  const int64_t kk = k.out(0).dim(-1);
  const int64_t w_row = llm_ops::row_bytes(f, kk);
  const int64_t count = ids.numel();
  const bool i64 = ids.dtype() == DType::i64;
  auto id_at = [&](int64_t i) -> int64_t { return i64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i]; };
  // All ids are checked before any work, so an error leaves no half-written output behind a thread.
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = id_at(i);
    SPORE_CHECK(id >= 0 && id < v, ErrorCode::invalid_argument,
                "embed_blockq: id {} at index {} is out of range for a table of {} rows", id, i, v);
  }
  const auto* wp = static_cast<const uint8_t*>(w.raw_data());
  float* y = k.out(0).data<float>();
  constexpr int64_t grain = 16;
  parallel_for(num_chunks(count, grain), [&](int64_t t) {
    for (int64_t i = t * grain; i < std::min(count, (t + 1) * grain); ++i)
      dequantize_row(f, wp + id_at(i) * w_row, y + i * kk, kk);
  });
}

}  // namespace

void register_blockq(KernelRegistry& r) {
  r.add(Backend::cpu, llm_ops::linear_blockq(), DTypeSet{DType::f32}, linear_blockq_kernel, "avx2");
  r.add(Backend::cpu, llm_ops::embed_blockq(), DTypeSet{DType::f32, DType::f16, DType::bf16, DType::u8},
        embed_blockq_kernel, "avx2");
}

}  // namespace spore::cpu
