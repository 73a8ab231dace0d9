// The OpenAI service over a scripted backend (fake_backend.h): whole and streamed answers with the exact SSE framing,
// n choices with per-choice streams, seeds, stop strings, logprobs in both shapes, usage, a full queue (503 +
// Retry-After), a client that leaves mid-stream (its requests are cancelled), context overflow, embeddings, tokenize.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <thread>

#include "serve_test_util.h"
#include "fake_backend.h"
#include "serve/errors.h"
#include "serve/llm_service.h"
#include "serve/openai_response.h"
#include "test_util.h"

namespace spore::serve {
namespace {

using testing::error_of;

using nlohmann::json;
using testing::FakeBackend;

struct Svc {
  Metrics metrics;
  FakeBackend* fake = nullptr;
  std::unique_ptr<LlmService> svc;
  Svc(const llm::Tokenizer& tok, FakeBackend::Options o = {}) {
    LlmService::declare_metrics(metrics);
    auto b = std::make_unique<FakeBackend>(tok, o);
    fake = b.get();
    svc = std::make_unique<LlmService>(LlmServiceOptions{.name = "tiny"}, std::move(b), metrics);
    svc->register_collector();
  }
};

// The SSE events of a whole stream: JSON objects, and "[DONE]" as a string.
std::vector<json> drain(Reply& r, const std::function<bool()>& alive = [] { return true; }) {
  std::string all, piece;
  bool more = true;
  while (more) {
    piece.clear();
    more = r.stream->next(piece, alive);
    all += piece;
  }
  r.stream->close(true);
  std::vector<json> events;
  size_t pos = 0;
  while (pos < all.size()) {
    const size_t end = all.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "an SSE event must end with a blank line";
    if (end == std::string::npos) break;
    const std::string ev = all.substr(pos, end - pos);
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    EXPECT_EQ(ev.find('\n'), std::string::npos) << "one line per event: " << ev;
    const std::string data = ev.substr(6);
    events.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end + 2;
  }
  return events;
}

json body_of(const Reply& r) { return json::parse(r.body); }

// What the fake answers for a prompt (greedy): the text of tokens 0..n-1.
std::string predicted(const FakeBackend& f, const llm::Tokenizer& tok, const std::vector<int32_t>& prompt, int64_t n) {
  llm::Request r;
  r.prompt = prompt;
  std::string s;
  for (int64_t i = 0; i < n; ++i) s += tok.token_to_text(f.token_at(r, i));
  return s;
}

TEST(LlmService, CompletionWholeAnswer) {
  NEED_TOKENIZER(tok);
  Svc s(*tok);
  const Reply r = s.svc->generate({{"model", "tiny"}, {"prompt", "hello world"}, {"max_tokens", 5}, {"temperature", 0}}, false);
  EXPECT_EQ(r.status, 200);
  const json j = body_of(r);
  const std::vector<int32_t> prompt = tok->encode("hello world", true, true);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["text"], valid_utf8(predicted(*s.fake, *tok, prompt, 5)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], prompt.size() + 5);
  EXPECT_EQ(r.log.completion_tokens, 5);
  EXPECT_EQ(s.metrics.value("spore:request_success_total", {{"model", "tiny"}, {"finished_reason", "length"}}), 1);
  EXPECT_EQ(s.metrics.value("spore:inter_token_latency_seconds", {{"model", "tiny"}}), 4);  // 5 tokens, 4 gaps
  // Token-id prompts run as given (no BOS added).
  const Reply t = s.svc->generate({{"prompt", prompt}, {"max_tokens", 3}, {"temperature", 0}}, false);
  EXPECT_EQ(body_of(t)["choices"][0]["text"], valid_utf8(predicted(*s.fake, *tok, prompt, 3)));
}

TEST(LlmService, ChatStreamFramingMatchesTheWholeAnswer) {
  NEED_TOKENIZER(tok);
  Svc s(*tok);
  const json msgs = {{{"role", "user"}, {"content", "Say something"}}};
  const Reply whole = s.svc->generate({{"messages", msgs}, {"max_tokens", 6}, {"temperature", 0}}, true);
  const json w = body_of(whole);
  EXPECT_EQ(w["object"], "chat.completion");
  EXPECT_EQ(w["choices"][0]["message"]["role"], "assistant");

  Reply r = s.svc->generate({{"messages", msgs}, {"max_tokens", 6}, {"temperature", 0}, {"stream", true},
                             {"stream_options", {{"include_usage", true}}}},
                            true);
  ASSERT_TRUE(r.stream);
  EXPECT_EQ(r.content_type, "text/event-stream");
  const std::vector<json> ev = drain(r);
  ASSERT_GE(ev.size(), 4u);
  // role first, then content, then finish_reason with an empty delta, then usage with no choices, then [DONE].
  EXPECT_EQ(ev[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(ev[0]["usage"].is_null());
  std::string content;
  size_t i = 1;
  for (; i < ev.size() && ev[i].is_object() && !ev[i]["choices"].empty() && ev[i]["choices"][0]["finish_reason"].is_null(); ++i) {
    EXPECT_FALSE(ev[i]["choices"][0]["delta"].contains("role"));
    content += ev[i]["choices"][0]["delta"]["content"].get<std::string>();
  }
  ASSERT_LT(i + 2, ev.size());
  EXPECT_EQ(ev[i]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(ev[i]["choices"][0]["delta"].empty());
  EXPECT_TRUE(ev[i + 1]["choices"].empty());
  EXPECT_EQ(ev[i + 1]["usage"]["completion_tokens"], 6);
  EXPECT_EQ(ev[i + 2], "[DONE]");
  EXPECT_EQ(i + 3, ev.size());
  EXPECT_EQ(content, w["choices"][0]["message"]["content"]);
  for (const json& e : ev)
    if (e.is_object()) {
      EXPECT_EQ(e["id"], ev[0]["id"]);
    }
}

TEST(LlmService, NChoicesDifferAndASeedReproducesThem) {
  NEED_TOKENIZER(tok);
  Svc s(*tok);
  const json req = {{"prompt", "once upon"}, {"max_tokens", 8}, {"temperature", 0.9}, {"seed", 7}, {"n", 3}};
  const json a = body_of(s.svc->generate(req, false));
  const json b = body_of(s.svc->generate(req, false));
  ASSERT_EQ(a["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a["choices"][i]["index"], i);
    EXPECT_EQ(a["choices"][i]["text"], b["choices"][i]["text"]) << "seeded choice " << i << " must reproduce";
  }
  EXPECT_NE(a["choices"][0]["text"], a["choices"][1]["text"]);
  EXPECT_EQ(a["usage"]["completion_tokens"], 24);
  json other = req;
  other["seed"] = 8;
  EXPECT_NE(body_of(s.svc->generate(other, false))["choices"][0]["text"], a["choices"][0]["text"]);
  // Streamed, the choices interleave; each one's content ends with its own finish chunk.
  json sreq = req;
  sreq["stream"] = true;
  Reply r = s.svc->generate(sreq, false);
  std::map<int, std::string> text;
  std::map<int, int> finishes;
  for (const json& e : drain(r)) {
    if (!e.is_object()) continue;
    const int idx = e["choices"][0]["index"];
    text[idx] += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) ++finishes[idx];
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(text[i], a["choices"][i]["text"]);
    EXPECT_EQ(finishes[i], 1);
  }
}

TEST(LlmService, StopStringEndsTheAnswerBeforeIt) {
  NEED_TOKENIZER(tok);
  Svc s(*tok);
  const std::vector<int32_t> prompt = tok->encode("stop here", true, true);
  const std::string full = predicted(*s.fake, *tok, prompt, 10);
  const std::string tail = predicted(*s.fake, *tok, prompt, 4).substr(predicted(*s.fake, *tok, prompt, 3).size());
  ASSERT_FALSE(tail.empty());
  const std::string stop = tail.substr(0, std::min<size_t>(tail.size(), 3));
  const json j = body_of(s.svc->generate({{"prompt", "stop here"}, {"max_tokens", 10}, {"temperature", 0}, {"stop", stop}}, false));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["text"], valid_utf8(full.substr(0, full.find(stop))));
}

TEST(LlmService, LogprobsShapes) {
  NEED_TOKENIZER(tok);
  Svc s(*tok);
  const json c = body_of(s.svc->generate({{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4},
                                          {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}},
                                         true));
  const json& lp = c["choices"][0]["logprobs"];
  ASSERT_EQ(lp["content"].size(), 4u);
  EXPECT_EQ(lp["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_TRUE(lp["content"][0]["bytes"].is_array());
  EXPECT_FLOAT_EQ(lp["content"][0]["logprob"].get<float>(), -0.25f);
  const json t = body_of(s.svc->generate({{"prompt", "hi"}, {"max_tokens", 3}, {"temperature", 0}, {"logprobs", 1}}, false));
  const json& tl = t["choices"][0]["logprobs"];
  EXPECT_EQ(tl["tokens"].size(), 3u);
  EXPECT_EQ(tl["token_logprobs"].size(), 3u);
  EXPECT_EQ(tl["top_logprobs"].size(), 3u);
  EXPECT_EQ(tl["text_offset"][0], 0);
  // No logprobs asked: null.
  EXPECT_TRUE(body_of(s.svc->generate({{"prompt", "hi"}, {"max_tokens", 1}}, false))["choices"][0]["logprobs"].is_null());
}

TEST(LlmService, FullQueueIs503WithRetryAfter) {
  NEED_TOKENIZER(tok);
  Svc s(*tok, {.slots = 1, .max_queue = 1});
  s.fake->hold(true);
  const json req = {{"prompt", "x"}, {"max_tokens", 2}, {"stream", true}};
  Reply a = s.svc->generate(req, false);
  Reply b = s.svc->generate(req, false);
  const HttpError e = error_of([&] { s.svc->generate(req, false); });
  EXPECT_EQ(e.status, 503);
  EXPECT_EQ(e.retry_after_s, 2);
  EXPECT_EQ(e.code, "server_overloaded");
  s.fake->hold(false);
  drain(a);
  drain(b);
  EXPECT_EQ(s.metrics.value("spore:request_refused_total", {{"model", "tiny"}}), 1);
  EXPECT_NE(s.metrics.render().find("spore:engine_requests_refused_total{model=\"tiny\"} 1"), std::string::npos);
}

TEST(LlmService, ClientLeavingMidStreamCancels) {
  NEED_TOKENIZER(tok);
  Svc s(*tok);
  Reply r = s.svc->generate({{"prompt", "x"}, {"max_tokens", 100}, {"stream", true}, {"n", 2}}, false);
  std::string out;
  ASSERT_TRUE(r.stream->next(out, [] { return true; }));  // the first chunks went out
  s.fake->hold(true);                                      // nothing more comes: the stream waits and polls alive()
  bool alive = true;
  std::thread leave([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    alive = false;
  });
  std::string rest;
  while (r.stream->next(rest, [&] { return alive; })) {
  }
  leave.join();
  r.stream->close(false);
  EXPECT_EQ(s.fake->cancels(), 2);
  s.fake->hold(false);
  for (int i = 0; i < 100 && s.fake->active() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.fake->active(), 0u);
}

TEST(LlmService, ContextOverflowAndBadTokenIds) {
  NEED_TOKENIZER(tok);
  Svc s(*tok, {.ctx = 16});
  HttpError e = error_of([&] { s.svc->generate({{"prompt", std::vector<int>(16, 5)}}, false); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NE(e.message.find("16 tokens"), std::string::npos) << e.message;
  e = error_of([&] { s.svc->generate({{"prompt", {1, 2, 99999999}}}, false); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "prompt[2]");
  e = error_of([&] { s.svc->generate({{"messages", {{{"role", "user"}, {"content", std::string(400, 'a')}}}}}, true); });
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "messages");
}

TEST(LlmService, NotReadyIs503) {
  NEED_TOKENIZER(tok);
  Svc s(*tok, {.ready = false});
  const HttpError e = error_of([&] { s.svc->generate({{"prompt", "x"}}, false); });
  EXPECT_EQ(e.status, 503);
  EXPECT_GT(e.retry_after_s, 0);
}

TEST(LlmService, EmbeddingsTokenizeDetokenize) {
  NEED_TOKENIZER(tok);
  Svc s(*tok);
  const json f = body_of(s.svc->embeddings({{"input", {"a cat", "a dog"}}}));
  ASSERT_EQ(f["data"].size(), 2u);
  EXPECT_EQ(f["object"], "list");
  EXPECT_EQ(f["data"][1]["index"], 1);
  EXPECT_EQ(f["data"][0]["embedding"].size(), 8u);
  EXPECT_GT(f["usage"]["prompt_tokens"], 0);
  const json b = body_of(s.svc->embeddings({{"input", "a cat"}, {"encoding_format", "base64"}}));
  const std::string b64 = b["data"][0]["embedding"];
  // Decode and compare with the float answer.
  std::string bytes;
  auto val = [](char c) { return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
                                 : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' ? 62 : 63; };
  for (size_t i = 0; i + 3 < b64.size(); i += 4) {
    const uint32_t v = val(b64[i]) << 18 | val(b64[i + 1]) << 12 | (b64[i + 2] == '=' ? 0 : val(b64[i + 2]) << 6) |
                       (b64[i + 3] == '=' ? 0 : val(b64[i + 3]));
    bytes += static_cast<char>(v >> 16);
    if (b64[i + 2] != '=') bytes += static_cast<char>((v >> 8) & 255);
    if (b64[i + 3] != '=') bytes += static_cast<char>(v & 255);
  }
  ASSERT_EQ(bytes.size(), 8 * sizeof(float));
  std::vector<float> floats(8);
  std::memcpy(floats.data(), bytes.data(), bytes.size());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(floats[i], f["data"][0]["embedding"][i].get<float>());
  EXPECT_EQ(error_of([&] { s.svc->embeddings({{"input", "x"}, {"dimensions", 3}}); }).param, "dimensions");

  const json t = body_of(s.svc->tokenize({{"content", "Hello world"}}));
  EXPECT_EQ(t["tokens"], json(tok->encode("Hello world", false, true)));
  const json p = body_of(s.svc->tokenize({{"content", "Hello"}, {"with_pieces", true}}));
  EXPECT_TRUE(p["tokens"][0].contains("piece"));
  const json d = body_of(s.svc->detokenize({{"tokens", t["tokens"]}}));
  EXPECT_EQ(d["content"], tok->decode(tok->encode("Hello world", false, true)));
  EXPECT_EQ(error_of([&] { s.svc->detokenize({{"tokens", {1, -1}}}); }).param, "tokens[1]");
}

TEST(LlmService, MetricsMirrorTheEngine) {
  NEED_TOKENIZER(tok);
  Svc s(*tok);
  (void)s.svc->generate({{"prompt", "x"}, {"max_tokens", 3}}, false);
  const std::string t = s.metrics.render();
  for (const char* want : {"spore:num_requests_running{model=\"tiny\"} 0", "spore:num_requests_waiting{model=\"tiny\"} 0",
                           "spore:kv_cache_usage_perc{model=\"tiny\"} 0", "spore:generation_tokens_total{model=\"tiny\"} 3",
                           "spore:time_to_first_token_seconds_count{model=\"tiny\"} 1",
                           "spore:e2e_request_latency_seconds_count{model=\"tiny\"} 1",
                           "spore:request_queue_time_seconds_count{model=\"tiny\"} 1",
                           "spore:batch_size_bucket{model=\"tiny\",le=\"1\"}"})
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
}

}  // namespace
}  // namespace spore::serve
