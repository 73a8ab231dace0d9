// The NCHW pointwise conv (backend/cpu/pointwise_nchw.h) against a float64 reference, and its determinism promises:
// the documented summation order (scalar std::fma in that order gives every output's bits), the same bits from the
// AVX-512 and AVX2 builds, any thread count, an image alone or in a batch, and the epilogue called once per element.
//
// Tolerance: each output is the bias plus C products summed by fma, so |y - exact| <= gamma_{C+1} * (|b| + sum |x||w|),
// gamma_n = n u / (1 - n u), u = 2^-24 (Higham's bound). A wrong index or a missed channel gives errors of order |y|.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cpu/pointwise_nchw.h"
#include "base/thread_pool.h"
#include "ops/ops.h"
#include "tensor/tensor.h"

namespace spore::cpu {
namespace {

using test::random_floats;
using test::set_threads;

struct Problem {
  PointwiseConv g;
  std::vector<float> x, w, b;
  size_t y_size() const { return static_cast<size_t>(g.n * g.o * g.hw); }
};

Problem make(const PointwiseConv& g, uint32_t seed) {
  return {g, random_floats(static_cast<size_t>(g.n * g.c * g.hw), seed), random_floats(static_cast<size_t>(g.o * g.c), seed + 1),
          random_floats(static_cast<size_t>(g.o), seed + 2)};
}

std::vector<float> run(const Problem& p, bool bias) {
  std::vector<float> y(p.y_size(), std::nanf(""));
  pointwise_nchw_conv(p.g, p.x.data(), p.w.data(), bias ? p.b.data() : nullptr, y.data());
  return y;
}

std::string name(const PointwiseConv& g) { return fmt::format("n{} c{} o{} hw{}", g.n, g.c, g.o, g.hw); }

// Output-channel counts around the 6- and 4-row tiles, pixel counts around the 64- and 24-pixel tiles and their masked
// tails, and channel counts of one, two and three summation groups.
const std::vector<PointwiseConv>& cases() {
  static const std::vector<PointwiseConv> c = {
      {2, 58, 58, 784},   // ShuffleNet's 28x28 convs
      {1, 24, 58, 3136},  // 56x56, one group
      {1, 116, 116, 196}, // 14x14: two groups, a 4-pixel tail
      {3, 5, 7, 49},      // 7x7, odd channels
      {1, 150, 13, 9},    // three groups, one short vector
      {2, 1, 1, 1},
      {1, 64, 65, 300},   // exactly one group; 10 tiles of 6 rows and 5
  };
  return c;
}

TEST(PointwiseNchw, MatchesFloat64Reference) {
  uint32_t seed = 5;
  for (const PointwiseConv& g : cases())
    for (bool bias : {true, false}) {
      SCOPED_TRACE(name(g) + (bias ? " bias" : ""));
      const Problem p = make(g, seed += 7);
      const std::vector<float> y = run(p, bias);
      constexpr double u = 1.0 / (1 << 24);
      const double k = static_cast<double>(g.c) + 1, gamma = k * u / (1 - k * u);
      int failures = 0;
      for (int64_t n = 0; n < g.n; ++n)
        for (int64_t o = 0; o < g.o; ++o)
          for (int64_t q = 0; q < g.hw; ++q) {
            double ref = bias ? p.b[static_cast<size_t>(o)] : 0.0, mag = std::abs(ref);
            for (int64_t c = 0; c < g.c; ++c) {
              const double t = static_cast<double>(p.w[static_cast<size_t>(o * g.c + c)]) *
                               p.x[static_cast<size_t>((n * g.c + c) * g.hw + q)];
              ref += t;
              mag += std::abs(t);
            }
            const double got = y[static_cast<size_t>((n * g.o + o) * g.hw + q)];
            if (!(std::abs(got - ref) <= gamma * mag) && failures++ < 5)
              ADD_FAILURE() << "n=" << n << " o=" << o << " pixel " << q << ": got " << got << " want " << ref;
          }
      EXPECT_EQ(failures, 0);
    }
}

// The documented order, by scalar fma: groups of kPointwiseGroup channels, the first from the bias, the group sums
// added left to right. A single chain over all channels differs from it where there are several groups.
TEST(PointwiseNchw, SumsInTheDocumentedGroups) {
  uint32_t seed = 41;
  for (const PointwiseConv& g : cases()) {
    SCOPED_TRACE(name(g));
    const Problem p = make(g, seed += 7);
    std::vector<float> want(p.y_size()), chain(p.y_size());
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t o = 0; o < g.o; ++o)
        for (int64_t q = 0; q < g.hw; ++q) {
          float total = 0.0f, part = p.b[static_cast<size_t>(o)], one = part;
          for (int64_t c = 0; c < g.c; ++c) {
            if (c > 0 && c % kPointwiseGroup == 0) {
              total = c == kPointwiseGroup ? part : total + part;
              part = 0.0f;
            }
            const float xv = p.x[static_cast<size_t>((n * g.c + c) * g.hw + q)], wv = p.w[static_cast<size_t>(o * g.c + c)];
            part = std::fma(wv, xv, part);
            one = std::fma(wv, xv, one);
          }
          const size_t at = static_cast<size_t>((n * g.o + o) * g.hw + q);
          want[at] = g.c > kPointwiseGroup ? total + part : part;
          chain[at] = one;
        }
    const std::vector<float> y = run(p, true);
    EXPECT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0);
    if (g.c > 2 * kPointwiseGroup) {
      EXPECT_NE(std::memcmp(y.data(), chain.data(), y.size() * sizeof(float)), 0);
    }
    if (test::cpu_has_avx512()) {
      setenv("SPORE_POINTWISE_ISA", "avx2", 1);
      const std::vector<float> y2 = run(p, true);
      unsetenv("SPORE_POINTWISE_ISA");
      EXPECT_EQ(std::memcmp(y2.data(), want.data(), y2.size() * sizeof(float)), 0) << "AVX2 build";
    }
  }
}

