// Linear algebra: matmul (NumPy semantics) and linear (x @ w^T + bias).
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace {
using infer::dims_compatible;
using infer::dims_str;



std::vector<TensorType> infer_matmul(const InferContext& c) {
  const DType t = infer::common_dtype(c);
  const auto& a = c.in(0).dims;
  const auto& b = c.in(1).dims;
  if (!(!a.empty() && !b.empty())) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("operands must have rank >= 1, got {} and {}", dims_str(a), dims_str(b)));
  const bool ta = c.attrs.b("transpose_a") && a.size() >= 2;
  const bool tb = c.attrs.b("transpose_b") && b.size() >= 2;
  // 1-D operands are promoted (a -> [1,K], b -> [K,1]) and the added dim is removed from the result.
  const Dim m = a.size() == 1 ? Dim(1) : a[a.size() - (ta ? 1 : 2)];
  const Dim ka = a.size() == 1 ? a[0] : a[a.size() - (ta ? 2 : 1)];
  const Dim kb = b.size() == 1 ? b[0] : b[b.size() - (tb ? 1 : 2)];
  const Dim n = b.size() == 1 ? Dim(1) : b[b.size() - (tb ? 2 : 1)];
  if (!(dims_compatible(ka, kb))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("inner dims differ: a {} (transpose_a={}) has K={}, b {} (transpose_b={}) has K={}", dims_str(a),
                       ta, ka.str(), dims_str(b), tb, kb.str()));
  const std::vector<Dim> ba(a.begin(), a.end() - std::min<size_t>(a.size(), 2));
  const std::vector<Dim> bb(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  std::vector<Dim> out = infer::broadcast_dims(c, ba, bb);
  if (a.size() >= 2) out.push_back(m);
  if (b.size() >= 2) out.push_back(n);
  return {TensorType(t, out)};
}

std::vector<TensorType> infer_linear(const InferContext& c) {
  const DType t = infer::common_dtype(c);
  const auto& x = c.in(0).dims;
  const auto& w = c.in(1).dims;
  c.check(!x.empty(), ErrorCode::shape_mismatch, "x must have rank >= 1, got a scalar");
  if (!(w.size() == 2)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("w must be [out_features, in_features], got {}", dims_str(w)));
  if (!(dims_compatible(x.back(), w[1]))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("x {} has {} features, w {} expects {}", dims_str(x), x.back().str(), dims_str(w), w[1].str()));
  if (c.num_inputs() > 2) {
    const auto& bias = c.in(2).dims;
    if (!(bias.size() == 1 && dims_compatible(bias[0], w[0]))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("bias must be [{}], got {}", w[0].str(), dims_str(bias)));
  }
  std::vector<Dim> out(x.begin(), x.end() - 1);
  out.push_back(w[0]);
  return {TensorType(t, out)};
}

double static_numel(const TensorType& t) { return static_cast<double>(std::max<int64_t>(t.numel(), 0)); }

OpCost bytes_of(std::span<const TensorType> ins, std::span<const TensorType> outs) {
  OpCost c;
  for (const auto& t : ins) c.bytes += static_numel(t) * dtype_size(t.dtype);
  for (const auto& t : outs) c.bytes += static_numel(t) * dtype_size(t.dtype);
  return c;
}


// ---- gradient rules
using Grads = std::vector<Tensor>;

// Sums a broadcast gradient back to `shape` (leading dims away, size-1 dims with keepdims).
Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Tensor r = g;
  const int lead = g.rank() - static_cast<int>(shape.size());
  if (lead > 0) {
    std::vector<int64_t> axes;
    for (int i = 0; i < lead; ++i) axes.push_back(i);
    r = ops::reduce_sum(r, axes, false);
  }
  std::vector<int64_t> axes;
  for (int i = 0; i < r.rank(); ++i)
    if (shape[i] == 1 && r.shape()[i] != 1) axes.push_back(i);
  return axes.empty() ? r : ops::reduce_sum(r, axes, true);
}

