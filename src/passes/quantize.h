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

struct StaticQuantOptions {
  // u8 activation codes: 8 bits = [0, 255]; 7 bits = [0, 127], for CPUs without VNNI, whose int8 kernels saturate
  // on pairs of 8-bit codes (backend/cpu/quant.cpp then falls back to exact but slow int32 loops).
  int activation_bits = 8;
  // Convs with <= 4 input channels per group (RGB stems, depthwise) stay f32: qconv2d would run them as f32 convs
  // on the integer values anyway, so int8 there only adds the input's quantization error and a quantize pass.
  bool few_channel_convs_stay_f32 = true;
};

QuantReport quantize_weights_int8(Graph& g);
// Needs a range for the input activation of every candidate node; candidates without one are skipped (listed).
QuantReport quantize_static_int8(Graph& g, const CalibrationTable& table, const StaticQuantOptions& opts = {});

}  // namespace spore
