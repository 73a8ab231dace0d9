#pragma once
// One registration function per op family (src/ops/<family>.cpp); registry.cpp calls them in order.
#include "ops/registry.h"

namespace spore {
void register_structure_ops(OpRegistry& r);   // structure.cpp: input, constant, identity
void register_elementwise_ops(OpRegistry& r); // elementwise.cpp: unary math, activations, clip, cast, logical_not
void register_binary_ops(OpRegistry& r);      // binary.cpp: arithmetic, comparisons, logical, where
void register_reduce_ops(OpRegistry& r);      // reduce.cpp: reductions, arg*, softmax, cumsum, topk
void register_linalg_ops(OpRegistry& r);      // linalg.cpp: matmul, linear
void register_conv_ops(OpRegistry& r);        // conv.cpp: conv2d, conv_transpose2d, pooling
void register_norm_ops(OpRegistry& r);        // norm.cpp: batch/layer/rms/group norm, dropout
void register_shape_ops(OpRegistry& r);       // shape.cpp: reshape ... one_hot, arange, full
void register_quant_ops(OpRegistry& r);       // quant.cpp: quantize/dequantize_linear, qconv2d, qlinear
void register_fused_elementwise_ops(OpRegistry& r);  // fused_elementwise.cpp: fused_elementwise
void register_fused_ops(OpRegistry& r);       // fused.cpp: conv2d_fused, linear_fused (epilogue fusion)
void register_attention_ops(OpRegistry& r);   // attention.cpp: attention (fuse_attention)
void register_rnn_ops(OpRegistry& r);         // rnn.cpp: rnn_sequence (ONNX LSTM / GRU / RNN)
void register_index_ops(OpRegistry& r);       // index.cpp: scatter_nd, gather_nd, grid_sample, roi_align, einsum
}  // namespace spore
