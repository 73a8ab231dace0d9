#pragma once
// A decoder-only LLM (Llama 1/2/3, Mistral, Qwen2/2.5, DeepSeek-R1-Distill-Qwen) loaded from a GGUF file or a Hugging
// Face folder, and the spore graph of one forward step over T tokens (docs/LLM.md). Weights stay in the file's
// mapping (GGUF F32/F16/BF16/Q8_0/Q4_0, safetensors f32/f16/bf16): the graph's constants alias it.
//
//   llm::Model m = llm::Model::load("qwen2.5-0.5b-q8_0.gguf");
//   auto g = m.step_graph({.tokens = 16, .ctx = 4096, .kv_dtype = DType::f16});
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "llm/tokenizer.h"
#include "ops/llm_ops.h"
#include "tensor/tensor.h"

namespace spore::llm {

struct LoraAdapter;

struct ModelConfig {
  std::string arch;  // "llama", "qwen2" (GGUF general.architecture; HF model_type mapped to these)
  std::string source;  // "gguf" or "hf"
  int64_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0;
  int64_t n_ctx_train = 0;
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  double rope_freq_scale = 1.0;  // 1 / linear scaling factor
  std::string rope_mode = "normal";  // normal (GGUF llama: weights permuted by the converter) or neox
  int64_t rope_dim = 0;  // rotated dims per head (0 = head_dim)
  bool tied_embeddings = false;
  bool qkv_bias = false;
  std::string weight_type;  // the dominant format of the matrices ("q8_0", "f16", ...) for reports
};

// A LoRA adapter's update of one matrix at run time: y += scale * B (A x) (Model::add_lora).
struct LoraDelta {
  Tensor a, b;  // f32 [r, in], [out, r]
  double scale = 1.0;
};

struct Weight {
  std::vector<LoraDelta> lora;  // adapters applied to this matrix, in the order added
  Tensor data;  // typed [N, K] for f32/f16/bf16, u8 [N, row_bytes] for q8_0/q4_0; aliases the file mapping
  llm_ops::WeightFormat format = llm_ops::WeightFormat::f32;
  int64_t rows() const { return data.shape()[0]; }
  int64_t bytes() const { return data.nbytes(); }
};

struct LayerWeights {
  Tensor attn_norm, ffn_norm;  // f32 [n_embd]
  Weight wq, wk, wv, wo, w_gate, w_up, w_down;
  std::optional<Tensor> bq, bk, bv;  // f32, Qwen2
};

struct StepOptions {
  int64_t tokens = 1;  // T: tokens per step (1 = decode)
  int64_t ctx = 0;     // KV cache length C
  DType kv_dtype = DType::f32;
  bool all_logits = false;  // logits of every row [T, V] instead of the rows `last` picks [picks, V]
  int64_t picks = 1;        // rows of `last`: logits for that many rows (continuous batching: one per sequence)
  // Pooled caches for continuous batching (llm/engine.h): 0 = one sequence, caches [Hkv, C, D]; S > 0 = caches
  // [S, Hkv, C, D] (i8 scales [S, Hkv, C]) and an input `slots` i64 [T] after `positions` (ops::attention_kv).
  int64_t slots = 0;
  // Besides the logits, the final hidden states of every row after the output norm, f32 [T, n_embd], as the last
  // output (embeddings run through the serving engine's step plans, so they need no plans of their own).
  bool with_hidden = false;
};

class Model {
 public:
  // A .gguf file or a Hugging Face folder. Unknown architecture, missing tensor, wrong shape or an unsupported
  // weight type is an error naming it and the file.
  // use_mmap = false reads the weights into anonymous memory (io::load_file) instead of mapping the file.
  static Model load(const std::string& path, bool use_mmap = true);

  const ModelConfig& config() const { return cfg_; }
  const Tokenizer& tokenizer() const;  // an error when the model has none (HF folder without tokenizer.json)
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const std::string& path() const { return path_; }
  // Bytes of weights one token reads (every matrix once, the output matrix included; embeddings: one row).
  int64_t weight_bytes_per_token() const;
  int64_t file_bytes() const { return file_bytes_; }
  // KV cache bytes per position; i8 rows carry an f32 scale each.
  int64_t kv_bytes_per_token(DType kv) const {
    const int64_t row = kv == DType::i8 ? cfg_.head_dim + 4 : cfg_.head_dim * static_cast<int64_t>(dtype_size(kv));
    return 2 * cfg_.n_layer * cfg_.n_head_kv * row;
  }

  // The graph of one step. Inputs: tokens i64 [T], positions i64 [T] (consecutive), with o.slots > 0 slots i64 [T],
  // last i64 [picks] (the rows whose logits to return; absent with all_logits or hidden), then k_cache_l, v_cache_l
  // [Hkv, C, D] (pooled: [S, Hkv, C, D]) for every layer, each layer's pair followed, for an i8 cache, by its row
  // scales k_scale_l, v_scale_l f32 [Hkv, C] ([S, Hkv, C]). Outputs: logits f32 [picks, V] (or [T, V]; hidden: the
  // normed hidden states [T, E]), then k_new_l, v_new_l f32 [T, Hkv, D] for every layer, which the caller writes into
  // its cache at the step's positions.
  std::unique_ptr<Graph> step_graph(const StepOptions& o) const;

  // Applies a LoRA adapter (llm/lora.h) in every step graph built from now on: each adapted matrix computes
  // W x + scale * (alpha / r) * B (A x), the branch in f32 (linear_blockq, batch invariant). fit_adapter checks it
  // against this model first (architecture, layers, shapes: errors name the tensor). Adapters add up.
  void add_lora(LoraAdapter a, double scale = 1.0);

 private:
  ModelConfig cfg_;
  std::string path_;
  int64_t file_bytes_ = 0;
  std::shared_ptr<const void> keep_;  // the mapping(s) the weights alias
  std::shared_ptr<const Tokenizer> tokenizer_;
  Tensor tok_embd_;  // [V, row]
  llm_ops::WeightFormat tok_embd_format_ = llm_ops::WeightFormat::f32;
  Tensor output_norm_;
  Weight output_;  // = token embedding when tied
  std::optional<Tensor> rope_freqs_;
  std::vector<LayerWeights> layers_;

  static Model load_gguf(const std::string& path, bool use_mmap);
  void prefault() const;
  static Model load_hf(const std::string& dir, bool use_mmap);
};

}  // namespace spore::llm
