#pragma once
// pad's index map along one dim, defined once: the reference and CPU kernels and pad's gradient rule use it.
#include <cstdint>
#include <string_view>

namespace spore {

enum class PadMode { constant, reflect, edge };

inline PadMode pad_mode(std::string_view s) {
  return s == "reflect" ? PadMode::reflect : s == "edge" ? PadMode::edge : PadMode::constant;
}

// The input index that output index o reads along a dim of size n padded by b in front (b < 0 crops);
// -1 where it reads the constant value. reflect mirrors without repeating the edge element, as often as needed.
inline int64_t pad_source(int64_t o, int64_t n, int64_t b, PadMode mode) {
  int64_t i = o - b;
  if (i >= 0 && i < n) return i;
  if (mode == PadMode::constant) return -1;
  if (mode == PadMode::edge) return i < 0 ? 0 : n - 1;
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  i = ((i % period) + period) % period;
  return i < n ? i : period - i;
}

}  // namespace spore
