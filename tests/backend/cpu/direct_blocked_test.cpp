// The direct nChw8c conv (backend/cpu/direct_blocked.h) against a float64 direct convolution, and its
// determinism promises: the AVX-512 and AVX2 builds give the same bits, as do any thread count, the image's place
// in the batch and the cached packed weights of a plan constant.
//
// Tolerance: each output is the bias plus K = C*kH*kW products summed by fma in one order, so
// |y - exact| <= gamma_{K+1} * (|b| + sum |x||w|), gamma_n = n u / (1 - n u), u = 2^-24 (Higham's dot-product
// bound). A wrong index, a missing tap or a wrong channel gives errors of the order of |y|.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/constant_cache.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_test_util.h"
#include "backend/cpu/direct_blocked.h"
#include "base/thread_pool.h"
#include "tensor/storage.h"

namespace spore::cpu {
namespace {

using test::random_floats;
using test::set_threads;


struct Case {
  int64_t n, c, o, h, w, kh, kw, sh, sw, pt, pl, pb, pr;
  bool plain = false;  // x in NCHW
  int64_t groups = 1;
  DirectBlockedConv geom() const {
    return {n, c, h, w, o, (h + pt + pb - kh) / sh + 1, (w + pl + pr - kw) / sw + 1, kh, kw, sh, sw, pt, pl, plain, groups};
  }
  std::string name() const {
    return fmt::format("n{} c{} o{} {}x{} k{}x{} s{},{} pads {},{},{},{}{} groups {}", n, c, o, h, w, kh, kw, sh, sw, pt,
                       pl, pb, pr, plain ? " plain" : "", groups);
  }
};

struct Problem {
  DirectBlockedConv g;
  std::vector<float> x, w, b;
  size_t y_size() const { return static_cast<size_t>(g.n * g.o * g.oh * g.ow); }
};

Problem make(const Case& c, uint32_t seed) {
  const DirectBlockedConv g = c.geom();
  return {g, random_floats(static_cast<size_t>(g.n * g.c * g.h * g.w), seed),
          random_floats(static_cast<size_t>(g.o * g.c / g.groups * g.kh * g.kw), seed + 1), random_floats(static_cast<size_t>(g.o), seed + 2)};
}

std::vector<float> run(const Problem& p, bool bias, const std::shared_ptr<Storage>& owner = nullptr,
                       const float* w = nullptr) {
  std::vector<float> y(p.y_size(), std::nanf(""));
  direct_blocked_conv(p.g, p.x.data(), w ? w : p.w.data(), bias ? p.b.data() : nullptr, y.data(), owner);
  return y;
}

void expect_matches_reference(const Problem& p, bool bias, const std::vector<float>& y) {
  const DirectBlockedConv& g = p.g;
  constexpr double u = 1.0 / (1 << 24);
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;  // each output reads its group's cg channels
  const double k = static_cast<double>(cg * g.kh * g.kw) + 1;
  const double gamma = k * u / (1 - k * u);
  int64_t failures = 0;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          double ref = bias ? p.b[static_cast<size_t>(o)] : 0.0, mag = std::abs(ref);
          for (int64_t cl = 0; cl < cg; ++cl)
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t c = o / og * cg + cl;
                const int64_t iy = oy * g.sh + i - g.pad_top, ix = ox * g.sw + j - g.pad_left;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                const size_t xi = g.plain_src ? static_cast<size_t>(((n * g.c + c) * g.h + iy) * g.w + ix)
                                              : test::nchw8c_at(n, c, iy, ix, g.c, g.h, g.w);
                const double t = static_cast<double>(p.x[xi]) *
                                 p.w[static_cast<size_t>(((o * cg + cl) * g.kh + i) * g.kw + j)];
                ref += t;
                mag += std::abs(t);
              }
          const double got = y[test::nchw8c_at(n, o, oy, ox, g.o, g.oh, g.ow)];
          if (!(std::abs(got - ref) <= gamma * mag) && failures++ < 5)
            ADD_FAILURE() << "n=" << n << " o=" << o << " y=" << oy << " x=" << ox << ": got " << got << " want " << ref;
        }
  EXPECT_EQ(failures, 0);
}


