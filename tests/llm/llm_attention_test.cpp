// rope and attention_kv (ops/llm_ops.h): the CPU kernels against the reference and against direct formulas, the
// CPU rope's llama.cpp-style float angles, attention_kv's batch invariance (a prefill row has the bits of the same
// token decoded alone over the cache, in any chunking, on 1 or 2 threads) for f32/f16/bf16 and int8 caches, the int8
// row quantization (ops/llm_kv_quant.h) on crafted rows, and the errors for bad positions/heads/scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "base/half.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "ops/llm_kv_quant.h"
#include "ops/llm_ops.h"
#include "ops/ops.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

// Values in [-1, 1) from Philox stream `stream`.
std::vector<float> rand_vec(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = 2.0f * philox_uniform(2024, stream, static_cast<uint64_t>(i)) - 1.0f;
  return v;
}

Tensor f32_tensor(const std::vector<float>& v, Shape shape) { return Tensor::from_vector<float>(v, std::move(shape)); }
Tensor positions(int64_t p0, int64_t t) {
  std::vector<int64_t> p(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) p[i] = p0 + i;
  return Tensor::from_vector<int64_t>(p, {t});
}

std::vector<float> floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data<float>(), v.size() * sizeof(float));
  return v;
}

// A value as stored in a cache of dtype dt.
float round_to(DType dt, float v) {
  if (dt == DType::f16) return half_bits_to_float(float_to_half_bits(v));
  if (dt == DType::bf16) return bf16_bits_to_float(float_to_bf16_bits(v));
  return v;
}
// Writes v into element i of a cache tensor (f32, or f16/bf16 bits rounded to nearest even).
void store(Tensor& cache, int64_t i, float v) {
  if (cache.dtype() == DType::f16) static_cast<uint16_t*>(cache.raw_data())[i] = float_to_half_bits(v);
  else if (cache.dtype() == DType::bf16) static_cast<uint16_t*>(cache.raw_data())[i] = float_to_bf16_bits(v);
  else cache.data<float>()[i] = v;
}
// Writes row (g, j) of an int8 cache [hkv, ctx, d] and its scale [hkv, ctx] from d floats, as llm::KvCache does.
void store_i8_row(Tensor& cache, Tensor& scales, int64_t g, int64_t j, const float* x) {
  const int64_t ctx = cache.shape()[1], d = cache.shape()[2];
  scales.data<float>()[g * ctx + j] =
      llm_ops::kv_quantize_row(x, d, static_cast<int8_t*>(cache.raw_data()) + (g * ctx + j) * d);
}
// A [hkv, ctx, d] cache whose rows before p0 hold random values and whose other rows hold NaN, so that reading a row
// that is not there yet poisons the result. For i8, *scales gets the [hkv, ctx] row scales (NaN past p0).
Tensor make_cache(DType dt, int64_t hkv, int64_t ctx, int64_t d, int64_t p0, uint64_t stream,
                  std::optional<Tensor>* scales = nullptr) {
  Tensor c = Tensor::empty({hkv, ctx, d}, dt);
  const std::vector<float> v = rand_vec(hkv * ctx * d, stream);
  if (dt == DType::i8) {
    Tensor sc = Tensor::empty({hkv, ctx}, DType::f32);
    const std::vector<float> nan_row(static_cast<size_t>(d), NAN);
    for (int64_t g = 0; g < hkv; ++g)
      for (int64_t j = 0; j < ctx; ++j)
        store_i8_row(c, sc, g, j, j < p0 ? v.data() + (g * ctx + j) * d : nan_row.data());
    *scales = sc;
    return c;
  }
  for (int64_t g = 0; g < hkv; ++g)
    for (int64_t j = 0; j < ctx; ++j)
      for (int64_t e = 0; e < d; ++e) {
        const int64_t i = (g * ctx + j) * d + e;
        store(c, i, j < p0 ? v[i] : NAN);
      }
  return c;
}

struct ThreadsGuard {
  int saved = num_threads();
  ~ThreadsGuard() { set_threads(saved); }
};

// ---------------------------------------------------------------------------------------------------------------
// rope

