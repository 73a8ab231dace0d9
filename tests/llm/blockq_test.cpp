// linear_blockq / embed_blockq (ops/llm_ops.h): the cpu kernels against the reference backend (and the reference
// against a direct double dot, and against hand-computed Q8_0 activation rounding), in every weight format, with and
// without bias; batch invariance (a row's bits do not depend on M or on the thread count); embedding rows (exact);
// the AVX-512 VNNI build of the tiles against the AVX2 build (same bits); bad inputs.
//
// Tolerance of cpu vs reference. Both quantize the activations identically (checked bit-exactly by the hand-made
// cases), so they differ only in summation: the reference sums in double and rounds once; the cpu kernel sums in f32,
// each of its 8 lanes in one FMA chain over n steps (n = K/32 blocks for q8_0/q4_0, K/8 for float formats plus the
// K%8 tail), then a 3-level horizontal sum, the block-scale product dw*dx and the bias add: each of those rounds at
// most once per step by u = 2^-24 relative to the partial sums, so |cpu - ref| <= (n + 6) * u * (S + |bias|) with S
// the sum of |x_k * w_k| (for quant formats with |x_k| widened by the block's quantization step amax/127).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "base/half.h"
#include "base/thread_pool.h"
#include "ops/llm_ops.h"
#include "ops/ops.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

using llm_ops::WeightFormat;

constexpr WeightFormat all_formats[] = {WeightFormat::f32, WeightFormat::f16, WeightFormat::bf16, WeightFormat::q8_0,
                                        WeightFormat::q4_0};

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.05f, 1.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = (neg(rng) ? -scale : scale) * d(rng);  // never 0
  return v;
}

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// A random weight [n, k] in format f, raw (quant formats: random scales of both signs, q over the whole range,
// -128 included for q8_0).
Tensor random_weight(WeightFormat f, int64_t n, int64_t k, uint32_t seed) {
  if (f == WeightFormat::f32 || f == WeightFormat::f16 || f == WeightFormat::bf16) {
    const auto v = random_floats(static_cast<size_t>(n * k), seed);
    return Tensor::from_doubles(std::vector<double>(v.begin(), v.end()), {n, k}, llm_ops::weight_dtype(f));
  }
  const int64_t rb = llm_ops::row_bytes(f, k);
  Tensor w = Tensor::empty({n, rb}, DType::u8);
  auto* p = w.data<uint8_t>();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  const auto scales = random_floats(static_cast<size_t>(n * k / 32), seed + 1, 0.02f);
  const int64_t bb = f == WeightFormat::q8_0 ? llm_ops::q8_0_block_bytes : llm_ops::q4_0_block_bytes;
  for (int64_t b = 0; b < n * k / 32; ++b) {
    uint8_t* blk = p + b * bb;
    put_u16(blk, float_to_half_bits(scales[static_cast<size_t>(b)]));
    for (int64_t j = 2; j < bb; ++j) blk[j] = static_cast<uint8_t>(byte(rng));
  }
  return w;
}

// The weight as f32 [n, k] (the definition of the formats, written out independently of the kernels).
std::vector<float> dequantized(WeightFormat f, const Tensor& w, int64_t k) {
  const int64_t n = w.dim(0);
  std::vector<float> out(static_cast<size_t>(n * k));
  if (f == WeightFormat::f32 || f == WeightFormat::f16 || f == WeightFormat::bf16) {
    const auto d = w.to_doubles();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(d[i]);
    return out;
  }
  const auto* p = w.data<uint8_t>();
  const int64_t bb = f == WeightFormat::q8_0 ? llm_ops::q8_0_block_bytes : llm_ops::q4_0_block_bytes;
  for (int64_t b = 0; b < n * k / 32; ++b) {
    const uint8_t* blk = p + b * bb;
    uint16_t h;
    std::memcpy(&h, blk, 2);
    const float d = half_bits_to_float(h);
    for (int j = 0; j < 32; ++j) {
      int q;
      if (f == WeightFormat::q8_0) q = static_cast<int8_t>(blk[2 + j]);
      else q = (j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4) - 8;
      out[static_cast<size_t>(b * 32 + j)] = d * static_cast<float>(q);
    }
  }
  return out;
}

