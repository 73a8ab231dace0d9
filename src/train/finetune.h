#pragma once
// LoRA fine-tuning of a Llama / Qwen2 GGUF or Hugging Face folder (`spore finetune`): the base's weights loaded into
// nn::LlamaModel and frozen (f32, or stored as bf16 / Q8_0 and dequantized where used: QLoRA-style), LoRA adapters
// (nn::LoraConfig) on the target projections trained by train_decoder (train/lm.h: the batches, schedule, AdamW,
// evaluation and checkpoints of train-lm), and written as a Hugging Face PEFT folder and a llama.cpp GGUF adapter
// (llm/lora.h).
//
//   train::FinetuneOptions o;
//   o.base = "base.gguf";  o.data = "kjv.txt";  o.lora.targets = nn::lora_target_cells("q_proj,v_proj");
//   o.steps = 200;  o.lr = 2e-3;  o.ckpt_dir = "out/ckpt";  o.out_dir = "out/adapter";
//   train::FinetuneReport r = train::finetune(o);
//
// Data: a text file (every token a target), or .jsonl with one {"messages": [{"role", "content"}, ...]} per line,
// rendered with the base's chat template (or `chat_template`: chatml, llama3, deepseek-r1); only the tokens of the
// assistant turns (their content and end-of-turn marker) are loss targets. Conversations are concatenated and cut
// into windows like text.
// Output folder: adapter_config.json + adapter_model.safetensors (PEFT), adapter.gguf (llama.cpp), loss.svg.
#include <functional>
#include <memory>
#include <string>

#include "nn/llama.h"
#include "train/lm.h"

namespace spore::io {
class GgufFile;
}

namespace spore::train {

struct FinetuneOptions : LmRunOptions {
  FinetuneOptions() { weight_decay = 0; }
  std::string base;  // the base model, a Llama / Qwen2 GGUF or Hugging Face folder (load_llama_base)
  std::string data, val_data;
  std::string chat_template;       // .jsonl: a template name instead of the base's own
  int64_t ctx = 0;                 // training window (0: the base's context, at most 256)
  nn::LoraConfig lora;             // targets default to q_proj, v_proj
  std::string base_dtype = "f32";  // "f32" | "bf16" | "q8_0": how the frozen block matrices are stored
  std::string out_dir;             // required
};

struct FinetuneReport : LmReport {
  int64_t trainable_params = 0, all_params = 0;
  double base_val_loss = 0;  // before the first step
  std::string peft_dir, gguf_adapter;
};

FinetuneReport finetune(const FinetuneOptions& o, const std::function<void(const LmProgress&)>& on_progress = {});

// The decoder of a Llama / Qwen2 base - a GGUF file, or a Hugging Face folder (config.json, *.safetensors in f32 /
// f16 / bf16, as train-lm --hf-out writes and spore generate reads) - as a trainable nn::LlamaModel with its weights
// in f32, under GGUF names and GGUF's row order (a folder's llama q/k rows are permuted as llama.cpp's converter
// does: a folder and its GGUF conversion give the same parameters). A base the model cannot represent (rope scaling,
// partial rope, other architectures), a folder without config.json, a config.json field that is missing or names
// another architecture, and a missing or misshapen tensor are errors naming the file, field or tensor.
std::unique_ptr<nn::LlamaModel> load_llama_base(const std::string& path);

}  // namespace spore::train
