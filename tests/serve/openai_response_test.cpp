// Response shapes (as the openai clients parse them), SSE framing, logprobs in both OpenAI shapes, the error envelope
// and its status mapping, UTF-8 repair, base64.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "serve/errors.h"
#include "serve/openai_response.h"

namespace spore::serve {
namespace {

using nlohmann::json;

const ResponseMeta meta{"chatcmpl-1", 1700000000, "tiny"};

TEST(OpenAIResponse, SseFraming) {
  EXPECT_EQ(sse_data(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(sse_done), "data: [DONE]\n\n");
  // Invalid UTF-8 inside a value must not throw, and the frame stays one line.
  const std::string f = sse_data(json{{"t", std::string("a\xff" "b\nc")}});
  EXPECT_EQ(f.find('\n'), f.size() - 2);
  EXPECT_NE(f.find("\\n"), std::string::npos);
}

TEST(OpenAIResponse, ChatCompletionShape) {
  ChoiceResult c{"Hello", "stop", {}};
  const json j = chat_completion_json(meta, {c}, Usage{5, 1, 2}, false);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_TRUE(j["system_fingerprint"].is_string());
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 1);
  EXPECT_EQ(j["usage"]["total_tokens"], 6);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST(OpenAIResponse, CompletionShape) {
  const json j = completion_json({"cmpl-1", 1, "tiny"}, {{"a", "length", {}}, {"b", "stop", {}}}, Usage{3, 4, 0}, false);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "b");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

TEST(OpenAIResponse, ChatLogprobsShape) {
  TokenInfo t{7, "Hi", -0.5f, {{"Hi", -0.5f}, {"Ho", -1.5f}}};
  const json lp = chat_logprobs_json({t});
  ASSERT_EQ(lp["content"].size(), 1u);
  const json& c = lp["content"][0];
  EXPECT_EQ(c["token"], "Hi");
  EXPECT_FLOAT_EQ(c["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(c["bytes"], json({72, 105}));
  ASSERT_EQ(c["top_logprobs"].size(), 2u);
  EXPECT_EQ(c["top_logprobs"][1]["token"], "Ho");
  EXPECT_EQ(c["top_logprobs"][1]["bytes"], json({72, 111}));
  EXPECT_TRUE(lp["refusal"].is_null());
  // A token that is half of a UTF-8 character: the string is repaired, the bytes are exact.
  TokenInfo half{8, "\xE2\x82", -1.f, {}};
  const json h = chat_logprobs_json({half})["content"][0];
  EXPECT_EQ(h["token"], "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(h["bytes"], json({0xE2, 0x82}));
}

TEST(OpenAIResponse, CompletionLogprobsShape) {
  const json lp = completion_logprobs_json({{1, "ab", -0.1f, {{"ab", -0.1f}, {"x", -2.f}}}, {2, "c", -0.2f, {}}});
  EXPECT_EQ(lp["tokens"], json({"ab", "c"}));
  EXPECT_EQ(lp["token_logprobs"].size(), 2u);
  EXPECT_EQ(lp["text_offset"], json({0, 2}));
  EXPECT_TRUE(lp["top_logprobs"][0].is_object());
  EXPECT_FLOAT_EQ(lp["top_logprobs"][0]["x"].get<float>(), -2.f);
  EXPECT_TRUE(lp["top_logprobs"][1].empty());
}

TEST(OpenAIResponse, ChunkShapes) {
  const json first = chat_chunk_json(meta, 0, {{"role", "assistant"}, {"content", ""}}, nullptr, "", true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(first.contains("usage") && first["usage"].is_null());  // include_usage: null until the last chunk
  const json last = chat_chunk_json(meta, 1, json::object(), nullptr, "length", false);
  EXPECT_EQ(last["choices"][0]["index"], 1);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_FALSE(last.contains("usage"));
  const json u = usage_chunk_json(meta, true, Usage{2, 3, 0});
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 5);
  const json t = completion_chunk_json(meta, 0, "x", nullptr, "", false);
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], "x");
}

TEST(OpenAIResponse, Utf8AndBase64) {
  EXPECT_EQ(valid_utf8("h\xC3\xA9llo"), "h\xC3\xA9llo");
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
}

HttpError mapped(std::exception_ptr e) { return error_from_exception(e); }

TEST(ErrorEnvelope, ShapeAndStatusMapping) {
  HttpError e;
  e.status = 400;
  e.message = "messages[0].content: expected a string";
  e.param = "messages[0].content";
  const json b = e.body();
  EXPECT_EQ(b["error"]["message"], "messages[0].content: expected a string");
  EXPECT_EQ(b["error"]["type"], "invalid_request_error");
  EXPECT_EQ(b["error"]["param"], "messages[0].content");
  EXPECT_TRUE(b["error"]["code"].is_null());

  auto of = [](ErrorCode c) { return mapped(std::make_exception_ptr(Error(c, "m"))); };
  EXPECT_EQ(of(ErrorCode::invalid_argument).status, 400);
  EXPECT_EQ(of(ErrorCode::shape_mismatch).status, 400);
  EXPECT_EQ(of(ErrorCode::dtype_mismatch).status, 400);
  EXPECT_EQ(of(ErrorCode::parse_error).status, 400);
  EXPECT_EQ(of(ErrorCode::not_found).status, 404);
  const HttpError u = of(ErrorCode::unavailable);
  EXPECT_EQ(u.status, 503);
  EXPECT_GT(u.retry_after_s, 0);
  EXPECT_EQ(u.type, "server_error");
  EXPECT_EQ(of(ErrorCode::out_of_memory).status, 507);
  EXPECT_EQ(of(ErrorCode::internal).status, 500);
  // nlohmann type errors come from malformed client input: 400, never 500.
  try {
    (void)json("x").get<int>();
  } catch (...) {
    EXPECT_EQ(mapped(std::current_exception()).status, 400);
  }
  EXPECT_EQ(mapped(std::make_exception_ptr(std::runtime_error("boom"))).status, 500);
  try {
    bad_request("temperature", "too hot");
  } catch (...) {
    const HttpError r = mapped(std::current_exception());
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(r.param, "temperature");
    EXPECT_EQ(r.message, "temperature: too hot");
  }
}

}  // namespace
}  // namespace spore::serve
