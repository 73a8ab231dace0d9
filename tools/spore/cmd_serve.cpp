// spore serve: an HTTP server for LLMs (OpenAI API over llm::Engine) and tensor models (KServe v2), with /health,
// /metrics and a JSON access log. Option parsing only; the server is src/serve (docs/SERVE.md).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/error.h"
#include "serve/app.h"
#include "tools/spore/commands.h"
#include "tools/spore/model_util.h"

namespace spore::cli {

int cmd_serve(int argc, char** argv) {
  CLI::App app("spore serve: serve LLMs (.gguf or a Hugging Face folder) over the OpenAI API and tensor models "
               "(.onnx, .spore) over KServe v2, with /health, /metrics and a JSON access log (docs/SERVE.md)",
               "spore serve");
  std::string model, kv_type = "f16", max_memory_text, max_body_text = "32MiB", batching = "auto";
  std::vector<std::string> named;
  serve::ServeConfig c;
  app.add_option("model", model, "the model to serve: .gguf / Hugging Face folder (LLM) or .onnx / .spore (tensors)");
  app.add_option("--model", named, "NAME=PATH: serve this model too, under this name (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--host", c.server.host, "address to listen on (0.0.0.0: every interface)")->capture_default_str();
  app.add_option("--port", c.server.port, "port to listen on (0: any free port; the chosen one is printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--parallel", c.engine.slots, "LLM sequences decoded together (slots)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--ctx", c.engine.ctx, "tokens per sequence (prompt + generated); 0: the model's, at most 4096, "
                                        "lowered to what --max-memory allows")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-type", kv_type, "KV cache type: f32, f16, bf16 or i8")->capture_default_str();
  app.add_option("--max-memory", max_memory_text, "memory for weights + KV cache + prefix cache + activations, e.g. 2GB "
                                                  "(default: what the machine has available)");
  app.add_option("--max-queue", c.engine.max_queue, "requests waiting for a slot (per model); one more is answered 503 "
                                                    "with Retry-After")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-queued-tokens", c.engine.max_queued_tokens,
                 "prompt tokens waiting for a slot (0: parallel x ctx); more is answered 503")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prefix-cache", c.engine.prefix_cache_bytes,
                 "bytes of KV rows kept for shared prompt prefixes (-1: a quarter of the slots' KV, 0: off)");
  app.add_option("--api-key", c.server.api_key, "require 'Authorization: Bearer KEY' (all routes but the health ones)");
  app.add_option("--threads", c.threads, "compute threads (0: all cores)")->check(CLI::NonNegativeNumber);
  std::vector<std::string> loras;
  double lora_scale = 1.0;
  app.add_option("--lora", loras, "a LoRA adapter for the positional LLM (PEFT folder or adapter .gguf; repeatable)")
      ->allow_extra_args(false);
  app.add_option("--lora-scale", lora_scale, "scale of the --lora adapters (1: as trained, 0: the base model)");
  app.add_option("--timeout", c.timeout_s, "seconds a generation request may take from submit (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-body", max_body_text, "largest request body, e.g. 32MiB (bigger: 413)")->capture_default_str();
  app.add_option("--chat-template", c.chat_template, "chat template to use instead of the model's: llama3, chatml or "
                                                     "deepseek-r1");
  app.add_option("--batching", batching, "tensor models: merge concurrent requests into one run. auto: only when the "
                                         "warm-up finds merged outputs bit-identical to single runs; on: always; off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--max-batch", c.max_batch, "tensor models: rows per merged run")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch-delay-ms", c.batch_delay_ms, "tensor models: how long a request waits for others to merge")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--http-threads", c.server.http_threads, "connections served at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--shutdown-timeout", c.shutdown_deadline_s,
                 "seconds in-flight requests get to finish after SIGTERM / SIGINT before they are cancelled")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bool no_access_log = false;
  app.add_flag("--no-access-log", no_access_log, "do not write the per-request JSON lines to stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!model.empty()) c.models.push_back({"", model});
  for (const std::string& spec : named) {
    const size_t eq = spec.find('=');
    SPORE_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), ErrorCode::invalid_argument,
                "--model '{}': expected NAME=PATH", spec);
    c.models.push_back({spec.substr(0, eq), spec.substr(eq + 1)});
  }
  SPORE_CHECK(!c.models.empty(), ErrorCode::invalid_argument, "no model to serve: give MODEL or --model NAME=PATH");
  if (kv_type == "f32") c.engine.kv_dtype = DType::f32;
  else if (kv_type == "f16") c.engine.kv_dtype = DType::f16;
  else if (kv_type == "bf16") c.engine.kv_dtype = DType::bf16;
  else if (kv_type == "i8" || kv_type == "int8") c.engine.kv_dtype = DType::i8;
  else SPORE_FAIL(ErrorCode::invalid_argument, "--kv-type '{}': expected f32, f16, bf16 or i8", kv_type);
  if (!max_memory_text.empty()) c.engine.max_memory = static_cast<int64_t>(parse_bytes(max_memory_text));
  try {
    c.server.max_body = parse_bytes(max_body_text);
  } catch (const Error&) {
    SPORE_FAIL(ErrorCode::invalid_argument, "--max-body '{}': expected a size such as 32MiB or 1000000", max_body_text);
  }
  c.server.access_log = !no_access_log;
  c.batching = batching == "on" ? serve::Batching::on : batching == "off" ? serve::Batching::off : serve::Batching::auto_;
  // --lora adapts the positional model only: another --model NAME=PATH is another base.
  c.llm_factory = [model, loras, lora_scale](const std::string& path, const llm::EngineOptions& o) {
    return serve::make_engine_backend(path, o, path == model ? loras : std::vector<std::string>{}, lora_scale);
  };
  return serve::run_serve(c);
}

}  // namespace spore::cli
