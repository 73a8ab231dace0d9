// The progress lines of spore train-lm and spore finetune (train::LmProgress): one printer, so both commands speak
// the same JSON keys and text.
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/spore/commands.h"
#include "train/lm.h"

namespace spore::cli {

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
