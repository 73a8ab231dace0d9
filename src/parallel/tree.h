#pragma once
// The one summation order of every reduction in src/parallel and of data-parallel training (train::Model).
//
// tree_sum adds k equal-length vectors by pairs, level by level, over their index: at each level entry i becomes
// entry 2i + entry 2i+1 (in that operand order) and an odd last entry moves up unchanged, until one is left. For
// k = 5: ((v0 + v1) + (v2 + v3)) + v4. Because a run of 2^j vectors aligned at a multiple of 2^j is a whole subtree,
// a rank that owns such a run can sum it alone and the ranks' partial sums then combine with the same rule: the bits
// equal one process summing all k in this order.
#include <cstdint>
#include <span>

namespace spore::parallel {

// Sums parts[0..k) into parts[0] (the others are overwritten as scratch), n elements each. T: float or double.
template <typename T>
void tree_sum(std::span<T*> parts, int64_t n) {
  size_t k = parts.size();
  while (k > 1) {
    const size_t half = k / 2;
    for (size_t i = 0; i < half; ++i) {
      T* a = parts[2 * i];
      const T* b = parts[2 * i + 1];
      for (int64_t e = 0; e < n; ++e) a[e] = a[e] + b[e];
      parts[i] = a;
    }
    if (k % 2 == 1) parts[half] = parts[k - 1];
    k = half + k % 2;
  }
}

// True when a run of `count` leaves is a whole subtree of tree_sum wherever it starts at a multiple of count: a power
// of two (data parallelism with M shards over N ranks needs M / N to be one).
inline bool is_subtree_size(int64_t count) { return count > 0 && (count & (count - 1)) == 0; }

}  // namespace spore::parallel
