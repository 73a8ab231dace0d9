#pragma once
// Int8 KV cache rows (attention_kv in ops/llm_ops.h, llm::KvCache in llm/generate.h). Every (kv head, position) row of
// head_dim values is stored as int8 q[0..D) plus one f32 scale s, and stands for the values s * q[i] (the product
// rounded to f32). The cache writer and the attention kernels (which round the step's new rows the same way) call this
// one function, so a key has the same bits whether it comes from the cache or from the current call.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace spore::llm_ops {

// Bytes of one int8 cache row of d values with its scale.
inline constexpr int64_t kv_i8_row_bytes(int64_t d) { return d + static_cast<int64_t>(sizeof(float)); }

// Quantizes x[0..d) into q[0..d) and returns the row's scale: s = max|x| / 127 (0 for an all-zero row) and
// q[i] = x[i] * (127 / max|x|) rounded to nearest, ties to even, clamped to [-127, 127] (symmetric: -128 is never
// used). A row holding NaN or an infinity gets the scale NaN and q = 0, so attention over it gives NaN, as an f32 cache
// would, instead of a finite wrong value.
inline float kv_quantize_row(const float* x, int64_t d, int8_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < d; ++i) {
    const float a = std::fabs(x[i]);
    finite &= a <= FLT_MAX;  // false for NaN and inf
    amax = std::max(amax, a);
  }
  if (!finite || amax == 0.0f) {
    std::memset(q, 0, static_cast<size_t>(d));
    return finite ? 0.0f : NAN;
  }
  const float id = 127.0f / amax;
  if (id <= FLT_MAX) {
    for (int64_t i = 0; i < d; ++i)
      q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * id), -127.0f, 127.0f));
  } else {
    // max|x| below ~3.7e-37: 127 / max|x| overflows f32, so take the same ratio in double.
    const double idd = 127.0 / static_cast<double>(amax);
    for (int64_t i = 0; i < d; ++i)
      q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(static_cast<double>(x[i]) * idd), -127.0, 127.0));
  }
  return amax / 127.0f;
}

// The value an int8 cache element stands for.
inline float kv_dequantize(int8_t q, float s) { return static_cast<float>(q) * s; }

}  // namespace spore::llm_ops
