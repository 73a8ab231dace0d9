// Inference-only passes (passes/inference.cpp): batch_norm folded into conv2d/linear (structure as text IR
// with constant data elided, numerics within 1e-5 of the unfolded graph), the cases that must not fold,
// and dropout removal; none of it happens unless PassOptions::inference is set.
#include <cmath>

#include <gtest/gtest.h>

#include "base/rng.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "passes/pass.h"
#include "runtime/plan.h"

namespace spore {
namespace {

Tensor rnd(const Shape& s, uint64_t stream, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = lo + (hi - lo) * philox_uniform(11, stream, i);
  return Tensor::from_doubles(v, s, DType::f32);
}

// x -> conv2d (or linear) -> batch_norm -> relu, all weights constant.
std::unique_ptr<Graph> conv_bn(bool linear, bool with_bias, bool extra_use = false) {
  auto g = std::make_unique<Graph>("net");
  const int64_t c = 6;
  Value* x = linear ? g->add_input(TensorType(DType::f32, {4, 5}), "x")
                    : g->add_input(TensorType(DType::f32, {2, 3, 7, 7}), "x");
  Value* w = g->add_constant(linear ? rnd({c, 5}, 1) : rnd({c, 3, 3, 3}, 1), "w");
  std::vector<Value*> in = {x, w};
  if (with_bias) in.push_back(g->add_constant(rnd({c}, 2), "b"));
  Attrs a;
  if (!linear) a = Attrs{{"padding", std::vector<int64_t>{1, 1, 1, 1}}};
  Value* y = build_node(*g, linear ? "linear"_op : "conv2d"_op, in, a, "layer")->output(0);
  Value* bn = build_node(*g, "batch_norm"_op,
                         {y, g->add_constant(rnd({c}, 3, 0.5, 2.0), "gamma"), g->add_constant(rnd({c}, 4), "beta"),
                          g->add_constant(rnd({c}, 5), "mean"), g->add_constant(rnd({c}, 6, 0.1, 3.0), "var")},
                         Attrs{{"epsilon", 1e-3}}, "bn")
                  ->output(0);
  Value* out = build_node(*g, "relu"_op, {bn}, {}, "act")->output(0);
  std::vector<Value*> outs = {out};
  if (extra_use) outs.push_back(y);
  g->set_outputs(outs);
  verify_graph(*g);
  return g;
}

void run_inference_passes(Graph& g, bool inference = true) {
  PassManager pm(PassOptions{.verify_each = true, .inference = inference});
  pm.add(make_remove_dropout_pass()).add(make_fold_batch_norm_pass()).add(make_dce_pass());
  pm.run(g);
}

std::string structure(const Graph& g) { return print_graph(g, PrintOptions{.max_constant_bytes = 0}); }

int64_t count_op(const Graph& g, OpId op) {
  int64_t n = 0;
  for (const Node* node : g.nodes()) n += node->op == op;
  return n;
}

double rel_error(const Tensor& a, const Tensor& b) {
  const auto x = a.to_doubles(), y = b.to_doubles();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num = std::max(num, std::abs(x[i] - y[i]));
    den = std::max(den, std::abs(y[i]));
  }
  return den > 0 ? num / den : num;
}

void expect_same_numerics(const Graph& g, const Graph& folded, double tol) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < g.inputs().size(); ++i) in.push_back(rnd(g.inputs()[i]->type.shape(), 100 + i, -2, 2));
  Plan p0 = compile_plan(g.clone(), CompileOptions{.opt_level = 0});
  Plan p1 = compile_plan(folded.clone(), {});
  const auto r0 = p0.run(in), r1 = p1.run(in);
  ASSERT_EQ(r0.size(), r1.size());
  for (size_t i = 0; i < r0.size(); ++i) EXPECT_LT(rel_error(r1[i], r0[i]), tol) << "output " << i;
}

TEST(FoldBatchNorm, ConvWithBias) {
  auto g = conv_bn(false, true);
  auto f = g->clone();
  run_inference_passes(*f);
  EXPECT_EQ(structure(*f),
            "graph @net(%x: f32[2,3,7,7]) {\n"
            "  %w.bn_folded = constant() : f32[6,3,3,3] !name=\"w.bn_folded\" = elided<648 bytes>\n"
            "  %b.bn_folded = constant() : f32[6] !name=\"b.bn_folded\" = elided<24 bytes>\n"
            "  %layer_1 = conv2d(%x, %w.bn_folded, %b.bn_folded) {dilation=[1,1], groups=1, pad_mode=\"pad\", "
            "padding=[1,1,1,1], stride=[1,1]} : f32[2,6,7,7] !name=\"layer\"\n"
            "  %act = relu(%layer_1) : f32[2,6,7,7] !name=\"act\"\n"
            "  return %act\n"
            "}\n");
  expect_same_numerics(*g, *f, 1e-5);
}

TEST(FoldBatchNorm, ConvWithoutBiasAndLinear) {
  for (bool linear : {false, true}) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(fmt::format("linear={} bias={}", linear, bias));
      auto g = conv_bn(linear, bias);
      auto f = g->clone();
      run_inference_passes(*f);
      EXPECT_EQ(count_op(*f, "batch_norm"_op), 0);
      EXPECT_EQ(count_op(*f, linear ? "linear"_op : "conv2d"_op), 1);
      expect_same_numerics(*g, *f, 1e-5);
    }
  }
}

