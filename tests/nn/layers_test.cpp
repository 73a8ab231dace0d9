#include <gtest/gtest.h>

#include <cmath>

#include "nn/layers.h"
#include "nn_util.h"
#include "ops/ops.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

using nn_test::expect_close;
using nn_test::rnd;

TEST(NnLayers, DenseMatchesLinearAndActivation) {
  init();
  for (const char* act : {"", "relu", "gelu", "silu", "tanh", "sigmoid"}) {
    nn::Dense d(7, 33, true, act);
    const Tensor x = rnd({5, 7}, 1);
    Tensor ref = ops::linear(x, d.weight(), *d.bias());
    const std::string a = act;
    if (a == "relu") ref = ops::relu(ref);
    if (a == "gelu") ref = ops::gelu(ref);
    if (a == "silu") ref = ops::silu(ref);
    if (a == "tanh") ref = ops::tanh(ref);
    if (a == "sigmoid") ref = ops::sigmoid(ref);
    EXPECT_TRUE(d(x).bit_equal(ref)) << a;
  }
  nn::Dense nb(3, 2, false);
  const Tensor x3 = rnd({2, 4, 3}, 2);
  EXPECT_TRUE(nb(x3).bit_equal(ops::linear(x3, nb.weight())));
  EXPECT_EQ(nb(x3).shape(), (Shape{2, 4, 2}));
  EXPECT_NE(testing::error_of([] { nn::Dense(2, 2, true, "swish"); }).find("unknown activation 'swish'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::Dense(0, 2); }).find("in_channels > 0"), std::string::npos);
}

TEST(NnLayers, Conv2dModesAndTranspose) {
  init();
  const Tensor x = rnd({2, 4, 9, 11}, 3);
  nn::Conv2d same(4, 6, 3, {.pad_mode = "same"});
  EXPECT_EQ(same(x).shape(), (Shape{2, 6, 9, 11}));
  ops::Conv2dOptions o;
  o.pad_mode = "same";
  EXPECT_TRUE(same(x).bit_equal(ops::conv2d(x, same.weight(), *same.bias(), o)));
  nn::Conv2d valid(4, 6, 3, {.stride = 2, .pad_mode = "valid"});
  EXPECT_EQ(valid(x).shape(), (Shape{2, 6, 4, 5}));
  nn::Conv2d padded(4, 8, 3, {.pad_mode = "pad", .padding = 1, .dilation = 2, .groups = 2, .has_bias = false});
  EXPECT_EQ(padded.weight().shape(), (Shape{8, 2, 3, 3}));
  EXPECT_EQ(padded(x).shape(), (Shape{2, 8, 7, 9}));
  ops::Conv2dOptions po;
  po.padding = {1, 1, 1, 1};
  po.dilation = {2, 2};
  po.groups = 2;
  EXPECT_TRUE(padded(x).bit_equal(ops::conv2d(x, padded.weight(), std::nullopt, po)));

  nn::Conv2dTranspose up(4, 3, 2, {.stride = 2});
  EXPECT_EQ(up.weight().shape(), (Shape{4, 3, 2, 2}));
  const Tensor y = up(x);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 18, 22}));
  ops::ConvTranspose2dOptions to;
  to.stride = {2, 2};
  EXPECT_TRUE(y.bit_equal(ops::conv_transpose2d(x, up.weight(), *up.bias(), to)));

  EXPECT_NE(testing::error_of([&] { same(rnd({2, 3, 5, 5}, 1)); }).find("expected 4 input channels"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { same(rnd({4, 5, 5}, 1)); }).find("rank-4"), std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::Conv2d(3, 4, 3, {.groups = 2}); }).find("divisible by groups"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::Conv2d(3, 4, 3, {.pad_mode = "full"}); }).find("pad_mode"), std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::Conv2d(3, 4, 3, {.pad_mode = "same", .padding = 1}); }).find("padding"),
            std::string::npos);
}

