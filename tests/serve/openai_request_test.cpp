// OpenAI request parsing: defaults, every field's type and range, errors that name the JSON path, and the fields the
// server must refuse rather than silently ignore (response_format json_*, tools, logit_bias).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "serve_test_util.h"
#include "serve/errors.h"
#include "serve/openai_request.h"

namespace spore::serve {
namespace {

using testing::error_of;

using nlohmann::json;

TEST(OpenAIRequest, ChatDefaultsAndFields) {
  const json body = {{"model", "tiny"},
                     {"messages", {{{"role", "system"}, {"content", "be brief"}}, {{"role", "user"}, {"content", "hi"}}}},
                     {"max_completion_tokens", 7},
                     {"temperature", 0.5},
                     {"top_p", 0.9},
                     {"top_k", 40},
                     {"min_p", 0.05},
                     {"frequency_penalty", 0.5},
                     {"presence_penalty", -0.5},
                     {"repeat_penalty", 1.1},
                     {"seed", 42},
                     {"stop", "END"},
                     {"n", 3},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}},
                     {"logprobs", true},
                     {"top_logprobs", 2},
                     {"user", "u1"},
                     {"ignore_eos", true},
                     {"some_future_field", {1, 2, 3}}};  // unknown: ignored
  const GenerationRequest r = parse_chat_request(body);
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.model, "tiny");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_DOUBLE_EQ(r.sampler.temperature, 0.5);
  EXPECT_DOUBLE_EQ(r.sampler.top_p, 0.9);
  EXPECT_EQ(r.sampler.top_k, 40);
  EXPECT_DOUBLE_EQ(r.sampler.min_p, 0.05);
  EXPECT_DOUBLE_EQ(r.sampler.frequency_penalty, 0.5);
  EXPECT_DOUBLE_EQ(r.sampler.presence_penalty, -0.5);
  EXPECT_DOUBLE_EQ(r.sampler.repeat_penalty, 1.1);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampler.seed, 42u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_EQ(r.user, "u1");
  EXPECT_TRUE(r.ignore_eos);

  const GenerationRequest d = parse_chat_request({{"messages", {{{"role", "user"}, {"content", "x"}}}}});
  EXPECT_EQ(d.model, "");
  EXPECT_EQ(d.max_tokens, -1);  // chat: the rest of the context
  EXPECT_DOUBLE_EQ(d.sampler.temperature, 1.0);  // OpenAI's default
  EXPECT_FALSE(d.seed_given);
  EXPECT_EQ(d.logprobs, -1);
  EXPECT_EQ(d.n, 1);
  EXPECT_FALSE(d.stream);
}

TEST(OpenAIRequest, ChatContentPartsAndRoles) {
  const json body = {{"messages",
                      {{{"role", "developer"}, {"content", "sys"}},
                       {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
                       {{"role", "assistant"}, {"content", nullptr}}}}};
  const GenerationRequest r = parse_chat_request(body);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
}

TEST(OpenAIRequest, ErrorsNameTheJsonPath) {
  auto chat = [](json b) { return error_of([&] { parse_chat_request(b); }); };
  const json user = {{"role", "user"}, {"content", "x"}};
  HttpError e = chat({{"messages", {user, user, {{"role", "user"}, {"content", 5}}}}});
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages[2].content");
  EXPECT_NE(e.message.find("messages[2].content"), std::string::npos) << e.message;

  e = chat({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}}}});
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages[0].content[0].type");

  e = chat({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}});
  EXPECT_EQ(e.param, "messages[0].role");
  e = chat({{"messages", json::array()}});
  EXPECT_EQ(e.param, "messages");
  e = chat(json::object());
  EXPECT_EQ(e.param, "messages");
  e = chat({{"messages", {user}}, {"temperature", "hot"}});
  EXPECT_EQ(e.param, "temperature");
  EXPECT_NE(e.message.find("expected a number, got a string"), std::string::npos) << e.message;
  e = chat({{"messages", {user}}, {"temperature", 3}});
  EXPECT_EQ(e.param, "temperature");
  e = chat({{"messages", {user}}, {"max_tokens", 1.5}});
  EXPECT_EQ(e.param, "max_tokens");
  e = chat({{"messages", {user}}, {"max_tokens", 0}});
  EXPECT_EQ(e.param, "max_tokens");
  e = chat({{"messages", {user}}, {"n", 1000}});
  EXPECT_EQ(e.param, "n");
  e = chat({{"messages", {user}}, {"stop", {"a", 3}}});
  EXPECT_EQ(e.param, "stop[1]");
  e = chat({{"messages", {user}}, {"stop", {"a", ""}}});
  EXPECT_EQ(e.param, "stop[1]");
  e = chat({{"messages", {user}}, {"top_logprobs", 2}});
  EXPECT_EQ(e.param, "top_logprobs");  // without logprobs: true
  e = chat({{"messages", {user}}, {"stream_options", {{"include_usage", true}}}});
  EXPECT_EQ(e.param, "stream_options");  // without stream: true
  e = chat({{"messages", {user}}, {"stream", "yes"}});
  EXPECT_EQ(e.param, "stream");
  e = chat({{"messages", {user}}, {"seed", "42"}});
  EXPECT_EQ(e.param, "seed");
  e = chat(json::array());
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("expected a JSON object"), std::string::npos) << e.message;
}

