#pragma once
// OpenAI API requests, parsed and validated without a model: /v1/completions, /v1/chat/completions,
// /v1/embeddings, and llama-server's /tokenize and /detokenize. Every error is a 400 naming the field's JSON path
// (serve/errors.h). What the server cannot honour fails closed (tools, logit_bias, suffix, a JSON schema keyword
// constrained decoding cannot enforce, ...): a 400 that says so, never a silently different answer. Unknown fields
// are ignored, as OpenAI does. response_format json_object / json_schema compile to an llm::JsonConstraint here.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "llm/chat_template.h"
#include "llm/sampling.h"

namespace spore::llm {
class JsonConstraint;
}

namespace spore::serve {

// A prompt as text or as token ids (completions accept both).
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
  std::string path;  // JSON path, for errors found later (token ids out of the vocabulary, too long)
};

struct GenerationRequest {
  bool chat = false;
  std::string model;  // "" = the server's default model
  std::vector<PromptInput> prompts;           // completions: one or more prompts
  std::vector<llm::ChatMessage> messages;     // chat
  int64_t max_tokens = -1;                    // -1: not given (completions: 16, chat: the rest of the context)
  llm::SamplerConfig sampler;                 // temperature defaults to 1.0 as OpenAI's does
  bool seed_given = false;
  std::vector<std::string> stop;
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;                 // stream_options.include_usage
  int64_t logprobs = -1;                      // -1: none; k: each token's logprob + the k most likely alternatives
  bool echo = false;                          // completions: the prompt's text comes first in `text`
  bool ignore_eos = false;                    // extension (llama-server, vLLM)
  std::string user;
  std::shared_ptr<const llm::JsonConstraint> json;  // response_format json_object / json_schema (null: text)
};

struct ParseLimits {
  int64_t max_n = 16;           // choices per request
  int64_t max_stop = 16;        // stop strings
  int64_t max_logprobs = 20;    // top_logprobs (chat) / logprobs (completions)
};

GenerationRequest parse_completion_request(const nlohmann::json& body, const ParseLimits& limits = {});
GenerationRequest parse_chat_request(const nlohmann::json& body, const ParseLimits& limits = {});

struct EmbeddingRequest {
  std::string model;
  std::vector<PromptInput> inputs;
  bool base64 = false;  // encoding_format "base64": little-endian float32 bytes, base64 (the openai client's default)
};
EmbeddingRequest parse_embedding_request(const nlohmann::json& body);

struct TokenizeRequest {
  std::string model;
  std::string content;
  bool add_special = false;
  bool with_pieces = false;
};
TokenizeRequest parse_tokenize_request(const nlohmann::json& body);

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize_request(const nlohmann::json& body);

// The body parsed as JSON, or a 400 "request body is not valid JSON: ..." (with the byte offset).
nlohmann::json parse_json_body(const std::string& body);

}  // namespace spore::serve
