#pragma once
// OpenAI API responses: completion and chat-completion objects, their streaming chunks, logprobs in OpenAI's
// two shapes, usage, and the SSE framing (`data: {json}\n\n`, `data: [DONE]\n\n`). Pure functions of their
// arguments (no model, no engine), so they are unit-tested against the shapes the openai clients parse.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace spore::serve {

// One generated token as the logprobs fields report it: its bytes (a token may be part of a UTF-8 character)
// and the most likely alternatives.
struct TokenAlt {
  std::string bytes;
  float logprob = 0;
};
struct TokenInfo {
  int32_t id = 0;
  std::string bytes;
  float logprob = 0;
  std::vector<TokenAlt> top;
};

struct ChoiceResult {
  std::string text;
  std::string finish_reason;  // "stop" / "length"
  std::vector<TokenInfo> tokens;  // filled when logprobs were asked for
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

struct ResponseMeta {
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// Text that is valid UTF-8: invalid bytes become U+FFFD (JSON strings must be valid UTF-8; a token's bytes may not be).
std::string valid_utf8(std::string_view bytes);
std::string base64_encode(std::string_view bytes);
std::string system_fingerprint();  // "spore-<version>"

nlohmann::json usage_json(const Usage& u);
// chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}], "refusal": null}
nlohmann::json chat_logprobs_json(const std::vector<TokenInfo>& tokens);
// completions: {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}], "text_offset"}; offsets count bytes
// from `offset0` (the start of the choice's text).
nlohmann::json completion_logprobs_json(const std::vector<TokenInfo>& tokens, int64_t offset0 = 0);

// Whole responses (stream = false). `with_logprobs`: the choices' logprobs objects (else null).
nlohmann::json chat_completion_json(const ResponseMeta& m, const std::vector<ChoiceResult>& choices, const Usage& u,
                                    bool with_logprobs);
nlohmann::json completion_json(const ResponseMeta& m, const std::vector<ChoiceResult>& choices, const Usage& u,
                               bool with_logprobs);

// Streaming chunks. A chat choice streams: a first chunk with delta {"role": "assistant", "content": ""}, content
// chunks with delta {"content": "..."}, a last chunk with an empty delta and `finish_reason`. With include_usage every
// chunk carries "usage": null and a final chunk has empty choices and the usage.
nlohmann::json chat_chunk_json(const ResponseMeta& m, int64_t index, nlohmann::json delta,
                               const nlohmann::json& logprobs, const std::string& finish_reason, bool include_usage);
nlohmann::json completion_chunk_json(const ResponseMeta& m, int64_t index, const std::string& text,
                                     const nlohmann::json& logprobs, const std::string& finish_reason,
                                     bool include_usage);
nlohmann::json usage_chunk_json(const ResponseMeta& m, bool chat, const Usage& u);

// SSE framing.
std::string sse_data(const nlohmann::json& j);  // "data: {...}\n\n"
inline constexpr std::string_view sse_done = "data: [DONE]\n\n";

// Serialisation used for every body: compact, invalid UTF-8 replaced rather than thrown on.
std::string dump_json(const nlohmann::json& j);

}  // namespace spore::serve
