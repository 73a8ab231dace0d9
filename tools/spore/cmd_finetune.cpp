// spore finetune: LoRA fine-tuning of a Llama / Qwen2 GGUF (train::finetune, train/finetune.h), writing a PEFT folder
// and a llama.cpp GGUF adapter. This file parses options and prints; the work is in the library.
#include <unistd.h>

#include <cmath>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "base/thread_pool.h"
#include "tools/spore/commands.h"
#include "train/finetune.h"

namespace spore::cli {

int cmd_finetune(int argc, char** argv) {
  CLI::App app(
      "spore finetune: LoRA fine-tuning of a Llama/Qwen2 GGUF on a text file or .jsonl chats (loss on the assistant "
      "turns); the base stays frozen (f32, bf16 or q8_0); writes a Hugging Face PEFT adapter and a llama.cpp GGUF "
      "adapter",
      "spore finetune");
  train::FinetuneOptions o;
  int threads = 0;
  int64_t log_every = 0;
  bool json = false;
  std::string targets = "q_proj,v_proj", lora_dtype = "f32", amp_dtype = "bf16";
  app.add_option("base", o.base,
                 "the base model (.gguf, or a Hugging Face folder: config.json, *.safetensors, tokenizer.json)")
      ->required();
  app.add_option("--data", o.data, "training data: text, or .jsonl of {\"messages\": [...]}")->required();
  app.add_option("--val-data", o.val_data, "validation data (default: the last 10% of --data's tokens)");
  app.add_option("--chat-template", o.chat_template,
                 ".jsonl: render with this template (chatml, llama3, deepseek-r1) instead of the base's");
  app.add_option("--lora-r", o.lora.r, "adapter rank")->check(CLI::PositiveNumber);
  app.add_option("--lora-alpha", o.lora.alpha, "adapter alpha (the update is scaled by alpha / r)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lora-dropout", o.lora.dropout, "dropout on the adapters' input")->check(CLI::Range(0.0, 0.99));
  app.add_option("--lora-targets", targets,
                 "projections to adapt: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj or all-linear");
  app.add_option("--lora-dtype", lora_dtype, "the adapters' compute dtype: f32 | bf16 (f32 parameters, explicit casts)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--base-dtype", o.base_dtype, "storage of the frozen block matrices: f32 | bf16 | q8_0")
      ->check(CLI::IsMember({"f32", "bf16", "q8_0"}));
  app.add_option("--ctx", o.ctx, "training window (default: the base's context, at most 256)")
      ->check(CLI::PositiveNumber);
  add_lm_run_options(app, o);
  app.add_option("--amp-level", o.amp_level, "mixed precision: O0 (f32), O1, O2, O3 (as train-lm)")
      ->check(CLI::IsMember({"O0", "O1", "O2", "O3"}));
  app.add_option("--amp-dtype", amp_dtype, "the low dtype of --amp-level: bf16 | f16")
      ->check(CLI::IsMember({"bf16", "f16"}));
  app.add_option("--seed", o.seed, "seed of the adapters' initialization, the dropout masks and the batches");
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--ckpt-dir", o.ckpt_dir, "checkpoints (default: OUT/ckpt; resumed from when present)");
  app.add_option("-o,--output", o.out_dir, "the adapter folder (PEFT files, adapter.gguf, loss.svg)")->required();
  app.add_option("--stop-after", o.stop_after, "stop after this step, checkpointed (a later run resumes)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-every", log_every, "a progress line every N steps (default: 1 on a terminal, else 10)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "one JSON object per step and evaluation, then {\"final\": true, ...}");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.lora.targets = nn::lora_target_cells(targets);
  o.lora.dtype = lora_dtype == "bf16" ? DType::bf16 : DType::f32;
  o.amp_dtype = amp_dtype == "f16" ? DType::f16 : DType::bf16;
  if (o.ckpt_dir.empty()) o.ckpt_dir = o.out_dir + "/ckpt";
  set_threads(threads);
  const bool tty = !json && ::isatty(STDOUT_FILENO) != 0;
  if (log_every == 0) log_every = tty ? 1 : 10;
  const auto on_progress = [&](const train::LmProgress& p) { print_lm_progress(p, json, tty, log_every); };
  if (!json)
    std::cout << fmt::format(
                     "finetune: {} with LoRA r {} alpha {} dropout {} on {}, base {}, {} steps, lr {}, {} "
                     "threads\n",
                     o.base, o.lora.r, o.lora.alpha, o.lora.dropout, targets, o.base_dtype, o.steps, o.lr,
                     num_threads())
              << std::flush;
  const train::FinetuneReport r = train::finetune(o, on_progress);
  const double pct = 100.0 * static_cast<double>(r.trainable_params) / static_cast<double>(r.all_params);
  nlohmann::json fin{{"final", true},
                     {"steps", r.steps},
                     {"start_step", r.start_step},
                     {"trainable_params", r.trainable_params},
                     {"all_params", r.all_params},
                     {"trainable_pct", pct},
                     {"train_tokens", r.train_tokens},
                     {"val_tokens", r.val_tokens},
                     {"loss", r.last_loss},
                     {"base_val_loss", r.base_val_loss},
                     {"val_loss", r.val_loss},
                     {"val_ppl", r.val_ppl},
                     {"tokens_per_s", r.tokens_per_s},
                     {"train_s", r.train_seconds},
                     {"peft_dir", r.peft_dir},
                     {"gguf_adapter", r.gguf_adapter},
                     {"svg", r.svg},
                     {"checkpoint", r.checkpoint},
                     {"threads", num_threads()}};
  if (json) {
    std::cout << fin.dump() << std::endl;
  } else {
    std::cout << fmt::format("trainable params: {} || all params: {} || trainable%: {:.4f}\n", r.trainable_params,
                             r.all_params, pct);
    std::cout << fmt::format(
        "done: {} steps, val loss {:.4f} -> {:.4f} ({:+.1f}%), {:.0f} tok/s{}\n", r.steps, r.base_val_loss, r.val_loss,
        r.base_val_loss > 0 ? 100.0 * (r.val_loss - r.base_val_loss) / r.base_val_loss : 0.0, r.tokens_per_s,
        r.peft_dir.empty() ? ", stopped early (resume to finish)"
                           : ", adapter " + r.peft_dir + " (PEFT) and " + r.gguf_adapter);
  }
  return 0;
}

}  // namespace spore::cli
