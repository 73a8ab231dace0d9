// direct_blocked_tiles.inc built for AVX-512 (F, DQ) inside `#pragma GCC target`, chosen at run time by
// direct_blocked.cpp: 16 lanes (the last block half used when O % 16 == 8), and 8 lanes with 32 registers for groups
// of 8 output channels. Every header is included before the pragma, so only the functions defined here (in this
// file's unnamed namespace) are built for that ISA.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/direct_blocked.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace spore::cpu::detail {
namespace {
#define SPORE_DB_LANES 16
#define SPORE_DB_ROWS rows_impl
#include "backend/cpu/direct_blocked_tiles.inc"
#undef SPORE_DB_ROWS
#undef SPORE_DB_LANES
}  // namespace

void direct_rows_avx512(const DirectJob& j, int64_t n, int64_t oy0, int64_t oy1, int64_t t_lo, int64_t t_hi,
                        float* tot) {
  rows_impl(j, n, oy0, oy1, t_lo, t_hi, tot);
}

namespace lanes8 {
namespace {
#define SPORE_DB_LANES 8
#define SPORE_DB_REGS32 1
#define SPORE_DB_ROWS rows_impl
#include "backend/cpu/direct_blocked_tiles.inc"
#undef SPORE_DB_ROWS
#undef SPORE_DB_REGS32
#undef SPORE_DB_LANES
}  // namespace
}  // namespace lanes8

void direct_rows_avx512_8(const DirectJob& j, int64_t n, int64_t oy0, int64_t oy1, int64_t t_lo, int64_t t_hi,
                          float* tot) {
  lanes8::rows_impl(j, n, oy0, oy1, t_lo, t_hi, tot);
}
}  // namespace spore::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
