#pragma once
// Hook through which conv2d_fused (fused_conv.cpp) has the f32 conv2d kernel (conv.cpp) apply the epilogue to
// each image's output right after the task that produced it, while it is still in cache. Only the per-image
// paths (direct AVX2 conv, im2col + sgemm) take it; the others leave `applied` false and the caller applies
// the epilogue afterwards. Either way the epilogue is an elementwise function of each output element, so the
// bits are the same.
#include <cstdint>
#include <functional>

namespace spore::cpu {

struct ConvEpilogue {
  std::function<void(int64_t offset, int64_t count)> fn;  // output elements [offset, offset + count) are final
  bool applied = false;                                   // set by the conv kernel when it ran fn on every block
};

// The epilogue for the next conv2d kernel call on this thread (the kernel takes and clears it at entry).
ConvEpilogue*& pending_conv_epilogue();

// max_pool2d with 2x2 windows, stride 2, no padding (floor) of `planes` f32 planes h x w into h/2 x w/2, on the
// calling thread, with the f32 max_pool2d kernel's own code (so the same bits); conv2d_fused's pool="max2x2".
void max_pool_2x2_planes(const float* x, float* y, int64_t planes, int64_t h, int64_t w);

}  // namespace spore::cpu
