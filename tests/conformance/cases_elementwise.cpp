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
      {"neg", OpId::neg, Gen::uniform(-4, 4)},           {"abs", OpId::abs, Gen::uniform(-4, 4)},
      {"exp", OpId::exp, Gen::uniform(-10, 10)},         {"log", OpId::log, Gen::positive(0.01, 100)},
      {"sqrt", OpId::sqrt, Gen::positive(0, 50)},        {"rsqrt", OpId::rsqrt, Gen::positive(0.01, 50)},
      {"reciprocal", OpId::reciprocal, Gen::uniform(-3, 3)}, {"tanh", OpId::tanh, Gen::uniform(-6, 6)},
      {"sigmoid", OpId::sigmoid, Gen::uniform(-12, 12)}, {"relu", OpId::relu, Gen::uniform(-3, 3)},
      {"silu", OpId::silu, Gen::uniform(-12, 12)},       {"erf", OpId::erf, Gen::uniform(-4.5, 4.5)},
      {"sin", OpId::sin, Gen::uniform(-10, 10)},         {"cos", OpId::cos, Gen::uniform(-10, 10)},
      {"floor", OpId::floor, Gen::uniform(-6, 6)},       {"ceil", OpId::ceil, Gen::uniform(-6, 6)},
      {"round", OpId::round, Gen::uniform(-6, 6)},       {"sign", OpId::sign, Gen::uniform(-3, 3)},
      {"hardsigmoid", OpId::hardsigmoid, Gen::uniform(-5, 5)}, {"hardswish", OpId::hardswish, Gen::uniform(-6, 6)},
      {"softplus", OpId::softplus, Gen::uniform(-30, 30)}, {"mish", OpId::mish, Gen::uniform(-12, 12)},
  };
  for (const Unary& u : unary) {
    const std::string n = u.name;
    c.push_back(OpCase(n + "/1", u.op, {{1}}).gen(0, u.gen));
    c.push_back(OpCase(n + "/7", u.op, {{7}}).gen(0, u.gen));
    c.push_back(OpCase(n + "/3x11", u.op, {{3, 11}}).gen(0, u.gen));
    c.push_back(OpCase(n + "/2x3x171", u.op, {{2, 3, 171}}).gen(0, u.gen));
    c.push_back(OpCase(n + "/big", u.op, {{big}}).gen(0, u.gen));
  }
  c.push_back(OpCase("neg/empty", OpId::neg, {{0, 5}}));

  // Wide argument ranges: overflow/underflow of exp, sin/cos beyond Highway's reduced range (libm fallback).
  c.push_back(OpCase("exp/wide", OpId::exp, {{1000}}).gen(0, Gen::uniform(-300, 300)).only(wide));
  c.push_back(OpCase("log/wide", OpId::log, {{1000}}).gen(0, Gen::positive(1e-30, 1e30)).only(wide));
  c.push_back(OpCase("sin/wide", OpId::sin, {{1000}}).gen(0, Gen::uniform(-1e5, 1e5)).only(wide));
  c.push_back(OpCase("cos/wide", OpId::cos, {{1000}}).gen(0, Gen::uniform(-1e5, 1e5)).only(wide));
  c.push_back(OpCase("tanh/wide", OpId::tanh, {{1000}}).gen(0, Gen::uniform(-30, 30)));
  c.push_back(OpCase("sigmoid/wide", OpId::sigmoid, {{1000}}).gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("silu/wide", OpId::silu, {{1000}}).gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("gelu/wide_none", OpId::gelu, {{1000}}).gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("gelu/wide_tanh", OpId::gelu, {{1000}}).attr("approximate", "tanh").gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("round/ties", OpId::round, {{1000}}).gen(0, Gen::uniform(-40, 40)));  // f16/bf16 hit x.5
  // softplus and mish far out: e^x overflows (the decomposition uses e^-|x|) and log(1 + tiny) underflows.
  c.push_back(OpCase("softplus/wide", OpId::softplus, {{1000}}).gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("mish/wide", OpId::mish, {{1000}}).gen(0, Gen::uniform(-300, 300)));
  c.push_back(OpCase("softplus/small", OpId::softplus, {{1000}}).gen(0, Gen::uniform(-80, -15)).only(wide));
  c.push_back(OpCase("hardsigmoid/torch", OpId::hardsigmoid, {{3, 33}}).attr("alpha", 1.0 / 6).attr("beta", 0.5)
                  .gen(0, Gen::uniform(-5, 5)));

  for (double alpha : {0.01, 0.2}) {
    const std::string n = "leaky_relu/alpha" + std::to_string(alpha);
    c.push_back(OpCase(n + "/7", OpId::leaky_relu, {{7}}).attr("alpha", alpha));
    c.push_back(OpCase(n + "/big", OpId::leaky_relu, {{big}}).attr("alpha", alpha));
  }
  c.push_back(OpCase("leaky_relu/default", OpId::leaky_relu, {{5, 33}}));
  for (const char* approx : {"none", "tanh"}) {
    const std::string n = std::string("gelu/") + approx;
    c.push_back(OpCase(n + "/1", OpId::gelu, {{1}}).attr("approximate", approx));
    c.push_back(OpCase(n + "/33", OpId::gelu, {{33}}).attr("approximate", approx).gen(0, Gen::uniform(-6, 6)));
    c.push_back(OpCase(n + "/big", OpId::gelu, {{big}}).attr("approximate", approx).gen(0, Gen::uniform(-12, 12)));
  }
  c.push_back(OpCase("gelu/default", OpId::gelu, {{4, 9}}));

  c.push_back(OpCase("clip/7", OpId::clip, {{7}}).attr("min", -1.0).attr("max", 1.5));
  c.push_back(OpCase("clip/3x33", OpId::clip, {{3, 33}}).attr("min", -0.5).attr("max", 0.75));
  c.push_back(OpCase("clip/big", OpId::clip, {{big}}).attr("min", -1.25).attr("max", 1.0));
  c.push_back(OpCase("clip/int_bounds", OpId::clip, {{100}}).attr("min", int64_t{-3}).attr("max", int64_t{5}));
  c.push_back(OpCase("clip/min_gt_max", OpId::clip, {{33}}).attr("min", 1.0).attr("max", -1.0));
  c.push_back(OpCase("clip/inf_bounds", OpId::clip, {{33}}).attr("min", -1e300).attr("max", 1e300));

  c.push_back(OpCase("logical_not/1", OpId::logical_not, {{1}}));
  c.push_back(OpCase("logical_not/7x9", OpId::logical_not, {{7, 9}}));
  c.push_back(OpCase("logical_not/big", OpId::logical_not, {{big}}));

  // cast: every source dtype (the case's dtype) to every target dtype.
  for (int t = 0; t < num_dtypes; ++t) {
    const DType to = static_cast<DType>(t);
    const std::string n = "cast/to_" + std::string(dtype_name(to));
    c.push_back(OpCase(n + "/1", OpId::cast, {{1}}).attr("dtype", to));
    c.push_back(OpCase(n + "/37", OpId::cast, {{37}}).attr("dtype", to).gen(0, Gen::uniform(-50, 50)));
    c.push_back(OpCase(n + "/2100", OpId::cast, {{3, 700}}).attr("dtype", to).gen(0, Gen::uniform(-2, 2)));
  }
  c.push_back(OpCase("cast/big_f32_to_f16", OpId::cast, {{big}}).attr("dtype", DType::f16).only({DType::f32, DType::f64}));
  c.push_back(OpCase("cast/big_to_bf16", OpId::cast, {{big}}).attr("dtype", DType::bf16).gen(0, Gen::uniform(-1e4, 1e4)));
  c.push_back(OpCase("cast/big_to_f32", OpId::cast, {{big}}).attr("dtype", DType::f32));
  // Saturation: out-of-range floats clamp, f16 overflows to inf, i64 -> i8 wraps.
  for (DType to : {DType::i8, DType::u8, DType::i32, DType::i64}) {
    c.push_back(OpCase("cast/saturate_to_" + std::string(dtype_name(to)), OpId::cast, {{500}})
                    .attr("dtype", to).gen(0, Gen::uniform(-5e9, 5e9)).only(dtypes::floating));
  }
  c.push_back(OpCase("cast/huge_to_i64", OpId::cast, {{200}}).attr("dtype", DType::i64)
                  .gen(0, Gen::uniform(-3e19, 3e19)).only(dtypes::floating));
  c.push_back(OpCase("cast/overflow_to_f16", OpId::cast, {{200}}).attr("dtype", DType::f16)
                  .gen(0, Gen::uniform(-1e5, 1e5)).only({DType::f64, DType::f32, DType::bf16, DType::i64, DType::i32}));
  c.push_back(OpCase("cast/wrap_to_i8", OpId::cast, {{200}}).attr("dtype", DType::i8)
                  .gen(0, Gen::integers(-100000, 100000)).only({DType::i64, DType::i32}));

  // ---- errors
  using EC = ErrorCode;
  e.push_back({"log/i32", OpId::log, {{3}}, {DType::i32}, {}, EC::dtype_mismatch});
  e.push_back({"exp/bool", OpId::exp, {{3}}, {DType::boolean}, {}, EC::dtype_mismatch});
  e.push_back({"relu/u8", OpId::relu, {{3}}, {DType::u8}, {}, EC::dtype_mismatch});
  e.push_back({"neg/bool", OpId::neg, {{3}}, {DType::boolean}, {}, EC::dtype_mismatch});
  e.push_back({"clip/bool", OpId::clip, {{3}}, {DType::boolean}, {{"min", 0.0}, {"max", 1.0}}, EC::dtype_mismatch});
  e.push_back({"logical_not/f32", OpId::logical_not, {{3}}, {DType::f32}, {}, EC::dtype_mismatch});
  e.push_back({"gelu/approximate_foo", OpId::gelu, {{3}}, {DType::f32}, {{"approximate", std::string("foo")}},
               EC::invalid_argument});
  e.push_back({"gelu/approximate_int", OpId::gelu, {{3}}, {DType::f32}, {{"approximate", int64_t{1}}}, EC::invalid_argument});
  e.push_back({"leaky_relu/alpha_str", OpId::leaky_relu, {{3}}, {DType::f32}, {{"alpha", std::string("x")}},
               EC::invalid_argument});
  e.push_back({"clip/missing_max", OpId::clip, {{3}}, {DType::f32}, {{"min", 0.0}}, EC::invalid_argument});
  e.push_back({"cast/dtype_as_string", OpId::cast, {{3}}, {DType::f32}, {{"dtype", std::string("f16")}},
               EC::invalid_argument});
  e.push_back({"cast/missing_dtype", OpId::cast, {{3}}, {DType::f32}, {}, EC::invalid_argument});
  e.push_back({"sqrt/two_inputs", OpId::sqrt, {{3}, {3}}, {DType::f32, DType::f32}, {}, EC::invalid_argument});
  e.push_back({"tanh/no_inputs", OpId::tanh, {}, {}, {}, EC::invalid_argument});
  e.push_back({"sin/unknown_attr", OpId::sin, {{3}}, {DType::f32}, {{"axis", int64_t{0}}}, EC::invalid_argument});
}
}  // namespace spore::conformance
