#pragma once
// Helpers for reference kernels: element access as double through logical (row-major) indices.
#include <vector>

#include "ops/kernel.h"

namespace spore::reference {

// Reads element `flat` (row-major over t's shape, any strides) as double.
inline double get(const Tensor& t, int64_t flat) { return t.item_at(flat); }
// Writes a contiguous output element.
inline void put(const Tensor& t, int64_t flat, double v) {
  store_from_double(static_cast<char*>(t.raw_data()) + flat * static_cast<int64_t>(dtype_size(t.dtype())), t.dtype(), v);
}
// Multi-index <-> flat index for a shape.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    idx[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t f = 0;
  for (size_t i = 0; i < shape.size(); ++i) f = f * shape[i] + idx[i];
  return f;
}
// Flat index into `in` (broadcast to out_shape, NumPy rules) for output multi-index `oidx`.
inline int64_t broadcast_index(const std::vector<int64_t>& oidx, const Shape& in_shape) {
  const size_t lead = oidx.size() - in_shape.size();
  int64_t f = 0;
  for (size_t i = 0; i < in_shape.size(); ++i) f = f * in_shape[i] + (in_shape[i] == 1 ? 0 : oidx[lead + i]);
  return f;
}

}  // namespace spore::reference
