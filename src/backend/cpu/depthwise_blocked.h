#pragma once
// Depthwise f32 convolution (groups = C = O, the mobile nets' 3x3 and 5x5 convs) on the blocked layout nChw8c
// ([N, C/8, H, W, 8], passes/layout.cpp) in and out. conv2d_blocked (conv.cpp) runs it instead of oneDNN, whose
// plain-NCHW depthwise ran mobilenet_v2's at 1-3 GFLOP/s (55% of the model), and whose blocked one needs the
// chain to stay blocked anyway.
//
// Lanes are the 8 channels of a block: one pixel per AVX2 vector (the baseline ISA, and the image borders), two
// neighbouring pixels per AVX-512 vector, up to 4 channel blocks side by side (depthwise_blocked_avx512.cpp, the interior of each row where the CPU has
// it; SPORE_CONV_DIRECT_ISA=avx2 forces AVX2, read per call). Every output element is its bias (or +0) followed by
// one fma per in-image tap in (kernel row, kernel column) order; taps in the padding are skipped. That order
// depends on nothing else (not the ISA, the tiling, the thread count or the batch), so an image's outputs never
// depend on the rest of the batch, and every x86-64-v3 machine computes the same bits.
#include <cstdint>
#include <functional>
#include <memory>

#include "backend/cpu/store_epilogue.h"

namespace spore {
class Storage;
}

namespace spore::cpu {

struct DepthwiseBlockedConv {
  int64_t n, c, h, w;          // batch, channels (= groups = output channels), input height and width
  int64_t oh, ow, kh, kw;      // output size, kernel size
  int64_t sh, sw, dh, dw;      // stride, dilation
  int64_t pad_top, pad_left;   // zero padding before the image (the end padding follows from oh, ow)
  int64_t wc = 0;              // channels in w and bias when fewer than c (padding channels get zero weights)
};

// The same conv on plain NCHW x and y (a depthwise conv outside a blocked chain, any C): x reordered into a
// zero-padded nChw8c buffer, depthwise_blocked_conv, y reordered back - two copies at memory speed instead of
// oneDNN's per-group im2col + sgemm (3-6 GFLOP/s on mobilenet_v3's 5x5 depthwise convs).
void depthwise_plain_conv(const DepthwiseBlockedConv& g, const float* x, const float* w, const float* bias, float* y,
                          const std::shared_ptr<Storage>& weights_owner = nullptr);

// C a multiple of 8 (wc <= C), kernel, stride and dilation >= 1, pads >= 0.
bool depthwise_blocked_supported(const DepthwiseBlockedConv& g);

// y = depthwise conv2d(x, w [C, 1, kH, kW]) + bias [C] (bias may be null); x and y nChw8c, contiguous.
// weights_owner: w's storage when w is a plan constant (its packed copy is then kept, constant_cache.h). epilogue /
// fused: as direct_blocked_conv's (each task's output ranges right after computing them / in the stores).
void depthwise_blocked_conv(const DepthwiseBlockedConv& g, const float* x, const float* w, const float* bias, float* y,
                            const std::shared_ptr<Storage>& weights_owner = nullptr,
                            const std::function<void(int64_t offset, int64_t count)>* epilogue = nullptr,
                            const StoreEpilogue* fused = nullptr);

namespace detail {
// One output row of depthwise_blocked_conv for the per-ISA kernels.
// One output row of `cbs` (1-4) consecutive channel blocks: block k's input plane, weights, biases and output (and
// residual) row are xstride, wstride, 8 and ystride floats after block 0's. Their independent fma chains fill the
// pipeline where a row is short (7x7 and 14x14 planes: one block's few pixels wait on fma latency).
struct DepthwiseRow {
  const DepthwiseBlockedConv* g;
  const float* xc;    // the input plane of this image and channel block
  const float* wc;    // its packed weights [kH][kW][8]
  const float* bias;  // its 8 biases, or null
  const float* res;   // the residual row (StoreEpilogue) or null
  bool relu;
  float* y;           // the output row
  int64_t iy0;        // input row of kernel row 0 (may be outside the image)
  int64_t i0, i1;     // kernel rows whose input row is inside the image: i0 <= i < i1 (dilation-strided)
  int cbs = 1;
  int64_t xstride = 0, wstride = 0, ystride = 0;
  bool stream = false;  // the input outgrows the caches: the AVX-512 interior prefetches the rows below its window
};
// The kernel columns [j0, j1) whose input column x0 + j * dw lies inside the image (x0: the window's first input
// column, possibly negative); no division for dilation 1.
inline void in_image_columns(const DepthwiseBlockedConv& g, int64_t x0, int64_t& j0, int64_t& j1) {
  if (g.dw == 1) {
    j0 = x0 >= 0 ? 0 : (-x0 < g.kw ? -x0 : g.kw);
    j1 = g.w - x0 <= 0 ? 0 : (g.w - x0 < g.kw ? g.w - x0 : g.kw);
  } else {
    j0 = x0 >= 0 ? 0 : (-x0 + g.dw - 1) / g.dw;
    if (j0 > g.kw) j0 = g.kw;
    j1 = g.w - x0 <= 0 ? 0 : (g.w - x0 + g.dw - 1) / g.dw;
    if (j1 > g.kw) j1 = g.kw;
  }
  if (j1 < j0) j1 = j0;
}
// Output pixels [ox0, ox1) of the row's blocks, every tap inside the image, two pixels per AVX-512 vector; returns
// the first pixel not computed (an odd one left over).
int64_t depthwise_interior_avx512(const DepthwiseRow& r, int64_t ox0, int64_t ox1);
}  // namespace detail

}  // namespace spore::cpu
