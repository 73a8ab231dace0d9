// The HTTP server in process, on a free port, driven by httplib's client: /health while loading and when ready,
// routing (404, 405), malformed JSON (400, OpenAI envelope), body limit (413), API key (401), a full queue (503 +
// Retry-After), SSE over chunked transfer, a client that leaves mid-stream (cancelled, server keeps serving), KServe
// v2 metadata / JSON / binary inference and bad tensors, /metrics.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "serve_test_util.h"
#include "fake_backend.h"
#include "serve/llm_service.h"
#include "serve/server.h"
#include "serve/tensor_model.h"
#include "test_models.h"

namespace spore::serve {
namespace {

using nlohmann::json;
using testing::FakeBackend;

// A server on a free port, serving until the fixture goes away.
struct Running {
  std::unique_ptr<Server> server;
  int port = 0;
  FakeBackend* fake = nullptr;

  explicit Running(ServerOptions o = {}) {
    o.port = 0;
    o.access_log = false;
    server = std::make_unique<Server>(o);
  }
  void start() {
    port = server->bind();
    server->start();
  }
  void add_llm(const llm::Tokenizer& tok, FakeBackend::Options fo = {}) {
    server->declare_model("tiny", ModelKind::llm);
    auto b = std::make_unique<FakeBackend>(tok, fo);
    fake = b.get();
    server->attach_llm(std::make_shared<LlmService>(LlmServiceOptions{.name = "tiny"}, std::move(b), server->metrics()));
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    return c;
  }
  ~Running() {
    server->begin_shutdown();
    if (fake) fake->shutdown(0);
    server->stop(5);
    server->wait();
  }
};

json error_body(const httplib::Result& r) {
  EXPECT_TRUE(r);
  const json j = json::parse(r->body);
  EXPECT_TRUE(j.contains("error")) << r->body;
  return j["error"];
}

const char* chat_body = R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                            "temperature": 0})";

TEST(Server, HealthIs503WhileLoadingThen200) {
  NEED_TOKENIZER(tok);
  Running r;
  r.server->declare_model("tiny", ModelKind::llm);
  r.start();
  auto c = r.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body)["status"], "loading");
  auto early = c.Post("/v1/chat/completions", chat_body, "application/json");
  ASSERT_TRUE(early);
  EXPECT_EQ(early->status, 503);
  EXPECT_EQ(early->get_header_value("Retry-After"), "1");
  auto b = std::make_unique<FakeBackend>(*tok, FakeBackend::Options{});
  r.fake = b.get();
  r.server->attach_llm(std::make_shared<LlmService>(LlmServiceOptions{.name = "tiny"}, std::move(b), r.server->metrics()));
  h = c.Get("/health");
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body)["models"]["tiny"], "ready");
  EXPECT_TRUE(r.server->all_ready());
}

