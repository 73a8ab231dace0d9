#pragma once
// The op API: free functions, one per op, each backed by exactly one OpDef (src/ops/<family>.cpp).
// In eager mode they compute; while tracing they record graph nodes. Attribute names and defaults
// here are the OpDef schema's; see `spore ops` for the full list with dtypes and backends.
#include <optional>
#include <string>
#include <vector>

#include "ops/dispatch.h"

namespace spore::ops {

using Ints = std::vector<int64_t>;

// ---- graph structure
Tensor identity(const Tensor& x);

// ---- elementwise unary
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double alpha = 0.01);
Tensor gelu(const Tensor& x, const std::string& approximate = "none");  // "none" (erf) | "tanh"
Tensor silu(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);  // half to even
Tensor sign(const Tensor& x);
Tensor clip(const Tensor& x, double min, double max);
Tensor hardsigmoid(const Tensor& x, double alpha = 0.2, double beta = 0.5);  // clip(alpha x + beta, 0, 1), ONNX's defaults
Tensor hardswish(const Tensor& x);                                         // x * clip(x + 3, 0, 6) / 6
Tensor softplus(const Tensor& x);                                          // log(1 + e^x), without overflow
Tensor mish(const Tensor& x);                                              // x * tanh(softplus(x))
Tensor logical_not(const Tensor& x);
Tensor cast(const Tensor& x, DType dtype);

// ---- elementwise binary, NumPy broadcasting; both inputs must have the same dtype
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // integer division truncates toward zero
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor mod(const Tensor& a, const Tensor& b, bool fmod = false);  // fmod=false: result has the divisor's sign
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Scalar forms: the scalar takes the tensor's dtype.
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);

// ---- reductions (axes empty = all axes)
Tensor reduce_sum(const Tensor& x, const Ints& axes = {}, bool keepdims = false);
Tensor reduce_mean(const Tensor& x, const Ints& axes = {}, bool keepdims = false);
Tensor reduce_max(const Tensor& x, const Ints& axes = {}, bool keepdims = false);
Tensor reduce_min(const Tensor& x, const Ints& axes = {}, bool keepdims = false);
Tensor reduce_prod(const Tensor& x, const Ints& axes = {}, bool keepdims = false);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims = false);  // i64; first index on ties
Tensor argmin(const Tensor& x, int64_t axis, bool keepdims = false);
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive = false, bool reverse = false);
// Returns {values, indices(i64)}; ties: lower index first.
std::vector<Tensor> topk(const Tensor& x, int64_t k, int64_t axis = -1, bool largest = true, bool sorted = true);

// ---- linear algebra and nn
// NumPy matmul (batch dims broadcast, 1-D operands promoted); transposes apply to the last two dims.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// y = x @ w^T (+ bias); w is [out_features, in_features].
Tensor linear(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt);

struct Conv2dOptions {
  Ints stride{1, 1};
  Ints padding{0, 0, 0, 0};  // top, left, bottom, right (ONNX order: begins then ends)
  Ints dilation{1, 1};
  int64_t groups = 1;
  std::string pad_mode = "pad";  // "pad" | "same" (extra padding at the end) | "valid"
};
// x [N,C,H,W], w [O, C/groups, kH, kW], bias [O].
Tensor conv2d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt, const Conv2dOptions& o = {});
struct ConvTranspose2dOptions {
  Ints stride{1, 1};
  Ints padding{0, 0, 0, 0};
  Ints output_padding{0, 0};
  Ints dilation{1, 1};
  int64_t groups = 1;
};
// x [N,C,H,W], w [C, O/groups, kH, kW], bias [O].
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias = std::nullopt,
                        const ConvTranspose2dOptions& o = {});
struct Pool2dOptions {
  Ints kernel{2, 2};
  Ints stride{};  // empty = kernel
  Ints padding{0, 0, 0, 0};
  Ints dilation{1, 1};  // max pool only
  bool ceil_mode = false;
  bool count_include_pad = false;  // avg pool only
  std::string pad_mode = "pad";  // "pad" | "same" | "valid"
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o = {});
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o = {});
Tensor global_avg_pool(const Tensor& x);  // [N,C,H,W] -> [N,C,1,1]
// Backward kernels used by the gradient rules of conv2d and max_pool2d.
// dW [O, C/groups, kH, kW] of conv2d(x, W) given dy; o.pad_mode must be "pad" (pass resolved padding).
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& dy, const Ints& kernel, const Conv2dOptions& o);
// dx of max_pool2d(x, o) given dy: each dy element goes to the input its window selected.
Tensor max_pool2d_grad(const Tensor& x, const Tensor& dy, const Pool2dOptions& o);
// Inference batch norm over channel axis 1.
Tensor batch_norm(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean, const Tensor& var,
                  double epsilon = 1e-5);
// Normalizes over the dims from `axis` to the end.
Tensor layer_norm(const Tensor& x, const std::optional<Tensor>& weight = std::nullopt,
                  const std::optional<Tensor>& bias = std::nullopt, int64_t axis = -1, double epsilon = 1e-5);
Tensor rms_norm(const Tensor& x, const std::optional<Tensor>& weight = std::nullopt, int64_t axis = -1,
                double epsilon = 1e-6);
Tensor group_norm(const Tensor& x, int64_t num_groups, const std::optional<Tensor>& weight = std::nullopt,
                  const std::optional<Tensor>& bias = std::nullopt, double epsilon = 1e-5);
// Inverted dropout with the counter-based RNG keyed by (seed, offset, element index); identity unless training.
// offset: optional i64/i32 scalar tensor (0 when undefined); a graph input there gives a cached plan fresh masks.
Tensor dropout(const Tensor& x, double p, bool training, int64_t seed = 0, const Tensor& offset = Tensor());

