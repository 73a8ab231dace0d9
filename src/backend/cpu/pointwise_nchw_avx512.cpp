// pointwise_nchw_tiles.inc built for AVX-512 (F) inside `#pragma GCC target`, chosen at run time by
// pointwise_nchw.cpp. Every header is included before the pragma, so only the functions defined here (in this file's
// unnamed namespace) are built for that ISA.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/pointwise_nchw.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace spore::cpu::detail {
namespace {
#define SPORE_PW_LANES 16
#define SPORE_PW_BLOCK block_impl
#include "backend/cpu/pointwise_nchw_tiles.inc"
#undef SPORE_PW_BLOCK
#undef SPORE_PW_LANES
}  // namespace

void pointwise_block_avx512(const PointwiseConv& g, const float* x, const float* w, const float* bias, float* y,
                            int64_t o0, int64_t o1, int64_t p0, int64_t p1) {
  block_impl(g, x, w, bias, y, o0, o1, p0, p1);
}
}  // namespace spore::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
