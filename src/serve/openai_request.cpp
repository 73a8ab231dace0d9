#include "serve/openai_request.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "llm/json_constraint.h"
#include "serve/errors.h"
#include "serve/json_fields.h"

namespace spore::serve {
namespace {

using nlohmann::json;
constexpr int64_t max_token_id = (int64_t{1} << 31) - 1;

std::vector<int32_t> token_array(const json& arr, const std::string& path) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i)
    ids.push_back(static_cast<int32_t>(expect_integer(arr[i], json_path(path, i), 0, max_token_id)));
  return ids;
}

bool all_of_kind(const json& arr, bool (json::*pred)() const noexcept) {
  for (const json& e : arr)
    if (!(e.*pred)()) return false;
  return true;
}

// A string, an array of strings, an array of token ids or an array of token-id arrays (completions' `prompt`,
// embeddings' `input`).
std::vector<PromptInput> prompt_inputs(const json& j, const std::string& path, bool allow_empty_text) {
  std::vector<PromptInput> out;
  auto text = [&](const json& s, const std::string& p) {
    PromptInput in;
    in.text = s.get<std::string>();
    in.path = p;
    if (in.text.empty() && !allow_empty_text) bad_request(p, "must not be an empty string");
    out.push_back(std::move(in));
  };
  auto tokens = [&](const json& a, const std::string& p) {
    PromptInput in;
    in.is_tokens = true;
    in.tokens = token_array(a, p);
    in.path = p;
    if (in.tokens.empty()) bad_request(p, "must not be an empty array of token ids");
    out.push_back(std::move(in));
  };
  if (j.is_string()) {
    text(j, path);
  } else if (j.is_array()) {
    if (j.empty()) bad_request(path, "must not be an empty array");
    if (all_of_kind(j, &json::is_number)) {
      tokens(j, path);
    } else if (all_of_kind(j, &json::is_string)) {
      for (size_t i = 0; i < j.size(); ++i) text(j[i], json_path(path, i));
    } else if (all_of_kind(j, &json::is_array)) {
      for (size_t i = 0; i < j.size(); ++i) tokens(j[i], json_path(path, i));
    } else {
      for (size_t i = 0; i < j.size(); ++i)
        if (json_kind(j[i]) != json_kind(j[0]))
          bad_request(json_path(path, i), fmt::format("expected {} like {}[0], got {} (a prompt array holds strings, "
                                                      "token ids or token-id arrays, not a mix)",
                                                      json_kind(j[0]), path, json_kind(j[i])));
      bad_request(json_path(path, 0), fmt::format("expected a string, a token id or an array of token ids, got {}",
                                                  json_kind(j[0])));
    }
  } else {
    bad_request(path, fmt::format("expected a string or an array, got {}", json_kind(j)));
  }
  return out;
}

[[noreturn]] void unsupported(const std::string& param, const std::string& what) {
  bad_request(param, what, "unsupported_parameter");
}

