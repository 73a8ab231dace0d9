#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "nn/cell.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn_util.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

using nn_test::rnd;

struct SimpleNet : nn::Cell {
  nn::Conv2d conv1{1, 4, 3, {.pad_mode = "same"}};
  nn::ReLU relu;
  nn::MaxPool2d pool{2, 2};
  nn::Flatten flatten;
  nn::Dense fc{4 * 4 * 4, 10};
  SimpleNet() { SPORE_REGISTER_CELLS(conv1, relu, pool, flatten, fc); }
  Tensor construct(const Tensor& x) override { return fc(flatten(pool(relu(conv1(x))))); }
};

std::vector<std::string> names_of(nn::Cell& c) {
  std::vector<std::string> out;
  for (auto& [n, p] : c.parameters_and_names()) out.push_back(n);
  return out;
}

TEST(NnCell, ParameterNamesAreDottedAndInRegistrationOrder) {
  init();
  SimpleNet net;
  EXPECT_EQ(names_of(net), (std::vector<std::string>{"conv1.weight", "conv1.bias", "fc.weight", "fc.bias"}));
  EXPECT_EQ(net.num_parameters(), 4 * 9 + 4 + 64 * 10 + 10);
  EXPECT_EQ(net.parameter("fc.weight"), &net.fc.weight());
  EXPECT_EQ(net.parameter("fc.nope"), nullptr);
  const Tensor y = net(rnd({2, 1, 8, 8}, 1));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
}

TEST(NnCell, PositionalAndExplicitNamesAndBuffers) {
  init();
  struct Net : nn::Cell {
    nn::Dense a{3, 4}, b{4, 2, false};
    nn::BatchNorm1d bn{2};
    Net() {
      register_cells(a, b);
      register_cell("norm", bn);
      register_parameter("scale", Tensor::from_doubles({2}, {}, DType::f32));
    }
    Tensor construct(const Tensor& x) override { return ops::mul(bn(b(a(x))), *parameter("scale")); }
  } net;
  EXPECT_EQ(names_of(net), (std::vector<std::string>{"scale", "0.weight", "0.bias", "1.weight", "norm.gamma",
                                                     "norm.beta", "norm.moving_mean", "norm.moving_variance"}));
  // Buffers (BatchNorm running stats) are parameters but not trainable.
  EXPECT_EQ(net.trainable_params().size(), 6u);
  EXPECT_EQ(net.num_parameters(), 1 + 12 + 4 + 8 + 2 * 4);
  EXPECT_EQ(net.num_parameters(true), 1 + 12 + 4 + 8 + 2 * 2);
  EXPECT_NE(testing::error_of([&] { net.register_parameter("scale", Tensor::zeros({1}, DType::f32)); })
                .find("already registered"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { net.register_cell("norm", net.a); }).find("already registered"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { net.register_parameter("a.b", Tensor::zeros({1}, DType::f32)); }).find("invalid"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { net.register_parameter("ids", Tensor::zeros({1}, DType::i32)); }).find("floating"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { net.a(rnd({2, 5}, 1)); }).find("expected input [..., 3]"), std::string::npos);
}

TEST(NnCell, SharedCellIsListedOnce) {
  init();
  struct Net : nn::Cell {
    nn::Dense shared{2, 2};
    nn::SequentialCell seq;
    Net() {
      register_cell("shared", shared);
      register_cell("seq", seq);
    }
    Tensor construct(const Tensor& x) override { return shared(shared(x)); }
  } net;
  net.register_cell("again", net.shared);
  EXPECT_EQ(names_of(net), (std::vector<std::string>{"shared.weight", "shared.bias"}));
}

TEST(NnCell, TrainFlagPropagatesToSubCells) {
  init();
  struct Inner : nn::Cell {
    nn::Dropout drop{0.5};
    Inner() { SPORE_REGISTER_CELLS(drop); }
  };
  struct Outer : nn::Cell {
    Inner inner;
    nn::Dense fc{2, 2};
    Outer() { SPORE_REGISTER_CELLS(inner, fc); }
  } net;
  EXPECT_FALSE(net.training());
  net.set_train(true);
  EXPECT_TRUE(net.inner.drop.training());
  EXPECT_TRUE(net.fc.training());
  net.set_train(false);
  EXPECT_FALSE(net.inner.drop.training());
  EXPECT_FALSE(net.inner.training());
}

TEST(NnCell, ToDtypeConvertsInPlaceKeepingHandles) {
  init();
  nn::SequentialCell seq(std::make_unique<nn::Dense>(3, 4), std::make_unique<nn::BatchNorm1d>(4));
  auto before = seq.parameters_and_names();
  std::vector<std::vector<double>> values;
  for (auto& [n, p] : before) values.push_back(p->to_doubles());
  seq.to(DType::f64);
  auto after = seq.parameters_and_names();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(before[i].second, after[i].second) << after[i].first;
    EXPECT_EQ(after[i].second->dtype(), DType::f64);
    EXPECT_EQ(after[i].second->to_doubles(), values[i]) << after[i].first;  // f32 -> f64 is exact
  }
  EXPECT_EQ(seq(rnd({5, 3}, 2, DType::f64)).dtype(), DType::f64);
  seq.to(DType::bf16);
  EXPECT_EQ(seq[0].parameters_and_names()[0].second->dtype(), DType::bf16);
  EXPECT_NE(testing::error_of([&] { seq.to(DType::i32); }).find("floating"), std::string::npos);
}

