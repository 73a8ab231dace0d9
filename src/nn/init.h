#pragma once
// Parameter initializers. Deterministic: element i of a parameter is drawn with Philox keyed by
// (seed, stream, i), where the stream is the parameter's creation index since the last set_seed().
// So `nn::set_seed(7); Net a; nn::set_seed(7); Net b;` gives a and b identical weights on any machine.
#include <cstdint>
#include <string>
#include <utility>

#include "tensor/tensor.h"

namespace spore::nn {

struct InitKey {
  uint64_t seed = 0;
  uint64_t stream = 0;
};
// Resets the global seed and the parameter counter.
void set_seed(uint64_t seed);
// The key for the next parameter (advances the counter).
InitKey next_init_key();

// (fan_in, fan_out) as PyTorch computes them: dims 1 and 0 times the receptive field (dims 2..).
std::pair<int64_t, int64_t> fan_in_out(const Shape& shape);
// Gain for a nonlinearity ("linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu", "selu").
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

namespace init {
Tensor zeros(const Shape& shape, DType dtype = DType::f32);
Tensor ones(const Shape& shape, DType dtype = DType::f32);
Tensor uniform(const Shape& shape, double low, double high, DType dtype = DType::f32, InitKey key = next_init_key());
Tensor normal(const Shape& shape, double mean, double std, DType dtype = DType::f32, InitKey key = next_init_key());
Tensor xavier_uniform(const Shape& shape, double gain = 1.0, DType dtype = DType::f32, InitKey key = next_init_key());
Tensor xavier_normal(const Shape& shape, double gain = 1.0, DType dtype = DType::f32, InitKey key = next_init_key());
// mode "fan_in" | "fan_out"; a = negative slope for leaky_relu.
Tensor kaiming_uniform(const Shape& shape, double a = 0.0, const std::string& mode = "fan_in",
                       const std::string& nonlinearity = "leaky_relu", DType dtype = DType::f32,
                       InitKey key = next_init_key());
Tensor kaiming_normal(const Shape& shape, double a = 0.0, const std::string& mode = "fan_in",
                      const std::string& nonlinearity = "leaky_relu", DType dtype = DType::f32,
                      InitKey key = next_init_key());
}  // namespace init

}  // namespace spore::nn
