// bf16 linear and matmul on AVX512_BF16 (gemm_bf16.h, vdpbf16ps), where the CPU has it:
// - against the reference backend (f64 sums rounded once to bf16) on random inputs in [-1, 1) (never zero), odd K,
//   M and N off the tile sizes, transposed operands and broadcast batches, within the bf16 bound
//   |y - ref| <= 2^-7 |ref| + 2 gamma_K sum_k |x_k w_k|: both round once to bf16 (half an ulp, at most 2^-8 of the
//   value, each: one bf16 ulp apart where the two sums straddle a rounding midpoint), and the kernel's f32 sums add
//   at most gamma_K = K u / (1 - K u), u = 2^-24;
// - that it is what runs (the profiler's impl name), and that SPORE_GEMM_BF16=0 runs the widened f32 path, which
//   agrees within the same bound (the two differ in order, not in accuracy);
// - bit-identity across 1, 2 and 4 threads, batch composition (a row alone == the row inside any batch), linear ==
//   matmul(transpose_b) == matmul with W as [K, N], and weights as a plan constant (panels kept) or not;
// - the documented consequence of vdpbf16ps's DAZ/FTZ: products below 2^-126 count as zero.
// On a CPU without AVX512_BF16 every test here is skipped: the fallback is all that runs there, and comparing it
// with itself would prove nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "backend/cpu/gemm_bf16.h"
#include "base/half.h"
#include "ops/registry.h"
#include "tensor/tensor.h"