TEST(LlmRope, MatchesTheFormulaOnAHandExample) {
  init();
  // x [1 token, 1 head, 6]: dim 4 rotates pairs of the first 4 values, the last 2 are copied.
  const std::vector<float> x = {0.5f, -1.25f, 2.0f, 0.75f, 3.0f, -4.0f};
  const int64_t p = 3;
  const double theta = 10000.0;
  for (const char* mode : {"normal", "neox"}) {
    const bool neox = std::string(mode) == "neox";
    std::vector<double> want(x.begin(), x.end());
    for (int i = 0; i < 2; ++i) {
      const double angle = p * std::pow(theta, -2.0 * i / 4.0);
      const int a = neox ? i : 2 * i, b = neox ? i + 2 : 2 * i + 1;
      want[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
      want[b] = x[a] * std::sin(angle) + x[b] * std::cos(angle);
    }
    for (Backend be : {Backend::reference, Backend::cpu}) {
      BackendScope scope(be);
      const std::vector<float> got = floats(ops::rope(f32_tensor(x, {1, 1, 6}), positions(p, 1), theta, mode, 4));
      for (int e = 0; e < 6; ++e)
        EXPECT_NEAR(got[e], want[e], 1e-6) << mode << " " << backend_name(be) << " element " << e;
      EXPECT_EQ(got[4], x[4]);
      EXPECT_EQ(got[5], x[5]);
    }
  }
}

struct RopeCase {
  const char* mode;
  int64_t d, dim;
  double theta, freq_scale;
  bool freq_factors;
};

const RopeCase rope_cases[] = {
    {"normal", 64, 0, 10000.0, 1.0, false},  {"neox", 64, 0, 10000.0, 1.0, false},
    {"normal", 128, 64, 500000.0, 1.0, true}, {"neox", 128, 64, 500000.0, 0.25, true},
    {"normal", 80, 40, 10000.0, 0.5, false},  {"neox", 80, 40, 1000000.0, 1.0, true},
    {"neox", 6, 2, 10000.0, 1.0, false},
};
const std::vector<int64_t> rope_positions = {0, 1, 2, 17, 255, 1000, 3999, 4000, 4095};

// The CPU kernel takes its angles the way llama.cpp does (float recurrence, see backend/cpu/llm_attention.cpp):
// against the exact double angles of the reference the angle error grows with the position, by about
// p * (i + 1) * 2^-24 * theta^(-2i/dim) for pair i; measured, |cpu - ref| stays under 6e-8 * (p + 1) (2.4e-4 at
// p = 4000, x in [-1, 1)). The bound below, 1e-6 + 2e-7 * p, leaves a 3x margin and is still far below what a wrong
// pair layout, sign or frequency would give.
TEST(LlmRope, CpuMatchesReference) {
  init();
  const int64_t h = 3;
  const int64_t t = static_cast<int64_t>(rope_positions.size());
  for (const RopeCase& c : rope_cases) {
    const int64_t rd = c.dim ? c.dim : c.d;
    const Tensor x = f32_tensor(rand_vec(t * h * c.d, 1), {t, h, c.d});
    const Tensor pos = Tensor::from_vector<int64_t>(rope_positions, {t});
    std::optional<Tensor> ff;
    if (c.freq_factors) {
      std::vector<float> f(static_cast<size_t>(rd / 2));
      for (size_t i = 0; i < f.size(); ++i) f[i] = 1.0f + static_cast<float>(i % 5);  // 1..5, like Llama 3.1's 1..8
      ff = f32_tensor(f, {rd / 2});
    }
    Tensor ref, cpu;
    {
      BackendScope scope(Backend::reference);
      ref = ops::rope(x, pos, c.theta, c.mode, c.dim, c.freq_scale, ff);
    }
    {
      BackendScope scope(Backend::cpu);
      cpu = ops::rope(x, pos, c.theta, c.mode, c.dim, c.freq_scale, ff);
    }
    const std::vector<float> r = floats(ref), g = floats(cpu), xv = floats(x);
    for (int64_t i = 0; i < t; ++i) {
      const double tol = 1e-6 + 2e-7 * static_cast<double>(rope_positions[i]);
      for (int64_t e = 0; e < h * c.d; ++e) {
        const int64_t k = i * h * c.d + e;
        ASSERT_NEAR(g[k], r[k], tol) << c.mode << " d=" << c.d << " dim=" << c.dim << " position "
                                     << rope_positions[i] << " element " << e;
        if (e % c.d >= rd) {
          ASSERT_EQ(g[k], xv[k]) << "unrotated dims are copied";
        }
      }
    }
  }
}

// The angles follow llama.cpp's float recurrence: with the test computing them the same way (and rotating in
// double), the CPU result is within a couple of f32 ulps at every position, large ones included.
TEST(LlmRope, CpuAnglesFollowLlamaCpp) {
  init();
  BackendScope scope(Backend::cpu);
  const int64_t h = 2;
  const int64_t t = static_cast<int64_t>(rope_positions.size());
  for (const RopeCase& c : rope_cases) {
    const int64_t rd = c.dim ? c.dim : c.d, half = rd / 2;
    const bool neox = std::string(c.mode) == "neox";
    const std::vector<float> x = rand_vec(t * h * c.d, 2);
    std::vector<float> f(static_cast<size_t>(half), 1.0f);
    if (c.freq_factors) {
      for (int64_t i = 0; i < half; ++i) f[i] = 1.0f + 0.5f * static_cast<float>(i % 3);
    }
    std::optional<Tensor> ff;
    if (c.freq_factors) ff = f32_tensor(f, {half});
    const Tensor y = ops::rope(f32_tensor(x, {t, h, c.d}), Tensor::from_vector<int64_t>(rope_positions, {t}), c.theta,
                               c.mode, c.dim, c.freq_scale, ff);
    const std::vector<float> g = floats(y);
    const float theta_scale = std::pow(static_cast<float>(c.theta), -2.0f / static_cast<float>(rd));
    for (int64_t i = 0; i < t; ++i) {
      float th = static_cast<float>(rope_positions[i]);
      for (int64_t p = 0; p < half; ++p) {
        const float angle = static_cast<float>(c.freq_scale) * (th / f[p]);
        const double cs = std::cos(angle), sn = std::sin(angle);
        th *= theta_scale;
        for (int64_t hh = 0; hh < h; ++hh) {
          const int64_t base = (i * h + hh) * c.d;
          const int64_t ia = base + (neox ? p : 2 * p), ib = base + (neox ? p + half : 2 * p + 1);
          const double wa = x[ia] * cs - x[ib] * sn, wb = x[ia] * sn + x[ib] * cs;
          ASSERT_NEAR(g[ia], wa, 4e-7) << c.mode << " position " << rope_positions[i] << " pair " << p;
          ASSERT_NEAR(g[ib], wb, 4e-7) << c.mode << " position " << rope_positions[i] << " pair " << p;
        }
      }
    }
  }
}

TEST(LlmRope, NegativePositionIsAnError) {
  init();
  const Tensor x = f32_tensor(rand_vec(3 * 2 * 8, 3), {3, 2, 8});
  const Tensor pos = Tensor::from_vector<int64_t>({4, 5, -1}, {3});
  for (Backend be : {Backend::reference, Backend::cpu}) {
    BackendScope scope(be);
    const std::string msg = testing::error_of([&] { ops::rope(x, pos, 10000.0, "normal"); });
    EXPECT_NE(msg.find("positions[2] = -1"), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// attention_kv

struct KvInputs {
  Tensor q, kc, vc, kn, vn, pos;
  std::optional<Tensor> ks, vs;  // i8 caches: row scales [Hkv, C]
};

KvInputs make_kv(DType dt, int64_t t, int64_t hq, int64_t hkv, int64_t d, int64_t ctx, int64_t p0, uint64_t stream) {
  KvInputs in;
  in.q = f32_tensor(rand_vec(t * hq * d, stream), {t, hq, d});
  in.kc = make_cache(dt, hkv, ctx, d, p0, stream + 1, &in.ks);
  in.vc = make_cache(dt, hkv, ctx, d, p0, stream + 2, &in.vs);
  in.kn = f32_tensor(rand_vec(t * hkv * d, stream + 3), {t, hkv, d});
  in.vn = f32_tensor(rand_vec(t * hkv * d, stream + 4), {t, hkv, d});
  in.pos = positions(p0, t);
  return in;
}

Tensor run_kv(const KvInputs& in, double scale) {
  return ops::attention_kv(in.q, in.kc, in.vc, in.kn, in.vn, in.pos, scale, in.ks, in.vs);
}

// A copy whose caches (and scales) can be appended to without touching `in`'s.
KvInputs clone_caches(const KvInputs& in) {
  KvInputs c = in;
  c.kc = in.kc.clone();
  c.vc = in.vc.clone();
  if (in.ks) c.ks = in.ks->clone();
  if (in.vs) c.vs = in.vs->clone();
  return c;
}

// CPU vs reference (double): the outputs are convex combinations of values in [-1, 1]; the CPU sums in f32 with a
// 1.3 ulp exp and stays within 7.5e-7 of the reference here, so 4e-6 leaves a 5x margin, while a wrong key, head or
// mask is off by ~1e-2 or more. i8 caches: the reference sums the dequantized values s * q, the CPU applies each
// row's scale once to the row's f32 sum; same bound (measured 8.6e-7), while a wrong or missing row scale is off by
// the 1/127 step, ~1e-2.
TEST(LlmAttentionKv, CpuMatchesReference) {
  init();
  struct Shape3 {
    int64_t d, p0, t;
  };
  const Shape3 shapes[] = {{64, 0, 1}, {64, 5, 7}, {64, 100, 64}, {128, 0, 64}, {128, 5, 1},
                           {128, 100, 7}, {40, 3, 5}, {20, 9, 4}};
  const std::pair<int64_t, int64_t> heads[] = {{4, 4}, {4, 2}, {14, 2}};
  uint64_t stream = 10;
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i8})
    for (auto [hq, hkv] : heads)
      for (const Shape3& s : shapes) {
        const int64_t ctx = s.p0 + s.t + 3;
        const KvInputs in = make_kv(dt, s.t, hq, hkv, s.d, ctx, s.p0, stream += 5);
        // Flat and peaked softmaxes (score spreads of ~0.7 and ~3).
        const double scale = (stream % 2 ? 2.0 : 9.0) / std::sqrt(static_cast<double>(s.d));
        Tensor ref, cpu;
        {
          BackendScope scope(Backend::reference);
          ref = run_kv(in, scale);
        }
        {
          BackendScope scope(Backend::cpu);
          cpu = run_kv(in, scale);
        }
        ASSERT_EQ(cpu.shape(), (Shape{s.t, hq, s.d}));
        const std::vector<float> r = floats(ref), g = floats(cpu);
        double worst = 0;
        for (size_t i = 0; i < r.size(); ++i) {
          ASSERT_TRUE(std::isfinite(g[i])) << "a row past the keys was read, element " << i;
          worst = std::max(worst, std::abs(static_cast<double>(g[i]) - r[i]));
        }
        EXPECT_LT(worst, 4e-6) << dtype_name(dt) << " Hq=" << hq << " Hkv=" << hkv << " D=" << s.d << " p0=" << s.p0
                               << " T=" << s.t;
      }
}

// Direct formulas: one key gives that key's value row (rounded to the cache dtype, of kv head h / group), exactly;
// two keys give the two-term softmax average.
TEST(LlmAttentionKv, MatchesTheFormulaOnOneAndTwoKeys) {
  init();
  const int64_t hq = 6, hkv = 2, d = 24, group = hq / hkv;
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (Backend be : {Backend::reference, Backend::cpu}) {
      BackendScope scope(be);
      // p0 = 0, T = 1: the only key is the new one.
      KvInputs one = make_kv(dt, 1, hq, hkv, d, 4, 0, 500);
      const std::vector<float> y1 = floats(run_kv(one, 0.3)), vn1 = floats(one.vn);
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t e = 0; e < d; ++e)
          ASSERT_EQ(y1[h * d + e], round_to(dt, vn1[(h / group) * d + e]))
              << dtype_name(dt) << " " << backend_name(be) << " head " << h;
      // p0 = 1, T = 1: key 0 from the cache, key 1 new.
      KvInputs two = make_kv(dt, 1, hq, hkv, d, 4, 1, 600);
      const std::vector<float> y2 = floats(run_kv(two, 0.3)), q = floats(two.q), kn = floats(two.kn),
                               vn = floats(two.vn);
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / group;
        double s0 = 0, s1 = 0;
        for (int64_t e = 0; e < d; ++e) {
          s0 += q[h * d + e] * two.kc.item_at((g * 4 + 0) * d + e);
          s1 += q[h * d + e] * static_cast<double>(round_to(dt, kn[g * d + e]));
        }
        const double w1 = 1.0 / (1.0 + std::exp(0.3 * (s0 - s1)));
        for (int64_t e = 0; e < d; ++e) {
          const double want =
              (1 - w1) * two.vc.item_at((g * 4 + 0) * d + e) + w1 * static_cast<double>(round_to(dt, vn[g * d + e]));
          ASSERT_NEAR(y2[h * d + e], want, 2e-6) << dtype_name(dt) << " " << backend_name(be) << " head " << h;
        }
      }
    }
}

