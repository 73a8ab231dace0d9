// Elementwise unary ops: math, activations, rounding, clip, logical_not and cast.
// All are shape-preserving (Trait::elementwise); every one but cast keeps its input dtype.
#include <algorithm>
#include <cmath>
#include <span>

#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

namespace {

std::vector<TensorType> infer_cast(const InferContext& c) { return {TensorType(c.attrs.dtype("dtype"), c.in(0).dims)}; }


// ---- gradient rules (written with ops::, so they run eagerly or trace into the backward graph)
using Grads = std::vector<Tensor>;
Tensor sc(double v, const Tensor& like) { return Tensor::scalar(v, like.dtype()); }
Tensor zero_of(const Tensor& like) { return sc(0.0, like); }

constexpr double kSqrt2 = 1.4142135623730950488;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
constexpr double kTwoOverSqrtPi = 1.1283791670955125739;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

GradFn grad_rule_for(OpId id) {
  using ops::mul, ops::add, ops::sub, ops::div;
  switch (id) {
    case "neg"_op: return [](const GradContext& g) { return Grads{ops::neg(g.output_grads[0])}; };
    case "abs"_op:
      return [](const GradContext& g) { return Grads{mul(g.output_grads[0], ops::sign(g.inputs[0]))}; };
    case "exp"_op: return [](const GradContext& g) { return Grads{mul(g.output_grads[0], g.outputs[0])}; };
    case "log"_op: return [](const GradContext& g) { return Grads{div(g.output_grads[0], g.inputs[0])}; };
    case "sqrt"_op:  // d sqrt(x) = 1 / (2 sqrt(x))
      return [](const GradContext& g) { return Grads{div(g.output_grads[0], mul(g.outputs[0], 2.0))}; };
    case "rsqrt"_op:  // d x^-1/2 = -x^-1/2 / (2x)
      return [](const GradContext& g) {
        return Grads{mul(g.output_grads[0], mul(div(g.outputs[0], g.inputs[0]), -0.5))};
      };
    case "reciprocal"_op:
      return [](const GradContext& g) {
        return Grads{ops::neg(mul(g.output_grads[0], mul(g.outputs[0], g.outputs[0])))};
      };
    case "tanh"_op:
      return [](const GradContext& g) {
        const Tensor& y = g.outputs[0];
        return Grads{mul(g.output_grads[0], ops::sub(sc(1.0, y), mul(y, y)))};
      };
    case "sigmoid"_op:
      return [](const GradContext& g) {
        const Tensor& y = g.outputs[0];
        return Grads{mul(g.output_grads[0], mul(y, ops::sub(sc(1.0, y), y)))};
      };
    case "relu"_op:
      return [](const GradContext& g) {
        const Tensor& x = g.inputs[0];
        return Grads{ops::where(ops::gt(x, zero_of(x)), g.output_grads[0], zero_of(x))};
      };
    case "silu"_op:  // s (1 + x (1 - s))
      return [](const GradContext& g) {
        const Tensor& x = g.inputs[0];
        const Tensor s = ops::sigmoid(x);
        return Grads{mul(g.output_grads[0], mul(s, add(mul(x, ops::sub(sc(1.0, s), s)), 1.0)))};
      };
    case "erf"_op:  // 2/sqrt(pi) e^(-x^2)
      return [](const GradContext& g) {
        const Tensor& x = g.inputs[0];
        return Grads{mul(g.output_grads[0], mul(ops::exp(ops::neg(mul(x, x))), kTwoOverSqrtPi))};
      };
    case "sin"_op:
      return [](const GradContext& g) { return Grads{mul(g.output_grads[0], ops::cos(g.inputs[0]))}; };
    case "cos"_op:
      return [](const GradContext& g) { return Grads{ops::neg(mul(g.output_grads[0], ops::sin(g.inputs[0])))}; };
    case "asin"_op:  // 1 / sqrt(1 - x^2)
      return [](const GradContext& g) {
        const Tensor& x = g.inputs[0];
        return Grads{div(g.output_grads[0], ops::sqrt(sub(sc(1.0, x), mul(x, x))))};
      };
    case "acos"_op:  // -1 / sqrt(1 - x^2)
      return [](const GradContext& g) {
        const Tensor& x = g.inputs[0];
        return Grads{ops::neg(div(g.output_grads[0], ops::sqrt(sub(sc(1.0, x), mul(x, x)))))};
      };
    case "atan"_op:  // 1 / (1 + x^2)
      return [](const GradContext& g) {
        const Tensor& x = g.inputs[0];
        return Grads{div(g.output_grads[0], add(mul(x, x), 1.0))};
      };
    default: return nullptr;
  }
}

// ---- activations defined by a scalar formula (the reference) and a decomposition (everything else: the graph
// compiler fuses the decomposed chain into one fused_elementwise kernel). NaN stays NaN in both.

double hardsigmoid_scalar(double x, const Attrs& a) {
  if (std::isnan(x)) return x;
  return std::clamp(a.f("alpha") * x + a.f("beta"), 0.0, 1.0);
}
double hardswish_scalar(double x, const Attrs&) {
  if (std::isnan(x)) return x;
  return x * std::clamp(x + 3.0, 0.0, 6.0) / 6.0;
}
double softplus_scalar(double x, const Attrs&) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
double mish_scalar(double x, const Attrs& a) { return x * std::tanh(softplus_scalar(x, a)); }

// log(1 + e^x) = relu(x) + log1p(e^-|x|): e^-|x| never overflows. log1p(u) as log(w) - ((w - 1) - u) / w with
// w = 1 + u: exact to first order in w's rounding, and u itself where 1 + u rounds to 1 (no branch, so it fuses).
Tensor softplus_decomposed(const Tensor& x) {
  using ops::add, ops::sub, ops::div;
  const Tensor u = ops::exp(ops::neg(ops::abs(x)));
  const Tensor w = add(u, 1.0);
  const Tensor log1p_u = sub(ops::log(w), div(sub(sub(w, 1.0), u), w));
  return add(ops::relu(x), log1p_u);
}
Tensor hardswish_decomposed(const Tensor& x) { return ops::mul(x, ops::div(ops::clip(ops::add(x, 3.0), 0.0, 6.0), 6.0)); }

void register_activation_ops(OpRegistry& r, TraitSet ew, FusionKind fk) {
  using ops::mul, ops::add, ops::sub;
  r.def("hardsigmoid"_op)
      .doc("max(0, min(1, alpha * x + beta)) (ONNX HardSigmoid; PyTorch's Hardsigmoid is alpha = 1/6)")
      .inputs({"x"}).attr("alpha", AttrKind::f64, 0.2).attr("beta", AttrKind::f64, 0.5)
      .dtypes(dtypes::floating).traits(ew, fk, AmpPolicy::follow).infer(infer::same_as_input)
      .fusable({"alpha", "beta"})
      .scalar(hardsigmoid_scalar)
      .decompose([](std::span<const Tensor> in, const Attrs& a) {
        return Grads{ops::clip(add(mul(in[0], a.f("alpha")), a.f("beta")), 0.0, 1.0)};
      })
      .grad([](const GradContext& g) {
        const Tensor &x = g.inputs[0], &d = g.output_grads[0];
        const double alpha = g.attrs.f("alpha");
        const Tensor t = add(mul(x, alpha), g.attrs.f("beta"));
        const Tensor inside = ops::logical_and(ops::gt(t, zero_of(t)), ops::lt(t, sc(1.0, t)));
        return Grads{ops::where(inside, mul(d, alpha), zero_of(d))};
      });
  r.def("hardswish"_op)
      .doc("x * max(0, min(6, x + 3)) / 6 (ONNX HardSwish, PyTorch Hardswish)")
      .inputs({"x"}).dtypes(dtypes::floating).traits(ew, fk, AmpPolicy::follow).infer(infer::same_as_input)
      .fusable()
      .scalar(hardswish_scalar)
      .decompose([](std::span<const Tensor> in, const Attrs&) { return Grads{hardswish_decomposed(in[0])}; })
      .grad([](const GradContext& g) {
        // PyTorch's rule: 0 below -3, x/3 + 1/2 up to 3 (inclusive), 1 above.
        const Tensor &x = g.inputs[0], &d = g.output_grads[0];
        const Tensor mid = mul(d, add(ops::div(x, 3.0), 0.5));
        return Grads{ops::where(ops::lt(x, sc(-3.0, x)), zero_of(d), ops::where(ops::le(x, sc(3.0, x)), mid, d))};
      });
  r.def("softplus"_op)
      .doc("log(1 + e^x), computed as relu(x) + log1p(e^-|x|) so that it does not overflow (ONNX Softplus)")
      .inputs({"x"}).dtypes(dtypes::floating).traits(ew, fk, AmpPolicy::follow).infer(infer::same_as_input)
      .scalar(softplus_scalar)
      .decompose([](std::span<const Tensor> in, const Attrs&) { return Grads{softplus_decomposed(in[0])}; })
      .grad([](const GradContext& g) { return Grads{mul(g.output_grads[0], ops::sigmoid(g.inputs[0]))}; });
  r.def("mish"_op)
      .doc("x * tanh(softplus(x)) (ONNX Mish, PyTorch Mish)")
      .inputs({"x"}).dtypes(dtypes::floating).traits(ew, fk, AmpPolicy::follow).infer(infer::same_as_input)
      .scalar(mish_scalar)
      .decompose([](std::span<const Tensor> in, const Attrs&) {
        return Grads{mul(in[0], ops::tanh(softplus_decomposed(in[0])))};
      })
      .grad([](const GradContext& g) {
        // d/dx x tanh(sp(x)) = tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2)
        const Tensor& x = g.inputs[0];
        const Tensor t = ops::tanh(softplus_decomposed(x));
        return Grads{mul(g.output_grads[0], add(t, mul(mul(x, ops::sigmoid(x)), sub(sc(1.0, t), mul(t, t)))))};
      });
}

}  // namespace