// The activation as the kernels see it before the products (rounded to f16/bf16), and an upper bound of |x_k|
// after Q8_0 quantization.
float rounded(WeightFormat f, float x) {
  if (f == WeightFormat::f16) return static_cast<float>(f16(x));
  if (f == WeightFormat::bf16) return static_cast<float>(bf16(x));
  return x;
}

Tensor floats(const std::vector<float>& v, Shape shape) { return Tensor::from_vector<float>(v, std::move(shape)); }

std::vector<float> values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

struct Case {
  int64_t m, n, k;
  bool bias;
};

// cpu vs reference (bound above) and, for f32, reference vs a direct double dot (one f32 rounding apart).
void check_against_reference(WeightFormat f, const Case& c, uint32_t seed) {
  const std::string where = fmt::format("{} M={} N={} K={} bias={}", llm_ops::format_name(f), c.m, c.n, c.k, c.bias);
  const auto xv = random_floats(static_cast<size_t>(c.m * c.k), seed, 2.0f);
  const Tensor x = floats(xv, {c.m, c.k});
  const Tensor w = random_weight(f, c.n, c.k, seed + 7);
  std::optional<Tensor> bias;
  std::vector<float> bv(static_cast<size_t>(c.n), 0.0f);
  if (c.bias) {
    bv = random_floats(static_cast<size_t>(c.n), seed + 13);
    bias = floats(bv, {c.n});
  }
  const std::string fmt_name(llm_ops::format_name(f));
  Tensor y_cpu, y_ref;
  {
    BackendScope s(Backend::cpu);
    y_cpu = ops::linear_blockq(x, w, fmt_name, bias);
  }
  {
    BackendScope s(Backend::reference);
    y_ref = ops::linear_blockq(x, w, fmt_name, bias);
  }
  ASSERT_EQ(y_cpu.shape(), (Shape{c.m, c.n})) << where;
  ASSERT_EQ(y_ref.shape(), (Shape{c.m, c.n})) << where;
  const auto wd = dequantized(f, w, c.k);
  const bool quant = f == WeightFormat::q8_0 || f == WeightFormat::q4_0;
  const int64_t steps = quant ? c.k / 32 : c.k / 8 + c.k % 8;
  const double u = std::ldexp(1.0, -24);
  const auto yc = values(y_cpu), yr = values(y_ref);
  for (int64_t i = 0; i < c.m; ++i) {
    // Per-block widening of |x| by the quantization step (and the f16 rounding of the scale).
    std::vector<double> ax(static_cast<size_t>(c.k));
    for (int64_t b = 0; b < c.k; b += 32) {
      double amax = 0;
      for (int64_t j = b; j < std::min(c.k, b + 32); ++j) amax = std::max(amax, std::fabs(double(xv[i * c.k + j])));
      for (int64_t j = b; j < std::min(c.k, b + 32); ++j)
        ax[j] = quant ? std::fabs(double(xv[i * c.k + j])) + amax / 127.0
                      : std::fabs(double(rounded(f, xv[i * c.k + j])));
    }
    for (int64_t j = 0; j < c.n; ++j) {
      double s_abs = std::fabs(double(bv[j])), exact = double(bv[j]);
      for (int64_t t = 0; t < c.k; ++t) {
        s_abs += ax[t] * std::fabs(double(wd[j * c.k + t]));
        exact += double(xv[i * c.k + t]) * double(wd[j * c.k + t]);
      }
      const double tol = double(steps + 6) * u * s_abs;
      const size_t o = static_cast<size_t>(i * c.n + j);
      ASSERT_LE(std::fabs(double(yc[o]) - double(yr[o])), tol)
          << where << " y[" << i << "," << j << "] cpu " << yc[o] << " ref " << yr[o];
      if (f == WeightFormat::f32) {
        ASSERT_LE(std::fabs(double(yr[o]) - exact), u * std::fabs(exact) + 1e-30) << where << " reference vs double dot";
        ASSERT_LE(std::fabs(double(yc[o]) - exact), tol) << where << " cpu vs double dot";
      }
    }
  }
}