// Rows [t0, t0 + n) of a [T, ...] f32 tensor as a new tensor.
Tensor rows(const Tensor& x, int64_t t0, int64_t n) {
  Shape s = x.shape();
  const int64_t row = x.numel() / s[0];
  s[0] = n;
  const float* p = x.data<float>() + t0 * row;
  return f32_tensor(std::vector<float>(p, p + n * row), s);
}
// Writes rows [0, n) of k_new [n, Hkv, D] into cache rows [p0, p0 + n), as a KV cache does after a call (i8: each
// row quantized, its scale into `scales`).
void append(Tensor& cache, std::optional<Tensor>& scales, const Tensor& fresh, int64_t p0) {
  const int64_t n = fresh.shape()[0], hkv = fresh.shape()[1], d = fresh.shape()[2], ctx = cache.shape()[1];
  const float* f = fresh.data<float>();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < hkv; ++g) {
      if (cache.dtype() == DType::i8) {
        store_i8_row(cache, *scales, g, p0 + t, f + (t * hkv + g) * d);
        continue;
      }
      for (int64_t e = 0; e < d; ++e) store(cache, (g * ctx + p0 + t) * d + e, f[(t * hkv + g) * d + e]);
    }
}

// Batch invariance: a T-token prefill, the same tokens decoded one at a time (each step's new rows appended to the
// cache), and a prefill in uneven chunks give the same bits per token, on 1 and on 2 threads.
TEST(LlmAttentionKv, PrefillEqualsDecodeBitForBit) {
  init();
  ThreadsGuard guard;
  BackendScope scope(Backend::cpu);
  struct Case {
    int64_t hq, hkv, d, p0, t_n;
  };
  const Case cases[] = {{14, 2, 64, 5, 64}, {14, 2, 72, 5, 64}, {4, 4, 64, 1000, 24}, {6, 2, 40, 300, 18}};
  uint64_t stream = 900;
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i8})
    for (const auto [hq, hkv, d, p0, t_n] : cases) {
      const int64_t ctx = p0 + t_n + 7;
      const KvInputs in = make_kv(dt, t_n, hq, hkv, d, ctx, p0, stream += 5);
      const double scale = 1.0 / std::sqrt(static_cast<double>(d));
      set_threads(1);
      const Tensor prefill = run_kv(in, scale);
      const std::vector<float> want = floats(prefill);
      set_threads(2);
      EXPECT_TRUE(run_kv(in, scale).bit_equal(prefill)) << dtype_name(dt) << " Hq=" << hq << " Hkv=" << hkv << " D=" << d << " p0=" << p0 << ": 1 vs 2 threads";
      const int64_t row = hq * d;
      // One token at a time.
      KvInputs step = clone_caches(in);
      for (int64_t t = 0; t < t_n; ++t) {
        set_threads(t % 2 ? 2 : 1);
        step.q = rows(in.q, t, 1);
        step.kn = rows(in.kn, t, 1);
        step.vn = rows(in.vn, t, 1);
        step.pos = positions(p0 + t, 1);
        const std::vector<float> got = floats(run_kv(step, scale));
        ASSERT_EQ(std::memcmp(got.data(), want.data() + t * row, static_cast<size_t>(row) * sizeof(float)), 0)
            << dtype_name(dt) << " Hq=" << hq << " Hkv=" << hkv << " D=" << d << " p0=" << p0 << ": decode of token " << t << " differs from its prefill row";
        append(step.kc, step.ks, step.kn, p0 + t);
        append(step.vc, step.vs, step.vn, p0 + t);
      }
      // Three chunks (20, 20 and 24 tokens of 64).
      KvInputs chunk = clone_caches(in);
      const int64_t third = t_n / 3 + 1;
      for (auto [t0, n] : {std::pair<int64_t, int64_t>{0, third}, {third, third}, {2 * third, t_n - 2 * third}}) {
        chunk.q = rows(in.q, t0, n);
        chunk.kn = rows(in.kn, t0, n);
        chunk.vn = rows(in.vn, t0, n);
        chunk.pos = positions(p0 + t0, n);
        const std::vector<float> got = floats(run_kv(chunk, scale));
        ASSERT_EQ(std::memcmp(got.data(), want.data() + t0 * row, got.size() * sizeof(float)), 0)
            << dtype_name(dt) << " Hq=" << hq << " Hkv=" << hkv << " D=" << d << " p0=" << p0 << ": chunk at token " << t0 << " differs from the prefill rows";
        append(chunk.kc, chunk.ks, chunk.kn, p0 + t0);
        append(chunk.vc, chunk.vs, chunk.vn, p0 + t0);
      }
    }
}

