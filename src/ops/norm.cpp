// Normalization and dropout: batch_norm (inference), layer_norm, rms_norm, group_norm, dropout.
// Variances are biased (divide by the element count), as in ONNX and PyTorch.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace {
using infer::dims_compatible;
using infer::dims_str;

bool shapes_compatible(const std::vector<Dim>& a, const std::vector<Dim>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!dims_compatible(a[i], b[i])) return false;
  return true;
}

void check_epsilon(const InferContext& c) {
  const double eps = c.attrs.f("epsilon");
  c.check(eps >= 0, ErrorCode::invalid_argument, "epsilon must be >= 0, got {}", eps);
}

// layout "nchw8c" (set by passes/layout.cpp inside a blocked chain): x is [N, C/8, H, W, 8], the parameters [C].
std::vector<TensorType> infer_batch_norm(const InferContext& c) {
  infer::common_dtype(c);
  check_epsilon(c);
  const std::string layout = c.attrs.has("layout") ? c.attrs.s("layout") : std::string("nchw");
  c.check(layout == "nchw" || layout == "nchw8c", ErrorCode::invalid_argument,
          "layout must be \"nchw\" or \"nchw8c\", got \"{}\"", layout);
  const auto& x = c.in(0).dims;
  Dim channels = x.size() >= 2 ? x[1] : Dim(0);
  if (layout == "nchw8c") {
    if (!(x.size() == 5 && x[4].is_static() && x[4].size == 8 && x[1].is_static())) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("layout nchw8c needs x as [N, C/8, H, W, 8], got {}", dims_str(x)));
    channels = Dim(x[1].size * 8);
  }
  if (!(x.size() >= 2)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("x must have rank >= 2 ([N,C,...]), got {}", dims_str(x)));
  static const char* names[] = {"x", "scale", "bias", "mean", "var"};
  for (int i = 1; i < 5; ++i) {
    const auto& p = c.in(i).dims;
    if (!(p.size() == 1 && dims_compatible(p[0], channels))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("{} must be [{}] (the channels of x {}), got {}", names[i],
                                                    channels.str(), dims_str(x), dims_str(p)));
  }
  return {c.in(0)};
}

// layer_norm / rms_norm: weight and bias have the normalized shape x.shape[axis:].
std::vector<TensorType> infer_last_dims_norm(const InferContext& c) {
  infer::common_dtype(c);
  check_epsilon(c);
  const auto& x = c.in(0).dims;
  c.check(!x.empty(), ErrorCode::shape_mismatch, "x must have rank >= 1, got a scalar");
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), static_cast<int>(x.size()));
  const std::vector<Dim> norm(x.begin() + axis, x.end());
  static const char* names[] = {"x", "weight", "bias"};
  for (int i = 1; i < c.num_inputs(); ++i) {
    if (!(shapes_compatible(c.in(i).dims, norm))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("{} must have the normalized shape {} (x {} from axis {}), got {}", names[i], dims_str(norm),
                         dims_str(x), axis, dims_str(c.in(i).dims)));
  }
  return {c.in(0)};
}

std::vector<TensorType> infer_group_norm(const InferContext& c) {
  infer::common_dtype(c);
  check_epsilon(c);
  const auto& x = c.in(0).dims;
  if (!(x.size() >= 2)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("x must have rank >= 2 ([N,C,...]), got {}", dims_str(x)));
  const int64_t g = c.attrs.i("num_groups");
  c.check(g >= 1, ErrorCode::invalid_argument, "num_groups must be >= 1, got {}", g);
  if (x[1].is_static())
    if (!(x[1].size % g == 0)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("channels {} of x {} are not divisible by num_groups={}", x[1].size, dims_str(x), g));
  static const char* names[] = {"x", "weight", "bias"};
  for (int i = 1; i < c.num_inputs(); ++i) {
    const auto& p = c.in(i).dims;
    if (!(p.size() == 1 && dims_compatible(p[0], x[1]))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("{} must be [{}] (the channels of x {}), got {}", names[i],
                                                    x[1].str(), dims_str(x), dims_str(p)));
  }
  return {c.in(0)};
}

std::vector<TensorType> infer_dropout(const InferContext& c) {
  const double p = c.attrs.f("p");
  c.check(p >= 0 && p <= 1, ErrorCode::invalid_argument, "p must be in [0, 1], got {}", p);
  if (c.num_inputs() > 1) {
    // The offset is a tensor (not an attribute) so that a cached plan draws a fresh mask per step.
    const TensorType& o = c.in(1);
    if (!(o.dtype == DType::i64 || o.dtype == DType::i32)) [[unlikely]]
      c.fail(ErrorCode::dtype_mismatch,
             fmt::format("offset must be an i64 or i32 scalar, got dtype {}", dtype_name(o.dtype)));
    if (!(o.dims.empty() || (o.dims.size() == 1 && o.dims[0].is_static() && o.dims[0].size == 1))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("offset must be a scalar (shape [] or [1]), got {}", dims_str(o.dims)));
  }
  return {c.in(0)};
}


