// Ops with data-dependent output shapes (ops/dynamic_shape.h): nonzero, compress, unique, non_max_suppression,
// topk_dynamic. Inference gives the dims the data decides a symbol (ops/dynamic_shape.h), which is what sends a
// node and everything downstream of it into a plan's dynamic region.
#include "ops/dynamic_shape.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "ops/dispatch.h"
#include "ops/infer.h"
#include "ops/ops.h"
#include "ops/registry.h"

namespace spore {

Tensor& dynamic_output(KernelContext& k, int i, const Shape& shape, DType dtype) {
  Tensor& t = k.out(i);
  if (!t.defined()) {
    t = Tensor::empty(shape, dtype);
  } else {
    SPORE_CHECK(t.dtype() == dtype && t.shape() == shape, ErrorCode::internal,
                "[{}] output {} was given as {}{}, the data makes it {}{}", op_name(k.op), i, dtype_name(t.dtype()),
                shape_str(t.shape()), dtype_name(dtype), shape_str(shape));
  }
  return t;
}

bool is_data_dependent_dim(const Dim& d) {
  if (d.is_static()) return false;
  for (const char* s : {kNonzeroDim, kUniqueDim, kCompressDim, kNmsDim, kTopkDim, kShapeValueDim, kBranchDim})
    if (d.sym.find(s) != std::string::npos) return true;
  return false;
}

namespace {

using K = AttrKind;

// ---- ops that take a shape as a tensor

std::vector<int64_t> ints_of(const Tensor& t, const char* op, const char* what) {
  SPORE_CHECK(!t.is_symbolic(), ErrorCode::unsupported, "[{}] {} is read when the op runs; it cannot be traced", op,
              what);
  const Tensor c = t.contiguous();
  std::vector<int64_t> v(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = c.dtype() == DType::i32 ? c.data<int32_t>()[i] : c.data<int64_t>()[i];
  return v;
}

std::pair<int64_t, int64_t> shape_range(const Attrs& a, int64_t r) {
  const auto clampi = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
  const int64_t s = clampi(a.i("start")), e = clampi(a.i("end"));
  return {s, std::max(s, e)};
}

std::vector<TensorType> infer_shape_of(const InferContext& c) {
  const auto [s, e] = shape_range(c.attrs, c.in(0).rank());
  return {TensorType(DType::i64, {Dim(e - s)})};
}

std::vector<Tensor> decompose_shape_of(std::span<const Tensor> in, const Attrs& a) {
  const Shape& sh = in[0].shape();  // static wherever this runs: eagerly, in a dynamic region, or a planned node
  const auto [s, e] = shape_range(a, in[0].rank());
  for (int64_t d = s; d < e; ++d)
    SPORE_CHECK(sh[static_cast<size_t>(d)] >= 0, ErrorCode::internal, "[shape_of] dim {} is not known", d);
  return {Tensor::from_vector<int64_t>(std::vector<int64_t>(sh.begin() + s, sh.begin() + e), {e - s})};
}

// A 1-D integer shape tensor with a static length: the rank of the result.
int64_t shape_input_rank(const InferContext& c, int i) {
  const TensorType& t = c.in(i);
  c.check(dtypes::index.has(t.dtype), ErrorCode::dtype_mismatch, "shape must be i64 or i32, got {}",
          dtype_name(t.dtype));
  c.check(t.rank() == 1 && t.dims[0].is_static(), ErrorCode::shape_mismatch,
          "shape must be a 1-D tensor of static length, got {}", t.str());
  return t.dims[0].size;
}

std::vector<TensorType> infer_reshape_dynamic(const InferContext& c) {
  const int64_t r = shape_input_rank(c, 1);
  return {TensorType(c.in(0).dtype, std::vector<Dim>(static_cast<size_t>(r), Dim::symbol(kShapeValueDim)))};
}

std::vector<Tensor> decompose_reshape_dynamic(std::span<const Tensor> in, const Attrs& a) {
  std::vector<int64_t> shape = ints_of(in[1], "reshape_dynamic", "shape");
  for (size_t i = 0; i < shape.size(); ++i) {  // ONNX: 0 copies the input's dim unless allowzero
    if (shape[i] != 0 || a.b("allowzero")) continue;
    SPORE_CHECK(static_cast<int>(i) < in[0].rank(), ErrorCode::invalid_argument,
                "[reshape_dynamic] shape[{}] = 0 copies a dim x {} lacks", i, shape_str(in[0].shape()));
    shape[i] = in[0].dim(static_cast<int>(i));
  }
  return {ops::reshape(in[0], shape)};
}

std::vector<TensorType> infer_expand_dynamic(const InferContext& c) {
  const int64_t r = std::max<int64_t>(shape_input_rank(c, 1), c.in(0).rank());
  return {TensorType(c.in(0).dtype, std::vector<Dim>(static_cast<size_t>(r), Dim::symbol(kShapeValueDim)))};
}

std::vector<Tensor> decompose_expand_dynamic(std::span<const Tensor> in, const Attrs&) {
  return {ops::expand(in[0], ints_of(in[1], "expand_dynamic", "shape"))};
}

// slice of a data-dependent dim: the sliced axes' sizes are decided when it runs.
std::vector<TensorType> infer_slice_dynamic(const InferContext& c) {
  const TensorType& x = c.in(0);
  const std::vector<int64_t>& starts = c.attrs.ints("starts");
  std::vector<int64_t> axes = c.attrs.ints("axes");
  c.check(c.attrs.ints("ends").size() == starts.size(), ErrorCode::invalid_argument,
          "starts and ends differ in length");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  c.check(axes.size() == starts.size(), ErrorCode::invalid_argument, "axes and starts differ in length");
  std::vector<Dim> dims = x.dims;
  for (int64_t a : axes)
    dims[static_cast<size_t>(infer::normalize_axis(c, a, x.rank(), "axes"))] = Dim::symbol(kShapeValueDim);
  return {TensorType(x.dtype, std::move(dims))};
}

std::vector<Tensor> decompose_slice_dynamic(std::span<const Tensor> in, const Attrs& a) {
  return {ops::call1("slice"_op, in.first(1), a).contiguous()};
}

std::vector<TensorType> infer_full_dynamic(const InferContext& c) {
  const int64_t r = shape_input_rank(c, 0);
  return {TensorType(c.attrs.dtype("dtype"), std::vector<Dim>(static_cast<size_t>(r), Dim::symbol(kShapeValueDim)))};
}

std::vector<Tensor> decompose_full_dynamic(std::span<const Tensor> in, const Attrs& a) {
  const std::vector<int64_t> shape = ints_of(in[0], "full_dynamic", "shape");
  for (int64_t d : shape)
    SPORE_CHECK(d >= 0, ErrorCode::invalid_argument, "[full_dynamic] shape {} has a negative dim",
                shape_str(Shape(shape.begin(), shape.end())));
  return {ops::full(shape, a.f("value"), a.dtype("dtype"))};
}

// A one-element integer or floating scalar input (ONNX passes [] or [1]).
void check_scalar_input(const InferContext& c, int i, DTypeSet allowed, const char* what) {
  if (i >= c.num_inputs()) return;
  const TensorType& t = c.in(i);
  c.check(allowed.has(t.dtype), ErrorCode::dtype_mismatch, "{} ('{}') must be {}, got {}", what,
          c.def.input_names.at(static_cast<size_t>(i)), allowed.has(DType::i64) ? "i64 or i32" : "f32",
          dtype_name(t.dtype));
  c.check(t.rank() <= 1 && (t.rank() == 0 || !t.dims[0].is_static() || t.dims[0].size == 1), ErrorCode::shape_mismatch,
          "{} ('{}') must hold one value, got {}", what, c.def.input_names.at(static_cast<size_t>(i)), t.str());
}

std::vector<TensorType> infer_nonzero(const InferContext& c) {
  const int r = std::max(c.in(0).rank(), 1);
  return {TensorType(DType::i64, {Dim(r), Dim::symbol(kNonzeroDim)})};
}

std::vector<TensorType> infer_compress(const InferContext& c) {
  const TensorType &x = c.in(0), &cond = c.in(1);
  c.check(cond.dtype == DType::boolean, ErrorCode::dtype_mismatch, "condition must be bool, got {}",
          dtype_name(cond.dtype));
  c.check(cond.rank() == 1, ErrorCode::shape_mismatch, "condition must be 1-D, got {}", cond.str());
  if (c.attrs.b("flatten")) return {TensorType(x.dtype, {Dim::symbol(kCompressDim)})};
  c.check(x.rank() >= 1, ErrorCode::shape_mismatch, "cannot compress a rank-0 tensor along an axis");
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), x.rank());
  const Dim& d = x.dims[static_cast<size_t>(axis)];
  c.check(!d.is_static() || !cond.dims[0].is_static() || cond.dims[0].size <= d.size, ErrorCode::shape_mismatch,
          "condition has {} entries, more than the {} of axis {} of x {}", cond.dims[0].str(), d.str(), axis, x.str());
  std::vector<Dim> dims = x.dims;
  dims[static_cast<size_t>(axis)] = Dim::symbol(kCompressDim);
  return {TensorType(x.dtype, std::move(dims))};
}

std::vector<TensorType> infer_unique(const InferContext& c) {
  const TensorType& x = c.in(0);
  const Dim u = Dim::symbol(kUniqueDim);
  if (c.attrs.b("flatten")) {
    Dim n(1);
    for (const Dim& d : x.dims) n = infer::mul_dims(n, d);
    return {TensorType(x.dtype, {u}), TensorType(DType::i64, {u}), TensorType(DType::i64, {n}),
            TensorType(DType::i64, {u})};
  }
  c.check(x.rank() >= 1, ErrorCode::shape_mismatch, "cannot take unique slices of a rank-0 tensor");
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), x.rank());
  std::vector<Dim> dims = x.dims;
  const Dim n = dims[static_cast<size_t>(axis)];
  dims[static_cast<size_t>(axis)] = u;
  return {TensorType(x.dtype, std::move(dims)), TensorType(DType::i64, {u}), TensorType(DType::i64, {n}),
          TensorType(DType::i64, {u})};
}

