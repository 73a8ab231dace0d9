#include "serve/server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "serve/errors.h"
#include "serve/json_fields.h"
#include "serve/kserve.h"
#include "serve/llm_service.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/reply.h"
#include "serve/tensor_model.h"

namespace spore::serve {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// Which error shape a route answers with: OpenAI's envelope, or KServe's {"error": "message"}.
enum class Api { openai, kserve };

struct ModelEntry {
  ModelKind kind = ModelKind::llm;
  std::shared_ptr<LlmService> llm;
  std::shared_ptr<TensorModel> tensor;
  std::string failed;
  bool ready() const {
    if (!failed.empty()) return false;
    if (kind == ModelKind::llm) return llm && llm->backend().ready();
    return tensor && tensor->ready();
  }
};

bool equal_constant_time(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;  // the key's length is not the secret
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

[[noreturn]] void throw_status(int status, const std::string& message, const std::string& code = "",
                               int64_t retry_after_s = 0, const std::string& param = "") {
  HttpError e;
  e.status = status;
  e.message = message;
  e.code = code;
  e.retry_after_s = retry_after_s;
  e.param = param;
  e.type = error_type_for_status(status);
  throw RequestError(std::move(e));
}

// Whether the client of a request is still connected. cpp-httplib 0.11 gives a handler no socket (newer versions
// have Request::is_connection_closed), so the probe finds it once, on its first use: the one socket of this process
// whose two ends are the request's (remote address and port as httplib prints them, the local port). The socket
// stays open while the handler runs, so the descriptor cannot be another connection's. Then, as httplib's own
// is_socket_alive: nothing to read means connected; end of stream or an error means the client left; bytes waiting
// (a pipelined request) mean connected. A probe that cannot find the socket says connected.
class ConnectionProbe {
 public:
  explicit ConnectionProbe(const httplib::Request& req) : req_(req) {}

  bool alive() {
    if (!searched_) {
      searched_ = true;
      fd_ = find();
    }
    if (fd_ < 0) return true;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
  }

 private:
  static bool end_of(int fd, bool peer, std::string& host, int& port) {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    auto* sa = reinterpret_cast<sockaddr*>(&a);
    if ((peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) != 0) return false;
    if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return false;
    char h[NI_MAXHOST], serv[NI_MAXSERV];
    if (::getnameinfo(sa, len, h, sizeof(h), serv, sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) return false;
    host = h;
    port = std::atoi(serv);
    return true;
  }

  int find() const {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      const std::string name = e.path().filename().string();
      char* end = nullptr;
      const long fd = std::strtol(name.c_str(), &end, 10);
      if (end == name.c_str() || *end != '\0') continue;
      std::string host;
      int port = -1;
      if (!end_of(static_cast<int>(fd), true, host, port) || port != req_.remote_port || host != req_.remote_addr)
        continue;
      if (!end_of(static_cast<int>(fd), false, host, port) || port != req_.local_port) continue;
      return static_cast<int>(fd);
    }
    return -1;
  }

  const httplib::Request& req_;
  bool searched_ = false;
  int fd_ = -1;
};

// A known route: its pattern, the methods it takes (for 405) and the label /metrics counts it under.
struct RouteInfo {
  std::regex re;
  std::string methods;
  std::string label;
};

}  // namespace

struct Server::Impl {
  ServerOptions o;
  Metrics metrics;
  AccessLog log;
  httplib::Server svr;
  mutable std::mutex mu;
  std::vector<std::string> order;
  std::map<std::string, ModelEntry> models;
  std::atomic<bool> draining{false};
  std::atomic<bool> started{false}, finished{false};
  std::atomic<int64_t> streams{0};  // streaming responses in flight
  std::thread thread;  // the accept loop (start() .. wait())
  std::atomic<uint64_t> counter{0};
  std::vector<RouteInfo> known;
  const int64_t started_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();

