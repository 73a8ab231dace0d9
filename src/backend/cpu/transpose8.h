#pragma once
// In-register transpose of an 8x8 block of 4-byte values (AVX2, the build's baseline): rows r[0..7] become its
// columns. Shuffles move bits unchanged, so it serves every 4-byte dtype.
#include <immintrin.h>

#include <cstdint>

namespace spore::cpu {

inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// `valid` (1-8) planes of `plane` floats each, `plane` apart from src, into one 8-channel block [plane, 8] at dst
// (zeros in the lanes past valid): 8 pixels x 8 planes at a time through transpose8, the last pixels one by one.
inline void planes_to_block8(const float* src, int64_t plane, int64_t valid, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= plane; i += 8) {
    __m256 r[8];
    for (int64_t l = 0; l < 8; ++l) r[l] = l < valid ? _mm256_loadu_ps(src + l * plane + i) : _mm256_setzero_ps();
    transpose8(r);
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(dst + (i + k) * 8, r[k]);
  }
  for (; i < plane; ++i)
    for (int64_t l = 0; l < 8; ++l) dst[i * 8 + l] = l < valid ? src[l * plane + i] : 0.0f;
}

// The inverse: the first `valid` lanes of the block [plane, 8] at src back into planes `plane` apart from dst.
inline void block8_to_planes(const float* src, int64_t plane, int64_t valid, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= plane; i += 8) {
    __m256 r[8];
    for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + (i + k) * 8);
    transpose8(r);
    for (int64_t l = 0; l < valid; ++l) _mm256_storeu_ps(dst + l * plane + i, r[l]);
  }
  for (; i < plane; ++i)
    for (int64_t l = 0; l < valid; ++l) dst[l * plane + i] = src[i * 8 + l];
}

}  // namespace spore::cpu
