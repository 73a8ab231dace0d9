#pragma once
// The 3-D convolution and pooling ops (defined in ops/conv.cpp beside the 2-D ones): NCDHW tensors, windows over
// (D, H, W), paddings as (front, top, left, back, bottom, right) - ONNX's order, begins then ends. Geometry,
// pad_mode and ceil_mode follow the 2-D ops exactly ("same" puts the odd pad at the end). A separate header so that
// the 85 objects including ops/ops.h do not recompile for them.
#include <optional>
#include <string>
#include <vector>

#include "ops/dispatch.h"

namespace spore::ops {

using Ints = std::vector<int64_t>;  // as ops.h

struct Conv3dOptions {
  Ints stride{1, 1, 1};
  Ints padding{0, 0, 0, 0, 0, 0};
  Ints dilation{1, 1, 1};
  int64_t groups = 1;
  std::string pad_mode = "pad";  // "pad" | "same" | "valid"
};
// x [N,C,D,H,W], w [O, C/groups, kD, kH, kW], bias [O].
Tensor conv3d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt,
              const Conv3dOptions& o = {});
struct ConvTranspose3dOptions {
  Ints stride{1, 1, 1};
  Ints padding{0, 0, 0, 0, 0, 0};
  Ints output_padding{0, 0, 0};
  Ints dilation{1, 1, 1};
  int64_t groups = 1;
};
// x [N,C,D,H,W], w [C, O/groups, kD, kH, kW], bias [O].
Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt,
                        const ConvTranspose3dOptions& o = {});
struct Pool3dOptions {
  Ints kernel{2, 2, 2};
  Ints stride{};  // empty = kernel
  Ints padding{0, 0, 0, 0, 0, 0};
  Ints dilation{1, 1, 1};  // max pool only
  bool ceil_mode = false;
  bool count_include_pad = false;  // avg pool only
  std::string pad_mode = "pad";    // "pad" | "same" | "valid"
};
Tensor max_pool3d(const Tensor& x, const Pool3dOptions& o = {});
Tensor avg_pool3d(const Tensor& x, const Pool3dOptions& o = {});
// Backward ops of the gradient rules: dW [O, C/groups, kD, kH, kW] of conv3d(x, W) given dy (o.pad_mode "pad",
// resolved padding; an end pad may be negative), and dx of max_pool3d(x, o) given dy.
Tensor conv3d_weight_grad(const Tensor& x, const Tensor& dy, const Ints& kernel, const Conv3dOptions& o);
Tensor max_pool3d_grad(const Tensor& x, const Tensor& dy, const Pool3dOptions& o);

}  // namespace spore::ops
