// spore train-lm: pretrains a small Llama / Qwen2 decoder on a text file (train::train_lm, train/lm.h) and writes a
// GGUF that `spore generate` runs. This file parses options and prints; the work is in the library.
#include <unistd.h>

#include <cmath>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "base/thread_pool.h"
#include "parallel/communicator.h"
#include "runtime/profiler.h"
#include "tools/spore/commands.h"
#include "train/lm.h"

namespace spore::cli {

int cmd_train_lm(int argc, char** argv) {
  CLI::App app(
      "spore train-lm: pretrain a small Llama/Qwen2 decoder (causal LM loss, AdamW, warm-up + cosine, clipping, "
      "accumulation) on a text file; resumable checkpoints, train/val loss and perplexity, a GGUF for spore generate "
      "and a loss-curve SVG beside it",
      "spore train-lm");
  train::LmOptions o;
  nn::LlamaConfig& m = o.model;
  int threads = 0;
  int64_t log_every = 0;
  bool json = false;
  app.add_option("--arch", m.arch, "llama | qwen2")->check(CLI::IsMember({"llama", "qwen2"}));
  app.add_option("--dim", m.dim, "embedding width")->required()->check(CLI::PositiveNumber);
  app.add_option("--layers", m.layers, "decoder blocks")->required()->check(CLI::PositiveNumber);
  app.add_option("--heads", m.heads, "attention heads")->required()->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", m.kv_heads, "key/value heads (GQA; default: --heads)")->check(CLI::PositiveNumber);
  app.add_option("--ffn", m.ffn, "SwiGLU hidden width")->required()->check(CLI::PositiveNumber);
  app.add_option("--ctx", m.ctx, "context (training window) length")->required()->check(CLI::PositiveNumber);
  app.add_flag("--tie-embeddings", m.tie_embeddings, "the output matrix is the token embedding");
  app.add_option("--rope-theta", m.rope_theta, "rope base")->check(CLI::PositiveNumber);
  app.add_option("--data", o.data, "training text (UTF-8)")->required();
  app.add_option("--val-data", o.val_data, "validation text (default: the last 10% of --data's tokens)");
  auto* tok = app.add_option("--tokenizer", o.tokenizer,
                             "a GGUF whose tokenizer.* metadata to use, or a Hugging Face tokenizer.json (or its "
                             "folder) of a byte-level BPE, written into the GGUF as such metadata");
  auto* train_tok = app.add_flag("--train-tokenizer", o.train_tokenizer, "train a byte-level BPE on --data");
  tok->excludes(train_tok);
  app.add_option("--vocab", o.vocab, "--train-tokenizer's vocabulary size (>= 257)")->check(CLI::PositiveNumber);
  add_lm_run_options(app, o);
  std::string amp_dtype = "bf16";
  app.add_option("--amp-level", o.amp_level,
                 "mixed precision: O0 (f32), O1 (matmul/linear/attention in --amp-dtype), O2 (all but norms, softmax, "
                 "reductions and the loss), O3 (all); f32 master weights and AdamW state")
      ->check(CLI::IsMember({"O0", "O1", "O2", "O3"}));
  app.add_option("--amp-dtype", amp_dtype, "the low dtype of --amp-level: bf16 | f16")
      ->check(CLI::IsMember({"bf16", "f16"}));
  app.add_option("--seed", o.seed, "seed of the weights and the batches");
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--ckpt-dir", o.ckpt_dir, "checkpoints (resumed from when present)")->required();
  app.add_option("-o,--output", o.out, "the trained model, MODEL.gguf (its loss curve: MODEL.loss.svg)")->required();
  app.add_option("--hf-out", o.hf_out,
                 "also write the model as a Hugging Face folder: config.json, model.safetensors, tokenizer.json, "
                 "tokenizer_config.json");
  app.add_option("--out-type", o.out_type, "the GGUF's matrices: f32 | f16 | bf16 | q8_0 (norms stay f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
  app.add_option("--stop-after", o.stop_after, "stop after this step, checkpointed (a later run resumes)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-every", log_every,
                 "a progress line every N steps (default: every step on a terminal, "
                 "else every 10)")
      ->check(CLI::NonNegativeNumber);
  std::string profile_path;
  app.add_option("--profile", profile_path,
                 "record every kernel of the run: write a Chrome trace (Perfetto) to this file and print the top ops "
                 "by time to stderr");
  std::string parallel_mode = "stand_alone";
  app.add_option("--parallel", parallel_mode,
                 "stand_alone | data: data parallel over the ranks of `mpirun -np N spore train-lm ...` (bit-identical "
                 "for every N given --grad-shards; needs --accum 1) | pipeline: one stage of blocks per rank "
                 "(`mpirun -np S`), the bits of one process with --accum M | tensor: Megatron splits of attention and "
                 "MLP over `mpirun -np N` ranks (one process's result within f32 rounding)")
      ->check(CLI::IsMember({"stand_alone", "data", "pipeline", "tensor"}));
  int64_t stages = 0, micro_batches = 0, tp = 0;
  app.add_option("--tp", tp,
                 "tensor: the tensor-parallel degree N (default: the rank count; a rank count D x N trains D "
                 "data-parallel replicas)")
      ->check(CLI::PositiveNumber);
  app.add_option("--stages", stages,
                 "pipeline: the stage count S (default: the rank count; a rank count D x S trains D data-parallel "
                 "replicas, each running M / D of the micro-batches)")
      ->check(CLI::PositiveNumber);
  app.add_option("--micro-batches", micro_batches,
                 "pipeline: micro-batches M of --batch windows per optimizer step (the same as --accum M)")
      ->check(CLI::PositiveNumber);
  app.add_option("--schedule", o.pipeline_schedule, "pipeline: gpipe | 1f1b")->check(CLI::IsMember({"gpipe", "1f1b"}));
  app.add_option("--grad-shards", o.grad_shards,
                 "data parallel: each step's --batch windows as M fixed shards summed in one tree order (default: the "
                 "rank count); N ranks need N | M and M/N a power of two")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bucket-mb", o.bucket_mb,
                 "data parallel: allreduce the gradients in buckets of about this many MiB as backward produces them "
                 "(0: one allreduce after backward); bits unchanged")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "one JSON object per step and evaluation, then {\"final\": true, ...}");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  o.amp_dtype = amp_dtype == "f16" ? DType::f16 : DType::bf16;
  SPORE_CHECK(o.train_tokenizer || !o.tokenizer.empty(), ErrorCode::invalid_argument,
              "give --tokenizer (GGUF | tokenizer.json) or --train-tokenizer --vocab V");
  SPORE_CHECK(!o.train_tokenizer || o.vocab > 0, ErrorCode::invalid_argument, "--train-tokenizer needs --vocab V");
  set_threads(threads);
  o.data_parallel = parallel_mode == "data";
  if (parallel_mode == "pipeline") {
    o.model_parallel = "pipeline";
    SPORE_CHECK(micro_batches == 0 || o.accum == 1 || o.accum == micro_batches, ErrorCode::invalid_argument,
                "--micro-batches {} and --accum {} disagree (in a pipeline they are the same thing)", micro_batches,
                o.accum);
    if (micro_batches > 0) o.accum = micro_batches;
  } else {
    SPORE_CHECK(stages == 0 && micro_batches == 0, ErrorCode::invalid_argument,
                "--stages and --micro-batches need --parallel pipeline");
  }
  if (parallel_mode == "tensor") o.model_parallel = "tensor";
  else SPORE_CHECK(tp == 0, ErrorCode::invalid_argument, "--tp needs --parallel tensor");
  if (o.data_parallel || !o.model_parallel.empty()) start_data_parallel();
  // Model parallelism over W ranks: S = --stages / --tp ranks per replica (default W), W / S replicas data parallel.
  const int64_t per_replica = o.model_parallel == "tensor" ? tp : stages;
  if (!o.model_parallel.empty()) {
    const int64_t W = parallel::world().size();
    SPORE_CHECK(per_replica == 0 || W % per_replica == 0, ErrorCode::invalid_argument,
                "--{} {} but {} ranks: run `mpirun -np {} spore train-lm ...` (one {} per rank), or a multiple of {} "
                "for data parallel replicas",
                o.model_parallel == "tensor" ? "tp" : "stages", per_replica, W, per_replica,
                o.model_parallel == "tensor" ? "slice" : "stage", per_replica);
    o.model_parallel_ranks = per_replica;
  }
  const bool tty = !json && ::isatty(STDOUT_FILENO) != 0;
  if (log_every == 0) log_every = tty ? 1 : 10;
  if (!json)
    std::cout << fmt::format(
                     "train-lm: {} dim {} layers {} heads {}/{} ffn {} ctx {}, batch {} x accum {}, {} steps, "
                     "lr {} (warm-up {}), {} mode, {} threads\n",
                     m.arch, m.dim, m.layers, m.heads, m.kv_heads, m.ffn, m.ctx, o.batch, o.accum, o.steps, o.lr,
                     o.warmup, o.mode, num_threads())
              << std::flush;
  const auto on_progress = [&](const train::LmProgress& p) { print_lm_progress(p, json, tty, log_every); };
  std::unique_ptr<Profiler> prof;
  if (!profile_path.empty()) prof = std::make_unique<Profiler>();
  if (prof && (o.data_parallel || !o.model_parallel.empty()))
    profile_path = profile_per_rank(*prof, profile_path, parallel::world());
  const train::LmReport r = train::train_lm(o, on_progress);
  if (prof) {
    prof->write_chrome_trace(profile_path);
    std::cerr << prof->top_table(25) << "trace: " << profile_path << "\n";
    prof.reset();
  }
  nlohmann::json fin{{"final", true},
                     {"steps", r.steps},
                     {"start_step", r.start_step},
                     {"params", r.params},
                     {"vocab", r.vocab},
                     {"train_tokens", r.train_tokens},
                     {"val_tokens", r.val_tokens},
                     {"loss", r.last_loss},
                     {"val_loss", r.val_loss},
                     {"val_ppl", r.val_ppl},
                     {"tokens_per_s", r.tokens_per_s},
                     {"train_s", r.train_seconds},
                     {"gguf", r.gguf},
                     {"svg", r.svg},
                     {"checkpoint", r.checkpoint},
                     {"hf_dir", r.hf_dir},
                     {"threads", num_threads()}};
  if (o.data_parallel || !o.model_parallel.empty()) fin["comm"] = comm_stats_json();
  if (json) {
    std::cout << fin.dump() << std::endl;
  } else {
    if (o.data_parallel || !o.model_parallel.empty()) std::cout << comm_stats_text() << "\n";
    std::cout << fmt::format(
        "done: {} steps, {} parameters, vocab {}, val loss {:.4f} (ppl {:.2f}), {:.0f} tok/s{}{}{}\n", r.steps,
        r.params, r.vocab, r.val_loss, r.val_ppl, r.tokens_per_s,
        r.gguf.empty() ? ", stopped early (resume to finish)" : ", model " + r.gguf,
        r.hf_dir.empty() ? "" : ", Hugging Face folder " + r.hf_dir, r.svg.empty() ? "" : ", loss curve " + r.svg);
  }
  return 0;
}

}  // namespace spore::cli
