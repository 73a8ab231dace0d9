#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "base/rng.h"

namespace spore {
namespace {

using U4 = std::array<uint32_t, 4>;

// Known-answer vectors of Random123 (kat_vectors, philox4x32 with 10 rounds).
TEST(Philox, Random123KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (U4{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (U4{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (U4{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, UniformIsInUnitIntervalAndUnbiased) {
  constexpr int n = 1 << 20;
  double sum = 0, sum_sq = 0;
  float lo = 1, hi = 0;
  int buckets[16] = {};
  for (int i = 0; i < n; ++i) {
    const float u = philox_uniform(1234, 7, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum_sq += double(u) * u;
    ++buckets[static_cast<int>(u * 16)];
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 0.002);
  EXPECT_NEAR(var, 1.0 / 12, 0.002);
  for (int b : buckets) EXPECT_NEAR(b, n / 16, n / 16 * 0.02);
  EXPECT_LT(lo, 1e-5f);
  EXPECT_GT(hi, 1 - 1e-5f);
}

TEST(Philox, Deterministic) {
  for (uint64_t i : {0ull, 1ull, 12345ull, (1ull << 40) + 3}) {
    EXPECT_EQ(philox_uniform(42, 3, i), philox_uniform(42, 3, i));
    EXPECT_EQ(philox_normal(42, 3, i), philox_normal(42, 3, i));
  }
  EXPECT_EQ(philox4x32({1, 2, 3, 4}, {5, 6}), philox4x32({1, 2, 3, 4}, {5, 6}));
  // Seed, stream and the high half of the index all change the draw.
  std::set<float> distinct;
  for (uint64_t seed : {0ull, 1ull, 1ull << 32})
    for (uint64_t stream : {0ull, 1ull, 1ull << 32})
      for (uint64_t index : {0ull, 1ull, 1ull << 32}) distinct.insert(philox_uniform(seed, stream, index));
  EXPECT_EQ(distinct.size(), 27u);
}

TEST(Philox, NormalMoments) {
  constexpr int n = 1 << 20;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const float z = philox_normal(99, 0, i);
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sum_sq += double(z) * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.01);
}

}  // namespace
}  // namespace spore
