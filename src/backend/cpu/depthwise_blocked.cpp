// Depthwise f32 convolution on nChw8c (depthwise_blocked.h): weights packed per channel block (kept for plan
// constants), tasks of output rows of one channel block, 4-pixel register tiles where every tap is in the image.
#include "backend/cpu/depthwise_blocked.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/constant_cache.h"
#include "backend/cpu/transpose8.h"
#include "base/thread_pool.h"
#include "tensor/storage.h"

namespace spore::cpu {
namespace {

// One output row of up to 4 channel blocks (depthwise_blocked.h), shared with the AVX-512 interior.
using Row = detail::DepthwiseRow;

inline void store(const Row& r, int64_t k, int64_t ox, __m256 v) {
  if (r.res) v = _mm256_add_ps(v, _mm256_loadu_ps(r.res + k * r.ystride + ox * 8));
  if (r.relu) v = _mm256_andnot_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ), v);
  _mm256_storeu_ps(r.y + k * r.ystride + ox * 8, v);
}

bool use_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  const char* e = std::getenv("SPORE_CONV_DIRECT_ISA");
  return has && !(e && std::string_view(e) == "avx2");
}

// P output pixels from ox0 of CB channel blocks, every tap inside the image (Edge false) or checked per tap (Edge
// true, P = 1).
template <int P, bool Edge, int CB>
inline void tile(const Row& r, int64_t ox0) {
  const DepthwiseBlockedConv& g = *r.g;
  __m256 acc[CB][P];
  for (int k = 0; k < CB; ++k) {
    const __m256 b = r.bias ? _mm256_loadu_ps(r.bias + k * 8) : _mm256_setzero_ps();
    for (int p = 0; p < P; ++p) acc[k][p] = b;
  }
  // Edge (P = 1): the kernel columns whose input column is inside the image, j0 <= j < j1, found once.
  const int64_t x0 = ox0 * g.sw - g.pad_left;
  int64_t j0 = 0, j1 = g.kw;
  if (Edge) {
    detail::in_image_columns(g, x0, j0, j1);
  }
  for (int64_t i = r.i0; i < r.i1; ++i) {
    const float* row = r.xc + (r.iy0 + i * g.dh) * g.w * 8;
    for (int64_t j = j0; j < j1; ++j)
      for (int k = 0; k < CB; ++k) {
        const __m256 wv = _mm256_loadu_ps(r.wc + k * r.wstride + (i * g.kw + j) * 8);
        for (int p = 0; p < P; ++p)
          acc[k][p] = _mm256_fmadd_ps(_mm256_loadu_ps(row + k * r.xstride + (x0 + p * g.sw + j * g.dw) * 8), wv, acc[k][p]);
      }
  }
  for (int k = 0; k < CB; ++k)
    for (int p = 0; p < P; ++p) store(r, k, ox0 + p, acc[k][p]);
}

template <int P, bool Edge>
inline void tile_cbs(const Row& r, int64_t ox0) {
  switch (r.cbs) {
    case 4: return tile<P, Edge, 4>(r, ox0);
    case 3: return tile<P, Edge, 3>(r, ox0);
    case 2: return tile<P, Edge, 2>(r, ox0);
    default: return tile<P, Edge, 1>(r, ox0);
  }
}

}  // namespace

bool depthwise_blocked_supported(const DepthwiseBlockedConv& g) {
  return g.c > 0 && g.c % 8 == 0 && g.wc >= 0 && g.wc <= g.c && g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1 && g.dh >= 1 && g.dw >= 1 &&
         g.pad_top >= 0 && g.pad_left >= 0 && g.oh >= 1 && g.ow >= 1;
}

