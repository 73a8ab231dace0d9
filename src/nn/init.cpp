#include "nn/init.h"

#include <atomic>
#include <cmath>
#include <vector>

#include "base/rng.h"

namespace spore::nn {
namespace {

std::atomic<uint64_t> g_seed{0};
std::atomic<uint64_t> g_stream{0};

void check_shape(const Shape& shape, const char* who) {
  for (int64_t d : shape)
    SPORE_CHECK(d >= 0, ErrorCode::invalid_argument, "nn::init::{}: negative dim in shape {}", who, shape_str(shape));
}

void check_floating(DType dtype, const char* who) {
  SPORE_CHECK(is_floating(dtype), ErrorCode::dtype_mismatch, "nn::init::{}: expected a floating dtype, got {}", who,
              dtype_name(dtype));
}

template <typename F>
Tensor generate(const Shape& shape, DType dtype, F&& f) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = f(static_cast<uint64_t>(i));
  return Tensor::from_doubles(v, shape, dtype);
}

double fan_for(const Shape& shape, const std::string& mode) {
  auto [fi, fo] = fan_in_out(shape);
  SPORE_CHECK(mode == "fan_in" || mode == "fan_out", ErrorCode::invalid_argument,
              "nn::init::kaiming: expected mode fan_in or fan_out, got '{}'", mode);
  return static_cast<double>(mode == "fan_in" ? fi : fo);
}

}  // namespace

void set_seed(uint64_t seed) {
  g_seed = seed;
  g_stream = 0;
}

InitKey next_init_key() { return InitKey{g_seed.load(), g_stream.fetch_add(1)}; }

std::pair<int64_t, int64_t> fan_in_out(const Shape& shape) {
  SPORE_CHECK(!shape.empty(), ErrorCode::invalid_argument, "nn::fan_in_out: a scalar has no fan in/out");
  if (shape.size() == 1) return {shape[0], shape[0]};
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "conv2d" || nl == "sigmoid" || nl == "identity") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  throw_error(ErrorCode::invalid_argument, fmt::format("nn::calculate_gain: unknown nonlinearity '{}'", nl));
}

namespace init {

Tensor zeros(const Shape& shape, DType dtype) {
  check_shape(shape, "zeros");
  return Tensor::zeros(shape, dtype);
}

Tensor ones(const Shape& shape, DType dtype) {
  check_shape(shape, "ones");
  return generate(shape, dtype, [](uint64_t) { return 1.0; });
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype, InitKey key) {
  check_shape(shape, "uniform");
  check_floating(dtype, "uniform");
  SPORE_CHECK(low <= high, ErrorCode::invalid_argument, "nn::init::uniform: expected low <= high, got {} > {}", low,
              high);
  return generate(shape, dtype, [&](uint64_t i) {
    return low + (high - low) * static_cast<double>(philox_uniform(key.seed, key.stream, i));
  });
}

Tensor normal(const Shape& shape, double mean, double std, DType dtype, InitKey key) {
  check_shape(shape, "normal");
  check_floating(dtype, "normal");
  SPORE_CHECK(std >= 0, ErrorCode::invalid_argument, "nn::init::normal: expected std >= 0, got {}", std);
  return generate(shape, dtype, [&](uint64_t i) {
    return mean + std * static_cast<double>(philox_normal(key.seed, key.stream, i));
  });
}

Tensor xavier_uniform(const Shape& shape, double gain, DType dtype, InitKey key) {
  auto [fi, fo] = fan_in_out(shape);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(std::max<int64_t>(fi + fo, 1)));
  return uniform(shape, -bound, bound, dtype, key);
}

Tensor xavier_normal(const Shape& shape, double gain, DType dtype, InitKey key) {
  auto [fi, fo] = fan_in_out(shape);
  return normal(shape, 0.0, gain * std::sqrt(2.0 / static_cast<double>(std::max<int64_t>(fi + fo, 1))), dtype, key);
}

Tensor kaiming_uniform(const Shape& shape, double a, const std::string& mode, const std::string& nonlinearity,
                       DType dtype, InitKey key) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(std::max(fan_for(shape, mode), 1.0));
  const double bound = std::sqrt(3.0) * std;
  return uniform(shape, -bound, bound, dtype, key);
}

Tensor kaiming_normal(const Shape& shape, double a, const std::string& mode, const std::string& nonlinearity,
                      DType dtype, InitKey key) {
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(std::max(fan_for(shape, mode), 1.0));
  return normal(shape, 0.0, std, dtype, key);
}

}  // namespace init
}  // namespace spore::nn