TEST(NnCell, CellWithoutConstructAndWrongArity) {
  init();
  nn::CellList list;
  list.append(std::make_unique<nn::ReLU>());
  list.append(std::make_unique<nn::Dense>(2, 3));
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(names_of(list), (std::vector<std::string>{"1.weight", "1.bias"}));
  const Tensor x = rnd({2}, 3);
  EXPECT_NE(testing::error_of([&] { list(x); }).find("does not define construct"), std::string::npos);
  nn::ReLU relu;
  EXPECT_NE(testing::error_of([&] { relu(x, x); }).find("takes 1 input, got 2"), std::string::npos);
}

// ---- initializers
TEST(NnInit, SeededAndDeterministic) {
  init();
  nn::set_seed(7);
  SimpleNet a;
  nn::set_seed(7);
  SimpleNet b;
  nn::set_seed(8);
  SimpleNet c;
  auto pa = a.parameters_and_names(), pb = b.parameters_and_names(), pc = c.parameters_and_names();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(pa[i].second->bit_equal(*pb[i].second)) << pa[i].first;
    EXPECT_FALSE(pa[i].second->bit_equal(*pc[i].second)) << pa[i].first;
  }
  // Parameters of one net use different streams.
  const Tensor u1 = nn::init::uniform({16}, 0, 1, DType::f32, {1, 0});
  const Tensor u2 = nn::init::uniform({16}, 0, 1, DType::f32, {1, 1});
  EXPECT_FALSE(u1.bit_equal(u2));
  EXPECT_TRUE(u1.bit_equal(nn::init::uniform({16}, 0, 1, DType::f32, {1, 0})));
}

void expect_stats(const Tensor& t, double mean, double std, double lo, double hi) {
  const auto v = t.to_doubles();
  const double n = static_cast<double>(v.size());
  const double m = std::accumulate(v.begin(), v.end(), 0.0) / n;
  double var = 0;
  for (double x : v) {
    var += (x - m) * (x - m);
    ASSERT_GE(x, lo);
    ASSERT_LE(x, hi);
  }
  const double s = std::sqrt(var / n);
  EXPECT_NEAR(m, mean, 0.02 * std + 1e-12);
  EXPECT_NEAR(s, std, 0.02 * std + 1e-12);
}

TEST(NnInit, Statistics) {
  init();
  const Shape big{256, 64, 3, 3};  // fan_in 576, fan_out 2304
  const double fi = 576, fo = 2304;
  expect_stats(nn::init::normal({200000}, 0.5, 2.0), 0.5, 2.0, -20, 20);
  expect_stats(nn::init::uniform({200000}, -3, 1), -1, 4 / std::sqrt(12.0), -3, 1);
  const double xb = std::sqrt(6 / (fi + fo));
  expect_stats(nn::init::xavier_uniform(big), 0, xb / std::sqrt(3.0), -xb, xb);
  expect_stats(nn::init::xavier_normal(big, 2.0), 0, 2 * std::sqrt(2 / (fi + fo)), -1, 1);
  const double kb = std::sqrt(2.0) * std::sqrt(3 / fi);
  expect_stats(nn::init::kaiming_uniform(big, 0, "fan_in", "relu"), 0, kb / std::sqrt(3.0), -kb, kb);
  expect_stats(nn::init::kaiming_normal(big, 0, "fan_out", "relu"), 0, std::sqrt(2 / fo), -1, 1);
  EXPECT_EQ(nn::init::zeros({3}).to_doubles(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(nn::init::ones({2}, DType::bf16).to_doubles(), (std::vector<double>{1, 1}));
  EXPECT_EQ(nn::fan_in_out({10, 20}), (std::pair<int64_t, int64_t>{20, 10}));
  EXPECT_NE(testing::error_of([] { nn::init::normal({2}, 0, 1, DType::i32); }).find("floating"), std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::init::kaiming_uniform({2, 2}, 0, "fan_x"); }).find("fan_x"),
            std::string::npos);
}

TEST(NnInit, DefaultLayerInitMatchesPyTorchBounds) {
  init();
  nn::Dense d(400, 300);
  // kaiming_uniform(a=sqrt(5)) gives bound 1/sqrt(fan_in); bias bound is 1/sqrt(fan_in) too.
  const double bound = 1 / std::sqrt(400.0);
  expect_stats(d.weight(), 0, bound / std::sqrt(3.0), -bound, bound);
  for (double b : d.bias()->to_doubles()) EXPECT_LE(std::abs(b), bound);
  nn::Conv2d c(16, 8, 3, {.has_bias = false});
  EXPECT_EQ(c.bias(), nullptr);
  for (double w : c.weight().to_doubles()) EXPECT_LE(std::abs(w), 1 / std::sqrt(144.0));
}

}  // namespace
}  // namespace spore