TEST(PointwiseNchw, SameBitsWithAndWithoutAvx512) {
  SPORE_SKIP_WITHOUT_AVX512();
  uint32_t seed = 77;
  for (const PointwiseConv& g : cases()) {
    SCOPED_TRACE(name(g));
    const Problem p = make(g, seed += 7);
    const std::vector<float> best = run(p, true);
    setenv("SPORE_POINTWISE_ISA", "avx2", 1);
    EXPECT_EQ(run(p, true), best) << "AVX2 build";
    unsetenv("SPORE_POINTWISE_ISA");
  }
}

TEST(PointwiseNchw, SameBitsForAnyThreadCountAndBatchAndEveryElementEpilogued) {
  const int saved = num_threads();
  uint32_t seed = 91;
  for (const PointwiseConv& g : cases()) {
    SCOPED_TRACE(name(g));
    const Problem p = make(g, seed += 7);
    set_threads(1);
    const std::vector<float> one = run(p, true);
    for (int t : {2, 3}) {
      set_threads(t);
      EXPECT_EQ(run(p, true), one) << t << " threads";
      // The epilogue sees every element once, after it is final.
      std::vector<float> y(p.y_size(), std::nanf(""));
      std::vector<int> calls(p.y_size(), 0);
      bool final_values = true;
      const std::function<void(int64_t, int64_t)> fn = [&](int64_t off, int64_t count) {
        for (int64_t i = off; i < off + count; ++i) {
          ++calls[static_cast<size_t>(i)];
          final_values = final_values && std::memcmp(&y[static_cast<size_t>(i)], &one[static_cast<size_t>(i)], 4) == 0;
        }
      };
      pointwise_nchw_conv(p.g, p.x.data(), p.w.data(), p.b.data(), y.data(), &fn);
      EXPECT_TRUE(final_values);
      for (int c : calls) ASSERT_EQ(c, 1);
    }
    set_threads(saved);
    Problem last = p;  // the last image alone
    last.g.n = 1;
    const size_t img = static_cast<size_t>(g.c * g.hw), out = static_cast<size_t>(g.o * g.hw);
    last.x.assign(p.x.end() - static_cast<std::ptrdiff_t>(img), p.x.end());
    const std::vector<float> alone = run(last, true);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), one.end() - static_cast<std::ptrdiff_t>(out))) << "batch of 1";
  }
}

}  // namespace
}  // namespace spore::cpu

namespace spore {
namespace {

// A 1x1 conv over one pixel (squeeze-excite's FCs) sums in double (conv.cpp's one-pixel path): 1e8 + 1 - 1e8 is 1,
// where an f32 chain gives 0, and the bias is added before the one rounding to f32.
TEST(OnePixelConv, SumsInDoubleAndRoundsOnce) {
  const Tensor x = Tensor::from_vector<float>({1e8f, 1.0f, -1e8f, 0.5f, 1e8f, 0.25f, -1e8f, 0.125f, 3.0f}, {1, 9, 1, 1});
  const Tensor w = Tensor::from_vector<float>(std::vector<float>(18, 1.0f), {2, 9, 1, 1});
  const Tensor b = Tensor::from_vector<float>({0.0f, 1e-9f}, {2});
  const Tensor y = ops::conv2d(x, w, b).contiguous();
  const float* yp = y.data<float>();
  EXPECT_EQ(yp[0], 4.875f);
  EXPECT_EQ(yp[1], static_cast<float>(4.875 + static_cast<double>(1e-9f)));
}

}  // namespace
}  // namespace spore