const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      // n, c, o, h, w, kh, kw, sh, sw, pads t, l, b, r
      {2, 32, 64, 16, 16, 3, 3, 2, 2, 1, 1, 1, 1},  // ResNet downsampling conv
      {1, 64, 128, 16, 16, 1, 1, 2, 2, 0, 0, 0, 0},  // its 1x1 stride-2 skip
      {3, 16, 32, 9, 11, 1, 1, 1, 1, 0, 0, 0, 0},    // 1x1 stride 1, odd sizes
      {1, 8, 16, 13, 30, 5, 5, 1, 1, 2, 2, 2, 2},    // wide rows: several pixel tiles and a remainder
      {2, 8, 8, 15, 17, 3, 3, 2, 2, 0, 0, 0, 0},     // O = 8: one 8-lane block (the AVX2 build on any CPU)
      {1, 24, 24, 10, 10, 3, 3, 1, 2, 1, 1, 0, 2},   // O = 24: a 16-lane block and a half-used one; asymmetric stride and pads
      {1, 8, 32, 20, 20, 7, 7, 2, 2, 3, 3, 3, 3},    // 7x7 stride 2: several edge columns
      {2, 16, 48, 4, 4, 3, 3, 1, 1, 2, 2, 2, 2},     // pads wider than the interior: every column is an edge
      {2, 3, 32, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, true},   // an RGB stem from NCHW
      {1, 12, 16, 11, 9, 3, 3, 2, 2, 1, 1, 1, 1, true},   // NCHW, 8 + 4 channels
      {1, 1, 8, 28, 28, 5, 5, 1, 1, 2, 2, 2, 2, true},    // one channel
      // Weights outweighing the input: tasks split the output channels (whole images each)
      {1, 256, 96, 3, 5, 3, 3, 1, 1, 1, 1, 1, 1},    // three chunks of two 16-lane blocks, every column an edge
      {2, 128, 72, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1},    // two chunks, the last one ending in a half-used block
      {2, 512, 64, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},    // 1x1: rows as one run of pixels, two chunks
      {1, 64, 80, 9, 9, 1, 1, 1, 1, 0, 0, 0, 0},     // 5 16-lane blocks: a 3-block tile and a 2-block one
      {2, 16, 40, 8, 6, 3, 3, 2, 2, 1, 1, 1, 1},     // 2.5 blocks: a 3-block tile whose last block is half used
      // Grouped: each group a conv over its own channel blocks
      {2, 48, 48, 12, 12, 3, 3, 2, 2, 1, 1, 1, 1, false, 6},  // regnet's 8-channel groups (the 8-lane build)
      {1, 64, 64, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1, false, 2},    // 32 per group: two 16-lane blocks each
      {2, 48, 48, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1, false, 2},    // 24 per group: a half-used 16-lane block each
      {1, 16, 32, 6, 6, 1, 1, 1, 1, 0, 0, 0, 0, false, 2},    // 1x1 grouped, 8 -> 16 per group
      {1, 12, 16, 10, 10, 3, 3, 1, 1, 1, 1, 1, 1, true, 2},   // an NCHW source, 6 channels per group
  };
  return c;
}

TEST(DirectBlocked, MatchesFloat64DirectConv) {
  uint32_t seed = 3;
  for (const Case& c : cases())
    for (bool bias : {true, false}) {
      SCOPED_TRACE(c.name() + (bias ? " bias" : ""));
      const Problem p = make(c, seed += 5);
      ASSERT_TRUE(direct_blocked_supported(p.g));
      expect_matches_reference(p, bias, run(p, bias));
    }
}

TEST(DirectBlocked, SameBitsWithAndWithoutAvx512) {
  SPORE_SKIP_WITHOUT_AVX512();
  uint32_t seed = 77;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const Problem p = make(c, seed += 5);
    const std::vector<float> best = run(p, true);
    setenv("SPORE_CONV_DIRECT_ISA", "avx2", 1);
    EXPECT_EQ(run(p, true), best) << "AVX2 build";
    unsetenv("SPORE_CONV_DIRECT_ISA");
  }
}

TEST(DirectBlocked, SameBitsForAnyThreadCountBatchAndCachedWeights) {
  const int saved = num_threads();
  uint32_t seed = 77;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const Problem p = make(c, seed += 5);
    set_threads(1);
    const std::vector<float> one = run(p, true);
    for (int t : {2, 3}) {
      set_threads(t);
      EXPECT_EQ(run(p, true), one) << t << " threads";
    }
    set_threads(saved);
    // The last image alone.
    Problem last = p;
    last.g.n = 1;
    const size_t img = static_cast<size_t>(p.g.c * p.g.h * p.g.w), out = static_cast<size_t>(p.g.o * p.g.oh * p.g.ow);
    last.x.assign(p.x.end() - static_cast<std::ptrdiff_t>(img), p.x.end());
    const std::vector<float> alone = run(last, true);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), one.end() - static_cast<std::ptrdiff_t>(out))) << "batch of 1";
    // Packed weights kept for a constant's storage: the same bits, found again on the next call.
    std::vector<float> wbuf = p.w;
    auto owner = Storage::wrap(wbuf.data(), wbuf.size() * sizeof(float));
    const ConstantCacheStats s0 = constant_cache_stats();
    EXPECT_EQ(run(p, true, owner, wbuf.data()), one);
    EXPECT_EQ(run(p, true, owner, wbuf.data()), one);
    const ConstantCacheStats s1 = constant_cache_stats();
    EXPECT_EQ(s1.misses - s0.misses, 1);
    EXPECT_EQ(s1.hits - s0.hits, 1);
  }
}