std::vector<TensorType> infer_nms(const InferContext& c) {
  const TensorType &boxes = c.in(0), &scores = c.in(1);
  c.check(boxes.rank() == 3 && boxes.dims[2] == Dim(4), ErrorCode::shape_mismatch,
          "boxes must be [batch, boxes, 4], got {}", boxes.str());
  c.check(scores.dtype == boxes.dtype, ErrorCode::dtype_mismatch, "scores must be {} like boxes, got {}",
          dtype_name(boxes.dtype), dtype_name(scores.dtype));
  c.check(scores.rank() == 3, ErrorCode::shape_mismatch, "scores must be [batch, classes, boxes], got {}",
          scores.str());
  c.check(
      infer::dims_compatible(boxes.dims[0], scores.dims[0]) && infer::dims_compatible(boxes.dims[1], scores.dims[2]),
      ErrorCode::shape_mismatch, "boxes {} and scores {} disagree on the batch or the number of boxes", boxes.str(),
      scores.str());
  check_scalar_input(c, 2, dtypes::index, "max_output_boxes_per_class");
  check_scalar_input(c, 3, DTypeSet{DType::f32}, "iou_threshold");
  check_scalar_input(c, 4, DTypeSet{DType::f32}, "score_threshold");
  return {TensorType(DType::i64, {Dim::symbol(kNmsDim), Dim(3)})};
}

