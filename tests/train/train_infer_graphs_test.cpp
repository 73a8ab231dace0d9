// "Train with one graph, infer with a fused one": graph mode's train step is a training graph (batch_norm with
// batch statistics, dropout), its eval/predict plan an inference graph (batch_norm folded into the conv, dropout
// removed), whose predictions match PyNative eval within f32 tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "autodiff/autodiff.h"
#include "base/rng.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"
#include "train/model.h"

namespace spore {
namespace {

struct ConvBnDropNet : nn::Cell {
  nn::Conv2d conv{1, 4, 3, {.padding = 1}};
  nn::BatchNorm2d bn{4};
  nn::ReLU relu;
  nn::Flatten flat;
  nn::Dropout drop{0.3};
  nn::Dense fc{4 * 64, 4};
  ConvBnDropNet() { SPORE_REGISTER_CELLS(conv, bn, relu, flat, drop, fc); }
  Tensor construct(const Tensor& x) override { return fc(drop(flat(relu(bn(conv(x)))))); }
};

struct Rig {
  std::unique_ptr<ConvBnDropNet> net;
  nn::SoftmaxCrossEntropyWithLogits ce{true, "mean"};
  std::unique_ptr<train::Optimizer> opt;
  std::unique_ptr<train::Model> model;
  explicit Rig(const std::string& mode) {
    nn::set_seed(11);
    net = std::make_unique<ConvBnDropNet>();
    opt = train::make_optimizer("momentum", train::trainable_names(*net), 0.05);
    model = std::make_unique<train::Model>(*net, train::loss_of(ce), *opt, std::vector<std::string>{"accuracy"},
                                           train::ModelOptions{.mode = mode});
  }
};

Tensor images(int64_t n, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(n * 64));
  for (size_t i = 0; i < v.size(); ++i) v[i] = philox_uniform(seed, 3, i) * 2.0 - 1.0;
  return Tensor::from_doubles(v, {n, 1, 8, 8}, DType::f32);
}
Tensor labels(int64_t n, uint64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(philox_uniform(seed, 4, i) * 4) % 4;
  return Tensor::from_vector<int64_t>(v, {n});
}

int count_ops(const Graph& g, OpId op) {
  int n = 0;
  for (const Node* node : g.nodes()) n += node->op == op;
  return n;
}

// BatchNorm in training mode: batch_norm, or (as the cpu lowering writes it) a reduce_mean of the conv's output.
int batch_statistics(const Graph& g) {
  int n = count_ops(g, "batch_norm"_op);
  for (const Node* node : g.nodes())
    n += node->op == "reduce_mean"_op && node->inputs[0]->producer->op == "conv2d"_op;
  return n;
}

// Eager eval-mode forward: what PyNative's predict computes.
Tensor eager_eval(nn::Cell& net, const Tensor& x) {
  autodiff::NoGradGuard no_grad;
  net.set_train(false);
  Tensor y = net(x);
  net.set_train(true);
  return y;
}

void expect_close(const Tensor& a, const Tensor& b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  const std::vector<double> va = a.to_doubles(), vb = b.to_doubles();
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]) / (1.0 + std::abs(vb[i])));
  EXPECT_LE(worst, tol);
}

TEST(TrainInferGraphs, TrainStepKeepsBatchNormAndEvalPlanIsFoldedAndFused) {
  init();
  Rig s("graph");
  const Tensor x = images(16, 1), y = labels(16, 1);
  for (int i = 0; i < 3; ++i) s.model->train_step(x, y);
  const Tensor x_test = images(8, 2);
  const Tensor pred = s.model->predict(x_test);

  const Plan* step = s.model->compiled_plan("step");
  const Plan* eval = s.model->compiled_plan("eval");
  ASSERT_NE(step, nullptr);
  ASSERT_NE(eval, nullptr);
  // The training graph: batch statistics and a dropout mask, as in PyNative.
  EXPECT_GE(batch_statistics(step->graph()), 1) << print_graph(step->graph());
  EXPECT_GE(count_ops(step->graph(), "dropout"_op), 1) << print_graph(step->graph());
  // The inference graph: no batch_norm (folded into the conv's weights), no dropout.
  EXPECT_EQ(batch_statistics(eval->graph()), 0) << print_graph(eval->graph());
  EXPECT_EQ(count_ops(eval->graph(), "batch_norm"_op), 0) << print_graph(eval->graph());
  EXPECT_EQ(count_ops(eval->graph(), "dropout"_op), 0) << print_graph(eval->graph());

  // Fewer kernels than the same eval forward compiled as a plain (non-inference) graph.
  s.net->set_train(false);
  CompiledFunction plain([&](std::span<const Tensor> in) { return std::vector<Tensor>{(*s.net)(in[0])}; },
                         CompileOptions{});
  const Tensor plain_pred = plain({x_test})[0];
  s.net->set_train(true);
  EXPECT_GE(count_ops(plain.last_plan()->graph(), "batch_norm"_op), 1);
  std::printf("eval forward (conv+bn+relu+dropout+dense): %lld kernels as an inference graph, %lld plain\n",
              static_cast<long long>(eval->num_kernels()), static_cast<long long>(plain.last_plan()->num_kernels()));
  EXPECT_LT(eval->num_kernels(), plain.last_plan()->num_kernels())
      << "inference:\n" << eval->describe() << "plain:\n" << plain.last_plan()->describe();

  // Predictions match PyNative eval within f32 tolerance (folding batch_norm changes rounding).
  const Tensor eager = eager_eval(*s.net, x_test);
  expect_close(pred, eager, 1e-5);
  expect_close(plain_pred, eager, 1e-5);
}

TEST(TrainInferGraphs, EvalPlanFollowsTheWeightsAndTrainingStaysBitIdenticalToPyNative) {
  init();
  Rig g("graph"), p("pynative");
  const Tensor x_test = images(8, 5);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = images(16, 10 + step), y = labels(16, 10 + step);
    EXPECT_EQ(g.model->train_step(x, y), p.model->train_step(x, y)) << "step " << step;
    // After each step the eval plan is rebuilt on the new weights and running stats.
    const Tensor pred = g.model->predict(x_test);
    expect_close(pred, eager_eval(*g.net, x_test), 1e-5);
    expect_close(pred, p.model->predict(x_test), 1e-5);
  }
  // The weights went through the training graph: the same bits in both modes.
  const auto pg = g.net->parameters_and_names(), pp = p.net->parameters_and_names();
  ASSERT_EQ(pg.size(), pp.size());
  for (size_t i = 0; i < pg.size(); ++i) EXPECT_TRUE(pg[i].second->bit_equal(*pp[i].second)) << pg[i].first;
  // Predicting twice without a step in between replays the same plan.
  const Plan* before = g.model->compiled_plan("eval");
  g.model->predict(x_test);
  EXPECT_EQ(g.model->compiled_plan("eval"), before);
  EXPECT_THROW(g.model->compiled_plan("nonsense"), Error);
}

}  // namespace
}  // namespace spore
