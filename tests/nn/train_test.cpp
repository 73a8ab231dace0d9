#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/autodiff.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn_util.h"
#include "ops/ops.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

using nn_test::rnd;

struct Mlp : nn::Cell {
  nn::Dense fc1, fc2;
  nn::Tanh act;
  Mlp(int64_t in, int64_t hidden, int64_t out, DType dt) : fc1(in, hidden, true, "", dt), fc2(hidden, out, true, "", dt) {
    SPORE_REGISTER_CELLS(fc1, act, fc2);
  }
  Tensor construct(const Tensor& x) override { return fc2(act(fc1(x))); }
};

TEST(NnTrain, MlpGradientsMatchFiniteDifferences) {
  init();
  nn::set_seed(1);
  Mlp net(5, 7, 3, DType::f64);
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean", 0.1);
  const Tensor x = rnd({6, 5}, 1, DType::f64);
  const Tensor y = Tensor::from_vector<int32_t>({0, 2, 1, 1, 0, 2}, {6});
  auto loss_fn = [&] { return ce(net(x), y); };
  const auto [loss, grads] = nn::value_and_grad(net, loss_fn);
  ASSERT_EQ(grads.size(), 4u);
  EXPECT_NEAR(loss.item(), loss_fn().item(), 1e-15);
  for (auto& [name, p] : net.parameters_and_names()) {
    const Tensor& g = grads.at(name);
    ASSERT_EQ(g.shape(), p->shape()) << name;
    const Tensor orig = *p;
    for (int64_t i = 0; i < p->numel(); ++i) {
      auto at = [&](double delta) {
        Tensor q = orig.clone();
        q.data<double>()[i] += delta;
        *p = q;
        return loss_fn().item();
      };
      const double h = 1e-6, fd = (at(h) - at(-h)) / (2 * h);
      EXPECT_NEAR(g.item_at(i), fd, 1e-7) << name << "[" << i << "]";
    }
    *p = orig;
  }
}

TEST(NnTrain, ValueAndGradRestoresParametersAndSkipsBuffers) {
  init();
  struct Net : nn::Cell {
    nn::Dense fc{4, 3};
    nn::BatchNorm1d bn{3};
    Net() { SPORE_REGISTER_CELLS(fc, bn); }
    Tensor construct(const Tensor& x) override { return bn(fc(x)); }
  } net;
  net.set_train(true);
  const Tensor w = net.fc.weight();
  const Tensor x = rnd({8, 4}, 2);
  const auto r = nn::value_and_grad(net, [&] { return nn::MSELoss()(net(x), ops::zeros({8, 3})); });
  EXPECT_EQ(r.grads.size(), 4u);  // fc.weight, fc.bias, bn.gamma, bn.beta
  EXPECT_TRUE(r.grads.count("bn.gamma"));
  EXPECT_FALSE(r.grads.count("bn.moving_mean"));
  EXPECT_TRUE(net.fc.weight().bit_equal(w));
  EXPECT_FALSE(autodiff::GradientTape::active());
  // Batch statistics moved the running mean away from 0 even under the tape.
  EXPECT_NE(net.bn.moving_mean().to_doubles(), (std::vector<double>{0, 0, 0}));
  // Errors in the loss leave the parameters intact.
  EXPECT_NE(testing::error_of([&] { nn::value_and_grad(net, [&] { return net(rnd({8, 5}, 3)); }); })
                .find("expected input [..., 4]"),
            std::string::npos);
  EXPECT_TRUE(net.fc.weight().bit_equal(w));
}

// Plain SGD in the test: p -= lr * g lowers the loss of a small MLP on a synthetic regression 10x.
TEST(NnTrain, SgdLowersMlpLossTenfold) {
  init();
  nn::set_seed(3);
  Mlp net(2, 16, 2, DType::f32);
  const Tensor x = rnd({64, 2}, 4, DType::f32, -1, 1);
  // Targets: two smooth functions of the inputs.
  const Tensor y = ops::mul(ops::sin(ops::mul(x, 2.0)), 0.5);
  nn::MSELoss mse;
  auto loss_fn = [&] { return mse(net(x), y); };
  const double first = loss_fn().item();
  double last = first;
  for (int step = 0; step < 600; ++step) {
    auto [loss, grads] = nn::value_and_grad(net, loss_fn);
    autodiff::NoGradGuard no_grad;
    for (auto& [name, p] : net.parameters_and_names()) *p = ops::sub(*p, ops::mul(grads.at(name), 0.5));
    last = loss.item();
  }
  last = loss_fn().item();
  EXPECT_LT(last, first / 10) << "first " << first << " last " << last;
}

// A whole forward + backward step traced into one plan gives eager's bits.
TEST(NnTrain, GraphModeValueAndGradMatchesEager) {
  init();
  nn::set_seed(5);
  struct Net : nn::Cell {
    nn::Conv2d conv{2, 3, 3, {.pad_mode = "same"}};
    nn::ReLU relu;
    nn::MaxPool2d pool{2, 2};
    nn::Flatten flatten;
    nn::Dense fc{3 * 3 * 3, 4};
    Net() { SPORE_REGISTER_CELLS(conv, relu, pool, flatten, fc); }
    Tensor construct(const Tensor& x) override { return fc(flatten(pool(relu(conv(x))))); }
  } net;
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
  const std::vector<std::string> names{"conv.weight", "conv.bias", "fc.weight", "fc.bias"};
  auto step = [&](std::span<const Tensor> in) {
    auto r = nn::value_and_grad(net, [&] { return ce(net(in[0]), in[1]); });
    std::vector<Tensor> out{r.loss};
    for (const auto& n : names) out.push_back(r.grads.at(n));
    return out;
  };
  const std::vector<Tensor> ins{rnd({3, 2, 7, 7}, 6), Tensor::from_vector<int64_t>({0, 3, 1}, {3})};
  const auto eager = step(ins);
  CompiledFunction f(step);
  const auto graph = f(std::span<const Tensor>(ins));
  ASSERT_EQ(graph.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(eager[i].bit_equal(graph[i])) << "output " << i;
  EXPECT_EQ(f.cache_size(), 1u);
}

}  // namespace
}  // namespace spore
