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

// 2P output pixels from ox0 of CB channel blocks. KW, SW: the kernel width and stride when fixed at compile time
// (then dilation 1, and every address is a constant offset from the row's), else 0.
template <int KW, int SW, int P, int CB>
inline void tile(const DepthwiseRow& r, int64_t ox0) {
  const DepthwiseBlockedConv& g = *r.g;
  const int64_t kw = KW > 0 ? KW : g.kw, sw = SW > 0 ? SW : g.sw, dw = KW > 0 ? 1 : g.dw;
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
template <int KW, int SW, int CB>
int64_t interior_cb(const DepthwiseRow& r, int64_t ox0, int64_t ox1) {
  int64_t ox = ox0;
  if constexpr (CB == 1) {
    for (; ox + 8 <= ox1; ox += 8) tile<KW, SW, 4, 1>(r, ox);
    if (ox + 6 <= ox1) {
      tile<KW, SW, 3, 1>(r, ox);
      ox += 6;
    } else if (ox + 4 <= ox1) {
      tile<KW, SW, 2, 1>(r, ox);
      ox += 4;
    }
  } else {
    for (; ox + 4 <= ox1; ox += 4) tile<KW, SW, 2, CB>(r, ox);
  }
  for (; ox + 2 <= ox1; ox += 2) tile<KW, SW, 1, CB>(r, ox);
  return ox;
}

template <int KW, int SW>
int64_t interior(const DepthwiseRow& r, int64_t ox0, int64_t ox1) {
  switch (r.cbs) {
    case 4: return interior_cb<KW, SW, 4>(r, ox0, ox1);
    case 3: return interior_cb<KW, SW, 3>(r, ox0, ox1);
    case 2: return interior_cb<KW, SW, 2>(r, ox0, ox1);
    default: return interior_cb<KW, SW, 1>(r, ox0, ox1);
  }
}

int64_t interior_any(const DepthwiseRow& r, int64_t ox0, int64_t ox1) {
  const DepthwiseBlockedConv& g = *r.g;
  if (g.dw == 1 && (g.sw == 1 || g.sw == 2) && (g.kw == 3 || g.kw == 5)) {
    const int key = static_cast<int>(g.kw * 10 + g.sw);
    switch (key) {
      case 31: return interior<3, 1>(r, ox0, ox1);
      case 32: return interior<3, 2>(r, ox0, ox1);
      case 51: return interior<5, 1>(r, ox0, ox1);
      default: return interior<5, 2>(r, ox0, ox1);
    }
  }
  return interior<0, 0>(r, ox0, ox1);
}

}  // namespace

int64_t depthwise_interior_avx512(const DepthwiseRow& r, int64_t ox0, int64_t ox1) { return interior_any(r, ox0, ox1); }

}  // namespace spore::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
