// Reduce family: reductions over axes (sum, mean, max, min, prod), argmax/argmin, softmax and
// log_softmax, cumsum and topk. NumPy/ONNX semantics; integer sums and products wrap like C.
#include <algorithm>

#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace {

// Normalizes an axis; a rank-0 input (treated as one element) accepts 0 and -1, like NumPy's softmax.
int64_t norm_axis(const InferContext& c, int64_t axis, int rank, const char* attr = "axis") {
  if (rank == 0 && axis == -1) return 0;
  return infer::normalize_axis(c, axis, rank, attr);
}

// Normalized, sorted reduction axes of `axes` for `rank` (empty = all); fails on duplicates.
std::vector<int64_t> reduce_axes(const InferContext& c, int rank) {
  const auto& given = c.attrs.ints("axes");
  std::vector<int64_t> axes;
  if (given.empty()) {
    for (int d = 0; d < rank; ++d) axes.push_back(d);
    return axes;
  }
  for (int64_t a : given) {
    const int64_t n = norm_axis(c, a, rank, "axes");
    if (!(std::find(axes.begin(), axes.end(), n) == axes.end())) [[unlikely]]
      c.fail(ErrorCode::invalid_argument,
             fmt::format("axes contains axis {} more than once (axes={})", n, format_attr_value(given)));
    axes.push_back(n);
  }
  std::sort(axes.begin(), axes.end());
  // A rank-0 input accepts axis 0 / -1 (normalize_axis allows it) but has nothing to reduce.
  axes.erase(std::remove_if(axes.begin(), axes.end(), [&](int64_t a) { return a >= rank; }), axes.end());
  return axes;
}

// Output dims after reducing `axes` of `in` (size 1 kept when keepdims). `needs_elems` rejects an
// empty reduced dim (max/min/arg* have no identity, like NumPy).
std::vector<Dim> reduced_dims(const InferContext& c, const std::vector<int64_t>& axes, bool keepdims,
                              bool needs_elems) {
  const auto& dims = c.in(0).dims;
  std::vector<Dim> out;
  for (int d = 0; d < static_cast<int>(dims.size()); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (reduced && needs_elems)
      if (!(!(dims[d].is_static() && dims[d].size == 0))) [[unlikely]]
        c.fail(ErrorCode::invalid_argument,
               fmt::format("cannot reduce over axis {} of size 0 (no identity); input is {}", d, c.in(0).str()));
    if (!reduced) out.push_back(dims[d]);
    else if (keepdims) out.push_back(Dim(1));
  }
  return out;
}

InferFn reduce_infer(bool needs_elems) {
  return [needs_elems](const InferContext& c) -> std::vector<TensorType> {
    const auto axes = reduce_axes(c, c.in(0).rank());
    return {TensorType(c.in(0).dtype, reduced_dims(c, axes, c.attrs.b("keepdims"), needs_elems))};
  };
}

std::vector<TensorType> arg_infer(const InferContext& c) {
  const int rank = c.in(0).rank();
  const int64_t axis = norm_axis(c, c.attrs.i("axis"), rank);
  std::vector<int64_t> axes;
  if (axis < rank) axes.push_back(axis);
  return {TensorType(DType::i64, reduced_dims(c, axes, c.attrs.b("keepdims"), true))};
}

// Ops that keep the input's type and only need a valid `axis`.
std::vector<TensorType> axis_same_infer(const InferContext& c) {
  norm_axis(c, c.attrs.i("axis"), c.in(0).rank());
  return {c.in(0)};
}

std::vector<TensorType> topk_infer(const InferContext& c) {
  const int rank = c.in(0).rank();
  if (!(rank >= 1)) [[unlikely]]
    c.fail(ErrorCode::invalid_argument, fmt::format("expects a tensor of rank >= 1, got {}", c.in(0).str()));
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), rank);
  const int64_t k = c.attrs.i("k");
  const Dim& d = c.in(0).dims[axis];
  c.check(k >= 0, ErrorCode::invalid_argument, "k must be >= 0, got {}", k);
  if (d.is_static())
    if (!(k <= d.size)) [[unlikely]]
      c.fail(ErrorCode::invalid_argument,
             fmt::format("k={} exceeds the size {} of axis {} (input {})", k, d.size, axis, c.in(0).str()));
  std::vector<Dim> dims = c.in(0).dims;
  dims[axis] = Dim(k);
  return {TensorType(c.in(0).dtype, dims), TensorType(DType::i64, dims)};
}