class BlockqFormat : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(BlockqFormat, CpuMatchesReference) {
  const WeightFormat f = GetParam();
  uint32_t seed = 100;
  for (int64_t k : {32, 64, 896, 4864})
    for (int64_t n : {1, 7, 151})
      for (int64_t m : {1, 3, 37, 64}) {
        if (m * n * k > 30'000'000) continue;  // keeps the reference's double loops quick
        check_against_reference(f, {m, n, k, (m + n) % 2 == 0}, seed++);
        if (HasFailure()) return;
      }
  // Larger K with a bias both ways, and K not a multiple of 8 for the float formats (the scalar tail).
  check_against_reference(f, {5, 13, 4864, true}, seed++);
  check_against_reference(f, {5, 13, 4864, false}, seed++);
  if (f == WeightFormat::f32 || f == WeightFormat::f16 || f == WeightFormat::bf16) {
    check_against_reference(f, {3, 5, 13, true}, seed++);
    check_against_reference(f, {6, 9, 7, false}, seed++);
  }
}

// Every output row is bit-identical whether it is computed alone (decode), in a batch of 3, 37 or 64 rows, or with
// 1 or 2 threads; 3-D x gives the same rows too.
TEST_P(BlockqFormat, BatchAndThreadInvariant) {
  const WeightFormat f = GetParam();
  const bool quant = f == WeightFormat::q8_0 || f == WeightFormat::q4_0;
  const int64_t k = quant ? 896 : 900, n = quant ? 999 : 151, m = 64;  // several column chunks in every format
  const auto xv = random_floats(static_cast<size_t>(m * k), 7, 3.0f);
  const Tensor x = floats(xv, {m, k});
  const Tensor w = random_weight(f, n, k, 8);
  const Tensor bias = floats(random_floats(static_cast<size_t>(n), 9), {n});
  const std::string name(llm_ops::format_name(f));
  BackendScope s(Backend::cpu);
  const int saved = num_threads();
  set_threads(2);
  const Tensor y64 = ops::linear_blockq(x, w, name, bias);
  set_threads(1);
  const Tensor y64_1 = ops::linear_blockq(x, w, name, bias);
  set_threads(saved);
  EXPECT_TRUE(y64.bit_equal(y64_1)) << name << ": 2 threads vs 1";
  const auto all = values(y64);
  auto rows_equal = [&](const Tensor& y, int64_t first, const std::string& what) {
    const auto v = values(y);
    const int64_t rows = y.numel() / n;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) {
        const float a = v[static_cast<size_t>(r * n + j)], b = all[static_cast<size_t>((first + r) * n + j)];
        ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << name << " " << what << ": row " << first + r << " col " << j << " "
                                             << a << " vs " << b << " (M=64)";
      }
  };
  for (int64_t r : {0, 1, 5, 36, 63}) rows_equal(ops::linear_blockq(x.slice(0, r, r + 1), w, name, bias), r, "M=1");
  rows_equal(ops::linear_blockq(x.slice(0, 0, 37).contiguous(), w, name, bias), 0, "M=37");
  rows_equal(ops::linear_blockq(x.slice(0, 27, 64).contiguous(), w, name, bias), 27, "M=37 (rows 27..63)");
  rows_equal(ops::linear_blockq(x.slice(0, 10, 13).contiguous().view({1, 3, k}), w, name, bias), 10, "[1,3,K]");
  // 2..17 rows: the decode steps of a continuous batch (AVX-512 runs 2..16 rows on the few-rows decode tiles: Q8_0's
  // and the float formats' paired ones, odd counts padded).
  for (int64_t mm : {2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17})
    rows_equal(ops::linear_blockq(x.slice(0, 40, 40 + mm).contiguous(), w, name, bias), 40, "M=" + std::to_string(mm));
  set_threads(1);
  rows_equal(ops::linear_blockq(x.slice(0, 2, 39).contiguous(), w, name, bias), 2, "M=37, 1 thread");
  set_threads(saved);
}