// The 3-D cells: shapes as PyTorch's Conv3d / ConvTranspose3d / MaxPool3d / AvgPool3d give them, the same bits
// as the ops they wrap, gradients reaching every parameter, and clear errors.
TEST(NnLayers, Conv3dPool3dCells) {
  init();
  const Tensor x = rnd({2, 4, 5, 9, 11}, 3);
  nn::Conv3d stem(4, 6, {3, 7, 7}, {.stride = {1, 2, 2}, .padding = {1, 3, 3}});
  EXPECT_EQ(stem.weight().shape(), (Shape{6, 4, 3, 7, 7}));
  const Tensor y = stem(x);
  EXPECT_EQ(y.shape(), (Shape{2, 6, 5, 5, 6}));
  ops::Conv3dOptions o;
  o.stride = {1, 2, 2};
  o.padding = {1, 3, 3, 1, 3, 3};
  EXPECT_TRUE(y.bit_equal(ops::conv3d(x, stem.weight(), *stem.bias(), o)));
  nn::Conv3d same(4, 8, {3}, {.pad_mode = "same", .dilation = {2}, .groups = 2, .has_bias = false});
  EXPECT_EQ(same.weight().shape(), (Shape{8, 2, 3, 3, 3}));
  EXPECT_EQ(same(x).shape(), (Shape{2, 8, 5, 9, 11}));
  EXPECT_EQ(same.bias(), nullptr);

  nn::Conv3dTranspose up(4, 3, {2}, {.stride = {2}});
  EXPECT_EQ(up.weight().shape(), (Shape{4, 3, 2, 2, 2}));
  EXPECT_EQ(up(x).shape(), (Shape{2, 3, 10, 18, 22}));

  EXPECT_EQ(nn::MaxPool3d({2})(x).shape(), (Shape{2, 4, 2, 4, 5}));
  EXPECT_EQ(nn::MaxPool3d({1, 3, 3}, {.stride = {1, 2, 2}, .pad_mode = "pad", .padding = {0, 1, 1}})(x).shape(),
            (Shape{2, 4, 5, 5, 6}));
  EXPECT_EQ(nn::AvgPool3d({2, 3, 3}, {.stride = {2}, .ceil_mode = true})(x).shape(), (Shape{2, 4, 3, 4, 5}));
  ops::Pool3dOptions po;
  po.kernel = {3, 3, 3};
  po.stride = {3, 3, 3};
  EXPECT_TRUE(nn::AvgPool3d({3})(x).bit_equal(ops::avg_pool3d(x, po)));

  // Every parameter of a small 3-D net gets a gradient of its own shape.
  nn::Conv3d c1(4, 5, {3}, {.padding = {1}});
  auto [loss, grads] = nn::value_and_grad(c1, [&] {
    return ops::reduce_sum(ops::mul(nn::AvgPool3d({1, 2, 2})(nn::MaxPool3d({1, 2, 2})(c1(x))), 1.0));
  });
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads.at("weight").shape(), c1.weight().shape());
  EXPECT_EQ(grads.at("bias").shape(), c1.bias()->shape());

  EXPECT_NE(testing::error_of([&] {
              stem(rnd({2, 3, 5, 9, 11}, 1));
            }).find("expected 4 input channels"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { stem(rnd({2, 4, 9, 11}, 1)); }).find("rank-5"), std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::Conv3d(3, 4, {3, 3}); }).find("1 or 3 values"), std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::Conv3d(3, 4, {3}, {.groups = 2}); }).find("divisible by groups"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::MaxPool3d({2}, {.pad_mode = "full"}); }).find("pad_mode"), std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::AvgPool3d({0}); }).find("kernel_size"), std::string::npos);
}

TEST(NnLayers, ActivationsMatchOps) {
  init();
  const Tensor x = rnd({3, 1001}, 4, DType::f32, -4, 4);
  EXPECT_TRUE(nn::ReLU()(x).bit_equal(ops::relu(x)));
  EXPECT_TRUE(nn::GELU()(x).bit_equal(ops::gelu(x)));
  EXPECT_TRUE(nn::GELU(true)(x).bit_equal(ops::gelu(x, "tanh")));
  EXPECT_TRUE(nn::SiLU()(x).bit_equal(ops::silu(x)));
  EXPECT_TRUE(nn::Tanh()(x).bit_equal(ops::tanh(x)));
  EXPECT_TRUE(nn::Sigmoid()(x).bit_equal(ops::sigmoid(x)));
  EXPECT_TRUE(nn::Softmax(0)(x).bit_equal(ops::softmax(x, 0)));
  const Tensor s = nn::Softmax()(x);
  const auto row = ops::reduce_sum(s, {1}).to_doubles();
  for (double r : row) EXPECT_NEAR(r, 1.0, 1e-5);
}