TEST(Server, OpenAIRoutesAndErrorStatuses) {
  NEED_TOKENIZER(tok);
  Running r(ServerOptions{.max_body = 4096});
  r.add_llm(*tok);
  r.start();
  auto c = r.client();

  auto ok = c.Post("/v1/chat/completions", chat_body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["finish_reason"], "length");
  EXPECT_NE(ok->get_header_value("Content-Type").find("application/json"), std::string::npos);

  auto models = c.Get("/v1/models");
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");
  EXPECT_EQ(c.Get("/v1/models/tiny")->status, 200);
  EXPECT_EQ(c.Get("/v1/models/nope")->status, 404);

  auto bad = c.Post("/v1/chat/completions", "{\"model\": \"tiny\", \"messages\": [", "application/json");
  EXPECT_EQ(bad->status, 400);
  json e = error_body(bad);
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["code"], "invalid_json");

  auto field = c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": 5}]})", "application/json");
  EXPECT_EQ(field->status, 400);
  EXPECT_EQ(error_body(field)["param"], "messages[0].content");

  auto unknown = c.Post("/v1/chat/completions", R"({"model": "gpt-9", "messages": []})", "application/json");
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(error_body(unknown)["code"], "model_not_found");

  auto schema = c.Post("/v1/chat/completions",
                       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
                           "json_schema": {"name": "a", "schema": {"type": "object"}}}})",
                       "application/json");
  EXPECT_EQ(schema->status, 200);  // a schema the server can enforce
  auto bad_schema = c.Post("/v1/chat/completions",
                           R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
                               "json_schema": {"name": "a", "schema": {"type": "string", "format": "date"}}}})",
                           "application/json");
  EXPECT_EQ(bad_schema->status, 400);
  EXPECT_EQ(error_body(bad_schema)["param"], "response_format.json_schema.schema.format");

  auto method = c.Get("/v1/chat/completions");
  EXPECT_EQ(method->status, 405);
  EXPECT_EQ(method->get_header_value("Allow"), "POST");
  EXPECT_EQ(error_body(method)["code"], "method_not_allowed");

  auto route = c.Get("/v1/nothing");
  EXPECT_EQ(route->status, 404);
  EXPECT_EQ(error_body(route)["code"], "not_found");

  auto big = c.Post("/v1/completions", "{\"prompt\": \"" + std::string(8000, 'a') + "\"}", "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(error_body(big)["code"], "request_too_large");
  // A chunked body (no Content-Length) over the limit is cut off too.
  auto chunked = c.Post(
      "/v1/completions",
      [](size_t offset, httplib::DataSink& sink) {
        const std::string part(1024, 'b');
        if (offset < 20000) sink.write(part.data(), part.size());
        else sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 413);

  // The server still answers after all of that.
  auto c2 = r.client();
  EXPECT_EQ(c2.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})", "application/json")->status, 200);
  auto tokz = c2.Post("/tokenize", R"({"content": "hello"})", "application/json");
  EXPECT_EQ(tokz->status, 200);
  EXPECT_TRUE(json::parse(tokz->body)["tokens"].is_array());

  const std::string m = c2.Get("/metrics")->body;
  EXPECT_NE(m.find("spore:http_requests_total{route=\"/v1/chat/completions\",status=\"200\"}"), std::string::npos) << m;
  EXPECT_NE(m.find("spore:http_requests_total{route=\"/v1/chat/completions\",status=\"405\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("spore:model_ready{model=\"tiny\"} 1"), std::string::npos) << m;
}

TEST(Server, ApiKey) {
  NEED_TOKENIZER(tok);
  Running r(ServerOptions{.api_key = "sekret"});
  r.add_llm(*tok);
  r.start();
  auto c = r.client();
  auto no = c.Get("/v1/models");
  EXPECT_EQ(no->status, 401);
  EXPECT_EQ(no->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(error_body(no)["code"], "invalid_api_key");
  EXPECT_EQ(c.Get("/v1/models", {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(c.Get("/v1/models", {{"Authorization", "Bearer sekret"}})->status, 200);
  EXPECT_EQ(c.Post("/v1/chat/completions", chat_body, "application/json")->status, 401);
  EXPECT_EQ(c.Get("/health")->status, 200);  // health stays public (load balancers)
}

// POSTs a streaming request; `keep(n)` says whether to keep reading after n bytes.
httplib::Result post_stream(httplib::Client& c, const std::string& body, std::string& got,
                            const std::function<bool(size_t)>& keep = [](size_t) { return true; }) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    got.append(d, n);
    return keep(got.size());
  };
  return c.send(req);
}

TEST(Server, StreamingAndAClientThatLeaves) {
  NEED_TOKENIZER(tok);
  Running r;
  r.add_llm(*tok);
  r.start();
  auto c = r.client();
  std::string got;
  auto res = post_stream(c, R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": true})", got);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  EXPECT_EQ(got.rfind("data: [DONE]\n\n"), got.size() - 14) << got;
  EXPECT_EQ(got.find("data: {"), 0u);

  // A client that reads the first chunk and hangs up: its engine request is cancelled.
  std::string part;
  auto cut = post_stream(c, R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100000, "stream": true,
                               "ignore_eos": true})",
                         part, [](size_t n) { return n < 200; });
  EXPECT_FALSE(cut);  // the client aborted
  for (int i = 0; i < 300 && r.fake->cancels() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(r.fake->cancels(), 1);
  for (int i = 0; i < 300 && r.fake->active() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(r.fake->active(), 0u);
  auto again = r.client();
  EXPECT_EQ(again.Post("/v1/chat/completions", chat_body, "application/json")->status, 200);
}

// A client that sends a whole-body (non-streamed) request and hangs up before the answer: its engine request is
// cancelled (the handler finds the connection's socket and sees it closed), and the server keeps serving.
TEST(Server, AWholeBodyRequestWhoseClientLeavesIsCancelled) {
  NEED_TOKENIZER(tok);
  Running r;
  r.add_llm(*tok);
  r.start();
  r.fake->hold(true);  // the request stays in the engine until the client has gone
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(r.port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50})";
  const std::string http = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, http.data(), http.size(), 0), static_cast<ssize_t>(http.size()));
  for (int i = 0; i < 300 && r.fake->active() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(r.fake->active(), 1u);
  EXPECT_EQ(r.fake->cancels(), 0);
  ::close(fd);
  for (int i = 0; i < 300 && r.fake->cancels() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(r.fake->cancels(), 1);
  r.fake->hold(false);
  for (int i = 0; i < 300 && r.fake->active() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(r.fake->active(), 0u);
  auto again = r.client();
  EXPECT_EQ(again.Post("/v1/chat/completions", chat_body, "application/json")->status, 200);
  const std::string metrics = again.Get("/metrics")->body;
  EXPECT_NE(metrics.find("status=\"499\""), std::string::npos) << metrics.substr(0, 2000);
}

TEST(Server, FullQueueIs503WithRetryAfter) {
  NEED_TOKENIZER(tok);
  Running r;
  r.add_llm(*tok, {.slots = 1, .max_queue = 1});
  r.start();
  r.fake->hold(true);
  std::vector<std::thread> waiting;
  for (int i = 0; i < 2; ++i)
    waiting.emplace_back([&] {
      auto c = r.client();
      EXPECT_EQ(c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})", "application/json")->status, 200);
    });
  for (int i = 0; i < 300 && r.fake->active() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(r.fake->active(), 2u);
  auto c = r.client();
  auto full = c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})", "application/json");
  EXPECT_EQ(full->status, 503);
  EXPECT_EQ(full->get_header_value("Retry-After"), "2");
  EXPECT_EQ(error_body(full)["type"], "server_error");
  r.fake->hold(false);
  for (auto& t : waiting) t.join();
}

TEST(Server, KServe) {
  Running r;
  r.server->declare_model("mlp", ModelKind::tensor);
  Metrics& metrics = r.server->metrics();
  auto tm = std::make_shared<TensorModel>(TensorModelOptions{.name = "mlp", .path = testing::mlp_model(4, 8)}, metrics);
  tm->wait_ready();
  r.server->attach_tensor(tm);
  r.start();
  auto c = r.client();
  EXPECT_EQ(c.Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(c.Get("/v2/models/mlp/ready")->status, 200);
  const json md = json::parse(c.Get("/v2/models/mlp")->body);
  EXPECT_EQ(md["inputs"][0]["shape"], json({-1, 4}));
  EXPECT_EQ(md["outputs"][0]["datatype"], "FP32");

  auto res = c.Post("/v2/models/mlp/infer",
                    R"({"id": "q", "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                        "data": [1, 2, 3, 4, 5, 6, 7, 8]}]})",
                    "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  const json out = json::parse(res->body);
  EXPECT_EQ(out["id"], "q");
  EXPECT_EQ(out["outputs"][0]["shape"], json({2, 10}));
  ASSERT_EQ(out["outputs"][0]["data"].size(), 20u);

  // The same request with binary input and output gives the same floats.
  const std::string head = R"({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                                "parameters": {"binary_data_size": 32}}], "parameters": {"binary_data_output": true}})";
  std::string body = head;
  const float xs[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  body.append(reinterpret_cast<const char*>(xs), sizeof xs);
  auto bin = c.Post("/v2/models/mlp/infer", {{"Inference-Header-Content-Length", std::to_string(head.size())}}, body,
                    "application/octet-stream");
  ASSERT_EQ(bin->status, 200) << bin->body;
  const size_t hl = std::stoul(bin->get_header_value("Inference-Header-Content-Length"));
  const json bh = json::parse(bin->body.substr(0, hl));
  EXPECT_EQ(bh["outputs"][0]["parameters"]["binary_data_size"], 80);
  ASSERT_EQ(bin->body.size(), hl + 80);
  for (int i = 0; i < 20; ++i) {
    float v;
    std::memcpy(&v, bin->body.data() + hl + 4 * i, 4);
    EXPECT_EQ(v, out["outputs"][0]["data"][i].get<float>()) << i;
  }

  auto bad = c.Post("/v2/models/mlp/infer",
                    R"({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [1, 2, 3]}]})",
                    "application/json");
  EXPECT_EQ(bad->status, 400);
  const json be = json::parse(bad->body);
  ASSERT_TRUE(be["error"].is_string()) << bad->body;  // KServe's error shape
  EXPECT_NE(be["error"].get<std::string>().find("input 'x'"), std::string::npos);
  EXPECT_EQ(c.Post("/v2/models/nope/infer", "{}", "application/json")->status, 404);
  EXPECT_EQ(c.Get("/v2/models/mlp/infer")->status, 405);
  EXPECT_EQ(c.Post("/v1/chat/completions", R"({"model": "mlp", "messages": []})", "application/json")->status, 400);
}

}  // namespace
}  // namespace spore::serve
