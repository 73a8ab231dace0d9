#include "base/rng.h"

#include <cmath>

namespace spore {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u, w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(m0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(m1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += w0;
    k[1] += w1;
  }
  return c;
}

namespace {
std::array<uint32_t, 4> draw(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                     static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}
inline float to_unit(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
}  // namespace

float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) { return to_unit(draw(seed, stream, index)[0]); }

float philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  auto r = draw(seed, stream, index);
  const float u1 = (static_cast<float>(r[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
  const float u2 = to_unit(r[1]);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

}  // namespace spore
