// spore.serve / spore.Server's C++ half (docs/PYTHON.md): `spore serve` (src/serve's run_serve) started from Python
// on a background thread that stop() shuts down gracefully. The process's signals stay Python's (a Python process
// already has threads that would take a SIGINT meant for sigwait), so spore.serve waits in Python for Ctrl-C.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "serve/app.h"
#include "serve/llm_backend.h"

namespace py = pybind11;
using spore::DType;
using spore::ErrorCode;
using spore_py::fail;
namespace serve = spore::serve;

namespace {

// The ServeConfig of spore.serve's keyword arguments (the same names as the CLI's options; None keeps the default).
serve::ServeConfig config_of(const std::vector<std::pair<std::string, std::string>>& models, const py::dict& o) {
  serve::ServeConfig c;
  if (models.empty()) fail(ErrorCode::invalid_argument, "serve: no model to serve");
  for (const auto& [name, path] : models) c.models.push_back({name, path});
  auto has = [&](const char* k) { return o.contains(k) && !o[k].is_none(); };
  auto i64 = [&](const char* k, int64_t lo) {
    const int64_t v = o[k].cast<int64_t>();
    if (v < lo) fail(ErrorCode::invalid_argument, fmt::format("serve: {} = {} (at least {})", k, v, lo));
    return v;
  };
  if (has("host")) c.server.host = o["host"].cast<std::string>();
  if (has("port")) {
    c.server.port = static_cast<int>(i64("port", 0));
    if (c.server.port > 65535) fail(ErrorCode::invalid_argument, fmt::format("serve: port {}", c.server.port));
  }
  if (has("parallel")) c.engine.slots = i64("parallel", 1);
  if (has("ctx")) c.engine.ctx = i64("ctx", 0);
  if (has("kv_type")) {
    const std::string k = o["kv_type"].cast<std::string>();
    if (k == "f32") c.engine.kv_dtype = DType::f32;
    else if (k == "f16") c.engine.kv_dtype = DType::f16;
    else if (k == "bf16") c.engine.kv_dtype = DType::bf16;
    else if (k == "i8" || k == "int8") c.engine.kv_dtype = DType::i8;
    else fail(ErrorCode::invalid_argument, fmt::format("serve: kv_type '{}' (f32, f16, bf16 or i8)", k));
  }
  if (has("max_memory")) c.engine.max_memory = i64("max_memory", 0);
  if (has("max_queue")) c.engine.max_queue = i64("max_queue", 0);
  if (has("max_queued_tokens")) c.engine.max_queued_tokens = i64("max_queued_tokens", 0);
  if (has("prefix_cache")) c.engine.prefix_cache_bytes = i64("prefix_cache", -1);
  if (has("api_key")) c.server.api_key = o["api_key"].cast<std::string>();
  if (has("threads")) c.threads = static_cast<int>(i64("threads", 0));
  if (has("timeout")) c.timeout_s = o["timeout"].cast<double>();
  if (has("max_body")) c.server.max_body = static_cast<size_t>(i64("max_body", 1));
  if (has("chat_template")) c.chat_template = o["chat_template"].cast<std::string>();
  if (has("batching")) {
    const std::string b = o["batching"].cast<std::string>();
    if (b == "auto") c.batching = serve::Batching::auto_;
    else if (b == "on") c.batching = serve::Batching::on;
    else if (b == "off") c.batching = serve::Batching::off;
    else fail(ErrorCode::invalid_argument, fmt::format("serve: batching '{}' (auto, on or off)", b));
  }
  if (has("max_batch")) c.max_batch = i64("max_batch", 1);
  if (has("batch_delay_ms")) c.batch_delay_ms = o["batch_delay_ms"].cast<double>();
  if (has("http_threads")) c.server.http_threads = static_cast<int>(i64("http_threads", 1));
  if (has("shutdown_timeout")) c.shutdown_deadline_s = o["shutdown_timeout"].cast<double>();
  if (has("access_log")) c.server.access_log = o["access_log"].cast<bool>();
  c.llm_factory = [](const std::string& path, const spore::llm::EngineOptions& o) {
    return spore::serve::make_engine_backend(path, o);
  };
  return c;
}

// A server on its own thread: start() returns once every model is ready (or raises what failed); stop() shuts it
// down as SIGTERM would (in-flight requests finish within the shutdown deadline).
class PyServer {
 public:
  PyServer(const std::vector<std::pair<std::string, std::string>>& models, const py::dict& options)
      : cfg_(config_of(models, options)) {
    cfg_.handle_signals = false;
    cfg_.stop = stop_;
    cfg_.on_listening = [this](int port) {
      std::lock_guard<std::mutex> lk(mu_);
      port_ = port;
    };
    cfg_.on_ready = [this](const std::string& error) {
      std::lock_guard<std::mutex> lk(mu_);
      ready_ = true;
      error_ = error;
      cv_.notify_all();
    };
    py::gil_scoped_release nogil;
    thread_ = std::thread([this] {
      std::string err;
      try {
        serve::run_serve(cfg_);
      } catch (const std::exception& e) {
        err = e.what();
      }
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
      if (!ready_) error_ = err.empty() ? "the server stopped before it was ready" : err;
      cv_.notify_all();
    });
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return ready_ || done_; });
    if (!error_.empty()) {
      const std::string e = error_;
      lk.unlock();
      stop_->store(true);
      thread_.join();
      fail(ErrorCode::unavailable, "serve: " + e);
    }
  }
  ~PyServer() { stop(); }
  PyServer(const PyServer&) = delete;
  PyServer& operator=(const PyServer&) = delete;

  void stop() {
    stop_->store(true);
    if (thread_.joinable()) {
      py::gil_scoped_release nogil;
      thread_.join();
    }
  }
  int port() const {
    std::lock_guard<std::mutex> lk(mu_);
    return port_;
  }
  bool running() const {
    std::lock_guard<std::mutex> lk(mu_);
    return !done_;
  }
  const std::string& host() const { return cfg_.server.host; }

 private:
  serve::ServeConfig cfg_;
  std::shared_ptr<std::atomic<bool>> stop_ = std::make_shared<std::atomic<bool>>(false);
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int port_ = -1;
  bool ready_ = false, done_ = false;
  std::string error_;
};

}  // namespace

namespace spore_py {

void bind_serve(py::module_& m) {
  py::class_<PyServer>(m, "_Server")
      .def(py::init<const std::vector<std::pair<std::string, std::string>>&, const py::dict&>(), py::arg("models"),
           py::arg("options"))
      .def("stop", &PyServer::stop)
      .def_property_readonly("port", &PyServer::port)
      .def_property_readonly("host", &PyServer::host)
      .def_property_readonly("running", &PyServer::running);
}

}  // namespace spore_py
