// Binary ops with NumPy broadcasting: arithmetic, comparisons, logical and/or, and where.
// Both data inputs share one dtype (no implicit promotion); shapes broadcast right-aligned.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace {

using Ints = std::vector<int64_t>;

std::vector<TensorType> infer_arith(const InferContext& c) {
  const DType t = infer::common_dtype(c, 0, 2);
  return {TensorType(t, infer::broadcast_dims(c, c.in(0).dims, c.in(1).dims))};
}

std::vector<TensorType> infer_compare(const InferContext& c) {
  infer::common_dtype(c, 0, 2);
  return {TensorType(DType::boolean, infer::broadcast_dims(c, c.in(0).dims, c.in(1).dims))};
}

std::vector<TensorType> infer_where(const InferContext& c) {
  if (!(c.in(0).dtype == DType::boolean)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("cond must be bool, got {}", dtype_name(c.in(0).dtype)));
  const DType t = infer::common_dtype(c, 1, 2);
  const auto ab = infer::broadcast_dims(c, c.in(1).dims, c.in(2).dims);
  return {TensorType(t, infer::broadcast_dims(c, c.in(0).dims, ab))};
}

// Sums a broadcast gradient back to an input's shape: leading extra dims are reduced away, dims
// where the input had size 1 are reduced with keepdims. No reshape, so symbolic (-1) dims work.
Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int lead = g.rank() - static_cast<int>(shape.size());
  Tensor r = g;
  if (lead > 0) {
    Ints axes;
    for (int i = 0; i < lead; ++i) axes.push_back(i);
    r = ops::reduce_sum(r, axes, false);
  }
  Ints axes;
  for (int i = 0; i < r.rank(); ++i)
    if (shape[i] == 1 && r.shape()[i] != 1) axes.push_back(i);
  return axes.empty() ? r : ops::reduce_sum(r, axes, true);
}

Tensor zero_like(const Tensor& t) { return Tensor::scalar(0.0, t.dtype()); }

using Grads = std::vector<Tensor>;

}  // namespace

