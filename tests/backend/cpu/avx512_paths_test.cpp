// The cpu backend's AVX-512 paths for small problems, against the kernels they stand in for:
// - conv2d_fused with pool="max2x2" (relu or no activation, no residual) over the direct conv's geometries
//   (stride 1, <= 4 input channels) computes conv + relu + pool in registers (conv.cpp, direct_conv_pool). It
//   must give the bits of the separate conv2d, relu and max_pool2d kernels - the fused op's promise - including
//   NaN (it wins a window) and -0 (kept by relu; a later +0 does not replace it). SPORE_CONV_AVX512=0 turns the
//   path off, which the test uses to compare with the path the other CPUs take.
// - f32 linear (linalg.cpp): with <= 16 outputs dot products (few_outputs_linear), with more the GEMM
//   (gemm_linear.h), each in an order that depends on K only. Checked against float64 with the dot-product bound |y - exact| <= gamma_{K+1} (sum |x||w| + |b|)
//   (Higham; u = 2^-24), for bit-identical rows whatever the batch around them, the thread count and the ISA (the
//   AVX2 tiles, forced with SPORE_LINEAR_DOT=avx2 / SPORE_LINEAR_GEMM=avx2, against the AVX-512 ones) and whether
//   the weights are a plan constant (GEMM panels kept) or not.
// The conv test is skipped where the CPU has no AVX-512F (the other paths are what every other test covers there).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_test_util.h"
#include "backend/cpu/gemm_linear.h"
#include "base/thread_pool.h"
#include "ops/registry.h"
#include "tensor/tensor.h"