namespace ops {
Tensor hardsigmoid(const Tensor& x, double alpha, double beta) {
  return call1("hardsigmoid"_op, std::vector<Tensor>{x}, Attrs{{"alpha", alpha}, {"beta", beta}});
}
Tensor hardswish(const Tensor& x) { return call1("hardswish"_op, std::vector<Tensor>{x}, Attrs{}); }
Tensor softplus(const Tensor& x) { return call1("softplus"_op, std::vector<Tensor>{x}, Attrs{}); }
Tensor mish(const Tensor& x) { return call1("mish"_op, std::vector<Tensor>{x}, Attrs{}); }
}  // namespace ops

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
      {"neg"_op, "-x (integers wrap like two's complement)", dtypes::signed_numeric, ew, AmpPolicy::follow},
      {"abs"_op, "|x| (abs of the most negative integer wraps to itself)", dtypes::signed_numeric, ew,
       AmpPolicy::follow},
      {"exp"_op, "e^x", dtypes::floating, ew, AmpPolicy::keep_f32},
      {"log"_op, "natural logarithm (log 0 = -inf, log of a negative = nan)", dtypes::floating, ew,
       AmpPolicy::keep_f32},
      {"sqrt"_op, "square root", dtypes::floating, ew, AmpPolicy::follow},
      {"rsqrt"_op, "1 / sqrt(x)", dtypes::floating, ew, AmpPolicy::keep_f32},
      {"reciprocal"_op, "1 / x", dtypes::floating, ew, AmpPolicy::keep_f32},
      {"tanh"_op, "hyperbolic tangent", dtypes::floating, ew, AmpPolicy::follow},
      {"sigmoid"_op, "1 / (1 + e^-x)", dtypes::floating, ew, AmpPolicy::follow},
      {"relu"_op, "max(x, 0)", dtypes::signed_numeric, ew, AmpPolicy::follow},
      {"silu"_op, "x * sigmoid(x)", dtypes::floating, ew, AmpPolicy::follow},
      {"erf"_op, "Gauss error function", dtypes::floating, ew, AmpPolicy::keep_f32},
      {"sin"_op, "sine (radians)", dtypes::floating, ew, AmpPolicy::follow},
      {"cos"_op, "cosine (radians)", dtypes::floating, ew, AmpPolicy::follow},
      {"asin"_op, "arcsine in [-pi/2, pi/2] (nan outside [-1, 1])", dtypes::floating, ew, AmpPolicy::follow},
      {"acos"_op, "arccosine in [0, pi] (nan outside [-1, 1])", dtypes::floating, ew, AmpPolicy::follow},
      {"atan"_op, "arctangent in (-pi/2, pi/2)", dtypes::floating, ew, AmpPolicy::follow},
      {"floor"_op, "largest integer <= x", dtypes::floating, ew_no_grad, AmpPolicy::follow},
      {"ceil"_op, "smallest integer >= x", dtypes::floating, ew_no_grad, AmpPolicy::follow},
      {"round"_op, "nearest integer, ties to even", dtypes::floating, ew_no_grad, AmpPolicy::follow},
      {"sign"_op, "-1, 0 or 1 by the sign of x (nan stays nan)", dtypes::signed_numeric, ew_no_grad, AmpPolicy::follow},
      {"logical_not"_op, "!x", dtypes::boolean, ew_no_grad, AmpPolicy::follow},
  };
  for (const Simple& s : simple) {
    OpDefBuilder b = r.def(s.id);
    b.doc(s.doc).inputs({"x"}).dtypes(s.dtypes).traits(s.traits, fk, s.amp).infer(infer::same_as_input);
    if (GradFn gf = grad_rule_for(s.id)) b.grad(std::move(gf));
    if (s.id != "logical_not"_op) b.fusable();
  }

  r.def("leaky_relu"_op).doc("x if x >= 0 else alpha * x").inputs({"x"}).attr("alpha", AttrKind::f64, 0.01)
      .fusable({"alpha"})
      .dtypes(dtypes::floating).traits(ew, fk, AmpPolicy::follow).infer(infer::same_as_input)
      .grad([](const GradContext& g) {
        const Tensor &x = g.inputs[0], &d = g.output_grads[0];
        return Grads{ops::where(ops::ge(x, zero_of(x)), d, ops::mul(d, g.attrs.f("alpha")))};
      });
  r.def("gelu"_op)
      .doc("x * Phi(x); approximate \"none\": 0.5x(1 + erf(x/sqrt2)), \"tanh\": 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))")
      .inputs({"x"}).choice("approximate", {"none", "tanh"}).fusable({"approximate"})
      .dtypes(dtypes::floating).traits(ew, fk, AmpPolicy::follow).infer(infer::same_as_input)
      .grad([](const GradContext& g) {
        using ops::mul, ops::add;
        const Tensor &x = g.inputs[0], &d = g.output_grads[0];
        if (g.attrs.s("approximate") == "tanh") {
          // y = x/2 (1 + t), t = tanh(u), u = c (x + k x^3): y' = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3k x^2)
          const double k = 0.044715;
          const Tensor x2 = mul(x, x);
          const Tensor t = ops::tanh(mul(add(x, mul(mul(x2, x), k)), kSqrt2OverPi));
          const Tensor du = mul(add(mul(x2, 3 * k), 1.0), kSqrt2OverPi);
          const Tensor dy = add(mul(add(t, 1.0), 0.5), mul(mul(mul(x, 0.5), ops::sub(sc(1.0, t), mul(t, t))), du));
          return Grads{mul(d, dy)};
        }
        // y = x Phi(x): y' = Phi(x) + x phi(x)
        const Tensor cdf = mul(add(ops::erf(mul(x, 1.0 / kSqrt2)), 1.0), 0.5);
        const Tensor pdf = mul(ops::exp(mul(mul(x, x), -0.5)), kInvSqrt2Pi);
        return Grads{mul(d, add(cdf, mul(x, pdf)))};
      });
  r.def("clip"_op)
      .doc("min(max(x, min), max); the bounds are first converted to x's dtype (integers truncate); nan stays nan")
      .inputs({"x"}).attr("min", AttrKind::f64).attr("max", AttrKind::f64).fusable({"min", "max"})
      .dtypes(dtypes::numeric).traits(ew, fk, AmpPolicy::follow).infer(infer::same_as_input)
      .grad([](const GradContext& g) {
        // Inside [min, max] the gradient passes (ties included); outside it is zero.
        const Tensor &x = g.inputs[0], &d = g.output_grads[0];
        const Tensor inside =
            ops::logical_and(ops::ge(x, sc(g.attrs.f("min"), x)), ops::le(x, sc(g.attrs.f("max"), x)));
        return Grads{ops::where(inside, d, zero_of(d))};
      });
  register_activation_ops(r, ew, fk);
  // Not inplace_ok: the output may have a different element size than the input.
  r.def("cast"_op)
      .doc("converts to `dtype`: float->int truncates toward zero and saturates (nan -> 0), int->int wraps, "
           "x->bool is x != 0, to f16/bf16 rounds to nearest even")
      .inputs({"x"}).attr("dtype", AttrKind::dtype)
      .dtypes(dtypes::all).traits(Trait::elementwise, fk, AmpPolicy::follow).infer(infer_cast)
      .grad([](const GradContext& g) {
        // Only float -> float casts carry a gradient (cast back); to or from integers there is none.
        const Tensor& x = g.inputs[0];
        if (!is_floating(x.dtype()) || !is_floating(g.outputs[0].dtype())) return Grads{Tensor()};
        return Grads{ops::cast(g.output_grads[0], x.dtype())};
      });
}

}  // namespace spore
