#pragma once
// Multi-head attention and a Transformer encoder layer built from Dense/LayerNorm/Dropout cells.
// Sequences are batch-first: [N, L, E].
#include <cstdint>
#include <string>

#include "nn/layers.h"

namespace spore::nn {

// softmax(Q K^T / sqrt(d) + mask) V per head, with q/k/v/out Dense projections (Dense's default init).
// mask: additive, broadcastable to [N, heads, L, S] (e.g. [L, S] with -inf above the diagonal).
class MultiHeadAttention : public Cell {
 public:
  MultiHeadAttention(int64_t embed_dim, int64_t num_heads, bool has_bias = true, DType dtype = DType::f32);
  Tensor construct(const Tensor& x) override { return forward(x, x, x); }
  Tensor construct(std::span<const Tensor> xs) override;  // (q, k, v) or (q, k, v, mask)
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor());

  Dense q_proj, k_proj, v_proj, out_proj;

 private:
  Tensor heads(const Tensor& x) const;  // [N, L, E] -> [N, h, L, d]
  int64_t embed_dim_, num_heads_;
};

// Post-norm (norm_first=false) or pre-norm encoder layer:
//   post: x = norm1(x + drop(attn(x))); x = norm2(x + drop(ff(x)))
//   pre:  x = x + drop(attn(norm1(x))); x = x + drop(ff(norm2(x)))
// with ff(x) = linear2(drop(act(linear1(x)))), act "relu" | "gelu".
class TransformerEncoderLayer : public Cell {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dim_feedforward = 2048, double dropout = 0.1,
                          std::string activation = "relu", bool norm_first = false, double layer_norm_eps = 1e-5,
                          DType dtype = DType::f32);
  Tensor construct(const Tensor& x) override { return forward(x); }
  Tensor forward(const Tensor& x, const Tensor& mask = Tensor());

  MultiHeadAttention self_attn;
  Dense linear1, linear2;
  LayerNorm norm1, norm2;
  Dropout dropout, dropout1, dropout2;

 private:
  Tensor feed_forward(const Tensor& x);
  std::string activation_;
  bool norm_first_;
};

}  // namespace spore::nn
