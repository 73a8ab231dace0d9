// Precision modes (passes/precision.h): per-node dtypes follow each op's AmpPolicy and kernel availability, the
// graph's inputs and outputs keep their dtypes, weights are stored in the low dtype, and the converted graph
// computes close to the f32 one (f16: 1e-2, bf16: 3e-2 of the output's max |value|).
#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "base/rng.h"
#include "ir/test_ops.h"
#include "ops/graph_ops.h"
#include "ops/kernel.h"
#include "ops/registry.h"
#include "passes/precision.h"
#include "runtime/plan.h"

namespace spore {
namespace {

Tensor rnd(const Shape& s, uint64_t stream, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * (2.0 * philox_uniform(77, stream, i) - 1.0);
  return Tensor::from_doubles(v, s, DType::f32);
}

// conv (low) -> relu (follow) -> flatten (follow) -> matmul (low) -> add bias (follow) -> layer_norm (keep_f32)
// -> softmax (keep_f32); a second output reduce_sum (keep_f32) of the relu'd activations.
std::unique_ptr<Graph> make_net() {
  auto g = std::make_unique<Graph>("net");
  Value* x = g->add_input(TensorType(DType::f32, {Dim::symbol("batch"), 3, 8, 8}), "x");
  Value* w = g->add_constant(rnd({4, 3, 3, 3}, 1, 0.5), "conv.w");
  Value* b = g->add_constant(rnd({4}, 2, 0.1), "conv.b");
  Value* h = build_node(*g, "conv2d"_op, {x, w, b}, Attrs{{"padding", std::vector<int64_t>{1, 1, 1, 1}}}, "conv")->outputs[0];
  Value* r = build_node(*g, "relu"_op, {h}, {}, "act")->outputs[0];
  Value* f = build_node(*g, "flatten"_op, {r}, Attrs{{"axis", int64_t{1}}}, "flat")->outputs[0];
  Value* bm = g->add_constant(rnd({256, 16}, 3, 0.1), "fc.w");
  Value* m = build_node(*g, "matmul"_op, {f, bm}, {}, "fc")->outputs[0];
  Value* bias = g->add_constant(rnd({16}, 4, 0.1), "fc.b");
  Value* a = build_node(*g, "add"_op, {m, bias}, {}, "fc_bias")->outputs[0];
  Value* lw = g->add_constant(rnd({16}, 5, 1.0), "ln.w");
  Value* lb = g->add_constant(rnd({16}, 6, 0.1), "ln.b");
  Value* ln = build_node(*g, "layer_norm"_op, {a, lw, lb}, {}, "ln")->outputs[0];
  Value* sm = build_node(*g, "softmax"_op, {ln}, Attrs{{"axis", int64_t{-1}}}, "sm")->outputs[0];
  Value* s = build_node(*g, "reduce_sum"_op, {f}, Attrs{{"axes", std::vector<int64_t>{1}}}, "sum")->outputs[0];
  g->set_outputs({sm, s});
  verify_graph(*g);
  return g;
}

Node* find_node(const Graph& g, const std::string& name) {
  for (Node* n : g.nodes())
    if (n->name == name) return n;
  ADD_FAILURE() << "no node '" << name << "'";
  return nullptr;
}

DType compute_dtype_of(const Node* n) {
  std::vector<TensorType> ins, outs;
  for (const Value* v : n->inputs) ins.push_back(v->type);
  for (const Value* v : n->outputs) outs.push_back(v->type);
  return op_registry().get(n->op).dispatch_dtype(ins, outs);
}

bool has_cpu_kernel(OpId op, DType t) { return kernel_registry().find(Backend::cpu, op, t) != nullptr; }

// What the mode should give each named node, derived from the op's traits and kernels (not from its name):
// follow ops take the dtype expected for their first non-constant input.
DType expected_dtype(const Graph& source, const std::string& name, PrecisionMode mode, DType low,
                     std::map<std::string, DType>& memo) {
  if (auto it = memo.find(name); it != memo.end()) return it->second;
  const Node* n = find_node(source, name);
  const OpDef& def = op_registry().get(n->op);
  DType want = DType::f32;
  if (mode == PrecisionMode::allow_fp32_to_fp16 || mode == PrecisionMode::allow_fp32_to_bf16) {
    want = low;
  } else if (mode == PrecisionMode::allow_mix_precision) {
    if (def.amp == AmpPolicy::low) want = low;
    if (def.amp == AmpPolicy::follow)
      for (const Value* v : n->inputs)
        if (v->producer->op != "constant"_op) {
          want = v->producer->op == "input"_op ? DType::f32 : expected_dtype(source, v->producer->name, mode, low, memo);
          break;
        }
  }
  if (is_low_precision(want) && !has_cpu_kernel(n->op, want)) want = DType::f32;
  return memo[name] = want;
}

std::vector<Tensor> run_graph(const Graph& g, const Tensor& x) {
  auto copy = g.clone();
  specialize_inputs(*copy, {x.shape()});
  Plan p = compile_plan(std::move(copy), {});
  return p.run(std::span<const Tensor>(&x, 1));
}

// max |a - b| / max |b| over the tensor.
double rel_error(const Tensor& a, const Tensor& b) {
  const auto x = a.to_doubles(), y = b.to_doubles();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::abs(x[i] - y[i]));
    den = std::max(den, std::abs(y[i]));
  }
  return num / den;
}