namespace spore::cpu {
namespace {

using test::set_threads;

#define SPORE_SKIP_WITHOUT_AVX512_BF16()                                                                      \
  do {                                                                                                        \
    if (!::spore::cpu::cpu_has_avx512_bf16())                                                                 \
      GTEST_SKIP() << "this CPU has no AVX512_BF16: bf16 GEMMs run the widened f32 path, nothing to compare"; \
  } while (0)

struct EnvGuard {
  std::string name;
  EnvGuard(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvGuard() { unsetenv(name.c_str()); }
};

struct ThreadsGuard {
  ~ThreadsGuard() { set_threads(1); }
};

Tensor bf16_tensor(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t = Tensor::empty(shape, DType::bf16);
  auto* p = static_cast<uint16_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = dist(rng);
    if (std::fabs(v) < 1e-3f) v = 0.5f;  // never zero (nor tiny)
    p[i] = float_to_bf16_bits(v);
  }
  return t;
}

float at(const Tensor& t, int64_t i) { return bf16_bits_to_float(static_cast<const uint16_t*>(t.raw_data())[i]); }

// Runs the op's kernel of `backend` on the inputs; impl: the profiler's implementation name it reported.
Tensor run(Backend backend, OpId op, const std::vector<Tensor>& ins, const Attrs& attrs, uint64_t constant_inputs = 0,
           std::string* impl = nullptr) {
  const OpDef& def = op_registry().get(op);
  const Attrs a = def.normalize(attrs);
  std::vector<TensorType> types;
  for (const Tensor& t : ins) types.push_back(TensorType::of(t.dtype(), t.shape()));
  const auto outs_t = def.infer_types(types, a);
  const KernelInfo* k = kernel_registry().find(backend, op, def.dispatch_dtype(types, outs_t));
  EXPECT_NE(k, nullptr);
  std::vector<Tensor> outs{Tensor::empty(outs_t[0].shape(), outs_t[0].dtype)};
  std::memset(outs[0].raw_data(), 0xff, outs[0].nbytes());  // NaN: every element must be written
  KernelContext ctx{ins, outs, a, op, {}};
  ctx.constant_inputs = constant_inputs;
  (void)take_kernel_impl();
  k->fn(ctx);
  const char* name = take_kernel_impl();
  if (impl) *impl = name ? name : "";
  return outs[0];
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << what;
}

// y = x[M, K] @ W, W given by element (n, k); ref the reference backend's output; checks the bound of the header.
template <typename W>
void expect_close(const Tensor& y, const Tensor& ref, const Tensor& x, int64_t m, int64_t k, int64_t n, const W& w,
                  const std::string& what) {
  const double gamma = k * std::ldexp(1.0, -24) / (1 - k * std::ldexp(1.0, -24));
  int bad = 0;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) mag += std::fabs(static_cast<double>(at(x, r * k + kk)) * w(c, kk));
      const double want = at(ref, r * n + c), got = at(y, r * n + c);
      const double tol = std::ldexp(std::fabs(want), -7) * 1.01 + 2 * gamma * mag + 1e-30;
      if (!(std::fabs(got - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << what << ": y[" << r << "," << c << "] = " << got << ", reference " << want << " (tol " << tol
                      << ")";
    }
}

struct Shape3 {
  int64_t m, k, n;
};
// Odd K, M and N off the 12 x 32 tile, K across the 64-wide summation groups, N <= 16 and N > 32.
constexpr Shape3 kShapes[] = {{1, 1, 1},     {3, 7, 5},      {13, 33, 31}, {12, 64, 32}, {25, 65, 33},
                              {37, 129, 70}, {50, 191, 100}, {7, 300, 16}, {130, 96, 97}};

TEST(GemmBf16, LinearMatchesReference) {
  SPORE_SKIP_WITHOUT_AVX512_BF16();
  uint32_t seed = 1;
  for (const auto& s : kShapes)
    for (bool with_bias : {false, true}) {
      const Tensor x = bf16_tensor({s.m, s.k}, seed++), w = bf16_tensor({s.n, s.k}, seed++),
                   b = bf16_tensor({s.n}, seed++);
      std::vector<Tensor> ins{x, w};
      if (with_bias) ins.push_back(b);
      std::string impl;
      const Tensor y = run(Backend::cpu, "linear"_op, ins, {}, 0, &impl);
      EXPECT_EQ(impl, "gemm_bf16_avx512");
      const Tensor ref = run(Backend::reference, "linear"_op, ins, {});
      const std::string what = "linear " + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n);
      // The bias enters the bound as one more term of magnitude |b|.
      if (!with_bias) {
        expect_close(
            y, ref, x, s.m, s.k, s.n, [&](int64_t c, int64_t kk) { return at(w, c * s.k + kk); }, what);
      } else {
        Tensor x1 = Tensor::empty({s.m, s.k + 1}, DType::bf16), w1 = Tensor::empty({s.n, s.k + 1}, DType::bf16);
        auto* px = static_cast<uint16_t*>(x1.raw_data());
        auto* pw = static_cast<uint16_t*>(w1.raw_data());
        for (int64_t r = 0; r < s.m; ++r) {
          for (int64_t kk = 0; kk < s.k; ++kk) px[r * (s.k + 1) + kk] = float_to_bf16_bits(at(x, r * s.k + kk));
          px[r * (s.k + 1) + s.k] = float_to_bf16_bits(1.0f);
        }
        for (int64_t c = 0; c < s.n; ++c) {
          for (int64_t kk = 0; kk < s.k; ++kk) pw[c * (s.k + 1) + kk] = float_to_bf16_bits(at(w, c * s.k + kk));
          pw[c * (s.k + 1) + s.k] = float_to_bf16_bits(at(b, c));
        }
        expect_close(
            y, ref, x1, s.m, s.k + 1, s.n, [&](int64_t c, int64_t kk) { return at(w1, c * (s.k + 1) + kk); },
            what + " + bias");
      }
    }
}

TEST(GemmBf16, MatmulMatchesReferenceTransposedAndBatched) {
  SPORE_SKIP_WITHOUT_AVX512_BF16();
  uint32_t seed = 100;
  for (const auto& s : kShapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Tensor a = bf16_tensor(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, seed++);
        const Tensor b = bf16_tensor(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, seed++);
        const Attrs attrs{{"transpose_a", ta}, {"transpose_b", tb}};
        std::string impl;
        const Tensor y = run(Backend::cpu, "matmul"_op, {a, b}, attrs, 0, &impl);
        EXPECT_EQ(impl, "gemm_bf16_avx512");
        const Tensor ref = run(Backend::reference, "matmul"_op, {a, b}, attrs);
        // x as [M, K] row-major for the bound
        Tensor x = Tensor::empty({s.m, s.k}, DType::bf16);
        auto* px = static_cast<uint16_t*>(x.raw_data());
        for (int64_t r = 0; r < s.m; ++r)
          for (int64_t kk = 0; kk < s.k; ++kk)
            px[r * s.k + kk] = static_cast<const uint16_t*>(a.raw_data())[ta ? kk * s.m + r : r * s.k + kk];
        expect_close(
            y, ref, x, s.m, s.k, s.n, [&](int64_t c, int64_t kk) { return at(b, tb ? c * s.k + kk : kk * s.n + c); },
            "matmul " + std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n) +
                (ta ? " ta" : "") + (tb ? " tb" : ""));
      }
  // Batches: [B, M, K] @ [K, N] (one stacked product), [B, M, K] @ [B, K, N] with B = 2 and B = 24 (batches as
  // tasks), [2, 1, M, K] @ [3, K, N] broadcast.
  const std::vector<std::pair<Shape, Shape>> batched = {
      {{5, 13, 33}, {33, 31}}, {{2, 13, 33}, {2, 33, 31}}, {{24, 8, 17}, {24, 17, 9}}, {{2, 1, 7, 65}, {3, 65, 40}}};
  for (const auto& [sa, sb] : batched) {
    const Tensor a = bf16_tensor(sa, seed++), b = bf16_tensor(sb, seed++);
    const Tensor y = run(Backend::cpu, "matmul"_op, {a, b}, {});
    const Tensor ref = run(Backend::reference, "matmul"_op, {a, b}, {});
    ASSERT_EQ(y.shape(), ref.shape());
    int64_t bad = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      const double want = at(ref, i), got = at(y, i);
      // |x|, |w| < 1: sum |x w| <= K, so the bound's second term is at most 2 gamma_K K.
      const int64_t k = sa.back();
      const double tol = std::ldexp(std::fabs(want), -7) * 1.01 + 2.0 * k * k * std::ldexp(1.0, -24) * 1.01;
      if (!(std::fabs(got - want) <= tol)) ++bad;
    }
    EXPECT_EQ(bad, 0) << "batched matmul " << shape_str(sa) << " @ " << shape_str(sb);
  }
}

