// The depthwise nChw8c conv (backend/cpu/depthwise_blocked.h) against a float64 depthwise convolution, and its
// determinism promises: the AVX-512 interior (two pixels per vector) and the AVX2 kernel give the same bits, as do
// any thread count and the image's place in the batch; the store epilogue (residual, relu) gives the bits of the
// separate ops.
//
// Tolerance: each output is the bias plus kH*kW products summed by fma in one order, so |y - exact| <=
// gamma_{kH*kW+1} * (|b| + sum |x||w|) (Higham's dot-product bound); a wrong tap gives errors of the order of |y|.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cpu/depthwise_blocked.h"
#include "base/thread_pool.h"

namespace spore::cpu {
namespace {

using test::random_floats;
using test::set_threads;

struct Case {
  int64_t n, c, h, w, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  DepthwiseBlockedConv geom() const {
    return {n,  c,  h,  w,  (h + pt + pb - dh * (kh - 1) - 1) / sh + 1, (w + pl + pr - dw * (kw - 1) - 1) / sw + 1,
            kh, kw, sh, sw, dh, dw, pt, pl};
  }
  std::string name() const {
    return fmt::format("n{} c{} {}x{} k{}x{} s{},{} d{},{} pads {},{},{},{}", n, c, h, w, kh, kw, sh, sw, dh, dw, pt, pl,
                       pb, pr);
  }
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      // n, c, h, w, kh, kw, sh, sw, dh, dw, pads t, l, b, r
      {2, 16, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},    // mobilenet 3x3: tiles of 8, 4 and the borders
      {1, 8, 29, 31, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},     // stride 2, odd sizes: a leftover pixel
      {2, 24, 17, 23, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},    // 5x5 (efficientnet, mnasnet)
      {1, 16, 28, 28, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2},    // 5x5 stride 2
      {1, 8, 20, 40, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},     // dilation 2: the generic interior
      {1, 8, 12, 27, 7, 7, 1, 3, 1, 1, 3, 3, 3, 3},     // 7x7, stride 3 across: the generic interior
      {2, 8, 4, 5, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2},       // pads wider than the interior
      {1, 16, 9, 112, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},    // no padding, long rows
      {2, 40, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},      // 7x7 planes: 4 + 1 channel blocks side by side
      {1, 56, 14, 14, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2},    // 5x5 stride 2: 4 + 3 blocks
      {1, 48, 6, 11, 3, 3, 2, 1, 1, 2, 1, 1, 1, 1},     // dilation 2 across (the generic interior), 4 + 2 blocks
      {1, 16, 15, 18, 3, 3, 1, 1, 2, 1, 2, 1, 2, 1},    // dilation 2 down only: the pair interior, rows 2 apart
      {1, 8, 9, 21, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0},      // stride 2, no padding: the last tap is the plane's last pixel
      {1, 8, 9, 23, 5, 5, 2, 2, 1, 1, 0, 0, 0, 0},      // the same with 5x5
  };
  return c;
}

struct Problem {
  DepthwiseBlockedConv g;
  std::vector<float> x, w, b;
  size_t y_size() const { return static_cast<size_t>(g.n * g.c * g.oh * g.ow); }
};

Problem make(const Case& c, uint32_t seed) {
  const DepthwiseBlockedConv g = c.geom();
  return {g, random_floats(static_cast<size_t>(g.n * g.c * g.h * g.w), seed),
          random_floats(static_cast<size_t>(g.c * g.kh * g.kw), seed + 1), random_floats(static_cast<size_t>(g.c), seed + 2)};
}

std::vector<float> run(const Problem& p, bool avx2, const StoreEpilogue* fused = nullptr) {
  std::vector<float> y(p.y_size(), std::nanf(""));
  if (avx2) setenv("SPORE_CONV_DIRECT_ISA", "avx2", 1);
  depthwise_blocked_conv(p.g, p.x.data(), p.w.data(), p.b.data(), y.data(), nullptr, nullptr, fused);
  unsetenv("SPORE_CONV_DIRECT_ISA");
  return y;
}

TEST(DepthwiseBlocked, MatchesFloat64DepthwiseConv) {
  uint32_t seed = 5;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const Problem p = make(c, seed += 7);
    const DepthwiseBlockedConv& g = p.g;
    ASSERT_TRUE(depthwise_blocked_supported(g));
    const std::vector<float> y = run(p, false);
    constexpr double u = 1.0 / (1 << 24);
    const double k = static_cast<double>(g.kh * g.kw) + 1, gamma = k * u / (1 - k * u);
    int64_t failures = 0;
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t ch = 0; ch < g.c; ++ch)
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            double ref = p.b[static_cast<size_t>(ch)], mag = std::abs(ref);
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t iy = oy * g.sh + i * g.dh - g.pad_top, ix = ox * g.sw + j * g.dw - g.pad_left;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                const double t = static_cast<double>(p.x[test::nchw8c_at(n, ch, iy, ix, g.c, g.h, g.w)]) *
                                 p.w[static_cast<size_t>((ch * g.kh + i) * g.kw + j)];
                ref += t;
                mag += std::abs(t);
              }
            const double got = y[test::nchw8c_at(n, ch, oy, ox, g.c, g.oh, g.ow)];
            if (!(std::abs(got - ref) <= gamma * mag) && failures++ < 5)
              ADD_FAILURE() << "n=" << n << " c=" << ch << " y=" << oy << " x=" << ox << ": got " << got << " want " << ref;
          }
    EXPECT_EQ(failures, 0);
  }
}

TEST(DepthwiseBlocked, SameBitsWithAndWithoutAvx512) {
  SPORE_SKIP_WITHOUT_AVX512();
  uint32_t seed = 41;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const Problem p = make(c, seed += 7);
    EXPECT_EQ(run(p, true), run(p, false)) << "AVX2 kernel";
  }
}

TEST(DepthwiseBlocked, SameBitsForAnyThreadCountAndBatch) {
  const int saved = num_threads();
  uint32_t seed = 41;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const Problem p = make(c, seed += 7);
    set_threads(1);
    const std::vector<float> one = run(p, false);
    set_threads(3);
    EXPECT_EQ(run(p, false), one) << "3 threads";
    set_threads(saved);
    Problem last = p;
    last.g.n = 1;
    const size_t img = static_cast<size_t>(p.g.c * p.g.h * p.g.w), out = static_cast<size_t>(p.g.c * p.g.oh * p.g.ow);
    last.x.assign(p.x.end() - static_cast<std::ptrdiff_t>(img), p.x.end());
    const std::vector<float> alone = run(last, false);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), one.end() - static_cast<std::ptrdiff_t>(out))) << "batch of 1";
  }
}

TEST(DepthwiseBlocked, FusedEpilogueHasTheBitsOfTheSeparateOps) {
  uint32_t seed = 63;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const Problem p = make(c, seed += 7);
    const std::vector<float> r = test::epilogue_residual(p.y_size(), seed + 1);
    const std::vector<float> plain = run(p, false);
    for (const test::EpilogueCase& e : test::epilogue_cases(plain, r))
      for (bool avx2 : {false, true}) {
        SCOPED_TRACE(fmt::format("residual={} relu={} avx2={}", e.residual != nullptr, e.relu, avx2));
        const std::vector<float> y = run(p, avx2, &e.fused);
        EXPECT_EQ(std::memcmp(y.data(), e.want.data(), e.want.size() * sizeof(float)), 0);
      }
  }
}

}  // namespace
}  // namespace spore::cpu
