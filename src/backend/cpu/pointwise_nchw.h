#pragma once
// Pointwise (1x1, stride 1, no padding, groups 1) f32 convolution on plain NCHW tensors: per image the GEMM
// y[O, HW] = w[O, C] x[C, HW] + bias, with pixels in the vector lanes (16 with AVX-512, 8 with AVX2), no packing
// of x, the bias in the accumulators' start. For the 1x1 convs that stay outside a blocked chain: ShuffleNet's
// 58/116/232-channel convs (channel counts that are not whole 8-channel blocks), DenseNet's pre-activation 1x1s.
// oneDNN's brgconv ran those at 70-75 GFLOP/s on one core and slower on two (each call forks its own OpenMP region,
// and its plain-layout path reorders internally); this kernel's tasks run on the plan's team.
//
// Every output sums its C products in groups of kPointwiseGroup channels: the first group by fma from the bias
// (or +0) in increasing c, each later one by fma from +0, the group sums added left to right. That sequence depends
// on nothing else - not the ISA, the tiling, the thread count or the batch - so the AVX-512 and AVX2 builds give the
// same bits, on any machine, and an image's outputs do not depend on the rest of the batch.
#include <cstdint>
#include <functional>

namespace spore::cpu {

inline constexpr int64_t kPointwiseGroup = 64;

struct PointwiseConv {
  int64_t n, c, o, hw;  // batch, input channels, output channels, pixels per image
};

// y = conv1x1(x, w [O, C]) + bias [O] (bias may be null), all contiguous NCHW. epilogue (may be null): applied by
// each task to its output ranges (offset, count in y's elements) right after computing them.
// SPORE_POINTWISE_ISA=avx2 forces the AVX2 build (tests compare the two).
void pointwise_nchw_conv(const PointwiseConv& g, const float* x, const float* w, const float* bias, float* y,
                         const std::function<void(int64_t offset, int64_t count)>* epilogue = nullptr);

namespace detail {
// Output channels [o0, o1) x pixels [p0, p1) of image n (x, y at the image), one build per ISA
// (pointwise_nchw_tiles.inc).
void pointwise_block_avx2(const PointwiseConv& g, const float* x, const float* w, const float* bias, float* y,
                          int64_t o0, int64_t o1, int64_t p0, int64_t p1);
void pointwise_block_avx512(const PointwiseConv& g, const float* x, const float* w, const float* bias, float* y,
                            int64_t o0, int64_t o1, int64_t p0, int64_t p1);
}  // namespace detail

}  // namespace spore::cpu