  explicit Impl(ServerOptions opts) : o(std::move(opts)), log(stderr, o.access_log) {
    metrics.declare("spore:http_requests_total", MetricType::counter, "HTTP requests answered, by route and status.");
    metrics.declare("spore:model_ready", MetricType::gauge, "1 when the model has loaded and warmed up.");
    LlmService::declare_metrics(metrics);
    TensorModel::declare_metrics(metrics);
    metrics.add_collector([this](Metrics& m) {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& [name, e] : models) m.set("spore:model_ready", {{"model", name}}, e.ready() ? 1 : 0);
    });
    setup();
  }

  // ---- models ----------------------------------------------------------------------------------------------------

  std::shared_ptr<LlmService> find_llm(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu);
    std::string n = name;
    if (n.empty()) {
      for (const std::string& m : order)
        if (models.at(m).kind == ModelKind::llm) {
          n = m;
          break;
        }
      if (n.empty()) throw_status(404, "this server serves no language model", "model_not_found", 0, "model");
    }
    auto it = models.find(n);
    if (it == models.end()) throw_status(404, fmt::format("The model '{}' does not exist", n), "model_not_found", 0, "model");
    const ModelEntry& e = it->second;
    if (e.kind != ModelKind::llm)
      throw_status(400, fmt::format("model '{}' is a tensor model: use /v2/models/{}/infer", n, n), "model_not_llm", 0,
                   "model");
    if (!e.failed.empty()) throw_status(503, fmt::format("model '{}' failed to load: {}", n, e.failed), "model_failed");
    if (!e.llm || !e.llm->backend().ready())
      throw_status(503, fmt::format("model '{}' is still loading", n), "model_loading", 1);
    return e.llm;
  }

  std::shared_ptr<TensorModel> find_tensor(const std::string& name, bool need_ready = true) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = models.find(name);
    if (it == models.end()) throw_status(404, fmt::format("model '{}' is not served here", name), "model_not_found");
    const ModelEntry& e = it->second;
    if (e.kind != ModelKind::tensor)
      throw_status(400, fmt::format("model '{}' is a language model: use the OpenAI routes (/v1/...)", name),
                   "model_not_tensor");
    if (!e.failed.empty()) throw_status(503, fmt::format("model '{}' failed to load: {}", name, e.failed), "model_failed");
    if (!e.tensor || (need_ready && !e.tensor->ready()))
      throw_status(503, fmt::format("model '{}' is still loading", name), "model_loading", 1);
    return e.tensor;
  }

  bool all_ready() const {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [name, e] : models)
      if (!e.ready()) return false;
    return !models.empty();
  }

  // ---- replies ---------------------------------------------------------------------------------------------------

  static Reply json_reply(const json& j, int status = 200) {
    Reply r;
    r.status = status;
    r.body = dump_json(j);
    return r;
  }

  static Reply error_reply(const HttpError& e, Api api) {
    Reply r;
    r.status = e.status;
    r.body = api == Api::openai ? dump_json(e.body()) : dump_json(json{{"error", e.message}});
    if (e.retry_after_s > 0) r.headers.push_back({"Retry-After", std::to_string(e.retry_after_s)});
    if (e.status == 401) r.headers.push_back({"WWW-Authenticate", "Bearer"});
    r.log.error = e.message;
    return r;
  }

  bool authorized(const httplib::Request& req) const {
    if (o.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (h.size() <= prefix.size() || h.compare(0, prefix.size(), prefix) != 0) return false;
    return equal_constant_time(h.substr(prefix.size()), o.api_key);
  }

  void count(const std::string& label, int status) {
    metrics.add("spore:http_requests_total", {{"route", label}, {"status", std::to_string(status)}});
  }

  using Fn = std::function<Reply(const std::string& body, const httplib::Request& req)>;

  // Every route goes through here: body (bounded), authentication, draining, the handler, errors mapped to a status
  // and an envelope (never a crash), the response written whole or streamed, the access log.
  void serve(const httplib::Request& req, httplib::Response& res, const std::string& label, Api api, bool is_public,
             const httplib::ContentReader* reader, const Fn& fn) {
    const auto t0 = Clock::now();
    AccessRecord rec;
    rec.method = req.method;
    rec.route = req.path;
    rec.remote = req.remote_addr;
    Reply reply;
    bool close_connection = false;
    try {
      std::string body;
      if (reader) {
        bool too_big = false;
        size_t dropped = 0;
        const bool ok = (*reader)([&](const char* d, size_t n) {
          if (too_big || body.size() + n > o.max_body) {
            // Over the limit: keep reading (and dropping) a while, so a client still sending gets to read its 413
            // instead of a reset connection; past 4x the limit, stop reading.
            if (!too_big) body.clear();
            too_big = true;
            dropped += n;
            return dropped <= 4 * o.max_body;
          }
          body.append(d, n);
          return true;
        });
        if (too_big || res.status == 413) {
          close_connection = true;  // the rest of the body may still be in the socket
          throw_status(413, fmt::format("the request body is larger than the server's limit of {} bytes (--max-body)",
                                        o.max_body),
                       "request_too_large");
        }
        if (!ok) {
          close_connection = true;
          throw_status(400, "the request body could not be read (truncated or malformed chunked encoding)");
        }
      }
      if (!is_public && !authorized(req)) {
        HttpError e;
        e.status = 401;
        e.type = "invalid_request_error";
        e.code = "invalid_api_key";
        e.message = req.has_header("Authorization") ? "Incorrect API key provided"
                                                    : "You didn't provide an API key: send 'Authorization: Bearer KEY'";
        throw RequestError(std::move(e));
      }
      if (draining && !is_public) throw_status(503, "the server is shutting down", "shutting_down", 1);
      reply = fn(body, req);
    } catch (...) {
      reply = error_reply(error_from_exception(std::current_exception()), api);
    }
    res.status = reply.status;
    for (const auto& [k, v] : reply.headers) res.set_header(k.c_str(), v);
    if (close_connection) res.set_header("Connection", "close");
    rec.id = reply.log.id.empty() ? fmt::format("req-{}", counter.fetch_add(1)) : reply.log.id;
    if (reply.stream) {
      std::shared_ptr<ReplyStream> st = reply.stream;
      ++streams;
      res.set_chunked_content_provider(
          reply.content_type,
          [st](size_t, httplib::DataSink& sink) {
            std::string out;
            const bool more = st->next(out, [&sink] { return sink.is_writable(); });
            if (!out.empty() && !sink.write(out.data(), out.size())) return false;  // the client left: abort
            if (!more) sink.done();
            return true;
          },
          [this, st, rec, t0, label](bool success) mutable {
            st->close(success);
            rec.status = 200;
            st->fill_log(rec);
            rec.total_ms = ms_since(t0);
            count(label, 200);
            log.write(rec);
            --streams;
          });
      return;
    }
    res.set_content(reply.body, reply.content_type.c_str());
    AccessRecord full = reply.log;
    full.id = rec.id;
    full.method = rec.method;
    full.route = rec.route;
    full.remote = rec.remote;
    full.status = reply.status;
    full.total_ms = ms_since(t0);
    count(label, reply.status);
    log.write(full);
  }

  // ---- routes ----------------------------------------------------------------------------------------------------

  void get(const std::string& pattern, const std::string& label, Api api, bool is_public, Fn fn) {
    known.push_back({std::regex(pattern), "GET", label});
    svr.Get(pattern, [this, label, api, is_public, fn](const httplib::Request& req, httplib::Response& res) {
      serve(req, res, label, api, is_public, nullptr, fn);
    });
  }
  void post(const std::string& pattern, const std::string& label, Api api, Fn fn) {
    known.push_back({std::regex(pattern), "POST", label});
    svr.Post(pattern, [this, label, api, fn](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& reader) {
      serve(req, res, label, api, false, &reader, fn);
    });
  }

  json health_json(bool& ok) const {
    std::lock_guard<std::mutex> lock(mu);
    json ms = json::object();
    ok = !models.empty();
    bool failed = false;
    for (const auto& [name, e] : models) {
      ms[name] = !e.failed.empty() ? "failed" : e.ready() ? "ready" : "loading";
      ok = ok && e.ready();
      failed = failed || !e.failed.empty();
    }
    const char* status = draining ? "shutting_down" : failed ? "error" : ok ? "ok" : "loading";
    ok = ok && !draining;
    return json{{"status", status}, {"models", ms}};
  }

  static json model_card(const std::string& name, int64_t created) {
    return json{{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "spore"}};
  }

  Reply infer(const std::string& name, const std::string& body, const httplib::Request& req) {
    std::shared_ptr<TensorModel> m = find_tensor(name);
    std::optional<size_t> header_length;
    if (req.has_header("Inference-Header-Content-Length")) {
      const std::string v = req.get_header_value("Inference-Header-Content-Length");
      size_t used = 0;
      unsigned long long n = 0;
      try {
        n = std::stoull(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != v.size())
        throw_status(400, fmt::format("Inference-Header-Content-Length: '{}' is not a byte count", v));
      header_length = static_cast<size_t>(n);
    }
    const InferRequest r = parse_infer_request(body, header_length);
    std::vector<Tensor> inputs = match_inputs(r, m->inputs());
    const std::vector<Tensor> outs = m->infer(std::move(inputs));
    const InferResponse resp = write_infer_response(name, r, m->outputs(), outs);
    Reply reply;
    reply.body = resp.body;
    reply.log.model = name;
    reply.log.id = r.id.empty() ? "" : r.id;
    if (resp.header_length) {
      reply.content_type = "application/octet-stream";
      reply.headers.push_back({"Inference-Header-Content-Length", std::to_string(*resp.header_length)});
    }
    return reply;
  }

  static std::string model_of(const json& j) {
    if (!j.is_object()) return "";
    auto it = j.find("model");
    if (it == j.end() || it->is_null()) return "";
    if (!it->is_string()) bad_request("model", fmt::format("expected a string, got {}", json_kind(*it)));
    return it->get<std::string>();
  }

  void setup() {
    svr.new_task_queue = [n = o.http_threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    // Without TCP_NODELAY a small response written in two parts (headers, body) waits for the client's delayed ACK:
    // 40 ms added to every KServe call on loopback (measured with bench/peers/ort/kserve_vs_ort.js).
    svr.set_tcp_nodelay(true);
    svr.set_keep_alive_timeout(o.keep_alive_timeout_s);
    svr.set_read_timeout(o.read_timeout_s, 0);
    svr.set_write_timeout(o.write_timeout_s, 0);
    svr.set_payload_max_length(o.max_body);

    get("/health", "/health", Api::openai, true, [this](const std::string&, const httplib::Request&) {
      bool ok = false;
      json j = health_json(ok);
      Reply r = json_reply(j, ok ? 200 : 503);
      if (!ok) r.headers.push_back({"Retry-After", "1"});
      return r;
    });
    get("/metrics", "/metrics", Api::openai, false, [this](const std::string&, const httplib::Request&) {
      Reply r;
      r.body = metrics.render();
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      return r;
    });
    get("/v1/models", "/v1/models", Api::openai, false, [this](const std::string&, const httplib::Request&) {
      std::lock_guard<std::mutex> lock(mu);
      json data = json::array();
      for (const std::string& n : order)
        if (models.at(n).kind == ModelKind::llm) data.push_back(model_card(n, started_unix));
      return json_reply(json{{"object", "list"}, {"data", data}});
    });
    get(R"(/v1/models/([^/]+))", "/v1/models/{id}", Api::openai, false,
        [this](const std::string&, const httplib::Request& req) {
          const std::string n = req.matches[1];
          std::lock_guard<std::mutex> lock(mu);
          auto it = models.find(n);
          if (it == models.end() || it->second.kind != ModelKind::llm)
            throw_status(404, fmt::format("The model '{}' does not exist", n), "model_not_found", 0, "model");
          return json_reply(model_card(n, started_unix));
        });
    for (const bool chat : {false, true}) {
      const std::string route = chat ? "/v1/chat/completions" : "/v1/completions";
      post(route, route, Api::openai, [this, chat](const std::string& body, const httplib::Request& req) {
        const json j = parse_json_body(body);
        ConnectionProbe probe(req);
        return find_llm(model_of(j))->generate(j, chat, [&probe] { return probe.alive(); });
      });
    }
    post("/v1/embeddings", "/v1/embeddings", Api::openai, [this](const std::string& body, const httplib::Request&) {
      const json j = parse_json_body(body);
      return find_llm(model_of(j))->embeddings(j);
    });
    post("/tokenize", "/tokenize", Api::openai, [this](const std::string& body, const httplib::Request&) {
      const json j = parse_json_body(body);
      return find_llm(model_of(j))->tokenize(j);
    });
    post("/detokenize", "/detokenize", Api::openai, [this](const std::string& body, const httplib::Request&) {
      const json j = parse_json_body(body);
      return find_llm(model_of(j))->detokenize(j);
    });

    // KServe v2.
    get("/v2", "/v2", Api::kserve, false, [](const std::string&, const httplib::Request&) {
      return json_reply(json{{"name", "spore"}, {"version", SPORE_VERSION}, {"extensions", {"binary_tensor_data"}}});
    });
    get("/v2/health/live", "/v2/health/live", Api::kserve, true, [this](const std::string&, const httplib::Request&) {
      return json_reply(json{{"live", !draining.load()}}, draining ? 503 : 200);
    });
    get("/v2/health/ready", "/v2/health/ready", Api::kserve, true, [this](const std::string&, const httplib::Request&) {
      bool ok = false;
      health_json(ok);
      return json_reply(json{{"ready", ok}}, ok ? 200 : 503);
    });
    for (const char* prefix : {R"(/v2/models/([^/]+))", R"(/v2/models/([^/]+)/versions/[^/]+)"}) {
      const std::string p = prefix;
      get(p, "/v2/models/{name}", Api::kserve, false, [this](const std::string&, const httplib::Request& req) {
        return json_reply(find_tensor(req.matches[1], /*need_ready=*/false)->metadata());
      });
      get(p + "/ready", "/v2/models/{name}/ready", Api::kserve, false,
          [this](const std::string&, const httplib::Request& req) {
            const std::string n = req.matches[1];
            bool ready = false;
            {
              std::lock_guard<std::mutex> lock(mu);
              auto it = models.find(n);
              if (it == models.end() || it->second.kind != ModelKind::tensor)
                throw_status(404, fmt::format("model '{}' is not served here", n), "model_not_found");
              ready = it->second.ready();
            }
            return json_reply(json{{"name", n}, {"ready", ready}}, ready ? 200 : 503);
          });
      post(p + "/infer", "/v2/models/{name}/infer", Api::kserve,
           [this](const std::string& body, const httplib::Request& req) { return infer(req.matches[1], body, req); });
    }

    // What httplib answers itself (no route, 413 from Content-Length, unparsable requests) gets the same envelopes:
    // a route that exists for another method is a 405.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                      httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a handler's own error reply
      const Api api = req.path.rfind("/v2", 0) == 0 ? Api::kserve : Api::openai;
      HttpError e;
      e.status = res.status;
      std::string label = "unmatched";
      if (res.status == 404) {
        std::string allow;
        for (const RouteInfo& r : known)
          if (std::regex_match(req.path, r.re)) {
            label = r.label;
            if (allow.find(r.methods) == std::string::npos) allow += (allow.empty() ? "" : ", ") + r.methods;
          }
        if (!allow.empty()) {
          e.status = 405;
          e.code = "method_not_allowed";
          e.message = fmt::format("{} is not allowed on {} (allowed: {})", req.method, req.path, allow);
          res.set_header("Allow", allow);
        } else {
          e.code = "not_found";
          e.message = fmt::format("no route {} {}", req.method, req.path);
        }
      } else if (res.status == 413) {
        e.code = "request_too_large";
        e.message = fmt::format("the request body is larger than the server's limit of {} bytes (--max-body)", o.max_body);
      } else {
        e.message = fmt::format("the HTTP request could not be handled (status {}): malformed request line, headers or "
                                "body", res.status);
      }
      e.type = error_type_for_status(e.status);
      Reply r = error_reply(e, api);
      res.status = e.status;
      res.set_content(r.body, "application/json");
      for (const auto& [k, v] : r.headers) res.set_header(k.c_str(), v);
      AccessRecord rec;
      rec.id = fmt::format("req-{}", counter.fetch_add(1));
      rec.method = req.method;
      rec.route = req.path;
      rec.remote = req.remote_addr;
      rec.status = e.status;
      rec.error = e.message;
      count(label, e.status);
      log.write(rec);
      return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
      const HttpError e = error_from_exception(ep);
      const Reply r = error_reply(e, req.path.rfind("/v2", 0) == 0 ? Api::kserve : Api::openai);
      res.status = e.status;
      res.set_content(r.body, "application/json");
    });
  }
};

