// Conformance cases of the elementwise family: every op in every dtype, sizes around the SIMD width
// (1, 7, 33), multi-chunk sizes (> 16K elements), value ranges that reach saturation and large arguments.
#include <string>

#include "conformance/harness.h"

namespace spore::conformance {
void add_elementwise_cases(CaseList& c, ErrorList& e) {
  const int64_t big = (1 << 16) + 3;  // several 16K chunks plus a tail
  const DTypeSet wide{DType::f64, DType::f32};
  struct Unary {
    const char* name;
    OpId op;
    Gen gen;
  };
  const Unary unary[] = {
      {"neg", "neg"_op, Gen::uniform(-4, 4)},
      {"abs", "abs"_op, Gen::uniform(-4, 4)},
      {"exp", "exp"_op, Gen::uniform(-10, 10)},
      {"log", "log"_op, Gen::positive(0.01, 100)},
      {"sqrt", "sqrt"_op, Gen::positive(0, 50)},
      {"rsqrt", "rsqrt"_op, Gen::positive(0.01, 50)},
      {"reciprocal", "reciprocal"_op, Gen::uniform(-3, 3)},
      {"tanh", "tanh"_op, Gen::uniform(-6, 6)},
      {"sigmoid", "sigmoid"_op, Gen::uniform(-12, 12)},
      {"relu", "relu"_op, Gen::uniform(-3, 3)},
      {"silu", "silu"_op, Gen::uniform(-12, 12)},
      {"erf", "erf"_op, Gen::uniform(-4.5, 4.5)},
      {"sin", "sin"_op, Gen::uniform(-10, 10)},
      {"cos", "cos"_op, Gen::uniform(-10, 10)},
      {"asin", "asin"_op, Gen::uniform(-0.99, 0.99)},
      {"acos", "acos"_op, Gen::uniform(-0.99, 0.99)},
      {"atan", "atan"_op, Gen::uniform(-20, 20)},
      {"floor", "floor"_op, Gen::uniform(-6, 6)},
      {"ceil", "ceil"_op, Gen::uniform(-6, 6)},
      {"round", "round"_op, Gen::uniform(-6, 6)},
      {"sign", "sign"_op, Gen::uniform(-3, 3)},
      {"hardsigmoid", "hardsigmoid"_op, Gen::uniform(-5, 5)},
      {"hardswish", "hardswish"_op, Gen::uniform(-6, 6)},
      {"softplus", "softplus"_op, Gen::uniform(-30, 30)},
      {"mish", "mish"_op, Gen::uniform(-12, 12)},
  };
  for (const Unary& u : unary) {
    const std::string n = u.name;
    c.push_back(OpCase(n + "/1", u.op, {{1}}).gen(0, u.gen));
    c.push_back(OpCase(n + "/7", u.op, {{7}}).gen(0, u.gen));
    c.push_back(OpCase(n + "/3x11", u.op, {{3, 11}}).gen(0, u.gen));
    c.push_back(OpCase(n + "/2x3x171", u.op, {{2, 3, 171}}).gen(0, u.gen));
    c.push_back(OpCase(n + "/big", u.op, {{big}}).gen(0, u.gen));
  }
  c.push_back(OpCase("neg/empty", "neg"_op, {{0, 5}}));

  // Wide argument ranges: overflow/underflow of exp, sin/cos beyond Highway's reduced range (libm fallback).
  c.push_back(OpCase("exp/wide", "exp"_op, {{1000}}).gen(0, Gen::uniform(-300, 300)).only(wide));
  c.push_back(OpCase("log/wide", "log"_op, {{1000}}).gen(0, Gen::positive(1e-30, 1e30)).only(wide));
  c.push_back(OpCase("sin/wide", "sin"_op, {{1000}}).gen(0, Gen::uniform(-1e5, 1e5)).only(wide));
  c.push_back(OpCase("cos/wide", "cos"_op, {{1000}}).gen(0, Gen::uniform(-1e5, 1e5)).only(wide));
  // asin/acos outside [-1, 1] are nan; atan far out approaches +-pi/2.
  c.push_back(OpCase("asin/outside", "asin"_op, {{1000}}).gen(0, Gen::uniform(-1.5, 1.5)).only(wide));
  c.push_back(OpCase("acos/outside", "acos"_op, {{1000}}).gen(0, Gen::uniform(-1.5, 1.5)).only(wide));
  c.push_back(OpCase("atan/wide", "atan"_op, {{1000}}).gen(0, Gen::uniform(-1e6, 1e6)).only(wide));
  c.push_back(OpCase("tanh/wide", "tanh"_op, {{1000}}).gen(0, Gen::uniform(-30, 30)));
  c.push_back(OpCase("sigmoid/wide", "sigmoid"_op, {{1000}}).gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("silu/wide", "silu"_op, {{1000}}).gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("gelu/wide_none", "gelu"_op, {{1000}}).gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("gelu/wide_tanh", "gelu"_op, {{1000}}).attr("approximate", "tanh").gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("round/ties", "round"_op, {{1000}}).gen(0, Gen::uniform(-40, 40)));  // f16/bf16 hit x.5
  // softplus and mish far out: e^x overflows (the decomposition uses e^-|x|) and log(1 + tiny) underflows.
  c.push_back(OpCase("softplus/wide", "softplus"_op, {{1000}}).gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("mish/wide", "mish"_op, {{1000}}).gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("softplus/small", "softplus"_op, {{1000}}).gen(0, Gen::uniform(-80, -15)).only(wide));
  c.push_back(OpCase("hardsigmoid/torch", "hardsigmoid"_op, {{3, 33}}).attr("alpha", 1.0 / 6).attr("beta", 0.5)
                  .gen(0, Gen::uniform(-5, 5)));

  for (double alpha : {0.01, 0.2}) {
    const std::string n = "leaky_relu/alpha" + std::to_string(alpha);
    c.push_back(OpCase(n + "/7", "leaky_relu"_op, {{7}}).attr("alpha", alpha));
    c.push_back(OpCase(n + "/big", "leaky_relu"_op, {{big}}).attr("alpha", alpha));
  }
  c.push_back(OpCase("leaky_relu/default", "leaky_relu"_op, {{5, 33}}));
  for (const char* approx : {"none", "tanh"}) {
    const std::string n = std::string("gelu/") + approx;
    c.push_back(OpCase(n + "/1", "gelu"_op, {{1}}).attr("approximate", approx));
    c.push_back(OpCase(n + "/33", "gelu"_op, {{33}}).attr("approximate", approx).gen(0, Gen::uniform(-6, 6)));
    c.push_back(OpCase(n + "/big", "gelu"_op, {{big}}).attr("approximate", approx).gen(0, Gen::uniform(-12, 12)));
  }
  c.push_back(OpCase("gelu/default", "gelu"_op, {{4, 9}}));

  c.push_back(OpCase("clip/7", "clip"_op, {{7}}).attr("min", -1.0).attr("max", 1.5));
  c.push_back(OpCase("clip/3x33", "clip"_op, {{3, 33}}).attr("min", -0.5).attr("max", 0.75));
  c.push_back(OpCase("clip/big", "clip"_op, {{big}}).attr("min", -1.25).attr("max", 1.0));
  c.push_back(OpCase("clip/int_bounds", "clip"_op, {{100}}).attr("min", int64_t{-3}).attr("max", int64_t{5}));
  c.push_back(OpCase("clip/min_gt_max", "clip"_op, {{33}}).attr("min", 1.0).attr("max", -1.0));
  c.push_back(OpCase("clip/inf_bounds", "clip"_op, {{33}}).attr("min", -1e300).attr("max", 1e300));

  c.push_back(OpCase("logical_not/1", "logical_not"_op, {{1}}));
  c.push_back(OpCase("logical_not/7x9", "logical_not"_op, {{7, 9}}));
  c.push_back(OpCase("logical_not/big", "logical_not"_op, {{big}}));

  // cast: every source dtype (the case's dtype) to every target dtype.
  for (int t = 0; t < num_dtypes; ++t) {
    const DType to = static_cast<DType>(t);
    const std::string n = "cast/to_" + std::string(dtype_name(to));
    c.push_back(OpCase(n + "/1", "cast"_op, {{1}}).attr("dtype", to));
    c.push_back(OpCase(n + "/37", "cast"_op, {{37}}).attr("dtype", to).gen(0, Gen::uniform(-50, 50)));
    c.push_back(OpCase(n + "/2100", "cast"_op, {{3, 700}}).attr("dtype", to).gen(0, Gen::uniform(-2, 2)));
  }
  c.push_back(OpCase("cast/big_f32_to_f16", "cast"_op, {{big}}).attr("dtype", DType::f16).only({DType::f32, DType::f64}));
  c.push_back(OpCase("cast/big_to_bf16", "cast"_op, {{big}}).attr("dtype", DType::bf16).gen(0, Gen::uniform(-1e4, 1e4)));
  c.push_back(OpCase("cast/big_to_f32", "cast"_op, {{big}}).attr("dtype", DType::f32));
  // Saturation: out-of-range floats clamp, f16 overflows to inf, i64 -> i8 wraps.
  for (DType to : {DType::i8, DType::u8, DType::i32, DType::i64}) {
    c.push_back(OpCase("cast/saturate_to_" + std::string(dtype_name(to)), "cast"_op, {{500}})
                    .attr("dtype", to).gen(0, Gen::uniform(-5e9, 5e9)).only(dtypes::floating));
  }
  c.push_back(OpCase("cast/huge_to_i64", "cast"_op, {{200}}).attr("dtype", DType::i64)
                  .gen(0, Gen::uniform(-3e19, 3e19)).only(dtypes::floating));
  c.push_back(OpCase("cast/overflow_to_f16", "cast"_op, {{200}}).attr("dtype", DType::f16)
                  .gen(0, Gen::uniform(-1e5, 1e5)).only({DType::f64, DType::f32, DType::bf16, DType::i64, DType::i32}));
  c.push_back(OpCase("cast/wrap_to_i8", "cast"_op, {{200}}).attr("dtype", DType::i8)
                  .gen(0, Gen::integers(-100000, 100000)).only({DType::i64, DType::i32}));

  // ---- errors
  using EC = ErrorCode;
  e.push_back({"log/i32", "log"_op, {{3}}, {DType::i32}, {}, EC::dtype_mismatch});
  e.push_back({"exp/bool", "exp"_op, {{3}}, {DType::boolean}, {}, EC::dtype_mismatch});
  e.push_back({"relu/u8", "relu"_op, {{3}}, {DType::u8}, {}, EC::dtype_mismatch});
  e.push_back({"neg/bool", "neg"_op, {{3}}, {DType::boolean}, {}, EC::dtype_mismatch});
  e.push_back({"clip/bool", "clip"_op, {{3}}, {DType::boolean}, {{"min", 0.0}, {"max", 1.0}}, EC::dtype_mismatch});
  e.push_back({"logical_not/f32", "logical_not"_op, {{3}}, {DType::f32}, {}, EC::dtype_mismatch});
  e.push_back({"gelu/approximate_foo", "gelu"_op, {{3}}, {DType::f32}, {{"approximate", std::string("foo")}},
               EC::invalid_argument});
  e.push_back({"gelu/approximate_int", "gelu"_op, {{3}}, {DType::f32}, {{"approximate", int64_t{1}}}, EC::invalid_argument});
  e.push_back({"leaky_relu/alpha_str", "leaky_relu"_op, {{3}}, {DType::f32}, {{"alpha", std::string("x")}},
               EC::invalid_argument});
  e.push_back({"clip/missing_max", "clip"_op, {{3}}, {DType::f32}, {{"min", 0.0}}, EC::invalid_argument});
  e.push_back({"cast/dtype_as_string", "cast"_op, {{3}}, {DType::f32}, {{"dtype", std::string("f16")}},
               EC::invalid_argument});
  e.push_back({"cast/missing_dtype", "cast"_op, {{3}}, {DType::f32}, {}, EC::invalid_argument});
  e.push_back({"sqrt/two_inputs", "sqrt"_op, {{3}, {3}}, {DType::f32, DType::f32}, {}, EC::invalid_argument});
  e.push_back({"tanh/no_inputs", "tanh"_op, {}, {}, {}, EC::invalid_argument});
  e.push_back({"sin/unknown_attr", "sin"_op, {{3}}, {DType::f32}, {{"axis", int64_t{0}}}, EC::invalid_argument});
}
}  // namespace spore::conformance
