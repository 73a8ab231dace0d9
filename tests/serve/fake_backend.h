#pragma once
// A scripted LlmBackend for the serve tests: the real tokenizer (the tiny GGUF's), no model. It runs a loop thread
// like llm::Engine's and emits, for each running request, one token per step: token i of a request is a function of
// its prompt, seed, stream and i (greedy requests ignore seed and stream), so answers are reproducible and differ
// across prompts. Stop strings, max_tokens (cut to the context), logprobs, cancel, queue limits and timeouts behave as
// engine.h documents; `hold(true)` freezes the loop so tests can fill the queue deterministically.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "llm/tokenizer.h"
#include "serve/llm_backend.h"

namespace spore::serve::testing {

class FakeBackend final : public LlmBackend {
 public:
  struct Options {
    int64_t ctx = 128;
    int64_t slots = 2;
    int64_t max_queue = 4;
    int64_t embd = 8;
    bool ready = true;
  };
  FakeBackend(llm::Tokenizer tok, Options o) : tok_(std::move(tok)), o_(o), ready_(o.ready) {
    loop_ = std::thread([this] { run(); });
  }
  ~FakeBackend() override { shutdown(0); }

  uint64_t submit(llm::Request r) override {
    SPORE_CHECK(!r.prompt.empty(), ErrorCode::invalid_argument, "empty prompt");
    SPORE_CHECK(static_cast<int64_t>(r.prompt.size()) < o_.ctx, ErrorCode::invalid_argument,
                "prompt has {} tokens, the context is {}", r.prompt.size(), o_.ctx);
    r.sampler.validate();
    std::lock_guard<std::mutex> lock(mu_);
    SPORE_CHECK(!stopping_, ErrorCode::unavailable, "shutting down");
    if (static_cast<int64_t>(seqs_.size()) >= o_.slots + o_.max_queue) {
      ++refused_;
      SPORE_FAIL(ErrorCode::unavailable, "queue full ({} waiting)", o_.max_queue);
    }
    const uint64_t id = ++next_id_;
    Seq s;
    s.r = std::move(r);
    s.submitted = std::chrono::steady_clock::now();
    seqs_.emplace(id, std::move(s));
    order_.push_back(id);
    cv_.notify_all();
    return id;
  }
  void cancel(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;
    ++cancels_;
    it->second.cancel = true;
    cv_.notify_all();
  }
  std::vector<float> embed(std::span<const int32_t> tokens) override {
    std::vector<float> v(static_cast<size_t>(o_.embd));
    double norm = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      double x = 0;
      for (size_t t = 0; t < tokens.size(); ++t) x += std::sin(static_cast<double>(tokens[t]) * (i + 1) + t);
      v[i] = static_cast<float>(x);
      norm += x * x;
    }
    for (float& x : v) x = static_cast<float>(x / std::sqrt(norm + 1e-12));
    return v;
  }
  llm::EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    llm::EngineStats s;
    s.running = std::min<int64_t>(static_cast<int64_t>(seqs_.size()), o_.slots);
    s.waiting = static_cast<int64_t>(seqs_.size()) - s.running;
    s.kv_capacity_tokens = o_.ctx * o_.slots;
    s.generation_tokens = generated_;
    s.requests_refused = refused_;
    s.steps = steps_;
    s.batch_hist[0] = steps_;
    return s;
  }
  int64_t ctx() const override { return o_.ctx; }
  int64_t retry_after_s() const override { return 2; }
  bool ready() const override { return ready_; }
  void wait_ready() override {}
  double startup_ms() const override { return 0; }
  void shutdown(double) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ && !loop_.joinable()) return;
      stopping_ = true;
      for (auto& [id, s] : seqs_) s.cancel = true;
      held_ = false;
    }
    cv_.notify_all();
    if (loop_.joinable()) loop_.join();
  }
  const llm::Tokenizer& tokenizer() const override { return tok_; }
  int64_t embedding_size() const override { return o_.embd; }
  std::string description() const override { return "fake"; }

  void hold(bool h) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = h;
    }
    cv_.notify_all();
  }
  void set_ready(bool r) { ready_ = r; }
  int64_t cancels() const { return cancels_; }
  size_t active() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seqs_.size();
  }

  // The token a request emits at position i (what the tests predict answers from).
  int32_t token_at(const llm::Request& r, int64_t i) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : r.prompt) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
    if (r.sampler.temperature > 0) h ^= r.sampler.seed * 0x9E3779B97F4A7C15ull + r.sampler.stream * 0xBF58476D1CE4E5B9ull;
    h = (h ^ static_cast<uint64_t>(i)) * 1099511628211ull;
    // Ids from a printable ASCII band of the vocabulary keep the text readable (ids 3.. in SentencePiece vocabularies
    // are bytes; the tiny model's vocabulary has whole words further up).
    const int32_t lo = std::min<int32_t>(300, tok_.vocab_size() / 2), span = std::min<int32_t>(200, tok_.vocab_size() - lo);
    return lo + static_cast<int32_t>(h % static_cast<uint64_t>(span));
  }

 private:
  struct Seq {
    llm::Request r;
    int64_t produced = 0;
    std::string text;       // generated text so far
    size_t shown = 0;       // bytes of `text` already sent
    bool cancel = false;
    int64_t first_ms = -1;
    std::chrono::steady_clock::time_point submitted;
  };

  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return (stopping_ && seqs_.empty()) || (!held_ && !seqs_.empty()); });
      if (seqs_.empty() && stopping_) return;
      ++steps_;
      std::vector<llm::Event> out;
      std::vector<std::function<void(const llm::Event&)>> sinks;
      std::vector<uint64_t> finished;
      int64_t running = 0;
      for (uint64_t id : order_) {
        if (running >= o_.slots) break;
        ++running;
        Seq& s = seqs_.at(id);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s.submitted).count();
        llm::Event ev;
        ev.request = id;
        auto finish = [&](const std::string& why) {
          ev.kind = llm::Event::Kind::done;
          ev.finish_reason = why;
          ev.prompt_tokens = static_cast<int64_t>(s.r.prompt.size());
          ev.completion_tokens = s.produced;
          ev.total_ms = ms;
          ev.ttft_ms = static_cast<double>(s.first_ms);
          finished.push_back(id);
        };
        if (s.cancel) {
          finish("cancelled");
        } else if (s.r.timeout_s > 0 && ms > s.r.timeout_s * 1000) {
          finish("timeout");
        } else {
          const int32_t tok = token_at(s.r, s.produced);
          ++s.produced;
          ++generated_;
          if (s.first_ms < 0) s.first_ms = static_cast<int64_t>(ms);
          s.text += tok_.token_to_text(tok);
          // Stop strings: show text up to the stop; hold back a possible stop prefix at the end.
          size_t stop_at = std::string::npos;
          for (const std::string& st : s.r.stop) stop_at = std::min(stop_at, s.text.find(st, s.shown > st.size() ? s.shown - st.size() : 0));
          size_t safe = stop_at == std::string::npos ? s.text.size() : stop_at;
          if (stop_at == std::string::npos)
            for (const std::string& st : s.r.stop)
              for (size_t k = std::min(st.size() - 1, s.text.size()); k > 0; --k)
                if (s.text.compare(s.text.size() - k, k, st, 0, k) == 0) {
                  safe = std::min(safe, s.text.size() - k);
                  break;
                }
          ev.kind = llm::Event::Kind::token;
          ev.token = tok;
          if (safe > s.shown) ev.text = s.text.substr(s.shown, safe - s.shown);
          s.shown = std::max(s.shown, safe);
          if (s.r.logprobs >= 0) {
            ev.logprob = -0.25f;
            for (int64_t k = 0; k < s.r.logprobs; ++k)
              ev.top.push_back({k == 0 ? tok : token_at(s.r, s.produced + 100 + k), -0.25f - static_cast<float>(k)});
          }
          out.push_back(ev);
          sinks.push_back(s.r.on_event);
          const int64_t limit = std::min<int64_t>(s.r.max_tokens, o_.ctx - static_cast<int64_t>(s.r.prompt.size()));
          llm::Event done;
          done.request = id;
          ev = done;
          if (stop_at != std::string::npos) {
            finish("stop");
          } else if (s.produced >= limit) {
            if (s.shown < s.text.size()) ev.text = s.text.substr(s.shown);
            finish("length");
          } else {
            continue;
          }
        }
        out.push_back(ev);
        sinks.push_back(s.r.on_event);
      }
      for (uint64_t id : finished) {
        seqs_.erase(id);
        order_.erase(std::find(order_.begin(), order_.end(), id));
      }
      lock.unlock();
      for (size_t i = 0; i < out.size(); ++i) sinks[i](out[i]);  // outside the lock, as the engine's loop does
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      lock.lock();
    }
  }

  llm::Tokenizer tok_;
  Options o_;
  std::atomic<bool> ready_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Seq> seqs_;
  std::deque<uint64_t> order_;
  uint64_t next_id_ = 0;
  bool held_ = false, stopping_ = false;
  int64_t generated_ = 0, refused_ = 0, steps_ = 0;
  std::atomic<int64_t> cancels_{0};
  std::thread loop_;
};

}  // namespace spore::serve::testing
