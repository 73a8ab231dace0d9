// spore generate: text generation with a decoder LLM (.gguf file or Hugging Face folder), streaming tokens as they
// come, with timing (load, time to first token, prefill and decode tokens/s). docs/LLM.md.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/thread_pool.h"
#include "llm/chat_template.h"
#include "llm/generate.h"
#include "llm/lora.h"
#include "llm/model.h"
#include "runtime/profiler.h"
#include "runtime/runtime.h"
#include "tools/spore/commands.h"
#include "tools/spore/model_util.h"

namespace spore::cli {

namespace {
std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    SPORE_CHECK(used == item.size() && v >= 0 && v < (1LL << 31), ErrorCode::invalid_argument,
                "--tokens: '{}' is not a token id (comma-separated non-negative integers expected)", item);
    ids.push_back(static_cast<int32_t>(v));
  }
  SPORE_CHECK(!ids.empty(), ErrorCode::invalid_argument, "--tokens: no ids in '{}'", s);
  return ids;
}
}  // namespace

int cmd_generate(int argc, char** argv) {
  CLI::App app("spore generate: generate text with a decoder LLM (Llama, Mistral, Qwen2; .gguf or a Hugging Face "
               "folder), streaming it to standard output",
               "spore generate");
  std::string model, prompt, tokens_text, kv_type = "f32", max_memory_text, chat_template, dump_logits, profile;
  int64_t n = 128, ctx = 0, top_k = 0, last_n = 64, max_batch = 512;
  double temp = 0.0, top_p = 1.0, min_p = 0.0, repeat = 1.0, freq = 0.0, presence = 0.0;
  uint64_t seed = 0;
  int threads = 0;
  bool chat = false, json = false, ignore_eos = false, no_bos = false;
  std::vector<std::string> stops;
  app.add_option("model", model, "a .gguf file or a Hugging Face folder (config.json, *.safetensors, tokenizer.json)")
      ->required();
  app.add_option("-p,--prompt", prompt, "the prompt ('-' reads standard input)");
  app.add_option("--tokens", tokens_text, "the prompt as comma-separated token ids (no tokenizing, no BOS added)");
  app.add_option("-n,--max-tokens", n, "tokens to generate at most")->check(CLI::NonNegativeNumber);
  app.add_flag("--chat", chat, "render the prompt as one user message with the model's chat template");
  app.add_option("--chat-template", chat_template, "with --chat: llama3, llama3.1, chatml or deepseek-r1");
  app.add_option("--temp", temp, "temperature (0 = greedy)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-k", top_k, "keep the k most likely tokens (0 = off)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", top_p, "nucleus sampling threshold (1 = off)");
  app.add_option("--min-p", min_p, "drop tokens with p < min_p * p_max (0 = off)");
  app.add_option("--repeat-penalty", repeat, "repetition penalty (1 = off)");
  app.add_option("--frequency-penalty", freq, "frequency penalty (0 = off)");
  app.add_option("--presence-penalty", presence, "presence penalty (0 = off)");
  app.add_option("--repeat-last-n", last_n, "tokens the penalties look back at (-1 = all)");
  app.add_option("--seed", seed, "random seed (sampling is deterministic for a seed)");
  app.add_option("--stop", stops, "stop when this text appears (repeatable)");
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-generation tokens (benchmarks)");
  app.add_flag("--no-bos", no_bos, "do not add the BOS token the model asks for");
  app.add_option("--kv-type", kv_type,
                 "KV cache type: f32, f16, bf16 or int8 (int8 values with an f32 scale per head and position: "
                 "(head_dim + 4) / (4 head_dim) of f32, 27% at head_dim 64)");
  app.add_option("--ctx", ctx, "context length (KV cache); default: what fits in memory, at most the model's")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-memory", max_memory_text, "memory for weights + KV cache + activations, e.g. 2GB");
  app.add_option("--batch", max_batch, "tokens per prefill step")->check(CLI::PositiveNumber);
  bool no_mmap = false;
  app.add_flag("--no-mmap", no_mmap,
               "read the weights into memory instead of mapping the file (as llama.cpp's --no-mmap): one copy at "
               "load, but the kernel's page-cache management cannot stall decoding (docs/LLM.md)");
  bool warmup = false;
  app.add_flag("--warmup", warmup,
               "run the prompt (and one decode step) once before the timed run and forget it, as llama-bench does: "
               "the timings then show the steady state, without first-touch page faults");
  std::vector<std::string> disabled_passes;
  app.add_option("--disable-pass", disabled_passes,
                 "skip this pass when compiling the step plans, e.g. group_linear_blockq (repeatable)")
      ->allow_extra_args(false);
  std::vector<std::string> loras;
  app.add_option("--lora", loras,
                 "apply a LoRA adapter (a PEFT folder or a llama.cpp adapter .gguf) at run time (repeatable)")
      ->allow_extra_args(false);
  double lora_scale = 1.0;
  app.add_option("--lora-scale", lora_scale, "scale of the --lora adapters (1: as trained, 0: the base model)");
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "print one JSON object at the end instead of streaming text");
  app.add_option("--dump-logits", dump_logits,
                 "write the logits every token was sampled from, float32 rows of n_vocab, to this file");
  app.add_option("--profile", profile,
                 "write a Chrome trace of the generation's kernels to this file and print the top ops (stderr)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  SPORE_CHECK(prompt.empty() != tokens_text.empty(), ErrorCode::invalid_argument,
              "give the prompt as -p TEXT or --tokens IDS (one of them)");
  set_threads(threads);
  if (prompt == "-") prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  llm::Model m = llm::Model::load(model, !no_mmap);
  for (const std::string& l : loras) m.add_lora(llm::read_adapter(l), lora_scale);
  llm::SessionOptions so;
  so.ctx = ctx;
  so.max_batch = max_batch;
  so.disabled_passes = disabled_passes;
  if (!max_memory_text.empty()) so.max_memory = static_cast<int64_t>(parse_bytes(max_memory_text));
  if (kv_type == "f32") so.kv_dtype = DType::f32;
  else if (kv_type == "f16") so.kv_dtype = DType::f16;
  else if (kv_type == "bf16") so.kv_dtype = DType::bf16;
  else if (kv_type == "int8") so.kv_dtype = DType::i8;
  else SPORE_FAIL(ErrorCode::invalid_argument, "--kv-type '{}': expected f32, f16, bf16 or int8", kv_type);

  std::vector<int32_t> ids;
  if (!tokens_text.empty()) {
    ids = parse_ids(tokens_text);
  } else {
    const llm::Tokenizer& tok = m.tokenizer();
    if (chat) {
      const std::string text = llm::apply_chat_template(tok, {{"user", prompt}}, true, chat_template);
      ids = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
    } else {
      ids = tok.encode(prompt, /*add_special=*/!no_bos, /*parse_special=*/false);
    }
  }
  llm::Session session(m, so);
  session.prepare(static_cast<int64_t>(ids.size()));  // compile the plans now: load time, not time to first token
  const double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  double warmup_ms = 0;
  if (warmup) {
    const auto w0 = clock::now();
    session.warm_up(ids);
    warmup_ms = std::chrono::duration<double, std::milli>(clock::now() - w0).count();
  }

  llm::GenerateOptions go;
  go.max_tokens = n;
  go.stop = stops;
  go.ignore_eos = ignore_eos;
  go.sampler.temperature = temp;
  go.sampler.top_k = top_k;
  go.sampler.top_p = top_p;
  go.sampler.min_p = min_p;
  go.sampler.repeat_penalty = repeat;
  go.sampler.frequency_penalty = freq;
  go.sampler.presence_penalty = presence;
  go.sampler.penalty_last_n = last_n;
  go.sampler.seed = seed;
  std::ofstream dump;
  if (!dump_logits.empty()) {
    dump.open(dump_logits, std::ios::binary);
    SPORE_CHECK(dump.good(), ErrorCode::io_error, "--dump-logits: cannot write '{}'", dump_logits);
  }
  auto on_text = [&](const std::string& t) {
    if (json) return;
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
  };
  auto on_logits = [&](int32_t, std::span<const float> l) {
    if (dump.is_open()) dump.write(reinterpret_cast<const char*>(l.data()), static_cast<std::streamsize>(l.size_bytes()));
  };
  std::unique_ptr<Profiler> prof;
  if (!profile.empty()) prof = std::make_unique<Profiler>();
  const llm::GenerateResult r =
      llm::generate(session, ids, go, on_text, dump.is_open() ? std::function<void(int32_t, std::span<const float>)>(on_logits)
                                                              : std::function<void(int32_t, std::span<const float>)>());
  if (prof) {
    prof->write_chrome_trace(profile);
    std::fprintf(stderr, "%s", prof->top_table(12).c_str());
  }
  const auto& c = m.config();
  if (json) {
    nlohmann::json j;
    j["tokens"] = r.tokens;
    j["text"] = r.text;
    j["prompt_tokens"] = r.prompt_tokens;
    j["generated_tokens"] = r.tokens.size();
    j["load_ms"] = load_ms;
    if (warmup) j["warmup_ms"] = warmup_ms;
    j["ttft_ms"] = r.ttft_ms;
    j["prefill_tok_s"] = r.prefill_tok_s;
    j["decode_tok_s"] = r.decode_tok_s;
    j["stop_reason"] = r.stop_reason;
    j["prompt_ids"] = ids;
    j["model"] = {{"arch", c.arch},       {"layers", c.n_layer},     {"embd", c.n_embd},
                  {"heads", c.n_head},    {"kv_heads", c.n_head_kv}, {"vocab", c.n_vocab},
                  {"weights", c.weight_type}, {"weight_bytes_per_token", m.weight_bytes_per_token()}};
    j["ctx"] = session.ctx();
    j["kv_type"] = kv_type;
    j["kv_bytes"] = session.cache().bytes();
    j["threads"] = num_threads();
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fprintf(stderr,
                 "\n[spore generate] %s %s, %lld layers | load %.0f ms | prompt %lld tokens, ttft %.1f ms, prefill "
                 "%.1f tok/s | %zu tokens, decode %.1f tok/s | ctx %lld, KV %s %.1f MiB | stop: %s\n",
                 c.arch.c_str(), c.weight_type.c_str(), static_cast<long long>(c.n_layer), load_ms,
                 static_cast<long long>(r.prompt_tokens), r.ttft_ms, r.prefill_tok_s, r.tokens.size(), r.decode_tok_s,
                 static_cast<long long>(session.ctx()), kv_type.c_str(),
                 static_cast<double>(session.cache().bytes()) / (1 << 20), r.stop_reason.c_str());
  }
  return 0;
}

}  // namespace spore::cli
