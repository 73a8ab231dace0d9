#include "serve/llm_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "llm/tokenizer.h"
#include "serve/errors.h"
#include "serve/json_fields.h"
#include "serve/openai_response.h"

namespace spore::serve {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  const uint64_t n = counter.fetch_add(1);
  return fmt::format("{}-{:08x}{:08x}", prefix, static_cast<uint32_t>(salt ^ (n * 0x9E3779B97F4A7C15ull >> 32)),
                     static_cast<uint32_t>(n));
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Reply json_reply(const json& j) {
  Reply r;
  r.body = dump_json(j);
  return r;
}

[[noreturn]] void refuse_unavailable(const std::string& message, int64_t retry_after_s, const std::string& code) {
  HttpError e;
  e.status = 503;
  e.message = message;
  e.code = code;
  e.retry_after_s = std::max<int64_t>(1, retry_after_s);
  throw RequestError(std::move(e));
}

struct TimedEvent {
  llm::Event ev;
  Clock::time_point at;
};

// Events of one HTTP request's engine requests, pushed on the engine's thread, drained by the request's thread.
class EventQueue {
 public:
  void push(const llm::Event& ev) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      q_.push_back({ev, Clock::now()});
    }
    cv_.notify_one();
  }
  // Waits up to `wait` for an event.
  bool pop(TimedEvent& out, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, wait, [&] { return !q_.empty(); })) return false;
    out = std::move(q_.front());
    q_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TimedEvent> q_;
};

struct Choice {
  uint64_t engine_id = 0;
  size_t prompt = 0;
  bool submitted = false, done = false;
  std::string text;  // everything shown so far (non-streaming: the whole answer)
  std::vector<TokenInfo> tokens;
  llm::Event last;  // the done event
  std::optional<Clock::time_point> last_token_at;
  std::vector<double> itl_s;
};

// One HTTP request's generation: its engine requests (prompts x n), their events, and the bookkeeping both the
// whole-body and the streaming replies share.
class Generation {
 public:
  Generation(LlmBackend& b, Metrics& m, const llm::Tokenizer& tok, std::string model, GenerationRequest req)
      : backend_(b), metrics_(m), tok_(tok), model_(std::move(model)), req_(std::move(req)),
        queue_(std::make_shared<EventQueue>()) {
    meta_.id = new_id(req_.chat ? "chatcmpl" : "cmpl");
    meta_.created = unix_now();
    meta_.model = model_;
  }
  ~Generation() { cancel_running(); }

  const ResponseMeta& meta() const { return meta_; }
  const GenerationRequest& request() const { return req_; }
  size_t size() const { return choices_.size(); }
  Choice& choice(size_t i) { return choices_[i]; }
  int64_t prompt_tokens_total() const { return prompt_tokens_total_; }

  // Submits prompts x n engine requests. On a refusal the ones already running are cancelled and it rethrows.
  void submit(const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::string>& echo_texts,
              int64_t ctx, double timeout_s) {
    uint64_t seed = req_.sampler.seed;
    if (!req_.seed_given) seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    for (size_t p = 0; p < prompts.size(); ++p) {
      prompt_tokens_total_ += static_cast<int64_t>(prompts[p].size());
      for (int64_t k = 0; k < req_.n; ++k) {
        Choice c;
        c.prompt = p;
        if (req_.echo) c.text = echo_texts[p];
        choices_.push_back(std::move(c));
      }
    }
    for (size_t i = 0; i < choices_.size(); ++i) {
      llm::Request r;
      r.prompt = prompts[choices_[i].prompt];
      r.max_tokens = req_.max_tokens >= 0 ? req_.max_tokens : ctx;
      r.sampler = req_.sampler;
      r.sampler.seed = seed;
      r.sampler.stream = i;  // the choices differ, and each is reproducible from the seed
      r.stop = req_.stop;
      r.ignore_eos = req_.ignore_eos;
      r.logprobs = req_.logprobs;
      r.timeout_s = timeout_s;
      r.json = req_.json;
      std::shared_ptr<EventQueue> q = queue_;
      r.on_event = [q](const llm::Event& ev) { q->push(ev); };
      try {
        choices_[i].engine_id = backend_.submit(std::move(r));
      } catch (...) {
        cancel_running();
        throw;
      }
      choices_[i].submitted = true;
      by_engine_id_.emplace_back(choices_[i].engine_id, i);
    }
  }

