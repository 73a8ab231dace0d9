// Continuous batching over pooled KV caches (llm/engine.h, docs/SERVE.md).
//
// Memory: every layer's K and V caches are one pooled tensor [S + 1, Hkv, C, D]; slot s < S holds one running
// sequence's rows, slot S is scratch for embeddings. Plans: one per step size T (bucket_of: powers of two to 16,
// then multiples of 16 up to step_tokens),
// each over the whole pool with a `slots` input (ops::attention_kv's pooled form), compiled at start and run once
// on padding rows (warm-up), so the first request pays no compile and no first-touch page faults of the plans.
// The plans also output every row's final hidden state (StepOptions::with_hidden), which embeddings read: they run
// through the same warmed plans (slot S, no picks read), so a first /v1/embeddings request compiles nothing either.
//
// A step: every running sequence whose prompt is done contributes its last sampled token (decode), then waiting
// prompt tokens fill what is left of the token budget (chunked prefill, oldest sequence first). The step's tokens
// are one batch: one pass over the weights for all of them. Then the new K/V rows go into their slots, and every
// sequence whose pending tokens are all fed samples its next token from its row of the logits.
//
// Why a request's tokens do not depend on the batch: every kernel of the step computes a row from that row alone in
// a fixed order (linear_blockq and attention_kv are batch invariant, docs/LLM.md), padding rows are separate runs
// that read nothing, the sampler draws from (seed, stream, step) only, and the prefix cache holds the exact bytes a
// cold prefill of the same tokens writes.
#include "llm/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "base/error.h"
#include "base/thread_pool.h"
#include "llm/generate.h"
#include "llm/json_constraint.h"
#include "llm/model.h"
#include "ops/backend.h"
#include "runtime/plan.h"
#include "runtime/runtime.h"

