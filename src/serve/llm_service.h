#pragma once
// The OpenAI API over one LLM (an LlmBackend: llm::Engine in the server, a fake in tests): /v1/completions,
// /v1/chat/completions (streaming or not, n choices, logprobs), /v1/embeddings, /tokenize, /detokenize.
//
// Engine events arrive on the engine's thread; each HTTP request owns a queue (mutex + condition variable) the
// engine's callback pushes into, and the request's own thread drains it, so the engine never waits on a socket and
// the metrics are updated by request threads only. A streaming client that goes away cancels its engine requests.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "llm/chat_template.h"
#include "serve/llm_backend.h"
#include "serve/metrics.h"
#include "serve/openai_request.h"
#include "serve/reply.h"

namespace spore::serve {

struct LlmServiceOptions {
  std::string name;           // the model id clients send
  std::string chat_template;  // override of the detected template ("llama3", "chatml", "deepseek-r1"); "" = detect
  ParseLimits limits;
  double timeout_s = 0;       // > 0: every request's llm::Request::timeout_s
};

class LlmService {
 public:
  LlmService(LlmServiceOptions o, std::unique_ptr<LlmBackend> backend, Metrics& metrics);
  ~LlmService();

  const std::string& name() const { return o_.name; }
  LlmBackend& backend() { return *backend_; }
  // A note for the start-up log when the chat template was not recognized ("" otherwise).
  const std::string& chat_note() const { return chat_note_; }

  // /v1/completions, /v1/chat/completions. client_alive (may be empty) says whether the client is still connected;
  // a whole-body (non-streamed) generation asks it while it waits and cancels its engine requests when it says no.
  Reply generate(const nlohmann::json& body, bool chat, const std::function<bool()>& client_alive = {});
  Reply embeddings(const nlohmann::json& body);
  Reply tokenize(const nlohmann::json& body);
  Reply detokenize(const nlohmann::json& body);

  // Declares the LLM metric families; registers this model's engine gauges as a collector.
  static void declare_metrics(Metrics& m);
  void register_collector();

 private:
  std::vector<int32_t> prompt_tokens(const PromptInput& p) const;
  void check_ids(const std::vector<int32_t>& ids, const std::string& path) const;

  LlmServiceOptions o_;
  std::unique_ptr<LlmBackend> backend_;
  Metrics& metrics_;
  std::optional<llm::ChatStyle> chat_style_;
  std::string chat_note_;
};

}  // namespace spore::serve