// ---- gradient helpers (written with ops::, so they run eagerly or trace into the backward graph)

std::vector<int64_t> grad_axes(const Attrs& a, int rank) {
  std::vector<int64_t> axes;
  for (int64_t ax : a.ints("axes")) axes.push_back(ax < 0 ? ax + rank : ax);
  if (axes.empty())
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  return axes;
}

// The reduced gradient reshaped to the keepdims shape, so it broadcasts against the input.
Tensor keep_shape(const Tensor& g, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims) {
  if (keepdims) return g;
  ops::Ints shape = x.shape();
  for (int64_t a : axes)
    if (a < static_cast<int64_t>(shape.size())) shape[a] = 1;
  return ops::reshape(g, shape);
}

std::vector<Tensor> sum_grad(const GradContext& g) {
  const Tensor& x = g.inputs[0];
  const auto axes = grad_axes(g.attrs, x.rank());
  return {ops::expand(keep_shape(g.output_grads[0], x, axes, g.attrs.b("keepdims")), x.shape())};
}

std::vector<Tensor> mean_grad(const GradContext& g) {
  const Tensor& x = g.inputs[0];
  const double n = static_cast<double>(std::max<int64_t>(x.numel(), 1)) /
                   static_cast<double>(std::max<int64_t>(g.outputs[0].numel(), 1));
  return {ops::div(sum_grad(g)[0], n)};
}

// max/min: the gradient is shared equally between the elements that attain the extreme (like torch.amax).
std::vector<Tensor> extreme_grad(const GradContext& g) {
  const Tensor& x = g.inputs[0];
  const auto axes = grad_axes(g.attrs, x.rank());
  const bool kd = g.attrs.b("keepdims");
  const Tensor mask = ops::cast(ops::eq(x, keep_shape(g.outputs[0], x, axes, kd)), x.dtype());
  const Tensor count = ops::reduce_sum(mask, axes, true);
  return {ops::mul(ops::div(mask, count), keep_shape(g.output_grads[0], x, axes, kd))};
}

// d prod / d x_i = prod / x_i (undefined where x_i == 0, as in most frameworks' simple rule).
std::vector<Tensor> prod_grad(const GradContext& g) {
  const Tensor& x = g.inputs[0];
  const auto axes = grad_axes(g.attrs, x.rank());
  const bool kd = g.attrs.b("keepdims");
  return {ops::div(ops::mul(keep_shape(g.output_grads[0], x, axes, kd), keep_shape(g.outputs[0], x, axes, kd)), x)};
}

std::vector<Tensor> softmax_grad(const GradContext& g) {
  const Tensor& y = g.outputs[0];
  const Tensor& dy = g.output_grads[0];
  const int64_t axis = g.attrs.i("axis");
  return {ops::mul(y, ops::sub(dy, ops::reduce_sum(ops::mul(dy, y), {axis}, true)))};
}

std::vector<Tensor> log_softmax_grad(const GradContext& g) {
  const Tensor& dy = g.output_grads[0];
  const int64_t axis = g.attrs.i("axis");
  return {ops::sub(dy, ops::mul(ops::exp(g.outputs[0]), ops::reduce_sum(dy, {axis}, true)))};
}

// The adjoint of a cumulative sum is the cumulative sum in the other direction.
std::vector<Tensor> cumsum_grad(const GradContext& g) {
  return {ops::cumsum(g.output_grads[0], g.attrs.i("axis"), g.attrs.b("exclusive"), !g.attrs.b("reverse"))};
}

std::vector<Tensor> topk_grad(const GradContext& g) {
  if (!g.output_grads[0].defined()) return {Tensor()};
  const Tensor& x = g.inputs[0];
  return {ops::scatter(ops::zeros(x.shape(), x.dtype()), g.outputs[1], g.output_grads[0], g.attrs.i("axis"), "add")};
}

