// KV-cache writes go through the backend (BackendImpl::write_kv_rows, ops/backend.h): rows land at their positions
// and heads in every cache dtype, converted as attention_kv converts new rows, and nothing else changes.
#include <gtest/gtest.h>

#include <cmath>

#include "base/half.h"
#include "base/rng.h"
#include "ops/backend.h"
#include "ops/llm_kv_quant.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

constexpr int64_t kT = 3, kH = 2, kD = 8, kCtx = 10;

Tensor random_rows() {
  std::vector<double> v(static_cast<size_t>(kT * kH * kD));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 4.0 * philox_uniform(7, 1, i) - 2.0;  // never all zero
  return Tensor::from_doubles(v, {kT, kH, kD}, DType::f32);
}

// The stored value of cache element (h, pos, i) as f32.
float stored(const Tensor& cache, const Tensor* scales, int64_t h, int64_t pos, int64_t i) {
  const int64_t at = (h * kCtx + pos) * kD + i;
  switch (cache.dtype()) {
    case DType::f32: return cache.data<float>()[at];
    case DType::f16: return half_bits_to_float(static_cast<const uint16_t*>(cache.raw_data())[at]);
    case DType::bf16: return bf16_bits_to_float(static_cast<const uint16_t*>(cache.raw_data())[at]);
    default:
      return llm_ops::kv_dequantize(static_cast<const int8_t*>(cache.raw_data())[at],
                                    scales->data<float>()[h * kCtx + pos]);
  }
}

TEST(KvWrite, RowsLandAtTheirPositionsInEveryCacheDtype) {
  init();
  const BackendImpl& b = backend_impl(current_backend());
  const Tensor rows = random_rows();
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i8}) {
    Tensor cache = Tensor::zeros({kH, kCtx, kD}, dt);
    Tensor scales = Tensor::zeros({kH, kCtx}, DType::f32);
    b.write_kv_rows(cache, dt == DType::i8 ? &scales : nullptr, rows, 4, 2);  // rows 0, 1 -> positions 4, 5
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t pos = 0; pos < kCtx; ++pos)
        for (int64_t i = 0; i < kD; ++i) {
          const float got = stored(cache, &scales, h, pos, i);
          if (pos != 4 && pos != 5) {
            ASSERT_EQ(got, 0.0f) << dtype_name(dt) << " position " << pos << " was written";
            continue;
          }
          const float x = rows.data<float>()[((pos - 4) * kH + h) * kD + i];
          float want = x;
          if (dt == DType::f16) want = half_bits_to_float(float_to_half_bits(x));
          if (dt == DType::bf16) want = bf16_bits_to_float(float_to_bf16_bits(x));
          // i8: one scale per row, |error| <= scale / 2 = max|row| / 254.
          const double tol = dt == DType::i8 ? 2.0 / 254 + 1e-6 : 0.0;
          ASSERT_LE(std::fabs(got - want), tol) << dtype_name(dt) << " h " << h << " pos " << pos << " i " << i;
        }
  }
}

TEST(KvWrite, BadWritesAreClearErrors) {
  init();
  const BackendImpl& b = backend_impl(current_backend());
  const Tensor rows = random_rows();
  Tensor cache = Tensor::zeros({kH, kCtx, kD}, DType::f32);
  EXPECT_NE(testing::error_of([&] { b.write_kv_rows(cache, nullptr, rows, 9, 2); }).find("beyond ctx 10"), std::string::npos);
  Tensor i8 = Tensor::zeros({kH, kCtx, kD}, DType::i8);
  EXPECT_NE(testing::error_of([&] { b.write_kv_rows(i8, nullptr, rows, 0, 1); }).find("needs f32 scales"), std::string::npos);
  Tensor narrow = Tensor::zeros({kH, kCtx, kD / 2}, DType::f32);
  EXPECT_NE(testing::error_of([&] { b.write_kv_rows(narrow, nullptr, rows, 0, 1); }).find("do not fit cache"), std::string::npos);
}

}  // namespace
}  // namespace spore
