#pragma once
// Calibration for static int8 quantization: runs a float graph on sample batches, observes every float
// intermediate, and picks a range per value (min-max, percentile, or entropy / KL divergence as in TensorRT).
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/quantize.h"

namespace spore {

enum class CalibMethod { minmax, percentile, entropy };
CalibMethod parse_calib_method(const std::string& s);  // "minmax" | "percentile" | "entropy"

struct CalibOptions {
  CalibMethod method = CalibMethod::minmax;
  double percentile = 99.99;  // for CalibMethod::percentile
  int bins = 2048;            // histogram bins (percentile, entropy)
};

// `batches[i]` holds one tensor per graph input. Deterministic (same batches -> same table).
CalibrationTable calibrate(const Graph& g, const std::vector<std::vector<Tensor>>& batches, const CalibOptions& opts = {});

}  // namespace spore
