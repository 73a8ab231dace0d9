#include <gtest/gtest.h>

#include <cmath>

#include "nn/loss.h"
#include "nn_util.h"
#include "ops/ops.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

using nn_test::rnd;

Tensor f64(std::vector<double> v, Shape s) { return Tensor::from_doubles(v, std::move(s), DType::f64); }

// Hand-computed cross entropy of one row.
double ce_row(const std::vector<double>& z, const std::vector<double>& t) {
  double mx = z[0], s = 0, out = 0;
  for (double v : z) mx = std::max(mx, v);
  for (double v : z) s += std::exp(v - mx);
  for (size_t i = 0; i < z.size(); ++i) out -= t[i] * (z[i] - mx - std::log(s));
  return out;
}

TEST(NnLoss, SoftmaxCrossEntropySparseDenseSmoothingReductions) {
  init();
  const Tensor logits = f64({1, 2, 0.5, -1, 0, 3}, {2, 3});
  const Tensor labels = Tensor::from_vector<int32_t>({1, 2}, {2});
  const double l0 = ce_row({1, 2, 0.5}, {0, 1, 0}), l1 = ce_row({-1, 0, 3}, {0, 0, 1});
  const Tensor none = nn::SoftmaxCrossEntropyWithLogits(true)(logits, labels);
  EXPECT_EQ(none.shape(), (Shape{2}));
  EXPECT_NEAR(none.item_at(0), l0, 1e-12);
  EXPECT_NEAR(none.item_at(1), l1, 1e-12);
  EXPECT_NEAR(nn::SoftmaxCrossEntropyWithLogits(true, "mean")(logits, labels).item(), (l0 + l1) / 2, 1e-12);
  EXPECT_NEAR(nn::SoftmaxCrossEntropyWithLogits(true, "sum")(logits, ops::cast(labels, DType::i64)).item(), l0 + l1,
              1e-12);
  const Tensor onehot = f64({0, 1, 0, 0, 0, 1}, {2, 3});
  EXPECT_NEAR(nn::SoftmaxCrossEntropyWithLogits(false, "sum")(logits, onehot).item(), l0 + l1, 1e-12);
  const double s = 0.3, k = 0.1;  // smoothing 0.3 over 3 classes: off 0.1, on 0.8
  const double sm = ce_row({1, 2, 0.5}, {k, 1 - s + k, k}) + ce_row({-1, 0, 3}, {k, k, 1 - s + k});
  EXPECT_NEAR(nn::SoftmaxCrossEntropyWithLogits(true, "sum", s)(logits, labels).item(), sm, 1e-12);
  // f32, many classes, batch not a multiple of anything.
  const Tensor big = rnd({7, 1003}, 1, DType::f32, -5, 5);
  const Tensor ids = Tensor::from_vector<int64_t>({0, 1002, 5, 77, 500, 3, 999}, {7});
  const Tensor l = nn::SoftmaxCrossEntropyWithLogits(true, "mean")(big, ids);
  const Tensor ref = nn::SoftmaxCrossEntropyWithLogits(true, "mean")(ops::cast(big, DType::f64), ids);
  EXPECT_NEAR(l.item(), ref.item(), 1e-5);

  nn::SoftmaxCrossEntropyWithLogits sparse(true);
  EXPECT_NE(testing::error_of([&] { sparse(logits, onehot); }).find("i32 or i64 class ids"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { sparse(logits, Tensor::from_vector<int32_t>({1}, {1})); }).find("labels [2]"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { nn::SoftmaxCrossEntropyWithLogits()(logits, f64({1, 2}, {2})); })
                .find("differ in shape"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::SoftmaxCrossEntropyWithLogits(true, "avg"); }).find("none|mean|sum"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { sparse(logits); }).find("expected (prediction, target)"), std::string::npos);
}

