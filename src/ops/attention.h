#pragma once
// The fused attention op of the graph compiler (passes/fuse_attention.cpp makes it; ops/attention.cpp defines it):
//   attention(q [..., Lq, D], k, v [..., Lk, Dv], mask?) {scale, k_transposed} -> [..., Lq, Dv]
//   = softmax(scale * q @ k^T [+ mask], last axis) @ v
// k is [..., Lk, D], or [..., D, Lk] (already transposed) when k_transposed=true. The leading (batch) dims of
// q, k and v are equal (no broadcasting); the additive mask broadcasts (NumPy rules) to [..., Lq, Lk].
// The fused kernel sums in another order than matmul + softmax + matmul, so the pass that makes it runs only on
// inference graphs; a model that calls the op itself (nn/llama.h) trains through its gradient rule, which
// recomputes the probabilities with matmul + softmax.
#include <cstdint>
#include <vector>

namespace spore::attention {

using Dims = std::vector<int64_t>;

// Problem sizes from static input shapes (inputs already checked by shape inference).
struct Geometry {
  int64_t batch = 1;  // product of the leading dims
  int64_t lq = 0, lk = 0, d = 0, dv = 0;
  bool k_transposed = false;
};
Geometry geometry(const Dims& q, const Dims& k, const Dims& v, bool k_transposed);

// Element strides of a contiguous mask of shape `mask` broadcast to the scores' shape [..., Lq, Lk]
// (0 along broadcast dims), as {batch stride per leading dim..., row stride, column stride}: the offset of
// scores element (b, i, j) is mask_offset(strides, leading, b) + i * row + j * col.
struct MaskStrides {
  std::vector<int64_t> lead_dims;     // the scores' leading dims
  std::vector<int64_t> lead_strides;  // the mask's stride along each (0 when broadcast)
  int64_t row = 0, col = 0;
  int64_t batch_offset(int64_t b) const;
};
MaskStrides mask_strides(const Dims& mask, const Dims& scores);

}  // namespace spore::attention