// x -> conv2d/linear (with or without bias) -> add of a per-channel constant (either operand order) -> relu.
std::unique_ptr<Graph> layer_plus_bias(bool linear, bool with_bias, const Shape& c_shape, bool const_first) {
  auto g = std::make_unique<Graph>("net");
  const int64_t c = 6;
  Value* x = linear ? g->add_input(TensorType(DType::f32, {4, 5}), "x")
                    : g->add_input(TensorType(DType::f32, {2, 3, 7, 7}), "x");
  std::vector<Value*> in = {x, g->add_constant(linear ? rnd({c, 5}, 1) : rnd({c, 3, 3, 3}, 1), "w")};
  if (with_bias) in.push_back(g->add_constant(rnd({c}, 2), "b"));
  Value* y = build_node(*g, linear ? "linear"_op : "conv2d"_op, in, {}, "layer")->output(0);
  Value* k = g->add_constant(rnd(c_shape, 3), "k");
  Value* s = build_node(*g, "add"_op, const_first ? std::vector<Value*>{k, y} : std::vector<Value*>{y, k}, {}, "plus")
                 ->output(0);
  g->set_outputs({build_node(*g, "relu"_op, {s}, {}, "act")->output(0)});
  verify_graph(*g);
  return g;
}

TEST(FoldBatchNorm, PerChannelConstantAddBecomesTheBias) {
  struct Case {
    bool linear, bias;
    Shape c;
    bool const_first, folds;
  };
  for (const Case& k : {Case{false, false, {6, 1, 1}, false, true}, Case{false, true, {1, 6, 1, 1}, true, true},
                        Case{true, false, {6}, true, true}, Case{true, true, {1, 6}, false, true},
                        Case{false, false, {6, 5, 5}, false, false}, Case{false, false, {1}, false, false},
                        Case{true, false, {4, 6}, false, false}}) {
    SCOPED_TRACE(fmt::format("linear={} bias={} c={} folds={}", k.linear, k.bias, shape_str(k.c), k.folds));
    auto g = layer_plus_bias(k.linear, k.bias, k.c, k.const_first);
    auto f = g->clone();
    run_inference_passes(*f);
    EXPECT_EQ(count_op(*f, "add"_op), k.folds ? 0 : 1);
    if (k.folds) {
      const Node* layer = f->outputs()[0]->producer->inputs[0]->producer;
      EXPECT_EQ(layer->inputs.size(), 3u);  // x, w, the folded bias
    }
    expect_same_numerics(*g, *f, 1e-6);
  }
}

TEST(FoldBatchNorm, NotWhenTheLayerOutputHasOtherUsesOrNotInference) {
  auto g = conv_bn(false, true, /*extra_use=*/true);
  const std::string before = print_graph(*g);
  run_inference_passes(*g);
  EXPECT_EQ(count_op(*g, "batch_norm"_op), 1);
  auto h = conv_bn(false, true);
  const std::string h_before = print_graph(*h);
  run_inference_passes(*h, /*inference=*/false);
  EXPECT_EQ(print_graph(*h), h_before);
}

TEST(FoldBatchNorm, GraphOutputKeepsItsName) {
  auto g = parse_graph(
      "graph @g(%x: f32[2,2]) {\n"
      "  %w = constant() : f32[2,2] = hex\"0000803f000000000000000000000040\"\n"
      "  %s = constant() : f32[2] = hex\"0000803f00000040\"\n"
      "  %z = constant() : f32[2] = hex\"0000000000000000\"\n"
      "  %v = constant() : f32[2] = hex\"0000803f0000803f\"\n"
      "  %y = linear(%x, %w) : f32[2,2]\n"
      "  %out = batch_norm(%y, %s, %z, %z, %v) {epsilon=0.0} : f32[2,2]\n"
      "  return %out\n"
      "}\n");
  run_inference_passes(*g);
  // scale / sqrt(var) = (1, 2): w rows scaled to (1,0) and (0,4); bias 0.
  EXPECT_EQ(print_graph(*g),
            "graph @g(%x: f32[2,2]) {\n"
            "  %w.bn_folded = constant() : f32[2,2] !name=\"w.bn_folded\" = hex\"0000803f000000000000000000008040\"\n"
            "  %z.bn_folded = constant() : f32[2] !name=\"z.bn_folded\" = hex\"0000000000000000\"\n"
            "  %out = linear(%x, %w.bn_folded, %z.bn_folded) : f32[2,2]\n"
            "  return %out\n"
            "}\n");
}

TEST(RemoveDropout, OnlyForInference) {
  const std::string text =
      "graph @g(%x: f32[4], %step: i64[]) {\n"
      "  %a = dropout(%x, %step) {p=0.5, seed=1, training=true} : f32[4]\n"
      "  %b = dropout(%a) {p=0.25, training=true} : f32[4]\n"
      "  %c = relu(%b) : f32[4]\n"
      "  return %c\n"
      "}\n";
  auto g = parse_graph(text);
  run_inference_passes(*g, false);
  EXPECT_EQ(print_graph(*g), text);
  run_inference_passes(*g, true);
  EXPECT_EQ(print_graph(*g),
            "graph @g(%x: f32[4], %step: i64[]) {\n"
            "  %c = relu(%x) : f32[4]\n"
            "  return %c\n"
            "}\n");
}

}  // namespace
}  // namespace spore
