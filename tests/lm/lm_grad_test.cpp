// Gradients of the ops the trainable decoder (nn/llama.h) needs beyond the conformance harness: rope (f32 only, so
// outside the harness's f64 finite differences) against the inverse rotation computed in double, and the fused
// attention op with a causal GQA mask (-inf entries) against f64 central differences on the reference backend.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "autodiff/autodiff.h"
#include "nn/init.h"
#include "nn/llama.h"
#include "nn/loss.h"
#include "ops/llm_ops.h"
#include "ops/ops.h"
#include "runtime/runtime.h"
#include "train/lm.h"

namespace spore {
namespace {

Tensor random_tensor(const Shape& s, DType dt, std::mt19937& g, double scale = 1.0) {
  std::normal_distribution<double> n(0.0, scale);
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (double& x : v) x = n(g);
  return Tensor::from_doubles(v, s, dt);
}

TEST(LmGrad, RopeGradientIsTheInverseRotationInDouble) {
  init();
  std::mt19937 g(3);
  const int64_t T = 5, H = 3, D = 16;
  const double theta = 10000.0;
  Tensor pos = Tensor::empty({T}, DType::i64);
  const int64_t ps[T] = {0, 3, 7, 100, 2};
  for (int64_t t = 0; t < T; ++t) pos.data<int64_t>()[t] = ps[t];
  for (const char* mode : {"normal", "neox"})
    for (int64_t dim : {int64_t{0}, int64_t{8}}) {
      const Tensor x = random_tensor({T, H, D}, DType::f32, g), w = random_tensor({T, H, D}, DType::f32, g);
      const Tensor xs[1] = {x};
      const auto grads = autodiff::grad(
          [&](std::span<const Tensor> in) {
            return ops::reduce_sum(ops::mul(ops::rope(in[0], pos, theta, mode, dim), w));
          },
          xs);
      ASSERT_EQ(grads.size(), 1u);
      const auto got = grads[0].to_doubles(), wv = w.to_doubles();
      const int64_t rd = dim == 0 ? D : dim, half = rd / 2;
      const bool neox = std::string(mode) == "neox";
      double max_err = 0;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t base = (t * H + h) * D;
          std::vector<double> ref(wv.begin() + base, wv.begin() + base + D);  // unrotated dims: identity
          for (int64_t i = 0; i < half; ++i) {
            const double angle = static_cast<double>(ps[t]) * std::pow(theta, -2.0 * static_cast<double>(i) / rd);
            const double c = std::cos(angle), s = std::sin(angle);
            const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            // y_a = x_a c - x_b s, y_b = x_a s + x_b c, so dx = R^T w.
            ref[a] = wv[base + a] * c + wv[base + b] * s;
            ref[b] = -wv[base + a] * s + wv[base + b] * c;
          }
          for (int64_t e = 0; e < D; ++e) {
            const double err = std::fabs(got[base + e] - ref[e]);
            max_err = std::max(max_err, err);
            // f32 angles (the kernel builds theta^(-2i/dim) in float, as llama.cpp does) at position 100
            EXPECT_NEAR(got[base + e], ref[e], 2e-4 * (1 + std::fabs(ref[e]))) << mode << " dim " << dim << " t " << t;
          }
        }
      EXPECT_GT(max_err, 0.0);  // a real comparison, not two zero tensors
    }
}

TEST(LmGrad, RopeGradientRoundTripsExactly) {
  // rope then its gradient rule is the identity up to cos^2 + sin^2 rounding: checks the sign trick per mode.
  init();
  std::mt19937 g(5);
  Tensor pos = Tensor::empty({4}, DType::i64);
  for (int64_t t = 0; t < 4; ++t) pos.data<int64_t>()[t] = 11 * t;
  for (const char* mode : {"normal", "neox"}) {
    const Tensor x = random_tensor({4, 2, 8}, DType::f32, g);
    const Tensor xs[1] = {x};
    const Tensor y = ops::rope(x, pos, 10000.0, mode);
    // d/dx sum(rope(x) * y) = R^T y = R^T R x = x
    const auto grads = autodiff::grad(
        [&](std::span<const Tensor> in) { return ops::reduce_sum(ops::mul(ops::rope(in[0], pos, 10000.0, mode), y)); },
        xs);
    const auto a = grads[0].to_doubles(), b = x.to_doubles();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::fabs(b[i]))) << mode;
  }
}

