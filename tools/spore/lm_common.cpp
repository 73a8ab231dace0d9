// What spore train-lm and spore finetune share: the options of train::LmRunOptions, and the progress lines
// (train::LmProgress), so both commands take the same flags and speak the same JSON keys and text.
#include <cmath>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/spore/commands.h"
#include "train/lm.h"

namespace spore::cli {

void add_lm_run_options(CLI::App& app, train::LmRunOptions& o) {
  app.add_option("--batch", o.batch, "sequences per micro-batch")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "optimizer steps")->required()->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "peak learning rate")->required()->check(CLI::PositiveNumber);
  app.add_option("--min-lr-ratio", o.min_lr_ratio, "the cosine ends at lr * this")->check(CLI::Range(0.0, 1.0));
  app.add_option("--warmup", o.warmup, "linear warm-up steps")->check(CLI::NonNegativeNumber);
  app.add_option("--clip", o.clip, "clip gradients to this global norm (0: off)")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decoupled weight decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--accum", o.accum, "micro-batches per optimizer step")->check(CLI::PositiveNumber);
  app.add_option("--eval-every", o.eval_every, "evaluate and checkpoint every N steps (0: at the end)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--eval-batches", o.eval_batches, "validation batches per evaluation")->check(CLI::PositiveNumber);
  app.add_option("--mode", o.mode, "graph | pynative")->check(CLI::IsMember({"graph", "pynative"}));
}

void print_lm_progress(const train::LmProgress& p, bool json, bool tty, int64_t log_every) {
  if (p.kind == "step" && p.step % log_every != 0 && p.step != p.steps) return;
  if (json) {
    nlohmann::json j{{"step", p.step}};
    if (p.kind == "step") {
      j.update({{"loss", p.loss}, {"lr", p.lr}, {"tokens_per_s", p.tokens_per_s}});
    } else if (p.kind == "eval") {
      j.update({{"eval", true}, {"val_loss", p.val_loss}, {"val_ppl", p.val_ppl}});
      // finetune's evaluation of the base before step 1 has no training loss yet.
      if (std::isfinite(p.train_loss)) j.update({{"train_loss", p.train_loss}, {"train_ppl", p.train_ppl}});
    } else {
      j["resumed"] = true;
    }
    std::cout << j.dump() << std::endl;
    return;
  }
  if (p.kind == "step") {
    const std::string line = fmt::format("step {}/{}  loss {:.4f}  lr {:.3g}  {:.0f} tok/s  {:.1f} s", p.step, p.steps,
                                         p.loss, p.lr, p.tokens_per_s, p.elapsed_s);
    std::cout << (tty ? "\r" + line + "\x1b[K" : line + "\n") << std::flush;
  } else if (p.kind == "eval" && p.step == 0) {
    std::cout << fmt::format("base model: val loss {:.4f} (ppl {:.2f})\n", p.val_loss, p.val_ppl) << std::flush;
  } else if (p.kind == "eval") {
    std::cout << fmt::format("{}eval at step {}: train loss {:.4f} (ppl {:.2f})  val loss {:.4f} (ppl {:.2f})\n",
                             tty ? "\n" : "", p.step, p.train_loss, p.train_ppl, p.val_loss, p.val_ppl)
              << std::flush;
  } else {
    std::cout << fmt::format("resumed from the checkpoint at step {}\n", p.step) << std::flush;
  }
}

}  // namespace spore::cli