  // Applies the next event; returns the index of its choice, or -1 on a time-out of `wait`.
  int64_t next_event(TimedEvent& te, std::chrono::milliseconds wait) {
    if (!queue_->pop(te, wait)) return -1;
    const llm::Event& ev = te.ev;
    size_t idx = choices_.size();
    for (const auto& [id, i] : by_engine_id_)
      if (id == ev.request) idx = i;
    if (idx == choices_.size()) return -2;  // not ours (cannot happen: the queue is this request's)
    Choice& c = choices_[idx];
    if (ev.kind == llm::Event::Kind::token) {
      if (c.last_token_at) c.itl_s.push_back(std::chrono::duration<double>(te.at - *c.last_token_at).count());
      c.last_token_at = te.at;
      c.text += ev.text;
      if (req_.logprobs >= 0) c.tokens.push_back(token_info(ev));
    } else {
      c.text += ev.text;
      c.done = true;
      c.last = ev;
      ++done_;
    }
    return static_cast<int64_t>(idx);
  }

  bool all_done() const { return done_ == choices_.size(); }

  TokenInfo token_info(const llm::Event& ev) const {
    TokenInfo t;
    t.id = ev.token;
    t.bytes = token_bytes(ev.token);
    t.logprob = ev.logprob;
    for (const llm::TokenLogprob& a : ev.top) t.top.push_back({token_bytes(a.id), a.logprob});
    return t;
  }

  void cancel_running() {
    for (Choice& c : choices_)
      if (c.submitted && !c.done) {
        backend_.cancel(c.engine_id);
        c.done = true;  // its events, if any still come, go unread
      }
  }

  Usage usage() const {
    Usage u;
    u.prompt_tokens = prompt_tokens_total_;
    std::vector<bool> seen(choices_.size(), false);
    for (const Choice& c : choices_) {
      u.completion_tokens += c.last.completion_tokens;
      if (!seen[c.prompt]) {  // one cached count per prompt (its first choice's)
        seen[c.prompt] = true;
        u.cached_tokens += c.last.cached_tokens;
      }
    }
    return u;
  }

  // The choice's finish reason as OpenAI names it, or an error for endings that are not an answer.
  std::optional<HttpError> failure(const Choice& c) const {
    const std::string& f = c.last.finish_reason;
    if (f == "stop" || f == "length") return std::nullopt;
    HttpError e;
    if (f == "timeout") {
      if (c.last.completion_tokens > 0) return std::nullopt;  // answered in part: finish "length"
      e.status = 503;
      e.code = "timeout";
      e.message = fmt::format("the request timed out after {:.0f} ms before its first token (server busy)",
                              c.last.total_ms);
      e.retry_after_s = std::max<int64_t>(1, backend_.retry_after_s());
    } else if (f == "cancelled") {
      e.status = 503;
      e.code = "cancelled";
      e.message = "the request was cancelled: the server is shutting down";
      e.retry_after_s = 1;
    } else {
      e.status = 500;
      e.message = "generation failed: " + (c.last.error.empty() ? f : c.last.error);
    }
    e.type = error_type_for_status(e.status);
    return e;
  }
  static std::string openai_finish(const Choice& c) {
    return c.last.finish_reason == "timeout" ? "length" : c.last.finish_reason;
  }

