// winograd_f4.inc built for AVX-512 (F, DQ) inside `#pragma GCC target`, 16 channels per vector, chosen at run
// time by winograd.cpp. Every header is included before the pragma, so only the functions defined here are built
// for that ISA.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/winograd_f4.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 on _mm512_extractf32x8_ps (as direct_blocked_avx512.cpp)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace spore::cpu::detail {
namespace {
#define SPORE_WG_LANES 16
#define SPORE_WG_INPUT winograd_f4_input_avx512
#define SPORE_WG_OUTPUT winograd_f4_output_avx512
#include "backend/cpu/winograd_f4.inc"
#undef SPORE_WG_OUTPUT
#undef SPORE_WG_INPUT
#undef SPORE_WG_LANES
}  // namespace
}  // namespace spore::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