std::vector<TensorType> infer_topk_dynamic(const InferContext& c) {
  const TensorType& x = c.in(0);
  c.check(x.rank() >= 1, ErrorCode::invalid_argument, "expects a tensor of rank >= 1, got {}", x.str());
  check_scalar_input(c, 1, dtypes::index, "k");
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), x.rank());
  std::vector<Dim> dims = x.dims;
  dims[static_cast<size_t>(axis)] = Dim::symbol(kTopkDim);
  return {TensorType(x.dtype, dims), TensorType(DType::i64, dims)};
}

std::vector<TensorType> infer_if_select(const InferContext& c) {
  const TensorType &cond = c.in(0), &a = c.in(1), &b = c.in(2);
  c.check(cond.dtype == DType::boolean, ErrorCode::dtype_mismatch, "the condition must be bool, got {}",
          dtype_name(cond.dtype));
  c.check(cond.rank() <= 1 && (cond.rank() == 0 || cond.dims[0] == Dim(1)), ErrorCode::shape_mismatch,
          "the condition must hold one value, got {}", cond.str());
  c.check(a.dtype == b.dtype, ErrorCode::dtype_mismatch, "the branches give {} and {}", dtype_name(a.dtype),
          dtype_name(b.dtype));
  c.check(a.rank() == b.rank(), ErrorCode::shape_mismatch, "the branches give ranks {} ({}) and {} ({})", a.rank(),
          a.str(), b.rank(), b.str());
  std::vector<Dim> dims = a.dims;
  for (size_t i = 0; i < dims.size(); ++i)
    if (!(a.dims[i] == b.dims[i])) dims[i] = Dim::symbol(kBranchDim);
  return {TensorType(a.dtype, std::move(dims))};
}