// The widened f32 path (SPORE_GEMM_BF16=0) against the native one: both within the bound of the reference, so within
// twice it of each other; and they are different code (the native one must not be the fallback in disguise).
TEST(GemmBf16, NativeAgreesWithWidenedFallback) {
  SPORE_SKIP_WITHOUT_AVX512_BF16();
  const Tensor x = bf16_tensor({70, 300}, 7), w = bf16_tensor({90, 300}, 8);
  std::string native_impl, widened_impl;
  const Tensor native = run(Backend::cpu, "linear"_op, {x, w}, {}, 0, &native_impl);
  Tensor widened;
  {
    EnvGuard off("SPORE_GEMM_BF16", "0");
    widened = run(Backend::cpu, "linear"_op, {x, w}, {}, 0, &widened_impl);
  }
  EXPECT_EQ(native_impl, "gemm_bf16_avx512");
  EXPECT_NE(widened_impl, "gemm_bf16_avx512");
  const Tensor ref = run(Backend::reference, "linear"_op, {x, w}, {});
  const auto wf = [&](int64_t c, int64_t kk) { return at(w, c * 300 + kk); };
  expect_close(native, ref, x, 70, 300, 90, wf, "native");
  expect_close(widened, ref, x, 70, 300, 90, wf, "widened");
}