TEST(LlmAttentionKv, BadPositionsAndHeadsAreErrors) {
  init();
  const int64_t hq = 4, hkv = 2, d = 16, ctx = 10;
  for (Backend be : {Backend::reference, Backend::cpu}) {
    BackendScope scope(be);
    const auto msg_with = [&](int64_t t, const Tensor& pos) {
      KvInputs in = make_kv(DType::f16, t, hq, hkv, d, ctx, 0, 700);
      in.pos = pos;
      return testing::error_of([&] { run_kv(in, 1.0); });
    };
    std::string m = msg_with(3, Tensor::from_vector<int64_t>({5, 6, 8}, {3}));
    EXPECT_NE(m.find("consecutive"), std::string::npos) << m;
    EXPECT_NE(m.find("positions[2] = 8"), std::string::npos) << m;
    m = msg_with(1, positions(11, 1));  // p0 > C
    EXPECT_NE(m.find("positions[0] = 11 is outside the cache of 10 rows"), std::string::npos) << m;
    m = msg_with(1, positions(-1, 1));
    EXPECT_NE(m.find("positions[0] = -1"), std::string::npos) << m;
    m = msg_with(3, positions(8, 3));  // rows 8..10 do not fit 10 rows
    EXPECT_NE(m.find("positions 8..10 run past the cache of 10 rows"), std::string::npos) << m;
    m = msg_with(1, positions(10, 1));  // p0 == C: nowhere to store the new row
    EXPECT_NE(m.find("run past"), std::string::npos) << m;
    EXPECT_EQ(msg_with(2, positions(8, 2)), "");  // the last rows of the cache are fine
    // 6 q heads over 4 kv heads.
    KvInputs bad = make_kv(DType::f32, 1, 6, 4, d, ctx, 0, 800);
    m = testing::error_of([&] { run_kv(bad, 1.0); });
    EXPECT_NE(m.find("multiple of kv heads"), std::string::npos) << m;
  }
}