// Both branches computed: the chosen one. Same shapes (a planned node): where, which traces; else read the condition.
std::vector<Tensor> decompose_if_select(std::span<const Tensor> in, const Attrs&) {
  if (in[1].shape() == in[2].shape()) return {ops::where(ops::reshape(in[0], {}), in[1], in[2])};
  SPORE_CHECK(!in[0].is_symbolic(), ErrorCode::unsupported,
              "[if_select] branches of different shapes need the condition's value; it cannot be traced");
  return {(in[0].contiguous().item_at(0) != 0 ? in[1] : in[2]).contiguous()};
}

// Reads k when the op runs (eagerly, or in a plan's dynamic region) and calls topk with it.
std::vector<Tensor> decompose_topk_dynamic(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& kt = in[1];
  SPORE_CHECK(!kt.is_symbolic(), ErrorCode::unsupported,
              "[topk_dynamic] k is read when the op runs; it cannot be traced into a graph");
  SPORE_CHECK(kt.numel() == 1, ErrorCode::shape_mismatch, "[topk_dynamic] k must hold one value, got shape {}",
              shape_str(kt.shape()));
  const double kv = kt.contiguous().item_at(0);
  const int64_t axis = a.i("axis") < 0 ? a.i("axis") + in[0].rank() : a.i("axis");
  const int64_t n = in[0].dim(static_cast<int>(axis));
  SPORE_CHECK(kv >= 0 && kv <= static_cast<double>(n), ErrorCode::invalid_argument,
              "[topk_dynamic] k = {} is outside [0, {}] (axis {} of x {})", kv, n, axis, shape_str(in[0].shape()));
  return ops::topk(in[0], static_cast<int64_t>(kv), axis, a.b("largest"), a.b("sorted"));
}

}  // namespace

