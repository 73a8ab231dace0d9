// The fused attention op (ops/attention.h). Shape inference checks every operand against q; the decomposition
// (matmul, mul by the scale, add the mask, softmax, matmul) is the definition and the fallback on backends
// without a kernel. The gradient recomputes the probabilities (the op keeps none) and is written with ops::.
#include "ops/attention.h"

#include <cmath>

#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace attention {

Geometry geometry(const Dims& q, const Dims& k, const Dims& v, bool k_transposed) {
  Geometry g;
  const size_t r = q.size();
  for (size_t i = 0; i + 2 < r; ++i) g.batch *= q[i];
  g.lq = q[r - 2];
  g.d = q[r - 1];
  g.lk = k_transposed ? k[r - 1] : k[r - 2];
  g.dv = v[r - 1];
  g.k_transposed = k_transposed;
  return g;
}

MaskStrides mask_strides(const Dims& mask, const Dims& scores) {
  MaskStrides s;
  const size_t r = scores.size(), lead = r - mask.size();
  std::vector<int64_t> full(r, 1), stride(r, 0);
  for (size_t i = 0; i < mask.size(); ++i) full[lead + i] = mask[i];
  int64_t acc = 1;
  for (size_t i = r; i-- > 0;) {
    stride[i] = full[i] == 1 ? 0 : acc;
    acc *= full[i];
  }
  s.lead_dims.assign(scores.begin(), scores.end() - 2);
  s.lead_strides.assign(stride.begin(), stride.end() - 2);
  s.row = stride[r - 2];
  s.col = stride[r - 1];
  return s;
}

int64_t MaskStrides::batch_offset(int64_t b) const {
  int64_t off = 0;
  for (size_t i = lead_dims.size(); i-- > 0;) {
    off += (b % lead_dims[i]) * lead_strides[i];
    b /= lead_dims[i];
  }
  return off;
}

}  // namespace attention

namespace {
using infer::dims_compatible;
using infer::dims_str;

std::vector<TensorType> infer_attention(const InferContext& c) {
  const DType t = infer::common_dtype(c);
  const double scale = c.attrs.f("scale");
  c.check(std::isfinite(scale), ErrorCode::invalid_argument, "scale must be finite, got {}", scale);
  const bool kt = c.attrs.b("k_transposed");
  const auto& q = c.in(0).dims;
  const auto& k = c.in(1).dims;
  const auto& v = c.in(2).dims;
  if (!(q.size() >= 2)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("q must be [..., Lq, D] (rank >= 2), got {}", dims_str(q)));
  if (!(k.size() == q.size() && v.size() == q.size())) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("q, k and v must have the same rank, got q {}, k {}, v {}",
                                                  dims_str(q), dims_str(k), dims_str(v)));
  const size_t r = q.size();
  for (size_t i = 0; i + 2 < r; ++i)
    if (!(dims_compatible(q[i], k[i]) && dims_compatible(q[i], v[i]))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("leading dims of q {}, k {} and v {} must be equal (no broadcasting)", dims_str(q),
                         dims_str(k), dims_str(v)));
  const Dim& kd = kt ? k[r - 2] : k[r - 1];
  const Dim& kl = kt ? k[r - 1] : k[r - 2];
  if (!(dims_compatible(q[r - 1], kd))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("q {} has D={} but k {} (k_transposed={}) has D={}", dims_str(q),
                                                  q[r - 1].str(), dims_str(k), kt, kd.str()));
  if (!(dims_compatible(kl, v[r - 2]))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("k {} (k_transposed={}) has Lk={} but v {} has {} rows", dims_str(k),
                                                  kt, kl.str(), dims_str(v), v[r - 2].str()));
  std::vector<Dim> scores(q.begin(), q.end() - 1);
  scores.push_back(kl);
  if (c.num_inputs() > 3) {
    const auto& m = c.in(3).dims;
    bool ok = m.size() <= r;
    for (size_t i = 0; ok && i < m.size(); ++i) {
      const Dim& s = scores[r - m.size() + i];
      ok = (m[i].is_static() && m[i].size == 1) || dims_compatible(m[i], s);
    }
    if (!(ok)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("mask {} does not broadcast to the scores' shape {}", dims_str(m), dims_str(scores)));
  }
  std::vector<Dim> out(q.begin(), q.end() - 1);
  out.push_back(v[r - 1]);
  return {TensorType(t, out)};
}

