#pragma once
// The F(4x4, 3x3) transforms of winograd.cpp, built once per ISA from winograd_f4.inc: 8 channels (one nChw8c
// block) per vector in winograd.cpp (AVX2, the baseline) and 16 (two blocks) in winograd_avx512.cpp. A lane is a
// channel and every lane runs the same add/sub/fma sequence in both builds, so they give the same bits; the
// 16-lane build issues half the instructions. The transforms are ~40% of a ResNet-style conv at batch 1 and, with
// both vCPUs of the 2-vCPU VM busy, take twice as long per tile (the GEMMs do not): 32 channels at 32x32, tiles 0-35
// alone: input 14.5 k TSC ticks, output 8.5 k; the same tiles with the other half running beside: 24-41 k, 15-21 k.
#include <cstdint>

#include "backend/cpu/winograd.h"

namespace spore::cpu::detail {

constexpr int kWinogradMR = 12;  // tiles per micro-kernel group (M's rows)
constexpr int kWinogradNR = 16;  // output channels per group (M's columns)
// Floats between the planes of V and U: keeps their starts off a common 4 KB stride (unpadded, V's planes were
// exactly 24 KB apart, all in one L1 set: stores thrashed).
constexpr int64_t kWinogradPlanePad = 16;

struct WinogradTiles {
  const WinogradConv* g;
  int64_t tiles_w, tiles_per_image;  // 4x4 output tiles per row and per image
};

// V[k][t][C] (36 planes, kWinogradPlanePad floats between them) for tiles first .. first+count-1: V = B^T d B over
// each tile's 6x6 input window (zeros outside the image). The 16-lane build needs C % 16 == 0.
void winograd_f4_input_avx2(const WinogradTiles& p, const float* x, int64_t first, int64_t count, float* V);
void winograd_f4_input_avx512(const WinogradTiles& p, const float* x, int64_t first, int64_t count, float* V);

// The 4x4 outputs of `count` tiles from M[36][kWinogradMR][kWinogradNR] (output channels o0 .. o0+width-1):
// Y = A^T M A + bias (bias may be null), then epi's residual add and relu; the parts of a tile past OH/OW are
// dropped. The 16-lane build needs width == 16.
void winograd_f4_output_avx2(const WinogradTiles& p, const float* M, int64_t first, int count, int64_t o0,
                             int64_t width, const float* bias, float* y, const StoreEpilogue& epi);
void winograd_f4_output_avx512(const WinogradTiles& p, const float* M, int64_t first, int count, int64_t o0,
                               int64_t width, const float* bias, float* y, const StoreEpilogue& epi);

}  // namespace spore::cpu::detail
