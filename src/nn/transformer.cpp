#include "nn/transformer.h"

#include <cmath>

#include "ops/ops.h"

namespace spore::nn {

MultiHeadAttention::MultiHeadAttention(int64_t e, int64_t h, bool has_bias, DType dtype)
    : q_proj(e, e, has_bias, "", dtype),
      k_proj(e, e, has_bias, "", dtype),
      v_proj(e, e, has_bias, "", dtype),
      out_proj(e, e, has_bias, "", dtype),
      embed_dim_(e),
      num_heads_(h) {
  SPORE_CHECK(h > 0 && e % h == 0, ErrorCode::invalid_argument,
              "nn::MultiHeadAttention: embed_dim {} is not divisible by num_heads {}", e, h);
  SPORE_REGISTER_CELLS(q_proj, k_proj, v_proj, out_proj);
}

Tensor MultiHeadAttention::construct(std::span<const Tensor> xs) {
  SPORE_CHECK(xs.size() == 1 || xs.size() == 3 || xs.size() == 4, ErrorCode::invalid_argument,
              "nn::MultiHeadAttention: expected (x), (q, k, v) or (q, k, v, mask), got {} inputs", xs.size());
  if (xs.size() == 1) return forward(xs[0], xs[0], xs[0]);
  return forward(xs[0], xs[1], xs[2], xs.size() == 4 ? xs[3] : Tensor());
}

Tensor MultiHeadAttention::heads(const Tensor& x) const {
  const int64_t d = embed_dim_ / num_heads_;
  return ops::transpose(ops::reshape(x, {x.dim(0), x.dim(1), num_heads_, d}), {0, 2, 1, 3});
}

Tensor MultiHeadAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  for (const Tensor* t : {&q, &k, &v})
    SPORE_CHECK(t->rank() == 3 && t->dim(2) == embed_dim_, ErrorCode::shape_mismatch,
                "nn::MultiHeadAttention: expected [N, L, {}] inputs, got {}", embed_dim_, shape_str(t->shape()));
  SPORE_CHECK(k.shape() == v.shape() && q.dim(0) == k.dim(0), ErrorCode::shape_mismatch,
              "nn::MultiHeadAttention: query {}, key {} and value {} do not match", shape_str(q.shape()),
              shape_str(k.shape()), shape_str(v.shape()));
  const int64_t n = q.dim(0), l = q.dim(1), d = embed_dim_ / num_heads_;
  const Tensor qh = heads(q_proj(q)), kh = heads(k_proj(k)), vh = heads(v_proj(v));
  Tensor scores = ops::mul(ops::matmul(qh, kh, false, true), 1.0 / std::sqrt(static_cast<double>(d)));
  if (mask.defined()) scores = ops::add(scores, mask);
  const Tensor ctx = ops::matmul(ops::softmax(scores, -1), vh);  // [N, h, L, d]
  return out_proj(ops::reshape(ops::transpose(ctx, {0, 2, 1, 3}), {n, l, embed_dim_}));
}

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, int64_t dff, double p,
                                                 std::string activation, bool norm_first, double eps, DType dtype)
    : self_attn(d_model, nhead, true, dtype),
      linear1(d_model, dff, true, "", dtype),
      linear2(dff, d_model, true, "", dtype),
      norm1({d_model}, eps, true, dtype),
      norm2({d_model}, eps, true, dtype),
      // Each Dropout draws its own seed (nn::next_init_key), so layers of a stack do not share masks.
      dropout(p),
      dropout1(p),
      dropout2(p),
      activation_(std::move(activation)),
      norm_first_(norm_first) {
  SPORE_CHECK(activation_ == "relu" || activation_ == "gelu", ErrorCode::invalid_argument,
              "nn::TransformerEncoderLayer: expected activation relu|gelu, got '{}'", activation_);
  SPORE_REGISTER_CELLS(self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2);
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  const Tensor h = linear1(x);
  return linear2(dropout(activation_ == "relu" ? ops::relu(h) : ops::gelu(h)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& mask) {
  if (norm_first_) {
    const Tensor a = norm1(x);
    Tensor y = ops::add(x, dropout1(self_attn.forward(a, a, a, mask)));
    return ops::add(y, dropout2(feed_forward(norm2(y))));
  }
  const Tensor y = norm1(ops::add(x, dropout1(self_attn.forward(x, x, x, mask))));
  return norm2(ops::add(y, dropout2(feed_forward(y))));
}

}  // namespace spore::nn