  // Per-request metrics and the access-log fields; called once, when the request is over.
  void record(AccessRecord& log) {
    const Labels ml = {{"model", model_}};
    for (const Choice& c : choices_) {
      if (c.last.finish_reason.empty()) {  // cancelled before it ended (the client left): no done event was read
        if (c.submitted) metrics_.add("spore:request_success_total", {{"model", model_}, {"finished_reason", "cancelled"}});
        continue;
      }
      metrics_.add("spore:request_success_total", {{"model", model_}, {"finished_reason", c.last.finish_reason}});
      metrics_.observe("spore:e2e_request_latency_seconds", ml, c.last.total_ms / 1000.0);
      metrics_.observe("spore:request_queue_time_seconds", ml, c.last.queue_ms / 1000.0);
      if (c.last.completion_tokens > 0)
        metrics_.observe("spore:time_to_first_token_seconds", ml, c.last.ttft_ms / 1000.0);
      for (double s : c.itl_s) metrics_.observe("spore:inter_token_latency_seconds", ml, s);
      metrics_.observe("spore:request_prompt_tokens", ml, static_cast<double>(c.last.prompt_tokens));
      metrics_.observe("spore:request_generation_tokens", ml, static_cast<double>(c.last.completion_tokens));
    }
    const Usage u = usage();
    log.id = meta_.id;
    log.model = model_;
    log.prompt_tokens = u.prompt_tokens;
    log.completion_tokens = u.completion_tokens;
    log.cached_tokens = u.cached_tokens;
    for (const Choice& c : choices_) {
      if (c.last.finish_reason.empty()) continue;
      log.queue_ms = std::max(log.queue_ms, c.last.queue_ms);
      if (c.last.completion_tokens > 0 && (log.ttft_ms < 0 || c.last.ttft_ms < log.ttft_ms)) log.ttft_ms = c.last.ttft_ms;
      if (log.finish_reason.empty()) log.finish_reason = c.last.finish_reason;
    }
  }

 private:
  std::string token_bytes(int32_t id) const {
    try {
      return tok_.token_to_text(id);
    } catch (const Error&) {
      return "";
    }
  }

  LlmBackend& backend_;
  Metrics& metrics_;
  const llm::Tokenizer& tok_;
  std::string model_;
  GenerationRequest req_;
  ResponseMeta meta_;
  std::shared_ptr<EventQueue> queue_;
  std::vector<Choice> choices_;
  std::vector<std::pair<uint64_t, size_t>> by_engine_id_;
  size_t done_ = 0;
  int64_t prompt_tokens_total_ = 0;
};

// The streaming reply: turns events into SSE chunks as they arrive.
class GenerationStream final : public ReplyStream {
 public:
  explicit GenerationStream(std::unique_ptr<Generation> g) : g_(std::move(g)) {}

  bool next(std::string& out, const std::function<bool()>& alive) override {
    const GenerationRequest& req = g_->request();
    const bool usage_chunks = req.include_usage;
    if (!started_) {
      started_ = true;
      for (size_t i = 0; i < g_->size(); ++i) {
        if (req.chat) {
          out += sse_data(chat_chunk_json(g_->meta(), static_cast<int64_t>(i),
                                          json{{"role", "assistant"}, {"content", ""}, {"refusal", nullptr}}, nullptr,
                                          "", usage_chunks));
        } else if (req.echo && !g_->choice(i).text.empty()) {
          out += sse_data(completion_chunk_json(g_->meta(), static_cast<int64_t>(i), g_->choice(i).text, nullptr, "",
                                                usage_chunks));
        }
      }
      if (!out.empty()) return true;
    }
    if (finished_) return false;
    while (!g_->all_done()) {
      TimedEvent te;
      const int64_t idx = g_->next_event(te, std::chrono::milliseconds(100));
      if (idx == -1) {
        if (!alive()) {
          g_->cancel_running();
          finished_ = true;
          return false;
        }
        continue;
      }
      if (idx < 0) continue;
      const Choice& c = g_->choice(static_cast<size_t>(idx));
      const llm::Event& ev = te.ev;
      const bool with_lp = req.logprobs >= 0;
      if (ev.kind == llm::Event::Kind::token) {
        if (ev.text.empty() && !with_lp) continue;
        json lp = nullptr;
        if (with_lp) {
          std::vector<TokenInfo> one{c.tokens.back()};
          lp = req.chat ? chat_logprobs_json(one) : completion_logprobs_json(one, offsets_[idx]);
          offsets_[idx] += static_cast<int64_t>(one[0].bytes.size());
        }
        out += sse_data(req.chat ? chat_chunk_json(g_->meta(), idx, json{{"content", ev.text}}, lp, "", usage_chunks)
                                 : completion_chunk_json(g_->meta(), idx, ev.text, lp, "", usage_chunks));
        return true;
      }
      // done
      if (auto err = g_->failure(c)) {
        error_ = *err;
        g_->cancel_running();
        out += sse_data(err->body());
        finished_ = true;
        return false;
      }
      const std::string finish = Generation::openai_finish(c);
      if (!ev.text.empty())
        out += sse_data(req.chat ? chat_chunk_json(g_->meta(), idx, json{{"content", ev.text}}, nullptr, "", usage_chunks)
                                 : completion_chunk_json(g_->meta(), idx, ev.text, nullptr, "", usage_chunks));
      out += sse_data(req.chat ? chat_chunk_json(g_->meta(), idx, json::object(), nullptr, finish, usage_chunks)
                               : completion_chunk_json(g_->meta(), idx, "", nullptr, finish, usage_chunks));
      if (!g_->all_done()) return true;
    }
    if (usage_chunks) out += sse_data(usage_chunk_json(g_->meta(), req.chat, g_->usage()));
    out += sse_done;
    finished_ = true;
    completed_ = true;
    return false;
  }

