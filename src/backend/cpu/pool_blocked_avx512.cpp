// pool_blocked.h's AVX-512 kernels, built inside `#pragma GCC target` after every header and chosen at run time by
// conv.cpp's pool_blocked. take_max on 16 lanes in three instructions: max(v, acc) is `v > acc ? v : acc` (MAXPS
// returns its second operand unless the first is greater, so a NaN v gives acc, and so do ties, -0 against +0
// included), then v wherever v is NaN - exactly `v is NaN or v > acc ? v : acc`.
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backend/cpu/pool_blocked.h"

namespace spore::cpu::detail {

bool pool_use_avx512() {
  static const bool has =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const char* e = std::getenv("SPORE_CONV_DIRECT_ISA");
  return has && !(e && std::string_view(e) == "avx2");
}

}  // namespace spore::cpu::detail

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl")
#pragma GCC diagnostic push  // _mm512_castps256_ps512's upper half is undefined by design
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace spore::cpu::detail {
namespace {

template <bool Max>
inline __m512 fold16(__m512 acc, __m512 v) {
  if constexpr (Max) return _mm512_mask_mov_ps(_mm512_max_ps(v, acc), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
  else return _mm512_add_ps(acc, v);
}
template <bool Max>
inline __m256 fold8(__m256 acc, __m256 v) {
  if constexpr (Max) return _mm256_mask_mov_ps(_mm256_max_ps(v, acc), _mm256_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
  else return _mm256_add_ps(acc, v);
}

template <bool Max, int Held>
void column_folds(float* c, const float* const* src, bool fresh, int64_t floats) {
  int64_t j = 0;
  for (; j + 16 <= floats; j += 16) {
    __m512 v = fresh ? _mm512_loadu_ps(src[0] + j) : fold16<Max>(_mm512_loadu_ps(c + j), _mm512_loadu_ps(src[0] + j));
#pragma GCC unroll 4
    for (int q = 1; q < Held; ++q) v = fold16<Max>(v, _mm512_loadu_ps(src[q] + j));
    _mm512_storeu_ps(c + j, v);
  }
  if (j < floats) {  // the last pixel of an odd row
    __m256 v = fresh ? _mm256_loadu_ps(src[0] + j) : fold8<Max>(_mm256_loadu_ps(c + j), _mm256_loadu_ps(src[0] + j));
#pragma GCC unroll 4
    for (int q = 1; q < Held; ++q) v = fold8<Max>(v, _mm256_loadu_ps(src[q] + j));
    _mm256_storeu_ps(c + j, v);
  }
}

template <bool Max>
void column_folds_any(float* c, const float* const* src, int64_t held, bool fresh, int64_t floats) {
  switch (held) {
    case 4: return column_folds<Max, 4>(c, src, fresh, floats);
    case 3: return column_folds<Max, 3>(c, src, fresh, floats);
    case 2: return column_folds<Max, 2>(c, src, fresh, floats);
    default: return column_folds<Max, 1>(c, src, fresh, floats);
  }
}

// SW: the stride when 1 or 2 (constants in the code), 0 to read sw.
template <bool Max, int SW>
int64_t row_interior(const float* c, float* out, int64_t x_lo, int64_t x_hi, int64_t sw_any, int64_t pad_left,
                     int64_t kw, int64_t dil, float divisor) {
  const int64_t sw = SW > 0 ? SW : sw_any;
  const __m512 id = _mm512_set1_ps(Max ? -__builtin_inff() : 0.0f);
  int64_t x = x_lo;
  for (; x + 2 <= x_hi; x += 2) {
    const float* cx = c + (x * sw - pad_left) * 8;
    __m512 acc = id;
    for (int64_t j = 0; j < kw; ++j) {
      const float* p = cx + j * dil * 8;
      const __m512 v =
          sw == 1 ? _mm512_loadu_ps(p)
                  : _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(p)), _mm256_loadu_ps(p + sw * 8), 1);
      acc = fold16<Max>(acc, v);
    }
    if (!Max) acc = _mm512_div_ps(acc, _mm512_set1_ps(divisor));
    _mm512_storeu_ps(out + x * 8, acc);
  }
  return x;
}

template <bool Max>
int64_t row_interior_any(const float* c, float* out, int64_t x_lo, int64_t x_hi, int64_t sw, int64_t pad_left,
                         int64_t kw, int64_t dil, float divisor) {
  if (sw == 1) return row_interior<Max, 1>(c, out, x_lo, x_hi, sw, pad_left, kw, dil, divisor);
  if (sw == 2) return row_interior<Max, 2>(c, out, x_lo, x_hi, sw, pad_left, kw, dil, divisor);
  return row_interior<Max, 0>(c, out, x_lo, x_hi, sw, pad_left, kw, dil, divisor);
}

}  // namespace

void pool_column_folds_avx512(bool is_max, float* c, const float* const* src, int64_t held, bool fresh,
                              int64_t floats) {
  if (is_max) column_folds_any<true>(c, src, held, fresh, floats);
  else column_folds_any<false>(c, src, held, fresh, floats);
}

int64_t pool_row_interior_avx512(bool is_max, const float* c, float* out, int64_t x_lo, int64_t x_hi, int64_t sw,
                                 int64_t pad_left, int64_t kw, int64_t dil, float divisor) {
  return is_max ? row_interior_any<true>(c, out, x_lo, x_hi, sw, pad_left, kw, dil, divisor)
                : row_interior_any<false>(c, out, x_lo, x_hi, sw, pad_left, kw, dil, divisor);
}

}  // namespace spore::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
