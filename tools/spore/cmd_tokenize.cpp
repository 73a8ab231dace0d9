// spore tokenize: the token ids of a text under an LLM's tokenizer (.gguf, Hugging Face folder, or tokenizer.json).
#include <cstdio>
#include <iostream>
#include <iterator>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "llm/chat_template.h"
#include "llm/tokenizer.h"
#include "tools/spore/commands.h"

namespace spore::cli {

int cmd_tokenize(int argc, char** argv) {
  CLI::App app(
      "spore tokenize: print the token ids of TEXT, space-separated (no BOS/EOS unless --add-special)",
      "spore tokenize");
  std::string model, text, chat_template;
  bool add_special = false, parse_special = false, json = false, chat = false;
  int threads = 0;
  app.add_option("model", model, "a .gguf file, a Hugging Face folder (tokenizer.json) or a tokenizer.json file")
      ->required();
  app.add_option("text", text, "the text to tokenize; '-' reads standard input")->required();
  app.add_flag("--add-special", add_special, "add BOS/EOS as the model asks");
  app.add_flag("--parse-special", parse_special, "split out control tokens written in the text (<|im_start|>, <s>)");
  app.add_flag("--chat", chat,
               "treat TEXT as one user message: render it with the model's chat template (plus the assistant "
               "prompt) and tokenize that, special tokens parsed");
  app.add_option("--chat-template", chat_template, "with --chat: llama3, llama3.1, chatml or deepseek-r1 instead "
                                                   "of the model's template");
  app.add_flag("--json", json, "print {\"ids\": [...], \"pieces\": [...]} (pieces: the vocabulary strings)");
  app.add_option("--threads", threads, "ignored (tokenizing is single-threaded)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  const llm::Tokenizer tok = llm::Tokenizer::load(model);
  std::vector<int32_t> ids;
  if (chat) {
    const std::string prompt = llm::apply_chat_template(tok, {{"user", text}}, true, chat_template);
    ids = tok.encode(prompt, /*add_special=*/false, /*parse_special=*/true);
  } else {
    ids = tok.encode(text, add_special, parse_special);
  }
  if (json) {
    nlohmann::json j;
    j["ids"] = ids;
    j["pieces"] = nlohmann::json::array();
    for (int32_t id : ids) j["pieces"].push_back(tok.token_to_piece(id));
    j["count"] = ids.size();
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace spore::cli
