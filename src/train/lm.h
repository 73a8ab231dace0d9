#pragma once
// Pretraining a small Llama / Qwen2 language model on a text file (`spore train-lm`): a byte-level BPE tokenizer
// trained on the text (or one taken from a GGUF or a Hugging Face tokenizer.json), nn::LlamaModel trained by
// train::Model (causal LM loss: cross entropy of the next token, mean over tokens; AdamW; linear warm-up then cosine
// decay; global-norm clipping; gradient accumulation; graph or PyNative mode), evaluated every interval on held-out
// text, checkpointed so that a resumed run gives the bits of an uninterrupted one, and exported as a GGUF that
// llm::Model (`spore generate`) loads, with the tokenizer in its metadata, and optionally as a Hugging Face folder
// (config.json, model.safetensors, tokenizer.json).
//
//   train::LmOptions o;  o.model = {.arch = "llama", .dim = 128, .layers = 4, .heads = 4, .kv_heads = 2,
//                                   .ffn = 384, .ctx = 128};
//   o.data = "tinyshakespeare.txt";  o.train_tokenizer = true;  o.vocab = 512;  o.steps = 200;
//   o.ckpt_dir = "ckpt";  o.out = "tiny.gguf";
//   train::LmReport r = train::train_lm(o, [](const train::LmProgress& p) { ... });
//
// Batches: micro-batch m (optimizer step s, micro-batch i: m = s * accum + i) is B windows of ctx + 1 tokens at
// offsets drawn from (seed, m), so the data a step sees does not depend on where a run was resumed. Validation:
// the first eval_batches * B non-overlapping windows of the validation tokens (--val-data, else the last 10% of
// the training text's tokens). Checkpoint directory: checkpoint.safetensors (parameters, AdamW state, step),
// state.json (settings and loss history), tokenizer.gguf (the tokenizer's metadata).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "nn/llama.h"

namespace spore::io {
class GgufFile;
}
namespace spore::llm {
class Tokenizer;
}