// Fields both generation endpoints share: sampling, stop, n, stream, max tokens, extensions.
void parse_common(const Fields& f, GenerationRequest& r, const ParseLimits& limits) {
  r.model = f.str("model").value_or("");
  if (auto v = f.integer("max_tokens", 1, INT32_MAX)) r.max_tokens = *v;
  if (auto v = f.integer("max_completion_tokens", 1, INT32_MAX)) r.max_tokens = *v;
  llm::SamplerConfig& s = r.sampler;
  s.temperature = f.number("temperature", 0.0, 2.0).value_or(1.0);
  s.top_p = f.number("top_p", 0.0, 1.0).value_or(1.0);
  if (s.top_p == 0.0) {  // the limit of nucleus sampling at 0 is the most likely token
    s.top_p = 1.0;
    s.temperature = 0.0;
  }
  if (auto v = f.integer("top_k", -1, INT32_MAX)) s.top_k = *v < 0 ? 0 : *v;
  s.min_p = f.number("min_p", 0.0, 1.0).value_or(0.0);
  s.frequency_penalty = f.number("frequency_penalty", -2.0, 2.0).value_or(0.0);
  s.presence_penalty = f.number("presence_penalty", -2.0, 2.0).value_or(0.0);
  s.repeat_penalty = f.number("repeat_penalty", 1e-6, 1e6).value_or(1.0);
  if (auto v = f.integer("repeat_last_n", -1, INT32_MAX)) s.penalty_last_n = *v;
  if (auto v = f.integer("seed", INT64_MIN, INT64_MAX)) {
    s.seed = static_cast<uint64_t>(*v);
    r.seed_given = true;
  }
  if (const json* st = f.get("stop")) {
    if (st->is_string()) {
      r.stop.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      for (size_t i = 0; i < st->size(); ++i) r.stop.push_back(expect_string((*st)[i], json_path(f.path("stop"), i)));
    } else {
      bad_request(f.path("stop"), fmt::format("expected a string or an array of strings, got {}", json_kind(*st)));
    }
    if (static_cast<int64_t>(r.stop.size()) > limits.max_stop)
      bad_request(f.path("stop"), fmt::format("{} stop strings, at most {} are allowed", r.stop.size(), limits.max_stop));
    for (size_t i = 0; i < r.stop.size(); ++i)
      if (r.stop[i].empty()) bad_request(st->is_string() ? f.path("stop") : json_path(f.path("stop"), i), "must not be empty");
  }
  r.n = f.integer("n", 1, limits.max_n).value_or(1);
  r.stream = f.boolean("stream").value_or(false);
  if (const json* so = f.get("stream_options")) {
    if (!r.stream) bad_request(f.path("stream_options"), "only allowed when stream is true");
    Fields sf(*so, f.path("stream_options"));
    r.include_usage = sf.boolean("include_usage").value_or(false);
  }
  r.ignore_eos = f.boolean("ignore_eos").value_or(false);
  r.user = f.str("user").value_or("");
  if (const json* lb = f.get("logit_bias")) {
    if (!lb->is_object()) bad_request(f.path("logit_bias"), fmt::format("expected an object, got {}", json_kind(*lb)));
    if (!lb->empty()) unsupported(f.path("logit_bias"), "logit_bias is not supported by this server yet");
  }
  if (const json* rf = f.get("response_format")) {
    Fields rff(*rf, f.path("response_format"));
    const std::string type = rff.str("type").value_or("");
    if (type == "json_object") {
      r.json = llm::JsonConstraint::any_object();
    } else if (type == "json_schema") {
      const json* js = rff.get("json_schema");
      if (js == nullptr || !js->is_object()) bad_request(rff.path("json_schema"), "an object with the schema is required");
      Fields jf(*js, rff.path("json_schema"));
      const json* schema = jf.get("schema");
      if (schema == nullptr) bad_request(jf.path("schema"), "the schema is required");
      try {
        r.json = llm::JsonConstraint::compile(*schema, jf.path("schema"));
      } catch (const spore::Error& e) {
        // "<path>: why" - the path of the keyword is the parameter.
        const std::string m = e.message();
        const size_t at = m.find(": ");
        bad_request(at == std::string::npos ? jf.path("schema") : m.substr(0, at),
                    at == std::string::npos ? m : m.substr(at + 2), "unsupported_schema");
      }
    } else if (type != "text") {
      bad_request(rff.path("type"), fmt::format("'{}' is not a response format (text, json_object, json_schema)", type));
    }
  }
}

std::string message_content(const json& c, const std::string& path, const std::string& role) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_null()) {
    if (role == "assistant") return "";
    bad_request(path, "must not be null");
  }
  if (!c.is_array()) bad_request(path, fmt::format("expected a string or an array of content parts, got {}", json_kind(c)));
  std::string text;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string p = json_path(path, i);
    Fields part(c[i], p);
    const std::string type = part.str("type").value_or("");
    if (type == "text") {
      const json* t = part.get("text");
      if (!t) bad_request(part.path("text"), "is required for a text part");
      text += expect_string(*t, part.path("text"));
    } else if (type.empty()) {
      bad_request(part.path("type"), "is required");
    } else {
      bad_request(part.path("type"), fmt::format("'{}' content is not supported by this server (text only)", type),
                  "unsupported_parameter");
    }
  }
  return text;
}

}  // namespace

json parse_json_body(const std::string& body) {
  try {
    return json::parse(body);
  } catch (const json::parse_error& e) {
    HttpError err;
    err.status = 400;
    err.code = "invalid_json";
    err.message = fmt::format("request body is not valid JSON (byte {}): {}", e.byte, e.what());
    throw RequestError(std::move(err));
  }
}

GenerationRequest parse_completion_request(const json& body, const ParseLimits& limits) {
  Fields f(body, "");
  GenerationRequest r;
  r.chat = false;
  parse_common(f, r, limits);
  const json* p = f.get("prompt");
  if (!p) bad_request("prompt", "is required");
  r.prompts = prompt_inputs(*p, "prompt", /*allow_empty_text=*/true);
  if (const json* lp = f.get("logprobs")) {
    if (lp->is_boolean())  // some clients send the chat form: true = each token's logprob, no alternatives
      r.logprobs = lp->get<bool>() ? 0 : -1;
    else
      r.logprobs = *f.integer("logprobs", 0, limits.max_logprobs);
  }
  r.echo = f.boolean("echo").value_or(false);
  if (r.echo && r.logprobs >= 0) unsupported("echo", "echo with logprobs (prompt logprobs) is not supported yet");
  if (auto s = f.str("suffix"); s && !s->empty()) unsupported("suffix", "suffix (insertion) is not supported");
  if (auto b = f.integer("best_of", 1, limits.max_n); b && *b != r.n)
    unsupported("best_of", fmt::format("best_of {} != n {} is not supported (choices are not ranked)", *b, r.n));
  if (r.max_tokens < 0) r.max_tokens = 16;  // OpenAI's default for completions
  return r;
}