// The pooled form (continuous batching): three sequences of different lengths and offsets, in slots 2, 0 and 3 of a
// 4-slot pool, plus padding rows, in one call. Each sequence's rows must have the bits of a single-cache call on its
// own slot (the CPU kernel), be close to the reference's pooled result, and padding rows must be 0.
TEST(LlmAttentionKv, PooledSequencesEqualSeparateCallsBitForBit) {
  init();
  const int64_t hq = 4, hkv = 2, d = 24, ctx = 40, S = 4;
  struct SeqSpec {
    int64_t slot, p0, t;
  };
  const SeqSpec seqs[] = {{2, 17, 1}, {0, 0, 6}, {3, 30, 3}};
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i8}) {
    SCOPED_TRACE(dtype_name(dt));
    // Per-slot single caches, then the pool stacks them: [S, Hkv, C, D].
    std::vector<KvInputs> single;
    for (int64_t s = 0; s < S; ++s) single.push_back(make_kv(dt, 1, hq, hkv, d, ctx, 35, 900 + 10 * s));
    const auto stack = [&](auto get) {
      std::vector<Tensor> parts;
      for (int64_t s = 0; s < S; ++s) parts.push_back(ops::unsqueeze(get(single[static_cast<size_t>(s)]), {0}));
      return ops::concat(parts, 0);
    };
    KvInputs pool;
    pool.kc = stack([](const KvInputs& x) { return x.kc; });
    pool.vc = stack([](const KvInputs& x) { return x.vc; });
    if (dt == DType::i8) {
      pool.ks = stack([](const KvInputs& x) { return *x.ks; });
      pool.vs = stack([](const KvInputs& x) { return *x.vs; });
    }
    // The batch: the three sequences' new rows, then 2 padding rows.
    const int64_t pad = 2;
    int64_t t_all = pad;
    for (const SeqSpec& q : seqs) t_all += q.t;
    std::vector<float> q_all, kn_all, vn_all;
    std::vector<int64_t> pos_all, slot_all;
    std::vector<KvInputs> alone;
    for (const SeqSpec& q : seqs) {
      KvInputs in = make_kv(dt, q.t, hq, hkv, d, ctx, q.p0, 1000 + 7 * q.slot);
      const KvInputs& c = single[static_cast<size_t>(q.slot)];
      in.kc = c.kc;
      in.vc = c.vc;
      in.ks = c.ks;
      in.vs = c.vs;
      for (const Tensor* x : {&in.q, &in.kn, &in.vn}) {
        auto& dst = x == &in.q ? q_all : x == &in.kn ? kn_all : vn_all;
        const std::vector<float> v = floats(*x);
        dst.insert(dst.end(), v.begin(), v.end());
      }
      for (int64_t i = 0; i < q.t; ++i) {
        pos_all.push_back(q.p0 + i);
        slot_all.push_back(q.slot);
      }
      alone.push_back(in);
    }
    for (int64_t i = 0; i < pad; ++i) {
      q_all.insert(q_all.end(), static_cast<size_t>(hq * d), 0.5f);
      kn_all.insert(kn_all.end(), static_cast<size_t>(hkv * d), 0.25f);
      vn_all.insert(vn_all.end(), static_cast<size_t>(hkv * d), 0.75f);
      pos_all.push_back(0);
      slot_all.push_back(-1);
    }
    const Tensor q = f32_tensor(q_all, {t_all, hq, d}), kn = f32_tensor(kn_all, {t_all, hkv, d}),
                 vn = f32_tensor(vn_all, {t_all, hkv, d});
    const Tensor pos = Tensor::from_vector<int64_t>(pos_all, {t_all}),
                 slots = Tensor::from_vector<int64_t>(slot_all, {t_all});
    const double scale = 3.0 / std::sqrt(static_cast<double>(d));
    Tensor cpu, ref;
    {
      BackendScope scope(Backend::cpu);
      cpu = ops::attention_kv(q, pool.kc, pool.vc, kn, vn, pos, scale, pool.ks, pool.vs, slots);
    }
    {
      BackendScope scope(Backend::reference);
      ref = ops::attention_kv(q, pool.kc, pool.vc, kn, vn, pos, scale, pool.ks, pool.vs, slots);
    }
    const std::vector<float> got = floats(cpu), want_ref = floats(ref);
    int64_t row = 0;
    for (size_t i = 0; i < alone.size(); ++i) {
      Tensor one;
      {
        BackendScope scope(Backend::cpu);
        one = run_kv(alone[i], scale);
      }
      const std::vector<float> w = floats(one);
      for (size_t e = 0; e < w.size(); ++e) {
        const size_t at = static_cast<size_t>(row * hq * d) + e;
        ASSERT_EQ(got[at], w[e]) << "sequence " << i << " element " << e;
        ASSERT_NEAR(got[at], want_ref[at], 4e-6) << "sequence " << i << " element " << e;
      }
      row += seqs[i].t;
    }
    for (size_t at = static_cast<size_t>(row * hq * d); at < got.size(); ++at) {
      ASSERT_EQ(got[at], 0.0f) << "padding element " << at;
      ASSERT_EQ(want_ref[at], 0.0f) << "padding element " << at;
    }
  }
}

