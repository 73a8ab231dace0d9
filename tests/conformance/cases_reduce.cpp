// Conformance cases of the reduce family: every op in every dtype it accepts, axes patterns (all,
// first, last, middle, several, negative, keepdims, size-1 and empty dims), SIMD tails, long reductions
// that cross the 4096-element blocks, and ties for arg*/topk.
#include "conformance/harness.h"

namespace spore::conformance {

void add_reduce_cases(CaseList& c, ErrorList& e) {
  using Ints = std::vector<int64_t>;
  const OpId reductions[] = {"reduce_sum"_op, "reduce_mean"_op, "reduce_max"_op, "reduce_min"_op,
                             "reduce_prod"_op};
  for (OpId op : reductions) {
    const std::string n(op_name(op));
    const bool prod = op == "reduce_prod"_op;
    // Products of many values over/underflow; keep their factors near 1.
    const Gen g = prod ? Gen::uniform(0.5, 1.6) : Gen::uniform(-2, 2);
    auto add = [&](const std::string& name, Shape s, Ints axes, bool keepdims = false, double tol = 1) {
      c.push_back(OpCase(n + "/" + name, op, {std::move(s)}).attr("axes", axes).attr("keepdims", keepdims).gen(0, g).tol(tol));
    };
    add("all", {3, 4, 5}, {});
    add("all_keepdims", {3, 4, 5}, {}, true);
    add("first", {7, 33}, {0});
    add("last_neg_keepdims", {5, 33}, {-1}, true);
    add("middle", {3, 7, 5}, {1});
    add("several", {2, 3, 4, 5}, {0, 2});
    add("several_neg_keepdims", {2, 3, 4, 5}, {-1, 1}, true);
    add("adjacent", {3, 4, 5, 2}, {1, 2});
    add("size1_dims", {1, 5, 1}, {0, 2});
    add("scalar", {}, {});
    add("one", {1}, {});
    add("rows_tail", {3, 1029}, {1});
    add("many_rows", {1000, 70}, {1});
    add("cols_wide", {6, 1100}, {0});
    add("tall_cols", {9000, 3}, {0}, false, 10);
    add("tall_cols_blocks", {20000, 3}, {0}, false, 30);
    if (!prod) {
      add("long", {100000}, {}, false, 30);
      add("long_2rows", {2, 50001}, {1}, false, 30);
    } else {
      c.push_back(OpCase(n + "/long", op, {{100000}}).attr("axes", Ints{}).gen(0, Gen::uniform(0.99, 1.01)).tol(10));
    }
    if (op != "reduce_max"_op && op != "reduce_min"_op) add("empty_axis", {0, 3}, {0});
  }
  // Integer sums and products wrap like C.
  c.push_back(OpCase("reduce_sum/wrap", "reduce_sum"_op, {{4, 300}}).attr("axes", Ints{1}).gen(0, Gen::integers(60, 127))
                  .only(dtypes::integral));
  c.push_back(OpCase("reduce_prod/wrap", "reduce_prod"_op, {{4, 40}}).attr("axes", Ints{1}).gen(0, Gen::integers(2, 9))
                  .only(dtypes::integral));

  for (OpId op : {"argmax"_op, "argmin"_op}) {
    const std::string n(op_name(op));
    auto add = [&](const std::string& name, Shape s, int64_t axis, bool keepdims = false, Gen g = Gen::uniform(-2, 2)) {
      c.push_back(OpCase(n + "/" + name, op, {std::move(s)}).attr("axis", axis).attr("keepdims", keepdims).gen(0, g));
    };
    add("last", {7, 33}, 1);
    add("first", {7, 33}, 0);
    add("neg_keepdims", {7, 33}, -1, true);
    add("middle", {3, 4, 5}, 1);
    add("middle_keepdims", {3, 4, 5}, -2, true);
    add("scalar", {}, 0);
    add("row", {1000}, 0);
    add("long", {100000}, 0);
    add("ties", {5, 200}, 1, false, Gen::integers(0, 4));
    add("ties_cols", {200, 5}, 0, false, Gen::integers(0, 4));
    add("wide_cols", {4, 3, 1100}, 1);
  }

  for (OpId op : {"softmax"_op, "log_softmax"_op}) {
    const std::string n(op_name(op));
    auto add = [&](const std::string& name, Shape s, int64_t axis, double tol = 1) {
      c.push_back(OpCase(n + "/" + name, op, {std::move(s)}).attr("axis", axis).gen(0, Gen::uniform(-5, 5)).tol(tol));
    };
    add("last", {5, 33}, -1);
    add("rows_tail", {3, 1030}, 1);
    add("one_col", {4, 1}, -1);
    add("first", {7, 6}, 0);
    add("middle", {3, 7, 5}, 1);
    add("middle_wide", {2, 10, 261}, 1);
    add("scalar", {}, -1);
    add("long_row", {100000}, 0, 10);
    add("many_rows", {2000, 9}, -1);
  }

  auto cumsum = [&](const std::string& name, Shape s, int64_t axis, bool exclusive, bool reverse, double tol = 1) {
    c.push_back(OpCase("cumsum/" + name, "cumsum"_op, {std::move(s)}).attr("axis", axis).attr("exclusive", exclusive)
                    .attr("reverse", reverse).tol(tol));
  };
  cumsum("last", {7, 33}, 1, false, false);
  cumsum("first", {33, 7}, 0, false, false);
  cumsum("exclusive", {7, 33}, -1, true, false);
  cumsum("reverse", {7, 33}, -1, false, true);
  cumsum("exclusive_reverse", {3, 4, 5}, 1, true, true);
  cumsum("middle", {3, 4, 5}, -2, false, false);
  cumsum("wide_cols", {5, 1100}, 0, true, false);
  cumsum("scalar", {}, 0, false, false);
  cumsum("long", {10000}, 0, false, false, 100);
  c.push_back(OpCase("cumsum/wrap", "cumsum"_op, {{300}}).attr("axis", int64_t{0}).gen(0, Gen::integers(60, 127))
                  .only(dtypes::integral));

  auto topk = [&](const std::string& name, Shape s, int64_t k, int64_t axis, bool largest, bool sorted = true,
                  Gen g = Gen::uniform(-2, 2)) {
    c.push_back(OpCase("topk/" + name, "topk"_op, {std::move(s)}).attr("k", k).attr("axis", axis)
                    .attr("largest", largest).attr("sorted", sorted).gen(0, g));
  };
  topk("last", {7, 33}, 5, -1, true);
  topk("smallest", {7, 33}, 5, 1, false);
  topk("first_axis", {33, 7}, 3, 0, true);
  topk("middle", {3, 4, 5}, 2, 1, false);
  topk("k0", {4, 6}, 0, -1, true);
  topk("k_all", {4, 33}, 33, -1, true);
  topk("unsorted", {4, 33}, 7, -1, true, false);
  topk("long_row", {1000}, 10, 0, true);
  topk("ties", {6, 50}, 9, 1, true, true, Gen::integers(0, 4));
  topk("ties_smallest", {50, 6}, 9, 0, false, true, Gen::integers(0, 4));

  // ---- bad inputs
  using T = DType;
  e.push_back({"reduce_sum/axis_out_of_range", "reduce_sum"_op, {{2, 3}}, {T::f32}, {{"axes", Ints{2}}},
               ErrorCode::invalid_argument});
  e.push_back({"reduce_max/axis_too_negative", "reduce_max"_op, {{2, 3}}, {T::f32}, {{"axes", Ints{-3}}},
               ErrorCode::invalid_argument});
  e.push_back({"reduce_sum/duplicate_axes", "reduce_sum"_op, {{2, 3}}, {T::f32}, {{"axes", Ints{0, -2}}},
               ErrorCode::invalid_argument});
  e.push_back({"reduce_prod/duplicate_axes", "reduce_prod"_op, {{2, 3, 4}}, {T::i32}, {{"axes", Ints{1, 1}}},
               ErrorCode::invalid_argument});
  e.push_back({"reduce_mean/int", "reduce_mean"_op, {{2, 3}}, {T::i32}, {}, ErrorCode::dtype_mismatch});
  e.push_back({"reduce_sum/bool", "reduce_sum"_op, {{2, 3}}, {T::boolean}, {}, ErrorCode::dtype_mismatch});
  e.push_back({"reduce_max/empty_axis", "reduce_max"_op, {{0, 3}}, {T::f32}, {{"axes", Ints{0}}},
               ErrorCode::invalid_argument});
  e.push_back({"argmax/axis_out_of_range", "argmax"_op, {{2, 3}}, {T::f32}, {{"axis", int64_t{2}}},
               ErrorCode::invalid_argument});
  e.push_back({"argmin/empty_axis", "argmin"_op, {{4, 0}}, {T::f32}, {{"axis", int64_t{1}}}, ErrorCode::invalid_argument});
  e.push_back({"softmax/int", "softmax"_op, {{2, 3}}, {T::i64}, {}, ErrorCode::dtype_mismatch});
  e.push_back({"log_softmax/axis_out_of_range", "log_softmax"_op, {{2, 3}}, {T::f32}, {{"axis", int64_t{-3}}},
               ErrorCode::invalid_argument});
  e.push_back({"cumsum/axis_out_of_range", "cumsum"_op, {{2, 3}}, {T::f32}, {{"axis", int64_t{2}}},
               ErrorCode::invalid_argument});
  e.push_back({"cumsum/missing_axis", "cumsum"_op, {{2, 3}}, {T::f32}, {}, ErrorCode::invalid_argument});
  e.push_back({"topk/k_too_large", "topk"_op, {{2, 5}}, {T::f32}, {{"k", int64_t{6}}}, ErrorCode::invalid_argument});
  e.push_back({"topk/k_negative", "topk"_op, {{2, 5}}, {T::f32}, {{"k", int64_t{-1}}}, ErrorCode::invalid_argument});
  e.push_back({"topk/scalar", "topk"_op, {{}}, {T::f32}, {{"k", int64_t{1}}}, ErrorCode::invalid_argument});
  e.push_back({"topk/bool", "topk"_op, {{4}}, {T::boolean}, {{"k", int64_t{1}}}, ErrorCode::dtype_mismatch});
}

}  // namespace spore::conformance