// ---- shape and data movement
Tensor reshape(const Tensor& x, const Ints& shape);  // one -1 allowed
Tensor transpose(const Tensor& x, const Ints& perm = {});  // empty = reverse dims
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
std::vector<Tensor> split(const Tensor& x, const Ints& sizes, int64_t axis);
// ONNX Slice semantics (negative indices, clamping, negative steps). axes empty = 0..n-1, steps empty = 1s.
Tensor slice(const Tensor& x, const Ints& starts, const Ints& ends, const Ints& axes = {}, const Ints& steps = {});
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis = 0);  // numpy take; negative indices wrap
Tensor gather_elements(const Tensor& x, const Tensor& indices, int64_t axis);
// ONNX ScatterElements: reduction "none" | "add" | "mul" | "max" | "min".
Tensor scatter(const Tensor& x, const Tensor& indices, const Tensor& updates, int64_t axis,
               const std::string& reduction = "none");
Tensor index_select(const Tensor& x, const Tensor& indices, int64_t axis);  // indices 1-D
// Weighted taps along one axis (Resize's separable interpolation): y[.., o, ..] = sum_t weights[o, t] *
// x[.., indices[o, t], ..]; indices i32/i64 [out, taps], weights [out, taps] in x's dtype.
Tensor resample(const Tensor& x, const Tensor& indices, const Tensor& weights, int64_t axis);
Tensor embedding(const Tensor& table, const Tensor& ids);  // table [V,D], ids any shape -> [..., D]
// pads: begins for every dim then ends (ONNX order). mode "constant" | "reflect" | "edge".
Tensor pad(const Tensor& x, const Ints& pads, const std::string& mode = "constant", double value = 0.0);
Tensor expand(const Tensor& x, const Ints& shape);  // bidirectional broadcast (ONNX Expand)
Tensor squeeze(const Tensor& x, const Ints& axes = {});  // empty = all size-1 dims
Tensor unsqueeze(const Tensor& x, const Ints& axes);
Tensor flatten(const Tensor& x, int64_t axis = 1);  // -> [prod(dims[:axis]), prod(dims[axis:])]
Tensor tile(const Tensor& x, const Ints& repeats);
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype = DType::f32, int64_t axis = -1,
               double on_value = 1.0, double off_value = 0.0);

// ---- indexing (src/ops/index.cpp)
// ONNX ScatterND: a copy of x with updates written (or reduced: "add" | "mul" | "max" | "min") at the index tuples in
// the last dim of indices; updates = indices.shape[:-1] + x.shape[k:].
Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, const std::string& reduction = "none");
// ONNX GatherND: slices of x at the index tuples in the last dim of indices, the first batch_dims dims shared.
Tensor gather_nd(const Tensor& x, const Tensor& indices, int64_t batch_dims = 0);
// ONNX GridSample / torch.nn.functional.grid_sample on [N, C, H, W] with grid [N, Ho, Wo, 2] (x, y in [-1, 1]).
// mode "bilinear" | "nearest" | "bicubic"; padding_mode "zeros" | "border" | "reflection".
Tensor grid_sample(const Tensor& x, const Tensor& grid, const std::string& mode = "bilinear",
                   const std::string& padding_mode = "zeros", bool align_corners = false);
// ONNX RoiAlign: x [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] -> [R, C, oh, ow].
// mode "avg" | "max"; coordinate_transformation_mode "half_pixel" | "output_half_pixel".
Tensor roi_align(const Tensor& x, const Tensor& rois, const Tensor& batch_indices, int64_t output_height = 1,
                 int64_t output_width = 1, int64_t sampling_ratio = 0, double spatial_scale = 1.0,
                 const std::string& mode = "avg", const std::string& coordinate_transformation_mode = "half_pixel");
// numpy.einsum: "ij,jk->ik", implicit output (sorted labels that appear once), "..." broadcast dims.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& inputs);

// ---- creation
Tensor arange(double start, double stop, double step = 1.0, DType dtype = DType::f32);
Tensor full(const Ints& shape, double value, DType dtype = DType::f32);
Tensor zeros(const Ints& shape, DType dtype = DType::f32);
Tensor ones(const Ints& shape, DType dtype = DType::f32);

// ---- quantization (ONNX QuantizeLinear / DequantizeLinear; int8 compute ops of static quantization)
// q = saturate(round_half_even(x / scale) + zero_point): scale f32 scalar or [x.dim(axis)], zero_point i8/u8
// of scale's shape (its dtype is q's; u8 without one).
Tensor quantize_linear(const Tensor& x, const Tensor& scale, const std::optional<Tensor>& zero_point = std::nullopt,
                       int64_t axis = 1);
// (q - zero_point) * scale in f32; q i8/u8/i32.
Tensor dequantize_linear(const Tensor& q, const Tensor& scale, const std::optional<Tensor>& zero_point = std::nullopt,
                         int64_t axis = 1);
// conv2d / linear on int8 operands, f32 out: x u8/i8 with per-tensor scale and zero point (scalars of x's
// dtype), w i8 symmetric with w_scale a scalar or one per output channel, bias f32.
Tensor qconv2d(const Tensor& x, const Tensor& x_scale, const Tensor& x_zero_point, const Tensor& w,
               const Tensor& w_scale, const std::optional<Tensor>& bias = std::nullopt, const Conv2dOptions& o = {});
Tensor qlinear(const Tensor& x, const Tensor& x_scale, const Tensor& x_zero_point, const Tensor& w,
               const Tensor& w_scale, const std::optional<Tensor>& bias = std::nullopt);

}  // namespace spore::ops
