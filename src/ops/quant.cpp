// Quantization: quantize_linear / dequantize_linear (ONNX QuantizeLinear / DequantizeLinear semantics) and the
// fused int8 compute ops the static quantization pass lowers conv2d / linear to (passes/quantize.h):
//   qconv2d(x_q, x_scale, x_zp, w_q, w_scale, bias?)  conv2d attributes, -> f32
//   qlinear(x_q, x_scale, x_zp, w_q, w_scale, bias?)  -> f32
// computing y = (sum (x_q - x_zp) * w_q) * (x_scale * w_scale[o]) + bias[o] with exact int32 accumulation.
// Activations are u8 or i8 with one scale / zero point per tensor; weights are i8, symmetric (no zero point),
// with one scale per tensor or per output channel. The output stays f32 so the ops around them (relu, pooling,
// softmax) keep running in float. None of these ops has a gradient.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace {
using infer::dims_compatible;
using infer::dims_str;

constexpr DTypeSet quant_dtypes{DType::i8, DType::u8};

bool is_scalar_like(const TensorType& t) { return t.rank() == 0 || (t.rank() == 1 && t.dims[0].is_static() && t.dims[0].size == 1); }

// scale (and zero point) of quantize/dequantize: a scalar (per tensor) or [C] with C = x.dims[axis] (per axis).
void check_quant_params(const InferContext& c, const TensorType& x, int scale_input) {
  const TensorType& s = c.in(scale_input);
  if (!(s.dtype == DType::f32)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("scale must be f32, got {}", dtype_name(s.dtype)));
  if (!(s.rank() <= 1)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("scale must be a scalar or 1-D, got {}", dims_str(s.dims)));
  if (s.rank() == 1 && !is_scalar_like(s)) {
    if (!(x.rank() >= 1)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("a 1-D scale {} needs x of rank >= 1, got a scalar", dims_str(s.dims)));
    const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), x.rank());
    if (!(dims_compatible(s.dims[0], x.dims[static_cast<size_t>(axis)]))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("scale {} must have one value per element of axis {} of x {}",
                                                    dims_str(s.dims), axis, dims_str(x.dims)));
  }
  if (c.num_inputs() > scale_input + 1) {
    const TensorType& z = c.in(scale_input + 1);
    if (!(z.dims.size() == s.dims.size() && (z.rank() == 0 || dims_compatible(z.dims[0], s.dims[0])))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("zero_point {} must have the shape of scale {}", dims_str(z.dims), dims_str(s.dims)));
  }
}

std::vector<TensorType> infer_quantize(const InferContext& c) {
  const TensorType& x = c.in(0);
  if (!(x.dtype == DType::f32)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("x must be f32, got {}", dtype_name(x.dtype)));
  check_quant_params(c, x, 1);
  DType out = DType::u8;  // ONNX: without a zero point the result is uint8
  if (c.num_inputs() > 2) {
    out = c.in(2).dtype;
    if (!(quant_dtypes.has(out))) [[unlikely]]
      c.fail(ErrorCode::dtype_mismatch, fmt::format("zero_point must be i8 or u8, got {}", dtype_name(out)));
  }
  return {TensorType(out, x.dims)};
}

std::vector<TensorType> infer_dequantize(const InferContext& c) {
  const TensorType& q = c.in(0);
  check_quant_params(c, q, 1);
  if (c.num_inputs() > 2)
    if (!(c.in(2).dtype == q.dtype)) [[unlikely]]
      c.fail(ErrorCode::dtype_mismatch,
             fmt::format("zero_point must have x's dtype {}, got {}", dtype_name(q.dtype), dtype_name(c.in(2).dtype)));
  return {TensorType(DType::f32, q.dims)};
}

// qconv2d / qlinear: checks the quantization operands, then runs the float op's inference on f32 stand-ins
// for (x, w, bias), so the geometry rules (and their messages) are conv2d's / linear's, naming this op.
std::vector<TensorType> infer_qcompute(const InferContext& c, OpId float_op) {
  const TensorType &x = c.in(0), &xs = c.in(1), &xz = c.in(2), &w = c.in(3), &ws = c.in(4);
  if (!(is_scalar_like(xs) && xs.dtype == DType::f32)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("x_scale must be an f32 scalar, got {}", xs.str()));
  if (!(is_scalar_like(xz))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("x_zero_point must be a scalar, got {}", dims_str(xz.dims)));
  if (!(xz.dtype == x.dtype)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch,
           fmt::format("x_zero_point must have x's dtype {}, got {}", dtype_name(x.dtype), dtype_name(xz.dtype)));
  if (!(w.dtype == DType::i8)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("w must be i8, got {}", dtype_name(w.dtype)));
  if (!(w.rank() >= 1 && w.dims[0].is_static())) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("w must have a static output dim, got {}", dims_str(w.dims)));
  if (!(ws.dtype == DType::f32)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("w_scale must be f32, got {}", dtype_name(ws.dtype)));
  if (!(is_scalar_like(ws) || (ws.rank() == 1 && dims_compatible(ws.dims[0], w.dims[0])))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("w_scale must be a scalar or [{}] (one per output channel), got {}",
                                                  w.dims[0].str(), dims_str(ws.dims)));
  std::vector<TensorType> fl{TensorType(DType::f32, x.dims), TensorType(DType::f32, w.dims)};
  if (c.num_inputs() > 5) {
    if (!(c.in(5).dtype == DType::f32)) [[unlikely]]
      c.fail(ErrorCode::dtype_mismatch, fmt::format("bias must be f32, got {}", dtype_name(c.in(5).dtype)));
    fl.push_back(c.in(5));
  }
  // Looked up at call time: the registry is still being built while this family registers.
  const OpDef& def = op_registry().get(float_op);
  const InferContext fc{c.def, fl, c.attrs, c.where};
  return def.infer(fc);
}

