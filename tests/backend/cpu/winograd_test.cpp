// Winograd F(2x2,3x3) conv on nChw8c (backend/cpu/winograd.h) against a float64 direct convolution, plus its
// determinism promises: the same bits for any thread count, and batch invariance (an image's output does not
// depend on the rest of the batch).
//
// Tolerance (per output element e, first-order rounding-error analysis in the style of Higham's dot-product bound):
// the kernel computes y = A^T [sum_c U_c ⊙ V_c] A + b with V = B^T d B (two add stages), U = G g G^T (two stages
// of two adds; the halvings are exact), an FMA chain over the C channels, then A^T . A (two stages of two adds)
// and the bias add. Each stage's rounding is bounded relative to the same expression evaluated in absolute
// values, so
//     |y_e - exact_e| <= gamma_{C+12} * ( (|A^T| [sum_c (|G||g_c||G^T|) ⊙ (|B^T||d_c||B|)] |A|)_e + |b| ),
// gamma_n = n u / (1 - n u), u = 2^-24, d_c the 4x4 input window of e's tile (zeros outside the image). The test
// evaluates the bracket in float64 for every element. This is the error growth particular to F(2,3): the
// transforms enlarge the magnitudes the sums see (the absolute transforms are up to 4x (B), 2.25x (G) and 9x
// (A) of the inputs' scale), which is why it is looser than a direct conv's gamma_{9C} * sum |x||w|. Observed
// errors are ~1e-7..5e-7 of max|y| (C = 8..128); a wrong index, sign or missing channel gives errors of the
// order of |y| and fails by orders of magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <random>
#include <vector>