std::vector<Tensor> decompose_attention(std::span<const Tensor> in, const Attrs& a) {
  Tensor s = ops::matmul(in[0], in[1], false, !a.b("k_transposed"));
  s = ops::mul(s, a.f("scale"));
  if (in.size() > 3) s = ops::add(s, in[3]);
  return {ops::matmul(ops::softmax(s, -1), in[2])};
}

// Sums a broadcast gradient back to the mask's shape (leading dims away, size-1 dims kept).
Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Tensor r = g;
  const int lead = g.rank() - static_cast<int>(shape.size());
  if (lead > 0) {
    ops::Ints axes;
    for (int i = 0; i < lead; ++i) axes.push_back(i);
    r = ops::reduce_sum(r, axes, false);
  }
  ops::Ints axes;
  for (int i = 0; i < r.rank(); ++i)
    if (shape[static_cast<size_t>(i)] == 1 && r.shape()[static_cast<size_t>(i)] != 1) axes.push_back(i);
  return axes.empty() ? r : ops::reduce_sum(r, axes, true);
}

// P = softmax(scale * q k^T + mask); dv = P^T dO; dS = P * (dO v^T - rowsum(dO v^T * P)); dq = scale dS k;
// dk = scale dS^T q (k_transposed: scale q^T dS); dmask = dS summed to the mask's shape.
std::vector<Tensor> attention_grad(const GradContext& g) {
  const auto& in = g.inputs;
  std::vector<Tensor> out(in.size());
  const Tensor& dout = g.output_grads[0];
  if (!dout.defined()) return out;
  const bool kt = g.attrs.b("k_transposed");
  const double scale = g.attrs.f("scale");
  const Tensor &q = in[0], &k = in[1], &v = in[2];
  Tensor s = ops::mul(ops::matmul(q, k, false, !kt), scale);
  if (in.size() > 3) s = ops::add(s, in[3]);
  const int64_t last = s.rank() - 1;
  const Tensor p = ops::softmax(s, last);
  if (g.wants(2)) out[2] = ops::matmul(p, dout, true, false);
  const bool want_mask = in.size() > 3 && g.wants(3);
  if (!g.wants(0) && !g.wants(1) && !want_mask) return out;
  const Tensor dp = ops::matmul(dout, v, false, true);
  const Tensor ds = ops::mul(p, ops::sub(dp, ops::reduce_sum(ops::mul(dp, p), {last}, true)));
  if (want_mask) out[3] = sum_to_shape(ds, in[3].shape());
  const Tensor dss = ops::mul(ds, scale);
  if (g.wants(0)) out[0] = ops::matmul(dss, k, false, kt);
  if (g.wants(1)) out[1] = kt ? ops::matmul(q, dss, true, false) : ops::matmul(dss, q, true, false);
  return out;
}

OpCost attention_cost(std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs& a) {
  OpCost c;
  for (const auto& t : ins) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  for (const auto& t : outs) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  if (!ins[0].is_static() || !ins[1].is_static() || !ins[2].is_static()) return c;
  const attention::Geometry g =
      attention::geometry(ins[0].shape(), ins[1].shape(), ins[2].shape(), a.b("k_transposed"));
  const double rows = static_cast<double>(g.batch * g.lq), lk = static_cast<double>(g.lk);
  // Two matmuls (2 flops per multiply-add), then scale, mask, max, exp, sum, divide per score.
  c.flops = rows * lk * (2.0 * static_cast<double>(g.d) + 2.0 * static_cast<double>(g.dv) + 6.0);
  return c;
}
}  // namespace

void register_attention_ops(OpRegistry& r) {
  r.def("attention"_op)
      .doc(
          "softmax(scale * q @ k^T [+ mask], last axis) @ v: q [..., Lq, D], k [..., Lk, D] (or [..., D, Lk] with "
          "k_transposed=true), v [..., Lk, Dv], equal leading dims; mask additive, broadcast to [..., Lq, Lk]. "
          "Made by fuse_attention on inference graphs; trainable models call it (nn/llama.h), its gradient "
          "recomputes the probabilities.")
      .inputs({"q", "k", "v", "mask?"})
      .attr("scale", AttrKind::f64, 1.0)
      .attr("k_transposed", AttrKind::boolean, false)
      .dtypes(dtypes::floating)
      .traits(TraitSet{}, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_attention)
      .decompose(decompose_attention)
      .grad(attention_grad)
      .cost(attention_cost);
}

}  // namespace spore