namespace spore::llm {

namespace {

using clock_t_ = std::chrono::steady_clock;
double ms_since(clock_t_::time_point a, clock_t_::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

constexpr int64_t kBlock = 16;  // tokens per prefix-cache block

// FNV-1a over the previous block's hash and this block's ids.
uint64_t block_hash(uint64_t prev, const int32_t* ids, int64_t n) {
  uint64_t h = prev ^ 0xcbf29ce484222325ull;
  for (int64_t i = 0; i < n; ++i) {
    auto v = static_cast<uint32_t>(ids[i]);
    for (int b = 0; b < 4; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

int64_t pow2_at_least(int64_t n) {
  int64_t t = 1;
  while (t < n) t *= 2;
  return t;
}

// Step sizes with a plan: powers of two up to 16 (decode steps: one row per sequence), then multiples of 16 (steps
// with a prefill chunk), so a chunk pays at most 15 padding rows: an 83-token step runs as 96 rows, not 128 (a
// quarter less work), for a few more plans compiled at start.
constexpr int64_t kBucketStep = 16;
int64_t bucket_of(int64_t n) { return n <= kBucketStep ? pow2_at_least(n) : (n + kBucketStep - 1) / kBucketStep * kBucketStep; }

std::string gib(int64_t b) { return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1 << 30)); }

}  // namespace

struct Engine::Impl {
  // One request in the engine.
  struct Seq {
    uint64_t id = 0;
    Request r;
    std::vector<int32_t> tokens;  // prompt, then generated
    int64_t n_prompt = 0;
    int64_t fed = 0;  // tokens whose K/V rows are in the slot
    int64_t slot = -1;
    int64_t cached = 0;  // prompt tokens that came from the prefix cache
    bool prompt_cached_in = false;  // the prompt's blocks went into the prefix cache
    bool looked_up = false;         // the prefix cache was asked for this prompt
    std::optional<JsonMatcher> json;  // constrained decoding
    Sampler sampler{SamplerConfig{}};
    StopMatcher stops{{}};
    std::string decoded;
    size_t shown = 0;
    int64_t generated = 0;
    clock_t_::time_point t_submit, t_admit, t_first;
    bool has_first = false;
    std::atomic<bool> cancel{false};
  };

  // KV rows of one block of kBlock prompt tokens, every layer, k and v (and i8 row scales), in cache dtype.
  struct Block {
    uint64_t hash = 0;
    std::vector<int32_t> ids;  // this block's tokens (collision check with the parent hash)
    uint64_t parent = 0;
    std::vector<uint8_t> rows;
    std::list<uint64_t>::iterator lru;
  };

  const Model& m;
  EngineOptions o;
  int64_t S = 0, C = 0, pool = 0, max_t = 0;
  std::vector<Tensor> k, v, ks, vs;  // per layer, pooled
  std::map<int64_t, std::unique_ptr<Plan>> plans;
  int64_t row_bytes = 0;  // bytes of one (head, position) K or V row
  int64_t block_bytes = 0;

  // prefix cache (loop thread only; stats copied under mu)
  std::unordered_map<uint64_t, Block> blocks;
  std::list<uint64_t> lru;  // front = most recent
  int64_t cache_bytes = 0;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Seq>> queue;  // waiting for a slot
  int64_t queued_tokens = 0;
  std::unordered_map<uint64_t, Seq*> live;  // queued and running, for cancel()
  int64_t occupied = 0;                      // slots holding a sequence
  uint64_t next_id = 1;
  bool stopping = false;
  clock_t_::time_point stop_deadline;
  std::deque<std::function<void()>> jobs;  // run between steps (embed)
  EngineStats st;
  double ema_total_ms = 1000;

  std::vector<std::unique_ptr<Seq>> slots;  // loop thread only

  // Constrained decoding: every token's bytes (empty for control tokens, which are never allowed) and the mask
  // walker over them. Built on the first constrained request.
  std::vector<std::string> tok_text;
  std::unique_ptr<JsonTokenMask> token_mask;
  std::vector<float> masked;
  std::vector<int32_t> allowed_ids;

  void build_token_table() {
    if (token_mask) return;
    const Tokenizer& tk = m.tokenizer();
    const int64_t V = m.config().n_vocab;
    tok_text.assign(static_cast<size_t>(V), std::string());
    for (int64_t i = 0; i < V && i < tk.vocab_size(); ++i) {
      const auto id = static_cast<int32_t>(i);
      const TokenType t = tk.token_type(id);
      if (t == TokenType::control || t == TokenType::unknown || t == TokenType::unused) continue;
      tok_text[static_cast<size_t>(i)] = tk.token_to_text(id);
    }
    token_mask = std::make_unique<JsonTokenMask>(tok_text);
  }

  // The logits with every token the constraint refuses at -inf (end-of-generation only where the document is
  // complete). Returns false when no token is allowed.
  bool mask_logits(const Seq& q, const float* row) {
    build_token_table();
    const int64_t V = m.config().n_vocab;
    masked.assign(static_cast<size_t>(V), -INFINITY);
    const JsonMatcher& jm = *q.json;
    bool any = false;
    const auto allow = [&](int32_t id) {
      masked[static_cast<size_t>(id)] = row[id];
      any = true;
    };
    allowed_ids.clear();
    token_mask->accepted(jm, allowed_ids);
    for (int32_t id : allowed_ids) allow(id);
    if (jm.complete()) {
      const Tokenizer& tk = m.tokenizer();
      for (int64_t i = 0; i < V && i < tk.vocab_size(); ++i)
        if (tk.is_eog(static_cast<int32_t>(i))) allow(static_cast<int32_t>(i));
    }
    return any;
  }
  std::atomic<bool> is_ready{false};
  std::exception_ptr start_error;
  std::condition_variable ready_cv;
  double startup = 0;
  std::thread loop_thread;

  Impl(const Model& model, EngineOptions opts) : m(model), o(std::move(opts)) {}

  // ---------------------------------------------------------------------------------------------------------------
  // set-up

  void plan_memory() {
    const ModelConfig& c = m.config();
    S = o.slots;
    SPORE_CHECK(S >= 1 && S <= 256, ErrorCode::invalid_argument, "--parallel must be in 1..256, got {}", S);
    SPORE_CHECK(o.step_tokens >= 1, ErrorCode::invalid_argument, "step tokens must be >= 1, got {}", o.step_tokens);
    SPORE_CHECK(o.max_queue >= 0, ErrorCode::invalid_argument, "--max-queue must be >= 0, got {}", o.max_queue);
    SPORE_CHECK(o.kv_dtype == DType::f32 || o.kv_dtype == DType::f16 || o.kv_dtype == DType::bf16 ||
                    o.kv_dtype == DType::i8,
                ErrorCode::unsupported, "KV cache type {} is not supported (f32, f16, bf16, i8)",
                dtype_name(o.kv_dtype));
    pool = S + 1;
    max_t = bucket_of(std::max<int64_t>(o.step_tokens, S));
    const int64_t per_token = m.kv_bytes_per_token(o.kv_dtype);
    const int64_t weights = m.file_bytes();
    const int64_t acts = max_t * (4 * c.n_embd + 2 * (c.n_head + 2 * c.n_head_kv) * c.head_dim + 3 * c.n_ff) * 4 +
                         2 * std::min<int64_t>(max_t, S) * c.n_vocab * 4 + (64 << 20);
    const int64_t allowed = o.max_memory > 0 ? o.max_memory : available_memory();
    // KV bytes for ctx C: the pool's S + 1 slots, plus the prefix cache (default a quarter of the slots' rows).
    const double prefix_share = o.prefix_cache_bytes < 0 ? 0.25 * static_cast<double>(S) : 0.0;
    const double per_ctx = static_cast<double>(per_token) * (static_cast<double>(pool) + prefix_share);
    C = o.ctx;
    if (C == 0) {
      C = std::min<int64_t>(c.n_ctx_train > 0 ? c.n_ctx_train : 4096, 4096);
      if (allowed > 0) {
        const int64_t fit = static_cast<int64_t>(static_cast<double>(allowed - weights - acts) / per_ctx);
        C = std::min(C, fit >= 256 ? fit / 256 * 256 : fit);
      }
    }
    SPORE_CHECK(C >= 16, ErrorCode::out_of_memory,
                "model '{}' does not fit: weights {} + activations {} leave no room for {} KV slots of 16 tokens "
                "({} bytes per token, {}) in {} allowed; lower --parallel, use --kv-type f16 or i8, or raise "
                "--max-memory",
                m.path(), gib(weights), gib(acts), pool, per_token, dtype_name(o.kv_dtype), gib(allowed));
    o.ctx = C;
    if (o.prefix_cache_bytes < 0) o.prefix_cache_bytes = static_cast<int64_t>(prefix_share * per_token * C);
    const int64_t kv = per_token * C * pool + o.prefix_cache_bytes;
    SPORE_CHECK(allowed <= 0 || weights + acts + kv <= allowed, ErrorCode::out_of_memory,
                "--ctx {} with --parallel {} needs {}: KV {} ({} slots + 1 scratch of {} tokens, {} bytes per token, "
                "{}; prefix cache {}) + weights {} + activations {}; --max-memory allows {}. Lower --ctx or "
                "--parallel, use --kv-type f16 (or i8), or raise --max-memory",
                C, S, gib(weights + acts + kv), gib(kv), S, C, per_token, dtype_name(o.kv_dtype),
                gib(o.prefix_cache_bytes), gib(weights), gib(acts), gib(allowed));
    if (o.max_queued_tokens <= 0) o.max_queued_tokens = S * C;
    const ModelConfig& cf = m.config();
    for (int64_t l = 0; l < cf.n_layer; ++l) {
      k.push_back(Tensor::empty({pool, cf.n_head_kv, C, cf.head_dim}, o.kv_dtype));
      v.push_back(Tensor::empty({pool, cf.n_head_kv, C, cf.head_dim}, o.kv_dtype));
      if (o.kv_dtype == DType::i8) {
        ks.push_back(Tensor::empty({pool, cf.n_head_kv, C}, DType::f32));
        vs.push_back(Tensor::empty({pool, cf.n_head_kv, C}, DType::f32));
      }
    }
    row_bytes = cf.head_dim * static_cast<int64_t>(dtype_size(o.kv_dtype));
    const int64_t scale_bytes = o.kv_dtype == DType::i8 ? 4 : 0;
    block_bytes = 2 * cf.n_layer * cf.n_head_kv * kBlock * (row_bytes + scale_bytes);
    slots.resize(static_cast<size_t>(S));
    st.kv_capacity_tokens = S * C;
    st.prefix_cache_capacity_bytes = o.prefix_cache_bytes;
  }

  Plan& plan_for(int64_t t) {
    auto it = plans.find(t);
    if (it != plans.end()) return *it->second;
    StepOptions so;
    so.tokens = t;
    so.ctx = C;
    so.kv_dtype = o.kv_dtype;
    so.slots = pool;
    so.picks = std::min(t, S);
    so.with_hidden = true;  // embeddings use these plans too (the extra norm of T rows costs next to nothing)
    CompileOptions co;
    co.inference = true;
    co.disabled_passes = o.disabled_passes;
    co.calibrate_threads = false;
    auto p = std::make_unique<Plan>(compile_plan(m.step_graph(so), co));
    {
      std::lock_guard<std::mutex> lk(mu);
      ++st.plans;
    }
    return *plans.emplace(t, std::move(p)).first->second;
  }

  // Runs the plan for T >= tokens.size() rows: the given rows, then padding (slot -1).
  std::vector<Tensor> run_step(int64_t t, const std::vector<int32_t>& tok, const std::vector<int64_t>& pos,
                               const std::vector<int64_t>& slot, const std::vector<int64_t>& picks) {
    Plan& plan = plan_for(t);
    Tensor tt = Tensor::zeros({t}, DType::i64), pt = Tensor::zeros({t}, DType::i64);
    Tensor sl = Tensor::empty({t}, DType::i64);
    for (int64_t i = 0; i < t; ++i) {
      const bool real = i < static_cast<int64_t>(tok.size());
      tt.data<int64_t>()[i] = real ? tok[static_cast<size_t>(i)] : 0;
      pt.data<int64_t>()[i] = real ? pos[static_cast<size_t>(i)] : 0;
      sl.data<int64_t>()[i] = real ? slot[static_cast<size_t>(i)] : -1;
    }
    std::vector<Tensor> in{tt, pt, sl};
    const int64_t np = std::min(t, S);
    Tensor pk = Tensor::zeros({np}, DType::i64);
    for (size_t i = 0; i < picks.size(); ++i) pk.data<int64_t>()[i] = picks[i];
    in.push_back(pk);
    for (size_t l = 0; l < k.size(); ++l) {
      in.push_back(k[l]);
      in.push_back(v[l]);
      if (o.kv_dtype == DType::i8) {
        in.push_back(ks[l]);
        in.push_back(vs[l]);
      }
    }
    return plan.run(in);
  }

  // Stores rows [first, first + n) of the step's new K/V at positions p0.. of slot s.
  void write_rows(const std::vector<Tensor>& out, int64_t s, int64_t first, int64_t n, int64_t p0) {
    const BackendImpl& b = backend_impl(current_backend());
    const ModelConfig& c = m.config();
    for (size_t l = 0; l < k.size(); ++l) {
      for (int which = 0; which < 2; ++which) {
        Tensor cache = (which == 0 ? k : v)[l].slice(0, s, s + 1).view({c.n_head_kv, C, c.head_dim});
        std::optional<Tensor> sc;
        if (o.kv_dtype == DType::i8) sc = (which == 0 ? ks : vs)[l].slice(0, s, s + 1).view({c.n_head_kv, C});
        const Tensor rows = out[1 + 2 * l + static_cast<size_t>(which)].slice(0, first, first + n);
        b.write_kv_rows(cache, sc ? &*sc : nullptr, rows, p0, n);
      }
    }
  }

  void warm_up() {
    const auto t0 = clock_t_::now();
    // The constrained-decoding token table too, so a first JSON-mode request does not pay for it.
    if (o.warm_up && m.has_tokenizer()) build_token_table();
    for (int64_t t = 1; t <= max_t; t = bucket_of(t + 1)) {
      plan_for(t);
      if (o.warm_up) run_step(t, {}, {}, {}, {});
    }
    startup = ms_since(t0, clock_t_::now());
  }

  // ---------------------------------------------------------------------------------------------------------------
  // prefix cache: blocks of kBlock prompt tokens, keyed by the chain hash of every block up to them

  // Copies the rows of positions [p, p + kBlock) of slot s into (to_block) or from a block's bytes.
  void copy_block(int64_t s, int64_t p, uint8_t* bytes, bool to_block) {
    const ModelConfig& c = m.config();
    const int64_t sb = o.kv_dtype == DType::i8 ? 4 : 0;
    uint8_t* at = bytes;
    for (size_t l = 0; l < k.size(); ++l)
      for (int which = 0; which < 2; ++which) {
        auto* base = static_cast<uint8_t*>((which == 0 ? k : v)[l].raw_data());
        auto* sbase = sb ? static_cast<uint8_t*>((which == 0 ? ks : vs)[l].raw_data()) : nullptr;
        for (int64_t h = 0; h < c.n_head_kv; ++h) {
          const int64_t row0 = (s * c.n_head_kv + h) * C + p;
          uint8_t* cache_rows = base + row0 * row_bytes;
          const size_t n = static_cast<size_t>(kBlock * row_bytes);
          to_block ? std::memcpy(at, cache_rows, n) : std::memcpy(cache_rows, at, n);
          at += n;
          if (sbase) {
            uint8_t* sr = sbase + row0 * sb;
            const size_t ns = static_cast<size_t>(kBlock * sb);
            to_block ? std::memcpy(at, sr, ns) : std::memcpy(sr, at, ns);
            at += ns;
          }
        }
      }
  }

  // Fills a new sequence's slot with the longest cached prefix (whole blocks, leaving at least one prompt token to
  // compute: its logits are needed). Returns the tokens reused.
  int64_t prefix_lookup(Seq& q) {
    if (o.prefix_cache_bytes <= 0) return 0;
    const int64_t usable = (q.n_prompt - 1) / kBlock;
    uint64_t h = 0;
    int64_t n = 0;
    for (int64_t b = 0; b < usable; ++b) {
      const int32_t* ids = q.tokens.data() + b * kBlock;
      const uint64_t nh = block_hash(h, ids, kBlock);
      auto it = blocks.find(nh);
      if (it == blocks.end() || it->second.parent != h ||
          !std::equal(ids, ids + kBlock, it->second.ids.begin()))
        break;
      copy_block(q.slot, b * kBlock, it->second.rows.data(), false);
      lru.splice(lru.begin(), lru, it->second.lru);
      h = nh;
      n += kBlock;
    }
    return n;
  }

  void prefix_insert(const Seq& q) {
    if (o.prefix_cache_bytes < block_bytes) return;
    uint64_t h = 0;
    for (int64_t b = 0; b < q.n_prompt / kBlock; ++b) {
      const int32_t* ids = q.tokens.data() + b * kBlock;
      const uint64_t nh = block_hash(h, ids, kBlock);
      auto it = blocks.find(nh);
      if (it != blocks.end()) {
        if (it->second.parent != h || !std::equal(ids, ids + kBlock, it->second.ids.begin())) return;  // collision
        lru.splice(lru.begin(), lru, it->second.lru);
      } else {
        while (cache_bytes + block_bytes > o.prefix_cache_bytes && !lru.empty()) evict();
        Block blk;
        blk.hash = nh;
        blk.parent = h;
        blk.ids.assign(ids, ids + kBlock);
        blk.rows.resize(static_cast<size_t>(block_bytes));
        copy_block(q.slot, b * kBlock, blk.rows.data(), true);
        lru.push_front(nh);
        blk.lru = lru.begin();
        blocks.emplace(nh, std::move(blk));
        cache_bytes += block_bytes;
      }
      h = nh;
    }
  }

  void evict() {
    // The least recently used block. A block whose children are still cached goes too: they can no longer be
    // reached (lookup walks from the first block), and they age out the same way.
    const uint64_t h = lru.back();
    lru.pop_back();
    blocks.erase(h);
    cache_bytes -= block_bytes;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // events

  void emit_token(Seq& q, int32_t id, const float* logits) {
    Event ev;
    ev.kind = Event::Kind::token;
    ev.request = q.id;
    ev.token = id;
    if (q.r.logprobs >= 0) {
      const int64_t V = m.config().n_vocab;
      float mx = -INFINITY;
      for (int64_t i = 0; i < V; ++i) mx = std::max(mx, logits[i]);
      double sum = 0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
      const double lse = static_cast<double>(mx) + std::log(sum);
      ev.logprob = static_cast<float>(static_cast<double>(logits[id]) - lse);
      const auto kk = static_cast<size_t>(std::min<int64_t>(q.r.logprobs, V));
      if (kk > 0) {
        std::vector<int32_t> idx(static_cast<size_t>(V));
        for (int64_t i = 0; i < V; ++i) idx[static_cast<size_t>(i)] = static_cast<int32_t>(i);
        std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(kk), idx.end(),
                          [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
        for (size_t i = 0; i < kk; ++i)
          ev.top.push_back({idx[i], static_cast<float>(static_cast<double>(logits[idx[i]]) - lse)});
      }
    }
    const Tokenizer* tok = m.has_tokenizer() ? &m.tokenizer() : nullptr;
    if (tok) {
      std::vector<int32_t> gen(q.tokens.begin() + q.n_prompt, q.tokens.end());
      q.decoded = tok->decode(gen, /*skip_special=*/true);
      const size_t ok = utf8_complete(q.decoded);
      if (ok > q.shown) {
        ev.text = q.stops.feed(q.decoded.substr(q.shown, ok - q.shown));
        q.shown = ok;
      }
    }
    if (q.r.on_event) q.r.on_event(ev);
  }

  void finish(std::unique_ptr<Seq> q, const std::string& reason, const std::string& error = "") {
    Event ev;
    ev.kind = Event::Kind::done;
    ev.request = q->id;
    ev.finish_reason = reason;
    ev.error = error;
    if (!q->stops.stopped() && reason != "error") {
      if (q->shown < q->decoded.size()) ev.text += q->stops.feed(q->decoded.substr(q->shown));
      if (!q->stops.stopped()) ev.text += q->stops.flush();
    }
    const auto now = clock_t_::now();
    ev.prompt_tokens = q->n_prompt;
    ev.completion_tokens = q->generated;
    ev.cached_tokens = q->cached;
    ev.queue_ms = q->t_admit != clock_t_::time_point{} ? ms_since(q->t_submit, q->t_admit) : ms_since(q->t_submit, now);
    ev.ttft_ms = q->has_first ? ms_since(q->t_submit, q->t_first) : 0;
    ev.total_ms = ms_since(q->t_submit, now);
    {
      std::lock_guard<std::mutex> lk(mu);
      live.erase(q->id);
      if (q->slot >= 0) --occupied;
      ++st.requests_finished;
      st.prompt_tokens += q->n_prompt - q->cached;  // prefilled: the prefix cache's tokens are not
      ema_total_ms = 0.9 * ema_total_ms + 0.1 * ev.total_ms;
    }
    try {
      if (q->r.on_event) q->r.on_event(ev);
    } catch (...) {
      // A listener's failure must not take the loop down.
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // the loop

  // Moves waiting requests into free slots; finishes cancelled / timed-out ones. Loop thread.
  void admit_and_reap() {
    const auto now = clock_t_::now();
    std::vector<std::pair<std::unique_ptr<Seq>, std::string>> ended;
    {
      std::lock_guard<std::mutex> lk(mu);
      const bool past_deadline = stopping && now >= stop_deadline;
      for (auto it = queue.begin(); it != queue.end();) {
        Seq& q = **it;
        const bool timed_out = q.r.timeout_s > 0 && ms_since(q.t_submit, now) > 1e3 * q.r.timeout_s;
        if (q.cancel || timed_out || past_deadline) {
          queued_tokens -= q.n_prompt;
          ended.emplace_back(std::move(*it), timed_out ? "timeout" : "cancelled");
          it = queue.erase(it);
        } else {
          ++it;
        }
      }
      for (auto& sp : slots) {
        if (!sp) continue;
        const bool timed_out = sp->r.timeout_s > 0 && ms_since(sp->t_submit, now) > 1e3 * sp->r.timeout_s;
        if (sp->cancel || timed_out || past_deadline) ended.emplace_back(std::move(sp), timed_out ? "timeout" : "cancelled");
      }
      for (size_t s = 0; s < slots.size() && !queue.empty(); ++s) {
        if (slots[s]) continue;
        std::unique_ptr<Seq> q = std::move(queue.front());
        queue.pop_front();
        queued_tokens -= q->n_prompt;
        q->slot = static_cast<int64_t>(s);
        q->t_admit = now;
        ++occupied;
        slots[s] = std::move(q);
      }
    }
    for (auto& [q, why] : ended) finish(std::move(q), why);
    for (auto& sp : slots)
      if (sp && !sp->looked_up) {
        sp->looked_up = true;
        const int64_t hit = prefix_lookup(*sp);
        sp->cached = hit;
        sp->fed = hit;
        std::lock_guard<std::mutex> lk(mu);
        st.prefix_cache_queries += sp->n_prompt;
        st.prefix_cache_hits += hit;
      }
  }

  bool idle() const {
    for (const auto& sp : slots)
      if (sp) return false;
    return true;
  }

  // A step of `total` rows runs as bucket_of(total) rows. When the rows past the bucket below are fewer than the
  // padding above (an ~80-token prompt chunk with 3 decode tokens: 83 rows would run as 96), the prompt chunks give
  // those rows back from the last one (83 -> 80) and feed them in a later step, which is cheaper than computing
  // the padding: a padded row costs a row's full compute, the rows moved to a decode step cost the same compute
  // there and no weight pass of their own. A chunk never drops to zero, so every prompt still advances each step.
  // Chunk boundaries change no output (prefill in chunks of any size gives the same rows).
  static void trim_to_bucket(std::vector<std::pair<Seq*, int64_t>>& chunks, int64_t& total) {
    if (chunks.empty() || total <= 1) return;
    const int64_t up = bucket_of(total);
    const int64_t down = total <= kBucketStep ? up / 2 : total / kBucketStep * kBucketStep;
    int64_t cut = total - down;
    if (up == total || up - total <= cut) return;
    for (auto it = chunks.rbegin(); it != chunks.rend() && cut > 0; ++it) {
      const int64_t give = std::min(cut, it->second - 1);
      it->second -= give;
      cut -= give;
      total -= give;
    }
  }

  // One step over the running sequences. Returns false when there was nothing to run.
  bool step() {
    std::vector<int32_t> tok;
    std::vector<int64_t> pos, slot, picks;
    struct Part {
      Seq* q;
      int64_t first, n, pick;  // rows [first, first + n); pick: row of the logits, -1 when none
    };
    std::vector<Part> parts;
    auto add = [&](Seq& q, int64_t n) {
      Part p{&q, static_cast<int64_t>(tok.size()), n, -1};
      for (int64_t i = 0; i < n; ++i) {
        tok.push_back(q.tokens[static_cast<size_t>(q.fed + i)]);
        pos.push_back(q.fed + i);
        slot.push_back(q.slot);
      }
      if (q.fed + n == static_cast<int64_t>(q.tokens.size())) {
        p.pick = static_cast<int64_t>(picks.size());
        picks.push_back(p.first + n - 1);
      }
      parts.push_back(p);
    };
    // decode first: one token each
    for (auto& sp : slots)
      if (sp && static_cast<int64_t>(sp->tokens.size()) - sp->fed == 1) add(*sp, 1);
    // then prompt chunks, oldest admission first
    std::vector<Seq*> pre;
    for (auto& sp : slots)
      if (sp && static_cast<int64_t>(sp->tokens.size()) - sp->fed > 1) pre.push_back(sp.get());
    std::sort(pre.begin(), pre.end(), [](const Seq* a, const Seq* b) {
      return a->t_admit != b->t_admit ? a->t_admit < b->t_admit : a->id < b->id;
    });
    std::vector<std::pair<Seq*, int64_t>> chunks;
    int64_t total = static_cast<int64_t>(tok.size());
    for (Seq* q : pre) {
      const int64_t left = o.step_tokens - total;
      if (left <= 0) break;
      chunks.emplace_back(q, std::min(left, static_cast<int64_t>(q->tokens.size()) - q->fed));
      total += chunks.back().second;
    }
    trim_to_bucket(chunks, total);
    for (auto& [q, n] : chunks) add(*q, n);
    if (tok.empty()) return false;
    const int64_t t = bucket_of(static_cast<int64_t>(tok.size()));
    std::vector<Tensor> out;
    try {
      out = run_step(t, tok, pos, slot, picks);
    } catch (const std::exception& e) {
      // A failed step ends the sequences in it (each gets the error), never the engine.
      for (Part& p : parts) {
        auto& sp = slots[static_cast<size_t>(p.q->slot)];
        finish(std::move(sp), "error", e.what());
      }
      return true;
    }
    for (Part& p : parts) write_rows(out, p.q->slot, p.first, p.n, p.q->fed);
    int64_t n_seqs = 0;
    const int64_t V = m.config().n_vocab;
    const float* lg = out[0].data<float>();
    const Tokenizer* tk = m.has_tokenizer() ? &m.tokenizer() : nullptr;
    int64_t new_tokens = 0;
    for (Part& p : parts) {
      Seq& q = *p.q;
      q.fed += p.n;
      ++n_seqs;
      if (!q.prompt_cached_in && q.fed >= q.n_prompt) {
        prefix_insert(q);
        q.prompt_cached_in = true;
      }
      if (p.pick < 0) continue;
      const float* row = lg + p.pick * V;
      const float* dist = row;
      if (q.json) {
        if (!mask_logits(q, row)) {
          finish(std::move(slots[static_cast<size_t>(q.slot)]), "error",
                 "constrained decoding: no token of the vocabulary continues the JSON output");
          continue;
        }
        dist = masked.data();
      }
      const int32_t id = q.sampler.sample(std::span<const float>(dist, static_cast<size_t>(V)), q.tokens);
      q.sampler.accept(id);
      if (!q.has_first) {
        q.has_first = true;
        q.t_first = clock_t_::now();
      }
      const bool eog = tk && tk->is_eog(id);
      auto& sp = slots[static_cast<size_t>(q.slot)];
      if (eog && !q.r.ignore_eos) {
        finish(std::move(sp), "stop");
        continue;
      }
      q.tokens.push_back(id);
      ++q.generated;
      ++new_tokens;
      if (q.json) q.json->feed(tok_text[static_cast<size_t>(id)]);  // allowed by mask_logits, so it continues
      emit_token(q, id, row);
      if (q.stops.stopped() || (q.json && q.json->closed())) finish(std::move(sp), "stop");
      else if (q.generated >= q.r.max_tokens || static_cast<int64_t>(q.tokens.size()) >= C) finish(std::move(sp), "length");
    }
    std::lock_guard<std::mutex> lk(mu);
    ++st.steps;
    st.generation_tokens += new_tokens;
    const int64_t bin = n_seqs <= 1 ? 0 : n_seqs <= 2 ? 1 : n_seqs <= 4 ? 2 : n_seqs <= 8 ? 3 : n_seqs <= 16 ? 4
                        : n_seqs <= 32 ? 5 : 6;
    ++st.batch_hist[static_cast<size_t>(bin)];
    st.batch_sequences += n_seqs;
    return true;
  }

  void update_gauges() {
    std::lock_guard<std::mutex> lk(mu);
    int64_t running = 0, used = 0;
    for (const auto& sp : slots)
      if (sp) {
        ++running;
        used += sp->fed;
      }
    st.running = running;
    st.kv_used_tokens = used;
    st.waiting = static_cast<int64_t>(queue.size());
    st.waiting_tokens = queued_tokens;
    st.prefix_cache_bytes = cache_bytes;
  }

  void loop() {
    try {
      if (o.threads > 0) set_threads(static_cast<int>(o.threads));
      warm_up();
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      start_error = std::current_exception();
      stopping = true;
      ready_cv.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu);
      is_ready = true;
    }
    ready_cv.notify_all();
    for (;;) {
      // jobs (embeddings) between steps
      for (;;) {
        std::function<void()> job;
        {
          std::lock_guard<std::mutex> lk(mu);
          if (jobs.empty()) break;
          job = std::move(jobs.front());
          jobs.pop_front();
        }
        job();
      }
      admit_and_reap();
      update_gauges();
      if (!step()) {
        std::unique_lock<std::mutex> lk(mu);
        if (stopping && queue.empty() && idle() && jobs.empty()) break;
        // Wake for new work, cancellations, jobs, or to check timeouts / the shutdown deadline.
        cv.wait_for(lk, std::chrono::milliseconds(50),
                    [&] { return !queue.empty() || !jobs.empty() || stopping; });
        if (stopping && queue.empty() && idle() && jobs.empty()) break;
      }
    }
    update_gauges();
  }

  std::vector<float> embed_now(std::span<const int32_t> ids) {
    const ModelConfig& c = m.config();
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<double> sum(static_cast<size_t>(c.n_embd), 0.0);
    // Chunks of at most max_t tokens through the scratch slot S: each chunk attends to the rows before it.
    for (int64_t done = 0; done < n;) {
      const int64_t len = std::min(max_t, n - done);
      std::vector<int32_t> tok(ids.begin() + done, ids.begin() + done + len);
      std::vector<int64_t> pos(static_cast<size_t>(len)), slot(static_cast<size_t>(len), S);
      for (int64_t i = 0; i < len; ++i) pos[static_cast<size_t>(i)] = done + i;
      std::vector<Tensor> out = run_step(bucket_of(len), tok, pos, slot, {});
      write_rows(out, S, 0, len, done);
      const float* hs = out.back().data<float>();
      for (int64_t i = 0; i < len; ++i)
        for (int64_t e = 0; e < c.n_embd; ++e) sum[static_cast<size_t>(e)] += hs[i * c.n_embd + e];
      done += len;
    }
    double norm = 0;
    for (double& x : sum) {
      x /= static_cast<double>(n);
      norm += x * x;
    }
    norm = std::sqrt(norm);
    std::vector<float> r(sum.size());
    for (size_t i = 0; i < sum.size(); ++i) r[i] = static_cast<float>(norm > 0 ? sum[i] / norm : 0.0);
    return r;
  }
};

// -------------------------------------------------------------------------------------------------------------------

Engine::Engine(const Model& m, EngineOptions o) : impl_(std::make_unique<Impl>(m, std::move(o))) {
  init();
  impl_->plan_memory();
  impl_->loop_thread = std::thread([this] { impl_->loop(); });
}

Engine::~Engine() {
  try {
    shutdown(0);
  } catch (...) {
  }
}

bool Engine::ready() const { return impl_->is_ready; }

void Engine::wait_ready() {
  std::unique_lock<std::mutex> lk(impl_->mu);
  impl_->ready_cv.wait(lk, [&] { return impl_->is_ready.load() || impl_->start_error; });
  if (impl_->start_error) std::rethrow_exception(impl_->start_error);
}

double Engine::startup_ms() const { return impl_->startup; }

uint64_t Engine::submit(Request r) {
  Impl& I = *impl_;
  const ModelConfig& c = I.m.config();
  const auto n = static_cast<int64_t>(r.prompt.size());
  SPORE_CHECK(n > 0, ErrorCode::invalid_argument, "the prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    SPORE_CHECK(r.prompt[i] >= 0 && r.prompt[i] < c.n_vocab, ErrorCode::invalid_argument,
                "prompt token {} is {}, outside the vocabulary [0, {})", i, r.prompt[i], c.n_vocab);
  SPORE_CHECK(n < I.C, ErrorCode::invalid_argument,
              "the prompt has {} tokens, but the context is {} tokens (it must leave room for at least one more)", n,
              I.C);
  SPORE_CHECK(r.max_tokens >= 1, ErrorCode::invalid_argument, "max_tokens must be >= 1, got {}", r.max_tokens);
  SPORE_CHECK(r.logprobs >= -1 && r.logprobs <= 20, ErrorCode::invalid_argument,
              "top_logprobs must be in 0..20, got {}", r.logprobs);
  SPORE_CHECK(r.timeout_s >= 0, ErrorCode::invalid_argument, "timeout must be >= 0, got {}", r.timeout_s);
  r.sampler.validate();
  auto q = std::make_unique<Impl::Seq>();
  q->n_prompt = n;
  q->tokens = r.prompt;
  q->sampler = Sampler(r.sampler);
  q->stops = StopMatcher(r.stop);
  q->t_submit = clock_t_::now();
  if (r.json) {
    SPORE_CHECK(I.m.has_tokenizer(), ErrorCode::invalid_argument,
                "constrained decoding needs the model's tokenizer, and '{}' has none", I.m.path());
    q->json.emplace(r.json);
  }
  q->r = std::move(r);
  std::lock_guard<std::mutex> lk(I.mu);
  const auto refuse = [&](const std::string& why) {
    ++I.st.requests_refused;
    SPORE_FAIL(ErrorCode::unavailable, "{}", why);
  };
  if (I.stopping) refuse("the server is shutting down");
  if (I.start_error) refuse("the engine failed to start");
  // Requests wait for a slot; a slot that is free now takes one at the next step without counting as queued.
  const int64_t free_slots = I.S - I.occupied;
  if (static_cast<int64_t>(I.queue.size()) >= I.o.max_queue + std::max<int64_t>(free_slots, 0))
    refuse(fmt::format("the queue is full: {} requests are waiting for a slot (--max-queue {})", I.queue.size(),
                       I.o.max_queue));
  if (I.queued_tokens + n > I.o.max_queued_tokens && !I.queue.empty())
    refuse(fmt::format("the queue is full: {} prompt tokens are waiting, {} more would pass --max-queued-tokens {}",
                       I.queued_tokens, n, I.o.max_queued_tokens));
  q->id = I.next_id++;
  const uint64_t id = q->id;
  I.live[id] = q.get();
  I.queued_tokens += n;
  I.queue.push_back(std::move(q));
  I.cv.notify_all();
  return id;
}

void Engine::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  auto it = impl_->live.find(id);
  if (it != impl_->live.end()) it->second->cancel = true;
  impl_->cv.notify_all();
}

void Engine::shutdown(double deadline_s) {
  Impl& I = *impl_;
  {
    std::lock_guard<std::mutex> lk(I.mu);
    if (!I.stopping) {
      I.stopping = true;
      I.stop_deadline = clock_t_::now() + std::chrono::milliseconds(static_cast<int64_t>(1e3 * std::max(0.0, deadline_s)));
    }
    I.cv.notify_all();
  }
  if (I.loop_thread.joinable()) I.loop_thread.join();
}

std::vector<float> Engine::embed(std::span<const int32_t> tokens) {
  Impl& I = *impl_;
  const ModelConfig& c = I.m.config();
  SPORE_CHECK(!tokens.empty(), ErrorCode::invalid_argument, "the input is empty");
  SPORE_CHECK(static_cast<int64_t>(tokens.size()) <= I.C, ErrorCode::invalid_argument,
              "the input has {} tokens, but the context is {} tokens", tokens.size(), I.C);
  for (size_t i = 0; i < tokens.size(); ++i)
    SPORE_CHECK(tokens[i] >= 0 && tokens[i] < c.n_vocab, ErrorCode::invalid_argument,
                "input token {} is {}, outside the vocabulary [0, {})", i, tokens[i], c.n_vocab);
  auto task = std::make_shared<std::packaged_task<std::vector<float>()>>(
      [&I, ids = std::vector<int32_t>(tokens.begin(), tokens.end())] { return I.embed_now(ids); });
  std::future<std::vector<float>> f = task->get_future();
  {
    std::lock_guard<std::mutex> lk(I.mu);
    SPORE_CHECK(!I.stopping, ErrorCode::unavailable, "the server is shutting down");
    I.jobs.push_back([task] { (*task)(); });
    I.cv.notify_all();
  }
  return f.get();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->st;
}

const Model& Engine::model() const { return impl_->m; }
const EngineOptions& Engine::options() const { return impl_->o; }

int64_t Engine::retry_after_s() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  const double waves = 1.0 + static_cast<double>(impl_->queue.size()) / static_cast<double>(impl_->S);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(waves * impl_->ema_total_ms / 1e3)));
}

}  // namespace spore::llm
