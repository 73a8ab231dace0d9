// spore lora merge: folds a LoRA adapter into a GGUF base (llm::merge_lora, llm/lora.h).
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "llm/lora.h"
#include "tools/spore/commands.h"

namespace spore::cli {

int cmd_lora(int argc, char** argv) {
  CLI::App app("spore lora: LoRA adapter tools", "spore lora");
  app.require_subcommand(1);
  auto* merge =
      app.add_subcommand("merge", "write BASE.gguf with ADAPTER folded into its matrices: W + s * (alpha / r) * B A");
  std::string base, adapter, out, quantize;
  double scale = 1.0;
  merge->add_option("base", base, "the base model (.gguf)")->required();
  merge->add_option("adapter", adapter, "the adapter: a PEFT folder or a llama.cpp adapter .gguf")->required();
  merge->add_option("-o,--output", out, "the merged model (.gguf)")->required();
  merge->add_option("--lora-scale", scale, "scale of the adapter (1: as trained)");
  merge
      ->add_option("--quantize", quantize,
                   "store the matrices as q8_0 (every matrix whose rows are whole blocks of 32) or f32; default: "
                   "merged matrices f32, the others as in the base")
      ->check(CLI::IsMember({"q8_0", "f32"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  llm::LoraAdapter a = llm::read_adapter(adapter);
  const size_t n = a.tensors.size();
  llm::merge_lora(base, std::move(a), scale, out, quantize);
  std::cout << fmt::format("merged {} adapted matrices of {} into {}{}\n", n, adapter, out,
                           quantize.empty() ? "" : " (" + quantize + ")");
  return 0;
}

}  // namespace spore::cli