void register_dynamic_shape_ops(OpRegistry& r) {
  r.def("nonzero"_op)
      .doc(
          "ONNX NonZero: the indices of x's non-zero elements, i64 [rank, count] in row-major order (a 0-D x counts "
          "as 1-D). count is decided by the data.")
      .inputs({"x"})
      .dtypes(dtypes::all)
      .traits(Trait::no_grad, FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_nonzero);
  r.def("compress"_op)
      .doc(
          "ONNX Compress: the slices of x along `axis` whose entry of the 1-D bool condition is true (condition may "
          "be shorter than the axis: the rest is dropped); flatten: over x's elements in row-major order.")
      .inputs({"x", "condition"})
      .attr("axis", K::i64, int64_t{0})
      .attr("flatten", K::boolean, false)
      .dtypes(dtypes::all)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_compress);
  r.def("unique"_op)
      .doc(
          "ONNX Unique: {y, indices, inverse_indices, counts}: the distinct elements of x (flatten) or its distinct "
          "slices along `axis`; sorted: ascending (slices compared element by element in row-major order), else in "
          "order of first occurrence; indices: each one's first occurrence; inverse_indices: for each element "
          "(slice) of x its position in y; counts: how often each occurs. NaNs count as equal to each other.")
      .inputs({"x"})
      .attr("sorted", K::boolean, true)
      .attr("axis", K::i64, int64_t{0})
      .attr("flatten", K::boolean, true)
      .dtypes(dtypes::all)
      .traits(Trait::no_grad, FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_unique);
  r.def("non_max_suppression"_op)
      .doc(
          "ONNX NonMaxSuppression: per batch and class, boxes by descending score (ties: lower index first) whose "
          "score exceeds score_threshold, each kept unless its IoU with a box kept before exceeds iou_threshold, at "
          "most max_output_boxes_per_class of them -> i64 [selected, 3] rows (batch, class, box) in batch, class, "
          "selection order. boxes f32 [B, N, 4]: [y1, x1, y2, x2] (center_point_box 0) or [xc, yc, w, h] (1); "
          "scores f32 [B, C, N]. Absent inputs: no boxes (max_output 0), iou_threshold 0, no score threshold.")
      .inputs({"boxes", "scores", "max_output_boxes_per_class?", "iou_threshold?", "score_threshold?"})
      .attr("center_point_box", K::boolean, false)
      .dtypes(DTypeSet{DType::f32})
      .traits(Trait::no_grad, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_nms);
  r.def("shape_of"_op)
      .doc(
          "The dims [start, end) of x's shape as i64 (ONNX Shape of a tensor whose dims the data decides; start and "
          "end clamp to the rank, negative ones count from the end). Static shapes fold to constants.")
      .inputs({"x"})
      .attr("start", K::i64, int64_t{0})
      .attr("end", K::i64, std::numeric_limits<int64_t>::max())
      .dtypes(dtypes::all)
      .traits(Trait::no_grad, FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_shape_of)
      .decompose(decompose_shape_of);
  r.def("reshape_dynamic"_op)
      .doc(
          "reshape to a shape given as a 1-D integer tensor read when the op runs (ONNX Reshape: 0 copies the "
          "input's dim unless allowzero, one -1 is inferred).")
      .inputs({"x", "shape"})
      .attr("allowzero", K::boolean, false)
      .dtypes(dtypes::all)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_reshape_dynamic)
      .decompose(decompose_reshape_dynamic);
  r.def("expand_dynamic"_op)
      .doc(
          "expand (ONNX Expand's bidirectional broadcast) to a shape given as a 1-D integer tensor read when the op "
          "runs.")
      .inputs({"x", "shape"})
      .dtypes(dtypes::all)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_expand_dynamic)
      .decompose(decompose_expand_dynamic);
  r.def("slice_dynamic"_op)
      .doc(
          "slice (ONNX Slice: negative indices, clamping, negative steps) of a tensor whose sliced dims the data "
          "decides: the result's size along those axes is known when it runs.")
      .inputs({"x"})
      .attr("starts", K::i64s)
      .attr("ends", K::i64s)
      .attr("axes", K::i64s, std::vector<int64_t>{})
      .attr("steps", K::i64s, std::vector<int64_t>{})
      .dtypes(dtypes::all)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_slice_dynamic)
      .decompose(decompose_slice_dynamic);
  r.def("full_dynamic"_op)
      .doc(
          "A tensor of `dtype` filled with `value`, its shape a 1-D integer tensor read when the op runs (ONNX "
          "ConstantOfShape of a computed shape).")
      .inputs({"shape"})
      .attr("value", K::f64, 0.0)
      .attr("dtype", K::dtype, DType::f32)
      .dtypes(dtypes::index)
      .traits(Trait::no_grad, FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_full_dynamic)
      .decompose(decompose_full_dynamic);
  r.def("if_select"_op)
      .doc(
          "ONNX If with a condition computed at run time: the value of the `then` or the `else` branch (cond: one "
          "bool). In a plan's dynamic region only the chosen branch's nodes run; dims where the branches differ "
          "are decided at run time.")
      .inputs({"cond", "then_value", "else_value"})
      .dtypes(dtypes::all)
      .dispatch_on(1)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_if_select)
      .decompose(decompose_if_select);
  r.def("topk_dynamic"_op)
      .doc(
          "topk with k a one-element i64/i32 tensor read when the op runs (ONNX TopK whose k is computed at run "
          "time): the output size along `axis` is decided by the data. Runs as topk.")
      .inputs({"x", "k"})
      .attr("axis", K::i64, int64_t{-1})
      .attr("largest", K::boolean, true)
      .attr("sorted", K::boolean, true)
      .dtypes(dtypes::numeric)
      .traits(Trait::reduction, FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_topk_dynamic)
      .decompose(decompose_topk_dynamic);
}

