// Linear algebra: matmul (NumPy semantics) and linear (x @ w^T + bias).
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace {

std::string dims_str(const std::vector<Dim>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ',';
    s += d[i].str();
  }
  return s + ']';
}

// Two dims that must agree: equal when both static, otherwise assumed equal at run time.
bool dims_compatible(const Dim& a, const Dim& b) { return !a.is_static() || !b.is_static() || a.size == b.size; }

std::vector<TensorType> infer_matmul(const InferContext& c) {
  const DType t = infer::common_dtype(c);
  const auto& a = c.in(0).dims;
  const auto& b = c.in(1).dims;
  c.check(!a.empty() && !b.empty(), ErrorCode::shape_mismatch,
          "operands must have rank >= 1, got {} and {}", dims_str(a), dims_str(b));
  const bool ta = c.attrs.b("transpose_a") && a.size() >= 2;
  const bool tb = c.attrs.b("transpose_b") && b.size() >= 2;
  // 1-D operands are promoted (a -> [1,K], b -> [K,1]) and the added dim is removed from the result.
  const Dim m = a.size() == 1 ? Dim(1) : a[a.size() - (ta ? 1 : 2)];
  const Dim ka = a.size() == 1 ? a[0] : a[a.size() - (ta ? 2 : 1)];
  const Dim kb = b.size() == 1 ? b[0] : b[b.size() - (tb ? 1 : 2)];
  const Dim n = b.size() == 1 ? Dim(1) : b[b.size() - (tb ? 2 : 1)];
  c.check(dims_compatible(ka, kb), ErrorCode::shape_mismatch,
          "inner dims differ: a {} (transpose_a={}) has K={}, b {} (transpose_b={}) has K={}", dims_str(a),
                      ta, ka.str(), dims_str(b), tb, kb.str());
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
  c.check(w.size() == 2, ErrorCode::shape_mismatch,
          "w must be [out_features, in_features], got {}", dims_str(w));
  c.check(dims_compatible(x.back(), w[1]), ErrorCode::shape_mismatch,
          "x {} has {} features, w {} expects {}", dims_str(x), x.back().str(), dims_str(w), w[1].str());
  if (c.num_inputs() > 2) {
    const auto& bias = c.in(2).dims;
    c.check(bias.size() == 1 && dims_compatible(bias[0], w[0]), ErrorCode::shape_mismatch,
            "bias must be [{}], got {}", w[0].str(), dims_str(bias));
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

}  // namespace

void register_linalg_ops(OpRegistry& r) {
  r.def(OpId::matmul)
      .doc(
          "NumPy matmul: batch dims broadcast, 1-D operands promoted then removed; transposes apply to the last two "
          "dims.")
      .inputs({"a", "b"})
      .attr("transpose_a", AttrKind::boolean, false)
      .attr("transpose_b", AttrKind::boolean, false)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::out_fusable, AmpPolicy::low)
      .infer(infer_matmul)
      .cost([](std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs& a) {
        OpCost c = bytes_of(ins, outs);
        const auto& ad = ins[0].dims;
        const Dim k = ad.size() == 1 ? ad[0] : ad[ad.size() - (a.b("transpose_a") ? 2 : 1)];
        c.flops = 2.0 * static_numel(outs[0]) * (k.is_static() ? static_cast<double>(k.size) : 0.0);
        return c;
      });
  r.def(OpId::linear)
      .doc("y = x @ w^T (+ bias); w is [out_features, in_features], bias is [out_features].")
      .inputs({"x", "w", "bias?"})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::out_fusable, AmpPolicy::low)
      .infer(infer_linear)
      .cost([](std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs&) {
        OpCost c = bytes_of(ins, outs);
        const Dim k = ins[1].dims[1];
        c.flops = 2.0 * static_numel(outs[0]) * (k.is_static() ? static_cast<double>(k.size) : 0.0);
        return c;
      });
}

}  // namespace spore
