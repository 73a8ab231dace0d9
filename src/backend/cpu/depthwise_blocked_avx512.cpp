// The interior of a depthwise_blocked_conv row (depthwise_blocked.h) with AVX-512: each vector holds two
// neighbouring output pixels' 8 channels, so one fma does the work of two AVX2 ones. (Masked fmas at the image
// borders measured slower than the AVX2 border pixels: a branch per tap.) The taps and their order
// are the AVX2 kernel's (bias, then kernel row by kernel row, column by column), so the bits are the same. Built
// inside `#pragma GCC target` after every header, chosen at run time by depthwise_blocked.cpp.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/depthwise_blocked.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace spore::cpu::detail {
namespace {

// Pixels 0 and `step` of an input row (8 floats each) in one vector.
inline __m512 pair(const float* px, int64_t step) {
  if (step == 1) return _mm512_loadu_ps(px);
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(px)), _mm256_loadu_ps(px + step * 8), 1);
}

// 2P output pixels from ox0 of CB channel blocks, any kernel width, stride and dilation (the 3x3 / 5x5 convs at
// stride 1 or 2 take `pairs` below), each tap's pair loaded from memory.
template <int P, int CB>
inline void tile(const DepthwiseRow& r, int64_t ox0) {
  const DepthwiseBlockedConv& g = *r.g;
  const int64_t kw = g.kw, sw = g.sw, dw = g.dw;
  __m512 acc[CB][P];
  for (int k = 0; k < CB; ++k) {
    const __m512 b = r.bias ? _mm512_broadcast_f32x8(_mm256_loadu_ps(r.bias + k * 8)) : _mm512_setzero_ps();
    for (int p = 0; p < P; ++p) acc[k][p] = b;
  }
  const float* base = r.xc + (r.iy0 * g.w + ox0 * sw - g.pad_left) * 8;
  for (int64_t i = r.i0; i < r.i1; ++i) {
    const float* row = base + i * g.dh * g.w * 8;
    const float* wr = r.wc + i * kw * 8;
    for (int64_t j = 0; j < kw; ++j)
      for (int k = 0; k < CB; ++k) {
        const __m512 wv = _mm512_broadcast_f32x8(_mm256_loadu_ps(wr + k * r.wstride + j * 8));
        const float* px = row + k * r.xstride + j * dw * 8;
        for (int p = 0; p < P; ++p) acc[k][p] = _mm512_fmadd_ps(pair(px + p * 2 * sw * 8, sw), wv, acc[k][p]);
      }
  }
  for (int k = 0; k < CB; ++k)
    for (int p = 0; p < P; ++p) {
      __m512 v = acc[k][p];
      const int64_t at = k * r.ystride + (ox0 + 2 * p) * 8;
      if (r.res) v = _mm512_add_ps(v, _mm512_loadu_ps(r.res + at));
      if (r.relu) v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v, _mm512_setzero_ps());
      _mm512_storeu_ps(r.y + at, v);
    }
}

// One channel block: 8 pixels a tile; several: up to 8 accumulators (CB blocks x P pixel pairs).
template <int CB>
int64_t interior_cb(const DepthwiseRow& r, int64_t ox0, int64_t ox1) {
  int64_t ox = ox0;
  if constexpr (CB == 1) {
    for (; ox + 8 <= ox1; ox += 8) tile<4, 1>(r, ox);
    if (ox + 6 <= ox1) {
      tile<3, 1>(r, ox);
      ox += 6;
    } else if (ox + 4 <= ox1) {
      tile<2, 1>(r, ox);
      ox += 4;
    }
  } else {
    for (; ox + 4 <= ox1; ox += 4) tile<2, CB>(r, ox);
  }
  for (; ox + 2 <= ox1; ox += 2) tile<1, CB>(r, ox);
  return ox;
}

