#pragma once
// Post-training int8 quantization of a deployable graph.
//   weight_int8: constant weights of conv2d / linear / matmul stored int8, per output channel, symmetric
//                (scale = max|w| / 127), with a dequantize_linear in front so every kernel still sees f32.
//   static int8: activations feeding conv2d / linear / matmul are quantized with scales from calibration
//                (runtime/calibrate.h) and the op runs as an int8 kernel (u8/s8 x s8 -> s32 -> f32).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace spore {

struct QuantReport {
  int64_t weights_quantized = 0;     // constant tensors stored as int8
  int64_t ops_quantized = 0;         // nodes running int8 kernels (static mode)
  int64_t bytes_before = 0;          // constant bytes before / after
  int64_t bytes_after = 0;
  std::vector<std::string> skipped;  // "node label: why" for candidate nodes left in float
};

// Per-tensor activation range chosen by calibration (keyed by graph value name).
struct ActivationRange {
  float min = 0, max = 0;
};
using CalibrationTable = std::map<std::string, ActivationRange>;

QuantReport quantize_weights_int8(Graph& g);
// Needs a range for the input activation of every candidate node; candidates without one are skipped (listed).
QuantReport quantize_static_int8(Graph& g, const CalibrationTable& table);

}  // namespace spore
