#pragma once
// LoRA adapters of a Llama / Qwen2 decoder as files (Hugging Face PEFT and llama.cpp GGUF) and their fit to a base
// model. `spore finetune` writes them (train/finetune.h), llm::Model::add_lora applies one at run time and
// merge_lora folds one into a GGUF base.
//
//   llm::LoraAdapter a = llm::read_adapter("out/adapter");  // a PEFT folder, or an adapter .gguf
//   llm::Model m = llm::Model::load("base.gguf");
//   m.add_lora(a, 1.0);                                      // y = W x + scale * (alpha / r) * B (A x)
//
// PEFT: adapter_config.json (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules,
// base_model_name_or_path) and adapter_model.safetensors with keys
// "base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight" [r, in] and "...lora_B.weight" [out, r].
// GGUF (llama.cpp's convert_lora_to_gguf.py / llama-adapter.cpp): general.type "adapter", adapter.type "lora",
// adapter.lora.alpha (f32), general.architecture of the base, tensors "blk.{i}.attn_q.weight.lora_a" (ne [in, r],
// row-major [r, in]) and ".lora_b" (ne [r, out], row-major [out, r]).
//
// Rows of Q and K: GGUF llama files hold them permuted for rope's adjacent-pair mode (llama.cpp's HF converter does
// it, and spore train-lm trains in that order), Hugging Face checkpoints do not. An adapter's B rows of q/k follow
// one convention or the other (`permuted_qk`); fit_adapter puts them in the base's, write_peft writes HF's.
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace spore::llm {

struct ModelConfig;

struct LoraPair {
  Tensor a;  // f32 [r, in]
  Tensor b;  // f32 [out, r]
};

struct LoraAdapter {
  std::string arch;  // the base's architecture: "llama" | "qwen2"
  int64_t r = 0;
  double alpha = 0, dropout = 0;
  std::vector<std::string> targets;         // block cells ("attn_q", ...), in the order of nn::llama_projections
  std::string base_model;                   // base_model_name_or_path
  std::map<std::string, LoraPair> tensors;  // by the base tensor's GGUF name, "blk.0.attn_q.weight"
  bool permuted_qk = false;                 // q/k B rows in GGUF llama order
  int64_t n_head = 0, n_head_kv = 0;        // known when permuted_qk (the permutation is per head)
  double scale() const { return alpha / static_cast<double>(r); }
};

// Writes adapter_config.json and adapter_model.safetensors into `dir` (created).
void write_peft(const LoraAdapter& a, const std::string& dir);
// Writes a llama.cpp LoRA adapter GGUF (f32 tensors).
void write_gguf_adapter(const LoraAdapter& a, const std::string& path);
// Reads them back. A missing file, a bad or unsupported config key, an unknown or unpaired tensor, or tensors of
// different ranks is an error naming the file and the key or tensor.
LoraAdapter read_peft(const std::string& dir);
LoraAdapter read_gguf_adapter(const std::string& path);
// A folder: PEFT; a file: GGUF.
LoraAdapter read_adapter(const std::string& path);

// Rows of a q/k projection's output (f32 [heads * hd, in]), per head of hd rows: GGUF llama order (adjacent rope
// pairs: row 2j + s) <-> Hugging Face order (halves: row s * hd/2 + j). to_gguf: HF -> GGUF, else GGUF -> HF. Used for
// adapters' B matrices and for whole q/k weights (train::export_llama_hf).
Tensor permute_qk_rows(const Tensor& w, int64_t heads, bool to_gguf);

// Checks `a` against the base (architecture, layer index and shape of every tensor: errors name the tensor, its
// shape and the expected one) and puts its q/k rows in the base's convention.
void fit_adapter(LoraAdapter& a, const ModelConfig& base);

// Writes `base_gguf` with every adapted matrix replaced by W + scale * (alpha / r) * B A (f32, or Q8_0 with
// quantize "q8_0", which also stores every other matrix whose rows are whole Q8_0 blocks as Q8_0), all metadata
// kept. quantize: "" (keep the base's types) | "f32" | "q8_0".
void merge_lora(const std::string& base_gguf, LoraAdapter a, double scale, const std::string& out_path,
                const std::string& quantize = "");

}  // namespace spore::llm