// On CPUs with AVX-512 VNNI the kernel runs the AVX-512 build of its tiles (backend/cpu/blockq_avx512.cpp); it
// must give the AVX2 build's bits (SPORE_BLOCKQ_ISA=avx2) for every element: decode rows, prefill row blocks and
// their remainders, every tile width and column remainder (N = 999 and 13), K with and without a float tail.
TEST_P(BlockqFormat, Avx512BuildGivesAvx2Bits) {
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")))
    GTEST_SKIP() << "this CPU has no AVX-512 VNNI: only the AVX2 build runs here";
  const WeightFormat f = GetParam();
  const bool quant = f == WeightFormat::q8_0 || f == WeightFormat::q4_0;
  const std::string name(llm_ops::format_name(f));
  BackendScope s(Backend::cpu);
  uint32_t seed = 300;
  for (int64_t k : quant ? std::vector<int64_t>{32, 896} : std::vector<int64_t>{13, 900})
    for (int64_t n : {13, 999})
      for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 37, 64}) {
        const Tensor x = floats(random_floats(static_cast<size_t>(m * k), seed, 4.0f), {m, k});
        const Tensor w = random_weight(f, n, k, seed + 1);
        const Tensor bias = floats(random_floats(static_cast<size_t>(n), seed + 2), {n});
        ++seed;
        ASSERT_EQ(unsetenv("SPORE_BLOCKQ_ISA"), 0);
        const Tensor y512 = ops::linear_blockq(x, w, name, bias);
        ASSERT_EQ(setenv("SPORE_BLOCKQ_ISA", "avx2", 1), 0);
        const Tensor y2 = ops::linear_blockq(x, w, name, bias);
        ASSERT_EQ(unsetenv("SPORE_BLOCKQ_ISA"), 0);
        const auto a = values(y512), b = values(y2);
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_EQ(std::memcmp(&a[i], &b[i], 4), 0)
              << name << " M=" << m << " N=" << n << " K=" << k << " y[" << i / n << "," << i % n << "] avx512 "
              << a[i] << " vs avx2 " << b[i];
      }
}

// linear_blockq_multi (the group_linear_blockq pass's node): each output is what linear_blockq gives for its weight,
// bit for bit, on both backends and both ISA builds, for decode and prefill row counts, with and without biases, for
// weights of very different sizes (Q/K/V-like: 999, 13 and 130 rows) and one weight alone; with epilogue silu_mul,
// what mul(silu(gate), up) gives.
TEST_P(BlockqFormat, MultiMatchesSeparateCalls) {
  const WeightFormat f = GetParam();
  const bool quant = f == WeightFormat::q8_0 || f == WeightFormat::q4_0;
  const std::string name(llm_ops::format_name(f));
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  uint32_t seed = 500;
  const int64_t k = quant ? 896 : 900;
  for (const std::vector<int64_t>& ns : {std::vector<int64_t>{999, 13, 130}, std::vector<int64_t>{37}})
    for (int64_t m : {1, 5, 37})
      for (bool with_bias : {false, true})
        for (Backend b : {Backend::cpu, Backend::reference})
          for (const char* isa : {"", "avx2"}) {
            if (b == Backend::reference && (*isa != 0 || m > 5)) continue;
            if (*isa != 0 && !avx512) continue;
            const Tensor x = floats(random_floats(static_cast<size_t>(m * k), seed, 3.0f), {m, k});
            std::vector<Tensor> ws, bs;
            for (int64_t n : ns) {
              ws.push_back(random_weight(f, n, k, seed + 1 + static_cast<uint32_t>(n)));
              if (with_bias) bs.push_back(floats(random_floats(static_cast<size_t>(n), seed + 2), {n}));
            }
            ++seed;
            if (*isa != 0) {
              ASSERT_EQ(setenv("SPORE_BLOCKQ_ISA", isa, 1), 0);
            }
            BackendScope s(b);
            const std::vector<Tensor> ys = ops::linear_blockq_multi(x, ws, name, bs);
            ASSERT_EQ(ys.size(), ws.size());
            for (size_t i = 0; i < ws.size(); ++i) {
              const Tensor one = ops::linear_blockq(x, ws[i], name, with_bias ? std::optional<Tensor>(bs[i]) : std::nullopt);
              ASSERT_EQ(ys[i].shape(), one.shape());
              EXPECT_TRUE(ys[i].bit_equal(one)) << name << " " << backend_name(b) << " isa '" << isa << "' M=" << m
                                                << " weight " << i << " (N=" << ns[i] << ") bias=" << with_bias;
            }
            ASSERT_EQ(unsetenv("SPORE_BLOCKQ_ISA"), 0);
          }
  // epilogue silu_mul: what mul(silu(gate), up) gives on the same backend, bit for bit.
  for (int64_t m : {1, 6, 37})
    for (Backend b : {Backend::cpu, Backend::reference})
      for (const char* isa : {"", "avx2"}) {
        if ((b == Backend::reference && *isa != 0) || (*isa != 0 && !avx512)) continue;
        const Tensor x = floats(random_floats(static_cast<size_t>(m * k), seed, 3.0f), {m, k});
        const std::vector<Tensor> ws{random_weight(f, 130, k, seed + 1), random_weight(f, 130, k, seed + 2)};
        ++seed;
        if (*isa != 0) {
          ASSERT_EQ(setenv("SPORE_BLOCKQ_ISA", isa, 1), 0);
        }
        BackendScope s(b);
        const std::vector<Tensor> y = ops::linear_blockq_multi(x, ws, name, {}, "silu_mul");
        ASSERT_EQ(y.size(), 1u);
        const Tensor want = ops::mul(ops::silu(ops::linear_blockq(x, ws[0], name)), ops::linear_blockq(x, ws[1], name));
        EXPECT_TRUE(y[0].bit_equal(want)) << name << " silu_mul " << backend_name(b) << " isa '" << isa << "' M=" << m;
        ASSERT_EQ(unsetenv("SPORE_BLOCKQ_ISA"), 0);
      }
}

