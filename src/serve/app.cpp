#include "serve/app.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "base/error.h"
#include "runtime/runtime.h"
#include "serve/llm_service.h"
#include "serve/tensor_model.h"

namespace spore::serve {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool is_llm_path(const std::string& path) {
  if (fs::is_directory(path)) return true;
  std::string ext = fs::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".gguf";
}

std::string model_name_of(const std::string& path) {
  fs::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "models/qwen/" -> "models/qwen"
  if (fs::is_directory(p)) return p.filename().string();
  return p.stem().string();
}

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

void note(const std::string& s) {
  std::fprintf(stderr, "spore serve: %s\n", s.c_str());
  std::fflush(stderr);
}

// SIGTERM / SIGINT are blocked in every thread and taken by one waiting thread, so no handler runs in the middle of
// a request and shutdown is ordinary code. They stay blocked after run_serve returns: a second SIGTERM during the
// process's exit must not kill it. Embedded without signal handling (Python), only the stop flag ends serving.
class SignalWaiter {
 public:
  SignalWaiter(bool handle, std::shared_ptr<std::atomic<bool>> stop) : handle_(handle), stop_(std::move(stop)) {
    if (!handle_) return;
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before any thread starts: they inherit the mask
    ::signal(SIGPIPE, SIG_IGN);                  // a client that went away is a failed write, not a dead server
    thread_ = std::thread([this] {
      while (!quit_) {
        timespec ts{0, 200 * 1000 * 1000};
        const int sig = sigtimedwait(&set_, nullptr, &ts);
        if (sig == SIGTERM || sig == SIGINT) {
          signal_ = sig;
          return;
        }
      }
    });
  }
  ~SignalWaiter() {
    if (!handle_) return;
    quit_ = true;
    thread_.join();
  }
  // The signal that ends serving (SIGTERM for a stop request), or 0.
  int signal() const {
    if (signal_ == 0 && stop_ && stop_->load()) return SIGTERM;
    return signal_;
  }
  void wait() const {
    while (signal() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

 private:
  bool handle_;
  std::shared_ptr<std::atomic<bool>> stop_;
  sigset_t set_{};
  std::atomic<bool> quit_{false};
  std::atomic<int> signal_{0};
  std::thread thread_;
};

}  // namespace

int run_serve(const ServeConfig& c) {
  SPORE_CHECK(!c.models.empty(), ErrorCode::invalid_argument, "no model: give MODEL or --model NAME=PATH");
  SPORE_ASSERT(c.llm_factory != nullptr, "run_serve needs an llm_factory");
  std::vector<ModelSpec> specs = c.models;
  for (ModelSpec& m : specs) {
    SPORE_CHECK(fs::exists(m.path), ErrorCode::not_found, "model '{}' not found", m.path);
    if (m.name.empty()) m.name = model_name_of(m.path);
    SPORE_CHECK(!m.name.empty() && m.name.find('/') == std::string::npos, ErrorCode::invalid_argument,
                "'{}' cannot be a model name (no '/', not empty)", m.name);
  }
  const auto t_start = Clock::now();
  spore::init();
  set_threads(c.threads);
  SignalWaiter signals(c.handle_signals, c.stop);

  Server server(c.server);
  for (const ModelSpec& m : specs) server.declare_model(m.name, is_llm_path(m.path) ? ModelKind::llm : ModelKind::tensor);
  const int port = server.bind();
  std::printf("listening on http://%s:%d\n", c.server.host.c_str(), port);
  std::fflush(stdout);
  server.start();
  if (c.on_listening) c.on_listening(port);

  std::vector<std::shared_ptr<LlmService>> llms;
  std::vector<std::shared_ptr<TensorModel>> tensors;
  bool failed = false;
  std::string error;
  for (const ModelSpec& m : specs) {
    if (signals.signal()) break;
    const auto t0 = Clock::now();
    try {
      if (is_llm_path(m.path)) {
        llm::EngineOptions eo = c.engine;
        eo.threads = c.threads;
        LlmServiceOptions so;
        so.name = m.name;
        so.chat_template = c.chat_template;
        so.timeout_s = c.timeout_s;
        auto svc = std::make_shared<LlmService>(so, c.llm_factory(m.path, eo), server.metrics());
        const double load_ms = ms_since(t0);
        if (!svc->chat_note().empty()) note(svc->chat_note());
        svc->backend().wait_ready();
        note(fmt::format("model '{}' ({}): loaded in {:.0f} ms, engine ready (plans compiled, warm-up run) in {:.0f} ms",
                         m.name, svc->backend().description(), load_ms, svc->backend().startup_ms()));
        server.attach_llm(svc);
        llms.push_back(std::move(svc));
      } else {
        TensorModelOptions to;
        to.name = m.name;
        to.path = m.path;
        to.batching = c.batching;
        to.max_batch = c.max_batch;
        to.batch_delay_ms = c.batch_delay_ms;
        to.max_queue = c.engine.max_queue;
        auto tm = std::make_shared<TensorModel>(to, server.metrics());
        server.attach_tensor(tm);
        tm->wait_ready();
        note(fmt::format("model '{}' ({}): {} inputs, {} outputs, dynamic batching {}; loaded and warmed up in {:.0f} ms",
                         m.name, m.path, tm->inputs().size(), tm->outputs().size(), tm->batching_note(),
                         tm->startup_ms()));
        tensors.push_back(std::move(tm));
      }
    } catch (const std::exception& e) {
      note(fmt::format("error: model '{}' ({}) failed to load: {}", m.name, m.path, e.what()));
      server.mark_failed(m.name, e.what());
      error = fmt::format("model '{}' ({}) failed to load: {}", m.name, m.path, e.what());
      failed = true;
      break;
    }
  }
  if (c.on_ready) c.on_ready(failed ? error : signals.signal() ? "stopped before the models were ready" : "");
  if (!failed && !signals.signal())
    note(fmt::format("ready in {:.0f} ms: {} model(s) on http://{}:{}", ms_since(t_start), specs.size(), c.server.host,
                     port));

  if (!failed) signals.wait();
  if (signals.signal())
    note(fmt::format("{}: shutting down (in-flight requests get up to {:.0f} s)",
                     c.stop && c.stop->load() ? "stop requested" : signals.signal() == SIGTERM ? "SIGTERM" : "SIGINT",
                     c.shutdown_deadline_s));
  // Drain: new requests get 503 while the engines finish (or, past the deadline, cancel) what they run; then the
  // streams write their last chunks and the socket closes.
  const auto t_stop = Clock::now();
  server.begin_shutdown();
  std::vector<std::thread> stoppers;
  for (auto& s : llms) stoppers.emplace_back([&s, &c] { s->backend().shutdown(c.shutdown_deadline_s); });
  for (auto& t : tensors) stoppers.emplace_back([&t] { t->stop(); });
  for (std::thread& t : stoppers) t.join();
  server.stop(5.0);
  server.wait();
  note(fmt::format("stopped in {:.0f} ms", ms_since(t_stop)));
  return failed ? 1 : 0;
}

}  // namespace spore::serve
