#pragma once
// Fused ops of the graph compiler (passes/fuse_epilogue.cpp makes them; ops/fused.cpp defines them):
//   conv2d_fused(x, w, bias?, residual?)  conv2d attributes + epilogue attributes
//   linear_fused(x, w, bias?, residual?)  epilogue attributes
// compute y = act(base(x, w, bias) [+ residual]) with the residual of exactly the output's type (no
// broadcasting) and act one of none, relu, leaky_relu(alpha), clip(min, max), sigmoid, tanh,
// gelu(approximate), silu; conv2d_fused may end with pool="max2x2" (a 2x2/2 max_pool2d of the activation's
// output; the output is then pooled and the residual has the conv output's type). Attribute `residual` says whether the last input is the residual (so a residual
// without a bias is inputs (x, w, residual)). Kernels run the base op's kernel and then the add and the
// activation with the very functions the unfused kernels use, so fused == unfused bit for bit.
#include <optional>
#include <string_view>
#include <vector>

#include "base/attrs.h"
#include "ir/op_id.h"
#include "tensor/tensor.h"

namespace spore::fused {

// The op a fused op computes first (conv2d_fused -> conv2d); nullopt for other ops.
std::optional<OpId> base_op(OpId fused);
// The fused op that extends `base` (conv2d -> conv2d_fused); nullopt when there is none.
std::optional<OpId> fused_op_of(OpId base);
// The activation's op (relu, leaky_relu, ...), nullopt for "none"; throws invalid_argument on other names.
std::optional<OpId> activation_op(std::string_view activation);
// The activation name for an op that can be an epilogue ("relu" for "relu"_op), nullopt otherwise.
std::optional<std::string_view> activation_name(OpId op);
// The attributes of the base op and of the activation op (normalized fused attrs in, only theirs out).
Attrs base_attrs(OpId fused, const Attrs& a);
Attrs activation_attrs(const Attrs& a);
// conv2d_fused's pool="max2x2" step as max_pool2d attributes (2x2 windows, stride 2, no padding, floor).
Attrs pool_attrs();
// conv2d_fused's blocked layout (src_layout / dst_layout = "nchw8c", made by passes/layout.cpp): [N, C/8, H, W, 8],
// channel c at [n, c / 8, h, w, c % 8] — oneDNN's nChw8c, so its AVX2 convolutions read and write it directly.
inline constexpr int64_t kChannelBlock = 8;
// [N, C, H, W] <-> [N, C/8, H, W, 8] with ops:: (reshape + transpose; traced, they are the pass's reorder nodes).
Tensor to_blocked(const Tensor& x);
Tensor from_blocked(const Tensor& x);
// Which inputs are bias and residual (-1: absent), from the input count and the `residual` attribute.
struct Operands {
  int bias = -1;
  int residual = -1;
};
Operands operands(const Attrs& a, int num_inputs);

}  // namespace spore::fused
