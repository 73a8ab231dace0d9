#pragma once
// Counter-based RNG (Philox-4x32-10). A random number is a pure function of (key, counter), so
// kernels draw element i's number from counter i: results never depend on scheduling or threads.
#include <array>
#include <cstdint>

namespace spore {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Uniform float in [0, 1) for element `index` of stream `stream` under `seed`.
float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index);
// Standard normal (Box-Muller on two uniforms of the same counter).
float philox_normal(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace spore
