#pragma once
// Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution (Lavin & Gray 2015) for f32 conv2d on the blocked layout
// nChw8c ([N, C/8, H, W, 8], passes/layout.cpp): 2.25x / 4x fewer multiplies than direct convolution. F(4x4) costs
// precision: up to ~1.2e-5 of max|y| against a float64 conv (F(2x2): ~5e-7; measured, C <= 128), which is why
// the tile is a documented choice (winograd_tile, SPORE_WINOGRAD_TILE). conv2d_blocked
// (conv.cpp) runs it instead of oneDNN where winograd_qualifies says so (SPORE_CONV_WINOGRAD=0 turns it off).
// Deterministic and batch-invariant: every output element is one fixed sequence of f32 operations on its own
// image's data, whatever the thread count, the batch size or the image's position in the batch.
#include <cstdint>
#include <functional>
#include <memory>

#include "backend/cpu/store_epilogue.h"

namespace spore {
class Storage;
}

namespace spore::cpu {

struct WinogradConv {
  int64_t n, c, h, w, o;                           // batch, input channels, input height and width, output channels
  int64_t oh, ow;                                  // output height and width
  int64_t kh, kw, sh, sw, dh, dw, groups;          // kernel size, stride, dilation, groups
  int64_t pad_top, pad_left, pad_bottom, pad_right;  // zero padding (>= 0)
};

// Whether winograd_conv2d_nchw8c computes this conv (`supported`: 3x3 kernel, stride 1, dilation 1, groups 1,
// pads >= 0, C and O multiples of 8) and, for the other rules, is also measured to beat oneDNN's direct conv
// at this size: oneDNN capped at AVX2 (spore's default) or at full AVX-512 (ONEDNN_MAX_CPU_ISA=ALL).
enum class WinogradRule { supported, beats_onednn_avx2, beats_onednn_avx512 };
bool winograd_qualifies(const WinogradConv& g, WinogradRule rule);

// The output tile size winograd_conv2d_nchw8c uses for this conv: 2 (F(2x2, 3x3)) or 4 (F(4x4, 3x3)), at most
// max_tile (2: conv_algo=precise, F(2x2)'s f32 error is PyTorch's; 4: conv_algo=fast, F(4x4) where it needs fewer
// multiplies, ~3x that error). SPORE_WINOGRAD_TILE=2|4 overrides both (tests, A/B runs).
int winograd_tile(const WinogradConv& g, int max_tile = 4);

// y[N, O/8, OH, OW, 8] = conv2d(x[N, C/8, H, W, 8], w[O, C, 3, 3]) + bias[O] (bias may be null); contiguous
// buffers. Throws unsupported unless winograd_qualifies(g, WinogradRule::supported). weights_owner: the storage
// holding w when w is a plan constant (its bytes do not change while the storage lives): the transformed weights
// are then kept for it (constant_cache.h: same bits as transforming them again) instead of recomputed per call.
// epilogue (may be null): called on ranges [offset, offset + count) of y's elements, every element once, by the
// thread that computed them right after its task (while they are in its cache); an elementwise epilogue (residual
// add, activation) then gives the bits of applying it to the finished y. fused (may be null): the same epilogue
// as a StoreEpilogue (store_epilogue.h), applied in registers instead where the tile size allows (F(4x4); then
// `epilogue` is not called).
void winograd_conv2d_nchw8c(const WinogradConv& g, const float* x, const float* w, const float* bias, float* y,
                            const std::shared_ptr<Storage>& weights_owner = nullptr,
                            const std::function<void(int64_t offset, int64_t count)>* epilogue = nullptr,
                            const StoreEpilogue* fused = nullptr, int max_tile = 4);

}  // namespace spore::cpu