int64_t count_op(const Graph& g, OpId op) {
  int64_t c = 0;
  for (const Node* n : g.nodes()) c += n->op == op;
  return c;
}

const char* const node_names[] = {"conv", "act", "flat", "fc", "fc_bias", "ln", "sm", "sum"};

struct ModeCase {
  PrecisionMode mode;
  DType low;
  double tol;  // of the outputs' max |value|
};

class PrecisionModes : public ::testing::TestWithParam<ModeCase> {};

TEST_P(PrecisionModes, DtypesFromTraitsAndOutputsClose) {
  const ModeCase c = GetParam();
  auto source = make_net();
  auto g = source->clone();
  const PrecisionReport rep = apply_precision_mode(*g, c.mode, c.low);
  verify_graph(*g);
  EXPECT_TRUE(test::use_lists_valid(*g));

  std::map<std::string, DType> memo;
  for (const char* name : node_names) {
    const Node* n = find_node(*g, name);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(compute_dtype_of(n), expected_dtype(*source, name, c.mode, c.low, memo))
        << name << " in " << precision_mode_name(c.mode);
    const bool kept = std::any_of(rep.kept_f32.begin(), rep.kept_f32.end(),
                                  [&](const std::string& s) { return s.rfind(n->label(), 0) == 0; });
    EXPECT_EQ(kept, c.mode == PrecisionMode::allow_mix_precision && op_registry().get(n->op).amp == AmpPolicy::keep_f32)
        << name;
  }
  // The boundary keeps its types: a drop-in replacement.
  ASSERT_EQ(g->inputs().size(), 1u);
  EXPECT_EQ(g->inputs()[0]->type, source->inputs()[0]->type);
  for (size_t i = 0; i < g->outputs().size(); ++i) {
    EXPECT_EQ(g->outputs()[i]->type, source->outputs()[i]->type);
    EXPECT_EQ(g->outputs()[i]->name, source->outputs()[i]->name);
  }

  // Weights are stored (not cast at run time) in the dtype their consumer computes in, under their own names.
  for (const Node* n : g->nodes())
    for (const Value* v : n->inputs)
      if (n->op == "cast"_op) {
        EXPECT_NE(v->producer->op, "constant"_op) << "a cast of constant %" << v->name << " was left";
      }
  for (const char* w : {"conv.w", "fc.w"}) {
    const Value* v = g->find_value(w);
    ASSERT_NE(v, nullptr) << w;
    EXPECT_EQ(v->producer->payload.dtype(), compute_dtype_of(v->uses.at(0).user)) << w;
  }
  EXPECT_EQ(rep.casts_inserted, count_op(*g, "cast"_op));
  int64_t before = 0, after = 0;
  for (const auto& [dt, n] : rep.ops_per_dtype_before) before += n;
  for (const auto& [dt, n] : rep.ops_per_dtype_after) after += n;
  EXPECT_EQ(rep.ops_per_dtype_before, (std::map<std::string, int64_t>{{"f32", 8}}));
  EXPECT_EQ(after, before + rep.casts_inserted);

  const Tensor x = rnd({2, 3, 8, 8}, 9);
  const auto ref = run_graph(*source, x);
  const auto got = run_graph(*g, x);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].dtype(), DType::f32);
    const double e = rel_error(got[i], ref[i]);
    EXPECT_LE(e, c.tol) << "output " << i << " in " << precision_mode_name(c.mode);
    if (c.mode != PrecisionMode::force_fp32) {
      EXPECT_GT(e, 0.0) << "output " << i << " did not change at all";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, PrecisionModes,
    ::testing::Values(ModeCase{PrecisionMode::force_fp32, DType::f16, 0.0},
                      ModeCase{PrecisionMode::allow_fp32_to_fp16, DType::f16, 1e-2},
                      ModeCase{PrecisionMode::allow_fp32_to_bf16, DType::bf16, 3e-2},
                      ModeCase{PrecisionMode::allow_mix_precision, DType::f16, 1e-2},
                      ModeCase{PrecisionMode::allow_mix_precision, DType::bf16, 3e-2}),
    [](const auto& info) {
      return precision_mode_name(info.param.mode) + "_" + std::string(dtype_name(info.param.low));
    });

