#pragma once
// Hook through which conv2d_fused (fused_conv.cpp) has the f32 conv2d kernel (conv.cpp) apply the epilogue to
// each image's output right after the task that produced it, while it is still in cache. Only the per-image
// paths (direct AVX2 conv, im2col + sgemm) take it; the others leave `applied` false and the caller applies
// the epilogue afterwards. Either way the epilogue is an elementwise function of each output element, so the
// bits are the same.
#include <cstdint>
#include <functional>

#include "backend/cpu/store_epilogue.h"
#include "base/attrs.h"
#include "tensor/tensor.h"

namespace spore::cpu {

struct ConvEpilogue {
  std::function<void(int64_t offset, int64_t count)> fn;  // output elements [offset, offset + count) are final
  bool applied = false;                                   // set by the conv kernel when it ran fn on every block
  // Set by conv2d_fused when fn is "relu (or nothing), then 2x2 max pooling (stride 2, floor) into `pooled`"
  // ([N, O, Ho/2, Wo/2] f32) with no residual: a conv path that computes the pooled values directly may run
  // instead of fn - each conv output with its own sum order, relu as unary_f32 does it, windows taken in
  // max_pool2d's order, so the same bits - and then sets `applied`.
  float* pooled = nullptr;
  bool pooled_relu = false;
};

// The epilogue for the next conv2d kernel call on this thread (the kernel takes and clears it at entry).
ConvEpilogue*& pending_conv_epilogue();

// max_pool2d with 2x2 windows, stride 2, no padding (floor) of `planes` f32 planes h x w into h/2 x w/2, on the
// calling thread, with the f32 max_pool2d kernel's own code (so the same bits); conv2d_fused's pool="max2x2".
void max_pool_2x2_planes(const float* x, float* y, int64_t planes, int64_t h, int64_t w);

// conv2d (f32) through oneDNN with x and/or y in the blocked layout [N, C/8, H, W, 8] (conv2d_fused's
// src_layout / dst_layout "nchw8c", ops/fused.h): the primitive reads and writes them as nChw8c directly, so
// no activation reorder runs. `a` holds conv2d's attributes. weights_constant: w is a plan constant
// (KernelContext::constant_inputs), so a Winograd conv may reuse its transformed weights across calls.
// epilogue (may be null): an elementwise function of y's elements (memory order) that spore's own kernels
// (Winograd, direct) apply to each task's output right after computing it; returns whether it was applied
// (false: oneDNN ran, the caller applies it). fused: the same epilogue where it is a residual add and/or relu,
// which Winograd and the direct kernel apply as they store each output (store_epilogue.h).
bool conv2d_blocked(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Attrs& a, bool src_blocked,
                    bool dst_blocked, bool weights_constant = false,
                    const std::function<void(int64_t offset, int64_t count)>* epilogue = nullptr,
                    const StoreEpilogue* fused = nullptr);

}  // namespace spore::cpu