TEST(LlmAttentionKv, BadPooledSlotsAreErrors) {
  init();
  const int64_t hq = 2, hkv = 1, d = 8, ctx = 10;
  for (Backend be : {Backend::reference, Backend::cpu}) {
    BackendScope scope(be);
    const Tensor pool = Tensor::zeros({3, hkv, ctx, d}, DType::f32);
    const auto msg = [&](std::vector<int64_t> slots, std::vector<int64_t> pos) {
      const auto t = static_cast<int64_t>(slots.size());
      const Tensor q = Tensor::zeros({t, hq, d}, DType::f32), kn = Tensor::zeros({t, hkv, d}, DType::f32);
      return testing::error_of([&] {
        ops::attention_kv(q, pool, pool, kn, kn, Tensor::from_vector<int64_t>(pos, {t}), 1.0, {}, {},
                          Tensor::from_vector<int64_t>(slots, {t}));
      });
    };
    EXPECT_EQ(msg({1, 1, 0, -1}, {4, 5, 0, 0}), "");
    std::string m = msg({1, 3}, {0, 0});
    EXPECT_NE(m.find("slots[1] = 3 is outside the pool of 3 slots"), std::string::npos) << m;
    m = msg({1, 0, 1}, {0, 0, 1});
    EXPECT_NE(m.find("slot 1 appears in two separate runs"), std::string::npos) << m;
    m = msg({2, 2}, {3, 5});
    EXPECT_NE(m.find("consecutive within a sequence: positions[1] = 5"), std::string::npos) << m;
    m = msg({0, 0}, {9, 10});
    EXPECT_NE(m.find("run past the cache of 10 rows"), std::string::npos) << m;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// int8 caches

struct QuantRow {
  std::vector<float> x;
  float scale;               // expected s
  std::vector<int8_t> q;     // expected q
};

// The row rule on crafted rows: s = max|x| / 127, q = x * (127 / max|x|) to nearest with ties to even, symmetric
// (-max|x| is -127, never -128), all-zero rows s = 0, NaN/inf rows s = NaN; the value is s * q as f32.
TEST(LlmKvInt8, QuantizeRowFollowsTheRule) {
  const float a = 127.0f / 64.0f;  // max|x| with 127 / max|x| = 64 and s = 1/64, both exact
  const std::vector<QuantRow> rows = {
      // s = 1: x * 1 exactly, so these are the ties themselves.
      {{127.0f, 2.5f, 3.5f, -0.5f, 1.5f, -2.5f, 0.49999997f, -127.0f, 0.5f, -126.5f},
       1.0f,
       {127, 2, 4, 0, 2, -2, 0, -127, 0, -126}},
      // s = 1/64: x = k/64 * 1/2 ties again after the exact multiplication by 64.
      {{a, 0.5f / 64, 1.5f / 64, -2.5f / 64, 3.5f / 64, -a, 100.25f / 64, 0.0f},
       1.0f / 64,
       {127, 0, 2, -2, 4, -127, 100, 0}},
      // The negative end is the max: -1 -> -127 (not -128); 0.5 * 127 = 63.5 is a tie -> 64.
      {{-1.0f, 0.5f, -0.5f, 0.25f}, 1.0f / 127.0f, {-127, 64, -64, 32}},
      {{0.0f, 0.0f, -0.0f, 0.0f}, 0.0f, {0, 0, 0, 0}},
      // max|x| so small that 127 / max|x| overflows f32: the ratio is taken in double, zeros stay 0.
      {{1e-38f, -1e-38f, 0.0f, 5e-39f}, 1e-38f / 127.0f, {127, -127, 0, 64}},
  };
  for (size_t r = 0; r < rows.size(); ++r) {
    const QuantRow& row = rows[r];
    const int64_t d = static_cast<int64_t>(row.x.size());
    std::vector<int8_t> q(row.x.size(), 99);
    const float s = llm_ops::kv_quantize_row(row.x.data(), d, q.data());
    EXPECT_EQ(s, row.scale) << "row " << r;
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_EQ(q[i], row.q[i]) << "row " << r << " element " << i << " x = " << row.x[i];
      EXPECT_EQ(llm_ops::kv_dequantize(q[i], s), static_cast<float>(q[i]) * s);
    }
  }
  for (const std::vector<float>& bad :
       {std::vector<float>{1.0f, NAN, 2.0f}, std::vector<float>{1.0f, -INFINITY, 0.0f}}) {
    std::vector<int8_t> q(3, 99);
    EXPECT_TRUE(std::isnan(llm_ops::kv_quantize_row(bad.data(), 3, q.data())));
    EXPECT_EQ(q, (std::vector<int8_t>{0, 0, 0}));
  }
  // Random rows: |x - s q| <= s / 2, and max|x| comes back exactly as 127 s (to f32 rounding).
  const std::vector<float> x = rand_vec(64 * 40, 77);
  std::vector<int8_t> q(64);
  for (int r = 0; r < 40; ++r) {
    const float* row = x.data() + r * 64;
    const float s = llm_ops::kv_quantize_row(row, 64, q.data());
    for (int i = 0; i < 64; ++i)
      ASSERT_LE(std::abs(row[i] - llm_ops::kv_dequantize(q[i], s)), s * 0.5001f) << "row " << r;  // + f32 rounding
  }
}

// attention_kv with an int8 cache on one and two keys: one key gives that key's value row as s * q, exactly (the new
// row quantized with the cache's rule); two keys (one crafted cache row, one new) give the two-term softmax average of
// the dequantized rows.
TEST(LlmKvInt8, AttentionMatchesTheFormulaOnOneAndTwoKeys) {
  init();
  const int64_t hq = 6, hkv = 2, d = 24, group = hq / hkv, ctx = 4;
  for (Backend be : {Backend::reference, Backend::cpu}) {
    BackendScope scope(be);
    KvInputs one = make_kv(DType::i8, 1, hq, hkv, d, ctx, 0, 1500);
    const std::vector<float> y1 = floats(run_kv(one, 0.3)), vn1 = floats(one.vn);
    for (int64_t g = 0; g < hkv; ++g) {
      std::vector<int8_t> vq(static_cast<size_t>(d));
      const float vs = llm_ops::kv_quantize_row(vn1.data() + g * d, d, vq.data());
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t e = 0; e < d; ++e)
          ASSERT_EQ(y1[h * d + e], llm_ops::kv_dequantize(vq[e], vs)) << backend_name(be) << " head " << h;
    }
    // Cache row 0 crafted: q = e - 12 (so -12..11), scales 0.05 (K) and 0.02 (V).
    KvInputs two = make_kv(DType::i8, 1, hq, hkv, d, ctx, 1, 1600);
    for (int64_t g = 0; g < hkv; ++g) {
      for (int64_t e = 0; e < d; ++e) {
        static_cast<int8_t*>(two.kc.raw_data())[(g * ctx) * d + e] = static_cast<int8_t>(e - 12 + g);
        static_cast<int8_t*>(two.vc.raw_data())[(g * ctx) * d + e] = static_cast<int8_t>(12 - e - g);
      }
      two.ks->data<float>()[g * ctx] = 0.05f;
      two.vs->data<float>()[g * ctx] = 0.02f;
    }
    const std::vector<float> y2 = floats(run_kv(two, 0.3)), q = floats(two.q), kn = floats(two.kn),
                             vn = floats(two.vn);
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / group;
      std::vector<int8_t> kq(static_cast<size_t>(d)), vq(static_cast<size_t>(d));
      const float ks = llm_ops::kv_quantize_row(kn.data() + g * d, d, kq.data());
      const float vs = llm_ops::kv_quantize_row(vn.data() + g * d, d, vq.data());
      double s0 = 0, s1 = 0;
      for (int64_t e = 0; e < d; ++e) {
        s0 += q[h * d + e] * static_cast<double>(0.05f * static_cast<float>(e - 12 + g));
        s1 += q[h * d + e] * static_cast<double>(llm_ops::kv_dequantize(kq[e], ks));
      }
      const double w1 = 1.0 / (1.0 + std::exp(0.3 * (s0 - s1)));
      for (int64_t e = 0; e < d; ++e) {
        const double want = (1 - w1) * static_cast<double>(0.02f * static_cast<float>(12 - e - g)) +
                            w1 * static_cast<double>(llm_ops::kv_dequantize(vq[e], vs));
        ASSERT_NEAR(y2[h * d + e], want, 2e-6) << backend_name(be) << " head " << h;
      }
    }
  }
}