#include "backend/cpu/conv_epilogue.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_test_util.h"
#include "backend/cpu/constant_cache.h"
#include "backend/cpu/winograd.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace spore::cpu {
namespace {

using test::random_floats;
using test::set_threads;
using test::ThreadsGuard;

struct Geom {
  int64_t n, c, o, h, w, pt, pl, pb, pr;
};

WinogradConv wino(const Geom& g) {
  return {g.n, g.c, g.h, g.w, g.o, g.h + g.pt + g.pb - 2, g.w + g.pl + g.pr - 2, 3, 3, 1, 1, 1, 1, 1, g.pt, g.pl,
          g.pb, g.pr};
}


struct Problem {
  Geom g;
  WinogradConv wg;
  std::vector<float> x, w, b;  // x in nChw8c, w [O, C, 3, 3]
  bool has_bias;
  size_t y_size() const { return static_cast<size_t>(wg.n * wg.o * wg.oh * wg.ow); }
};

Problem make_problem(const Geom& g, bool bias, uint32_t seed) {
  Problem p{g, wino(g), random_floats(static_cast<size_t>(g.n * g.c * g.h * g.w), seed),
            random_floats(static_cast<size_t>(g.o * g.c * 9), seed + 1),
            random_floats(static_cast<size_t>(g.o), seed + 2), bias};
  return p;
}

std::vector<float> run(const Problem& p) {
  std::vector<float> y(p.y_size(), std::nanf(""));
  winograd_conv2d_nchw8c(p.wg, p.x.data(), p.w.data(), p.has_bias ? p.b.data() : nullptr, y.data());
  return y;
}

// Forces winograd_conv2d_nchw8c's output tile (2: F(2x2,3x3), 4: F(4x4,3x3)) while it lives.
struct ForceTile {
  explicit ForceTile(int m) { ::setenv("SPORE_WINOGRAD_TILE", m == 2 ? "2" : "4", 1); }
  ~ForceTile() { ::unsetenv("SPORE_WINOGRAD_TILE"); }
};

// Checks y against a float64 direct conv, element by element, with the bound in the header comment for the tile
// size the kernel used; returns max|y - ref| / max|ref|.
double expect_matches_reference(const Problem& p, const std::vector<float>& y) {
  const Geom& g = p.g;
  const WinogradConv& wg = p.wg;
  const int m = winograd_tile(wg), a = m + 2;
  constexpr double u = 1.0 / (1 << 24);
  const double n_ops = static_cast<double>(g.c + (m == 2 ? 12 : 32));
  const double gamma = n_ops * u / (1 - n_ops * u);
  // |G|, |B^T|, |A^T| of F(2x2,3x3) and F(4x4,3x3), row-major, a x 3, a x a, m x a.
  static const double aG2[] = {1, 0, 0, .5, .5, .5, .5, .5, .5, 0, 0, 1};
  static const double aB2[] = {1, 0, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 0, 1};
  static const double aA2[] = {1, 1, 1, 0, 0, 1, 1, 1};
  static const double aG4[] = {1. / 4, 0, 0, 1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 6, 1. / 6,
                               1. / 24, 1. / 12, 1. / 6, 1. / 24, 1. / 12, 1. / 6, 0, 0, 1};
  static const double aB4[] = {4, 0, 5, 0, 1, 0, 0, 4, 4, 1, 1, 0, 0, 4, 4, 1, 1, 0,
                               0, 2, 1, 2, 1, 0, 0, 2, 1, 2, 1, 0, 0, 4, 0, 5, 0, 1};
  static const double aA4[] = {1, 1, 1, 1, 1, 0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 4, 4, 0, 0, 1, 1, 8, 8, 1};
  const double* aG = m == 2 ? aG2 : aG4;
  const double* aB = m == 2 ? aB2 : aB4;
  const double* aA = m == 2 ? aA2 : aA4;
  const int64_t planes = a * a;
  std::vector<double> absU(static_cast<size_t>(g.o * g.c * planes));  // |G||g||G^T| per (o, c)
  for (int64_t o = 0; o < g.o; ++o)
    for (int64_t c = 0; c < g.c; ++c) {
      const float* k = &p.w[static_cast<size_t>((o * g.c + c) * 9)];
      for (int i = 0; i < a; ++i)
        for (int j = 0; j < a; ++j) {
          double s = 0;
          for (int r = 0; r < 3; ++r)
            for (int q = 0; q < 3; ++q) s += aG[i * 3 + r] * std::abs(k[r * 3 + q]) * aG[j * 3 + q];
          absU[static_cast<size_t>((o * g.c + c) * planes + i * a + j)] = s;
        }
    }
  double max_err = 0, max_ref = 0;
  int64_t failures = 0;
  std::vector<double> absV(static_cast<size_t>(g.c * planes));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t ty = 0; ty < (wg.oh + m - 1) / m; ++ty)
      for (int64_t tx = 0; tx < (wg.ow + m - 1) / m; ++tx) {
        // |B^T||d_c||B| of this tile's a x a window.
        const auto in = [&](int64_t c, int64_t i, int64_t j) {
          const int64_t iy = m * ty - g.pt + i, ix = m * tx - g.pl + j;
          if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) return 0.0;
          return static_cast<double>(p.x[test::nchw8c_at(n, c, iy, ix, g.c, g.h, g.w)]);
        };
        for (int64_t c = 0; c < g.c; ++c)
          for (int i = 0; i < a; ++i)
            for (int j = 0; j < a; ++j) {
              double s = 0;
              for (int r = 0; r < a; ++r)
                for (int q = 0; q < a; ++q) s += aB[i * a + r] * std::abs(in(c, r, q)) * aB[j * a + q];
              absV[static_cast<size_t>(c * planes + i * a + j)] = s;
            }
        for (int64_t o = 0; o < g.o; ++o)
          for (int dy = 0; dy < m; ++dy)
            for (int dx = 0; dx < m; ++dx) {
              const int64_t oy = m * ty + dy, ox = m * tx + dx;
              if (oy >= wg.oh || ox >= wg.ow) continue;
              const double bias = p.has_bias ? p.b[static_cast<size_t>(o)] : 0.0;
              double ref = bias, bound = std::abs(bias);
              for (int64_t c = 0; c < g.c; ++c)
                for (int i = 0; i < 3; ++i)
                  for (int j = 0; j < 3; ++j)
                    ref += in(c, dy + i, dx + j) * p.w[static_cast<size_t>((o * g.c + c) * 9 + i * 3 + j)];
              for (int64_t c = 0; c < g.c; ++c)
                for (int k = 0; k < planes; ++k)
                  bound += aA[dy * a + k / a] * aA[dx * a + k % a] *
                           absU[static_cast<size_t>((o * g.c + c) * planes + k)] * absV[static_cast<size_t>(c * planes + k)];
              const double got = y[test::nchw8c_at(n, o, oy, ox, g.o, wg.oh, wg.ow)];
              const double err = std::abs(got - ref);
              max_err = std::max(max_err, err);
              max_ref = std::max(max_ref, std::abs(ref));
              if (!(err <= gamma * bound) && failures++ < 5)
                ADD_FAILURE() << "F(" << m << "x" << m << ",3x3) n=" << n << " o=" << o << " y=" << oy << " x=" << ox
                              << ": got " << got << " want " << ref << " (err " << err << " > bound " << gamma * bound
                              << ")";
            }
      }
  EXPECT_EQ(failures, 0);
  // Every element was written (NaN-filled before the call) and the error is far below the bound's scale
  // (observed: F(2x2) <= 5e-7 of max|y|, F(4x4) <= 1.5e-5, C up to 128).
  EXPECT_LT(max_err, (m == 2 ? 1e-5 : 1e-4) * max_ref) << "F(" << m << "x" << m << ") max_err " << max_err << " max|y| " << max_ref;
  return max_err / max_ref;
}


