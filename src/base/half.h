#pragma once
// IEEE binary16 and bfloat16 storage types with round-to-nearest-even conversions that handle
// inf, nan and subnormals. Arithmetic is always done in f32 (convert, compute, convert back).
#include <bit>
#include <cstdint>

namespace spore {

uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet nan
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(float_to_half_bits(f)) {}
  static f16 from_bits(uint16_t b) { f16 h; h.bits = b; return h; }
  operator float() const { return half_bits_to_float(bits); }
};

struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(float_to_bf16_bits(f)) {}
  static bf16 from_bits(uint16_t b) { bf16 h; h.bits = b; return h; }
  operator float() const { return bf16_bits_to_float(bits); }
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2);

}  // namespace spore
