// Normalization and dropout: batch_norm (inference), layer_norm, rms_norm, group_norm, dropout.
// Variances are biased (divide by the element count), as in ONNX and PyTorch.
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
bool dims_compatible(const Dim& a, const Dim& b) { return !a.is_static() || !b.is_static() || a.size == b.size; }
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

std::vector<TensorType> infer_batch_norm(const InferContext& c) {
  infer::common_dtype(c);
  check_epsilon(c);
  const auto& x = c.in(0).dims;
  c.check(x.size() >= 2, ErrorCode::shape_mismatch,
          "x must have rank >= 2 ([N,C,...]), got {}", dims_str(x));
  static const char* names[] = {"x", "scale", "bias", "mean", "var"};
  for (int i = 1; i < 5; ++i) {
    const auto& p = c.in(i).dims;
    c.check(
        p.size() == 1 && dims_compatible(p[0], x[1]), ErrorCode::shape_mismatch,
        "{} must be [{}] (the channels of x {}), got {}", names[i], x[1].str(), dims_str(x), dims_str(p));
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
    c.check(shapes_compatible(c.in(i).dims, norm), ErrorCode::shape_mismatch,
            "{} must have the normalized shape {} (x {} from axis {}), got {}", names[i], dims_str(norm),
                        dims_str(x), axis, dims_str(c.in(i).dims));
  }
  return {c.in(0)};
}

std::vector<TensorType> infer_group_norm(const InferContext& c) {
  infer::common_dtype(c);
  check_epsilon(c);
  const auto& x = c.in(0).dims;
  c.check(x.size() >= 2, ErrorCode::shape_mismatch,
          "x must have rank >= 2 ([N,C,...]), got {}", dims_str(x));
  const int64_t g = c.attrs.i("num_groups");
  c.check(g >= 1, ErrorCode::invalid_argument, "num_groups must be >= 1, got {}", g);
  if (x[1].is_static())
    c.check(x[1].size % g == 0, ErrorCode::shape_mismatch,
            "channels {} of x {} are not divisible by num_groups={}", x[1].size, dims_str(x), g);
  static const char* names[] = {"x", "weight", "bias"};
  for (int i = 1; i < c.num_inputs(); ++i) {
    const auto& p = c.in(i).dims;
    c.check(
        p.size() == 1 && dims_compatible(p[0], x[1]), ErrorCode::shape_mismatch,
        "{} must be [{}] (the channels of x {}), got {}", names[i], x[1].str(), dims_str(x), dims_str(p));
  }
  return {c.in(0)};
}

std::vector<TensorType> infer_dropout(const InferContext& c) {
  const double p = c.attrs.f("p");
  c.check(p >= 0 && p <= 1, ErrorCode::invalid_argument, "p must be in [0, 1], got {}", p);
  return {c.in(0)};
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  r.def(OpId::batch_norm)
      .doc("Inference batch norm over channel axis 1: (x - mean) / sqrt(var + epsilon) * scale + bias.")
      .inputs({"x", "scale", "bias", "mean", "var"})
      .attr("epsilon", AttrKind::f64, 1e-5)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::broadcast, AmpPolicy::keep_f32)
      .infer(infer_batch_norm);
  r.def(OpId::layer_norm)
      .doc("Normalizes over the dims from `axis` to the end; weight and bias have that shape.")
      .inputs({"x", "weight?", "bias?"})
      .attr("axis", AttrKind::i64, int64_t{-1})
      .attr("epsilon", AttrKind::f64, 1e-5)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_last_dims_norm);
  r.def(OpId::rms_norm)
      .doc("x / sqrt(mean(x^2 over dims axis..end) + epsilon) * weight.")
      .inputs({"x", "weight?"})
      .attr("axis", AttrKind::i64, int64_t{-1})
      .attr("epsilon", AttrKind::f64, 1e-6)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_last_dims_norm);
  r.def(OpId::group_norm)
      .doc(
          "Normalizes each group of C/num_groups channels (with all spatial dims) of x [N,C,...]; weight, bias are "
          "[C].")
      .inputs({"x", "weight?", "bias?"})
      .attr("num_groups", AttrKind::i64)
      .attr("epsilon", AttrKind::f64, 1e-5)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_group_norm);
  r.def(OpId::dropout)
      .doc(
          "Inverted dropout: element i is kept iff philox_uniform(seed, 0, i) >= p, then scaled by 1/(1-p); "
          "identity unless training.")
      .inputs({"x"})
      .attr("p", AttrKind::f64)
      .attr("training", AttrKind::boolean)
      .attr("seed", AttrKind::i64, int64_t{0})
      .dtypes(dtypes::floating)
      .traits(Trait::elementwise | Trait::random, FusionKind::elementwise, AmpPolicy::follow)
      .infer(infer_dropout);
}

}  // namespace spore