TEST(Winograd, MatchesFloat64DirectConv) {
  const std::vector<Geom> geoms = {
      // n, c, o, h, w, pad top, left, bottom, right
      {1, 8, 8, 1, 1, 1, 1, 1, 1},        {2, 8, 16, 2, 2, 1, 1, 1, 1},     {3, 16, 8, 7, 7, 1, 1, 1, 1},
      {1, 32, 32, 8, 8, 1, 1, 1, 1},      {2, 64, 64, 16, 16, 1, 1, 1, 1},  {1, 128, 128, 8, 8, 1, 1, 1, 1},
      {2, 32, 64, 32, 32, 1, 1, 1, 1},    {1, 16, 24, 8, 8, 0, 0, 0, 0},    {2, 8, 8, 7, 7, 0, 0, 0, 0},
      {1, 16, 16, 7, 9, 2, 2, 2, 2},      {3, 32, 16, 7, 6, 2, 1, 0, 2},    {1, 8, 128, 5, 11, 0, 1, 1, 0},
      {2, 128, 8, 3, 3, 1, 1, 1, 1},      {1, 64, 32, 2, 2, 2, 2, 2, 2},    {3, 8, 40, 16, 16, 1, 0, 1, 0},
      {1, 24, 16, 32, 32, 1, 1, 1, 1},    {2, 16, 16, 4, 4, 0, 0, 0, 0},
  };
  for (int m : {2, 4}) {
  ForceTile force(m);
  double worst = 0;
  uint32_t seed = 1;
  for (const Geom& g : geoms)
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "F(" << m << "x" << m << ") n=" << g.n << " c=" << g.c << " o=" << g.o << " " << g.h << "x" << g.w
                                        << " pads " << g.pt << "," << g.pl << "," << g.pb << "," << g.pr
                                        << " bias=" << bias);
      ASSERT_TRUE(winograd_qualifies(wino(g), WinogradRule::supported));
      const Problem p = make_problem(g, bias, seed += 3);
      ASSERT_EQ(winograd_tile(p.wg), m);
      worst = std::max(worst, expect_matches_reference(p, run(p)));
    }
  std::printf("F(%dx%d,3x3): max |y - y64| / max|y64| over the geometries %.2e\n", m, m, worst);
  }
}

// The transformed-domain GEMMs sum in groups of 16 channels (winograd.cpp, kWinoGroup): M's values are large
// against the outputs A^T M A makes of them, so their rounding dominates F(2x2)'s error, and one FMA chain over
// all C grew it with C. Relative RMS error against float64 of F(2x2) at C = 256 on these uniform inputs (observed:
// one chain 4.8e-7, groups 2.1e-7): it must stay below 3e-7.
TEST(Winograd, SummationGroupsKeepTheErrorOfADeepConvNearADirectOnes) {
  ForceTile force(2);
  const Geom g{1, 256, 16, 8, 8, 1, 1, 1, 1};
  const Problem p = make_problem(g, true, 91);
  const std::vector<float> y = run(p);
  double err2 = 0, ref2 = 0;
  for (int64_t o = 0; o < g.o; ++o)
    for (int64_t oy = 0; oy < g.h; ++oy)
      for (int64_t ox = 0; ox < g.w; ++ox) {
        double ref = p.b[static_cast<size_t>(o)];
        for (int64_t c = 0; c < g.c; ++c)
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) {
              const int64_t iy = oy + i - 1, ix = ox + j - 1;
              if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
              ref += static_cast<double>(p.x[test::nchw8c_at(0, c, iy, ix, g.c, g.h, g.w)]) *
                     p.w[static_cast<size_t>((o * g.c + c) * 9 + i * 3 + j)];
            }
        const double got = y[test::nchw8c_at(0, o, oy, ox, g.o, g.h, g.w)];
        err2 += (got - ref) * (got - ref);
        ref2 += ref * ref;
      }
  const double rel_rms = std::sqrt(err2 / ref2);
  std::printf("F(2x2,3x3) C=256: relative RMS error against float64 %.2e\n", rel_rms);
  EXPECT_LT(rel_rms, 3e-7);
}

