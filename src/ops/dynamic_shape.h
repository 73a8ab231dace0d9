#pragma once
// Ops whose output size is known only once they have run (issue 41): nonzero, unique, compress,
// non_max_suppression (the ONNX ops of those names) and topk_dynamic (TopK with k given as a tensor). Their shape
// inference gives the data-dependent dims fresh symbols (kDataDependentDim...), so a plan runs them, and what
// follows them, in its dynamic region (runtime/dynamic_region.h); eager mode runs them as any op.
//
// Kernels of these ops allocate the outputs whose size the data decides: they get such an output undefined
// (run_op_eager) and size it with dynamic_output().
#include <cstdint>
#include <optional>
#include <vector>

#include "ir/type.h"
#include "ops/kernel.h"
#include "tensor/tensor.h"

namespace spore {

// The symbol each op gives its data-dependent dim. Symbols are shared between nodes of one op: within a plan they
// only mark a dim as "decided at run time"; the dynamic region infers every node again on the actual shapes.
inline constexpr const char* kNonzeroDim = "nonzero_n";
inline constexpr const char* kUniqueDim = "unique_n";
inline constexpr const char* kCompressDim = "compress_n";
inline constexpr const char* kNmsDim = "nms_selected";
inline constexpr const char* kTopkDim = "topk_k";
inline constexpr const char* kShapeValueDim = "shape_value";  // dims given by a shape tensor computed at run time
inline constexpr const char* kBranchDim = "branch_n";         // if_select of branches whose sizes differ
// Whether a dim is one of the above (or made of them, e.g. "nonzero_n*3"): decided by data, not by input shapes.
bool is_data_dependent_dim(const Dim& d);

// Output `i` of a data-dependent kernel with `shape`: allocated when the caller left it undefined, else checked.
Tensor& dynamic_output(KernelContext& k, int i, const Shape& shape, DType dtype);

namespace ops {
// Indices of the non-zero elements, i64 [rank, count] (a 0-D x counts as 1-D).
Tensor nonzero(const Tensor& x);
// The slices of x along `axis` (all elements when axis is nullopt) whose condition entry is true.
Tensor compress(const Tensor& x, const Tensor& condition, std::optional<int64_t> axis = std::nullopt);
// ONNX Unique: {unique values (or slices along axis), index of each one's first occurrence, the unique index of
// every element (or slice), the count of each}. sorted: ascending (slices lexicographically); else first-occurrence
// order.
std::vector<Tensor> unique(const Tensor& x, bool sorted = true, std::optional<int64_t> axis = std::nullopt);
// ONNX NonMaxSuppression: boxes f32 [B, N, 4], scores f32 [B, C, N] -> selected [K, 3] i64 rows (batch, class, box).
// Optional scalar tensors: max_output_boxes_per_class (i64, absent = 0), iou_threshold (f32, absent = 0),
// score_threshold (f32, absent = no threshold).
Tensor non_max_suppression(const Tensor& boxes, const Tensor& scores, const Tensor& max_output_boxes_per_class = {},
                           const Tensor& iou_threshold = {}, const Tensor& score_threshold = {},
                           bool center_point_box = false);
// The dims [start, end) of x's shape as an i64 tensor, read when it runs (ONNX Shape of a tensor whose dims depend on
// data; a static shape folds to a constant).
Tensor shape_of(const Tensor& x, int64_t start = 0, int64_t end = INT64_MAX);
// The shape-taking ops with the shape as a 1-D integer tensor read when they run (ONNX Reshape / Expand /
// ConstantOfShape whose shape input is computed from data-dependent sizes).
Tensor reshape_dynamic(const Tensor& x, const Tensor& shape, bool allowzero = false);
Tensor expand_dynamic(const Tensor& x, const Tensor& shape);
Tensor full_dynamic(const Tensor& shape, double value, DType dtype);
// ONNX If whose condition is computed at run time, without subgraphs: both branches are nodes of the graph and
// if_select picks one branch's value. In a plan's dynamic region the condition is evaluated first and only the nodes
// the chosen branch needs run (runtime/dynamic_region.h); eagerly both exist already and it returns one.
Tensor if_select(const Tensor& cond, const Tensor& then_value, const Tensor& else_value);
// topk with k a one-element integer tensor, read when it runs.
std::vector<Tensor> topk_dynamic(const Tensor& x, const Tensor& k, int64_t axis = -1, bool largest = true,
                                 bool sorted = true);
}  // namespace ops

}  // namespace spore