INSTANTIATE_TEST_SUITE_P(Formats, BlockqFormat, ::testing::ValuesIn(all_formats),
                         [](const ::testing::TestParamInfo<WeightFormat>& i) {
                           return std::string(llm_ops::format_name(i.param));
                         });

// Activation rounding, checked exactly on one-hot weights: block 0 has amax 127, so d = 1, 127/amax = 1 and q = x
// rounded to nearest, ties to even as llama.cpp's x86 quantize_row_q8_0 (2.5 -> 2, -2.5 -> -2, 0.5 -> 0, 3.5 -> 4);
// block 1 is all zeros (d = 0, q = 0); block 2 has amax 254 (d = 2): q = x / 2 rounded (5 -> 2.5 -> 2). A one-hot weight row (d = 0.5, a single 2) picks d_x * q_x of one position.
TEST(Blockq, ActivationsRoundLikeLlamaCpp) {
  std::vector<float> x(96, 0.0f);
  const std::vector<std::pair<int, float>> set = {{0, 127.0f},  {1, 2.5f},  {2, -2.5f},   {3, 0.5f},   {4, -0.5f},
                                                  {5, 1.49f},   {6, -126.5f}, {17, 3.5f}, {31, -1.5f}, {64, 254.0f},
                                                  {65, 5.0f},   {66, -3.0f},  {90, 2.9f}};
  for (auto [i, v] : set) x[static_cast<size_t>(i)] = v;
  const std::vector<std::pair<int, float>> expect = {{0, 127},  {1, 2},  {2, -2},   {3, 0},   {4, 0},   {5, 1},
                                                     {6, -126}, {17, 4}, {31, -2},  {40, 0},  {64, 254}, {65, 4},
                                                     {66, -4},  {90, 2}, {91, 0}};
  const int64_t n = static_cast<int64_t>(expect.size());
  for (WeightFormat f : {WeightFormat::q8_0, WeightFormat::q4_0}) {
    const int64_t bb = f == WeightFormat::q8_0 ? 34 : 18;
    Tensor w = Tensor::zeros({n, 3 * bb}, DType::u8);
    auto* p = w.data<uint8_t>();
    for (int64_t r = 0; r < n; ++r) {
      const int pos = expect[static_cast<size_t>(r)].first;
      for (int b = 0; b < 3; ++b) {
        uint8_t* blk = p + r * 3 * bb + b * bb;
        put_u16(blk, float_to_half_bits(0.5f));
        if (f == WeightFormat::q4_0) std::memset(blk + 2, 0x88, 16);  // all nibbles 8: value 0
      }
      const int b = pos / 32, j = pos % 32;
      uint8_t* blk = p + r * 3 * bb + b * bb;
      if (f == WeightFormat::q8_0) blk[2 + j] = 2;
      else blk[2 + (j & 15)] = static_cast<uint8_t>(j < 16 ? (blk[2 + (j & 15)] & 0xf0) | 10 : (blk[2 + (j & 15)] & 0x0f) | 0xa0);
    }
    for (Backend be : {Backend::cpu, Backend::reference}) {
      BackendScope s(be);
      const auto y = values(ops::linear_blockq(floats(x, {1, 96}), w, llm_ops::format_name(f)));
      for (int64_t r = 0; r < n; ++r)
        EXPECT_EQ(y[static_cast<size_t>(r)], expect[static_cast<size_t>(r)].second)
            << llm_ops::format_name(f) << " " << backend_name(be) << " x[" << expect[static_cast<size_t>(r)].first
            << "] = " << x[static_cast<size_t>(expect[static_cast<size_t>(r)].first)];
    }
  }
}