double static_numel(const TensorType& t) { return static_cast<double>(std::max<int64_t>(t.numel(), 0)); }

OpCost qcompute_cost(std::span<const TensorType> ins, std::span<const TensorType> outs) {
  OpCost c;
  for (const auto& t : ins) c.bytes += static_numel(t) * dtype_size(t.dtype);
  for (const auto& t : outs) c.bytes += static_numel(t) * dtype_size(t.dtype);
  const auto& w = ins[3].dims;  // every output meets one weight row: 2 ops per weight element of that row
  double per_out = 1;
  for (size_t i = 1; i < w.size(); ++i) per_out *= w[i].is_static() ? static_cast<double>(w[i].size) : 0.0;
  c.flops = 2.0 * static_numel(outs[0]) * per_out;
  return c;
}

}  // namespace

void register_quant_ops(OpRegistry& r) {
  using V = std::vector<int64_t>;
  const TraitSet t = Trait::no_grad;
  r.def("quantize_linear"_op)
      .doc("y = saturate(round_half_even(x / scale) + zero_point) (x / scale in f32); scale/zero_point are scalars "
           "or 1-D along `axis`; y has zero_point's dtype (u8 without one).")
      .inputs({"x", "scale", "zero_point?"})
      .attr("axis", AttrKind::i64, int64_t{1})
      .dtypes(DTypeSet{DType::f32})
      .traits(t, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_quantize);
  r.def("dequantize_linear"_op)
      .doc("y = (x - zero_point) * scale in f32; scale/zero_point are scalars or 1-D along `axis`.")
      .inputs({"x", "scale", "zero_point?"})
      .attr("axis", AttrKind::i64, int64_t{1})
      .dtypes(DTypeSet{DType::i8, DType::u8, DType::i32})
      .traits(t, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_dequantize);
  r.def("qconv2d"_op)
      .doc("int8 conv2d: x_q u8/i8 with per-tensor x_scale/x_zero_point, w_q i8 [O,C/groups,kH,kW] with w_scale "
           "scalar or [O] (symmetric), bias f32 [O]; int32 accumulation, f32 output.")
      .inputs({"x", "x_scale", "x_zero_point", "w", "w_scale", "bias?"})
      .attr("stride", AttrKind::i64s, V{1, 1})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1})
      .attr("groups", AttrKind::i64, int64_t{1})
      .choice("pad_mode", {"pad", "same", "valid"})
      .dtypes(quant_dtypes)
      .traits(t, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer([](const InferContext& c) { return infer_qcompute(c, "conv2d"_op); })
      .cost([](auto ins, auto outs, const Attrs&) { return qcompute_cost(ins, outs); });
  r.def("qlinear"_op)
      .doc("int8 linear: y = x @ w^T + bias with x_q u8/i8 (per-tensor x_scale/x_zero_point), w_q i8 "
           "[out,in] with w_scale scalar or [out] (symmetric), bias f32 [out]; int32 accumulation, f32 output.")
      .inputs({"x", "x_scale", "x_zero_point", "w", "w_scale", "bias?"})
      .dtypes(quant_dtypes)
      .traits(t, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer([](const InferContext& c) { return infer_qcompute(c, "linear"_op); })
      .cost([](auto ins, auto outs, const Attrs&) { return qcompute_cost(ins, outs); });
}

namespace ops {
namespace {
Tensor with_opt(OpId op, std::vector<Tensor> ins, const std::optional<Tensor>& extra, const Attrs& a) {
  if (extra) ins.push_back(*extra);
  return call1(op, ins, a);
}
}  // namespace

Tensor quantize_linear(const Tensor& x, const Tensor& scale, const std::optional<Tensor>& zero_point, int64_t axis) {
  return with_opt("quantize_linear"_op, {x, scale}, zero_point, {{"axis", axis}});
}
Tensor dequantize_linear(const Tensor& q, const Tensor& scale, const std::optional<Tensor>& zero_point, int64_t axis) {
  return with_opt("dequantize_linear"_op, {q, scale}, zero_point, {{"axis", axis}});
}
Tensor qconv2d(const Tensor& x, const Tensor& x_scale, const Tensor& x_zero_point, const Tensor& w,
               const Tensor& w_scale, const std::optional<Tensor>& bias, const Conv2dOptions& o) {
  return with_opt("qconv2d"_op, {x, x_scale, x_zero_point, w, w_scale}, bias,
                  {{"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups},
                   {"pad_mode", o.pad_mode}});
}
Tensor qlinear(const Tensor& x, const Tensor& x_scale, const Tensor& x_zero_point, const Tensor& w,
               const Tensor& w_scale, const std::optional<Tensor>& bias) {
  return with_opt("qlinear"_op, {x, x_scale, x_zero_point, w, w_scale}, bias, {});
}
}  // namespace ops

}  // namespace spore