TEST(GemmBf16, SameBitsForThreadsBatchLayoutAndConstantWeights) {
  SPORE_SKIP_WITHOUT_AVX512_BF16();
  ThreadsGuard restore;
  const int64_t m = 61, k = 201, n = 75;
  const Tensor x = bf16_tensor({m, k}, 11), w = bf16_tensor({n, k}, 12), b = bf16_tensor({n}, 13);
  set_threads(1);
  const Tensor y1 = run(Backend::cpu, "linear"_op, {x, w, b}, {});
  for (int t : {2, 4}) {
    set_threads(t);
    expect_same_bits(run(Backend::cpu, "linear"_op, {x, w, b}, {}), y1, std::to_string(t) + " threads");
    expect_same_bits(run(Backend::cpu, "linear"_op, {x, w, b}, {}, 0b10), y1,
                     std::to_string(t) + " threads, constant weights");
  }
  set_threads(2);
  // linear == matmul(x, w, transpose_b) == matmul(x, w^T as [K, N]) (no bias)
  const Tensor ylin = run(Backend::cpu, "linear"_op, {x, w}, {});
  expect_same_bits(run(Backend::cpu, "matmul"_op, {x, w}, {{"transpose_b", true}}), ylin, "matmul transpose_b");
  Tensor wt = Tensor::empty({k, n}, DType::bf16);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t kk = 0; kk < k; ++kk)
      static_cast<uint16_t*>(wt.raw_data())[kk * n + c] = static_cast<const uint16_t*>(w.raw_data())[c * k + kk];
  expect_same_bits(run(Backend::cpu, "matmul"_op, {x, wt}, {}), ylin, "matmul [K, N]");
  expect_same_bits(run(Backend::cpu, "matmul"_op, {x, wt}, {}, 0b10), ylin, "matmul [K, N], constant");
  // Every row alone, and rows [5, 30) as their own batch, give the full batch's bits.
  for (int64_t r : {int64_t{0}, int64_t{13}, m - 1}) {
    Tensor xr = Tensor::empty({1, k}, DType::bf16);
    std::memcpy(xr.raw_data(), static_cast<const uint16_t*>(x.raw_data()) + r * k, k * 2);
    const Tensor yr = run(Backend::cpu, "linear"_op, {xr, w, b}, {});
    EXPECT_EQ(std::memcmp(yr.raw_data(), static_cast<const uint16_t*>(y1.raw_data()) + r * n, n * 2), 0)
        << "row " << r << " alone";
  }
  Tensor xs = Tensor::empty({25, k}, DType::bf16);
  std::memcpy(xs.raw_data(), static_cast<const uint16_t*>(x.raw_data()) + 5 * k, 25 * k * 2);
  const Tensor ys = run(Backend::cpu, "linear"_op, {xs, w, b}, {});
  EXPECT_EQ(std::memcmp(ys.raw_data(), static_cast<const uint16_t*>(y1.raw_data()) + 5 * n, 25 * n * 2), 0)
      << "rows 5..30 as a batch";
  // A batched matmul: the per-batch products (batches as tasks) equal each batch computed alone.
  const Tensor a3 = bf16_tensor({16, 9, 33}, 14), b3 = bf16_tensor({16, 33, 20}, 15);
  const Tensor y3 = run(Backend::cpu, "matmul"_op, {a3, b3}, {});
  for (int64_t bi : {0, 7, 15}) {
    Tensor ai = Tensor::empty({9, 33}, DType::bf16), bi_t = Tensor::empty({33, 20}, DType::bf16);
    std::memcpy(ai.raw_data(), static_cast<const uint16_t*>(a3.raw_data()) + bi * 9 * 33, 9 * 33 * 2);
    std::memcpy(bi_t.raw_data(), static_cast<const uint16_t*>(b3.raw_data()) + bi * 33 * 20, 33 * 20 * 2);
    const Tensor yi = run(Backend::cpu, "matmul"_op, {ai, bi_t}, {});
    EXPECT_EQ(std::memcmp(yi.raw_data(), static_cast<const uint16_t*>(y3.raw_data()) + bi * 9 * 20, 9 * 20 * 2), 0)
        << "batch " << bi;
  }
}

// vdpbf16ps flushes denormals (gemm_bf16.h): 2^-64 * 2^-64 = 2^-128 is a denormal f32, so two of them sum to 0 here,
// while the widened path gives 2^-127 (a bf16 denormal: bf16's smallest is 2^-133).
TEST(GemmBf16, DenormalProductsFlushToZero) {
  SPORE_SKIP_WITHOUT_AVX512_BF16();
  Tensor x = Tensor::empty({1, 2}, DType::bf16), w = Tensor::empty({1, 2}, DType::bf16);
  auto* px = static_cast<uint16_t*>(x.raw_data());
  auto* pw = static_cast<uint16_t*>(w.raw_data());
  px[0] = px[1] = pw[0] = pw[1] = float_to_bf16_bits(std::ldexp(1.0f, -64));
  EXPECT_EQ(at(run(Backend::cpu, "linear"_op, {x, w}, {}), 0), 0.0f);
  EnvGuard off("SPORE_GEMM_BF16", "0");
  EXPECT_EQ(at(run(Backend::cpu, "linear"_op, {x, w}, {}), 0), std::ldexp(1.0f, -127));
}

}  // namespace
}  // namespace spore::cpu
