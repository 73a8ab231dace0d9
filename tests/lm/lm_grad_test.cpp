// Gradients of the ops the trainable decoder (nn/llama.h) needs beyond the conformance harness: rope (f32 only, so
// outside the harness's f64 finite differences) against the inverse rotation computed in double, and the fused
// attention op with a causal GQA mask (-inf entries) against f64 central differences on the reference backend.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "autodiff/autodiff.h"
#include "ops/llm_ops.h"
#include "ops/ops.h"
#include "runtime/runtime.h"

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

}  // namespace
}  // namespace spore
