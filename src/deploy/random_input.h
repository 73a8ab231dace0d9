#pragma once
// Seeded random model inputs (`spore run`, `bench`, `profile`, `check-ops`): the same (seed, input index) gives the
// same tensor on every machine and thread count (Philox, keyed by element index).
#include <cstdint>
#include <vector>

#include "base/rng.h"
#include "tensor/tensor.h"

namespace spore::deploy {

// Floats: standard normal. Integers: uniform in [0, 10) (inputs of integer type are usually indices or
// token ids, so small non-negative values keep gathers and embeddings in range). Bool: fair coin.
inline Tensor random_input(const Shape& shape, DType dtype, uint64_t seed, uint64_t stream) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (is_floating(dtype)) v[i] = philox_normal(seed, stream, i);
    else if (dtype == DType::boolean) v[i] = philox_uniform(seed, stream, i) < 0.5f;
    else v[i] = static_cast<int>(philox_uniform(seed, stream, i) * 10.f);
  }
  return Tensor::from_doubles(v, shape, dtype);
}

}  // namespace spore::deploy