// Kernel width KW (3 or 5), stride SW (1 or 2), column dilation 1: P pixel pairs from ox0 of one channel block (at xc, wc,
// bias, y, res), each input pixel loaded once per kernel row and the taps' pairs formed in registers. Stride 1: input
// pairs a[q] = pixels (2q, 2q + 1) from the window's start; tap j of output pair p is a[p + j/2] (j even) or the
// upper half of a[p + j/2] and the lower of the next (j odd). Stride 2: output pair p reads pixels 4p + j and
// 4p + 2 + j, the lower (j even) or upper (j odd) halves of a[2p + j/2] and a[2p + j/2 + 1]; there the last pair
// loaded per kernel row is loaded as its lower pixel only (its upper one is no tap, and may be past the image).
// One block at a time, against the earlier tiles' 1-4 blocks x 1-4 pairs with each tap's pair loaded from memory
// (1.5 loads per fma, half of them split across cache lines; here 0.4-0.7 loads and a shuffle per fma). Whole
// conv, 1 thread, in cache: 14x14x480 3x3 42 -> 67 GFLOP/s, 14x14x672 5x5 52 -> 92. Same taps, same order.
template <int KW, int SW, int P>
inline void pairs(const DepthwiseRow& r, const float* xc, const float* wc, const float* bias, float* y,
                  const float* res, int64_t ox0) {
  const DepthwiseBlockedConv& g = *r.g;
  constexpr int kLoads = SW == 1 ? P + KW / 2 : 2 * P + KW / 2;  // pairs loaded per kernel row
  constexpr bool kHalfLast = SW == 2;                           // the last one's upper pixel is no tap
  __m512 acc[P];
  const __m512 b = bias ? _mm512_broadcast_f32x8(_mm256_loadu_ps(bias)) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = b;
  const float* base = xc + (r.iy0 * g.w + ox0 * SW - g.pad_left) * 8;
  for (int64_t i = r.i0; i < r.i1; ++i) {
    const float* row = base + i * g.dh * g.w * 8;
    __m512 w[KW];
#pragma GCC unroll 5
    for (int j = 0; j < KW; ++j) w[j] = _mm512_broadcast_f32x8(_mm256_loadu_ps(wc + (i * KW + j) * 8));
    __m512 a[kLoads];
#pragma GCC unroll 16
    for (int q = 0; q < kLoads; ++q)
      a[q] = kHalfLast && q == kLoads - 1 ? _mm512_castps256_ps512(_mm256_loadu_ps(row + q * 16))
                                          : _mm512_loadu_ps(row + q * 16);
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 5
      for (int j = 0; j < KW; ++j) {
        __m512 v;
        if constexpr (SW == 1)
          v = j % 2 == 0 ? a[p + j / 2] : _mm512_shuffle_f32x4(a[p + j / 2], a[p + j / 2 + 1], 0x4E);
        else
          v = _mm512_shuffle_f32x4(a[2 * p + j / 2], a[2 * p + j / 2 + 1], j % 2 == 0 ? 0x44 : 0xEE);
        acc[p] = _mm512_fmadd_ps(v, w[j], acc[p]);
      }
  }
  // The input rows the next output row adds below this window (stride rows), over this tile's columns, when the
  // input streams from memory (Row::stream: the mobile nets' 112x112 expansions at batch 8, 38 MB): the row streams
  // otherwise started on demand. mobilenet_v2 b8 0.90, mnasnet b8 0.85 (1 thread).
  for (int64_t s = 1; r.stream && s <= g.sh; ++s) {
    const float* next = base + ((r.i1 - 1) * g.dh + s) * g.w * 8;
#pragma GCC unroll 16
    for (int q = 0; q < kLoads; ++q) _mm_prefetch(reinterpret_cast<const char*>(next + q * 16), _MM_HINT_T0);
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    __m512 v = acc[p];
    const int64_t at = (ox0 + 2 * p) * 8;
    if (res) v = _mm512_add_ps(v, _mm512_loadu_ps(res + at));
    if (r.relu) v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), v, _mm512_setzero_ps());
    _mm512_storeu_ps(y + at, v);
  }
}

template <int KW, int SW>
int64_t interior_pairs(const DepthwiseRow& r, int64_t ox0, int64_t ox1) {
  const int64_t n = (ox1 - ox0) / 2;  // whole pairs
  for (int k = 0; k < r.cbs; ++k) {
    const float* xc = r.xc + k * r.xstride;
    const float* wc = r.wc + k * r.wstride;
    const float* bias = r.bias ? r.bias + k * 8 : nullptr;
    float* y = r.y + k * r.ystride;
    const float* res = r.res ? r.res + k * r.ystride : nullptr;
    int64_t q = 0;
    for (; q + 6 <= n; q += 6) pairs<KW, SW, 6>(r, xc, wc, bias, y, res, ox0 + 2 * q);
    switch (n - q) {
      case 5: pairs<KW, SW, 5>(r, xc, wc, bias, y, res, ox0 + 2 * q); break;
      case 4: pairs<KW, SW, 4>(r, xc, wc, bias, y, res, ox0 + 2 * q); break;
      case 3: pairs<KW, SW, 3>(r, xc, wc, bias, y, res, ox0 + 2 * q); break;
      case 2: pairs<KW, SW, 2>(r, xc, wc, bias, y, res, ox0 + 2 * q); break;
      case 1: pairs<KW, SW, 1>(r, xc, wc, bias, y, res, ox0 + 2 * q); break;
      default: break;
    }
  }
  return ox0 + 2 * n;
}

int64_t interior(const DepthwiseRow& r, int64_t ox0, int64_t ox1) {
  switch (r.cbs) {
    case 4: return interior_cb<4>(r, ox0, ox1);
    case 3: return interior_cb<3>(r, ox0, ox1);
    case 2: return interior_cb<2>(r, ox0, ox1);
    default: return interior_cb<1>(r, ox0, ox1);
  }
}

int64_t interior_any(const DepthwiseRow& r, int64_t ox0, int64_t ox1) {
  const DepthwiseBlockedConv& g = *r.g;
  if (g.dw == 1 && (g.sw == 1 || g.sw == 2) && (g.kw == 3 || g.kw == 5)) {
    const int key = static_cast<int>(g.kw * 10 + g.sw);
    switch (key) {
      case 31: return interior_pairs<3, 1>(r, ox0, ox1);
      case 32: return interior_pairs<3, 2>(r, ox0, ox1);
      case 51: return interior_pairs<5, 1>(r, ox0, ox1);
      default: return interior_pairs<5, 2>(r, ox0, ox1);
    }
  }
  return interior(r, ox0, ox1);
}

}  // namespace

int64_t depthwise_interior_avx512(const DepthwiseRow& r, int64_t ox0, int64_t ox1) { return interior_any(r, ox0, ox1); }

}  // namespace spore::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
