#pragma once
// `spore serve` as a function: opens the socket, loads and warms every model while /health answers 503, serves until
// SIGTERM or SIGINT (or, embedded, until ServeConfig::stop), then shuts down gracefully (new requests get 503, in-flight ones finish within the deadline, the
// rest are cancelled, the socket closes) and returns 0. tools/spore/cmd_serve.cpp only parses the command line into a ServeConfig.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llm/engine.h"
#include "serve/llm_backend.h"
#include "serve/server.h"
#include "serve/tensor_model.h"

namespace spore::serve {

struct ModelSpec {
  std::string name;  // the id clients use; "" = derived from the path (file name without extension)
  std::string path;
};

struct ServeConfig {
  std::vector<ModelSpec> models;
  ServerOptions server;
  llm::EngineOptions engine;    // LLMs: slots, ctx, KV type, memory, queue bounds, threads
  std::string chat_template;    // override of the models' detected chat template
  double timeout_s = 0;         // per generation request (0: none)
  double shutdown_deadline_s = 30;
  // Tensor models.
  Batching batching = Batching::auto_;
  int64_t max_batch = 8;
  double batch_delay_ms = 2.0;
  int threads = 0;              // spore's thread pool (0: all cores)
  // Makes an LLM's backend from its path: make_engine_backend in `spore serve`, a scripted fake in tests.
  std::function<std::unique_ptr<LlmBackend>(const std::string& path, const llm::EngineOptions& o)> llm_factory;
  // Embedding (spore.serve in Python): with handle_signals false the process's SIGTERM / SIGINT are left to it and
  // the server shuts down (as on SIGTERM) once *stop turns true; on_listening gets the bound port, on_ready "" once
  // every model is loaded and warmed up, or the error of the model that failed.
  bool handle_signals = true;
  std::shared_ptr<std::atomic<bool>> stop;
  std::function<void(int port)> on_listening;
  std::function<void(const std::string& error)> on_ready;
};

// True for a path an LLM is loaded from: a .gguf file or a folder (Hugging Face layout); false for .onnx / .spore /
// text IR files.
bool is_llm_path(const std::string& path);
// The default model id of a path: "models/qwen2.5-0.5b.gguf" -> "qwen2.5-0.5b"; a folder -> its name.
std::string model_name_of(const std::string& path);

// Serves until a signal; returns the process's exit status (0 after a graceful shutdown, 1 when a model fails to
// load). Prints "listening on http://HOST:PORT" on stdout once the socket is bound.
int run_serve(const ServeConfig& c);

}  // namespace spore::serve
