// The trainable Llama / Qwen2 decoder (nn/llama.h).
#include "nn/llama.h"

#include <cmath>
#include <limits>
#include <optional>

#include "base/error.h"
#include "nn/init.h"
#include "ops/llm_ops.h"
#include "ops/ops.h"

namespace spore::nn {
namespace {

// A cell that only holds "weight" (and "bias"): the GGUF names are <cell>.weight / <cell>.bias.
class WeightCell : public Cell {
 public:
  explicit WeightCell(Tensor w, const Tensor& b = Tensor()) : w_(&register_parameter("weight", std::move(w))) {
    if (b.defined()) b_ = &register_parameter("bias", b);
  }
  const Tensor& w() const { return *w_; }
  std::optional<Tensor> b() const { return b_ ? std::optional<Tensor>(*b_) : std::nullopt; }
  Tensor linear(const Tensor& x) const { return ops::linear(x, *w_, b()); }

 private:
  Tensor* w_;
  Tensor* b_ = nullptr;
};

std::unique_ptr<WeightCell> matrix(int64_t rows, int64_t cols, double std, bool bias = false) {
  Tensor w = init::normal({rows, cols}, 0.0, std);
  return std::make_unique<WeightCell>(std::move(w), bias ? init::zeros({rows}) : Tensor());
}
std::unique_ptr<WeightCell> norm(int64_t n) { return std::make_unique<WeightCell>(init::ones({n})); }

}  // namespace

void LlamaConfig::validate() const {
  SPORE_CHECK(arch == "llama" || arch == "qwen2", ErrorCode::invalid_argument, "arch '{}' is not llama or qwen2", arch);
  SPORE_CHECK(vocab > 0 && dim > 0 && layers > 0 && heads > 0 && kv_heads > 0 && ffn > 0 && ctx > 0,
              ErrorCode::invalid_argument,
              "model sizes must be > 0: vocab {}, dim {}, layers {}, heads {}, kv heads {}, ffn {}, ctx {}", vocab, dim,
              layers, heads, kv_heads, ffn, ctx);
  SPORE_CHECK(dim % heads == 0, ErrorCode::invalid_argument, "dim {} is not a multiple of heads {}", dim, heads);
  SPORE_CHECK(heads % kv_heads == 0, ErrorCode::invalid_argument, "heads {} is not a multiple of kv heads {}", heads,
              kv_heads);
  SPORE_CHECK(head_dim() % 2 == 0, ErrorCode::invalid_argument, "head dim {} (dim / heads) must be even for rope",
              head_dim());
}

struct LlamaModel::Block : Cell {
  std::unique_ptr<WeightCell> attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down;
  explicit Block(const LlamaConfig& c) {
    const int64_t E = c.dim, Dq = c.heads * c.head_dim(), Dkv = c.kv_heads * c.head_dim();
    const double s = c.init_std;
    attn_norm = norm(E);
    attn_q = matrix(Dq, E, s, c.qkv_bias());
    attn_k = matrix(Dkv, E, s, c.qkv_bias());
    attn_v = matrix(Dkv, E, s, c.qkv_bias());
    attn_output = matrix(E, Dq, s);
    ffn_norm = norm(E);
    ffn_gate = matrix(c.ffn, E, s);
    ffn_up = matrix(c.ffn, E, s);
    ffn_down = matrix(E, c.ffn, s);
    register_cell("attn_norm", *attn_norm);
    register_cell("attn_q", *attn_q);
    register_cell("attn_k", *attn_k);
    register_cell("attn_v", *attn_v);
    register_cell("attn_output", *attn_output);
    register_cell("ffn_norm", *ffn_norm);
    register_cell("ffn_gate", *ffn_gate);
    register_cell("ffn_up", *ffn_up);
    register_cell("ffn_down", *ffn_down);
  }
};

LlamaModel::LlamaModel(const LlamaConfig& c) : cfg_(c) {
  c.validate();
  token_embd_ = matrix(c.vocab, c.dim, c.init_std);
  register_cell("token_embd", *token_embd_);
  for (int64_t l = 0; l < c.layers; ++l) {
    auto b = std::make_unique<Block>(c);
    blocks_.push_back(b.get());
    blk_.append(std::move(b));
  }
  register_cell("blk", blk_);
  output_norm_ = norm(c.dim);
  register_cell("output_norm", *output_norm_);
  if (!c.tie_embeddings) {
    output_ = matrix(c.vocab, c.dim, c.init_std);
    register_cell("output", *output_);
  }
}

LlamaModel::~LlamaModel() = default;

Tensor LlamaModel::construct(const Tensor& tokens) {
  const LlamaConfig& c = cfg_;
  SPORE_CHECK(tokens.rank() == 2 && (tokens.dtype() == DType::i64 || tokens.dtype() == DType::i32),
              ErrorCode::invalid_argument, "LlamaModel takes token ids i64 [batch, time], got {} {}",
              dtype_name(tokens.dtype()), shape_str(tokens.shape()));
  const int64_t B = tokens.shape()[0], T = tokens.shape()[1];
  SPORE_CHECK(B > 0 && T > 0 && T <= c.ctx, ErrorCode::invalid_argument,
              "LlamaModel: [batch, time] = [{}, {}] needs batch > 0 and 0 < time <= ctx {}", B, T, c.ctx);
  const int64_t H = c.heads, Hkv = c.kv_heads, G = H / Hkv, D = c.head_dim();
  // Positions 0..T-1 for every sequence (rope takes rows [B*T, heads, D]); the causal mask of the G query heads
  // stacked on one kv head: row r is query r % T.
  Tensor pos = Tensor::empty({B * T}, DType::i64);
  for (int64_t i = 0; i < B * T; ++i) pos.data<int64_t>()[i] = i % T;
  Tensor mask = Tensor::empty({G * T, T}, DType::f32);
  for (int64_t r = 0; r < G * T; ++r)
    for (int64_t j = 0; j < T; ++j)
      mask.data<float>()[r * T + j] = j <= r % T ? 0.0f : -std::numeric_limits<float>::infinity();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const Attrs att{{"scale", scale}};

  auto heads_first = [&](const Tensor& t, int64_t h) {  // [B*T, h, D] -> [B, h, T, D]
    return ops::transpose(ops::reshape(t, {B, T, h, D}), {0, 2, 1, 3});
  };
  // Rows stay 2-D [B*T, E] between the attention blocks: linear and its gradients then run as plain 2-D products
  // (a 3-D x makes the input gradient a batched matmul, which ran 1.2x slower on 1 thread and did not scale to 2).
  Tensor x = ops::embedding(static_cast<WeightCell&>(*token_embd_).w(), ops::reshape(tokens, {B * T}));
  for (Block* b : blocks_) {
    Tensor h = ops::rms_norm(x, b->attn_norm->w(), -1, c.rms_eps);
    Tensor q = ops::reshape(b->attn_q->linear(h), {B * T, H, D});
    Tensor k = ops::reshape(b->attn_k->linear(h), {B * T, Hkv, D});
    Tensor v = ops::reshape(b->attn_v->linear(h), {B * T, Hkv, D});
    // rope is f32 only: under mixed precision (train::ModelOptions::amp_level) q and k arrive in the low dtype.
    if (q.dtype() != DType::f32) q = ops::cast(q, DType::f32);
    if (k.dtype() != DType::f32) k = ops::cast(k, DType::f32);
    q = ops::rope(q, pos, c.rope_theta, c.rope_mode());
    k = ops::rope(k, pos, c.rope_theta, c.rope_mode());
    const Tensor qh = ops::reshape(heads_first(q, H), {B, Hkv, G * T, D});
    const Tensor in[4] = {qh, heads_first(k, Hkv), heads_first(v, Hkv), mask};
    Tensor a = ops::call1("attention"_op, in, att);  // [B, Hkv, G*T, D] = [B, H, T, D]
    a = ops::reshape(ops::transpose(ops::reshape(a, {B, H, T, D}), {0, 2, 1, 3}), {B * T, H * D});
    x = ops::add(x, b->attn_output->linear(a));
    h = ops::rms_norm(x, b->ffn_norm->w(), -1, c.rms_eps);
    const Tensor ff = ops::mul(ops::silu(b->ffn_gate->linear(h)), b->ffn_up->linear(h));
    x = ops::add(x, b->ffn_down->linear(ff));
  }
  x = ops::rms_norm(x, static_cast<WeightCell&>(*output_norm_).w(), -1, c.rms_eps);
  const WeightCell& out = static_cast<WeightCell&>(c.tie_embeddings ? *token_embd_ : *output_);
  return ops::reshape(ops::linear(x, out.w()), {B, T, c.vocab});
}

}  // namespace spore::nn
