// gemm_linear_tiles.inc built for AVX-512F inside `#pragma GCC target`, chosen at run time by gemm_linear.cpp.
// Every header is included before the pragma, so only the functions defined here are built for that ISA.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm_linear.h"

#pragma GCC push_options
#pragma GCC target("avx512f")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace spore::cpu::detail {
namespace {
#define SPORE_GL_LANES 16
#define SPORE_GL_ROWS rows_impl
#include "backend/cpu/gemm_linear_tiles.inc"
#undef SPORE_GL_ROWS
#undef SPORE_GL_LANES
}  // namespace

void gemm_rows_avx512(const GemmJob& j, int64_t r0, int64_t r1, int64_t p0, int64_t p1) { rows_impl(j, r0, r1, p0, p1); }

}  // namespace spore::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
