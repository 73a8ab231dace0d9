#pragma once
// The HTTP server: routing, authentication, body limits, error envelopes, the access log and /metrics, over
// cpp-httplib (which stays inside server.cpp). Models are declared before the socket opens, so /health can answer 503
// while they load, and attached when they are ready to take requests.
//
//   serve::Server s({.host = "127.0.0.1", .port = 0});
//   s.declare_model("tiny", serve::ModelKind::llm);
//   int port = s.bind();                  // then print "listening on ..."
//   s.start();                            // serves on its own thread until stop(); s.wait() joins it
//   s.attach_llm(std::make_shared<serve::LlmService>(...));
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "serve/access_log.h"
#include "serve/metrics.h"

namespace spore::serve {

class LlmService;
class TensorModel;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (bind() returns it)
  std::string api_key;              // not empty: every route but /health and /v2/health/* needs "Authorization: Bearer KEY"
  size_t max_body = 32u << 20;      // request bodies above this are 413
  int http_threads = 64;            // connections served at once (keep-alive and streaming ones hold a thread)
  int keep_alive_timeout_s = 5;
  int read_timeout_s = 30;          // a client that stalls mid-request this long is dropped
  int write_timeout_s = 30;         // a client that does not read its response this long is dropped (and cancelled)
  bool access_log = true;           // one JSON line per request on stderr
};

enum class ModelKind { llm, tensor };

class Server {
 public:
  explicit Server(ServerOptions o);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Metrics& metrics();
  AccessLog& access_log();

  void declare_model(const std::string& name, ModelKind kind);
  void attach_llm(std::shared_ptr<LlmService> s);
  void attach_tensor(std::shared_ptr<TensorModel> m);
  void mark_failed(const std::string& name, const std::string& why);  // /health reports it; requests get 503

  int bind();    // opens the socket; returns the port (an Error naming host:port if it cannot)
  void start();  // serves on a thread of its own until stop()
  void wait();   // returns when the server has stopped and every connection's handler has finished
  // Draining: new requests get 503 (Retry-After), /health answers 503; requests in flight go on.
  void begin_shutdown();
  // Waits up to `grace_s` for the streaming responses in flight to end, then closes the socket and ends the accept
  // loop (wait() returns once the last handler is done). Call it after the engines have finished their requests.
  void stop(double grace_s);
  bool all_ready() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spore::serve
