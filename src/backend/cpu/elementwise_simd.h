#pragma once
// Highway (runtime-dispatched) array kernels of the elementwise family; elementwise_hwy.cpp defines them.
// Each call processes one contiguous block; callers split work into fixed-size chunks for determinism.
// x and y may alias (in-place). f16/bf16 are passed as their uint16_t bit patterns.
#include <cstddef>
#include <cstdint>

#include <optional>

#include "ir/op_id.h"

namespace spore::cpu {

enum class UnaryOp : int {
  neg, abs, exp, log, sqrt, rsqrt, reciprocal, tanh, sigmoid, relu, leaky_relu, gelu_erf, gelu_tanh, silu, erf,
  sin, cos, asin, acos, atan, floor, ceil, round, sign, clip, hardsigmoid, hardswish,
};
// leaky_relu: a = alpha; clip: a = min, b = max (already representable in the element dtype); hardsigmoid:
// a = alpha, b = beta (as f32). hardsigmoid and hardswish do their decompositions' steps (ops/elementwise.cpp),
// so the fused kernel has the bits of the decomposed ops in f32.
struct UnaryParams {
  float a = 0;
  float b = 0;
};

// The UnaryOp of an elementwise op (gelu: `gelu_tanh` picks the tanh form); nullopt for other ops. The one
// mapping the unary kernels (elementwise.cpp) and the fused kernels (fused_elementwise.cpp, fused_conv.cpp) use.
std::optional<UnaryOp> unary_op_for(OpId op, bool gelu_tanh);
// binary_simd's operation code of add/sub/mul/div/maximum/minimum (binary.cpp); -1 for other ops.
int simd_binary_code(OpId op);

void unary_f32(UnaryOp op, const float* x, float* y, size_t n, UnaryParams p);
// Converts blocks to f32, computes, rounds back to nearest even.
void unary_f16(UnaryOp op, const uint16_t* x, uint16_t* y, size_t n, UnaryParams p);
void unary_bf16(UnaryOp op, const uint16_t* x, uint16_t* y, size_t n, UnaryParams p);

// Exact widening and round-to-nearest-even narrowing conversions (nan stays nan, inf stays inf).
void f16_to_f32(const uint16_t* x, float* y, size_t n);
void bf16_to_f32(const uint16_t* x, float* y, size_t n);
void f32_to_f16(const float* x, uint16_t* y, size_t n);
void f32_to_bf16(const float* x, uint16_t* y, size_t n);

// Dropout's keep mask (dropout_hwy.cpp): keep[j] = 1 iff word 0 of philox4x32 for counter start + j (stream, seed:
// base/rng.h's draw) shifted right by 8 is >= threshold, else 0; j < n. With threshold = ceil(p * 2^24) that is
// exactly `philox_uniform(seed, stream, start + j) >= p`.
void philox_keep(uint64_t seed, uint64_t stream, uint64_t start, size_t n, uint32_t threshold, uint8_t* keep);

// quantize_linear's formula y = clamp(rint(x / scale) + zp, lo, hi) (division and nearest-even as the
// reference; lo/hi within the code type's range); a nan x gives lo.
void quantize_f32(const float* x, uint8_t* y, size_t n, float scale, float zp, float lo, float hi);
void quantize_f32(const float* x, int8_t* y, size_t n, float scale, float zp, float lo, float hi);

}  // namespace spore::cpu