  void close(bool completed) override {
    if (!completed || !completed_) g_->cancel_running();
    closed_ok_ = completed && completed_;
  }

  void fill_log(AccessRecord& log) override {
    g_->record(log);
    if (error_) log.error = error_->message;
    else if (!closed_ok_) log.error = "client disconnected";
  }

 private:
  std::unique_ptr<Generation> g_;
  bool started_ = false, finished_ = false, completed_ = false, closed_ok_ = false;
  std::optional<HttpError> error_;
  std::map<int64_t, int64_t> offsets_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------------

LlmService::LlmService(LlmServiceOptions o, std::unique_ptr<LlmBackend> backend, Metrics& metrics)
    : o_(std::move(o)), backend_(std::move(backend)), metrics_(metrics) {
  const llm::Tokenizer& tok = backend_->tokenizer();
  if (tok.chat_template().empty() && o_.chat_template.empty()) {
    chat_style_ = llm::detect_chat_style("", "chatml");
    chat_note_ = fmt::format("model '{}' has no chat template: chat requests use chatml (--chat-template overrides)",
                             o_.name);
  } else {
    try {
      chat_style_ = llm::detect_chat_style(tok.chat_template(), o_.chat_template);
    } catch (const Error& e) {
      if (!o_.chat_template.empty()) throw;  // a bad --chat-template is the operator's mistake: fail at start
      chat_note_ = fmt::format("model '{}': {}; /v1/chat/completions answers 400 until the server is started with "
                               "--chat-template", o_.name, e.what());
    }
  }
}

LlmService::~LlmService() = default;

void LlmService::check_ids(const std::vector<int32_t>& ids, const std::string& path) const {
  const int32_t vocab = backend_->tokenizer().vocab_size();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      bad_request(json_path(path, i), fmt::format("token id {} is out of range (vocabulary of {})", ids[i], vocab));
}

std::vector<int32_t> LlmService::prompt_tokens(const PromptInput& p) const {
  if (p.is_tokens) {
    check_ids(p.tokens, p.path);
    return p.tokens;
  }
  // As vLLM and llama-server tokenize prompts: BOS as the model asks, special tokens in the text recognized.
  return backend_->tokenizer().encode(p.text, /*add_special=*/true, /*parse_special=*/true);
}

Reply LlmService::generate(const json& body, bool chat, const std::function<bool()>& client_alive) {
  GenerationRequest req = chat ? parse_chat_request(body, o_.limits) : parse_completion_request(body, o_.limits);
  try {
    req.sampler.validate();
  } catch (const Error& e) {
    bad_request("", e.what());
  }
  const llm::Tokenizer& tok = backend_->tokenizer();
  const int64_t ctx = backend_->ctx();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo_texts;
  if (chat) {
    if (!chat_style_) bad_request("messages", chat_note_, "chat_template_unknown");
    const std::string text = llm::render_chat(*chat_style_, req.messages, /*add_generation_prompt=*/true);
    prompts.push_back(tok.encode(text, /*add_special=*/false, /*parse_special=*/true));
    echo_texts.push_back(text);
  } else {
    for (const PromptInput& p : req.prompts) {
      prompts.push_back(prompt_tokens(p));
      echo_texts.push_back(p.is_tokens ? tok.decode(p.tokens) : p.text);
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string param = chat ? "messages" : (req.prompts[i].path.empty() ? "prompt" : req.prompts[i].path);
    if (prompts[i].empty()) bad_request(param, "the prompt has no tokens");
    if (static_cast<int64_t>(prompts[i].size()) >= ctx) {
      HttpError e;
      e.status = 400;
      e.param = param;
      e.code = "context_length_exceeded";
      e.message = fmt::format("{}: the prompt has {} tokens, the model's context is {} (at least one token must be "
                              "left to generate)", param, prompts[i].size(), ctx);
      throw RequestError(std::move(e));
    }
  }
  if (!backend_->ready()) refuse_unavailable(fmt::format("model '{}' is still loading", o_.name), 1, "model_loading");

  auto g = std::make_unique<Generation>(*backend_, metrics_, tok, o_.name, std::move(req));
  try {
    g->submit(prompts, echo_texts, ctx, o_.timeout_s);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::unavailable) {
      metrics_.add("spore:request_refused_total", {{"model", o_.name}});
      refuse_unavailable(e.message(), backend_->retry_after_s(), "server_overloaded");
    }
    if (e.code() == ErrorCode::invalid_argument) {
      HttpError he;
      he.status = 400;
      he.param = chat ? "messages" : "prompt";
      he.message = e.message();
      if (e.message().find("context") != std::string::npos) he.code = "context_length_exceeded";
      throw RequestError(std::move(he));
    }
    throw;
  }

  if (g->request().stream) {
    Reply r;
    r.content_type = "text/event-stream";
    r.headers.push_back({"Cache-Control", "no-cache"});
    r.headers.push_back({"X-Request-Id", g->meta().id});
    auto stream = std::make_shared<GenerationStream>(std::move(g));
    r.stream = stream;
    return r;
  }

  // A whole-body reply waits for every choice; a client that hangs up meanwhile cancels them (checked at least
  // every 100 ms), so its slot goes to the next request instead of generating an answer nobody reads.
  auto last_check = std::chrono::steady_clock::now();
  while (!g->all_done()) {
    TimedEvent te;
    g->next_event(te, std::chrono::milliseconds(100));
    if (!client_alive || std::chrono::steady_clock::now() - last_check < std::chrono::milliseconds(100)) continue;
    last_check = std::chrono::steady_clock::now();
    if (!client_alive()) {
      g->cancel_running();
      Reply gone;
      gone.status = 499;  // nginx's "client closed request": only the access log and the metrics see it
      g->record(gone.log);
      gone.log.error = "client disconnected";
      return gone;
    }
  }
  Reply r;
  g->record(r.log);
  std::vector<ChoiceResult> results;
  for (size_t i = 0; i < g->size(); ++i) {
    const Choice& c = g->choice(i);
    if (auto err = g->failure(c)) {
      r.log.error = err->message;
      throw RequestError(*err);
    }
    results.push_back({c.text, Generation::openai_finish(c), c.tokens});
  }
  const bool with_lp = g->request().logprobs >= 0;
  const json j = chat ? chat_completion_json(g->meta(), results, g->usage(), with_lp)
                      : completion_json(g->meta(), results, g->usage(), with_lp);
  r.body = dump_json(j);
  r.headers.push_back({"X-Request-Id", g->meta().id});
  return r;
}

Reply LlmService::embeddings(const json& body) {
  EmbeddingRequest req = parse_embedding_request(body);
  if (const json* d = body.contains("dimensions") && !body["dimensions"].is_null() ? &body["dimensions"] : nullptr) {
    const int64_t want = expect_integer(*d, "dimensions", 1, INT32_MAX);
    if (want != backend_->embedding_size())
      bad_request("dimensions", fmt::format("{} is not supported: model '{}' has {}-dimensional embeddings (the "
                                            "server does not truncate them)", want, o_.name, backend_->embedding_size()),
                  "unsupported_parameter");
  }
  if (!backend_->ready()) refuse_unavailable(fmt::format("model '{}' is still loading", o_.name), 1, "model_loading");
  const llm::Tokenizer& tok = backend_->tokenizer();
  const int64_t ctx = backend_->ctx();
  json data = json::array();
  int64_t total = 0;
  for (size_t i = 0; i < req.inputs.size(); ++i) {
    const PromptInput& in = req.inputs[i];
    std::vector<int32_t> ids = in.is_tokens ? in.tokens : tok.encode(in.text, /*add_special=*/true, /*parse_special=*/false);
    if (in.is_tokens) check_ids(ids, in.path);
    if (ids.empty()) bad_request(in.path, "has no tokens");
    if (static_cast<int64_t>(ids.size()) > ctx) {
      HttpError e;
      e.status = 400;
      e.param = in.path;
      e.code = "context_length_exceeded";
      e.message = fmt::format("{}: {} tokens, the model's context is {}", in.path, ids.size(), ctx);
      throw RequestError(std::move(e));
    }
    total += static_cast<int64_t>(ids.size());
    std::vector<float> v;
    try {
      v = backend_->embed(ids);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::unavailable) refuse_unavailable(e.message(), backend_->retry_after_s(), "server_overloaded");
      throw;
    }
    json item = {{"object", "embedding"}, {"index", i}};
    if (req.base64) {
      std::string bytes(v.size() * sizeof(float), '\0');
      std::memcpy(bytes.data(), v.data(), bytes.size());  // x86-64: little-endian, as the format wants
      item["embedding"] = base64_encode(bytes);
    } else {
      item["embedding"] = v;
    }
    data.push_back(std::move(item));
  }
  metrics_.add("spore:embedding_tokens_total", {{"model", o_.name}}, static_cast<double>(total));
  Reply r = json_reply(json{{"object", "list"},
                            {"data", std::move(data)},
                            {"model", o_.name},
                            {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}});
  r.log.model = o_.name;
  r.log.prompt_tokens = total;
  return r;
}