void register_binary_ops(OpRegistry& r) {
  const DTypeSet num = dtypes::numeric;
  const TraitSet arith = Trait::broadcast | Trait::inplace_ok;
  const TraitSet comm = arith | Trait::commutative;
  const auto def2 = [&](OpId id, const char* doc, DTypeSet dts, TraitSet tr) -> OpDefBuilder {
    OpDefBuilder b = r.def(id);
    b.doc(doc).inputs({"a", "b"}).dtypes(dts).traits(tr, FusionKind::broadcast, AmpPolicy::follow);
    return b;
  };

  def2("add"_op, "a + b (NumPy broadcasting).", num, comm).fusable().infer(infer_arith).grad([](const GradContext& g) {
    return Grads{sum_to(g.output_grads[0], g.inputs[0].shape()), sum_to(g.output_grads[0], g.inputs[1].shape())};
  });
  def2("sub"_op, "a - b (NumPy broadcasting).", num, arith).fusable().infer(infer_arith).grad([](const GradContext& g) {
    return Grads{sum_to(g.output_grads[0], g.inputs[0].shape()),
                 sum_to(ops::neg(g.output_grads[0]), g.inputs[1].shape())};
  });
  def2("mul"_op, "a * b (NumPy broadcasting).", num, comm).fusable().infer(infer_arith).grad([](const GradContext& g) {
    const Tensor& d = g.output_grads[0];
    return Grads{sum_to(ops::mul(d, g.inputs[1]), g.inputs[0].shape()),
                 sum_to(ops::mul(d, g.inputs[0]), g.inputs[1].shape())};
  });
  def2("div"_op, "a / b; integer division truncates toward zero and rejects a zero divisor.", num, arith)
      .fusable().infer(infer_arith)
      .grad([](const GradContext& g) {
        // d(a/b)/db = -(a/b)/b: reuses the forward output.
        const Tensor& d = g.output_grads[0];
        return Grads{sum_to(ops::div(d, g.inputs[1]), g.inputs[0].shape()),
                     sum_to(ops::neg(ops::div(ops::mul(d, g.outputs[0]), g.inputs[1])), g.inputs[1].shape())};
      });
  def2("pow"_op, "a ** b (floating only).", dtypes::floating, arith).infer(infer_arith).grad([](const GradContext& g) {
    const Tensor &d = g.output_grads[0], &a = g.inputs[0], &b = g.inputs[1];
    const Tensor da = ops::mul(d, ops::mul(b, ops::pow(a, ops::sub(b, 1.0))));
    // log(a) is only defined for a > 0; elsewhere the exponent gets no gradient (0) instead of nan.
    const Tensor safe_log = ops::log(ops::where(ops::gt(a, zero_like(a)), a, Tensor::scalar(1.0, a.dtype())));
    const Tensor db = ops::mul(d, ops::mul(g.outputs[0], safe_log));
    return Grads{sum_to(da, a.shape()), sum_to(db, b.shape())};
  });
  def2("maximum"_op, "Elementwise max; nan propagates.", num, comm).fusable().infer(infer_arith).grad([](const GradContext& g) {
    const Tensor &d = g.output_grads[0], &a = g.inputs[0], &b = g.inputs[1];
    const Tensor m = ops::ge(a, b);  // ties send the gradient to a
    return Grads{sum_to(ops::where(m, d, zero_like(d)), a.shape()), sum_to(ops::where(m, zero_like(d), d), b.shape())};
  });
  def2("minimum"_op, "Elementwise min; nan propagates.", num, comm).fusable().infer(infer_arith).grad([](const GradContext& g) {
    const Tensor &d = g.output_grads[0], &a = g.inputs[0], &b = g.inputs[1];
    const Tensor m = ops::le(a, b);
    return Grads{sum_to(ops::where(m, d, zero_like(d)), a.shape()), sum_to(ops::where(m, zero_like(d), d), b.shape())};
  });
  def2("mod"_op, "Remainder. fmod=false: result has the divisor's sign (Python/NumPy); fmod=true: C fmod.", num, arith)
      .attr("fmod", AttrKind::boolean, false)
      .infer(infer_arith)
      .grad([](const GradContext& g) {
        // a mod b = a - q*b with q = floor(a/b) (or trunc(a/b) for fmod): d/da = 1, d/db = -q.
        const Tensor &d = g.output_grads[0], &a = g.inputs[0], &b = g.inputs[1];
        const Tensor ratio = ops::div(a, b);
        const Tensor q = g.attrs.b("fmod") ? ops::mul(ops::sign(ratio), ops::floor(ops::abs(ratio))) : ops::floor(ratio);
        return Grads{sum_to(d, a.shape()), sum_to(ops::neg(ops::mul(d, q)), b.shape())};
      });

  const TraitSet cmp = Trait::broadcast | Trait::no_grad;
  const TraitSet cmp_comm = cmp | Trait::commutative;
  def2("eq"_op, "a == b -> bool.", num | dtypes::boolean, cmp_comm).infer(infer_compare);
  def2("ne"_op, "a != b -> bool.", num | dtypes::boolean, cmp_comm).infer(infer_compare);
  def2("lt"_op, "a < b -> bool.", num, cmp).infer(infer_compare);
  def2("le"_op, "a <= b -> bool.", num, cmp).infer(infer_compare);
  def2("gt"_op, "a > b -> bool.", num, cmp).infer(infer_compare);
  def2("ge"_op, "a >= b -> bool.", num, cmp).infer(infer_compare);
  const TraitSet logical = cmp_comm | Trait::inplace_ok;
  def2("logical_and"_op, "a and b (bool).", dtypes::boolean, logical).infer(infer_compare);
  def2("logical_or"_op, "a or b (bool).", dtypes::boolean, logical).infer(infer_compare);

  r.def("where"_op)
      .doc("cond ? a : b, with three-way NumPy broadcasting; cond is bool, a and b share a dtype.")
      .inputs({"cond", "a", "b"})
      .dtypes(dtypes::all)
      .dispatch_on(1)
      .traits(Trait::broadcast, FusionKind::broadcast, AmpPolicy::follow)
      .infer(infer_where)
      .grad([](const GradContext& g) {
        const Tensor &c = g.inputs[0], &d = g.output_grads[0];
        return Grads{Tensor(), sum_to(ops::where(c, d, zero_like(d)), g.inputs[1].shape()),
                     sum_to(ops::where(c, zero_like(d), d), g.inputs[2].shape())};
      });
}

}  // namespace spore
