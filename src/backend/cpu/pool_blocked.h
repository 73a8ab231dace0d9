#pragma once
// The AVX-512 parts of f32 pooling on the blocked layout [N, C/8, H, W, 8] (conv.cpp's pool_blocked), two pixels'
// 8 channels per 512-bit vector. Each lane follows the AVX2 kernel's sequence exactly - the column folds over the
// window's rows in order, then the folds over its columns in order, from the same identity - with take_max's rule
// (NaN wins, else a strictly larger value), so the bits are the AVX2 kernel's and the plain layout's.
#include <cstdint>

namespace spore::cpu::detail {

// Whether pool_blocked takes these (the CPU has AVX-512 F/DQ/VL and SPORE_CONV_DIRECT_ISA=avx2 is not set; read per
// call, as the conv kernels do).
bool pool_use_avx512();

// The column folds of `floats` floats (a multiple of 8): c = src[0] (fresh) or fold(c, src[0]), then fold(c, src[q])
// for q in [1, held).
void pool_column_folds_avx512(bool is_max, float* c, const float* const* src, int64_t held, bool fresh, int64_t floats);

// Output pixels from x_lo, two at a time while both lie before x_hi (every tap of their windows inside the row c):
// out[x] = fold over j of c[x * sw - pad_left + j * dil] from the identity, divided by `divisor` when averaging.
// Returns the first pixel not computed (x_hi, or x_hi - 1 for an odd count).
int64_t pool_row_interior_avx512(bool is_max, const float* c, float* out, int64_t x_lo, int64_t x_hi, int64_t sw,
                                 int64_t pad_left, int64_t kw, int64_t dil, float divisor);

}  // namespace spore::cpu::detail
