#pragma once
#include "ops/kernel.h"

namespace spore::reference {
void register_elementwise(KernelRegistry& r);
void register_binary(KernelRegistry& r);
void register_reduce(KernelRegistry& r);
void register_linalg(KernelRegistry& r);
void register_conv(KernelRegistry& r);
void register_norm(KernelRegistry& r);
void register_shape(KernelRegistry& r);
void register_quant(KernelRegistry& r);
void register_fused(KernelRegistry& r);  // fused.cpp: conv2d_fused, linear_fused
void register_fused_elementwise(KernelRegistry& r);
void register_attention(KernelRegistry& r);  // attention.cpp: attention
void register_rnn(KernelRegistry& r);        // rnn.cpp: rnn_sequence
void register_blockq(KernelRegistry& r);     // blockq.cpp: linear_blockq, embed_blockq
void register_llm_attention(KernelRegistry& r);  // llm_attention.cpp: rope, attention_kv
void register_index(KernelRegistry& r);          // index.cpp: scatter_nd, gather_nd, grid_sample, roi_align, einsum
}  // namespace spore::reference