// ---- gradient rules (hand-derived; the forward statistics are recomputed with ops::)
using Grads = std::vector<Tensor>;
using Ints = std::vector<int64_t>;

Ints range_axes(int64_t from, int64_t to) {
  Ints a;
  for (int64_t i = from; i < to; ++i) a.push_back(i);
  return a;
}

// Per-channel parameter [C] as [C,1,...] so it broadcasts against x [N,C,...].
Tensor channel_view(const Tensor& p, int rank) {
  Ints shape(rank - 1, 1);
  shape[0] = p.dim(0);
  return ops::reshape(p, shape);
}

// Every axis of x [N,C,...] but the channel axis.
Ints non_channel_axes(int rank) {
  Ints a{0};
  for (int i = 2; i < rank; ++i) a.push_back(i);
  return a;
}

Grads batch_norm_grad(const GradContext& c) {
  SPORE_CHECK(!c.attrs.has("layout") || c.attrs.s("layout") == "nchw", ErrorCode::unsupported,
              "[batch_norm] no gradient for layout {} (an inference-only rewrite)", c.attrs.s("layout"));
  const Tensor &x = c.inputs[0], &g = c.output_grads[0];
  const int rk = x.rank();
  const Tensor scale = channel_view(c.inputs[1], rk), mean = channel_view(c.inputs[3], rk);
  const Tensor inv = ops::rsqrt(ops::add(channel_view(c.inputs[4], rk), c.attrs.f("epsilon")));
  const Tensor centered = ops::sub(x, mean);
  const Ints axes = non_channel_axes(rk);
  const Tensor gsum = ops::reduce_sum(g, axes);
  const Tensor gxc = ops::reduce_sum(ops::mul(g, centered), axes);
  const Tensor inv1 = ops::reshape(inv, {x.dim(1)});
  const Tensor s1 = c.inputs[1];
  return {ops::mul(g, ops::mul(scale, inv)),
          ops::mul(gxc, inv1),
          gsum,
          ops::neg(ops::mul(gsum, ops::mul(s1, inv1))),
          ops::mul(ops::mul(gxc, s1), ops::mul(ops::mul(inv1, ops::mul(inv1, inv1)), -0.5))};
}

// Shared by layer/rms/group norm: given the normalized xhat, rstd (keepdims over `axes`) and the gradient
// dxhat w.r.t. xhat, dx = rstd (dxhat - [mean(dxhat)] - xhat mean(dxhat xhat)).
Tensor norm_input_grad(const Tensor& dxhat, const Tensor& xhat, const Tensor& rstd, const Ints& axes, bool center) {
  Tensor t = ops::sub(dxhat, ops::mul(xhat, ops::reduce_mean(ops::mul(dxhat, xhat), axes, true)));
  if (center) t = ops::sub(t, ops::reduce_mean(dxhat, axes, true));
  return ops::mul(t, rstd);
}

Grads layer_norm_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &g = c.output_grads[0];
  int64_t axis = c.attrs.i("axis");
  if (axis < 0) axis += x.rank();
  const Ints axes = range_axes(axis, x.rank()), lead = range_axes(0, axis);
  const Tensor centered = ops::sub(x, ops::reduce_mean(x, axes, true));
  const Tensor var = ops::reduce_mean(ops::mul(centered, centered), axes, true);
  const Tensor rstd = ops::rsqrt(ops::add(var, c.attrs.f("epsilon")));
  const Tensor xhat = ops::mul(centered, rstd);
  const bool has_w = c.inputs.size() > 1;
  const Tensor dxhat = has_w ? ops::mul(g, c.inputs[1]) : g;
  Grads r{norm_input_grad(dxhat, xhat, rstd, axes, true)};
  const auto lead_sum = [&](const Tensor& t) { return lead.empty() ? t : ops::reduce_sum(t, lead); };
  if (has_w) r.push_back(lead_sum(ops::mul(g, xhat)));
  if (c.inputs.size() > 2) r.push_back(lead_sum(g));
  return r;
}

Grads rms_norm_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &g = c.output_grads[0];
  int64_t axis = c.attrs.i("axis");
  if (axis < 0) axis += x.rank();
  const Ints axes = range_axes(axis, x.rank()), lead = range_axes(0, axis);
  const Tensor rstd = ops::rsqrt(ops::add(ops::reduce_mean(ops::mul(x, x), axes, true), c.attrs.f("epsilon")));
  const Tensor xhat = ops::mul(x, rstd);
  const bool has_w = c.inputs.size() > 1;
  Grads r{norm_input_grad(has_w ? ops::mul(g, c.inputs[1]) : g, xhat, rstd, axes, false)};
  if (has_w) {
    const Tensor gw = ops::mul(g, xhat);
    r.push_back(lead.empty() ? gw : ops::reduce_sum(gw, lead));
  }
  return r;
}

