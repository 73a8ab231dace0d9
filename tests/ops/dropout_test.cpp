// dropout's offset input: element i is kept iff philox_uniform(seed, offset, i) >= p. Different offsets give
// different masks, one compiled plan with the offset as a graph input draws each step's mask, and the
// gradient regenerates the same mask (eager and traced).
#include <gtest/gtest.h>

#include "autodiff/autodiff.h"
#include "base/rng.h"
#include "ops/ops.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

Tensor rnd(Shape shape, uint64_t stream, DType dt = DType::f32) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5 + philox_uniform(99, stream, i);  // in [0.5, 1.5): never 0
  return Tensor::from_doubles(v, std::move(shape), dt);
}

Tensor off64(int64_t v) { return Tensor::from_vector<int64_t>({v}, {}); }

// Kept positions of a dropout output of an input with no zeros.
std::vector<bool> mask_of(const Tensor& y) {
  std::vector<bool> m;
  for (double v : y.to_doubles()) m.push_back(v != 0);
  return m;
}

TEST(DropoutOffset, OffsetSelectsThePhiloxStream) {
  init();
  const Tensor x = rnd({6, 333}, 1);
  const double p = 0.4;
  const int64_t seed = 11;
  for (Backend b : {Backend::cpu, Backend::reference}) {
    BackendScope scope(b);
    const Tensor plain = ops::dropout(x, p, true, seed);
    EXPECT_TRUE(ops::dropout(x, p, true, seed, off64(0)).bit_equal(plain));  // absent offset == offset 0
    const Tensor y1 = ops::dropout(x, p, true, seed, off64(1)), y2 = ops::dropout(x, p, true, seed, off64(2));
    EXPECT_NE(mask_of(y1), mask_of(y2));
    EXPECT_NE(mask_of(y1), mask_of(plain));
    EXPECT_TRUE(ops::dropout(x, p, true, seed, off64(1)).bit_equal(y1));
    // i32 and shape [1] offsets name the same stream.
    EXPECT_TRUE(ops::dropout(x, p, true, seed, Tensor::from_vector<int32_t>({1}, {})).bit_equal(y1));
    EXPECT_TRUE(ops::dropout(x, p, true, seed, Tensor::from_vector<int64_t>({1}, {1})).bit_equal(y1));
    // The rule, element by element.
    const std::vector<bool> m = mask_of(y2);
    for (size_t i = 0; i < m.size(); ++i)
      ASSERT_EQ(m[i], philox_uniform(seed, 2, i) >= p) << "element " << i;
    // Eval mode ignores the offset.
    EXPECT_TRUE(ops::dropout(x, p, false, seed, off64(5)).bit_equal(x));
  }
  // f16/bf16 run through the f32 kernel: the integer offset must reach it unconverted.
  for (DType dt : {DType::f16, DType::bf16}) {
    const Tensor xl = rnd({4, 100}, 2, dt);
    const Tensor yl = ops::dropout(xl, p, true, seed, off64(3));
    const Tensor yf = ops::dropout(ops::cast(xl, DType::f32), p, true, seed, off64(3));
    EXPECT_EQ(mask_of(yl), mask_of(yf)) << dtype_name(dt);
  }
}

// The CPU kernel draws its mask on SIMD lanes (an integer compare against ceil(p * 2^24)); every element must
// follow the scalar rule and be x * scale in f32: p at and next to the thresholds' edges, streams whose
// high word is set, and sizes that end inside a vector and span several chunks (16384 elements each).
TEST(DropoutOffset, CpuMaskIsTheScalarRuleOnEveryElement) {
  init();
  const Tensor x = rnd({40013}, 6);
  const std::vector<double> xs = x.to_doubles();
  const double eps = 1.0 / 16777216.0;
  for (double p : {0.0, 1e-9, eps, 0.1, 0.5, 0.5 + eps / 2, 0.9, 1.0 - eps, 1.0}) {
    for (int64_t stream : {int64_t{0}, int64_t{7}, (int64_t{1} << 40) + 3, int64_t{-1}}) {
      const int64_t seed = 0x123456789abcLL;
      BackendScope scope(Backend::cpu);
      const Tensor y = ops::dropout(x, p, true, seed, off64(stream));
      const float scale = static_cast<float>(p < 1 ? 1.0 / (1.0 - p) : 0.0);  // f32 kernels scale in f32
      const std::vector<double> ys = y.to_doubles();
      int64_t kept = 0;
      for (size_t i = 0; i < ys.size(); ++i) {
        const bool keep =
            static_cast<double>(philox_uniform(static_cast<uint64_t>(seed), static_cast<uint64_t>(stream), i)) >= p;
        ASSERT_EQ(ys[i], keep ? static_cast<double>(static_cast<float>(xs[i]) * scale) : 0.0)
            << "p " << p << " stream " << stream << " element " << i;
        kept += keep;
      }
      if (p <= 0) {
        EXPECT_EQ(kept, x.numel());
      }
      if (p >= 1) {
        EXPECT_EQ(kept, 0);
      }
    }
  }
}

TEST(DropoutOffset, OneCompiledPlanDrawsAFreshMaskPerOffset) {
  init();
  const Tensor x = rnd({5, 77}, 3);
  CompiledFunction f([](std::span<const Tensor> in) {
    return std::vector<Tensor>{ops::dropout(in[0], 0.5, true, 7, in[1])};
  });
  for (int64_t step : {1, 2, 3, 1000000007}) {
    const Tensor g = f({x, off64(step)})[0];
    EXPECT_TRUE(g.bit_equal(ops::dropout(x, 0.5, true, 7, off64(step)))) << "step " << step;
  }
  EXPECT_EQ(f.cache_size(), 1u);
}

TEST(DropoutOffset, GradientUsesTheSameMask) {
  init();
  const Tensor x = rnd({3, 50}, 4);
  const Tensor w = rnd({3, 50}, 5);
  const auto loss = [&](std::span<const Tensor> in) {
    return ops::reduce_sum(ops::mul(ops::dropout(in[0], 0.3, true, 21, in[1]), w));
  };
  for (int64_t step : {4, 9}) {
    const Tensor ins[2] = {x, off64(step)};
    const std::vector<Tensor> g = autodiff::grad(loss, ins, {0});
    ASSERT_EQ(g.size(), 1u);
    EXPECT_TRUE(g[0].bit_equal(ops::mul(w, ops::dropout(ops::full({3, 50}, 1.0), 0.3, true, 21, off64(step)))));
    // Traced: the backward lands in the plan with the offset still a graph input.
    CompiledFunction f([&](std::span<const Tensor> in) { return autodiff::grad(loss, in, {0}); });
    EXPECT_TRUE(f({x, off64(step)})[0].bit_equal(g[0])) << "step " << step;
  }
}

TEST(DropoutOffset, BadOffsetsAreRejected) {
  init();
  const Tensor x = rnd({4}, 6);
  EXPECT_NE(testing::error_of([&] { ops::dropout(x, 0.5, true, 0, Tensor::scalar(1.0, DType::f32)); })
                .find("offset must be an i64 or i32 scalar"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { ops::dropout(x, 0.5, true, 0, Tensor::from_vector<int64_t>({1, 2}, {2})); })
                .find("offset must be a scalar"),
            std::string::npos);
}

}  // namespace
}  // namespace spore