// softmax(scale q k^T + causal mask) v with 2 query heads per kv head stacked along the rows, in f64 on the
// reference backend: the autodiff gradient of sum(out * w) against central differences, every element.
TEST(LmGrad, CausalGqaAttentionMatchesFiniteDifferences) {
  init();
  BackendScope ref(Backend::reference);
  std::mt19937 g(7);
  const int64_t BH = 2, G = 2, T = 3, D = 4, Dv = 5;
  const Tensor q = random_tensor({BH, G * T, D}, DType::f64, g), k = random_tensor({BH, T, D}, DType::f64, g),
               v = random_tensor({BH, T, Dv}, DType::f64, g), w = random_tensor({BH, G * T, Dv}, DType::f64, g);
  std::vector<double> m(static_cast<size_t>(G * T * T));
  for (int64_t r = 0; r < G * T; ++r)
    for (int64_t j = 0; j < T; ++j)
      m[static_cast<size_t>(r * T + j)] = j <= r % T ? 0.0 : -std::numeric_limits<double>::infinity();
  const Tensor mask = Tensor::from_doubles(m, {G * T, T}, DType::f64);
  const Attrs att{{"scale", 0.6}};
  auto loss = [&](std::span<const Tensor> in) {
    const Tensor args[4] = {in[0], in[1], in[2], mask};
    return ops::reduce_sum(ops::mul(ops::call1("attention"_op, args, att), w));
  };
  const Tensor ins[3] = {q, k, v};
  const auto grads = autodiff::grad(loss, ins, {0, 1, 2});
  ASSERT_EQ(grads.size(), 3u);
  const double h = 1e-6;
  for (size_t i = 0; i < 3; ++i) {
    const auto gv = grads[i].to_doubles();
    auto base = ins[i].to_doubles();
    double norm = 0;
    for (size_t e = 0; e < base.size(); ++e) {
      std::vector<Tensor> plus(ins, ins + 3), minus(ins, ins + 3);
      auto vp = base, vm = base;
      vp[e] += h;
      vm[e] -= h;
      plus[i] = Tensor::from_doubles(vp, ins[i].shape(), DType::f64);
      minus[i] = Tensor::from_doubles(vm, ins[i].shape(), DType::f64);
      const double fd = (loss(plus).to_doubles()[0] - loss(minus).to_doubles()[0]) / (2 * h);
      EXPECT_NEAR(gv[e], fd, 1e-6 * (1 + std::fabs(fd))) << "input " << i << " element " << e;
      norm += std::fabs(gv[e]);
    }
    EXPECT_GT(norm, 0.0) << "input " << i;
  }
}

// The whole decoder (GQA fold, causal mask, rope, tied head, q/k/v biases): the autodiff gradient of the mean
// next-token cross entropy against f32 central differences of the same loss computed in double
// (train::lm_cross_entropy), at a few elements of every parameter. h = 1e-2 keeps the f32 rounding of the loss
// (~1e-7 relative) far below the difference; truncation is O(h^2).
TEST(LmGrad, DecoderGradientsMatchFiniteDifferences) {
  init();
  for (const char* arch : {"llama", "qwen2"}) {
    nn::set_seed(9);
    nn::LlamaModel m({.arch = arch,
                      .vocab = 11,
                      .dim = 8,
                      .layers = 2,
                      .heads = 4,
                      .kv_heads = 2,
                      .ffn = 12,
                      .ctx = 5,
                      .tie_embeddings = std::string(arch) == "qwen2",
                      .init_std = 0.5});
    std::mt19937 g(21);
    for (auto& [name, t] : m.parameters_and_names())
      if (name.find("bias") != std::string::npos) *t = random_tensor(t->shape(), DType::f32, g, 0.3);
    Tensor x = Tensor::empty({2, 5}, DType::i64), y = Tensor::empty({2, 5}, DType::i64);
    for (int64_t i = 0; i < 10; ++i) {
      x.data<int64_t>()[i] = static_cast<int64_t>(g() % 11);
      y.data<int64_t>()[i] = static_cast<int64_t>(g() % 11);
    }
    nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
    const nn::LossAndGrads lg = nn::value_and_grad(m, [&] {
      return ce(ops::reshape(m(x), {10, 11}), ops::reshape(y, {10}));
    });
    const double loss = train::lm_cross_entropy(m(x), y);
    EXPECT_NEAR(lg.loss.to_doubles()[0], loss, 1e-5);
    int checked = 0;
    for (auto& [name, t] : m.parameters_and_names()) {
      const Tensor grad = lg.grads.at(name);
      ASSERT_EQ(grad.shape(), t->shape()) << name;
      const auto gv = grad.to_doubles();
      const Tensor saved = *t;
      for (int k = 0; k < 3; ++k) {
        const auto e = static_cast<size_t>(g() % static_cast<uint32_t>(t->numel()));
        auto v = saved.to_doubles();
        const double h = 1e-2;
        v[e] += h;
        *t = Tensor::from_doubles(v, saved.shape(), DType::f32);
        const double lp = train::lm_cross_entropy(m(x), y);
        v[e] -= 2 * h;
        *t = Tensor::from_doubles(v, saved.shape(), DType::f32);
        const double lm = train::lm_cross_entropy(m(x), y);
        *t = saved;
        const double fd = (lp - lm) / (2 * h);
        EXPECT_NEAR(gv[e], fd, 2e-4 + 2e-2 * std::fabs(fd)) << arch << " " << name << " element " << e;
        ++checked;
      }
    }
    EXPECT_GE(checked, 3 * 15);
  }
}

}  // namespace
}  // namespace spore