TEST(Winograd, SameBitsForAnyThreadCount) {
  ThreadsGuard guard;
  // Sizes whose blocks split across the team in several ways; the last two have tiles for one micro-kernel group
  // only, so their tasks split the output channels (3 slices of 16 for O = 40: uneven on 2 threads).
  for (int m : {2, 4})
  for (const Geom& g : {Geom{4, 64, 64, 32, 32, 1, 1, 1, 1}, Geom{16, 128, 64, 7, 8, 1, 1, 1, 1},
                        Geom{8, 64, 128, 9, 9, 0, 1, 2, 1}, Geom{1, 128, 128, 8, 8, 1, 1, 1, 1},
                        Geom{1, 32, 40, 5, 5, 1, 1, 1, 1}}) {
    ForceTile force(m);
    const Problem p = make_problem(g, true, 7);
    set_threads(1);
    const std::vector<float> one = run(p);
    for (int t : {2, 3}) {
      set_threads(t);
      const std::vector<float> many = run(p);
      EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0) << t << " threads, c=" << g.c;
    }
  }
}

// Image i of a batch of N gives the bits of the same image run alone, whatever blocks and threads the tiles
// fall into (the first and last batches run on the thread team, the single images serially).
TEST(Winograd, BatchInvariant) {
  ThreadsGuard guard;
  for (int m : {2, 4})
  for (int threads : {1, 2}) {
    ForceTile force(m);
    set_threads(threads);
    for (const Geom& g : {Geom{7, 128, 128, 8, 8, 1, 1, 1, 1}, Geom{5, 32, 16, 13, 11, 1, 1, 1, 1},
                          Geom{9, 64, 64, 1, 1, 1, 1, 1, 1}, Geom{4, 16, 32, 32, 32, 1, 1, 1, 1}}) {
      const Problem batch = make_problem(g, true, 11);
      const std::vector<float> all = run(batch);
      const size_t in_image = static_cast<size_t>(g.c * g.h * g.w), out_image = all.size() / static_cast<size_t>(g.n);
      for (int64_t i = 0; i < g.n; ++i) {
        Geom one_g = g;
        one_g.n = 1;
        Problem one = batch;
        one.g = one_g;
        one.wg = wino(one_g);
        one.x.assign(batch.x.begin() + static_cast<std::ptrdiff_t>(i * in_image),
                     batch.x.begin() + static_cast<std::ptrdiff_t>((i + 1) * in_image));
        const std::vector<float> alone = run(one);
        EXPECT_EQ(std::memcmp(alone.data(), all.data() + i * out_image, out_image * sizeof(float)), 0)
            << "image " << i << " of " << g.n << ", c=" << g.c << ", " << threads << " threads";
      }
    }
  }
}

// The AVX-512 micro-kernel and 16-channel F(4x4) transforms (used where the CPU has them) and the AVX2 ones give
// the same bits: each element is one FMA chain over the channels in order either way, and each transform lane
// the same add/sub/fma sequence. SPORE_WINOGRAD_AVX512=0 (read per call) forces AVX2. C = 24 takes the 8-channel
// input transform beside the 16-channel kernels; O = 40 ends on an 8-channel slice (8-channel output transform).
TEST(Winograd, SameBitsWithAndWithoutAvx512) {
  SPORE_SKIP_WITHOUT_AVX512();
  const char* saved = std::getenv("SPORE_WINOGRAD_AVX512");
  const std::string saved_value = saved ? saved : "";
  for (int m : {2, 4})
  for (const Geom& g : {Geom{2, 32, 32, 16, 16, 1, 1, 1, 1}, Geom{3, 128, 40, 7, 9, 1, 1, 1, 1},
                        Geom{1, 64, 128, 8, 8, 0, 2, 1, 1}, Geom{2, 24, 40, 9, 7, 1, 0, 2, 1},
                        Geom{1, 48, 16, 13, 10, 2, 2, 0, 1}}) {
    ForceTile force(m);
    const Problem p = make_problem(g, true, 5);
    ::setenv("SPORE_WINOGRAD_AVX512", "0", 1);
    const std::vector<float> avx2 = run(p);
    ::unsetenv("SPORE_WINOGRAD_AVX512");
    const std::vector<float> best = run(p);
    EXPECT_EQ(std::memcmp(avx2.data(), best.data(), avx2.size() * sizeof(float)), 0) << "c=" << g.c << " o=" << g.o;
    expect_matches_reference(p, avx2);
  }
  if (saved) ::setenv("SPORE_WINOGRAD_AVX512", saved_value.c_str(), 1);
}