// Scales go with an i8 cache and only with it, f32 [Hkv, C].
TEST(LlmKvInt8, MissingOrMisshapedScalesAreErrors) {
  init();
  const int64_t hq = 4, hkv = 2, d = 16, ctx = 10;
  for (Backend be : {Backend::reference, Backend::cpu}) {
    BackendScope scope(be);
    KvInputs in = make_kv(DType::i8, 1, hq, hkv, d, ctx, 3, 1700);
    EXPECT_EQ(testing::error_of([&] { run_kv(in, 1.0); }), "");
    KvInputs none = in;
    none.ks.reset();
    none.vs.reset();
    std::string m = testing::error_of([&] { run_kv(none, 1.0); });
    EXPECT_NE(m.find("an i8 cache needs k_scale and v_scale f32 [kv_heads, ctx], got 0"), std::string::npos) << m;
    KvInputs half = in;
    half.vs.reset();
    m = testing::error_of([&] { run_kv(half, 1.0); });
    EXPECT_NE(m.find("give both k_scale and v_scale"), std::string::npos) << m;
    KvInputs wrong = in;
    wrong.vs = Tensor::zeros({hkv, ctx + 1}, DType::f32);
    m = testing::error_of([&] { run_kv(wrong, 1.0); });
    EXPECT_NE(m.find("v_scale must be f32 [2, 10]"), std::string::npos) << m;
    wrong.vs = Tensor::zeros({hkv * ctx}, DType::f32);
    m = testing::error_of([&] { run_kv(wrong, 1.0); });
    EXPECT_NE(m.find("v_scale must be f32 [2, 10]"), std::string::npos) << m;
    wrong = in;
    wrong.ks = Tensor::zeros({hkv, ctx}, DType::f16);
    m = testing::error_of([&] { run_kv(wrong, 1.0); });
    EXPECT_NE(m.find("k_scale must be f32 [2, 10]"), std::string::npos) << m;
    // Scales with a float cache.
    KvInputs f = make_kv(DType::f16, 1, hq, hkv, d, ctx, 3, 1800);
    f.ks = in.ks;
    f.vs = in.vs;
    m = testing::error_of([&] { run_kv(f, 1.0); });
    EXPECT_NE(m.find("only for an i8 cache, but the cache is f16"), std::string::npos) << m;
    // An i8 cache with a float partner.
    KvInputs mixed = in;
    mixed.vc = make_cache(DType::f32, hkv, ctx, d, 3, 1900);
    m = testing::error_of([&] { run_kv(mixed, 1.0); });
    EXPECT_NE(m.find("must share a dtype of f32, f16, bf16 or i8"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace spore