Grads group_norm_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &g = c.output_grads[0];
  const int rk = x.rank();
  const Ints grouped{x.dim(0), c.attrs.i("num_groups"), -1};
  const Tensor xr = ops::reshape(x, grouped);
  const Ints axes{2};
  const Tensor centered = ops::sub(xr, ops::reduce_mean(xr, axes, true));
  const Tensor var = ops::reduce_mean(ops::mul(centered, centered), axes, true);
  const Tensor rstd = ops::rsqrt(ops::add(var, c.attrs.f("epsilon")));
  const Tensor xhat = ops::mul(centered, rstd);
  const bool has_w = c.inputs.size() > 1;
  const Tensor dxhat = has_w ? ops::mul(g, channel_view(c.inputs[1], rk)) : g;
  Grads r{ops::reshape(norm_input_grad(ops::reshape(dxhat, grouped), xhat, rstd, axes, true), x.shape())};
  const Ints nc = non_channel_axes(rk);
  if (has_w) r.push_back(ops::reduce_sum(ops::mul(g, ops::reshape(xhat, x.shape())), nc));
  if (c.inputs.size() > 2) r.push_back(ops::reduce_sum(g, nc));
  return r;
}

// The mask is regenerated by the same Philox rule (same seed, same offset input): dropout(ones) is exactly
// keep / (1 - p). The offset is an integer counter: no gradient.
Grads dropout_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &g = c.output_grads[0];
  const bool has_offset = c.inputs.size() > 1;
  if (!c.attrs.b("training")) return has_offset ? Grads{g, Tensor()} : Grads{g};
  const Tensor offset = has_offset ? c.inputs[1] : Tensor();
  const Tensor scale =
      ops::dropout(ops::full(x.shape(), 1.0, x.dtype()), c.attrs.f("p"), true, c.attrs.i("seed"), offset);
  if (!has_offset) return {ops::mul(g, scale)};
  return {ops::mul(g, scale), Tensor()};
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  r.def("batch_norm"_op)
      .doc("Inference batch norm over channel axis 1: (x - mean) / sqrt(var + epsilon) * scale + bias.")
      .inputs({"x", "scale", "bias", "mean", "var"})
      .attr("epsilon", AttrKind::f64, 1e-5)
      .attr("layout", AttrKind::str, std::string("nchw"))
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::broadcast, AmpPolicy::keep_f32)
      .infer(infer_batch_norm)
      .grad(batch_norm_grad);
  r.def("layer_norm"_op)
      .doc("Normalizes over the dims from `axis` to the end; weight and bias have that shape.")
      .inputs({"x", "weight?", "bias?"})
      .attr("axis", AttrKind::i64, int64_t{-1})
      .attr("epsilon", AttrKind::f64, 1e-5)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_last_dims_norm)
      .grad(layer_norm_grad);
  r.def("rms_norm"_op)
      .doc("x / sqrt(mean(x^2 over dims axis..end) + epsilon) * weight.")
      .inputs({"x", "weight?"})
      .attr("axis", AttrKind::i64, int64_t{-1})
      .attr("epsilon", AttrKind::f64, 1e-6)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_last_dims_norm)
      .grad(rms_norm_grad);
  r.def("group_norm"_op)
      .doc(
          "Normalizes each group of C/num_groups channels (with all spatial dims) of x [N,C,...]; weight, bias are "
          "[C].")
      .inputs({"x", "weight?", "bias?"})
      .attr("num_groups", AttrKind::i64)
      .attr("epsilon", AttrKind::f64, 1e-5)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_group_norm)
      .grad(group_norm_grad);
  r.def("dropout"_op)
      .doc(
          "Inverted dropout: element i is kept iff philox_uniform(seed, offset, i) >= p, then scaled by 1/(1-p); "
          "identity unless training. offset: optional i64/i32 scalar tensor (0 when absent), e.g. the training "
          "step, so one compiled plan draws a fresh mask each step.")
      .inputs({"x", "offset?"})
      .attr("p", AttrKind::f64)
      .attr("training", AttrKind::boolean)
      .attr("seed", AttrKind::i64, int64_t{0})
      .dtypes(dtypes::floating)
      .traits(Trait::elementwise | Trait::random, FusionKind::elementwise, AmpPolicy::follow)
      .infer(infer_dropout)
      .grad(dropout_grad);
}

}  // namespace spore
