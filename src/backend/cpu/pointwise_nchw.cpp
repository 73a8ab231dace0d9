// Pointwise f32 conv on NCHW (pointwise_nchw.h): ISA choice and tasks; the block kernel is pointwise_nchw_tiles.inc,
// built here for AVX2 and in pointwise_nchw_avx512.cpp.
#include "backend/cpu/pointwise_nchw.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "base/thread_pool.h"

namespace spore::cpu {
namespace detail {
namespace {
#define SPORE_PW_LANES 8
#define SPORE_PW_BLOCK block_impl
#include "backend/cpu/pointwise_nchw_tiles.inc"
#undef SPORE_PW_BLOCK
#undef SPORE_PW_LANES
}  // namespace

void pointwise_block_avx2(const PointwiseConv& g, const float* x, const float* w, const float* bias, float* y,
                          int64_t o0, int64_t o1, int64_t p0, int64_t p1) {
  block_impl(g, x, w, bias, y, o0, o1, p0, p1);
}
}  // namespace detail

namespace {
bool use_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl");
  const char* e = std::getenv("SPORE_POINTWISE_ISA");
  return has && !(e && std::string_view(e) == "avx2");
}
}  // namespace

void pointwise_nchw_conv(const PointwiseConv& g, const float* x, const float* w, const float* bias, float* y,
                         const std::function<void(int64_t offset, int64_t count)>* epilogue) {
  if (g.n <= 0 || g.o <= 0 || g.hw <= 0) return;
  const bool wide = use_avx512();
  // Tasks: (image, channel chunk, pixel chunk), any split gives the same bits. A chunk of 24 output channels keeps
  // its weights (24 x C floats) in L1 across its pixels; pixel chunks of 256 (16 vectors) keep the input slice a task
  // reads (C x 256 floats) in L2 across its channel tiles. Images with few pixels (7x7) split channels finer.
  const int64_t pix = 256, och = g.hw >= 128 ? 24 : 12;
  const int64_t pchunks = num_chunks(g.hw, pix), ochunks = num_chunks(g.o, och);
  parallel_for(g.n * ochunks * pchunks, [&](int64_t t) {
    const int64_t n = t / (ochunks * pchunks), oc = t / pchunks % ochunks, pc = t % pchunks;
    const int64_t o0 = oc * och, o1 = std::min(g.o, o0 + och), p0 = pc * pix, p1 = std::min(g.hw, p0 + pix);
    const float* xn = x + n * g.c * g.hw;
    float* yn = y + n * g.o * g.hw;
    if (wide) detail::pointwise_block_avx512(g, xn, w, bias, yn, o0, o1, p0, p1);
    else detail::pointwise_block_avx2(g, xn, w, bias, yn, o0, o1, p0, p1);
    if (epilogue)
      for (int64_t o = o0; o < o1; ++o) (*epilogue)((n * g.o + o) * g.hw + p0, p1 - p0);
  });
}

}  // namespace spore::cpu