namespace spore::cpu {
namespace {

using test::set_threads;
using test::ThreadsGuard;

bool has_avx512() { return __builtin_cpu_supports("avx512f"); }

// Sets an environment variable for the scope (the kernels read it per call).
struct EnvGuard {
  std::string name;
  EnvGuard(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvGuard() { unsetenv(name.c_str()); }
};


Tensor run(OpId op, const std::vector<Tensor>& ins, const Attrs& attrs, uint64_t constant_inputs = 0) {
  const OpDef& def = op_registry().get(op);
  const Attrs a = def.normalize(attrs);
  std::vector<TensorType> types;
  for (const Tensor& t : ins) types.push_back(TensorType::of(t.dtype(), t.shape()));
  const auto outs_t = def.infer_types(types, a);
  const KernelInfo* k = kernel_registry().find(Backend::cpu, op, def.dispatch_dtype(types, outs_t));
  EXPECT_NE(k, nullptr);
  std::vector<Tensor> outs{Tensor::empty(outs_t[0].shape(), outs_t[0].dtype)};
  // NaN-filled: every element must be written.
  std::fill(outs[0].data<float>(), outs[0].data<float>() + outs[0].numel(), std::nanf(""));
  KernelContext ctx{ins, outs, a, op, {}};
  ctx.constant_inputs = constant_inputs;
  k->fn(ctx);
  return outs[0];
}

Tensor random_tensor(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& f : v) f = dist(rng);
  return Tensor::from_vector(v, shape);
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto n = static_cast<size_t>(a.numel());
  size_t diff = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(a.data<float>() + i, b.data<float>() + i, sizeof(float)) != 0 && diff++ == 0) first = i;
  EXPECT_EQ(diff, 0u) << what << ": " << diff << " of " << n << " elements differ, first at " << first << " ("
                      << (first < n ? a.data<float>()[first] : 0.0f) << " vs "
                      << (first < n ? b.data<float>()[first] : 0.0f) << ")";
}

struct ConvCase {
  int64_t n, c, o, h, w, kh, kw, dil;
  std::vector<int64_t> pads;  // top, left, bottom, right
  bool bias;
  bool relu;
};

TEST(Avx512Paths, ConvReluPoolHasTheSeparateKernelsBits) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512F on this CPU";
  ThreadsGuard guard;
  const std::vector<ConvCase> cases = {
      {32, 1, 64, 28, 28, 3, 3, 1, {1, 1, 1, 1}, true, true},  // SimpleNet
      {2, 1, 6, 11, 13, 3, 3, 1, {1, 1, 1, 1}, true, true},     // pooled width 6 < 16: masked
      {3, 3, 7, 40, 37, 3, 3, 1, {1, 1, 1, 1}, true, false},    // pooled width 18: overlapping last vector
      {1, 2, 13, 20, 70, 5, 5, 1, {2, 2, 2, 2}, false, true},
      {2, 4, 5, 19, 23, 3, 3, 2, {2, 2, 2, 2}, true, true},     // dilation 2: odd and even tap offsets
      {1, 1, 3, 9, 40, 2, 4, 1, {0, 1, 1, 2}, true, true},      // asymmetric kernel and pads
      {4, 1, 32, 16, 16, 3, 3, 1, {0, 0, 0, 0}, true, true},
  };
  uint32_t seed = 11;
  for (const ConvCase& cc : cases) {
    Tensor x = random_tensor({cc.n, cc.c, cc.h, cc.w}, seed++);
    Tensor w = random_tensor({cc.o, cc.c, cc.kh, cc.kw}, seed++);
    Tensor b = random_tensor({cc.o}, seed++);
    // Specials: a NaN (it must win its windows), a zero patch with channel 0 all-negative weights and bias -0
    // (its outputs there are -0: relu keeps them, a later +0 in the window must not replace them).
    // x >= 0, so channel 0's outputs are negative (relu: +0) except over the zero patch (-0): the windows on
    // the patch's edge see -0 first and +0 after it.
    float* xp = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) xp[i] = std::abs(xp[i]);
    for (int64_t ch = 0; ch < cc.c; ++ch)  // image 0's top-left corner
      for (int64_t yy = 0; yy < 4 && yy < cc.h; ++yy)
        for (int64_t xx = 0; xx < 6 && xx < cc.w; ++xx) xp[(ch * cc.h + yy) * cc.w + xx] = 0.0f;
    xp[2 * x.numel() / 3 + 5] = std::nanf("");
    for (int64_t i = 0; i < cc.c * cc.kh * cc.kw; ++i) w.data<float>()[i] = -std::abs(w.data<float>()[i]) - 0.01f;
    b.data<float>()[0] = -0.0f;
    std::vector<Tensor> ins{x, w};
    if (cc.bias) ins.push_back(b);
    Attrs conv{{"padding", cc.pads}, {"dilation", std::vector<int64_t>{cc.dil, cc.dil}}};
    Attrs fused = conv;
    fused.set("pool", std::string("max2x2"));
    if (cc.relu) fused.set("activation", std::string("relu"));
    const std::string what = "n=" + std::to_string(cc.n) + " c=" + std::to_string(cc.c) + " o=" +
                             std::to_string(cc.o) + " " + std::to_string(cc.h) + "x" + std::to_string(cc.w) + " k" +
                             std::to_string(cc.kh) + "x" + std::to_string(cc.kw) + " d" + std::to_string(cc.dil);
    // The separate kernels (on their own paths).
    Tensor y = run("conv2d"_op, ins, conv);
    if (cc.relu) y = run("relu"_op, {y}, {});
    const Tensor want = run("max_pool2d"_op, {y}, {{"kernel", std::vector<int64_t>{2, 2}},
                                                    {"stride", std::vector<int64_t>{2, 2}}});
    int64_t nan = 0, negzero = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      nan += std::isnan(want.data<float>()[i]);
      negzero += want.data<float>()[i] == 0.0f && std::signbit(want.data<float>()[i]);
    }
    EXPECT_GT(nan, 0) << what;
    if (cc.relu && cc.bias) {
      EXPECT_GT(negzero, 0) << what;
    }
    for (int t : {1, 2, 3}) {
      set_threads(t);
      expect_same_bits(run("conv2d_fused"_op, ins, fused), want, what + " fused, threads " + std::to_string(t));
    }
    EnvGuard off("SPORE_CONV_AVX512", "0");
    expect_same_bits(run("conv2d_fused"_op, ins, fused), want, what + " fused without the AVX-512 path");
  }
}

// Checks y [m, n] against float64 with the dot-product error bound.
void expect_linear_close(const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  constexpr double u = 1.0 / (1 << 24);
  const double gamma = (k + 1) * u / (1 - (k + 1) * u);
  int64_t failures = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = b ? b->data<float>()[j] : 0.0, mag = b ? std::abs(b->data<float>()[j]) : 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double t = static_cast<double>(x.data<float>()[i * k + p]) * w.data<float>()[j * k + p];
        ref += t;
        mag += std::abs(t);
      }
      const double got = y.data<float>()[i * n + j];
      if (!(std::abs(got - ref) <= gamma * mag) && failures++ < 5)
        ADD_FAILURE() << "row " << i << " col " << j << ": got " << got << " want " << ref << " bound " << gamma * mag;
    }
  EXPECT_EQ(failures, 0);
}