// f16/bf16 weights: x is rounded to the weight dtype exactly as base/half.h does (nearest even: ties, subnormals),
// in the vector body and the scalar tail alike. Identity weights make y[n] = rounded(x[n]) exactly.
TEST(Blockq, FloatActivationsRoundToNearestEven) {
  const int64_t k = 19;  // 16 through the vector body, 3 through the tail
  std::vector<float> x(static_cast<size_t>(k));
  const float h = std::ldexp(1.0f, -11), b = std::ldexp(1.0f, -8);
  const std::vector<float> special = {1 + h, 1 + 3 * h, -(1 + h), 3e-6f, -7.5e-7f, 1 + b, 1 + 3 * b, -(1 + b), 65519.0f,
                                      1.0f / 3};
  for (int64_t i = 0; i < k; ++i) x[i] = special[static_cast<size_t>(i) % special.size()] * (i >= 10 ? -1.0f : 1.0f);
  std::vector<double> eye(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) eye[static_cast<size_t>(i * k + i)] = 1.0;
  for (WeightFormat f : {WeightFormat::f16, WeightFormat::bf16}) {
    const Tensor w = Tensor::from_doubles(eye, {k, k}, llm_ops::weight_dtype(f));
    for (Backend be : {Backend::cpu, Backend::reference}) {
      BackendScope s(be);
      const auto y = values(ops::linear_blockq(floats(x, {1, k}), w, llm_ops::format_name(f)));
      for (int64_t i = 0; i < k; ++i) {
        const float want = rounded(f, x[static_cast<size_t>(i)]);
        EXPECT_EQ(std::memcmp(&y[static_cast<size_t>(i)], &want, 4), 0)
            << llm_ops::format_name(f) << " " << backend_name(be) << " x[" << i << "] = " << x[static_cast<size_t>(i)]
            << ": got " << y[static_cast<size_t>(i)] << ", want " << want;
      }
    }
  }
}

// Empty extents: K = 0 leaves only the bias, M = 0 or N = 0 give empty outputs.
TEST(Blockq, EmptyShapes) {
  const Tensor bias = floats({0.5f, -1.0f, 2.0f}, {3});
  for (Backend be : {Backend::cpu, Backend::reference}) {
    BackendScope s(be);
    const Tensor y = ops::linear_blockq(Tensor::zeros({2, 0}, DType::f32), Tensor::zeros({3, 0}, DType::f32), "f32", bias);
    EXPECT_EQ(values(y), (std::vector<float>{0.5f, -1.0f, 2.0f, 0.5f, -1.0f, 2.0f})) << backend_name(be);
    const Tensor wq = random_weight(WeightFormat::q4_0, 3, 64, 5);
    EXPECT_EQ(ops::linear_blockq(Tensor::zeros({0, 64}, DType::f32), wq, "q4_0").shape(), (Shape{0, 3}));
    EXPECT_EQ(ops::linear_blockq(Tensor::zeros({2, 64}, DType::f32), Tensor::zeros({0, 68}, DType::u8), "q8_0").shape(),
              (Shape{2, 0}));
  }
}

TEST(Blockq, EmbedRowsAreExact) {
  const int64_t v = 37, k = 96;
  for (WeightFormat f : all_formats) {
    const Tensor w = random_weight(f, v, k, 21);
    const auto wd = dequantized(f, w, k);
    const std::vector<int64_t> idv = {0, 36, 5, 5, 17, 36};
    for (DType idt : {DType::i64, DType::i32}) {
      const Tensor ids = Tensor::from_doubles(std::vector<double>(idv.begin(), idv.end()), {2, 3}, idt);
      for (Backend be : {Backend::cpu, Backend::reference}) {
        BackendScope s(be);
        const Tensor y = ops::embed_blockq(w, ids, llm_ops::format_name(f));
        ASSERT_EQ(y.shape(), (Shape{2, 3, k}));
        const auto yv = values(y);
        for (size_t i = 0; i < idv.size(); ++i)
          for (int64_t j = 0; j < k; ++j)
            ASSERT_EQ(yv[i * k + j], wd[static_cast<size_t>(idv[i] * k + j)])
                << llm_ops::format_name(f) << " " << backend_name(be) << " " << dtype_name(idt) << " id " << idv[i];
      }
    }
    // A 0-d id gives one row [K]; no ids give [0, K].
    BackendScope s(Backend::cpu);
    EXPECT_EQ(ops::embed_blockq(w, Tensor::from_vector<int64_t>({3}, {}), llm_ops::format_name(f)).shape(), (Shape{k}));
    EXPECT_EQ(ops::embed_blockq(w, Tensor::from_vector<int32_t>({}, {0}), llm_ops::format_name(f)).shape(),
              (Shape{0, k}));
  }
}