TEST(NnLayers, PoolingFlattenAndAdaptive) {
  init();
  const Tensor x = rnd({2, 3, 7, 10}, 5);
  EXPECT_EQ(nn::MaxPool2d(2, 2)(x).shape(), (Shape{2, 3, 3, 5}));
  EXPECT_EQ(nn::MaxPool2d(3, 1, "same")(x).shape(), (Shape{2, 3, 7, 10}));
  EXPECT_EQ(nn::AvgPool2d(2)(x).shape(), (Shape{2, 3, 3, 5}));
  EXPECT_EQ(nn::AvgPool2d(3, 2, "pad", 1)(x).shape(), (Shape{2, 3, 4, 5}));
  ops::Pool2dOptions o;
  o.kernel = {2, 2};
  o.pad_mode = "valid";
  EXPECT_TRUE(nn::MaxPool2d(2, 2)(x).bit_equal(ops::max_pool2d(x, o)));
  EXPECT_TRUE(nn::AvgPool2d(2, 2)(x).bit_equal(ops::avg_pool2d(x, o)));

  EXPECT_EQ(nn::Flatten()(x).shape(), (Shape{2, 210}));
  EXPECT_TRUE(nn::AdaptiveAvgPool2d()(x).bit_equal(ops::global_avg_pool(x)));
  // Divisible: plain average pooling. Uneven (7 -> 3 rows, 10 -> 4 cols): PyTorch's overlapping windows.
  expect_close(nn::AdaptiveAvgPool2d(7, 5)(x), ops::avg_pool2d(x, [] {
                 ops::Pool2dOptions p;
                 p.kernel = {1, 2};
                 return p;
               }()),
               1e-6);
  const Tensor a = nn::AdaptiveAvgPool2d(3, 4)(x);
  ASSERT_EQ(a.shape(), (Shape{2, 3, 3, 4}));
  const auto xv = x.to_doubles();
  const int64_t rs[4] = {0, 2, 4, 7}, re[3] = {3, 5, 7}, cs[4] = {0, 2, 5, 7}, ce[4] = {3, 5, 8, 10};
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        double sum = 0;
        int64_t cnt = 0;
        for (int64_t h = rs[i]; h < re[i]; ++h)
          for (int64_t w = cs[j]; w < ce[j]; ++w, ++cnt) sum += xv[static_cast<size_t>(n * 70 + h * 10 + w)];
        EXPECT_NEAR(a.item_at(n * 12 + i * 4 + j), sum / static_cast<double>(cnt), 1e-6);
      }
  EXPECT_NE(testing::error_of([&] { nn::AdaptiveAvgPool2d(8)(x); }).find("smaller than the output"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::MaxPool2d(2, 2, "full"); }).find("pad_mode"), std::string::npos);
}

TEST(NnLayers, DropoutUsesTrainFlagAndFreshMasks) {
  init();
  const Tensor x = rnd({4, 1000}, 6, DType::f32, 0.5, 1.5);
  nn::Dropout d(0.25, 3);
  EXPECT_TRUE(d(x).bit_equal(x));  // eval: identity
  d.set_train(true);
  const Tensor y1 = d(x), y2 = d(x);
  EXPECT_FALSE(y1.bit_equal(y2));
  const auto v = y1.to_doubles(), xv = x.to_doubles();
  int64_t zeros = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == 0) {
      ++zeros;
    } else {
      EXPECT_NEAR(v[i], xv[i] / 0.75, 1e-5);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / 4000.0, 0.25, 0.03);
  nn::Dropout again(0.25, 3);
  again.set_train(true);
  EXPECT_TRUE(again(x).bit_equal(y1));  // same seed, same call index: same mask
  EXPECT_NE(testing::error_of([] { nn::Dropout(1.0); }).find("0 <= p < 1"), std::string::npos);
}