// f32 linear: the dot kernel (<= 16 outputs) and the GEMM (gemm_linear.h, more outputs).
TEST(Avx512Paths, OwnLinearKernelsAreAccurateAndBatchInvariant) {
  ThreadsGuard guard;
  struct Case {
    int64_t m, k, n;
  };
  uint32_t seed = 101;
  for (const Case c : {Case{32, 12544, 10}, Case{1, 100, 1}, Case{7, 33, 16}, Case{5, 16, 7}, Case{9, 1000, 13},
                       Case{70, 257, 3}, Case{4, 64, 6},
                       // GEMM: full and partial 32/16-column panels, 12/6-row tiles and their remainders
                       Case{32, 128, 384}, Case{1, 128, 512}, Case{37, 33, 17}, Case{100, 70, 65}, Case{13, 1, 40},
                       Case{64, 512, 128}}) {
    const char* isa_env = c.n <= 16 ? "SPORE_LINEAR_DOT" : "SPORE_LINEAR_GEMM";
    const std::string what = std::to_string(c.m) + "x" + std::to_string(c.k) + " -> " + std::to_string(c.n);
    SCOPED_TRACE(what);
    const Tensor x = random_tensor({c.m, c.k}, seed++), w = random_tensor({c.n, c.k}, seed++),
                 b = random_tensor({c.n}, seed++);
    for (bool bias : {true, false}) {
      std::vector<Tensor> ins{x, w};
      if (bias) ins.push_back(b);
      set_threads(1);
      const Tensor one = run("linear"_op, ins, {});
      expect_linear_close(x, w, bias ? &b : nullptr, one);
      for (int t : {2, 3}) {
        set_threads(t);
        expect_same_bits(run("linear"_op, ins, {}), one, what + " threads " + std::to_string(t));
      }
      // Each row alone gives the bits it has inside the batch.
      for (int64_t i : {int64_t{0}, c.m / 2, c.m - 1}) {
        Tensor row = Tensor::empty({1, c.k}, DType::f32);
        std::memcpy(row.data<float>(), x.data<float>() + i * c.k, static_cast<size_t>(c.k) * sizeof(float));
        std::vector<Tensor> row_ins{row, w};
        if (bias) row_ins.push_back(b);
        const Tensor alone = run("linear"_op, row_ins, {});
        EXPECT_EQ(std::memcmp(alone.data<float>(), one.data<float>() + i * c.n, static_cast<size_t>(c.n) * 4), 0)
            << "row " << i;
      }
      {
        EnvGuard avx2(isa_env, "avx2");
        expect_same_bits(run("linear"_op, ins, {}), one, what + " AVX2 tiles");
      }
      // w as a plan constant: the GEMM keeps its packed panels (found again on the second call), same bits.
      expect_same_bits(run("linear"_op, ins, {}, 2), one, what + " constant weights");
      expect_same_bits(run("linear"_op, ins, {}, 2), one, what + " constant weights, kept panels");
      EnvGuard off(isa_env, "0");
      expect_linear_close(x, w, bias ? &b : nullptr, run("linear"_op, ins, {}));
    }
  }
}

// The GEMM sums K in groups of kGemmGroupK (gemm_linear.h): each group from +0 by fma in increasing k, the group
// sums left to right, then + bias. Scalar std::fma in that order gives every output's bits, in both ISA builds; a
// single chain over K (the kernel before the groups) differs from it.
TEST(Avx512Paths, GemmSumsKInTheDocumentedGroups) {
  ThreadsGuard guard;
  const int64_t m = 13, k = 2 * kGemmGroupK + 44, n = 40;
  const Tensor x = random_tensor({m, k}, 71), w = random_tensor({n, k}, 72), b = random_tensor({n}, 73);
  std::vector<float> want(static_cast<size_t>(m * n)), chain(want.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float* xr = x.data<float>() + i * k;
      const float* wr = w.data<float>() + j * k;
      float total = 0.0f, one = 0.0f;
      for (int64_t k0 = 0; k0 < k; k0 += kGemmGroupK) {
        float part = 0.0f;
        for (int64_t kk = k0; kk < std::min(k, k0 + kGemmGroupK); ++kk) part = std::fma(xr[kk], wr[kk], part);
        total = k0 == 0 ? part : total + part;
      }
      for (int64_t kk = 0; kk < k; ++kk) one = std::fma(xr[kk], wr[kk], one);
      want[static_cast<size_t>(i * n + j)] = total + b.data<float>()[j];
      chain[static_cast<size_t>(i * n + j)] = one + b.data<float>()[j];
    }
  EXPECT_NE(std::memcmp(want.data(), chain.data(), want.size() * sizeof(float)), 0) << "the test tells the orders apart";
  for (bool avx2 : {false, true}) {
    EnvGuard isa("SPORE_LINEAR_GEMM", avx2 ? "avx2" : "");
    const Tensor y = run("linear"_op, {x, w, b}, {});
    EXPECT_EQ(std::memcmp(y.data<float>(), want.data(), want.size() * sizeof(float)), 0) << (avx2 ? "AVX2" : "best ISA");
  }
}