// The epilogue fused into the F(4x4) output transform (residual add, relu) and the per-task epilogue callback give
// the bits of the conv followed by the separate ops (y + r, then x < 0 ? 0 : x as unary_f32), on every path:
// AVX-512 and AVX2 transforms, 1 and 2 threads, partial tiles, an 8-channel last slice (O = 40), the output-channel
// split (4 tiles), and NaN / -0 in the residual.
TEST(Winograd, FusedEpilogueHasTheBitsOfTheSeparateOps) {
  ThreadsGuard guard;
  const char* saved = std::getenv("SPORE_WINOGRAD_AVX512");
  const std::string saved_value = saved ? saved : "";
  for (int m : {2, 4})
  for (const Geom& g : {Geom{1, 32, 40, 9, 7, 1, 1, 1, 1}, Geom{2, 16, 32, 16, 16, 1, 1, 1, 1},
                        Geom{1, 64, 64, 8, 8, 1, 1, 1, 1}}) {
    ForceTile force(m);
    const Problem p = make_problem(g, true, 21);
    const std::vector<float> r = test::epilogue_residual(p.y_size(), 23);
    const std::vector<float> plain = run(p);
    for (const test::EpilogueCase& e : test::epilogue_cases(plain, r))
        for (bool avx512 : {false, true})
          for (int threads : {1, 2})
            for (bool in_registers : {false, true}) {
              if (avx512) ::unsetenv("SPORE_WINOGRAD_AVX512");
              else ::setenv("SPORE_WINOGRAD_AVX512", "0", 1);
              set_threads(threads);
              test::EpilogueProbe probe(p.y_size(), e.residual, e.relu);
              winograd_conv2d_nchw8c(p.wg, p.x.data(), p.w.data(), p.b.data(), probe.y.data(), nullptr, &probe.fn,
                                     in_registers ? &e.fused : nullptr);
              SCOPED_TRACE(::testing::Message() << "F(" << m << "x" << m << ") c=" << g.c << " o=" << g.o << " "
                                                << g.h << "x" << g.w << " residual=" << (e.residual != nullptr)
                                                << " relu=" << e.relu << " avx512=" << avx512
                                                << " threads=" << threads << " in_registers=" << in_registers);
              EXPECT_EQ(std::memcmp(probe.y.data(), e.want.data(), e.want.size() * sizeof(float)), 0);
              // The callback covers every element exactly once, or (in registers, F(4x4)) is not called.
              EXPECT_TRUE(probe.every_element_called(in_registers && m == 4 ? 0 : 1));
            }
  }
  if (saved) ::setenv("SPORE_WINOGRAD_AVX512", saved_value.c_str(), 1);
  else ::unsetenv("SPORE_WINOGRAD_AVX512");
}

TEST(Winograd, RejectsOtherGeometries) {
  WinogradConv g = wino({1, 8, 8, 8, 8, 1, 1, 1, 1});
  std::vector<float> x(512), w(576), y(512);
  EXPECT_TRUE(winograd_qualifies(g, WinogradRule::supported));
  for (auto change : {+[](WinogradConv& v) { v.sh = 2; }, +[](WinogradConv& v) { v.dw = 2; },
                      +[](WinogradConv& v) { v.c = 12; }, +[](WinogradConv& v) { v.o = 4; },
                      +[](WinogradConv& v) { v.groups = 2; }, +[](WinogradConv& v) { v.kh = v.kw = 5; },
                      +[](WinogradConv& v) { v.pad_top = -1; }}) {
    WinogradConv bad = g;
    change(bad);
    EXPECT_FALSE(winograd_qualifies(bad, WinogradRule::supported));
    EXPECT_THROW(winograd_conv2d_nchw8c(bad, x.data(), w.data(), nullptr, y.data()), Error);
  }
}

