// Conformance cases of the shape family: every op in every dtype it accepts, with the layouts the cpu
// copy engine special-cases (contiguous rows, broadcast rows, transposed tiles, strided gathers), sizes
// that are not multiples of a tile or vector (1, 7, 33, 1000+), negative indices and negative steps.
// View ops return views in eager mode, so their kernels are checked by the eager == graph test here and
// against the reference kernels in tests/ops/shape_view_test.cpp.
#include <limits>

#include "conformance/harness.h"

namespace spore::conformance {

namespace {
using Ints = std::vector<int64_t>;
AttrValue I(int64_t v) { return v; }
}  // namespace

void add_shape_cases(CaseList& c, ErrorList& e) {
  constexpr int64_t kmin = std::numeric_limits<int64_t>::min(), kmax = std::numeric_limits<int64_t>::max();
  const DType i64 = DType::i64, i32 = DType::i32;

  // ---- reshape, squeeze, unsqueeze, flatten
  c.push_back(OpCase("reshape/infer", "reshape"_op, {{2, 3, 4}}).attr("shape", Ints{4, -1}));
  c.push_back(OpCase("reshape/tail", "reshape"_op, {{7, 33}}).attr("shape", Ints{33, 7, 1}));
  c.push_back(OpCase("reshape/big", "reshape"_op, {{1031, 65}}).attr("shape", Ints{-1}));
  c.push_back(OpCase("reshape/empty", "reshape"_op, {{0, 3}}).attr("shape", Ints{3, 0}));
  c.push_back(OpCase("squeeze/all", "squeeze"_op, {{1, 3, 1, 4}}));
  c.push_back(OpCase("squeeze/axes", "squeeze"_op, {{1, 3, 1, 4}}).attr("axes", Ints{-2}));
  c.push_back(OpCase("unsqueeze/front_back", "unsqueeze"_op, {{3, 7}}).attr("axes", Ints{0, 3}));
  c.push_back(OpCase("unsqueeze/neg", "unsqueeze"_op, {{33}}).attr("axes", Ints{-1}));
  c.push_back(OpCase("flatten/default", "flatten"_op, {{2, 3, 4, 5}}));
  c.push_back(OpCase("flatten/axis0", "flatten"_op, {{2, 3, 7}}).attr("axis", I(0)));
  c.push_back(OpCase("flatten/axis_end", "flatten"_op, {{2, 3, 7}}).attr("axis", I(3)));
  c.push_back(OpCase("flatten/neg", "flatten"_op, {{2, 3, 7}}).attr("axis", I(-1)));

  // ---- transpose: 2-D tiles with ragged edges, batched tiles, last dim kept, 1-wide dims
  c.push_back(OpCase("transpose/reverse", "transpose"_op, {{33, 65}}));
  c.push_back(OpCase("transpose/3d", "transpose"_op, {{2, 3, 4}}).attr("perm", Ints{2, 0, 1}));
  c.push_back(OpCase("transpose/tall", "transpose"_op, {{1000, 3}}).attr("perm", Ints{1, 0}));
  c.push_back(OpCase("transpose/batched", "transpose"_op, {{3, 37, 41}}).attr("perm", Ints{0, 2, 1}));
  c.push_back(OpCase("transpose/keep_last", "transpose"_op, {{2, 3, 4, 5}}).attr("perm", Ints{0, 2, 1, 3}));
  c.push_back(OpCase("transpose/neg_perm", "transpose"_op, {{5, 1, 7}}).attr("perm", Ints{-1, 0, 1}));
  c.push_back(OpCase("transpose/nhwc", "transpose"_op, {{2, 7, 9, 33}}).attr("perm", Ints{0, 3, 1, 2}));

  // ---- concat, split
  c.push_back(OpCase("concat/axis1", "concat"_op, {{2, 3}, {2, 5}, {2, 1}}).attr("axis", I(1)));
  c.push_back(OpCase("concat/axis0_long", "concat"_op, {{1000}, {7}}).attr("axis", I(0)));
  c.push_back(OpCase("concat/neg_axis", "concat"_op, {{3, 4, 5}, {2, 4, 5}}).attr("axis", I(-3)));
  c.push_back(OpCase("concat/middle", "concat"_op, {{2, 3, 33}, {2, 0, 33}, {2, 7, 33}}).attr("axis", I(1)));
  c.push_back(
      OpCase("concat/big_rows", "concat"_op, {{2, 40000}, {2, 33}}).attr("axis", I(1)).only({DType::f32, DType::u8}));
  c.push_back(OpCase("concat/one", "concat"_op, {{4, 3}}).attr("axis", I(0)));
  c.push_back(OpCase("split/axis0", "split"_op, {{5, 7}}).attr("sizes", Ints{2, 3}).attr("axis", I(0)));
  c.push_back(OpCase("split/last", "split"_op, {{4, 1030}}).attr("sizes", Ints{1000, 30}).attr("axis", I(-1)));
  c.push_back(OpCase("split/empty_piece", "split"_op, {{3, 9, 2}}).attr("sizes", Ints{0, 4, 5}).attr("axis", I(1)));

  // ---- slice (ONNX): clamping, negative indices, negative and non-unit steps
  c.push_back(OpCase("slice/clamp", "slice"_op, {{10, 12}}).attr("starts", Ints{1, -5}).attr("ends", Ints{8, 100}));
  c.push_back(OpCase("slice/reverse", "slice"_op, {{6, 33}})
                  .attr("starts", Ints{-1})
                  .attr("ends", Ints{kmin})
                  .attr("axes", Ints{1})
                  .attr("steps", Ints{-1}));
  c.push_back(OpCase("slice/neg_step2", "slice"_op, {{6, 33}})
                  .attr("starts", Ints{kmax})
                  .attr("ends", Ints{2})
                  .attr("axes", Ints{-1})
                  .attr("steps", Ints{-2}));
  c.push_back(OpCase("slice/steps", "slice"_op, {{33, 20}})
                  .attr("starts", Ints{0, 1})
                  .attr("ends", Ints{33, 20})
                  .attr("steps", Ints{3, 1}));
  c.push_back(OpCase("slice/axes_mixed", "slice"_op, {{5, 6, 7}})
                  .attr("starts", Ints{1, 4})
                  .attr("ends", Ints{-1, 0})
                  .attr("axes", Ints{2, 0})
                  .attr("steps", Ints{2, -1}));
  c.push_back(OpCase("slice/long", "slice"_op, {{1030}}).attr("starts", Ints{3}).attr("ends", Ints{1029}));
  c.push_back(
      OpCase("slice/empty", "slice"_op, {{4, 5}}).attr("starts", Ints{3}).attr("ends", Ints{1}).attr("axes", Ints{1}));

  // ---- gather family (index inputs in i64 and i32, negative indices)
  c.push_back(OpCase("gather/rows", "gather"_op, {{5, 3}, {4}}).input_dtype(1, i64).gen(1, Gen::index(5, true)));
  c.push_back(OpCase("gather/axis1_i32", "gather"_op, {{4, 7, 33}, {2, 3}})
                  .attr("axis", I(1))
                  .input_dtype(1, i32)
                  .gen(1, Gen::index(7, true)));
  c.push_back(OpCase("gather/last_axis", "gather"_op, {{6, 1001}, {9}})
                  .attr("axis", I(-1))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(1001, true)));
  c.push_back(
      OpCase("gather/scalar_index", "gather"_op, {{5, 7}, {}}).input_dtype(1, i64).gen(1, Gen::index(5, true)));
  c.push_back(OpCase("gather_elements/axis0", "gather_elements"_op, {{4, 5}, {3, 5}})
                  .attr("axis", I(0))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(4, true)));
  c.push_back(OpCase("gather_elements/last", "gather_elements"_op, {{3, 4, 37}, {3, 4, 9}})
                  .attr("axis", I(-1))
                  .input_dtype(1, i32)
                  .gen(1, Gen::index(37, true)));
  c.push_back(OpCase("gather_elements/smaller", "gather_elements"_op, {{3, 6, 5}, {2, 8, 4}})
                  .attr("axis", I(1))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(6, true)));
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    const std::string r(red);
    c.push_back(OpCase("scatter/axis0_" + r, "scatter"_op, {{5, 4}, {3, 4}, {3, 4}})
                    .attr("axis", I(0))
                    .attr("reduction", r)
                    .input_dtype(1, i64)
                    .gen(1, Gen::index(5, true))
                    .gen(0, Gen::uniform(-0.5, 0.5))
                    .gen(2, Gen::uniform(-0.5, 0.5)));
    c.push_back(OpCase("scatter/middle_" + r, "scatter"_op, {{3, 6, 33}, {3, 4, 7}, {3, 4, 7}})
                    .attr("axis", I(1))
                    .attr("reduction", r)
                    .input_dtype(1, i32)
                    .gen(1, Gen::index(6, true))
                    .gen(0, Gen::uniform(-0.5, 0.5))
                    .gen(2, Gen::uniform(-0.5, 0.5)));
  }
  c.push_back(OpCase("index_select/axis0", "index_select"_op, {{6, 4}, {5}})
                  .attr("axis", I(0))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(6, true)));
  c.push_back(OpCase("index_select/axis1_i32", "index_select"_op, {{3, 33, 2}, {40}})
                  .attr("axis", I(1))
                  .input_dtype(1, i32)
                  .gen(1, Gen::index(33, true)));
  // resample: taps 2 (linear) along a middle and the last axis, 4 (cubic) and 3 (the general row path), 1 tap.
  c.push_back(OpCase("resample/middle_linear", "resample"_op, {{2, 5, 37}, {9, 2}, {9, 2}})
                  .attr("axis", I(1))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(5, true)));
  c.push_back(OpCase("resample/last_linear_i32", "resample"_op, {{3, 4, 6}, {11, 2}, {11, 2}})
                  .attr("axis", I(-1))
                  .input_dtype(1, i32)
                  .gen(1, Gen::index(6)));
  c.push_back(OpCase("resample/cubic", "resample"_op, {{2, 3, 6, 5}, {10, 4}, {10, 4}})
                  .attr("axis", I(2))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(6)));
  c.push_back(OpCase("resample/three_taps_first", "resample"_op, {{4, 33}, {3, 3}, {3, 3}})
                  .attr("axis", I(0))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(4)));
  c.push_back(OpCase("resample/one_tap_last", "resample"_op, {{2, 7}, {5, 1}, {5, 1}})
                  .attr("axis", I(1))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(7)));
  c.push_back(
      OpCase("embedding/2d_ids", "embedding"_op, {{10, 33}, {3, 4}}).input_dtype(1, i64).gen(1, Gen::index(10, true)));
  c.push_back(OpCase("embedding/i32_d1", "embedding"_op, {{7, 1}, {1000}}).input_dtype(1, i32).gen(1, Gen::index(7)));

  // ---- pad
  c.push_back(OpCase("pad/constant", "pad"_op, {{3, 4}}).attr("pads", Ints{1, 2, 0, 3}).attr("value", 1.5));
  c.push_back(OpCase("pad/crop", "pad"_op, {{6, 8}}).attr("pads", Ints{-1, 2, 1, -3}).attr("value", -1.0));
  c.push_back(OpCase("pad/long", "pad"_op, {{1000}}).attr("pads", Ints{5, 7}));
  c.push_back(
      OpCase("pad/reflect", "pad"_op, {{4, 5}}).attr("pads", Ints{2, 3, 1, 4}).attr("mode", std::string("reflect")));
  c.push_back(OpCase("pad/reflect_wide", "pad"_op, {{2, 3}})
                  .attr("pads", Ints{0, 7, 0, 5})
                  .attr("mode", std::string("reflect")));
  c.push_back(OpCase("pad/edge", "pad"_op, {{3, 1, 7}})
                  .attr("pads", Ints{1, 2, 3, 0, 1, 2})
                  .attr("mode", std::string("edge")));
  c.push_back(
      OpCase("pad/edge_crop", "pad"_op, {{5, 9}}).attr("pads", Ints{-2, 1, 1, -4}).attr("mode", std::string("edge")));

  // ---- expand, tile
  c.push_back(OpCase("expand/rank_up", "expand"_op, {{3, 1}}).attr("shape", Ints{2, 3, 5}));
  c.push_back(OpCase("expand/bidirectional", "expand"_op, {{1, 7}}).attr("shape", Ints{33, 1}));
  c.push_back(OpCase("expand/rows", "expand"_op, {{4}}).attr("shape", Ints{1000, 1}));
  c.push_back(OpCase("expand/inner_bcast", "expand"_op, {{5, 1}}).attr("shape", Ints{5, 1003}));
  c.push_back(OpCase("tile/2d", "tile"_op, {{2, 3}}).attr("repeats", Ints{2, 3}));
  c.push_back(OpCase("tile/long", "tile"_op, {{7}}).attr("repeats", Ints{150}));
  c.push_back(OpCase("tile/middle", "tile"_op, {{2, 1, 3}}).attr("repeats", Ints{1, 4, 1}));
  c.push_back(OpCase("tile/zero", "tile"_op, {{2, 3}}).attr("repeats", Ints{0, 2}));

  // ---- one_hot (dispatches on the index dtype; output dtype from the attribute)
  for (int d = 0; d < num_dtypes; ++d) {
    const DType dt = static_cast<DType>(d);
    c.push_back(OpCase(fmt::format("one_hot/{}", dtype_name(dt)), "one_hot"_op, {{3, 7}})
                    .attr("depth", I(5))
                    .attr("dtype", dt)
                    .gen(0, Gen::integers(-7, 7)));
  }
  c.push_back(OpCase("one_hot/axis0", "one_hot"_op, {{4, 33}})
                  .attr("depth", I(6))
                  .attr("axis", I(0))
                  .attr("on_value", 3.0)
                  .attr("off_value", -1.0)
                  .gen(0, Gen::index(6, true)));
  c.push_back(
      OpCase("one_hot/scalar", "one_hot"_op, std::vector<Shape>{Shape{}}).attr("depth", I(4)).gen(0, Gen::index(4)));

  // ---- arange, full: no inputs, one case per output dtype
  for (int d = 0; d < num_dtypes; ++d) {
    const DType dt = static_cast<DType>(d);
    if (!dtypes::numeric.has(dt)) continue;
    const std::string n(dtype_name(dt));
    c.push_back(OpCase("arange/" + n, "arange"_op, {})
                    .attr("start", 2.0)
                    .attr("stop", 1100.0)
                    .attr("step", 3.0)
                    .attr("dtype", dt)
                    .only(DTypeSet{dt}));
    c.push_back(OpCase("arange/down_" + n, "arange"_op, {})
                    .attr("start", 7.0)
                    .attr("stop", -3.0)
                    .attr("step", -2.0)
                    .attr("dtype", dt)
                    .only(DTypeSet{dt}));
    c.push_back(OpCase("full/" + n, "full"_op, {})
                    .attr("shape", Ints{3, 1001})
                    .attr("value", 2.5)
                    .attr("dtype", dt)
                    .only(DTypeSet{dt}));
  }
  c.push_back(OpCase("arange/fraction", "arange"_op, {})
                  .attr("start", 0.0)
                  .attr("stop", 1.0)
                  .attr("step", 0.1)
                  .only({DType::f32}));
  c.push_back(OpCase("arange/empty", "arange"_op, {}).attr("start", 5.0).attr("stop", 1.0).only({DType::f32}));
  c.push_back(OpCase("full/scalar", "full"_op, {}).attr("shape", Ints{}).attr("value", -3.0).only({DType::f32}));

  // ---- errors rejected by shape/dtype inference
  const DType f32 = DType::f32;
  e.push_back({"reshape/bad_size", "reshape"_op, {{2, 3}}, {f32}, {{"shape", Ints{4, 2}}}, ErrorCode::shape_mismatch});
  e.push_back(
      {"reshape/infer_no_fit", "reshape"_op, {{2, 3}}, {f32}, {{"shape", Ints{4, -1}}}, ErrorCode::shape_mismatch});
  e.push_back(
      {"reshape/two_minus1", "reshape"_op, {{2, 3}}, {f32}, {{"shape", Ints{-1, -1}}}, ErrorCode::invalid_argument});
  e.push_back(
      {"transpose/dup_perm", "transpose"_op, {{2, 3}}, {f32}, {{"perm", Ints{0, 0}}}, ErrorCode::invalid_argument});
  e.push_back(
      {"transpose/short_perm", "transpose"_op, {{2, 3}}, {f32}, {{"perm", Ints{0}}}, ErrorCode::invalid_argument});
  e.push_back(
      {"transpose/perm_range", "transpose"_op, {{2, 3}}, {f32}, {{"perm", Ints{0, 2}}}, ErrorCode::invalid_argument});
  e.push_back({"concat/rank", "concat"_op, {{2, 3}, {2}}, {f32, f32}, {{"axis", I(0)}}, ErrorCode::shape_mismatch});
  e.push_back({"concat/dim", "concat"_op, {{2, 3}, {3, 3}}, {f32, f32}, {{"axis", I(1)}}, ErrorCode::shape_mismatch});
  e.push_back(
      {"concat/dtype", "concat"_op, {{2, 3}, {2, 3}}, {f32, i32}, {{"axis", I(0)}}, ErrorCode::dtype_mismatch});
  e.push_back(
      {"concat/axis", "concat"_op, {{2, 3}, {2, 3}}, {f32, f32}, {{"axis", I(2)}}, ErrorCode::invalid_argument});
  e.push_back(
      {"split/sum", "split"_op, {{5, 3}}, {f32}, {{"sizes", Ints{2, 2}}, {"axis", I(0)}}, ErrorCode::shape_mismatch});
  e.push_back({"split/negative",
               "split"_op,
               {{5, 3}},
               {f32},
               {{"sizes", Ints{6, -1}}, {"axis", I(0)}},
               ErrorCode::invalid_argument});
  e.push_back({"slice/step0",
               "slice"_op,
               {{5}},
               {f32},
               {{"starts", Ints{0}}, {"ends", Ints{5}}, {"steps", Ints{0}}},
               ErrorCode::invalid_argument});
  e.push_back({"slice/lengths",
               "slice"_op,
               {{5}},
               {f32},
               {{"starts", Ints{0}}, {"ends", Ints{5, 1}}},
               ErrorCode::invalid_argument});
  e.push_back({"slice/dup_axes",
               "slice"_op,
               {{5, 4}},
               {f32},
               {{"starts", Ints{0, 1}}, {"ends", Ints{2, 3}}, {"axes", Ints{1, -1}}},
               ErrorCode::invalid_argument});
  e.push_back({"gather/float_indices", "gather"_op, {{5, 3}, {4}}, {f32, f32}, {}, ErrorCode::dtype_mismatch});
  e.push_back({"gather/axis", "gather"_op, {{5, 3}, {4}}, {f32, i64}, {{"axis", I(2)}}, ErrorCode::invalid_argument});
  e.push_back({"gather_elements/rank",
               "gather_elements"_op,
               {{5, 3}, {4}},
               {f32, i64},
               {{"axis", I(0)}},
               ErrorCode::shape_mismatch});
  e.push_back({"gather_elements/too_big",
               "gather_elements"_op,
               {{5, 3}, {2, 4}},
               {f32, i64},
               {{"axis", I(0)}},
               ErrorCode::shape_mismatch});
  e.push_back({"scatter/upd_shape",
               "scatter"_op,
               {{5, 3}, {2, 3}, {2, 2}},
               {f32, i64, f32},
               {{"axis", I(0)}},
               ErrorCode::shape_mismatch});
  e.push_back({"scatter/upd_dtype",
               "scatter"_op,
               {{5, 3}, {2, 3}, {2, 3}},
               {f32, i64, i32},
               {{"axis", I(0)}},
               ErrorCode::dtype_mismatch});
  e.push_back({"scatter/reduction",
               "scatter"_op,
               {{5, 3}, {2, 3}, {2, 3}},
               {f32, i64, f32},
               {{"axis", I(0)}, {"reduction", std::string("maximum")}},
               ErrorCode::invalid_argument});
  e.push_back({"index_select/2d",
               "index_select"_op,
               {{5, 3}, {2, 2}},
               {f32, i64},
               {{"axis", I(0)}},
               ErrorCode::shape_mismatch});
  e.push_back({"resample/indices_rank",
               "resample"_op,
               {{5, 3}, {4}, {4}},
               {f32, i64, f32},
               {{"axis", I(0)}},
               ErrorCode::shape_mismatch});
  e.push_back({"resample/weights_shape",
               "resample"_op,
               {{5, 3}, {4, 2}, {4, 3}},
               {f32, i64, f32},
               {{"axis", I(0)}},
               ErrorCode::shape_mismatch});
  e.push_back({"resample/weights_dtype",
               "resample"_op,
               {{5, 3}, {4, 2}, {4, 2}},
               {f32, i64, DType::f64},
               {{"axis", I(1)}},
               ErrorCode::dtype_mismatch});
  e.push_back({"resample/float_indices",
               "resample"_op,
               {{5, 3}, {4, 2}, {4, 2}},
               {f32, f32, f32},
               {{"axis", I(0)}},
               ErrorCode::dtype_mismatch});
  e.push_back({"embedding/rank", "embedding"_op, {{5, 3, 2}, {4}}, {f32, i64}, {}, ErrorCode::shape_mismatch});
  e.push_back({"embedding/float_ids", "embedding"_op, {{5, 3}, {4}}, {f32, f32}, {}, ErrorCode::dtype_mismatch});
  e.push_back({"pad/pads_length", "pad"_op, {{2, 3}}, {f32}, {{"pads", Ints{1, 1}}}, ErrorCode::invalid_argument});
  e.push_back({"pad/mode",
               "pad"_op,
               {{2, 3}},
               {f32},
               {{"pads", Ints{0, 0, 0, 0}}, {"mode", std::string("wrap")}},
               ErrorCode::invalid_argument});
  e.push_back({"pad/over_crop", "pad"_op, {{2, 3}}, {f32}, {{"pads", Ints{0, -2, 0, -2}}}, ErrorCode::shape_mismatch});
  e.push_back({"expand/incompatible", "expand"_op, {{3}}, {f32}, {{"shape", Ints{2, 4}}}, ErrorCode::shape_mismatch});
  e.push_back({"squeeze/non_one", "squeeze"_op, {{2, 1, 3}}, {f32}, {{"axes", Ints{0}}}, ErrorCode::shape_mismatch});
  e.push_back({"squeeze/axis", "squeeze"_op, {{2, 1}}, {f32}, {{"axes", Ints{3}}}, ErrorCode::invalid_argument});
  e.push_back({"unsqueeze/dup", "unsqueeze"_op, {{2, 3}}, {f32}, {{"axes", Ints{1, 1}}}, ErrorCode::invalid_argument});
  e.push_back({"flatten/axis", "flatten"_op, {{2, 3}}, {f32}, {{"axis", I(3)}}, ErrorCode::invalid_argument});
  e.push_back({"tile/repeats", "tile"_op, {{2, 3}}, {f32}, {{"repeats", Ints{2}}}, ErrorCode::invalid_argument});
  e.push_back({"one_hot/float", "one_hot"_op, {{4}}, {f32}, {{"depth", I(3)}}, ErrorCode::dtype_mismatch});
  e.push_back({"one_hot/depth", "one_hot"_op, {{4}}, {i64}, {{"depth", I(0)}}, ErrorCode::invalid_argument});
  e.push_back({"arange/step0",
               "arange"_op,
               {},
               {},
               {{"start", 0.0}, {"stop", 5.0}, {"step", 0.0}},
               ErrorCode::invalid_argument});
  e.push_back({"arange/bool",
               "arange"_op,
               {},
               {},
               {{"start", 0.0}, {"stop", 5.0}, {"dtype", DType::boolean}},
               ErrorCode::dtype_mismatch});
  e.push_back(
      {"full/negative", "full"_op, {}, {}, {{"shape", Ints{2, -1}}, {"value", 1.0}}, ErrorCode::invalid_argument});
}

}  // namespace spore::conformance