TEST(PrecisionMode, Fp32ToBf16StoresBf16Weights) {
  auto g = make_net();
  apply_precision_mode(*g, PrecisionMode::allow_fp32_to_bf16);
  for (const char* w : {"conv.w", "conv.b", "fc.w", "fc.b", "ln.w", "ln.b"})
    EXPECT_EQ(g->find_value(w)->type.dtype, DType::bf16) << w;
}

TEST(PrecisionMode, ForceFp32TurnsAnF16ModelBackIntoF32) {
  auto source = make_net();
  auto g = source->clone();
  apply_precision_mode(*g, PrecisionMode::allow_fp32_to_fp16);
  ASSERT_GT(count_op(*g, "cast"_op), 0);
  const PrecisionReport rep = apply_precision_mode(*g, PrecisionMode::force_fp32);
  verify_graph(*g);
  EXPECT_EQ(rep.ops_per_dtype_after, (std::map<std::string, int64_t>{{"f32", 8}}));
  EXPECT_GT(rep.ops_per_dtype_before.at("f16"), 0);
  EXPECT_EQ(count_op(*g, "cast"_op), 0);  // the boundary casts are gone, none added
  EXPECT_EQ(rep.casts_inserted, 0);
  EXPECT_EQ(g->outputs()[0]->name, "sm");
  EXPECT_EQ(g->outputs()[1]->name, "sum");
  EXPECT_EQ(g->inputs()[0]->name, "x");
  for (const Node* n : g->nodes())
    if (n->op == "constant"_op) {
      EXPECT_EQ(n->payload.dtype(), DType::f32) << n->outputs[0]->name;
    }
  // The weights went through f16 once: close to the source, not equal.
  const Tensor x = rnd({2, 3, 8, 8}, 10);
  const auto ref = run_graph(*source, x);
  const auto got = run_graph(*g, x);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_LE(rel_error(got[i], ref[i]), 1e-2);
}

TEST(PrecisionMode, ConvertingTwiceChangesNothing) {
  for (PrecisionMode mode : {PrecisionMode::allow_fp32_to_fp16, PrecisionMode::allow_mix_precision}) {
    auto g = make_net();
    apply_precision_mode(*g, mode);
    const std::string once = print_graph(*g);
    apply_precision_mode(*g, mode);
    verify_graph(*g);
    EXPECT_EQ(print_graph(*g), once) << precision_mode_name(mode);
  }
}

TEST(PrecisionMode, OpsWithoutALowKernelStayF32) {
  const auto& t = test::test_ops();  // f32-only ops with AmpPolicy follow
  ASSERT_FALSE(has_cpu_kernel(t.neg, DType::f16));
  auto g = std::make_unique<Graph>("g");
  Value* x = g->add_input(TensorType(DType::f32, {4, 8}), "x");
  Value* w = g->add_constant(rnd({8, 8}, 11), "w");
  Value* m = build_node(*g, "matmul"_op, {x, w}, {}, "mm")->outputs[0];
  Value* n = build_node(*g, t.neg, {m}, {}, "negate")->outputs[0];
  Value* y = build_node(*g, "relu"_op, {n}, {}, "act")->outputs[0];
  g->set_outputs({y});
  for (PrecisionMode mode : {PrecisionMode::allow_fp32_to_fp16, PrecisionMode::allow_mix_precision}) {
    auto c = g->clone();
    const PrecisionReport rep = apply_precision_mode(*c, mode);
    verify_graph(*c);
    EXPECT_EQ(compute_dtype_of(find_node(*c, "mm")), DType::f16);
    EXPECT_EQ(compute_dtype_of(find_node(*c, "negate")), DType::f32);
    // relu has an f16 kernel: in fp16 mode it runs f16; in mix mode it follows the f32 negate.
    EXPECT_EQ(compute_dtype_of(find_node(*c, "act")),
              mode == PrecisionMode::allow_fp32_to_fp16 ? DType::f16 : DType::f32);
    ASSERT_EQ(rep.kept_f32.size(), 1u);
    EXPECT_NE(rep.kept_f32[0].find("negate"), std::string::npos);
    EXPECT_NE(rep.kept_f32[0].find("no cpu kernel for f16"), std::string::npos);
    const Tensor xin = rnd({4, 8}, 12);
    EXPECT_LE(rel_error(run_graph(*c, xin)[0], run_graph(*g, xin)[0]), 1e-2);
  }
}

