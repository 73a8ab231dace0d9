// f16/bf16 conversions: exhaustive round trips over all 65,536 bit patterns, an independent decoder,
// and correct rounding (nearest-even) of f32 -> f16/bf16 on >= 10M samples against a table-driven
// reference that shares no code or bit tricks with src/base/half.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/half.h"

namespace spore {
namespace {

// splitmix64: a tiny, well-mixed generator so the sample is reproducible without <random> quirks.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint32_t u32() { return static_cast<uint32_t>(next() >> 32); }
};

bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool half_is_quiet_nan(uint16_t h) { return half_is_nan(h) && (h & 0x200u) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }
bool bf16_is_quiet_nan(uint16_t b) { return bf16_is_nan(b) && (b & 0x40u) != 0; }

// Independent decoder straight from the IEEE 754 binary16 definition.
double decode_half(uint16_t h) {
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 31) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m / 1024.0, -14);
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

// Rounds |x| (finite, double-exact float) to nearest-even among `values` (the sorted non-negative
// finite values of the format, index == bit pattern), with `overflow` as the virtual next value
// (2^16 for half, 2^128 for bf16) standing for infinity. Returns the magnitude bit pattern.
uint16_t round_to_table(double ax, const std::vector<double>& values, double overflow, uint16_t inf_bits) {
  // Largest pattern whose value <= ax.
  auto it = std::upper_bound(values.begin(), values.end(), ax);
  const size_t lo = static_cast<size_t>(it - values.begin()) - 1;
  const double lo_v = values[lo];
  if (lo_v == ax) return static_cast<uint16_t>(lo);
  const bool lo_is_last = lo + 1 == values.size();
  const double hi_v = lo_is_last ? overflow : values[lo + 1];
  const uint16_t hi_bits = lo_is_last ? inf_bits : static_cast<uint16_t>(lo + 1);
  const double d_lo = ax - lo_v, d_hi = hi_v - ax;  // exact: the operands are within 2^53 of each other
  if (d_lo < d_hi) return static_cast<uint16_t>(lo);
  if (d_hi < d_lo) return hi_bits;
  return (lo & 1u) ? hi_bits : static_cast<uint16_t>(lo);  // tie: even mantissa
}

uint16_t reference_float_to_half(float f, const std::vector<double>& table) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(f)) return 0;  // callers check NaN separately
  const double ax = std::fabs(static_cast<double>(f));
  if (std::isinf(ax) || ax >= 65536.0) return sign | 0x7c00u;
  return sign | round_to_table(ax, table, 65536.0, 0x7c00u);
}

uint16_t reference_float_to_bf16(float f, const std::vector<double>& table) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(f)) return 0;
  const double ax = std::fabs(static_cast<double>(f));
  if (std::isinf(ax)) return sign | 0x7f80u;
  return sign | round_to_table(ax, table, std::ldexp(1.0, 128), 0x7f80u);
}

const std::vector<double>& half_table() {
  static const std::vector<double> t = [] {
    std::vector<double> v;
    for (uint32_t b = 0; b < 0x7c00u; ++b) v.push_back(decode_half(static_cast<uint16_t>(b)));
    return v;
  }();
  return t;
}

const std::vector<double>& bf16_table() {
  static const std::vector<double> t = [] {
    // bf16 b is by definition the f32 whose top 16 bits are b; decode it arithmetically anyway.
    std::vector<double> v;
    for (uint32_t b = 0; b < 0x7f80u; ++b) {
      const int e = (b >> 7) & 0xff;
      const int m = b & 0x7f;
      v.push_back(e == 0 ? std::ldexp(m / 128.0, -126) : std::ldexp(1.0 + m / 128.0, e - 127));
    }
    return v;
  }();
  return t;
}

TEST(Half, TablesAreStrictlyIncreasing) {
  for (const auto* t : {&half_table(), &bf16_table()}) {
    for (size_t i = 1; i < t->size(); ++i) ASSERT_LT((*t)[i - 1], (*t)[i]) << i;
  }
  EXPECT_EQ(half_table().back(), 65504.0);
}

