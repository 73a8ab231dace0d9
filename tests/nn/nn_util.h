#pragma once
// Helpers for the nn tests: deterministic, never-all-zero inputs and closeness checks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/rng.h"
#include "tensor/tensor.h"

namespace spore::nn_test {

// Values in [lo, hi) from Philox (stream `stream`), never all zero for n > 0.
inline Tensor rnd(const Shape& s, uint64_t stream, DType dt = DType::f32, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = lo + (hi - lo) * philox_uniform(1234, stream, i);
  return Tensor::from_doubles(v, s, dt);
}

inline void expect_close(const Tensor& a, const Tensor& b, double tol, const char* what = "") {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto x = a.to_doubles(), y = b.to_doubles();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << what << " element " << i;
}

}  // namespace spore::nn_test