Reply LlmService::tokenize(const json& body) {
  const TokenizeRequest req = parse_tokenize_request(body);
  const llm::Tokenizer& tok = backend_->tokenizer();
  const std::vector<int32_t> ids = tok.encode(req.content, req.add_special, /*parse_special=*/true);
  json tokens = json::array();
  for (int32_t id : ids) {
    if (!req.with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tok.token_to_text(id);
    json p = valid_utf8(piece) == piece ? json(piece) : json::array();
    if (p.is_array())
      for (char c : piece) p.push_back(static_cast<int>(static_cast<unsigned char>(c)));
    tokens.push_back({{"id", id}, {"piece", std::move(p)}});
  }
  Reply r = json_reply(json{{"tokens", std::move(tokens)}});
  r.log.model = o_.name;
  return r;
}

Reply LlmService::detokenize(const json& body) {
  const DetokenizeRequest req = parse_detokenize_request(body);
  check_ids(req.tokens, "tokens");
  Reply r = json_reply(json{{"content", backend_->tokenizer().decode(req.tokens)}});
  r.log.model = o_.name;
  return r;
}

void LlmService::declare_metrics(Metrics& m) {
  const auto lat = Metrics::latency_buckets();
  m.declare("spore:num_requests_running", MetricType::gauge, "Sequences in the engine's batch (decoding or prefilling).");
  m.declare("spore:num_requests_waiting", MetricType::gauge, "Requests queued for a sequence slot.");
  m.declare("spore:num_waiting_prompt_tokens", MetricType::gauge, "Prompt tokens of the queued requests.");
  m.declare("spore:kv_cache_usage_perc", MetricType::gauge, "Fraction of the slots' KV rows in use (0 to 1).");
  m.declare("spore:prefix_cache_usage_bytes", MetricType::gauge, "Bytes of KV rows held by the prefix cache.");
  m.declare("spore:prefix_cache_capacity_bytes", MetricType::gauge, "The prefix cache's byte budget.");
  m.declare("spore:prefix_cache_queries_total", MetricType::counter, "Prompt tokens looked up in the prefix cache.");
  m.declare("spore:prefix_cache_hits_total", MetricType::counter, "Prompt tokens found in the prefix cache.");
  m.declare("spore:prompt_tokens_total", MetricType::counter, "Prompt tokens prefilled (cached ones excluded).");
  m.declare("spore:generation_tokens_total", MetricType::counter, "Tokens generated.");
  m.declare("spore:engine_steps_total", MetricType::counter, "Engine steps (one pass over the weights each).");
  m.declare("spore:engine_requests_refused_total", MetricType::counter, "Requests the engine refused (queue full).");
  m.declare("spore:engine_requests_finished_total", MetricType::counter, "Requests the engine finished.");
  m.declare("spore:batch_size", MetricType::histogram,
            "Sequences advanced per engine step (from the engine's step counts).", {1, 2, 4, 8, 16, 32});
  m.declare("spore:request_success_total", MetricType::counter,
            "Finished generation choices by finish reason (stop, length, timeout, cancelled, error).");
  m.declare("spore:request_refused_total", MetricType::counter, "Generation requests answered 503 (queue full).");
  m.declare("spore:time_to_first_token_seconds", MetricType::histogram, "Time from submit to the first token.", lat);
  m.declare("spore:inter_token_latency_seconds", MetricType::histogram, "Time between consecutive tokens of a request.",
            lat);
  m.declare("spore:e2e_request_latency_seconds", MetricType::histogram, "Time from submit to the last token.", lat);
  m.declare("spore:request_queue_time_seconds", MetricType::histogram, "Time a request waited for a slot.", lat);
  m.declare("spore:request_prompt_tokens", MetricType::histogram, "Prompt tokens per request.", Metrics::token_buckets());
  m.declare("spore:request_generation_tokens", MetricType::histogram, "Generated tokens per request.",
            Metrics::token_buckets());
  m.declare("spore:embedding_tokens_total", MetricType::counter, "Tokens embedded by /v1/embeddings.");
}

void LlmService::register_collector() {
  LlmBackend* b = backend_.get();
  const std::string name = o_.name;
  metrics_.add_collector([b, name](Metrics& m) {
    if (!b->ready()) return;
    const llm::EngineStats s = b->stats();
    const Labels l = {{"model", name}};
    m.set("spore:num_requests_running", l, static_cast<double>(s.running));
    m.set("spore:num_requests_waiting", l, static_cast<double>(s.waiting));
    m.set("spore:num_waiting_prompt_tokens", l, static_cast<double>(s.waiting_tokens));
    m.set("spore:kv_cache_usage_perc", l,
          s.kv_capacity_tokens > 0 ? static_cast<double>(s.kv_used_tokens) / static_cast<double>(s.kv_capacity_tokens) : 0.0);
    m.set("spore:prefix_cache_usage_bytes", l, static_cast<double>(s.prefix_cache_bytes));
    m.set("spore:prefix_cache_capacity_bytes", l, static_cast<double>(s.prefix_cache_capacity_bytes));
    m.set("spore:prefix_cache_queries_total", l, static_cast<double>(s.prefix_cache_queries));
    m.set("spore:prefix_cache_hits_total", l, static_cast<double>(s.prefix_cache_hits));
    m.set("spore:prompt_tokens_total", l, static_cast<double>(s.prompt_tokens));
    m.set("spore:generation_tokens_total", l, static_cast<double>(s.generation_tokens));
    m.set("spore:engine_steps_total", l, static_cast<double>(s.steps));
    m.set("spore:engine_requests_refused_total", l, static_cast<double>(s.requests_refused));
    m.set("spore:engine_requests_finished_total", l, static_cast<double>(s.requests_finished));
    // batch_hist: [1], [2], [3-4], [5-8], [9-16], [17-32], [33+] -> cumulative counts at le 1, 2, 4, 8, 16, 32, +Inf.
    std::vector<int64_t> cum(7, 0);
    int64_t acc = 0;
    for (size_t i = 0; i < cum.size(); ++i) {
      acc += i < s.batch_hist.size() ? s.batch_hist[i] : 0;
      cum[i] = acc;
    }
    m.set_histogram("spore:batch_size", l, cum, static_cast<double>(s.batch_sequences));
  });
}

}  // namespace spore::serve
