// Conformance cases of the binary family: every op and dtype, the broadcasting patterns the cpu
// kernels special-case (same shape, scalar, [N,C]+[C], [N,C,H,W]+[C,1,1]) plus the general strided
// fallback, odd sizes around the SIMD width, and runs that cross chunk boundaries mid-row.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "conformance/harness.h"
#include "ops/ops.h"
#include "runtime/runtime.h"

namespace spore::conformance {

void add_binary_cases(CaseList& c, ErrorList& e) {
  const DTypeSet fl = dtypes::floating;
  const DTypeSet si = dtypes::signed_int;
  const DTypeSet u8{DType::u8};
  const DTypeSet f32_f16_i32{DType::f32, DType::f16, DType::i32};

  // Shapes that every arithmetic op runs through (all dtypes where inputs cannot hit a domain issue).
  struct Pattern {
    const char* name;
    std::vector<Shape> shapes;
  };
  const std::vector<Pattern> patterns = {
      {"same", {{7, 33}, {7, 33}}},
      {"one", {{1}, {1}}},
      {"scalar_b", {{1001}, {}}},
      {"scalar_a", {{}, {37}}},
      {"scalars", {{}, {}}},
      {"row_bias", {{5, 19}, {19}}},
      {"chan_bias", {{2, 3, 5, 7}, {3, 1, 1}}},
      {"outer", {{3, 1, 5}, {1, 4, 1}}},
      {"mixed", {{2, 1, 3, 1, 17}, {4, 3, 9, 1}}},
      {"rank_up", {{6}, {2, 3, 6}}},
      {"empty", {{0, 3}, {3}}},
  };
  for (OpId op : {"add"_op, "sub"_op, "mul"_op, "maximum"_op, "minimum"_op}) {
    const std::string n(op_name(op));
    for (const auto& p : patterns) c.push_back(OpCase(n + "/" + p.name, op, p.shapes));
    c.push_back(OpCase(n + "/large", op, {{1 << 18}, {1 << 18}}).only(f32_f16_i32));
    // 513-wide rows: chunk boundaries (fixed element counts) fall mid-row.
    c.push_back(OpCase(n + "/large_row_bias", op, {{300, 513}, {513}}).only(f32_f16_i32));
  }
  c.push_back(OpCase("add/large_chan_bias", "add"_op, {{4, 64, 33, 35}, {64, 1, 1}}).only({DType::f32, DType::bf16}));
  c.push_back(OpCase("add/large_scalar", "add"_op, {{}, {1 << 18}}).only({DType::f32, DType::f64}));
  c.push_back(OpCase("mul/col_bias", "mul"_op, {{130, 1}, {130, 77}}));
  c.push_back(OpCase("maximum/ties", "maximum"_op, {{9, 31}, {31}}).gen(0, Gen::integers(0, 3)).gen(1, Gen::integers(0, 3)));

  // div / mod: integer divisors never zero; negative operands exercise truncation and sign rules.
  for (OpId op : {"div"_op, "mod"_op}) {
    const std::string n(op_name(op));
    std::vector<Attrs> variants{{}};
    if (op == "mod"_op) variants = {Attrs{{"fmod", false}}, Attrs{{"fmod", true}}};
    for (const Attrs& a : variants) {
      const std::string m = n + (a.has("fmod") && a.b("fmod") ? "_fmod" : "");
      auto with = [&](OpCase oc) {
        oc.attrs = a;
        c.push_back(std::move(oc));
      };
      with(OpCase(m + "/float_pos", op, {{7, 33}, {7, 33}}).only(fl).gen(0, Gen::uniform(-5, 5)).gen(1, Gen::positive(0.5, 3)));
      with(OpCase(m + "/float_neg", op, {{1003}, {}}).only(fl).gen(0, Gen::uniform(-5, 5)).gen(1, Gen::uniform(-3, -0.5)));
      with(OpCase(m + "/float_row", op, {{5, 19}, {19}}).only(fl).gen(0, Gen::uniform(-5, 5)).gen(1, Gen::positive(0.5, 3)));
      with(OpCase(m + "/float_large", op, {{1 << 18}, {1 << 18}}).only({DType::f32}).gen(1, Gen::positive(0.5, 3)));
      with(OpCase(m + "/int_pos", op, {{7, 33}, {7, 33}}).only(si).gen(0, Gen::integers(-50, 50)).gen(1, Gen::integers(1, 9)));
      with(OpCase(m + "/int_neg", op, {{3, 1, 5}, {1, 4, 1}}).only(si).gen(0, Gen::integers(-50, 50))
               .gen(1, Gen::integers(-9, -1)));
      with(OpCase(m + "/int_scalar", op, {{1001}, {}}).only(si).gen(0, Gen::integers(-100, 100)).gen(1, Gen::integers(-7, -6)));
      with(OpCase(m + "/int_large", op, {{1 << 18}, {1 << 18}}).only({DType::i32}).gen(0, Gen::integers(-1000, 1000))
               .gen(1, Gen::integers(1, 100)));
      with(OpCase(m + "/u8", op, {{7, 33}, {33}}).only(u8).gen(0, Gen::integers(0, 250)).gen(1, Gen::integers(1, 17)));
    }
  }

  c.push_back(OpCase("pow/same", "pow"_op, {{7, 33}, {7, 33}}).gen(0, Gen::positive(0.5, 2)));
  c.push_back(OpCase("pow/scalar_exp", "pow"_op, {{1001}, {}}).gen(0, Gen::positive(0.5, 2)));
  c.push_back(OpCase("pow/int_exp_neg_base", "pow"_op, {{5, 19}, {19}}).gen(1, Gen::integers(-3, 4)));
  c.push_back(OpCase("pow/chan", "pow"_op, {{2, 3, 5, 7}, {3, 1, 1}}).gen(0, Gen::positive(0.5, 2)));

  // Comparisons on small integers so ties (and eq == true) actually happen.
  for (OpId op : {"eq"_op, "ne"_op, "lt"_op, "le"_op, "gt"_op, "ge"_op}) {
    const std::string n(op_name(op));
    for (const auto& p : patterns)
      c.push_back(OpCase(n + "/" + p.name, op, p.shapes).gen(0, Gen::integers(0, 4)).gen(1, Gen::integers(0, 4)));
    c.push_back(OpCase(n + "/large", op, {{1 << 18}, {1 << 18}}).only({DType::f32, DType::bf16})
                    .gen(0, Gen::integers(0, 4)).gen(1, Gen::integers(0, 4)));
    c.push_back(OpCase(n + "/uniform", op, {{7, 33}, {33}}).only(fl));
  }

  for (OpId op : {"logical_and"_op, "logical_or"_op}) {
    const std::string n(op_name(op));
    for (const auto& p : patterns) c.push_back(OpCase(n + "/" + p.name, op, p.shapes).gen(0, Gen::boolean()).gen(1, Gen::boolean()));
    c.push_back(OpCase(n + "/large", op, {{1 << 18}, {1 << 18}}).gen(0, Gen::boolean()).gen(1, Gen::boolean()));
  }

  const auto where_case = [&](const std::string& n, std::vector<Shape> s) {
    return OpCase("where/" + n, "where"_op, std::move(s)).input_dtype(0, DType::boolean).gen(0, Gen::boolean());
  };
  c.push_back(where_case("same", {{7, 33}, {7, 33}, {7, 33}}));
  c.push_back(where_case("three_way", {{4, 1, 6}, {1, 5, 6}, {4, 5, 1}}));
  c.push_back(where_case("scalar_cond", {{}, {3, 7}, {3, 7}}));
  c.push_back(where_case("scalar_a", {{2, 1001}, {}, {1001}}));
  c.push_back(where_case("scalars", {{}, {}, {}}));
  c.push_back(where_case("row", {{9, 33}, {9, 33}, {33}}));
  c.push_back(where_case("large", {{1 << 18}, {1 << 18}, {1 << 18}}).only({DType::f32, DType::f16, DType::i8, DType::f64}));

  const auto err = [&](std::string n, OpId op, std::vector<Shape> s, std::vector<DType> t, ErrorCode code, Attrs a = {}) {
    e.push_back(ErrorCase{std::move(n), op, std::move(s), std::move(t), std::move(a), code});
  };
  const DType f32 = DType::f32, i32 = DType::i32, b = DType::boolean;
  err("add/not_broadcastable", "add"_op, {{2, 3}, {4}}, {f32, f32}, ErrorCode::shape_mismatch);
  err("mul/not_broadcastable", "mul"_op, {{2, 3, 4}, {3, 3, 4}}, {i32, i32}, ErrorCode::shape_mismatch);
  err("sub/mixed_dtypes", "sub"_op, {{3}, {3}}, {f32, i32}, ErrorCode::dtype_mismatch);
  err("div/mixed_dtypes", "div"_op, {{3}, {}}, {DType::f16, DType::bf16}, ErrorCode::dtype_mismatch);
  err("eq/mixed_dtypes", "eq"_op, {{3}, {3}}, {b, DType::u8}, ErrorCode::dtype_mismatch);
  err("lt/not_broadcastable", "lt"_op, {{5}, {6}}, {f32, f32}, ErrorCode::shape_mismatch);
  err("lt/bool", "lt"_op, {{5}, {5}}, {b, b}, ErrorCode::dtype_mismatch);
  err("pow/integer", "pow"_op, {{3}, {3}}, {i32, i32}, ErrorCode::dtype_mismatch);
  err("add/bool", "add"_op, {{3}, {3}}, {b, b}, ErrorCode::dtype_mismatch);
  err("logical_and/float", "logical_and"_op, {{3}, {3}}, {f32, f32}, ErrorCode::dtype_mismatch);
  err("logical_or/mixed", "logical_or"_op, {{3}, {3}}, {b, f32}, ErrorCode::dtype_mismatch);
  err("mod/mixed_dtypes", "mod"_op, {{3}, {3}}, {i32, DType::i64}, ErrorCode::dtype_mismatch, {{"fmod", true}});
  err("where/float_cond", "where"_op, {{3}, {3}, {3}}, {f32, f32, f32}, ErrorCode::dtype_mismatch);
  err("where/mixed_dtypes", "where"_op, {{3}, {3}, {3}}, {b, f32, i32}, ErrorCode::dtype_mismatch);
  err("where/not_broadcastable", "where"_op, {{4}, {3}, {3}}, {b, f32, f32}, ErrorCode::shape_mismatch);
  err("where/too_few_inputs", "where"_op, {{3}, {3}}, {b, f32}, ErrorCode::invalid_argument);
}

namespace {

// Known values pin the semantics the reference defines (and the cpu kernels must match).
std::vector<double> run_on(Backend be, const std::function<Tensor()>& f) {
  BackendScope scope(be);
  return f().to_doubles();
}

TEST(BinarySemantics, IntegerDivTruncatesAndModFollowsDivisorSign) {
  init();
  const Tensor a = Tensor::from_doubles({7, -7, 7, -7}, {4}, DType::i32);
  const Tensor b = Tensor::from_doubles({3, 3, -3, -3}, {4}, DType::i32);
  for (Backend be : {Backend::reference, Backend::cpu}) {
    EXPECT_EQ(run_on(be, [&] { return ops::div(a, b); }), (std::vector<double>{2, -2, -2, 2}));
    EXPECT_EQ(run_on(be, [&] { return ops::mod(a, b); }), (std::vector<double>{1, 2, -2, -1}));
    EXPECT_EQ(run_on(be, [&] { return ops::mod(a, b, true); }), (std::vector<double>{1, -1, 1, -1}));
    const Tensor af = Tensor::from_doubles({5.5, -5.5, 5.5, -5.5}, {4}, DType::f32);
    const Tensor bf = Tensor::from_doubles({2, 2, -2, -2}, {4}, DType::f32);
    EXPECT_EQ(run_on(be, [&] { return ops::mod(af, bf); }), (std::vector<double>{1.5, 0.5, -0.5, -1.5}));
    EXPECT_EQ(run_on(be, [&] { return ops::mod(af, bf, true); }), (std::vector<double>{1.5, -1.5, 1.5, -1.5}));
  }
}

TEST(BinarySemantics, IntegerDivisionByZeroRaises) {
  init();
  const Tensor a = Tensor::from_doubles({1, 2, 3}, {3}, DType::i64);
  const Tensor b = Tensor::from_doubles({1, 0, 3}, {3}, DType::i64);
  for (Backend be : {Backend::reference, Backend::cpu}) {
    BackendScope scope(be);
    for (bool is_mod : {false, true}) {
      try {
        (void)(is_mod ? ops::mod(a, b) : ops::div(a, b));
        ADD_FAILURE() << "expected a division-by-zero error on " << backend_name(be);
      } catch (const Error& err) {
        EXPECT_EQ(err.code(), ErrorCode::invalid_argument);
        EXPECT_NE(std::string(err.what()).find("division by zero"), std::string::npos) << err.what();
      }
    }
  }
}

TEST(BinarySemantics, IntegerOverflowWrapsAndMinOverMinusOneDoesNotTrap) {
  init();
  const Tensor a = Tensor::from_doubles({100, -128, 250}, {3}, DType::i8);
  const Tensor b = Tensor::from_doubles({100, -1, 10}, {3}, DType::i8);
  for (Backend be : {Backend::reference, Backend::cpu}) {
    EXPECT_EQ(run_on(be, [&] { return ops::add(a, b); })[0], -56);
    EXPECT_EQ(run_on(be, [&] { return ops::div(a, b); })[1], -128);
  }
}

TEST(BinarySemantics, MaximumAndMinimumPropagateNan) {
  init();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    const Tensor a = Tensor::from_doubles({nan, 1, 2, nan, 0, 0, 0, 0, 0, 5}, {10}, t);
    const Tensor b = Tensor::from_doubles({1, nan, 3, nan, 0, 0, 0, 0, 0, -5}, {10}, t);
    for (Backend be : {Backend::reference, Backend::cpu}) {
      const auto mx = run_on(be, [&] { return ops::maximum(a, b); });
      const auto mn = run_on(be, [&] { return ops::minimum(a, b); });
      for (int i : {0, 1, 3}) EXPECT_TRUE(std::isnan(mx[i]) && std::isnan(mn[i])) << dtype_name(t) << " element " << i;
      EXPECT_EQ(mx[2], 3);
      EXPECT_EQ(mn[2], 2);
      EXPECT_EQ(mx[9], 5);
      EXPECT_EQ(mn[9], -5);
    }
  }
}

}  // namespace
}  // namespace spore::conformance
