// ONNX ops whose output size is decided by the data (issue 41): NonZero, Compress, Unique, NonMaxSuppression, and
// TopK whose k is not known at import. They map to the data-dependent ops of ops/dynamic_shape.h, which a plan runs
// in its dynamic region (runtime/dynamic_region.h): no plan per value, and what does not depend on them stays planned.
#include <algorithm>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "base/error.h"
#include "io/onnx/onnx_import_internal.h"
#include "ops/dynamic_shape.h"

namespace spore::io::onnx_import {

namespace {

using V = std::vector<Value*>;

bool has_data_dependent_dim(const Value* v) {
  for (const Dim& d : v->type.dims)
    if (is_data_dependent_dim(d)) return true;
  return false;
}

V emit_nonzero(NodeCtx& c) { return {c.op("nonzero"_op, {c.in(0)})}; }

// Compress / Unique: an absent axis means "over the flattened input".
Attrs axis_attrs(NodeCtx& c, Value* x) {
  if (!c.has_attr("axis")) return {{"flatten", true}, {"axis", int64_t{0}}};
  return {{"flatten", false}, {"axis", c.norm_axis(c.attr_i("axis", 0), c.rank(x))}};
}

V emit_compress(NodeCtx& c) {
  Value* x = c.in(0);
  Value* cond = c.in(1);
  if (c.dtype(cond) != DType::boolean)
    c.fail(ErrorCode::dtype_mismatch, "condition must be bool, is {}", dtype_name(c.dtype(cond)));
  return {c.op("compress"_op, {x, cond}, axis_attrs(c, x))};
}

V emit_unique(NodeCtx& c) {
  Value* x = c.in(0);
  Attrs a = axis_attrs(c, x);
  a.set("sorted", c.attr_i("sorted", 1) != 0);
  return c.op_n("unique"_op, {x}, a);
}

V emit_nms(NodeCtx& c) {
  Value* boxes = c.in(0);
  Value* scores = c.in(1);
  for (Value* v : {boxes, scores})
    if (c.dtype(v) != DType::f32)
      c.fail(ErrorCode::dtype_mismatch, "boxes and scores must be float (f32), '{}' is {}", v->name,
             dtype_name(c.dtype(v)));
  if (c.rank(boxes) != 3)
    c.fail(ErrorCode::shape_mismatch, "boxes must be [num_batches, spatial_dimension, 4], got {}", boxes->type.str());
  if (c.rank(scores) != 3)
    c.fail(ErrorCode::shape_mismatch, "scores must be [num_batches, num_classes, spatial_dimension], got {}",
           scores->type.str());
  const int64_t center = c.attr_i("center_point_box", 0);
  if (center != 0 && center != 1)
    c.fail(ErrorCode::invalid_argument, "center_point_box must be 0 or 1, got {}", center);
  // Trailing optional inputs; an absent one before a given one takes the ONNX default.
  V ins{boxes, scores};
  const bool has_max = c.has_input(2), has_iou = c.has_input(3), has_score = c.has_input(4);
  if (has_max || has_iou || has_score) ins.push_back(has_max ? c.in(2) : c.scalar(0, DType::i64));
  if (has_iou || has_score) ins.push_back(has_iou ? c.in(3) : c.scalar(0, DType::f32));
  if (has_score) ins.push_back(c.in(4));
  return {c.op("non_max_suppression"_op, ins, {{"center_point_box", center != 0}})};
}

// Shape / Size of a tensor whose dims in range include one the data decides: read at run time. Other symbolic dims
// keep the static mapping's error, so a session binds the input dims and everything folds as before.
EmitFn shape_or_runtime(EmitFn static_form, bool size) {
  return [static_form, size](NodeCtx& c) -> V {
    Value* x = c.in(0);
    const int r = c.rank(x);
    int64_t start = size ? 0 : c.attr_i("start", 0), end = size ? r : c.attr_i("end", r);
    start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
    end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
    bool data_dependent = false, other_symbol = false;
    for (int64_t d = start; d < end; ++d) {
      const Dim& dim = x->type.dims[static_cast<size_t>(d)];
      data_dependent = data_dependent || is_data_dependent_dim(dim);
      other_symbol = other_symbol || (!dim.is_static() && !is_data_dependent_dim(dim));
    }
    if (!data_dependent || other_symbol) return static_form(c);
    Value* shape = c.op("shape_of"_op, {x}, {{"start", start}, {"end", end}});
    if (!size) return {shape};
    return {c.op("reduce_prod"_op, {shape}, {{"axes", std::vector<int64_t>{}}, {"keepdims", false}})};
  };
}

// Reshape / Expand / ConstantOfShape whose shape input is computed from data-dependent sizes: the *_dynamic op.
EmitFn shape_input_or_runtime(EmitFn static_form, int shape_input, std::function<V(NodeCtx&, Value*)> dynamic_form) {
  return [static_form, shape_input, dynamic_form](NodeCtx& c) -> V {
    if (!c.has_input(shape_input) || c.is_const(c.in(shape_input)) || !computed_from_data_dependent(c.in(shape_input)))
      return static_form(c);
    Value* shape = c.in(shape_input);
    if (c.dtype(shape) != DType::i64 && c.dtype(shape) != DType::i32)
      c.fail(ErrorCode::dtype_mismatch, "the shape input must be int64, is {}", dtype_name(c.dtype(shape)));
    return dynamic_form(c, shape);
  };
}

}  // namespace

// Whether v is computed from a value whose size the data decides (its shape read at run time, typically): then an
// op that takes v as an attribute takes it as a tensor instead. A v computed from graph inputs' values is not: the
// session binds those by value, as before.
bool computed_from_data_dependent(const Value* v) {
  std::vector<const Value*> todo{v};
  std::set<const Value*> seen;
  while (!todo.empty()) {
    const Value* u = todo.back();
    todo.pop_back();
    if (!u || !u->producer || !seen.insert(u).second) continue;
    if (has_data_dependent_dim(u)) return true;
    for (const Value* w : u->producer->inputs) todo.push_back(w);
  }
  return false;
}

void add_dynamic_shape_mappings(std::map<std::string, OpMapping>& t) {
  t["NonZero"] = OpMapping{9, false, "nonzero (size decided at run time)", nullptr, emit_nonzero};
  t["Compress"] = OpMapping{9, false, "compress (size decided at run time)", nullptr, emit_compress};
  t["Unique"] = OpMapping{11, false, "unique (size decided at run time)", nullptr, emit_unique};
  t["NonMaxSuppression"] = OpMapping{10, false, "non_max_suppression (size decided at run time)", nullptr, emit_nms};
  // Shape-taking ops on data-dependent sizes: wrap the static mappings (which fold at import).
  const auto wrap = [&](const std::string& op, const std::string& also, auto make) {
    auto w = t.find(op);
    SPORE_ASSERT(w != t.end(), "the {} mapping must be in the table before its run-time form is added", op);
    w->second.emit = make(w->second.emit);
    w->second.note += "; " + also;
  };
  wrap("Shape", "shape_of at run time for data-dependent dims", [](EmitFn f) { return shape_or_runtime(f, false); });
  wrap("Size", "reduce_prod(shape_of) for data-dependent dims", [](EmitFn f) { return shape_or_runtime(f, true); });
  wrap("Reshape", "reshape_dynamic for a shape computed from data-dependent sizes", [](EmitFn f) {
    return shape_input_or_runtime(f, 1, [](NodeCtx& c, Value* shape) -> V {
      if (c.since < 5) c.fail(ErrorCode::unsupported, "Reshape-{} takes its shape as an attribute", c.since);
      return {c.op("reshape_dynamic"_op, {c.in(0), shape}, {{"allowzero", c.attr_i("allowzero", 0) != 0}})};
    });
  });
  wrap("Expand", "expand_dynamic for a shape computed from data-dependent sizes", [](EmitFn f) {
    return shape_input_or_runtime(f, 1, [](NodeCtx& c, Value* shape) -> V {
      return {c.op("expand_dynamic"_op, {c.in(0), shape})};
    });
  });
  wrap("ConstantOfShape", "full_dynamic for a shape computed from data-dependent sizes", [](EmitFn f) {
    return shape_input_or_runtime(f, 0, [](NodeCtx& c, Value* shape) -> V {
      double value = 0;
      DType dt = DType::f32;
      if (c.has_attr("value")) {
        const Tensor v = c.attr_tensor("value");
        if (v.numel() != 1) c.fail(ErrorCode::invalid_argument, "value must have one element");
        dt = v.dtype();
        value = v.item_at(0);
      }
      return {c.op("full_dynamic"_op, {shape}, {{"value", value}, {"dtype", dt}})};
    });
  });
  // Slice along a data-dependent dim (detectors' keep[:detections_per_img] after NMS): its size is known when it runs.
  wrap("Slice", "slice_dynamic along data-dependent dims", [](EmitFn f) -> EmitFn {
    return [f](NodeCtx& c) -> V {
      Value* x = c.in(0);
      std::vector<int64_t> starts, ends, axes, steps;
      if (c.since < 10) {
        starts = c.attr_ints("starts");
        ends = c.attr_ints("ends");
        axes = c.attr_ints("axes");
      } else {
        starts = c.ints_in(1);
        ends = c.ints_in(2);
        if (c.has_input(3)) axes = c.ints_in(3);
        if (c.has_input(4)) steps = c.ints_in(4);
      }
      if (axes.empty())
        for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
      bool dynamic = false;
      for (int64_t& a : axes) {
        a = c.norm_axis(a, c.rank(x));
        dynamic = dynamic || is_data_dependent_dim(x->type.dims[static_cast<size_t>(a)]);
      }
      if (!dynamic) return f(c);
      return {c.op("slice_dynamic"_op, {x}, {{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}})};
    };
  });
  // TopK: k known at import -> topk (the existing mapping); k computed from data -> topk_dynamic, read at run time.
  auto it = t.find("TopK");
  SPORE_ASSERT(it != t.end(), "the TopK mapping must be in the table before its run-time form is added");
  EmitFn static_k = it->second.emit;
  it->second.note = "topk (k known at import), topk_dynamic (k computed at run time)";
  it->second.emit = [static_k](NodeCtx& c) -> V {
    if (c.since < 10 || c.is_const(c.in(1))) return static_k(c);
    Value* x = c.in(0);
    Value* k = c.in(1);
    if (c.dtype(k) != DType::i64 && c.dtype(k) != DType::i32)
      c.fail(ErrorCode::dtype_mismatch, "k must be int64, is {}", dtype_name(c.dtype(k)));
    const int64_t axis = c.norm_axis(c.attr_i("axis", -1), c.rank(x));
    return c.op_n("topk_dynamic"_op, {x, k},
                  {{"axis", axis}, {"largest", c.attr_i("largest", 1) != 0}, {"sorted", c.attr_i("sorted", 1) != 0}});
  };
}

}  // namespace spore::io::onnx_import