TEST(Half, ExhaustiveDecodeMatchesReference) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = half_bits_to_float(h);
    if (half_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      continue;
    }
    const double want = decode_half(h);
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << b;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << b;  // -0 stays -0
  }
}

TEST(Half, ExhaustiveRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const uint16_t back = float_to_half_bits(half_bits_to_float(h));
    if (half_is_nan(h)) {
      ASSERT_TRUE(half_is_quiet_nan(back)) << std::hex << b << " -> " << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << std::hex << b;
      if (half_is_quiet_nan(h)) {
        ASSERT_EQ(back, h) << std::hex << b;  // a quiet payload survives
      }
      continue;
    }
    ASSERT_EQ(back, h) << std::hex << b;
    ASSERT_EQ(f16(static_cast<float>(f16::from_bits(h))).bits, h);
  }
}

TEST(BF16, ExhaustiveRoundTripAndDecode) {
  const auto& table = bf16_table();
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = bf16_bits_to_float(h);
    const uint16_t back = float_to_bf16_bits(f);
    if (bf16_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(bf16_is_quiet_nan(back)) << std::hex << b << " -> " << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u);
      if (bf16_is_quiet_nan(h)) {
        ASSERT_EQ(back, h) << std::hex << b;
      }
      continue;
    }
    ASSERT_EQ(back, h) << std::hex << b;
    const uint16_t mag = h & 0x7fffu;
    const double want = mag == 0x7f80u ? std::numeric_limits<double>::infinity() : table[mag];
    ASSERT_EQ(std::fabs(static_cast<double>(f)), want) << std::hex << b;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0);
    ASSERT_EQ(bf16(static_cast<float>(bf16::from_bits(h))).bits, h);
  }
}

// The f32 sample: every class the conversions special-case, plus halfway points built from adjacent
// representable pairs (exact ties, one ulp above and below them).
std::vector<float> special_floats() {
  std::vector<float> v = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::signaling_NaN(), std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                          65504.0f, 65505.0f, 65519.0f, 65519.996f, 65520.0f, 65520.004f, 65535.0f, 65536.0f,
                          6.103515625e-05f /* 2^-14 */, 5.9604645e-08f /* 2^-24 */, 2.9802322e-08f /* 2^-25 */,
                          2.9802326e-08f, 2.9802319e-08f, 8.940697e-08f /* 1.5 * 2^-24 */};
  return v;
}