Server::Server(ServerOptions o) : impl_(std::make_unique<Impl>(std::move(o))) {}
Server::~Server() {
  if (impl_->thread.joinable()) {
    stop(0);
    impl_->thread.join();
  }
}

Metrics& Server::metrics() { return impl_->metrics; }
AccessLog& Server::access_log() { return impl_->log; }

void Server::declare_model(const std::string& name, ModelKind kind) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  SPORE_CHECK(!impl_->models.count(name), ErrorCode::invalid_argument, "two models are named '{}' (--model NAME=PATH)",
              name);
  impl_->models[name].kind = kind;
  impl_->order.push_back(name);
}

void Server::attach_llm(std::shared_ptr<LlmService> s) {
  s->register_collector();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->models.at(s->name()).llm = std::move(s);
}

void Server::attach_tensor(std::shared_ptr<TensorModel> m) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->models.at(m->name()).tensor = std::move(m);
}

void Server::mark_failed(const std::string& name, const std::string& why) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->models.at(name).failed = why.empty() ? "unknown error" : why;
}

int Server::bind() {
  Impl& m = *impl_;
  int port = m.o.port;
  if (port == 0) {
    port = m.svr.bind_to_any_port(m.o.host);
    SPORE_CHECK(port > 0, ErrorCode::io_error, "cannot listen on {} (any port): is the host address right?", m.o.host);
  } else {
    SPORE_CHECK(m.svr.bind_to_port(m.o.host, port), ErrorCode::io_error,
                "cannot listen on {}:{}: the port is taken or the address is not this machine's (--host, --port)",
                m.o.host, port);
  }
  return port;
}

void Server::start() {
  Impl& m = *impl_;
  m.started = true;
  m.thread = std::thread([&m] {
    m.svr.listen_after_bind();
    m.finished = true;
  });
}

void Server::wait() {
  if (impl_->thread.joinable()) impl_->thread.join();
}

void Server::begin_shutdown() { impl_->draining = true; }

void Server::stop(double grace_s) {
  Impl& m = *impl_;
  m.draining = true;
  // httplib ends chunked responses when the server stops: let the streams in flight write their last chunks first.
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, grace_s) * 1000));
  while (m.streams > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // stop() does nothing until listen has started: a stop right after start() (a model that fails to load at once)
  // waits for it, or wait() would never return.
  for (int i = 0; i < 10000 && m.started && !m.finished && !m.svr.is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  m.svr.stop();
}

bool Server::all_ready() const { return impl_->all_ready(); }

}  // namespace spore::serve
