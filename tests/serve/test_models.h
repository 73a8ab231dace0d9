#pragma once
// Small ONNX models with a dynamic batch dim for the serve tests, written to the test's temp dir.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "onnx_model_builder.h"
#include "test_util.h"

namespace spore::serve::testing {

using spore::testing::ModelBuilder;

inline std::vector<float> pattern(size_t n, int salt) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * 2654435761u + salt * 97u) % 201) - 100) / 256.f;
  return v;
}

using spore::testing::attr_ints;

// y = relu(x W1 + b1) W2 + b2, x: f32[batch, in] -> y: f32[batch, 10]
inline std::string mlp_model(int64_t in = 64, int64_t hidden = 96) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", std::to_string(in)});
  b.init("w1", pattern(static_cast<size_t>(in * hidden), 1), {in, hidden});
  b.init("b1", pattern(static_cast<size_t>(hidden), 2), {hidden});
  b.init("w2", pattern(static_cast<size_t>(hidden * 10), 3), {hidden, 10});
  b.init("b2", pattern(10, 4), {10});
  b.node("MatMul", {"x", "w1"}, {"h0"});
  b.node("Add", {"h0", "b1"}, {"h1"});
  b.node("Relu", {"h1"}, {"h2"});
  b.node("MatMul", {"h2", "w2"}, {"h3"});
  b.node("Add", {"h3", "b2"}, {"y"});
  b.input("y", onnx::TensorProto::FLOAT, {"batch", "10"}, /*output=*/true);
  const std::string path = (spore::testing::temp_dir("serve") / fmt::format("mlp_{}_{}.onnx", in, hidden)).string();
  b.save(path);
  return path;
}

// y = relu(conv3x3(x, co channels, pad 1)), x: f32[batch, ci, hw, hw] -> y: f32[batch, co, hw, hw]
inline std::string conv_model(int64_t ci = 3, int64_t co = 8, int64_t hw = 12) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", std::to_string(ci), std::to_string(hw), std::to_string(hw)});
  b.init("w", pattern(static_cast<size_t>(co * ci * 9), 5), {co, ci, 3, 3});
  b.init("bias", pattern(static_cast<size_t>(co), 6), {co});
  auto* conv = b.node("Conv", {"x", "w", "bias"}, {"c"});
  attr_ints(conv, "kernel_shape", {3, 3});
  attr_ints(conv, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"y"});
  b.input("y", onnx::TensorProto::FLOAT, {"batch", std::to_string(co), std::to_string(hw), std::to_string(hw)},
          /*output=*/true);
  const std::string path = (spore::testing::temp_dir("serve") / fmt::format("conv_{}_{}_{}.onnx", ci, co, hw)).string();
  b.save(path);
  return path;
}

// y = x - mean(x over the batch): each row's output depends on the other rows, so merging changes answers. The auto
// check must catch it (and keep requests apart); `on` merges anyway.
inline std::string batch_mixing_model() {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", "4"});
  auto* mean = b.node("ReduceMean", {"x"}, {"m"});
  attr_ints(mean, "axes", {0});
  ModelBuilder::attr_i(mean, "keepdims", 1);
  b.node("Sub", {"x", "m"}, {"y"});
  b.input("y", onnx::TensorProto::FLOAT, {"batch", "4"}, /*output=*/true);
  const std::string path = (spore::testing::temp_dir("serve") / "batch_mixing.onnx").string();
  b.save(path);
  return path;
}

}  // namespace spore::serve::testing
