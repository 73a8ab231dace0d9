#pragma once
// A trainable Llama / Qwen2 decoder: the model `spore generate` runs (llm/model.h), as a Cell. Parameters carry the
// GGUF tensor names the llm loader reads ("token_embd.weight", "blk.0.attn_q.weight", ..., "output_norm.weight",
// "output.weight" unless tied), so exporting is writing each parameter under its own name (train/lm.h).
//
//   nn::LlamaConfig c{.arch = "llama", .vocab = 512, .dim = 128, .layers = 4, .heads = 4, .kv_heads = 2,
//                     .ffn = 384, .ctx = 128};
//   nn::set_seed(1);
//   nn::LlamaModel m(c);
//   Tensor logits = m(tokens);  // tokens i64 [B, T] (T <= ctx) -> logits f32 [B, T, vocab]
//
// A block: x += o_proj(attention(rope(q), rope(k), v, causal mask)) on rms_norm(x); x += down(silu(gate) * up) on
// rms_norm(x). GQA without repeating K/V: the G = heads / kv_heads query heads that share a kv head are stacked
// along the query rows ([B, Hkv, G*T, D]) against a causal mask [G*T, T]. rope: "normal" (adjacent pairs, GGUF
// llama) or "neox" (halves, GGUF qwen2), as the loader applies them. Qwen2 has q/k/v biases.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/cell.h"

namespace spore::nn {

struct LlamaConfig {
  std::string arch = "llama";  // "llama" | "qwen2"
  int64_t vocab = 0, dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, ctx = 0;
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_embeddings = false;
  double init_std = 0.02;  // normal(0, std) for matrices and the embedding; norms start at 1, biases at 0

  int64_t head_dim() const { return heads > 0 ? dim / heads : 0; }
  bool qkv_bias() const { return arch == "qwen2"; }
  const char* rope_mode() const { return arch == "qwen2" ? "neox" : "normal"; }
  // Throws invalid_argument naming the first bad field (arch, sizes > 0, dim % heads, heads % kv_heads, even
  // head_dim).
  void validate() const;
};

class LlamaModel : public Cell {
 public:
  explicit LlamaModel(const LlamaConfig& c);
  ~LlamaModel() override;
  // tokens i64 [B, T] -> logits f32 [B, T, vocab]
  Tensor construct(const Tensor& tokens) override;
  const LlamaConfig& config() const { return cfg_; }

  struct Block;

 private:
  LlamaConfig cfg_;
  std::unique_ptr<Cell> token_embd_, output_norm_, output_;
  CellList blk_;
  std::vector<Block*> blocks_;
};

}  // namespace spore::nn