void add_halfway_cases(std::vector<float>& out, const std::vector<double>& table, double overflow) {
  for (size_t i = 0; i < table.size(); ++i) {
    const double next = i + 1 < table.size() ? table[i + 1] : overflow;
    const float mid = static_cast<float>((table[i] + next) / 2);  // exact: needs one more bit than the format
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
}

std::vector<float> sample_floats(bool for_half, size_t n) {
  std::vector<float> v = special_floats();
  if (for_half) add_halfway_cases(v, half_table(), 65536.0);
  else add_halfway_cases(v, bf16_table(), std::ldexp(1.0, 128));
  SplitMix rng{for_half ? 0x1234u : 0x5678u};
  while (v.size() < n) {
    const uint32_t r = rng.u32();
    const uint32_t kind = rng.u32() % 8;
    uint32_t bits;
    switch (kind) {
      case 0: case 1: bits = r; break;  // any pattern: f32 subnormals, huge values, inf/nan
      case 2: case 3: case 4:           // exponents around the half range (2^-26 .. 2^17)
        bits = (r & 0x807fffffu) | (static_cast<uint32_t>(101 + rng.u32() % 44) << 23);
        break;
      case 5:  // near overflow: 65504 .. 65536 for half, bf16 max .. f32 max for bf16
        bits = for_half ? (r & 0x801fffffu) | 0x477fe000u : (r & 0x8000ffffu) | 0x7f7f0000u;
        break;
      case 6: bits = r & 0x80ffffffu; break;                  // f32 subnormals and tiny normals
      default: {  // near a tie: the midpoint of two adjacent representable values, +- 2 f32 ulps
        const auto& t = for_half ? half_table() : bf16_table();
        const size_t i = rng.u32() % (t.size() - 1);
        bits = std::bit_cast<uint32_t>(static_cast<float>((t[i] + t[i + 1]) / 2)) | (r & 0x80000000u);
        bits += static_cast<uint32_t>(static_cast<int32_t>(rng.u32() % 5) - 2);
        break;
      }
    }
    v.push_back(std::bit_cast<float>(bits));
  }
  return v;
}

constexpr size_t kSamples = 10'500'000;

TEST(Half, FloatToHalfIsCorrectlyRounded) {
  const auto& table = half_table();
  const auto xs = sample_floats(true, kSamples);
  ASSERT_GE(xs.size(), 10'000'000u);
  size_t nans = 0, subnormal_results = 0;
  for (float f : xs) {
    const uint16_t got = float_to_half_bits(f);
    if (std::isnan(f)) {
      ++nans;
      ASSERT_TRUE(half_is_quiet_nan(got)) << std::hex << std::bit_cast<uint32_t>(f);
      ASSERT_EQ(got & 0x8000u, (std::bit_cast<uint32_t>(f) >> 16) & 0x8000u);
      continue;
    }
    const uint16_t want = reference_float_to_half(f, table);
    ASSERT_EQ(got, want) << "f32 bits 0x" << std::hex << std::bit_cast<uint32_t>(f) << " value " << f;
    ASSERT_EQ(f16(f).bits, want);
    if ((want & 0x7c00u) == 0 && (want & 0x3ffu) != 0) ++subnormal_results;
  }
  EXPECT_GT(nans, 1000u);
  EXPECT_GT(subnormal_results, 10000u);
}

TEST(BF16, FloatToBF16IsCorrectlyRounded) {
  const auto& table = bf16_table();
  const auto xs = sample_floats(false, kSamples);
  ASSERT_GE(xs.size(), 10'000'000u);
  size_t nans = 0, infs = 0;
  for (float f : xs) {
    const uint16_t got = float_to_bf16_bits(f);
    if (std::isnan(f)) {
      ++nans;
      ASSERT_TRUE(bf16_is_quiet_nan(got)) << std::hex << std::bit_cast<uint32_t>(f);
      ASSERT_EQ(got & 0x8000u, (std::bit_cast<uint32_t>(f) >> 16) & 0x8000u);
      continue;
    }
    const uint16_t want = reference_float_to_bf16(f, table);
    if ((want & 0x7fffu) == 0x7f80u) ++infs;
    ASSERT_EQ(got, want) << "f32 bits 0x" << std::hex << std::bit_cast<uint32_t>(f) << " value " << f;
    ASSERT_EQ(bf16(f).bits, want);
  }
  EXPECT_GT(nans, 1000u);
  EXPECT_GT(infs, 1000u);  // overflow by rounding (above bf16 max + half ulp) and f32 infinities
}

TEST(Half, KnownValues) {
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00u);
  EXPECT_EQ(float_to_half_bits(-2.0f), 0xc000u);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bffu);
  EXPECT_EQ(float_to_half_bits(65519.99f), 0x7bffu);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00u);  // tie between 65504 (odd) and 2^16 (even) -> inf
  EXPECT_EQ(float_to_half_bits(-1e9f), 0xfc00u);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001u);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000u);      // tie -> even (0)
  EXPECT_EQ(float_to_half_bits(std::ldexp(3.0f, -25)), 0x0002u);      // 1.5 * 2^-24: tie -> even (2)
  EXPECT_EQ(float_to_half_bits(-std::ldexp(1.0f, -26)), 0x8000u);     // underflow keeps the sign
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00u);  // tie -> even
  EXPECT_EQ(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02u);
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80u);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82u);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(half_bits_to_float(0x7c00u), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_bits_to_float(0x0001u), std::ldexp(1.0f, -24));
}

}  // namespace
}  // namespace spore
