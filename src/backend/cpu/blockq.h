// Internal to the cpu backend: what blockq.cpp (AVX2 build of the linear_blockq tiles) shares with
// blockq_avx512.cpp (the AVX-512 + VNNI build of the same tiles, chosen at run time).
#pragma once

#include <cstdint>

#include "ops/llm_ops.h"

namespace spore::cpu {

// What a tile reads. Rows: prepared activations (x_f: f32 rows of k values; x_q/x_d: q8_0 rows and block scales).
// Columns: weight rows of w_row bytes. Output y[m * ldy + n].
struct BlockqProblem {
  const float* x_f = nullptr;
  const int8_t* x_q = nullptr;
  const float* x_d = nullptr;
  const int32_t* x_s = nullptr;  // q4_0 only: per block, 8 lanes of 8 * (sum of 4 consecutive q), see block_dot
  // AVX-512 build, float formats: x_f's rows in pairs, 8 values of row 2j then the same 8 of row 2j+1 (2 * (K/8*8)
  // floats per pair), so one 16-lane register holds both rows' 8-lane segments (blockq_tiles.inc, tile_f_pairs).
  const float* x_pairs = nullptr;
  const uint8_t* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t k = 0, w_row = 0, ldy = 0;
  int64_t n = 0;  // columns (weight rows)
};

// At most this many weights share one call (linear_blockq_multi's count).
inline constexpr int kBlockqMaxProblems = static_cast<int>(llm_ops::max_multi_weights);

// True when this CPU has AVX-512 F/BW/VL and AVX512-VNNI and SPORE_BLOCKQ_ISA is not "avx2" (read on every
// call, so tests and benchmarks can compare the two builds in one process).
bool blockq_use_avx512();

// y_i = x W_i^T (+ bias_i) for m rows and the n columns of each of the `count` problems (they share the prepared
// activations), with the AVX-512 + VNNI tiles (bit-identical to the AVX2 ones). glu: count 2 (gate, up of one
// shape), and ps[0].y becomes silu(gate) * up (ps[1].y holds up).
void blockq_run_avx512(llm_ops::WeightFormat f, const BlockqProblem* ps, int count, int64_t m, bool glu);

// g[i] = silu(g[i]) * u[i] for n values: the unary_f32 silu and an f32 multiply, so the bits of fused_elementwise's
// mul(silu(g), u) (blockq.cpp).
void blockq_silu_mul(float* g, const float* u, int64_t n);

}  // namespace spore::cpu
