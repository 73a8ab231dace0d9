#pragma once
// Array kernels of the tanhcustom plugin. Each call processes one contiguous block; the op wrappers
// (tanhcustom.cpp) split the tensor into fixed-size blocks. f16/bf16 are passed as their bit patterns.
// x and y may alias (in place).
#include <cstddef>
#include <cstdint>

namespace tanhcustom {

// v1: scalar, f64 internally (correctness first).
float tanh_v1(float x);
void tanh_v1_f32(const float* x, float* y, size_t n);
// v2: Highway, the textbook formula sign(x) (1 - e^-2|x|) / (1 + e^-2|x|).
void tanh_v2_f32(const float* x, float* y, size_t n);
// v3: Highway, spore::kernels::TanhF32 (include/spore/kernels/tanh_f32.h); f16/bf16 widen to f32 and round back
// to nearest even.
void tanh_v3_f32(const float* x, float* y, size_t n);
void tanh_v3_f16(const uint16_t* x, uint16_t* y, size_t n);
void tanh_v3_bf16(const uint16_t* x, uint16_t* y, size_t n);
// dx = dy (1 - y^2), computed in f32.
void tanh_grad_f32(const float* y, const float* dy, float* dx, size_t n);
void tanh_grad_f16(const uint16_t* y, const uint16_t* dy, uint16_t* dx, size_t n);
void tanh_grad_bf16(const uint16_t* y, const uint16_t* dy, uint16_t* dx, size_t n);

}  // namespace tanhcustom