GenerationRequest parse_chat_request(const json& body, const ParseLimits& limits) {
  Fields f(body, "");
  GenerationRequest r;
  r.chat = true;
  // `logprobs` is a boolean in chat; check it before parse_common so the error names the right type.
  const bool want_logprobs = f.boolean("logprobs").value_or(false);
  parse_common(f, r, limits);
  if (auto k = f.integer("top_logprobs", 0, limits.max_logprobs)) {
    if (!want_logprobs) bad_request("top_logprobs", "requires logprobs to be true");
    r.logprobs = *k;
  } else if (want_logprobs) {
    r.logprobs = 0;
  }
  if (const json* t = f.get("tools")) {
    if (!t->is_array()) bad_request("tools", fmt::format("expected an array, got {}", json_kind(*t)));
    if (!t->empty()) unsupported("tools", "tool calling is not supported by this server yet");
  }
  if (const json* fn = f.get("functions"); fn && !(fn->is_array() && fn->empty()))
    unsupported("functions", "function calling is not supported by this server yet");
  if (const json* tc = f.get("tool_choice"); tc && !(tc->is_string() && (*tc == "none" || *tc == "auto")))
    unsupported("tool_choice", "tool calling is not supported by this server yet");
  const json* m = f.get("messages");
  if (!m) bad_request("messages", "is required");
  if (!m->is_array()) bad_request("messages", fmt::format("expected an array, got {}", json_kind(*m)));
  if (m->empty()) bad_request("messages", "must not be empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const std::string p = json_path("messages", i);
    Fields mf((*m)[i], p);
    const json* role = mf.get("role");
    if (!role) bad_request(mf.path("role"), "is required");
    std::string r_role = expect_string(*role, mf.path("role"));
    if (r_role == "developer") r_role = "system";  // OpenAI's newer name for the system turn
    if (r_role == "tool" || r_role == "function")
      unsupported(mf.path("role"), fmt::format("'{}' messages are not supported (no tool calling yet)", r_role));
    if (r_role != "system" && r_role != "user" && r_role != "assistant")
      bad_request(mf.path("role"), fmt::format("'{}' is not a role (system, developer, user, assistant)", r_role));
    if (const json* tc = mf.get("tool_calls"); tc && !(tc->is_array() && tc->empty()))
      unsupported(mf.path("tool_calls"), "tool calls are not supported by this server yet");
    auto it = (*m)[i].find("content");
    if (it == (*m)[i].end() && r_role != "assistant") bad_request(mf.path("content"), "is required");
    const std::string content = it == (*m)[i].end() ? "" : message_content(*it, mf.path("content"), r_role);
    r.messages.push_back({r_role, content});
  }
  return r;
}

EmbeddingRequest parse_embedding_request(const json& body) {
  Fields f(body, "");
  EmbeddingRequest r;
  r.model = f.str("model").value_or("");
  const json* in = f.get("input");
  if (!in) bad_request("input", "is required");
  r.inputs = prompt_inputs(*in, "input", /*allow_empty_text=*/false);
  const std::string fmt_name = f.str("encoding_format").value_or("float");
  if (fmt_name != "float" && fmt_name != "base64")
    bad_request("encoding_format", fmt::format("'{}' is not an encoding (float, base64)", fmt_name));
  r.base64 = fmt_name == "base64";
  return r;
}

TokenizeRequest parse_tokenize_request(const json& body) {
  Fields f(body, "");
  TokenizeRequest r;
  r.model = f.str("model").value_or("");
  auto c = f.str("content");
  if (!c) bad_request("content", "is required");
  r.content = *c;
  r.add_special = f.boolean("add_special").value_or(false);
  r.with_pieces = f.boolean("with_pieces").value_or(false);
  return r;
}

DetokenizeRequest parse_detokenize_request(const json& body) {
  Fields f(body, "");
  DetokenizeRequest r;
  r.model = f.str("model").value_or("");
  const json* t = f.get("tokens");
  if (!t) bad_request("tokens", "is required");
  if (!t->is_array()) bad_request("tokens", fmt::format("expected an array of token ids, got {}", json_kind(*t)));
  r.tokens = token_array(*t, "tokens");
  return r;
}

}  // namespace spore::serve