void depthwise_blocked_conv(const DepthwiseBlockedConv& g, const float* x, const float* w, const float* bias, float* y,
                            const std::shared_ptr<Storage>& weights_owner,
                            const std::function<void(int64_t offset, int64_t count)>* epilogue,
                            const StoreEpilogue* fused) {
  const int64_t cb_n = g.c / 8, ks = g.kh * g.kw, wc = g.wc > 0 ? g.wc : g.c;
  // wp[cb][i][j][l] = w[cb*8 + l][0][i][j] (0 past wc)
  std::shared_ptr<Storage> kept;
  std::vector<float> local;
  const float* wp = derived_floats(
      weights_owner, w, fmt::format("depthwise_blocked:{}x{}x{}", g.c, g.kh, g.kw), static_cast<size_t>(g.c * ks),
      [&](float* buf) {
        for (int64_t cb = 0; cb < cb_n; ++cb)
          for (int64_t k = 0; k < ks; ++k)
            for (int64_t l = 0; l < 8; ++l) buf[(cb * ks + k) * 8 + l] = cb * 8 + l < wc ? w[(cb * 8 + l) * ks + k] : 0.0f;
      },
      kept, local);
  std::vector<float> bias_padded;
  if (bias && wc < g.c) {
    bias_padded.assign(static_cast<size_t>(g.c), 0.0f);
    std::copy(bias, bias + wc, bias_padded.begin());
    bias = bias_padded.data();
  }
  const StoreEpilogue epi = fused ? *fused : StoreEpilogue{};
  const bool wide = use_avx512();
  if (fused) epilogue = nullptr;  // applied in the stores
  // Output columns whose taps are all inside the image: [ox_lo, ox_hi).
  const int64_t span = (g.kw - 1) * g.dw;
  const int64_t ox_lo = std::min(g.ow, (g.pad_left + g.sw - 1) / g.sw);
  const int64_t last = g.w - 1 - span + g.pad_left;  // the largest ox * sw with the window inside
  const int64_t ox_hi = last < 0 ? ox_lo : std::max(ox_lo, std::min(g.ow, last / g.sw + 1));
  // Tasks: rows of up to 4 channel blocks of one image, ~4K outputs per block (any split gives the same bits).
  constexpr int64_t kCb = 4;
  const int64_t groups = (cb_n + kCb - 1) / kCb;
  const int64_t per = std::max<int64_t>(1, std::min(g.oh, 512 / g.ow));
  const int64_t chunks = (g.oh + per - 1) / per;
  const int64_t xstride = g.h * g.w * 8, ystride = g.oh * g.ow * 8, wstride = ks * 8;
  // Inputs past 8 MB (the mobile nets' 112x112 expansions at batch 8: 38 MB) come from memory: prefetch (Row::stream).
  // In cache (batch 1) the prefetches only cost: mnasnet b1 1.27x with them.
  const bool stream = g.n * cb_n * xstride > (int64_t{2} << 20);
  parallel_for(g.n * groups * chunks, [&](int64_t task) {
    const int64_t n = task / (groups * chunks), grp = task / chunks % groups;
    const int64_t oy0 = task % chunks * per, oy1 = std::min(g.oh, oy0 + per);
    const int64_t cb = grp * kCb, cbs = std::min(kCb, cb_n - cb), plane = n * cb_n + cb;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      const int64_t iy0 = oy * g.sh - g.pad_top;
      int64_t i0 = 0, i1 = g.kh;
      while (i0 < g.kh && iy0 + i0 * g.dh < 0) ++i0;
      while (i1 > i0 && iy0 + (i1 - 1) * g.dh >= g.h) --i1;
      const int64_t at = (plane * g.oh + oy) * g.ow * 8;
      const int c = static_cast<int>(cbs);
      const Row r{&g,      x + plane * xstride, wp + cb * ks * 8, bias ? bias + cb * 8 : nullptr,
                  epi.residual ? epi.residual + at : nullptr, epi.relu, y + at, iy0, i0, i1, c, xstride, wstride, ystride, stream};
      int64_t ox = 0;
      for (; ox < ox_lo; ++ox) tile_cbs<1, true>(r, ox);
      if (wide) ox = detail::depthwise_interior_avx512(r, ox, ox_hi);
      for (; ox + 4 <= ox_hi; ox += 4) {
        if (c == 1) tile<4, false, 1>(r, ox);
        else tile_cbs<2, false>(r, ox), tile_cbs<2, false>(r, ox + 2);
      }
      for (; ox < ox_hi; ++ox) tile_cbs<1, false>(r, ox);
      for (; ox < g.ow; ++ox) tile_cbs<1, true>(r, ox);
    }
    if (epilogue)
      for (int64_t k = 0; k < cbs; ++k) (*epilogue)(((plane + k) * g.oh + oy0) * g.ow * 8, (oy1 - oy0) * g.ow * 8);
  });
}

}  // namespace spore::cpu

namespace spore::cpu {

void depthwise_plain_conv(const DepthwiseBlockedConv& g, const float* x, const float* w, const float* bias, float* y,
                          const std::shared_ptr<Storage>& weights_owner) {
  DepthwiseBlockedConv b = g;
  b.wc = g.c;
  b.c = (g.c + 7) / 8 * 8;
  const int64_t cb_n = b.c / 8, in_plane = g.h * g.w, out_plane = g.oh * g.ow;
  thread_local std::vector<float> xb, yb;  // kept between calls: no page faults per run
  xb.resize(static_cast<size_t>(g.n * b.c * in_plane));
  yb.resize(static_cast<size_t>(g.n * b.c * out_plane));
  float* const xp = xb.data();  // the caller's buffers: the tasks run on other threads, with their own thread_locals
  float* const yp = yb.data();
  // [N, C, H, W] -> [N, C/8, H, W, 8], zero channels past C (transpose8.h).
  parallel_for(g.n * cb_n, [&](int64_t t) {
    const int64_t n = t / cb_n, cb = t % cb_n;
    planes_to_block8(x + (n * g.c + cb * 8) * in_plane, in_plane, std::min<int64_t>(8, g.c - cb * 8),
                     xp + t * in_plane * 8);
  });
  depthwise_blocked_conv(b, xp, w, bias, yp, weights_owner);
  parallel_for(g.n * cb_n, [&](int64_t t) {
    const int64_t n = t / cb_n, cb = t % cb_n;
    block8_to_planes(yp + t * out_plane * 8, out_plane, std::min<int64_t>(8, g.c - cb * 8),
                     y + (n * g.c + cb * 8) * out_plane);
  });
}

}  // namespace spore::cpu
