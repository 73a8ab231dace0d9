#include "serve/openai_response.h"

namespace spore::serve {

using nlohmann::json;

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t min_cp = 0;
    if (c < 0x80) len = 1;
    else if ((c & 0xE0) == 0xC0) len = 2, min_cp = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, min_cp = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, min_cp = 0x10000;
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len == 1 ? c : (c & (0x7F >> len));
    for (size_t k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      ok = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid too.
    if (ok && len > 1) ok = cp >= min_cp && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string base64_encode(std::string_view in) {
  static constexpr char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = static_cast<uint8_t>(in[i]) << 16 | static_cast<uint8_t>(in[i + 1]) << 8 | static_cast<uint8_t>(in[i + 2]);
    out += tbl[v >> 18];
    out += tbl[(v >> 12) & 63];
    out += tbl[(v >> 6) & 63];
    out += tbl[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    out += tbl[v >> 18];
    out += tbl[(v >> 12) & 63];
    out += i + 1 < in.size() ? tbl[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string system_fingerprint() { return std::string("spore-") + SPORE_VERSION; }

json usage_json(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

namespace {
json bytes_array(const std::string& b) {
  json a = json::array();
  for (char c : b) a.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return a;
}
json choice_logprobs(bool chat, bool with, const ChoiceResult& c) {
  if (!with) return nullptr;
  return chat ? chat_logprobs_json(c.tokens) : completion_logprobs_json(c.tokens);
}
json response_base(const ResponseMeta& m, const char* object) {
  return json{{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model},
              {"system_fingerprint", system_fingerprint()}};
}
}  // namespace

json chat_logprobs_json(const std::vector<TokenInfo>& tokens) {
  json content = json::array();
  for (const TokenInfo& t : tokens) {
    json top = json::array();
    for (const TokenAlt& a : t.top)
      top.push_back({{"token", valid_utf8(a.bytes)}, {"logprob", a.logprob}, {"bytes", bytes_array(a.bytes)}});
    content.push_back({{"token", valid_utf8(t.bytes)},
                       {"logprob", t.logprob},
                       {"bytes", bytes_array(t.bytes)},
                       {"top_logprobs", std::move(top)}});
  }
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

json completion_logprobs_json(const std::vector<TokenInfo>& tokens, int64_t offset0) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  int64_t off = offset0;
  for (const TokenInfo& t : tokens) {
    toks.push_back(valid_utf8(t.bytes));
    lps.push_back(t.logprob);
    json top = json::object();
    for (const TokenAlt& a : t.top) {
      const std::string k = valid_utf8(a.bytes);
      if (!top.contains(k)) top[k] = a.logprob;  // alternatives come most likely first: keep the best of equal texts
    }
    tops.push_back(std::move(top));
    offs.push_back(off);
    off += static_cast<int64_t>(t.bytes.size());
  }
  return json{{"tokens", std::move(toks)}, {"token_logprobs", std::move(lps)}, {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offs)}};
}

json chat_completion_json(const ResponseMeta& m, const std::vector<ChoiceResult>& choices, const Usage& u,
                          bool with_logprobs) {
  json j = response_base(m, "chat.completion");
  json cs = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    cs.push_back({{"index", i},
                  {"message", {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}}},
                  {"logprobs", choice_logprobs(true, with_logprobs, c)},
                  {"finish_reason", c.finish_reason}});
  }
  j["choices"] = std::move(cs);
  j["usage"] = usage_json(u);
  return j;
}

json completion_json(const ResponseMeta& m, const std::vector<ChoiceResult>& choices, const Usage& u,
                     bool with_logprobs) {
  json j = response_base(m, "text_completion");
  json cs = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    cs.push_back({{"index", i},
                  {"text", c.text},
                  {"logprobs", choice_logprobs(false, with_logprobs, c)},
                  {"finish_reason", c.finish_reason}});
  }
  j["choices"] = std::move(cs);
  j["usage"] = usage_json(u);
  return j;
}

json chat_chunk_json(const ResponseMeta& m, int64_t index, json delta, const json& logprobs,
                     const std::string& finish_reason, bool include_usage) {
  json j = response_base(m, "chat.completion.chunk");
  json c = {{"index", index},
            {"delta", std::move(delta)},
            {"logprobs", logprobs},
            {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
  j["choices"] = json::array({std::move(c)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

json completion_chunk_json(const ResponseMeta& m, int64_t index, const std::string& text, const json& logprobs,
                           const std::string& finish_reason, bool include_usage) {
  json j = response_base(m, "text_completion");
  json c = {{"index", index},
            {"text", text},
            {"logprobs", logprobs},
            {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
  j["choices"] = json::array({std::move(c)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

json usage_chunk_json(const ResponseMeta& m, bool chat, const Usage& u) {
  json j = response_base(m, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = usage_json(u);
  return j;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace spore::serve
