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
#include <optional>
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

// LoRA (Hu et al. 2021, as Hugging Face PEFT defines it) on the projections of every block: y = W x + b + (alpha / r) *
// B (A (dropout(x))) with A [r, in] (kaiming-uniform, a = sqrt(5), as PEFT) and B [out, r] (zeros, so a fresh adapter
// leaves the model's output unchanged). Dropout draws from the counter-based RNG keyed by the training step
// (nn::StepScope), so runs are deterministic.
struct LoraConfig {
  int64_t r = 8;
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> targets;  // block cells: "attn_q", "attn_v", ... (lora_target_cells makes them)
  DType dtype = DType::f32;          // the branch's compute dtype: f32, or bf16 (f32 parameters, explicit casts)
  double scale() const { return alpha / static_cast<double>(r); }
  void validate() const;  // r > 0, alpha finite, 0 <= dropout < 1, targets known and not empty, dtype f32 | bf16
};

// A block's projections: the cell name (GGUF "blk.N.<cell>.weight") and the Hugging Face module path under
// "model.layers.N." (PEFT's keys and target_modules use its last part, "q_proj").
struct LlamaProjection {
  const char* cell;
  const char* hf_module;
};
const std::vector<LlamaProjection>& llama_projections();
// "q_proj,v_proj" (PEFT module names, or cell names "attn_q") -> {"attn_q", "attn_v"}; "all-linear" -> all seven.
// An unknown name is an error that lists the known ones.
std::vector<std::string> lora_target_cells(const std::string& spec);
// The PEFT module name of a cell ("attn_q" -> "q_proj"); an error for an unknown cell.
std::string peft_module_name(const std::string& cell);

class LlamaModel : public Cell {
 public:
  explicit LlamaModel(const LlamaConfig& c);
  ~LlamaModel() override;
  // tokens i64 [B, T] -> logits f32 [B, T, vocab]
  Tensor construct(const Tensor& tokens) override;
  // A contiguous part of construct(), for pipeline stages (train/pipeline.h): blocks [first, last), preceded by the
  // token embedding when `embed` (then `in` is token ids i64 [B, T]; else the residual stream f32 [B*T, dim] of
  // sequences of length T) and followed by the final norm and the output matrix when `head` (then the result is
  // logits [B, T, vocab]; else the residual stream [B*T, dim]). The same ops as construct(), which is
  // forward_part(tokens, T, 0, layers, true, true), so stages chained give its bits.
  Tensor forward_part(const Tensor& in, int64_t T, int64_t first, int64_t last, bool embed, bool head);
  const LlamaConfig& config() const { return cfg_; }

  // Adds LoRA adapters ("blk.N.<cell>.lora_a" [r, in] and ".lora_b" [out, r]) to the target projections of every
  // block and freezes every other parameter (requires_grad false: no gradient, no optimizer state). Once only.
  void add_lora(const LoraConfig& c);
  const LoraConfig* lora() const { return lora_ ? &*lora_ : nullptr; }
  // Replaces a block matrix ("blk.0.attn_q.weight") by a frozen copy stored as `format`: "f32" (f32 [N, K]),
  // "bf16" (bf16 [N, K]) or "q8_0" (u8 [N, K / 32 * 34], ggml's blocks); the forward dequantizes it to f32 where it
  // is used and no gradient flows to it (a QLoRA-style base).
  void set_frozen_matrix(const std::string& name, Tensor w, const std::string& format);

  struct Block;

 private:
  LlamaConfig cfg_;
  std::unique_ptr<Cell> token_embd_, output_norm_, output_;
  CellList blk_;
  std::vector<Block*> blocks_;
  std::optional<LoraConfig> lora_;
};

}  // namespace spore::nn