TEST(NnLoss, RegressionLossesMatchHandValues) {
  init();
  const Tensor p = f64({0.5, -1, 2, 3.5}, {2, 2}), t = f64({0, 1, 2.25, 1}, {2, 2});
  // diffs: 0.5, -2, -0.25, 2.5
  EXPECT_NEAR(nn::MSELoss()(p, t).item(), (0.25 + 4 + 0.0625 + 6.25) / 4, 1e-12);
  EXPECT_NEAR(nn::MSELoss("sum")(p, t).item(), 0.25 + 4 + 0.0625 + 6.25, 1e-12);
  EXPECT_EQ(nn::MSELoss("none")(p, t).shape(), (Shape{2, 2}));
  EXPECT_NEAR(nn::L1Loss()(p, t).item(), (0.5 + 2 + 0.25 + 2.5) / 4, 1e-12);
  // beta 1: 0.125, 1.5, 0.03125, 2
  EXPECT_EQ(nn::SmoothL1Loss(1.0, "none")(p, t).to_doubles(), (std::vector<double>{0.125, 1.5, 0.03125, 2}));
  // beta 2: 0.0625, 1.0, 0.015625, 1.5
  EXPECT_NEAR(nn::SmoothL1Loss(2.0, "sum")(p, t).item(), 0.0625 + 1.0 + 0.015625 + 1.5, 1e-12);
  EXPECT_NE(testing::error_of([&] { nn::MSELoss()(p, ops::cast(t, DType::f32)); }).find("target is f32"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] {
              nn::L1Loss()(Tensor::from_vector<int32_t>({1}, {1}), Tensor::from_vector<int32_t>({1}, {1}));
            }).find("floating"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::SmoothL1Loss(0); }).find("beta > 0"), std::string::npos);
}

TEST(NnLoss, BceWithLogitsAndNll) {
  init();
  const Tensor x = f64({2, -1, 0, 30, -30}, {5}), y = f64({1, 0, 0.5, 0, 1}, {5});
  double sum = 0;
  const std::vector<double> xv = x.to_doubles(), yv = y.to_doubles();
  for (size_t i = 0; i < 3; ++i) {  // moderate logits: the textbook formula is accurate
    const double s = 1 / (1 + std::exp(-xv[i]));
    sum += -(yv[i] * std::log(s) + (1 - yv[i]) * std::log(1 - s));
  }
  sum += 2 * (30 + std::log1p(std::exp(-30.0)));  // x=30, y=0 and x=-30, y=1: the stable form must not overflow
  EXPECT_NEAR(nn::BCEWithLogitsLoss("sum")(x, y).item(), sum, 1e-12);
  EXPECT_NEAR(nn::BCEWithLogitsLoss("none")(x, y).item_at(3), 30.0, 1e-9);

  const Tensor logp = ops::log_softmax(f64({1, 2, 0.5, -1, 0, 3}, {2, 3}));
  const Tensor tgt = Tensor::from_vector<int64_t>({0, 2}, {2});
  EXPECT_NEAR(nn::NLLLoss()(logp, tgt).item(), -(logp.item_at(0) + logp.item_at(5)) / 2, 1e-12);
  EXPECT_NEAR(nn::NLLLoss("sum")(logp, tgt).item(),
              nn::SoftmaxCrossEntropyWithLogits(true, "sum")(f64({1, 2, 0.5, -1, 0, 3}, {2, 3}), tgt).item(), 1e-12);
  EXPECT_NE(testing::error_of([&] { nn::NLLLoss()(logp, logp); }).find("i32 or i64"), std::string::npos);
}

TEST(NnLoss, LowPrecisionInputs) {
  init();
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor a = rnd({3, 9}, 2, dt), b = rnd({3, 9}, 3, dt);
    const double ref = nn::MSELoss()(ops::cast(a, DType::f64), ops::cast(b, DType::f64)).item();
    const Tensor l = nn::MSELoss()(a, b);
    EXPECT_EQ(l.dtype(), dt);
    EXPECT_NEAR(l.item(), ref, 0.02 * ref);
  }
}

}  // namespace
}  // namespace spore
