#pragma once
// Element-size based helpers shared by the data-movement kernels (shape.cpp, shape_index.cpp): moves
// never need the real dtype, only its byte width, so one kernel serves every dtype.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace spore::cpu::bytes {

inline constexpr int64_t chunk_bytes = 64 << 10;  // work per task: large enough to amortize scheduling

// Calls fn(T{}) with an unsigned type of `es` bytes.
template <typename Fn>
void with_elem(size_t es, Fn&& fn) {
  switch (es) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    default: fn(uint64_t{}); break;
  }
}
template <typename T>
inline T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
inline void store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

// Inner loops take everything by value: byte stores may alias anything reachable through a reference
// (lambda captures), which would make the compiler reload loop bounds and strides on every element.
template <typename T>
void fill_run(char* d, int64_t n, T v) {
  for (int64_t j = 0; j < n; ++j) store<T>(d + j * static_cast<int64_t>(sizeof(T)), v);
}

inline const char* in_bytes(const Tensor& t) { return static_cast<const char*>(t.raw_data()); }
inline char* out_bytes(const Tensor& t) { return static_cast<char*>(t.raw_data()); }
inline int64_t norm_axis(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

inline void parallel_memcpy(char* dst, const char* src, int64_t bytes) {
  const int64_t grain = 4 * chunk_bytes;
  parallel_for(num_chunks(bytes, grain), [&](int64_t c) {
    const int64_t b = c * grain;
    std::memcpy(dst + b, src + b, static_cast<size_t>(std::min(bytes, b + grain) - b));
  });
}

}  // namespace spore::cpu::bytes