// Through conv2d_blocked (the hook in conv.cpp): a geometry the measured rule sends to Winograd, with
// asymmetric padding from the conv2d attributes, still matches the float64 reference.
TEST(Winograd, Conv2dBlockedHook) {
  const Geom g{2, 32, 32, 16, 16, 1, 0, 2, 1};
  ASSERT_TRUE(winograd_qualifies(wino(g), WinogradRule::beats_onednn_avx2));
  ASSERT_TRUE(winograd_qualifies(wino(g), WinogradRule::beats_onednn_avx512));
  const Problem p = make_problem(g, true, 21);
  const auto tensor = [](const std::vector<float>& v, Shape s) {
    return Tensor::from_doubles(std::vector<double>(v.begin(), v.end()), std::move(s), DType::f32);
  };
  const Tensor x = tensor(p.x, {g.n, g.c / 8, g.h, g.w, 8});
  const Tensor w = tensor(p.w, {g.o, g.c, 3, 3});
  const Tensor b = tensor(p.b, {g.o});
  Tensor y = Tensor::empty({g.n, g.o / 8, p.wg.oh, p.wg.ow, 8}, DType::f32);
  const Attrs a{{"stride", std::vector<int64_t>{1, 1}},
                {"dilation", std::vector<int64_t>{1, 1}},
                {"padding", std::vector<int64_t>{g.pt, g.pl, g.pb, g.pr}},
                {"groups", int64_t{1}},
                {"pad_mode", std::string("pad")}};
  conv2d_blocked(x, w, &b, y, a, true, true);
  const float* yd = y.data<float>();
  expect_matches_reference(p, std::vector<float>(yd, yd + p.y_size()));
}

}  // namespace
}  // namespace spore::cpu

namespace spore::cpu {
namespace {

std::vector<float> run_cached(const Problem& p, const float* w, const std::shared_ptr<Storage>& owner) {
  std::vector<float> y(p.y_size(), std::nanf(""));
  winograd_conv2d_nchw8c(p.wg, p.x.data(), w, p.has_bias ? p.b.data() : nullptr, y.data(), owner);
  return y;
}

// Transformed weights kept for a constant's storage give the bits of transforming them per call; a new storage at
// the same address (the allocator recycles blocks) never sees the old storage's weights.
TEST(Winograd, CachedWeightsHaveTheSameBitsAndFollowTheirStorage) {
  const Geom g{2, 32, 48, 9, 10, 1, 1, 1, 1};
  Problem p = make_problem(g, true, 41);
  const std::vector<float> w2 = random_floats(p.w.size(), 42);
  std::vector<float> buf = p.w;  // the "constant's" bytes, at one fixed address
  const ConstantCacheStats s0 = constant_cache_stats();
  auto a = Storage::wrap(buf.data(), buf.size() * sizeof(float));
  const std::vector<float> uncached = run(p);
  EXPECT_EQ(run_cached(p, buf.data(), a), uncached);
  EXPECT_EQ(run_cached(p, buf.data(), a), uncached);
  const ConstantCacheStats s1 = constant_cache_stats();
  EXPECT_EQ(s1.misses - s0.misses, 1);
  EXPECT_EQ(s1.hits - s0.hits, 1);
  EXPECT_GE(s1.entries, 1);
  // The storage goes, its bytes change, a new storage wraps the same address.
  a.reset();
  std::copy(w2.begin(), w2.end(), buf.begin());
  auto b = Storage::wrap(buf.data(), buf.size() * sizeof(float));
  Problem p2 = p;
  p2.w = w2;
  EXPECT_EQ(run_cached(p, buf.data(), b), run(p2));
  const ConstantCacheStats s2 = constant_cache_stats();
  EXPECT_EQ(s2.misses - s1.misses, 1);
  // The dead storage's entry was dropped and the new one added (entries of other tests' dead storages may go too).
  EXPECT_LE(s2.entries, s1.entries);
  // Bypassed on request.
  setenv("SPORE_CONSTANT_CACHE", "0", 1);
  EXPECT_EQ(run_cached(p, buf.data(), b), run(p2));
  unsetenv("SPORE_CONSTANT_CACHE");
  EXPECT_EQ(constant_cache_stats().hits, s2.hits);
}

}  // namespace
}  // namespace spore::cpu
