// Conformance cases of fused_elementwise: programs over the broadcasting patterns the cpu kernel treats
// differently (full-size inputs read in place, scalars, [C]/[C,1,1] inputs expanded per block, outer
// products), sizes that cross its block (1024) and task (16 blocks) boundaries, every op a program may
// hold, several outputs, and programs the op must reject. f32 runs the fused kernel; the other float
// dtypes run the decomposition, so they check that too.
#include "conformance/harness.h"

namespace spore::conformance {

namespace {

struct I {
  OpId op;
  int a, b = -1;
  double p0 = 0, p1 = 0;
};

Attrs program(const std::vector<I>& instrs, std::vector<int64_t> results) {
  std::vector<int64_t> prog;
  std::vector<double> params;
  for (const I& i : instrs) {
    prog.insert(prog.end(), {static_cast<int64_t>(i.op), i.a, i.b, -1});
    params.insert(params.end(), {i.p0, i.p1});
  }
  return Attrs{{"program", prog}, {"params", params}, {"results", results}};
}

OpCase fused_case(std::string name, std::vector<Shape> shapes, const std::vector<I>& instrs, std::vector<int64_t> results) {
  OpCase c(std::move(name), "fused_elementwise"_op, std::move(shapes));
  c.attrs = program(instrs, std::move(results));
  return c;
}

}  // namespace

void add_fused_elementwise_cases(CaseList& c, ErrorList& e) {
  // x*b + s, then gelu: [N,C] x [C] x scalar.
  const std::vector<I> affine_gelu = {{"mul"_op, 0, 1}, {"add"_op, 3, 2}, {"gelu"_op, 4}};
  c.push_back(fused_case("fused/row_bias_gelu", {{7, 33}, {33}, {}}, affine_gelu, {5}));
  c.push_back(fused_case("fused/row_bias_gelu_long", {{40, 1000}, {1000}, {}}, affine_gelu, {5}).tol(2));
  // Per-channel scale and shift ([C,1,1]) then sigmoid * x (silu by hand), across blocks and tasks.
  const std::vector<I> chan = {{"mul"_op, 0, 1}, {"add"_op, 3, 2}, {"sigmoid"_op, 4}, {"mul"_op, 5, 0}};
  c.push_back(fused_case("fused/chan_affine", {{2, 3, 5, 7}, {3, 1, 1}, {3, 1, 1}}, chan, {6}));
  c.push_back(fused_case("fused/chan_affine_tasks", {{2, 6, 70, 90}, {6, 1, 1}, {6, 1, 1}}, chan, {6}).tol(2));
  // Outer broadcast: neither input is full size.
  c.push_back(fused_case("fused/outer", {{3, 1, 5}, {1, 4, 1}}, {{"sub"_op, 0, 1}, {"tanh"_op, 2}, {"maximum"_op, 3, 1}}, {4}));
  // Intermediates of smaller shape, computed on scalars only, and results of two kinds.
  c.push_back(fused_case("fused/scalar_chain", {{}, {}, {9, 17}},
                         {{"add"_op, 0, 1}, {"exp"_op, 3}, {"div"_op, 2, 4}, {"minimum"_op, 5, 0}}, {6, 5}));
  // Two outputs, one an intermediate, and an input that is also an output.
  c.push_back(fused_case("fused/multi_out", {{4, 300}, {4, 300}},
                         {{"add"_op, 0, 1}, {"relu"_op, 2}, {"neg"_op, 3}, {"abs"_op, 4}}, {5, 2, 1}));
  // Every unary op in one program each (positive inputs for log/sqrt/rsqrt).
  for (OpId op : {"neg"_op, "abs"_op, "exp"_op, "tanh"_op, "sigmoid"_op, "relu"_op, "silu"_op, "erf"_op, "sin"_op, "cos"_op, "floor"_op, "ceil"_op, "round"_op, "sign"_op, "reciprocal"_op}) {
    c.push_back(fused_case(fmt::format("fused/unary_{}", op_name(op)), {{3, 1111}, {1111}}, {{"add"_op, 0, 1}, {op, 2}}, {3}));
  }
  for (OpId op : {"log"_op, "sqrt"_op, "rsqrt"_op}) {
    c.push_back(fused_case(fmt::format("fused/unary_{}", op_name(op)), {{3, 1111}, {1111}}, {{"mul"_op, 0, 1}, {op, 2}}, {3})
                    .gen(0, Gen::positive())
                    .gen(1, Gen::positive()));
  }
  c.push_back(fused_case("fused/leaky_relu", {{5, 19}, {19}}, {{"sub"_op, 0, 1}, {"leaky_relu"_op, 2, -1, 0.2}}, {3}));
  c.push_back(fused_case("fused/clip", {{5, 19}, {19}}, {{"mul"_op, 0, 1}, {"clip"_op, 2, -1, -0.3, 0.7}}, {3}));
  c.push_back(fused_case("fused/gelu_tanh", {{5, 19}, {5, 19}}, {{"add"_op, 0, 1}, {"gelu"_op, 2, -1, 1.0}}, {3}));
  c.push_back(fused_case("fused/empty", {{0, 3}, {3}}, {{"add"_op, 0, 1}, {"relu"_op, 2}}, {3}));

  const auto err = [&](std::string name, std::vector<Shape> shapes, Attrs a, ErrorCode code) {
    e.push_back({std::move(name), "fused_elementwise"_op, shapes, std::vector<DType>(shapes.size(), DType::f32), std::move(a), code});
  };
  err("fused/not_fusable_op", {{3}}, program({{"matmul"_op, 0, 0}}, {1}), ErrorCode::invalid_argument);
  err("fused/slot_ahead", {{3}}, program({{"relu"_op, 1}}, {1}), ErrorCode::invalid_argument);
  err("fused/result_out_of_range", {{3}}, program({{"relu"_op, 0}}, {2}), ErrorCode::invalid_argument);
  err("fused/extra_operand", {{3}}, program({{"relu"_op, 0, 0}}, {1}), ErrorCode::invalid_argument);
  err("fused/shapes", {{3}, {4}}, program({{"add"_op, 0, 1}}, {2}), ErrorCode::shape_mismatch);
  e.push_back({"fused/dtypes", "fused_elementwise"_op, {{3}, {3}}, {DType::f32, DType::f16}, program({{"add"_op, 0, 1}}, {2}),
               ErrorCode::dtype_mismatch});
}

}  // namespace spore::conformance