TEST(Blockq, BadInputsGiveClearErrors) {
  using testing::error_of;
  const Tensor x = floats(random_floats(64, 1), {1, 64});
  const Tensor wq = random_weight(WeightFormat::q8_0, 3, 64, 2);
  for (Backend be : {Backend::cpu, Backend::reference}) {
    BackendScope s(be);
    EXPECT_NE(error_of([&] { ops::linear_blockq(x, wq, "q5_1"); }).find("format 'q5_1' is not one of"), std::string::npos);
    // 35 bytes is not a whole number of 34-byte blocks.
    const Tensor w35 = Tensor::zeros({3, 35}, DType::u8);
    EXPECT_NE(error_of([&] { ops::linear_blockq(x, w35, "q8_0"); }).find("35 bytes is not a whole number of blocks"),
              std::string::npos);
    // K mismatch: x has 64 values, the weight rows hold 32.
    const Tensor w32 = random_weight(WeightFormat::q4_0, 3, 32, 3);
    const std::string km = error_of([&] { ops::linear_blockq(x, w32, "q4_0"); });
    EXPECT_NE(km.find("K=64"), std::string::npos) << km;
    EXPECT_NE(km.find("rows of 32 values"), std::string::npos) << km;
    // A typed weight of the wrong dtype for the format.
    const Tensor wf16 = random_weight(WeightFormat::f16, 3, 64, 4);
    EXPECT_NE(error_of([&] { ops::linear_blockq(x, wf16, "f32"); }).find("format f32 needs a f32 weight"), std::string::npos);
    // Bias of the wrong size.
    EXPECT_NE(error_of([&] { ops::linear_blockq(x, wq, "q8_0", floats({1, 2}, {2})); }).find("bias must be f32 [3]"),
              std::string::npos);
    // Ids out of range, both ways; the message names the id, its index and the table size.
    const std::string e1 = error_of([&] { ops::embed_blockq(wq, Tensor::from_vector<int64_t>({0, 2, 3}, {3}), "q8_0"); });
    EXPECT_NE(e1.find("id 3 at index 2 is out of range for a table of 3 rows"), std::string::npos) << e1;
    const std::string e2 = error_of([&] { ops::embed_blockq(wq, Tensor::from_vector<int32_t>({1, -1}, {2}), "q8_0"); });
    EXPECT_NE(e2.find("id -1 at index 1"), std::string::npos) << e2;
    EXPECT_NE(error_of([&] { ops::embed_blockq(wq, Tensor::from_vector<float>({0}, {1}), "q8_0"); }).find("ids must be i64 or i32"),
              std::string::npos);
    // linear_blockq_multi: the weight whose K differs is named by its input index; biases are all or none.
    const std::string mk = error_of([&] { ops::linear_blockq_multi(x, {wq, random_weight(WeightFormat::q8_0, 3, 32, 5)}, "q8_0"); });
    EXPECT_NE(mk.find("(input 2)"), std::string::npos) << mk;
    const std::string mb = error_of([&] { ops::linear_blockq_multi(x, {wq, wq}, "q8_0", {floats({1, 2, 3}, {3})}); });
    EXPECT_NE(mb.find("count 2 needs 3 inputs"), std::string::npos) << mb;
    const std::string me = error_of([&] { ops::linear_blockq_multi(x, {wq, wq, wq}, "q8_0", {}, "silu_mul"); });
    EXPECT_NE(me.find("epilogue silu_mul needs count 2"), std::string::npos) << me;
    const std::string mn = error_of(
        [&] { ops::linear_blockq_multi(x, {wq, random_weight(WeightFormat::q8_0, 5, 64, 6)}, "q8_0", {}, "silu_mul"); });
    EXPECT_NE(mn.find("gate and up of one size"), std::string::npos) << mn;
    EXPECT_NE(error_of([&] { ops::linear_blockq_multi(x, {wq, wq}, "q8_0", {}, "gelu"); }).find("epilogue 'gelu'"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace spore
