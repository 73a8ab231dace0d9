// The tiles of gemm_bf16.h, built for AVX512_BF16 inside `#pragma GCC target`, chosen at run time by gemm_bf16.cpp.
// Every header is included before the pragma, so only the functions defined here are built for that ISA; no
// standard-library templates are used below (a copy instantiated here could be the one the linker keeps elsewhere).
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_linear.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512bf16")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace spore::cpu::detail {
namespace {

constexpr int kMR = 12;                           // rows per tile: 24 accumulators + 2 weight vectors
constexpr int64_t kGroupPairs = kGemmGroupK / 2;  // k pairs per group (gemm_linear.h's grouping)
constexpr int64_t kPanelPair = kBf16NR * 2;       // bf16 per k pair of a panel

// x[r][2q], x[r][2q+1] as one 32-bit lane pattern (the low half is the even k, as vdpbf16ps pairs them).
inline __m512bh pair_of(const uint16_t* xr, int64_t q) {
  uint32_t v;
  __builtin_memcpy(&v, xr + 2 * q, sizeof v);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(v));
}

// f32 -> bf16 bits, round to nearest even, NaN quieted: base/half.h's float_to_bf16_bits on 16 lanes.
inline __m256i to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

inline uint16_t to_bf16_scalar(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// R rows from r0 x the 32 columns of panel p (cols = how many of them exist).
template <int R>
inline void tile(const GemmBf16Job& j, int64_t r0, int64_t p, int64_t cols) {
  __m512 acc[R][2];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const int64_t pairs = (j.k + 1) / 2, whole = j.k / 2;  // an odd K's last pair reads x[K-1] alone
  const uint16_t* wp = j.wp + p * pairs * kPanelPair;
  const uint16_t* xr = j.x + r0 * j.k;
  alignas(64) float tot[R][kBf16NR];
  for (int64_t q0 = 0; q0 < pairs; q0 += kGroupPairs) {
    const int64_t q1 = pairs - q0 < kGroupPairs ? pairs : q0 + kGroupPairs;
    if (q0 > 0) {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const bool first = q0 == kGroupPairs;
        _mm512_store_ps(tot[r], first ? acc[r][0] : _mm512_add_ps(_mm512_load_ps(tot[r]), acc[r][0]));
        _mm512_store_ps(tot[r] + 16, first ? acc[r][1] : _mm512_add_ps(_mm512_load_ps(tot[r] + 16), acc[r][1]));
        acc[r][0] = acc[r][1] = _mm512_setzero_ps();
      }
    }
    const int64_t qw = q1 < whole ? q1 : whole;
    for (int64_t q = q0; q < qw; ++q) {
      const __m512bh b0 = (__m512bh)_mm512_loadu_si512(wp + q * kPanelPair);
      const __m512bh b1 = (__m512bh)_mm512_loadu_si512(wp + q * kPanelPair + 32);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m512bh a = pair_of(xr + r * j.k, q);
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
      }
    }
    if (qw < q1) {  // the odd K's last pair: (x[K-1], 0) - never a read past the row
      const __m512bh b0 = (__m512bh)_mm512_loadu_si512(wp + qw * kPanelPair);
      const __m512bh b1 = (__m512bh)_mm512_loadu_si512(wp + qw * kPanelPair + 32);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m512bh a = (__m512bh)_mm512_set1_epi32(xr[r * j.k + 2 * qw]);
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
      }
    }
  }
  if (pairs > kGroupPairs) {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_add_ps(_mm512_load_ps(tot[r]), acc[r][0]);
      acc[r][1] = _mm512_add_ps(_mm512_load_ps(tot[r] + 16), acc[r][1]);
    }
  }
  const int64_t c0 = p * kBf16NR;
  if (cols == kBf16NR) {
    __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
    if (j.bias) {
      bias0 = _mm512_loadu_ps(j.bias + c0);
      bias1 = _mm512_loadu_ps(j.bias + c0 + 16);
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      uint16_t* yr = j.y + (r0 + r) * j.n + c0;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(yr),
                          to_bf16(j.bias ? _mm512_add_ps(acc[r][0], bias0) : acc[r][0]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(yr + 16),
                          to_bf16(j.bias ? _mm512_add_ps(acc[r][1], bias1) : acc[r][1]));
    }
  } else {  // the last, partial panel: through a buffer (the same additions and rounding, one value at a time)
    for (int r = 0; r < R; ++r) {
      alignas(64) float t[kBf16NR];
      _mm512_store_ps(t, acc[r][0]);
      _mm512_store_ps(t + 16, acc[r][1]);
      uint16_t* yr = j.y + (r0 + r) * j.n + c0;
      for (int64_t c = 0; c < cols; ++c) yr[c] = to_bf16_scalar(j.bias ? t[c] + j.bias[c0 + c] : t[c]);
    }
  }
}

void rows_impl(const GemmBf16Job& j, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t cols = j.n - p * kBf16NR < kBf16NR ? j.n - p * kBf16NR : kBf16NR;
    int64_t r = r0;
    for (; r + kMR <= r1; r += kMR) tile<kMR>(j, r, p, cols);
    switch (r1 - r) {
      case 0: break;
#define SPORE_GB_CASE(R) \
  case R: tile<R>(j, r, p, cols); break;
        SPORE_GB_CASE(1)
        SPORE_GB_CASE(2) SPORE_GB_CASE(3) SPORE_GB_CASE(4) SPORE_GB_CASE(5) SPORE_GB_CASE(6) SPORE_GB_CASE(7)
            SPORE_GB_CASE(8) SPORE_GB_CASE(9) SPORE_GB_CASE(10) SPORE_GB_CASE(11)
#undef SPORE_GB_CASE
                default : break;
    }
  }
}

}  // namespace

void gemm_bf16_rows_avx512(const GemmBf16Job& j, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
  rows_impl(j, r0, r1, p0, p1);
}

}  // namespace spore::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