namespace spore::train {

// The settings train-lm and finetune share: batches, schedule, AdamW, clipping, evaluation, checkpoints.
struct LmRunOptions {
  int64_t batch = 16, steps = 100, warmup = 0, accum = 1;
  int64_t eval_every = 0;    // 0: evaluate at the end only
  int64_t eval_batches = 8;  // validation batches of `batch` windows
  double lr = 1e-3, min_lr_ratio = 0.1, clip = 1.0, weight_decay = 0.01;
  double val_fraction = 0.1;  // without val_data: the last fraction of the tokens
  uint64_t seed = 0;
  std::string mode = "graph";  // "graph" | "pynative"
  std::string amp_level = "O0";  // mixed precision (train::ModelOptions): "O0".."O3", f32 master weights
  DType amp_dtype = DType::bf16;
  std::string ckpt_dir;        // required
  int64_t stop_after = 0;      // > 0: stop (checkpointed) after this step, as an interrupted run would
  // Data parallel over parallel::world() (train::ParallelContext): each step's `batch` windows are cut into
  // grad_shards shards and rank r draws only its rows; N = 1, 2, 4 ... give the same bits for the same grad_shards.
  // Needs accum 1. Rank 0 writes the tokenizer, checkpoints and outputs; every rank resumes from them.
  bool data_parallel = false;
  int64_t grad_shards = 0;  // 0: the rank count
  // Model parallelism (LmOptions::model_parallel): the ranks of one model replica (pipeline stages, tensor-parallel
  // degree); 0: every rank. With W ranks, W / this replicas train data parallel: replica d runs micro-batches
  // [d M/D, (d+1) M/D) of each step's M (accum) and the replicas' gradients are summed before the step.
  int64_t model_parallel_ranks = 0;
  double bucket_mb = 25;    // ParallelContext::bucket_mb: gradient buckets allreduced while backward runs
};

struct LmOptions : LmRunOptions {
  nn::LlamaConfig model;  // vocab is the tokenizer's size
  std::string data, val_data;
  std::string tokenizer;         // a GGUF with tokenizer.* metadata, a Hugging Face tokenizer.json or folder, or
  bool train_tokenizer = false;  // train a byte-level BPE of `vocab` tokens on `data`
  int64_t vocab = 0;
  std::string out;  // MODEL.gguf (optional); the loss curve goes beside it as MODEL.loss.svg
  std::string out_type = "f32";  // the GGUF's matrices: "f32" | "f16" | "bf16" | "q8_0" (1-D tensors stay f32)
  std::string hf_out;            // also a Hugging Face folder of the model (export_llama_hf) when not empty
  // Model parallelism over parallel::world(): "pipeline" (train/pipeline.h: one stage per rank, `accum` micro-batches
  // per step in `pipeline_schedule` "gpipe" | "1f1b"), "tensor" (train/tensor_parallel.h: Megatron splits over every
  // rank); empty: none.
  std::string model_parallel;
  std::string pipeline_schedule = "1f1b";
};

struct LmProgress {
  std::string kind;  // "step", "eval", "resume"
  int64_t step = 0, steps = 0;
  double loss = 0, lr = 0, tokens_per_s = 0, elapsed_s = 0;
  double train_loss = 0, train_ppl = 0, val_loss = 0, val_ppl = 0;  // "eval"
};

struct LmReport {
  int64_t start_step = 0, steps = 0, params = 0, vocab = 0, train_tokens = 0, val_tokens = 0;
  double last_loss = 0, val_loss = 0, val_ppl = 0, tokens_per_s = 0, train_seconds = 0;
  std::string gguf, svg, checkpoint, hf_dir;
  std::vector<double> step_losses;  // every step's loss (mean over its micro-batches), from step 1
  std::vector<std::pair<int64_t, double>> val_curve;  // (step, validation loss) of every evaluation
};

LmReport train_lm(const LmOptions& o, const std::function<void(const LmProgress&)>& on_progress = {});

// Writes `m` as a GGUF of `m.config().arch` with its tensors under their parameter names, and every tokenizer.*
// key of `tokenizer` (when given). Matrices are stored as `type` ("f32", "f16", "bf16" or "q8_0", as llama.cpp's
// converter does: 1-D tensors - norms, biases - stay f32); another type is an invalid_argument error.
void export_llama_gguf(nn::LlamaModel& m, const io::GgufFile* tokenizer, const std::string& path,
                       const std::string& type = "f32");

// Writes `m` as a Hugging Face folder `dir` (created) in the layout of transformers' LlamaForCausalLM /
// Qwen2ForCausalLM checkpoints, which llm::Model::load_hf reads: config.json, model.safetensors (f32, HF names:
// model.embed_tokens.weight, model.layers.{i}.self_attn.q_proj.weight, ..., model.norm.weight, lm_head.weight unless
// tied; llama's q/k rows put back from GGUF's rope order into HF's, llm::permute_qk_rows) and the tokenizer
// (Tokenizer::write_hf: tokenizer.json, tokenizer_config.json; byte-level BPE only, else an unsupported error).
void export_llama_hf(nn::LlamaModel& m, const llm::Tokenizer& tokenizer, const std::string& dir);
// The Hugging Face checkpoint name of a nn::LlamaModel parameter (its GGUF name): "blk.0.attn_q.weight" ->
// "model.layers.0.self_attn.q_proj.weight", "token_embd.weight" -> "model.embed_tokens.weight", ...
std::string llama_hf_name(const std::string& gguf_name);

// Mean next-token cross entropy of logits f32 [B, T, V] against labels i64 [B, T], in double. Labels < 0 are not
// targets (finetune's non-assistant tokens) and count for nothing; `count` (when given) gets the targets' number.
double lm_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t* count = nullptr);

// ---- The pieces train_lm and finetune (train/finetune.h) share.
// Token streams; a mask (when not empty, one byte per token) marks the tokens that are targets of the loss.
struct LmTokens {
  std::vector<int32_t> train, val;
  std::vector<uint8_t> train_mask, val_mask;
};
// The training text's tokens and the validation ones: `val_text`'s, or the last o.val_fraction of the training ones
// (with their mask).
void split_validation(LmTokens& t, double val_fraction);
// Trains `net` (its trainable parameters) on windows of ctx + 1 tokens: the batches, schedule, AdamW, evaluation and
// resumable checkpoints that train_lm describes. `key` names the model and data a checkpoint directory belongs to.
// With `eval_at_start`, the validation loss before the first step is reported as an "eval" at step 0 (and in
// val_curve) before training starts.
LmReport train_decoder(nn::LlamaModel& net, const LmTokens& data, int64_t ctx, const LmRunOptions& o,
                       const std::string& key, const std::function<void(const LmProgress&)>& on_progress,
                       bool eval_at_start = false);
// The loss curve (every step's training loss and the validation losses) as an SVG.
void write_loss_svg(const std::string& path, const LmReport& r, const std::string& title);
// Reads a whole text file; errors name `what` and the path (missing, unreadable, empty).
std::string read_text_file(const std::string& path, const char* what);

}  // namespace spore::train
