#include "base/half.h"

namespace spore {

uint16_t float_to_half_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan; keep nan quiet and non-zero
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? (0x200u | ((abs >> 13) & 0x3ffu)) : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (abs >= 0x38800000u) {  // normal half
    uint32_t mant = abs + 0xfffu + ((abs >> 13) & 1u);  // round mantissa to nearest even
    return static_cast<uint16_t>(sign | ((mant - 0x38000000u) >> 13));
  }
  // Subnormal half (or zero): shift the implicit-1 mantissa right, rounding to nearest even.
  const int exp = static_cast<int>(abs >> 23);
  if (exp < 102) return static_cast<uint16_t>(sign);  // below half of the smallest subnormal
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const int shift = 126 - exp;  // 14..24
  const uint32_t half_mant = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  uint32_t r = half_mant + ((rem > halfway || (rem == halfway && (half_mant & 1u))) ? 1u : 0u);
  return static_cast<uint16_t>(sign | r);
}

float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    out = sign;
  } else {  // subnormal: normalize
    int e = -1;
    uint32_t m = mant;
    do { m <<= 1; ++e; } while ((m & 0x400u) == 0);
    out = sign | (static_cast<uint32_t>(112 - e) << 23) | ((m & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(out);
}

}  // namespace spore