namespace ops {

Tensor nonzero(const Tensor& x) {
  const Tensor in[] = {x};
  return call1("nonzero"_op, in);
}

Tensor compress(const Tensor& x, const Tensor& condition, std::optional<int64_t> axis) {
  const Tensor in[] = {x, condition};
  return call1("compress"_op, in, {{"axis", axis.value_or(0)}, {"flatten", !axis.has_value()}});
}

std::vector<Tensor> unique(const Tensor& x, bool sorted, std::optional<int64_t> axis) {
  const Tensor in[] = {x};
  return call("unique"_op, in, {{"sorted", sorted}, {"axis", axis.value_or(0)}, {"flatten", !axis.has_value()}});
}

Tensor non_max_suppression(const Tensor& boxes, const Tensor& scores, const Tensor& max_output_boxes_per_class,
                           const Tensor& iou_threshold, const Tensor& score_threshold, bool center_point_box) {
  std::vector<Tensor> in{boxes, scores};
  // Optional inputs are trailing: an absent one before a given one takes its default value.
  const bool iou = iou_threshold.defined(), score = score_threshold.defined();
  if (max_output_boxes_per_class.defined() || iou || score)
    in.push_back(max_output_boxes_per_class.defined() ? max_output_boxes_per_class : Tensor::scalar(0, DType::i64));
  if (iou || score) in.push_back(iou ? iou_threshold : Tensor::scalar(0, DType::f32));
  if (score) in.push_back(score_threshold);
  return call1("non_max_suppression"_op, in, {{"center_point_box", center_point_box}});
}

Tensor shape_of(const Tensor& x, int64_t start, int64_t end) {
  const Tensor in[] = {x};
  return call1("shape_of"_op, in, {{"start", start}, {"end", end}});
}

Tensor reshape_dynamic(const Tensor& x, const Tensor& shape, bool allowzero) {
  const Tensor in[] = {x, shape};
  return call1("reshape_dynamic"_op, in, {{"allowzero", allowzero}});
}

Tensor expand_dynamic(const Tensor& x, const Tensor& shape) {
  const Tensor in[] = {x, shape};
  return call1("expand_dynamic"_op, in);
}

Tensor full_dynamic(const Tensor& shape, double value, DType dtype) {
  const Tensor in[] = {shape};
  return call1("full_dynamic"_op, in, {{"value", value}, {"dtype", dtype}});
}

Tensor if_select(const Tensor& cond, const Tensor& then_value, const Tensor& else_value) {
  const Tensor in[] = {cond, then_value, else_value};
  return call1("if_select"_op, in);
}

std::vector<Tensor> topk_dynamic(const Tensor& x, const Tensor& k, int64_t axis, bool largest, bool sorted) {
  const Tensor in[] = {x, k};
  return call("topk_dynamic"_op, in, {{"axis", axis}, {"largest", largest}, {"sorted", sorted}});
}

}  // namespace ops

}  // namespace spore
