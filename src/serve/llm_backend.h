#pragma once
// The part of llm::Engine the OpenAI service drives, as an interface: the server runs it over the real engine
// (make_engine_backend), the unit tests over a scripted fake, so the HTTP/JSON side is tested without a model.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "llm/engine.h"

namespace spore::llm {
class Model;
class Tokenizer;
}  // namespace spore::llm

namespace spore::serve {

class LlmBackend {
 public:
  virtual ~LlmBackend() = default;
  virtual uint64_t submit(llm::Request r) = 0;  // throws Error(unavailable) when full, Error(invalid_argument) ...
  virtual void cancel(uint64_t id) = 0;
  virtual std::vector<float> embed(std::span<const int32_t> tokens) = 0;
  virtual llm::EngineStats stats() const = 0;
  virtual int64_t ctx() const = 0;           // tokens per sequence, resolved
  virtual int64_t retry_after_s() const = 0;
  virtual bool ready() const = 0;
  virtual void wait_ready() = 0;             // rethrows a start-up failure
  virtual double startup_ms() const = 0;
  virtual void shutdown(double deadline_s) = 0;
  virtual const llm::Tokenizer& tokenizer() const = 0;
  virtual int64_t embedding_size() const = 0;
  virtual std::string description() const = 0;  // "llama q8_0, 24 layers, ctx 2048, 4 slots, KV f16"
};

// Loads the model (GGUF file or Hugging Face folder), applies the LoRA adapters `loras` (PEFT folders or GGUF
// adapters, llm/lora.h) at `lora_scale`, and starts an llm::Engine over it. The engine warms up on its own thread:
// ready() turns true when it is done.
std::unique_ptr<LlmBackend> make_engine_backend(const std::string& path, const llm::EngineOptions& opts,
                                                const std::vector<std::string>& loras = {}, double lora_scale = 1.0);

}  // namespace spore::serve