// The epilogue in the row kernels' stores (residual add, relu) and the per-task callback give the bits of the conv
// followed by the separate ops (y + r, then x < 0 ? 0 : x as unary_f32), in both ISA builds and at 1 and 3
// threads, with NaN and -0 in the residual.
TEST(DirectBlocked, FusedEpilogueHasTheBitsOfTheSeparateOps) {
  const int saved = num_threads();
  uint32_t seed = 91;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const Problem p = make(c, seed += 5);
    const std::vector<float> r = test::epilogue_residual(p.y_size(), seed + 1);
    const std::vector<float> plain = run(p, true);
    for (const test::EpilogueCase& e : test::epilogue_cases(plain, r))
        for (bool avx2 : {false, true})
          for (int threads : {1, 3})
            for (bool in_registers : {false, true}) {
              if (avx2) setenv("SPORE_CONV_DIRECT_ISA", "avx2", 1);
              set_threads(threads);
              test::EpilogueProbe probe(p.y_size(), e.residual, e.relu);
              direct_blocked_conv(p.g, p.x.data(), p.w.data(), p.b.data(), probe.y.data(), nullptr, &probe.fn,
                                  in_registers ? &e.fused : nullptr);
              unsetenv("SPORE_CONV_DIRECT_ISA");
              SCOPED_TRACE(fmt::format("residual={} relu={} avx2={} threads={} in_registers={}", e.residual != nullptr,
                                       e.relu, avx2, threads, in_registers));
              EXPECT_EQ(std::memcmp(probe.y.data(), e.want.data(), e.want.size() * sizeof(float)), 0);
              EXPECT_TRUE(probe.every_element_called(in_registers ? 0 : 1));
            }
  }
  set_threads(saved);
}

// Each output sums its taps in groups of direct_group_blocks input channel blocks and, within them, of
// direct_group_rows kernel rows (direct_blocked.h): the first group by fma from the bias, each later one from +0, the
// group sums added left to right. Scalar std::fma in that order gives every output's bits in both ISA builds (a 1x1
// over 34 channel blocks: groups of 16, 16, 2; a 3x3 over 5 with edge columns: 2, 2, 1; a 7x7 RGB stem from NCHW:
// kernel rows 0-2, 3-5, 6; a 5x5 over 2 blocks: one row a group), and a single chain (the kernel before the groups)
// differs from it.
TEST(DirectBlocked, SumsTheTapsInTheDocumentedGroups) {
  uint32_t seed = 301;
  for (const Case& c : {Case{1, 272, 32, 5, 7, 1, 1, 1, 1, 0, 0, 0, 0}, Case{2, 40, 16, 6, 9, 3, 3, 1, 1, 1, 1, 1, 1},
                        Case{1, 3, 16, 23, 21, 7, 7, 2, 2, 3, 3, 3, 3, true}, Case{1, 16, 16, 9, 8, 5, 5, 1, 1, 2, 2, 2, 2}}) {
    SCOPED_TRACE(c.name());
    const Problem p = make(c, seed += 5);
    const DirectBlockedConv& g = p.g;
    const int64_t cb_n = (g.c + 7) / 8, group = direct_group_blocks(g.kh, g.kw);
    const int64_t krows = direct_group_rows(g.kh, g.kw, g.plain_src ? std::min<int64_t>(8, g.c) : 8);
    std::vector<float> want(p.y_size()), chain(p.y_size());
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t o = 0; o < g.o; ++o)
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            float total = 0.0f, one = p.b[static_cast<size_t>(o)];
            bool first = true;
            for (int64_t cb0 = 0; cb0 < cb_n; cb0 += group)
              for (int64_t k0 = 0; k0 < g.kh; k0 += krows) {
                float part = first ? p.b[static_cast<size_t>(o)] : 0.0f;
                for (int64_t cb = cb0; cb < std::min(cb_n, cb0 + group); ++cb)
                  for (int64_t i = k0; i < std::min(g.kh, k0 + krows); ++i)
                    for (int64_t j = 0; j < g.kw; ++j)
                      for (int64_t cc = 0; cc < 8 && cb * 8 + cc < g.c; ++cc) {
                        const int64_t iy = oy * g.sh + i - g.pad_top, ix = ox * g.sw + j - g.pad_left, ch = cb * 8 + cc;
                        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                        const float xv = p.x[g.plain_src ? static_cast<size_t>(((n * g.c + ch) * g.h + iy) * g.w + ix)
                                                         : test::nchw8c_at(n, ch, iy, ix, g.c, g.h, g.w)];
                        const float wv = p.w[static_cast<size_t>(((o * g.c + ch) * g.kh + i) * g.kw + j)];
                        part = std::fma(xv, wv, part);
                        one = std::fma(xv, wv, one);
                      }
                total = first ? part : total + part;
                first = false;
              }
            const size_t at = test::nchw8c_at(n, o, oy, ox, g.o, g.oh, g.ow);
            want[at] = total;
            chain[at] = one;
          }
    EXPECT_NE(want, chain) << "the test tells the orders apart";
    for (bool avx2 : {false, true}) {
      if (avx2) setenv("SPORE_CONV_DIRECT_ISA", "avx2", 1);
      const std::vector<float> y = run(p, true);
      unsetenv("SPORE_CONV_DIRECT_ISA");
      EXPECT_EQ(std::memcmp(y.data(), want.data(), want.size() * sizeof(float)), 0) << (avx2 ? "AVX2" : "best ISA");
    }
  }
}

}  // namespace
}  // namespace spore::cpu