// Reductions read every input element once.
OpCost reduce_cost(std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs&) {
  OpCost c;
  for (const auto& t : ins) {
    const double n = static_cast<double>(std::max<int64_t>(t.numel(), 0));
    c.flops += n;
    c.bytes += n * dtype_size(t.dtype);
  }
  for (const auto& t : outs) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  return c;
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  const std::vector<int64_t> all_axes{};
  auto reduction = [&](OpId id, const char* doc, DTypeSet dts, AmpPolicy amp, bool needs_elems, GradFn grad) {
    r.def(id).doc(doc).inputs({"x"}).attr("axes", AttrKind::i64s, all_axes).attr("keepdims", AttrKind::boolean, false)
        .dtypes(dts).traits(Trait::reduction, FusionKind::reduce, amp).infer(reduce_infer(needs_elems))
        .grad(std::move(grad)).cost(reduce_cost);
  };
  reduction("reduce_sum"_op, "Sum over `axes` (empty = all); integers wrap.", dtypes::numeric, AmpPolicy::keep_f32,
            false, sum_grad);
  reduction("reduce_mean"_op, "Mean over `axes` (empty = all).", dtypes::floating, AmpPolicy::keep_f32, false,
            mean_grad);
  reduction("reduce_max"_op, "Max over `axes` (empty = all); NaN propagates.", dtypes::numeric, AmpPolicy::follow,
            true, extreme_grad);
  reduction("reduce_min"_op, "Min over `axes` (empty = all); NaN propagates.", dtypes::numeric, AmpPolicy::follow,
            true, extreme_grad);
  reduction("reduce_prod"_op, "Product over `axes` (empty = all); integers wrap.", dtypes::numeric,
            AmpPolicy::keep_f32, false, prod_grad);

  for (OpId id : {"argmax"_op, "argmin"_op}) {
    r.def(id)
        .doc(id == "argmax"_op ? "Index (i64) of the max along `axis`; first on ties, NaN counts as the max."
                                : "Index (i64) of the min along `axis`; first on ties, NaN wins like NumPy.")
        .inputs({"x"}).attr("axis", AttrKind::i64, int64_t{0}).attr("keepdims", AttrKind::boolean, false)
        .dtypes(dtypes::numeric).traits(Trait::reduction | Trait::no_grad, FusionKind::reduce, AmpPolicy::follow)
        .infer(arg_infer).cost(reduce_cost);
  }

  r.def("softmax"_op).doc("exp(x - max) / sum(exp(x - max)) along `axis`.").inputs({"x"})
      .attr("axis", AttrKind::i64, int64_t{-1}).dtypes(dtypes::floating)
      .traits(Trait::reduction, FusionKind::reduce, AmpPolicy::keep_f32).infer(axis_same_infer).grad(softmax_grad);
  r.def("log_softmax"_op).doc("x - max - log(sum(exp(x - max))) along `axis`.").inputs({"x"})
      .attr("axis", AttrKind::i64, int64_t{-1}).dtypes(dtypes::floating)
      .traits(Trait::reduction, FusionKind::reduce, AmpPolicy::keep_f32).infer(axis_same_infer)
      .grad(log_softmax_grad);
  // cumsum and topk keep (or set) the axis length, so they are opaque to fusion, not reduce-like.
  r.def("cumsum"_op).doc("Cumulative sum along `axis` (optionally exclusive and/or reversed); integers wrap.")
      .inputs({"x"}).attr("axis", AttrKind::i64).attr("exclusive", AttrKind::boolean, false)
      .attr("reverse", AttrKind::boolean, false).dtypes(dtypes::numeric)
      .traits(Trait::reduction, FusionKind::opaque, AmpPolicy::keep_f32).infer(axis_same_infer).grad(cumsum_grad);
  r.def("topk"_op)
      .doc("The k largest (or smallest) values along `axis` and their i64 indices; ties: lower index first, "
           "NaN counts as the largest. sorted=false returns the same (sorted) order.")
      .inputs({"x"}).attr("k", AttrKind::i64).attr("axis", AttrKind::i64, int64_t{-1})
      .attr("largest", AttrKind::boolean, true).attr("sorted", AttrKind::boolean, true).dtypes(dtypes::numeric)
      .traits(Trait::reduction, FusionKind::opaque, AmpPolicy::follow).infer(topk_infer).grad(topk_grad);
}

}  // namespace spore
