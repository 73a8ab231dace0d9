// Elementwise unary ops: math, activations, rounding, clip, logical_not and cast.
// All are shape-preserving (Trait::elementwise); every one but cast keeps its input dtype.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

namespace {

// gelu's "approximate" must name a known form; checked at inference so graphs fail early.
std::vector<TensorType> infer_gelu(const InferContext& c) {
  const std::string& a = c.attrs.s("approximate");
  c.check(a == "none" || a == "tanh", ErrorCode::invalid_argument,
          fmt::format("attribute 'approximate' must be \"none\" or \"tanh\", got \"{}\"", a));
  return {c.in(0)};
}

std::vector<TensorType> infer_cast(const InferContext& c) { return {TensorType(c.attrs.dtype("dtype"), c.in(0).dims)}; }

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  const TraitSet ew = Trait::elementwise | Trait::inplace_ok;
  const TraitSet ew_no_grad = ew | Trait::no_grad;
  const FusionKind fk = FusionKind::elementwise;
  // One line per op: id, doc, accepted dtypes, traits, mixed-precision policy.
  struct Simple {
    OpId id;
    const char* doc;
    DTypeSet dtypes;
    TraitSet traits;
    AmpPolicy amp;
  };
  const Simple simple[] = {
      {OpId::neg, "-x (integers wrap like two's complement)", dtypes::signed_numeric, ew, AmpPolicy::follow},
      {OpId::abs, "|x| (abs of the most negative integer wraps to itself)", dtypes::signed_numeric, ew, AmpPolicy::follow},
      {OpId::exp, "e^x", dtypes::floating, ew, AmpPolicy::keep_f32},
      {OpId::log, "natural logarithm (log 0 = -inf, log of a negative = nan)", dtypes::floating, ew, AmpPolicy::keep_f32},
      {OpId::sqrt, "square root", dtypes::floating, ew, AmpPolicy::follow},
      {OpId::rsqrt, "1 / sqrt(x)", dtypes::floating, ew, AmpPolicy::keep_f32},
      {OpId::reciprocal, "1 / x", dtypes::floating, ew, AmpPolicy::keep_f32},
      {OpId::tanh, "hyperbolic tangent", dtypes::floating, ew, AmpPolicy::follow},
      {OpId::sigmoid, "1 / (1 + e^-x)", dtypes::floating, ew, AmpPolicy::follow},
      {OpId::relu, "max(x, 0)", dtypes::signed_numeric, ew, AmpPolicy::follow},
      {OpId::silu, "x * sigmoid(x)", dtypes::floating, ew, AmpPolicy::follow},
      {OpId::erf, "Gauss error function", dtypes::floating, ew, AmpPolicy::keep_f32},
      {OpId::sin, "sine (radians)", dtypes::floating, ew, AmpPolicy::follow},
      {OpId::cos, "cosine (radians)", dtypes::floating, ew, AmpPolicy::follow},
      {OpId::floor, "largest integer <= x", dtypes::floating, ew_no_grad, AmpPolicy::follow},
      {OpId::ceil, "smallest integer >= x", dtypes::floating, ew_no_grad, AmpPolicy::follow},
      {OpId::round, "nearest integer, ties to even", dtypes::floating, ew_no_grad, AmpPolicy::follow},
      {OpId::sign, "-1, 0 or 1 by the sign of x (nan stays nan)", dtypes::signed_numeric, ew_no_grad, AmpPolicy::follow},
      {OpId::logical_not, "!x", dtypes::boolean, ew_no_grad, AmpPolicy::follow},
  };
  for (const Simple& s : simple) {
    r.def(s.id).doc(s.doc).inputs({"x"}).dtypes(s.dtypes).traits(s.traits, fk, s.amp).infer(infer::same_as_input);
  }

  r.def(OpId::leaky_relu).doc("x if x >= 0 else alpha * x").inputs({"x"}).attr("alpha", AttrKind::f64, 0.01)
      .dtypes(dtypes::floating).traits(ew, fk, AmpPolicy::follow).infer(infer::same_as_input);
  r.def(OpId::gelu)
      .doc("x * Phi(x); approximate \"none\": 0.5x(1 + erf(x/sqrt2)), \"tanh\": 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))")
      .inputs({"x"}).attr("approximate", AttrKind::str, std::string("none"))
      .dtypes(dtypes::floating).traits(ew, fk, AmpPolicy::follow).infer(infer_gelu);
  r.def(OpId::clip)
      .doc("min(max(x, min), max); the bounds are first converted to x's dtype (integers truncate); nan stays nan")
      .inputs({"x"}).attr("min", AttrKind::f64).attr("max", AttrKind::f64)
      .dtypes(dtypes::numeric).traits(ew, fk, AmpPolicy::follow).infer(infer::same_as_input);
  // Not inplace_ok: the output may have a different element size than the input.
  r.def(OpId::cast)
      .doc("converts to `dtype`: float->int truncates toward zero and saturates (nan -> 0), int->int wraps, "
           "x->bool is x != 0, to f16/bf16 rounds to nearest even")
      .inputs({"x"}).attr("dtype", AttrKind::dtype)
      .dtypes(dtypes::all).traits(Trait::elementwise, fk, AmpPolicy::follow).infer(infer_cast);
}

}  // namespace spore
