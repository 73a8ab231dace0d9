#pragma once
// Direct f32 convolution into the blocked layout nChw8c ([N, O/8, OH, OW, 8], passes/layout.cpp) from nChw8c
// ([N, C/8, H, W, 8]) or plain NCHW (a chain's first conv, e.g. 3-channel images), for the convs of a chain that
// Winograd does not take: strided 3x3, 1x1 (strided or not), the stem; any kernel size, padding and stride;
// dilation 1, O/groups a multiple of 8 (and C/groups too for a blocked source: each group's channels are whole
// blocks, so a group is a conv of its own over a slice of the blocks - regnet's 8-channel groups). conv2d_blocked (conv.cpp) runs it
// instead of oneDNN (SPORE_CONV_DIRECT=0 keeps oneDNN, read per call).
//
// Lanes are output channels: 16 per AVX-512 vector, 8 per AVX2 vector. Every output element sums its in-image taps
// in the order (input channel block, kernel row, kernel column, channel in the block), taps in the padding skipped,
// in groups of direct_group_blocks input channel blocks and, within a block, of direct_group_rows kernel rows: the
// first group by fma from the bias (or +0), each later one by fma from +0, the group sums added left to right. That sequence depends on nothing else - not the ISA, the register
// tiling, the thread count or the batch - so the AVX-512 and AVX2 builds give the same bits, on any machine, and
// an image's outputs do not depend on the rest of the batch.
#include <cstdint>
#include <functional>
#include <memory>

#include "backend/cpu/store_epilogue.h"

namespace spore {
class Storage;
}

namespace spore::cpu {

// Input channel blocks (of 8) per summation group: about 64 taps (1x1: 8 blocks, 2x2: 2, 3x3 and up: 1). One
// chain over a deep reduction (a 1x1 over 1024 channels) had about twice the f32 error against float64 of ORT's
// blocked sums on the torchvision exports; groups cut it to the order of sqrt(taps * group).
// static: internal linkage, so no copy built for one ISA can be the one another file links to.
static constexpr int64_t direct_group_blocks(int64_t kh, int64_t kw) {
  return kh * kw >= 8 ? 1 : 8 / (kh * kw);
}
// Kernel rows per summation group within a channel block, so that a group stays near 72 taps where one block's
// taps are more: a plain source's 7x7 stem over 3 channels (147 taps in one chain had 1.6x the f32 error of ORT's
// per-channel sums; rows 0-2, 3-5, 6: 0.75x), blocked 5x5 and larger kernels (one row each). `channels`: the
// channels of a block (8; a plain source's min(8, C)). 3x3 and smaller kernels keep all rows in one group.
static constexpr int64_t direct_group_rows(int64_t kh, int64_t kw, int64_t channels) {
  const int64_t rows = 72 / (kw * channels);
  return rows < 1 ? 1 : rows > kh ? kh : rows;
}

struct DirectBlockedConv {
  int64_t n, c, h, w, o;                              // batch, input channels, input height and width, output channels
  int64_t oh, ow, kh, kw, sh, sw;                     // output size, kernel size, stride
  int64_t pad_top, pad_left;                          // zero padding before the image (the end padding follows from oh, ow)
  bool plain_src = false;                             // x is NCHW (any C) instead of nChw8c
  int64_t groups = 1;                                 // grouped conv: each group's C/groups and O/groups channels
};

// Whether direct_blocked_conv computes this conv (O/groups, and C/groups unless plain_src, multiples of 8; kernel and
// stride >= 1, pads >= 0).
bool direct_blocked_supported(const DirectBlockedConv& g);

// y = conv2d(x, w [O, C, kH, kW]) + bias [O] (bias may be null), y blocked, both contiguous. weights_owner: w's
// storage when w is a plan constant - its packed copy is then kept (constant_cache.h); null: packed per call.
// SPORE_CONV_DIRECT_ISA=avx2 forces the AVX2 build (tests compare the two). epilogue (may be null): as
// winograd_conv2d_nchw8c's - each task's output ranges, by the thread that computed them, right after. fused
// (may be null): the same epilogue as a StoreEpilogue, applied in registers as each value is stored instead.
void direct_blocked_conv(const DirectBlockedConv& g, const float* x, const float* w, const float* bias, float* y,
                         const std::shared_ptr<Storage>& weights_owner = nullptr,
                         const std::function<void(int64_t offset, int64_t count)>* epilogue = nullptr,
                         const StoreEpilogue* fused = nullptr);

namespace detail {
// One call's operands for the per-ISA row kernels (direct_blocked_tiles.inc). wp: w's output channels
// [o_begin, o_end) packed per L-lane output block as [blocks][ceil(C/8)][kH][kW][8][L] (L = 8 for AVX2, 16 for
// AVX-512; input channels past C and output channels past O are zero); bias (or null): o_end floats, zero past O.
struct DirectJob {
  const DirectBlockedConv* g;  // one group's conv (groups 1): x, y and the residual start at the group's channels
  bool plain;
  const float* x;
  const float* wp;
  const float* bias;
  float* y;
  StoreEpilogue epi;  // applied as each output vector is stored
  int64_t o_begin = 0, o_end = 0;  // the output channels computed (multiples of L)
  int64_t x_image = 0, y_image = 0;  // floats per image of x and of y (and the residual): all groups' channels
};
// Output rows [oy0, oy1) of image n, the L-lane output blocks [t_lo, t_hi) (block t = channels [t*L, t*L + L), within
// the job's [o_begin / L, o_end / L)): AVX2, and AVX-512 with 16 lanes (when O % 16 == 8, the last block's upper 8 lanes
// compute zeros from zero weights and bias and are not stored).
// tot: scratch for the running group sums, (oy1 - oy0) * OW * 4 * L floats with AVX-512, 2 * L with AVX2.
void direct_rows_avx2(const DirectJob& j, int64_t n, int64_t oy0, int64_t oy1, int64_t t_lo, int64_t t_hi, float* tot);
void direct_rows_avx512(const DirectJob& j, int64_t n, int64_t oy0, int64_t oy1, int64_t t_lo, int64_t t_hi,
                        float* tot);
// 8 lanes inside the AVX-512 target (32 registers: 16-pixel tiles): a conv (group) with 8 output channels from a
// blocked source.
void direct_rows_avx512_8(const DirectJob& j, int64_t n, int64_t oy0, int64_t oy1, int64_t t_lo, int64_t t_hi,
                          float* tot);
}  // namespace detail

}  // namespace spore::cpu