TEST(PrecisionMode, SharedWeightConvertedOnceAndNonFloatOperandsUntouched) {
  // where(cond, a, b): cond is bool and stays; one constant used by two matmuls becomes one f16 constant.
  auto g = std::make_unique<Graph>("g");
  Value* x = g->add_input(TensorType(DType::f32, {4, 8}), "x");
  Value* w = g->add_constant(rnd({8, 8}, 13), "w");
  Value* m1 = build_node(*g, "matmul"_op, {x, w}, {}, "mm1")->outputs[0];
  Value* m2 = build_node(*g, "matmul"_op, {m1, w}, {}, "mm2")->outputs[0];
  Value* cond = build_node(*g, "gt"_op, {x, g->add_constant(Tensor::scalar(0.0, DType::f32), "zero")}, {}, "pos")->outputs[0];
  Value* y = build_node(*g, "where"_op, {cond, m1, m2}, {}, "pick")->outputs[0];
  g->set_outputs({y, cond});
  auto c = g->clone();
  apply_precision_mode(*c, PrecisionMode::allow_fp32_to_fp16);
  verify_graph(*c);
  EXPECT_EQ(c->find_value("w")->type.dtype, DType::f16);
  EXPECT_EQ(c->find_value("w")->uses.size(), 2u);
  int64_t constants = 0;
  for (const Node* n : c->nodes()) constants += n->op == "constant"_op;
  EXPECT_EQ(constants, 2);  // w and zero: no orphaned f32 copy
  EXPECT_EQ(find_node(*c, "pick")->inputs[0]->type.dtype, DType::boolean);
  EXPECT_EQ(c->outputs()[1]->type.dtype, DType::boolean);
  const Tensor xin = rnd({4, 8}, 14);
  const auto ref = run_graph(*g, xin);
  const auto got = run_graph(*c, xin);
  EXPECT_LE(rel_error(got[0], ref[0]), 1e-2);
  EXPECT_EQ(got[1].to_doubles(), ref[1].to_doubles());
}

TEST(PrecisionMode, FloatOperandsOfInt8OpsKeepTheirDtype) {
  // dequantize_linear dispatches on its i8 operand; its scale must stay f32 even when the cast that made it f32 is
  // removed (the mode decides float ops' dtypes, not operand dtypes of int8 ops).
  auto g = std::make_unique<Graph>("g");
  Value* x = g->add_input(TensorType(DType::f32, {4, 8}), "x");
  std::vector<double> qv(64);
  for (size_t i = 0; i < qv.size(); ++i) qv[i] = static_cast<double>(static_cast<int>(i * 37 % 255) - 127);
  Value* q = g->add_constant(Tensor::from_doubles(qv, {8, 8}, DType::i8), "w_q");
  Value* s16 = g->add_constant(Tensor::from_doubles(std::vector<double>(8, 0.01), {8}, DType::f16), "w_scale16");
  Value* s32 = build_node(*g, "cast"_op, {s16}, Attrs{{"dtype", DType::f32}}, "scale")->outputs[0];
  Value* w = build_node(*g, "dequantize_linear"_op, {q, s32}, Attrs{{"axis", int64_t{1}}}, "dq")->outputs[0];
  Value* y = build_node(*g, "matmul"_op, {x, w}, {}, "mm")->outputs[0];
  g->set_outputs({y});
  verify_graph(*g);
  for (PrecisionMode mode : {PrecisionMode::force_fp32, PrecisionMode::allow_fp32_to_fp16}) {
    auto c = g->clone();
    apply_precision_mode(*c, mode);
    verify_graph(*c);
    const Node* dq = find_node(*c, "dq");
    EXPECT_EQ(dq->inputs[1]->type.dtype, DType::f32);
    EXPECT_EQ(dq->inputs[1]->producer->op, "constant"_op);  // the cast of the constant was folded
    EXPECT_EQ(compute_dtype_of(find_node(*c, "mm")),
              mode == PrecisionMode::force_fp32 ? DType::f32 : DType::f16);
    const Tensor xin = rnd({4, 8}, 15);
    EXPECT_LE(rel_error(run_graph(*c, xin)[0], run_graph(*g, xin)[0]), 1e-2);
  }
}

TEST(PrecisionMode, ParseAndNames) {
  for (PrecisionMode m : {PrecisionMode::force_fp32, PrecisionMode::allow_fp32_to_fp16, PrecisionMode::allow_fp32_to_bf16,
                          PrecisionMode::allow_mix_precision})
    EXPECT_EQ(parse_precision_mode(precision_mode_name(m)), m);
  try {
    parse_precision_mode("fp8");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allow_mix_precision"), std::string::npos) << e.what();
  }
  auto g = make_net();
  EXPECT_THROW(apply_precision_mode(*g, PrecisionMode::allow_mix_precision, DType::f32), Error);
}

}  // namespace
}  // namespace spore