TEST(OpenAIRequest, ResponseFormatsCompileOrFailClosedNamingTheKeyword) {
  const json user = {{"role", "user"}, {"content", "x"}};
  EXPECT_TRUE(parse_chat_request({{"messages", {user}}, {"response_format", {{"type", "json_object"}}}}).json);
  json b = {{"messages", {user}}, {"response_format", {{"type", "json_schema"}}}};
  b["response_format"]["json_schema"] =
      json::parse(R"({"name": "s", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}})");
  EXPECT_TRUE(parse_chat_request(b).json);
  b["response_format"]["json_schema"]["schema"]["properties"]["a"]["minimum"] = 3;
  HttpError e = error_of([&] { parse_chat_request(b); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "response_format.json_schema.schema.properties.a.minimum");
  EXPECT_NE(e.message.find("not supported by constrained decoding"), std::string::npos) << e.message;
  b["response_format"]["json_schema"].erase("schema");
  EXPECT_EQ(error_of([&] { parse_chat_request(b); }).param, "response_format.json_schema.schema");
  e = error_of([&] { parse_chat_request({{"messages", {user}}, {"response_format", {{"type", "yaml"}}}}); });
  EXPECT_EQ(e.param, "response_format.type");
  EXPECT_FALSE(parse_chat_request({{"messages", {user}}}).json);
  // "text" is what the server does anyway.
  EXPECT_NO_THROW(parse_chat_request({{"messages", {user}}, {"response_format", {{"type", "text"}}}}));
  EXPECT_EQ(error_of([&] { parse_chat_request({{"messages", {user}}, {"tools", {{{"type", "function"}}}}}); }).param, "tools");
  EXPECT_EQ(error_of([&] { parse_chat_request({{"messages", {user}}, {"logit_bias", {{"50256", -100}}}}); }).param,
            "logit_bias");
  EXPECT_NO_THROW(parse_chat_request({{"messages", {user}}, {"logit_bias", json::object()}, {"tools", json::array()}}));
}

TEST(OpenAIRequest, CompletionPrompts) {
  GenerationRequest r = parse_completion_request({{"prompt", "hello"}});
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].text, "hello");
  EXPECT_EQ(r.max_tokens, 16);  // OpenAI's completions default
  r = parse_completion_request({{"prompt", {1, 2, 3}}, {"logprobs", 2}, {"echo", false}});
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(r.logprobs, 2);
  r = parse_completion_request({{"prompt", {"a", "b"}}});
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].path, "prompt[1]");
  r = parse_completion_request({{"prompt", {{1, 2}, {3}}}});
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].tokens, std::vector<int32_t>{3});

  auto err = [](json b) { return error_of([&] { parse_completion_request(b); }); };
  EXPECT_EQ(err(json::object()).param, "prompt");
  EXPECT_EQ(err({{"prompt", {1, -2}}}).param, "prompt[1]");
  EXPECT_EQ(err({{"prompt", {"a", 1}}}).param, "prompt[1]");
  EXPECT_EQ(err({{"prompt", json::array()}}).param, "prompt");
  EXPECT_EQ(err({{"prompt", 5}}).param, "prompt");
  EXPECT_EQ(err({{"prompt", "x"}, {"logprobs", 50}}).param, "logprobs");
  EXPECT_EQ(err({{"prompt", "x"}, {"suffix", "tail"}}).param, "suffix");
  EXPECT_EQ(err({{"prompt", "x"}, {"best_of", 3}}).param, "best_of");
  EXPECT_EQ(err({{"prompt", "x"}, {"response_format", {{"type", "json"}}}}).param, "response_format.type");
}

TEST(OpenAIRequest, EmbeddingsTokenizeDetokenize) {
  EmbeddingRequest e = parse_embedding_request({{"input", {"a", "b"}}, {"encoding_format", "base64"}});
  EXPECT_EQ(e.inputs.size(), 2u);
  EXPECT_TRUE(e.base64);
  EXPECT_EQ(error_of([] { parse_embedding_request({{"input", ""}}); }).param, "input");
  EXPECT_EQ(error_of([] { parse_embedding_request({{"input", "a"}, {"encoding_format", "hex"}}); }).param, "encoding_format");
  const TokenizeRequest t = parse_tokenize_request({{"content", "hi"}, {"add_special", true}, {"with_pieces", true}});
  EXPECT_EQ(t.content, "hi");
  EXPECT_TRUE(t.add_special);
  EXPECT_TRUE(t.with_pieces);
  EXPECT_EQ(error_of([] { parse_tokenize_request({{"content", 1}}); }).param, "content");
  EXPECT_EQ(parse_detokenize_request({{"tokens", {5, 6}}}).tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(error_of([] { parse_detokenize_request({{"tokens", {5, "x"}}}); }).param, "tokens[1]");
}

TEST(OpenAIRequest, MalformedJsonIs400WithOffset) {
  const HttpError e = error_of([] { parse_json_body("{\"model\": \"x\", "); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_json");
  EXPECT_NE(e.message.find("not valid JSON"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace spore::serve
