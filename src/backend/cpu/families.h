#pragma once
#include "ops/kernel.h"

namespace spore::cpu {
void register_elementwise(KernelRegistry& r);
void register_binary(KernelRegistry& r);
void register_reduce(KernelRegistry& r);
void register_linalg(KernelRegistry& r);
void register_conv(KernelRegistry& r);
void register_conv3d(KernelRegistry& r);  // conv3d.cpp: conv3d, conv_transpose3d, 3-D pooling
void register_norm(KernelRegistry& r);
void register_shape(KernelRegistry& r);
void register_quant(KernelRegistry& r);
void register_fused(KernelRegistry& r);  // fused_conv.cpp: conv2d_fused, linear_fused
void register_fused_elementwise(KernelRegistry& r);
void register_attention(KernelRegistry& r);  // attention.cpp: attention
void register_rnn(KernelRegistry& r);        // rnn.cpp: rnn_sequence
void register_blockq(KernelRegistry& r);     // blockq.cpp: linear_blockq, embed_blockq
void register_llm_attention(KernelRegistry& r);  // llm_attention.cpp: rope, attention_kv
void register_sample(KernelRegistry& r);         // sample.cpp: grid_sample, roi_align and their gradients
// shape.cpp: dst [cols, rows] = src [rows, cols] transposed (es-byte elements), as the transpose op copies: tiles
// that keep both sides in cache, over the threads.
void transpose_2d(const void* src, void* dst, int64_t rows, int64_t cols, size_t es);
}  // namespace spore::cpu