// Products of at most kTinyGemm multiply-adds (eager calls on tiny matrices) skip the packed tiles but sum in their
// documented order, so a row computed alone (tiny) has the bits it has inside a batch that runs on the tiles.
TEST(Avx512Paths, TinyProductsGiveTheTilesBits) {
  ThreadsGuard guard;
  uint32_t seed = 301;
  for (const auto& [k, n] : {std::pair<int64_t, int64_t>{4, 20}, {33, 17}, {100, 20}, {64, 30}, {1, 64}}) {
    const Tensor x = random_tensor({96, k}, seed++), w = random_tensor({n, k}, seed++), b = random_tensor({n}, seed++);
    const Tensor batch = run("linear"_op, {x, w, b}, {});  // 96 rows: the tiles
    for (int64_t rows : {int64_t{1}, int64_t{2}}) {
      Tensor part = Tensor::empty({rows, k}, DType::f32);
      std::memcpy(part.data<float>(), x.data<float>(), static_cast<size_t>(rows * k) * sizeof(float));
      ASSERT_LE(rows * k * n, 4096) << "the case must take the tiny path";
      const Tensor alone = run("linear"_op, {part, w, b}, {});
      EXPECT_EQ(std::memcmp(alone.data<float>(), batch.data<float>(), static_cast<size_t>(rows * n) * 4), 0)
          << rows << " x " << k << " -> " << n;
      // matmul (w as [K, N]) too
      Tensor wt = Tensor::empty({k, n}, DType::f32);
      for (int64_t kk = 0; kk < k; ++kk)
        for (int64_t c = 0; c < n; ++c) wt.data<float>()[kk * n + c] = w.data<float>()[c * k + kk];
      const Tensor mm_batch = run("matmul"_op, {x, wt}, {}), mm_alone = run("matmul"_op, {part, wt}, {});
      EXPECT_EQ(std::memcmp(mm_alone.data<float>(), mm_batch.data<float>(), static_cast<size_t>(rows * n) * 4), 0)
          << "matmul " << rows << " x " << k << " -> " << n;
    }
  }
}

}  // namespace
}  // namespace spore::cpu

namespace spore::cpu {
namespace {

// f32 layer_norm (norm.cpp's own loops): within 1e-5 of float64 (each output is a few roundings on
// (x - mean) * rstd, with mean and variance summed in f32 over 200 values of mean ~3), the same bits for a row
// alone as inside a batch, and for 1-3 threads.
TEST(Avx512Paths, LayerNormRowsAreAccurateAndBatchInvariant) {
  ThreadsGuard guard;
  const int64_t rows = 37, size = 200;
  Tensor x = random_tensor({rows, size}, 5);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += 3.0f;  // a mean far from 0
  const Tensor w = random_tensor({size}, 6), b = random_tensor({size}, 7);
  const Attrs a{{"axis", int64_t{-1}}, {"epsilon", 1e-5}};
  set_threads(1);
  const Tensor y = run("layer_norm"_op, {x, w, b}, a);
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data<float>() + r * size;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < size; ++i) mean += xr[i];
    mean /= size;
    for (int64_t i = 0; i < size; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const double rstd = 1.0 / std::sqrt(var / size + 1e-5);
    for (int64_t i = 0; i < size; ++i) {
      const double want = (xr[i] - mean) * rstd * w.data<float>()[i] + b.data<float>()[i];
      worst = std::max(worst, std::abs(y.data<float>()[r * size + i] - want));
    }
  }
  EXPECT_LT(worst, 1e-5);
  for (int t : {2, 3}) {
    set_threads(t);
    expect_same_bits(run("layer_norm"_op, {x, w, b}, a), y, "threads " + std::to_string(t));
  }
  for (int64_t r : {int64_t{0}, int64_t{18}, rows - 1}) {
    Tensor row = Tensor::empty({1, size}, DType::f32);
    std::memcpy(row.data<float>(), x.data<float>() + r * size, static_cast<size_t>(size) * sizeof(float));
    const Tensor alone = run("layer_norm"_op, {row, w, b}, a);
    EXPECT_EQ(std::memcmp(alone.data<float>(), y.data<float>() + r * size, static_cast<size_t>(size) * 4), 0)
        << "row " << r;
  }
}

}  // namespace
}  // namespace spore::cpu