TEST(NnLayers, BatchNormTrainUsesBatchStatsAndUpdatesRunningStats) {
  init();
  const Tensor x = rnd({4, 3, 5, 6}, 7, DType::f64, -2, 3);
  nn::BatchNorm2d bn(3, 1e-5, 0.9, DType::f64);
  bn.gamma() = Tensor::from_doubles({1, 2, 0.5}, {3}, DType::f64);
  bn.beta() = Tensor::from_doubles({0, -1, 0.25}, {3}, DType::f64);
  bn.set_train(true);
  const Tensor y = bn(x);
  const auto xv = x.to_doubles(), yv = y.to_doubles();
  const double g[3] = {1, 2, 0.5}, b[3] = {0, -1, 0.25};
  for (int c = 0; c < 3; ++c) {
    double s = 0, ss = 0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 30; ++i) s += xv[static_cast<size_t>((n * 3 + c) * 30 + i)];
    const double m = s / 120;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 30; ++i) ss += std::pow(xv[static_cast<size_t>((n * 3 + c) * 30 + i)] - m, 2);
    const double var = ss / 120;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 30; ++i) {
        const size_t k = static_cast<size_t>((n * 3 + c) * 30 + i);
        EXPECT_NEAR(yv[k], (xv[k] - m) / std::sqrt(var + 1e-5) * g[c] + b[c], 1e-9);
      }
    EXPECT_NEAR(bn.moving_mean().item_at(c), 0.1 * m, 1e-12);
    EXPECT_NEAR(bn.moving_variance().item_at(c), 0.9 + 0.1 * var * 120 / 119, 1e-12);
  }
  bn.set_train(false);
  const Tensor e = bn(x);
  EXPECT_TRUE(e.bit_equal(ops::batch_norm(x, bn.gamma(), bn.beta(), bn.moving_mean(), bn.moving_variance())));

  nn::BatchNorm1d bn1(5);
  bn1.set_train(true);
  const Tensor x1 = rnd({8, 5}, 8);
  const Tensor y1 = bn1(x1);
  for (double m : ops::reduce_mean(y1, {0}).to_doubles()) EXPECT_NEAR(m, 0, 1e-5);
  EXPECT_EQ(bn1(rnd({8, 5, 7}, 9)).shape(), (Shape{8, 5, 7}));
  EXPECT_NE(testing::error_of([&] { bn1(rnd({8, 4}, 1)); }).find("expected input [N, 5(, L)]"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { bn(rnd({8, 3}, 1)); }).find("BatchNorm2d"), std::string::npos);
}

TEST(NnLayers, LayerNormRmsNormEmbedding) {
  init();
  const Tensor x = rnd({2, 3, 4, 5}, 10);
  nn::LayerNorm ln({4, 5});
  *ln.parameter("gamma") = rnd({4, 5}, 11);
  EXPECT_TRUE(ln(x).bit_equal(ops::layer_norm(x, *ln.parameter("gamma"), *ln.parameter("beta"), -2)));
  nn::LayerNorm plain({5}, 1e-3, false);
  EXPECT_EQ(plain.num_parameters(), 0);
  EXPECT_TRUE(plain(x).bit_equal(ops::layer_norm(x, std::nullopt, std::nullopt, -1, 1e-3)));
  EXPECT_NE(testing::error_of([&] { ln(rnd({2, 5, 4}, 1)); }).find("expected input [..., 4,5]"), std::string::npos);

  nn::RMSNorm rms(5);
  EXPECT_TRUE(rms(x).bit_equal(ops::rms_norm(x, *rms.parameter("weight"))));
  EXPECT_NE(testing::error_of([&] { rms(rnd({2, 4}, 1)); }).find("[..., 5]"), std::string::npos);

  nn::Embedding emb(11, 6);
  const Tensor ids = Tensor::from_vector<int64_t>({0, 10, 3, 3, 7, 1}, {2, 3});
  const Tensor e = emb(ids);
  EXPECT_EQ(e.shape(), (Shape{2, 3, 6}));
  EXPECT_TRUE(e.bit_equal(ops::embedding(emb.embedding_table(), ids)));
  EXPECT_TRUE(emb(ops::cast(ids, DType::i32)).bit_equal(e));
  EXPECT_NE(testing::error_of([&] { emb(x); }).find("i32 or i64 ids"), std::string::npos);
}

TEST(NnLayers, SequentialAndGraphModeForwardMatchesEager) {
  init();
  nn::SequentialCell net(std::make_unique<nn::Conv2d>(3, 4, 3, nn::Conv2dConfig{.pad_mode = "same"}),
                         std::make_unique<nn::BatchNorm2d>(4), std::make_unique<nn::ReLU>(),
                         std::make_unique<nn::AdaptiveAvgPool2d>(), std::make_unique<nn::Flatten>(),
                         std::make_unique<nn::Dense>(4, 2));
  EXPECT_EQ(net.size(), 6u);
  EXPECT_EQ(net.parameters_and_names()[0].first, "0.weight");
  const Tensor x = rnd({2, 3, 6, 6}, 12);
  const Tensor eager = net(x);
  CompiledFunction f([&](std::span<const Tensor> in) { return std::vector<Tensor>{net(in[0])}; });
  EXPECT_TRUE(f({x})[0].bit_equal(eager));
}

}  // namespace
}  // namespace spore
