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
  c.push_back(OpCase("reshape/infer", OpId::reshape, {{2, 3, 4}}).attr("shape", Ints{4, -1}));
  c.push_back(OpCase("reshape/tail", OpId::reshape, {{7, 33}}).attr("shape", Ints{33, 7, 1}));
  c.push_back(OpCase("reshape/big", OpId::reshape, {{1031, 65}}).attr("shape", Ints{-1}));
  c.push_back(OpCase("reshape/empty", OpId::reshape, {{0, 3}}).attr("shape", Ints{3, 0}));
  c.push_back(OpCase("squeeze/all", OpId::squeeze, {{1, 3, 1, 4}}));
  c.push_back(OpCase("squeeze/axes", OpId::squeeze, {{1, 3, 1, 4}}).attr("axes", Ints{-2}));
  c.push_back(OpCase("unsqueeze/front_back", OpId::unsqueeze, {{3, 7}}).attr("axes", Ints{0, 3}));
  c.push_back(OpCase("unsqueeze/neg", OpId::unsqueeze, {{33}}).attr("axes", Ints{-1}));
  c.push_back(OpCase("flatten/default", OpId::flatten, {{2, 3, 4, 5}}));
  c.push_back(OpCase("flatten/axis0", OpId::flatten, {{2, 3, 7}}).attr("axis", I(0)));
  c.push_back(OpCase("flatten/axis_end", OpId::flatten, {{2, 3, 7}}).attr("axis", I(3)));
  c.push_back(OpCase("flatten/neg", OpId::flatten, {{2, 3, 7}}).attr("axis", I(-1)));

  // ---- transpose: 2-D tiles with ragged edges, batched tiles, last dim kept, 1-wide dims
  c.push_back(OpCase("transpose/reverse", OpId::transpose, {{33, 65}}));
  c.push_back(OpCase("transpose/3d", OpId::transpose, {{2, 3, 4}}).attr("perm", Ints{2, 0, 1}));
  c.push_back(OpCase("transpose/tall", OpId::transpose, {{1000, 3}}).attr("perm", Ints{1, 0}));
  c.push_back(OpCase("transpose/batched", OpId::transpose, {{3, 37, 41}}).attr("perm", Ints{0, 2, 1}));
  c.push_back(OpCase("transpose/keep_last", OpId::transpose, {{2, 3, 4, 5}}).attr("perm", Ints{0, 2, 1, 3}));
  c.push_back(OpCase("transpose/neg_perm", OpId::transpose, {{5, 1, 7}}).attr("perm", Ints{-1, 0, 1}));
  c.push_back(OpCase("transpose/nhwc", OpId::transpose, {{2, 7, 9, 33}}).attr("perm", Ints{0, 3, 1, 2}));

  // ---- concat, split
  c.push_back(OpCase("concat/axis1", OpId::concat, {{2, 3}, {2, 5}, {2, 1}}).attr("axis", I(1)));
  c.push_back(OpCase("concat/axis0_long", OpId::concat, {{1000}, {7}}).attr("axis", I(0)));
  c.push_back(OpCase("concat/neg_axis", OpId::concat, {{3, 4, 5}, {2, 4, 5}}).attr("axis", I(-3)));
  c.push_back(OpCase("concat/middle", OpId::concat, {{2, 3, 33}, {2, 0, 33}, {2, 7, 33}}).attr("axis", I(1)));
  c.push_back(
      OpCase("concat/big_rows", OpId::concat, {{2, 40000}, {2, 33}}).attr("axis", I(1)).only({DType::f32, DType::u8}));
  c.push_back(OpCase("concat/one", OpId::concat, {{4, 3}}).attr("axis", I(0)));
  c.push_back(OpCase("split/axis0", OpId::split, {{5, 7}}).attr("sizes", Ints{2, 3}).attr("axis", I(0)));
  c.push_back(OpCase("split/last", OpId::split, {{4, 1030}}).attr("sizes", Ints{1000, 30}).attr("axis", I(-1)));
  c.push_back(OpCase("split/empty_piece", OpId::split, {{3, 9, 2}}).attr("sizes", Ints{0, 4, 5}).attr("axis", I(1)));

  // ---- slice (ONNX): clamping, negative indices, negative and non-unit steps
  c.push_back(OpCase("slice/clamp", OpId::slice, {{10, 12}}).attr("starts", Ints{1, -5}).attr("ends", Ints{8, 100}));
  c.push_back(OpCase("slice/reverse", OpId::slice, {{6, 33}})
                  .attr("starts", Ints{-1})
                  .attr("ends", Ints{kmin})
                  .attr("axes", Ints{1})
                  .attr("steps", Ints{-1}));
  c.push_back(OpCase("slice/neg_step2", OpId::slice, {{6, 33}})
                  .attr("starts", Ints{kmax})
                  .attr("ends", Ints{2})
                  .attr("axes", Ints{-1})
                  .attr("steps", Ints{-2}));
  c.push_back(OpCase("slice/steps", OpId::slice, {{33, 20}})
                  .attr("starts", Ints{0, 1})
                  .attr("ends", Ints{33, 20})
                  .attr("steps", Ints{3, 1}));
  c.push_back(OpCase("slice/axes_mixed", OpId::slice, {{5, 6, 7}})
                  .attr("starts", Ints{1, 4})
                  .attr("ends", Ints{-1, 0})
                  .attr("axes", Ints{2, 0})
                  .attr("steps", Ints{2, -1}));
  c.push_back(OpCase("slice/long", OpId::slice, {{1030}}).attr("starts", Ints{3}).attr("ends", Ints{1029}));
  c.push_back(
      OpCase("slice/empty", OpId::slice, {{4, 5}}).attr("starts", Ints{3}).attr("ends", Ints{1}).attr("axes", Ints{1}));

  // ---- gather family (index inputs in i64 and i32, negative indices)
  c.push_back(OpCase("gather/rows", OpId::gather, {{5, 3}, {4}}).input_dtype(1, i64).gen(1, Gen::index(5, true)));
  c.push_back(OpCase("gather/axis1_i32", OpId::gather, {{4, 7, 33}, {2, 3}})
                  .attr("axis", I(1))
                  .input_dtype(1, i32)
                  .gen(1, Gen::index(7, true)));
  c.push_back(OpCase("gather/last_axis", OpId::gather, {{6, 1001}, {9}})
                  .attr("axis", I(-1))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(1001, true)));
  c.push_back(
      OpCase("gather/scalar_index", OpId::gather, {{5, 7}, {}}).input_dtype(1, i64).gen(1, Gen::index(5, true)));
  c.push_back(OpCase("gather_elements/axis0", OpId::gather_elements, {{4, 5}, {3, 5}})
                  .attr("axis", I(0))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(4, true)));
  c.push_back(OpCase("gather_elements/last", OpId::gather_elements, {{3, 4, 37}, {3, 4, 9}})
                  .attr("axis", I(-1))
                  .input_dtype(1, i32)
                  .gen(1, Gen::index(37, true)));
  c.push_back(OpCase("gather_elements/smaller", OpId::gather_elements, {{3, 6, 5}, {2, 8, 4}})
                  .attr("axis", I(1))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(6, true)));
  for (const char* red : {"none", "add", "mul"}) {
    const std::string r(red);
    c.push_back(OpCase("scatter/axis0_" + r, OpId::scatter, {{5, 4}, {3, 4}, {3, 4}})
                    .attr("axis", I(0))
                    .attr("reduction", r)
                    .input_dtype(1, i64)
                    .gen(1, Gen::index(5, true))
                    .gen(0, Gen::uniform(-0.5, 0.5))
                    .gen(2, Gen::uniform(-0.5, 0.5)));
    c.push_back(OpCase("scatter/middle_" + r, OpId::scatter, {{3, 6, 33}, {3, 4, 7}, {3, 4, 7}})
                    .attr("axis", I(1))
                    .attr("reduction", r)
                    .input_dtype(1, i32)
                    .gen(1, Gen::index(6, true))
                    .gen(0, Gen::uniform(-0.5, 0.5))
                    .gen(2, Gen::uniform(-0.5, 0.5)));
  }
  c.push_back(OpCase("index_select/axis0", OpId::index_select, {{6, 4}, {5}})
                  .attr("axis", I(0))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(6, true)));
  c.push_back(OpCase("index_select/axis1_i32", OpId::index_select, {{3, 33, 2}, {40}})
                  .attr("axis", I(1))
                  .input_dtype(1, i32)
                  .gen(1, Gen::index(33, true)));
  c.push_back(
      OpCase("embedding/2d_ids", OpId::embedding, {{10, 33}, {3, 4}}).input_dtype(1, i64).gen(1, Gen::index(10, true)));
  c.push_back(OpCase("embedding/i32_d1", OpId::embedding, {{7, 1}, {1000}}).input_dtype(1, i32).gen(1, Gen::index(7)));

  // ---- pad
  c.push_back(OpCase("pad/constant", OpId::pad, {{3, 4}}).attr("pads", Ints{1, 2, 0, 3}).attr("value", 1.5));
  c.push_back(OpCase("pad/crop", OpId::pad, {{6, 8}}).attr("pads", Ints{-1, 2, 1, -3}).attr("value", -1.0));
  c.push_back(OpCase("pad/long", OpId::pad, {{1000}}).attr("pads", Ints{5, 7}));
  c.push_back(
      OpCase("pad/reflect", OpId::pad, {{4, 5}}).attr("pads", Ints{2, 3, 1, 4}).attr("mode", std::string("reflect")));
  c.push_back(OpCase("pad/reflect_wide", OpId::pad, {{2, 3}})
                  .attr("pads", Ints{0, 7, 0, 5})
                  .attr("mode", std::string("reflect")));
  c.push_back(OpCase("pad/edge", OpId::pad, {{3, 1, 7}})
                  .attr("pads", Ints{1, 2, 3, 0, 1, 2})
                  .attr("mode", std::string("edge")));
  c.push_back(
      OpCase("pad/edge_crop", OpId::pad, {{5, 9}}).attr("pads", Ints{-2, 1, 1, -4}).attr("mode", std::string("edge")));

  // ---- expand, tile
  c.push_back(OpCase("expand/rank_up", OpId::expand, {{3, 1}}).attr("shape", Ints{2, 3, 5}));
  c.push_back(OpCase("expand/bidirectional", OpId::expand, {{1, 7}}).attr("shape", Ints{33, 1}));
  c.push_back(OpCase("expand/rows", OpId::expand, {{4}}).attr("shape", Ints{1000, 1}));
  c.push_back(OpCase("expand/inner_bcast", OpId::expand, {{5, 1}}).attr("shape", Ints{5, 1003}));
  c.push_back(OpCase("tile/2d", OpId::tile, {{2, 3}}).attr("repeats", Ints{2, 3}));
  c.push_back(OpCase("tile/long", OpId::tile, {{7}}).attr("repeats", Ints{150}));
  c.push_back(OpCase("tile/middle", OpId::tile, {{2, 1, 3}}).attr("repeats", Ints{1, 4, 1}));
  c.push_back(OpCase("tile/zero", OpId::tile, {{2, 3}}).attr("repeats", Ints{0, 2}));

  // ---- one_hot (dispatches on the index dtype; output dtype from the attribute)
  for (int d = 0; d < num_dtypes; ++d) {
    const DType dt = static_cast<DType>(d);
    c.push_back(OpCase(fmt::format("one_hot/{}", dtype_name(dt)), OpId::one_hot, {{3, 7}})
                    .attr("depth", I(5))
                    .attr("dtype", dt)
                    .gen(0, Gen::integers(-7, 7)));
  }
  c.push_back(OpCase("one_hot/axis0", OpId::one_hot, {{4, 33}})
                  .attr("depth", I(6))
                  .attr("axis", I(0))
                  .attr("on_value", 3.0)
                  .attr("off_value", -1.0)
                  .gen(0, Gen::index(6, true)));
  c.push_back(
      OpCase("one_hot/scalar", OpId::one_hot, std::vector<Shape>{Shape{}}).attr("depth", I(4)).gen(0, Gen::index(4)));

  // ---- arange, full: no inputs, one case per output dtype
  for (int d = 0; d < num_dtypes; ++d) {
    const DType dt = static_cast<DType>(d);
    if (!dtypes::numeric.has(dt)) continue;
    const std::string n(dtype_name(dt));
    c.push_back(OpCase("arange/" + n, OpId::arange, {})
                    .attr("start", 2.0)
                    .attr("stop", 1100.0)
                    .attr("step", 3.0)
                    .attr("dtype", dt)
                    .only(DTypeSet{dt}));
    c.push_back(OpCase("arange/down_" + n, OpId::arange, {})
                    .attr("start", 7.0)
                    .attr("stop", -3.0)
                    .attr("step", -2.0)
                    .attr("dtype", dt)
                    .only(DTypeSet{dt}));
    c.push_back(OpCase("full/" + n, OpId::full, {})
                    .attr("shape", Ints{3, 1001})
                    .attr("value", 2.5)
                    .attr("dtype", dt)
                    .only(DTypeSet{dt}));
  }
  c.push_back(OpCase("arange/fraction", OpId::arange, {})
                  .attr("start", 0.0)
                  .attr("stop", 1.0)
                  .attr("step", 0.1)
                  .only({DType::f32}));
  c.push_back(OpCase("arange/empty", OpId::arange, {}).attr("start", 5.0).attr("stop", 1.0).only({DType::f32}));
  c.push_back(OpCase("full/scalar", OpId::full, {}).attr("shape", Ints{}).attr("value", -3.0).only({DType::f32}));

  // ---- errors rejected by shape/dtype inference
  const DType f32 = DType::f32;
  e.push_back({"reshape/bad_size", OpId::reshape, {{2, 3}}, {f32}, {{"shape", Ints{4, 2}}}, ErrorCode::shape_mismatch});
  e.push_back(
      {"reshape/infer_no_fit", OpId::reshape, {{2, 3}}, {f32}, {{"shape", Ints{4, -1}}}, ErrorCode::shape_mismatch});
  e.push_back(
      {"reshape/two_minus1", OpId::reshape, {{2, 3}}, {f32}, {{"shape", Ints{-1, -1}}}, ErrorCode::invalid_argument});
  e.push_back(
      {"transpose/dup_perm", OpId::transpose, {{2, 3}}, {f32}, {{"perm", Ints{0, 0}}}, ErrorCode::invalid_argument});
  e.push_back(
      {"transpose/short_perm", OpId::transpose, {{2, 3}}, {f32}, {{"perm", Ints{0}}}, ErrorCode::invalid_argument});
  e.push_back(
      {"transpose/perm_range", OpId::transpose, {{2, 3}}, {f32}, {{"perm", Ints{0, 2}}}, ErrorCode::invalid_argument});
  e.push_back({"concat/rank", OpId::concat, {{2, 3}, {2}}, {f32, f32}, {{"axis", I(0)}}, ErrorCode::shape_mismatch});
  e.push_back({"concat/dim", OpId::concat, {{2, 3}, {3, 3}}, {f32, f32}, {{"axis", I(1)}}, ErrorCode::shape_mismatch});
  e.push_back(
      {"concat/dtype", OpId::concat, {{2, 3}, {2, 3}}, {f32, i32}, {{"axis", I(0)}}, ErrorCode::dtype_mismatch});
  e.push_back(
      {"concat/axis", OpId::concat, {{2, 3}, {2, 3}}, {f32, f32}, {{"axis", I(2)}}, ErrorCode::invalid_argument});
  e.push_back(
      {"split/sum", OpId::split, {{5, 3}}, {f32}, {{"sizes", Ints{2, 2}}, {"axis", I(0)}}, ErrorCode::shape_mismatch});
  e.push_back({"split/negative",
               OpId::split,
               {{5, 3}},
               {f32},
               {{"sizes", Ints{6, -1}}, {"axis", I(0)}},
               ErrorCode::invalid_argument});
  e.push_back({"slice/step0",
               OpId::slice,
               {{5}},
               {f32},
               {{"starts", Ints{0}}, {"ends", Ints{5}}, {"steps", Ints{0}}},
               ErrorCode::invalid_argument});
  e.push_back({"slice/lengths",
               OpId::slice,
               {{5}},
               {f32},
               {{"starts", Ints{0}}, {"ends", Ints{5, 1}}},
               ErrorCode::invalid_argument});
  e.push_back({"slice/dup_axes",
               OpId::slice,
               {{5, 4}},
               {f32},
               {{"starts", Ints{0, 1}}, {"ends", Ints{2, 3}}, {"axes", Ints{1, -1}}},
               ErrorCode::invalid_argument});
  e.push_back({"gather/float_indices", OpId::gather, {{5, 3}, {4}}, {f32, f32}, {}, ErrorCode::dtype_mismatch});
  e.push_back({"gather/axis", OpId::gather, {{5, 3}, {4}}, {f32, i64}, {{"axis", I(2)}}, ErrorCode::invalid_argument});
  e.push_back({"gather_elements/rank",
               OpId::gather_elements,
               {{5, 3}, {4}},
               {f32, i64},
               {{"axis", I(0)}},
               ErrorCode::shape_mismatch});
  e.push_back({"gather_elements/too_big",
               OpId::gather_elements,
               {{5, 3}, {2, 4}},
               {f32, i64},
               {{"axis", I(0)}},
               ErrorCode::shape_mismatch});
  e.push_back({"scatter/upd_shape",
               OpId::scatter,
               {{5, 3}, {2, 3}, {2, 2}},
               {f32, i64, f32},
               {{"axis", I(0)}},
               ErrorCode::shape_mismatch});
  e.push_back({"scatter/upd_dtype",
               OpId::scatter,
               {{5, 3}, {2, 3}, {2, 3}},
               {f32, i64, i32},
               {{"axis", I(0)}},
               ErrorCode::dtype_mismatch});
  e.push_back({"scatter/reduction",
               OpId::scatter,
               {{5, 3}, {2, 3}, {2, 3}},
               {f32, i64, f32},
               {{"axis", I(0)}, {"reduction", std::string("max")}},
               ErrorCode::invalid_argument});
  e.push_back({"index_select/2d",
               OpId::index_select,
               {{5, 3}, {2, 2}},
               {f32, i64},
               {{"axis", I(0)}},
               ErrorCode::shape_mismatch});
  e.push_back({"embedding/rank", OpId::embedding, {{5, 3, 2}, {4}}, {f32, i64}, {}, ErrorCode::shape_mismatch});
  e.push_back({"embedding/float_ids", OpId::embedding, {{5, 3}, {4}}, {f32, f32}, {}, ErrorCode::dtype_mismatch});
  e.push_back({"pad/pads_length", OpId::pad, {{2, 3}}, {f32}, {{"pads", Ints{1, 1}}}, ErrorCode::invalid_argument});
  e.push_back({"pad/mode",
               OpId::pad,
               {{2, 3}},
               {f32},
               {{"pads", Ints{0, 0, 0, 0}}, {"mode", std::string("wrap")}},
               ErrorCode::invalid_argument});
  e.push_back({"pad/over_crop", OpId::pad, {{2, 3}}, {f32}, {{"pads", Ints{0, -2, 0, -2}}}, ErrorCode::shape_mismatch});
  e.push_back({"expand/incompatible", OpId::expand, {{3}}, {f32}, {{"shape", Ints{2, 4}}}, ErrorCode::shape_mismatch});
  e.push_back({"squeeze/non_one", OpId::squeeze, {{2, 1, 3}}, {f32}, {{"axes", Ints{0}}}, ErrorCode::shape_mismatch});
  e.push_back({"squeeze/axis", OpId::squeeze, {{2, 1}}, {f32}, {{"axes", Ints{3}}}, ErrorCode::invalid_argument});
  e.push_back({"unsqueeze/dup", OpId::unsqueeze, {{2, 3}}, {f32}, {{"axes", Ints{1, 1}}}, ErrorCode::invalid_argument});
  e.push_back({"flatten/axis", OpId::flatten, {{2, 3}}, {f32}, {{"axis", I(3)}}, ErrorCode::invalid_argument});
  e.push_back({"tile/repeats", OpId::tile, {{2, 3}}, {f32}, {{"repeats", Ints{2}}}, ErrorCode::invalid_argument});
  e.push_back({"one_hot/float", OpId::one_hot, {{4}}, {f32}, {{"depth", I(3)}}, ErrorCode::dtype_mismatch});
  e.push_back({"one_hot/depth", OpId::one_hot, {{4}}, {i64}, {{"depth", I(0)}}, ErrorCode::invalid_argument});
  e.push_back({"arange/step0",
               OpId::arange,
               {},
               {},
               {{"start", 0.0}, {"stop", 5.0}, {"step", 0.0}},
               ErrorCode::invalid_argument});
  e.push_back({"arange/bool",
               OpId::arange,
               {},
               {},
               {{"start", 0.0}, {"stop", 5.0}, {"dtype", DType::boolean}},
               ErrorCode::dtype_mismatch});
  e.push_back(
      {"full/negative", OpId::full, {}, {}, {{"shape", Ints{2, -1}}, {"value", 1.0}}, ErrorCode::invalid_argument});
}

}  // namespace spore::conformance