// 1-D operands are promoted to matrices ([K] -> [1,K] for a, [K,1] for b) so the 2-D rule applies;
// the gradient of the promoted operand is reshaped back.
Grads matmul_grad(const GradContext& c) {
  const Tensor &a0 = c.inputs[0], &b0 = c.inputs[1];
  const bool ta = c.attrs.b("transpose_a") && a0.rank() >= 2;
  const bool tb = c.attrs.b("transpose_b") && b0.rank() >= 2;
  const Tensor a = a0.rank() == 1 ? ops::reshape(a0, {1, a0.dim(0)}) : a0;
  const Tensor b = b0.rank() == 1 ? ops::reshape(b0, {b0.dim(0), 1}) : b0;
  Shape gshape = c.output_grads[0].shape();
  if (a0.rank() == 1) gshape.insert(gshape.end() - (b0.rank() == 1 ? 0 : 1), 1);
  if (b0.rank() == 1) gshape.push_back(1);
  const Tensor g = gshape == c.output_grads[0].shape() ? c.output_grads[0] : ops::reshape(c.output_grads[0], gshape);
  // With A = op(a) [.., M, K], B = op(b) [.., K, N]: dA = G B^T, dB = A^T G; transposed operands get the
  // transposed products.
  Tensor da, db;
  if (c.wants(0)) {
    da = sum_to(ta ? ops::matmul(b, g, tb, true) : ops::matmul(g, b, false, !tb), a.shape());
    if (a0.rank() == 1) da = ops::reshape(da, a0.shape());
  }
  if (c.wants(1)) {
    db = sum_to(tb ? ops::matmul(g, a, true, ta) : ops::matmul(a, g, !ta, false), b.shape());
    if (b0.rank() == 1) db = ops::reshape(db, b0.shape());
  }
  return {da, db};
}

Grads linear_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.output_grads[0];
  const int64_t out = w.dim(0), in = w.dim(1);
  Grads r{c.wants(0) ? ops::matmul(g, w) : Tensor()};
  const Tensor g2 = ops::reshape(g, {-1, out});
  r.push_back(c.wants(1) ? ops::matmul(g2, ops::reshape(x, {-1, in}), true, false) : Tensor());
  if (c.inputs.size() > 2) r.push_back(c.wants(2) ? ops::reduce_sum(g2, {0}) : Tensor());
  return r;
}

}  // namespace

void register_linalg_ops(OpRegistry& r) {
  r.def("matmul"_op)
      .doc(
          "NumPy matmul: batch dims broadcast, 1-D operands promoted then removed; transposes apply to the last two "
          "dims.")
      .inputs({"a", "b"})
      .attr("transpose_a", AttrKind::boolean, false)
      .attr("transpose_b", AttrKind::boolean, false)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::out_fusable, AmpPolicy::low)
      .weight({.input = 1, .channel_axis = -1, .transpose_attr = "transpose_b", .transposed_axis = -2, .output_channel_axis = -1})
      .infer(infer_matmul)
      .grad(matmul_grad)
      .cost([](std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs& a) {
        OpCost c = bytes_of(ins, outs);
        const auto& ad = ins[0].dims;
        const Dim k = ad.size() == 1 ? ad[0] : ad[ad.size() - (a.b("transpose_a") ? 2 : 1)];
        c.flops = 2.0 * static_numel(outs[0]) * (k.is_static() ? static_cast<double>(k.size) : 0.0);
        return c;
      });
  r.def("linear"_op)
      .doc("y = x @ w^T (+ bias); w is [out_features, in_features], bias is [out_features].")
      .inputs({"x", "w", "bias?"})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::out_fusable, AmpPolicy::low)
      .weight({.input = 1, .channel_axis = 0, .bias_input = 2, .output_channel_axis = -1})
      .infer(infer_linear)
      .grad(linear_grad)
      .cost([](std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs&) {
        OpCost c = bytes_of(ins, outs);
        const Dim k = ins[1].dims[1];
        c.flops = 2.0 * static_numel(outs[0]) * (k.is_static() ? static_cast<double>(k.size) : 0.0);
        return c;
      });
}

}  // namespace spore
