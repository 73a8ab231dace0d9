// Conformance cases of the data-dependent ops (ops/dynamic_shape.h): nonzero, compress, unique,
// non_max_suppression, topk_dynamic, and the ops that read a shape at run time (shape_of, reshape_dynamic,
// expand_dynamic, full_dynamic). Inputs are drawn from small integer ranges so that zeros, repeats and ties
// occur; graph == eager runs each one through a plan's dynamic region.
#include "conformance/harness.h"

namespace spore::conformance {

void add_dynamic_cases(CaseList& c, ErrorList& e) {
  const DType i64 = DType::i64, f32 = DType::f32, b8 = DType::boolean;
  const DTypeSet with_negatives = dtypes::floating | dtypes::signed_int;
  const DTypeSet unsigned_like{DType::u8, DType::boolean};

  // ---- nonzero: zeros among the values; 0-D; past one 64K chunk of the CPU kernel.
  c.push_back(OpCase("nonzero/3d", "nonzero"_op, {{4, 5, 3}}).gen(0, Gen::integers(-1, 2)).only(with_negatives));
  c.push_back(OpCase("nonzero/3d_u", "nonzero"_op, {{4, 5, 3}}).gen(0, Gen::integers(0, 2)).only(unsigned_like));
  c.push_back(OpCase("nonzero/scalar", "nonzero"_op, {{}}).gen(0, Gen::integers(1, 2)).only(DTypeSet{f32, i64}));
  c.push_back(OpCase("nonzero/chunks", "nonzero"_op, {{3, 70001}}).gen(0, Gen::integers(0, 3)).only(DTypeSet{f32}));

  // ---- compress: along an axis, a condition shorter than the axis, flattened.
  c.push_back(OpCase("compress/axis1", "compress"_op, {{5, 4, 3}, {4}})
                  .attr("axis", int64_t{1})
                  .input_dtype(1, b8)
                  .gen(1, Gen::boolean()));
  c.push_back(OpCase("compress/short_last_axis", "compress"_op, {{5, 6}, {4}})
                  .attr("axis", int64_t{-1})
                  .input_dtype(1, b8)
                  .gen(1, Gen::boolean()));
  c.push_back(OpCase("compress/flatten", "compress"_op, {{5, 4, 3}, {50}})
                  .attr("flatten", true)
                  .input_dtype(1, b8)
                  .gen(1, Gen::boolean()));

  // ---- unique: repeated values sorted and in first-occurrence order; repeated rows along an axis.
  for (bool sorted : {true, false}) {
    const std::string s = sorted ? "sorted" : "unsorted";
    c.push_back(OpCase("unique/flat_" + s, "unique"_op, {{7, 6}})
                    .attr("sorted", sorted)
                    .gen(0, Gen::integers(-3, 4))
                    .only(with_negatives));
    c.push_back(OpCase("unique/flat_u_" + s, "unique"_op, {{40}})
                    .attr("sorted", sorted)
                    .gen(0, Gen::integers(0, 2))
                    .only(unsigned_like));
    c.push_back(OpCase("unique/rows_" + s, "unique"_op, {{12, 3}})
                    .attr("sorted", sorted)
                    .attr("flatten", false)
                    .attr("axis", int64_t{0})
                    .gen(0, Gen::integers(0, 2)));
    c.push_back(OpCase("unique/middle_axis_" + s, "unique"_op, {{2, 9, 2}})
                    .attr("sorted", sorted)
                    .attr("flatten", false)
                    .attr("axis", int64_t{-2})
                    .gen(0, Gen::integers(0, 2))
                    .only(DTypeSet{f32, i64}));
  }

  // ---- non_max_suppression: corner and center boxes, thresholds and limits as inputs; only some inputs given.
  for (bool center : {false, true}) {
    const std::string s = center ? "center" : "corners";
    c.push_back(OpCase("nms/" + s, "non_max_suppression"_op, {{2, 40, 4}, {2, 3, 40}, {}, {}, {}})
                    .attr("center_point_box", center)
                    .gen(0, Gen::uniform(0.0, 1.0))
                    .gen(1, Gen::uniform(0.0, 1.0))
                    .input_dtype(2, i64)
                    .gen(2, Gen::integers(3, 12))
                    .gen(3, Gen::uniform(0.1, 0.6))
                    .gen(4, Gen::uniform(0.1, 0.4)));
  }
  c.push_back(OpCase("nms/no_score_threshold", "non_max_suppression"_op, {{1, 25, 4}, {1, 2, 25}, {1}, {1}})
                  .gen(0, Gen::uniform(0.0, 1.0))
                  .gen(1, Gen::uniform(0.0, 1.0))
                  .input_dtype(2, i64)
                  .gen(2, Gen::integers(25, 26))
                  .gen(3, Gen::uniform(0.2, 0.5)));

  // ---- topk_dynamic: k drawn at run time, including 0 and the whole axis.
  c.push_back(OpCase("topk_dynamic/last", "topk_dynamic"_op, {{5, 8}, {}})
                  .input_dtype(1, i64)
                  .gen(1, Gen::integers(0, 9))
                  .gen(0, Gen::integers(-4, 5)));
  c.push_back(OpCase("topk_dynamic/axis0_smallest", "topk_dynamic"_op, {{6, 3}, {1}})
                  .attr("axis", int64_t{0})
                  .attr("largest", false)
                  .input_dtype(1, i64)
                  .gen(1, Gen::integers(1, 7)));

  // ---- shapes read at run time: shape_of, reshape_dynamic, expand_dynamic, full_dynamic.
  c.push_back(OpCase("shape_of/middle", "shape_of"_op, {{2, 3, 4}}).attr("start", int64_t{1}).attr("end", int64_t{-1}));
  c.push_back(OpCase("shape_of/all", "shape_of"_op, {{5, 1}}).only(DTypeSet{f32}));
  c.push_back(OpCase("reshape_dynamic/minus1", "reshape_dynamic"_op, {{2, 3, 4}, {1}})
                  .input_dtype(1, i64)
                  .gen(1, Gen::integers(-1, 0)));
  c.push_back(OpCase("reshape_dynamic/copy_dim", "reshape_dynamic"_op, {{4, 6}, {2}})
                  .input_dtype(1, DType::i32)
                  .gen(1, Gen::integers(0, 1))
                  .only(DTypeSet{f32}));  // [0, 0]: both dims copied
  c.push_back(OpCase("expand_dynamic/broadcast", "expand_dynamic"_op, {{3, 1}, {2}})
                  .input_dtype(1, i64)
                  .gen(1, Gen::integers(3, 4)));
  c.push_back(OpCase("slice_dynamic/clamped", "slice_dynamic"_op, {{6, 5}})
                  .attr("starts", std::vector<int64_t>{1, -4})
                  .attr("ends", std::vector<int64_t>{100, -1})
                  .attr("axes", std::vector<int64_t>{0, 1}));
  c.push_back(OpCase("slice_dynamic/step", "slice_dynamic"_op, {{7, 3}})
                  .attr("starts", std::vector<int64_t>{-1})
                  .attr("ends", std::vector<int64_t>{-100})
                  .attr("steps", std::vector<int64_t>{-2})
                  .only(DTypeSet{f32}));
  c.push_back(OpCase("full_dynamic/f32", "full_dynamic"_op, {{3}})
                  .attr("value", 1.5)
                  .attr("dtype", f32)
                  .gen(0, Gen::integers(0, 4)));
  c.push_back(OpCase("full_dynamic/i64", "full_dynamic"_op, {{2}})
                  .attr("value", 7.0)
                  .attr("dtype", i64)
                  .gen(0, Gen::integers(1, 3))
                  .only(DTypeSet{i64}));

  // ---- if_select: same shapes (a planned where) and different shapes (the condition read when it runs).
  c.push_back(OpCase("if_select/same", "if_select"_op, {{}, {3, 4}, {3, 4}}).input_dtype(0, b8).gen(0, Gen::boolean()));
  c.push_back(OpCase("if_select/different", "if_select"_op, {{1}, {2, 4}, {5, 4}})
                  .input_dtype(0, b8)
                  .gen(0, Gen::boolean())
                  .only(DTypeSet{f32, i64}));
  e.push_back({"if_select/ranks", "if_select"_op, {{}, {2, 4}, {8}}, {b8, f32, f32}, {}, ErrorCode::shape_mismatch});
  e.push_back(
      {"reshape_dynamic/float_shape", "reshape_dynamic"_op, {{2, 3}, {2}}, {f32, f32}, {}, ErrorCode::dtype_mismatch});
  e.push_back({"full_dynamic/shape_rank", "full_dynamic"_op, {{2, 2}}, {i64}, {}, ErrorCode::shape_mismatch});
  e.push_back(
      {"nms/boxes_rank", "non_max_suppression"_op, {{30, 4}, {1, 2, 30}}, {f32, f32}, {}, ErrorCode::shape_mismatch});
  e.push_back({"nms/threshold_dtype",
               "non_max_suppression"_op,
               {{1, 30, 4}, {1, 2, 30}, {}, {}},
               {f32, f32, i64, i64},
               {},
               ErrorCode::dtype_mismatch});
  e.push_back({"compress/condition_dtype",
               "compress"_op,
               {{5, 4}, {4}},
               {f32, f32},
               {{"axis", int64_t{1}}},
               ErrorCode::dtype_mismatch});
  e.push_back({"compress/condition_longer",
               "compress"_op,
               {{5, 4}, {6}},
               {f32, b8},
               {{"axis", int64_t{1}}},
               ErrorCode::shape_mismatch});
  e.push_back({"topk_dynamic/k_shape", "topk_dynamic"_op, {{5, 4}, {2}}, {f32, i64}, {}, ErrorCode::shape_mismatch});
}

}  // namespace spore::conformance
