// KV cache, sessions with cached step plans, and the generation loop (llm/generate.h).
#include "llm/generate.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include "base/error.h"
#include "ops/backend.h"
#include "runtime/runtime.h"
#include "tensor/storage.h"

namespace spore::llm {

KvCache::KvCache(const ModelConfig& c, int64_t ctx, DType dtype) : ctx_(ctx), dtype_(dtype) {
  SPORE_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::i8,
              ErrorCode::unsupported, "KV cache type {} is not supported (f32, f16, bf16, i8)", dtype_name(dtype));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    // Uninitialized: rows at or past the session's position are never read, and the pages of a large cache stay
    // untouched (not resident) until written.
    k_.push_back(Tensor::empty({c.n_head_kv, ctx, c.head_dim}, dtype));
    v_.push_back(Tensor::empty({c.n_head_kv, ctx, c.head_dim}, dtype));
    if (dtype == DType::i8) {
      k_scale_.push_back(Tensor::empty({c.n_head_kv, ctx}, DType::f32));
      v_scale_.push_back(Tensor::empty({c.n_head_kv, ctx}, DType::f32));
    }
  }
}

void KvCache::reserve(int64_t end) {
  end = std::min(end, ctx_);
  if (end <= resident_) return;
  const int64_t to = std::min(ctx_, std::max(end, resident_ + kPopulateRows));
  const auto populate = [&](Tensor& t) {  // [heads, ctx, row...]: one range per head
    const int64_t heads = t.shape()[0];
    const int64_t row = t.nbytes() / (heads * ctx_);
    auto* base = static_cast<uint8_t*>(t.raw_data());
    for (int64_t h = 0; h < heads; ++h)
      populate_pages(base + (h * ctx_ + resident_) * row, static_cast<size_t>((to - resident_) * row));
  };
  for (auto* ts : {&k_, &v_, &k_scale_, &v_scale_})
    for (Tensor& t : *ts) populate(t);
  resident_ = to;
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (size_t i = 0; i < k_.size(); ++i) b += k_[i].nbytes() + v_[i].nbytes();
  for (size_t i = 0; i < k_scale_.size(); ++i) b += k_scale_[i].nbytes() + v_scale_[i].nbytes();
  return b;
}

void KvCache::write(int64_t layer, const Tensor& k_new, const Tensor& v_new, int64_t p0, int64_t n) {
  // The cache lives in the plans' backend's memory; that backend stores the rows (ops/backend.h).
  const BackendImpl& b = backend_impl(current_backend());
  const auto l = static_cast<size_t>(layer);
  b.write_kv_rows(k_[l], dtype_ == DType::i8 ? &k_scale_[l] : nullptr, k_new, p0, n);
  b.write_kv_rows(v_[l], dtype_ == DType::i8 ? &v_scale_[l] : nullptr, v_new, p0, n);
}

int64_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

namespace {
std::string gib(int64_t b) { return fmt::format("{:.2f} GiB ({} bytes)", static_cast<double>(b) / (1 << 30), b); }
}  // namespace

MemoryBudget plan_memory(const Model& m, SessionOptions& o) {
  const ModelConfig& c = m.config();
  MemoryBudget b;
  // The mapped file is what the weights cost (pages are shared with the page cache but must be resident to run).
  b.weights = m.file_bytes();
  // Activations of the largest prefill step: residual, norms, q/k/v, attention output, gate/up, logits row, plus
  // the attention score rows; a generous upper bound of the plan's arena.
  const int64_t t = std::max<int64_t>(o.max_batch, 1);
  b.activations = t * (4 * c.n_embd + 2 * (c.n_head + 2 * c.n_head_kv) * c.head_dim + 3 * c.n_ff) * 4 +
                  2 * c.n_vocab * 4 + (64 << 20);
  b.allowed = o.max_memory > 0 ? o.max_memory : available_memory();
  const int64_t per_token = m.kv_bytes_per_token(o.kv_dtype);
  if (o.ctx == 0) {
    int64_t fit = b.allowed > 0 ? (b.allowed - b.weights - b.activations) / per_token : c.n_ctx_train;
    int64_t ctx = std::min<int64_t>(fit, c.n_ctx_train > 0 ? c.n_ctx_train : fit);
    if (ctx >= 256) ctx = ctx / 256 * 256;
    SPORE_CHECK(ctx >= 16, ErrorCode::out_of_memory,
                "model '{}' does not fit: weights {} + activations {} leave no room for a KV cache ({} per token, {}) "
                "in {} allowed; raise --max-memory or use --kv-type f16 (or int8)",
                m.path(), gib(b.weights), gib(b.activations), per_token, dtype_name(o.kv_dtype), gib(b.allowed));
    o.ctx = ctx;
  }
  SPORE_CHECK(o.ctx > 0, ErrorCode::invalid_argument, "--ctx must be > 0, got {}", o.ctx);
  b.kv = per_token * o.ctx;
  SPORE_CHECK(b.allowed <= 0 || b.total() <= b.allowed, ErrorCode::out_of_memory,
              "--ctx {} needs {}: KV cache {} ({} per token, {}) + weights {} + activations {}; --max-memory allows {}. "
              "Lower --ctx, use --kv-type f16 (or int8), or raise --max-memory",
              o.ctx, gib(b.total()), gib(b.kv), per_token, dtype_name(o.kv_dtype), gib(b.weights), gib(b.activations),
              gib(b.allowed));
  o.max_batch = std::min(o.max_batch, o.ctx);
  return b;
}

Session::Session(const Model& m, SessionOptions o)
    : m_(m), o_(o), budget_(plan_memory(m, o_)), cache_(m.config(), o_.ctx, o_.kv_dtype) {}

Plan& Session::plan_for(int64_t t, bool all) {
  auto it = plans_.find({t, all});
  if (it != plans_.end()) return *it->second;
  StepOptions so;
  so.tokens = t;
  so.ctx = o_.ctx;
  so.kv_dtype = o_.kv_dtype;
  so.all_logits = all;
  CompileOptions co;
  co.inference = true;
  co.disabled_passes = o_.disabled_passes;
  co.calibrate_threads = false;  // attention_kv's work grows with the cache (CompileOptions::calibrate_threads)
  auto plan = std::make_unique<Plan>(compile_plan(m_.step_graph(so), co));
  return *plans_.emplace(Key{t, all}, std::move(plan)).first->second;
}

int64_t Session::bucket(int64_t n, int64_t pos) const {
  // 1 (decode) or a power of two >= 16; the padding rows come after the real ones, so causality keeps them out of the
  // real rows' results, and their K/V rows are never written to the cache.
  if (n <= 1) return 1;
  int64_t t = 16;
  while (t < n) t *= 2;
  t = std::min(t, o_.max_batch);
  return pos + t > o_.ctx ? n : t;
}

void Session::prepare(int64_t prompt_tokens) {
  for (int64_t pos = pos_, left = prompt_tokens; left > 0;) {
    const int64_t n = std::min(left, o_.max_batch);
    plan_for(bucket(n, pos), false);
    pos += n;
    left -= n;
  }
  plan_for(1, false);
}

void Session::warm_up(std::span<const int32_t> prompt) {
  SPORE_CHECK(!prompt.empty(), ErrorCode::invalid_argument, "warm_up: no tokens");
  const int64_t p0 = pos_;
  std::vector<float> logits;
  feed(prompt, logits);
  const int32_t id = prompt.front();
  if (pos_ < o_.ctx) feed(std::span<const int32_t>(&id, 1), logits);
  pos_ = p0;
}

std::vector<float> Session::feed(std::span<const int32_t> tokens, bool all_logits) {
  std::vector<float> logits;
  feed(tokens, logits, all_logits);
  return logits;
}

void Session::feed(std::span<const int32_t> tokens, std::vector<float>& logits, bool all_logits) {
  logits.clear();
  if (all_logits) {
    feed_steps(tokens, &logits);
  } else {
    const float* lg = feed_steps(tokens, nullptr);
    logits.assign(lg, lg + m_.config().n_vocab);
  }
}

std::span<const float> Session::feed_view(std::span<const int32_t> tokens) {
  return {feed_steps(tokens, nullptr), static_cast<size_t>(m_.config().n_vocab)};
}

const float* Session::feed_steps(std::span<const int32_t> tokens, std::vector<float>* all) {
  const bool all_logits = all != nullptr;
  const ModelConfig& c = m_.config();
  const int64_t n_total = static_cast<int64_t>(tokens.size());
  SPORE_CHECK(n_total > 0, ErrorCode::invalid_argument, "feed: no tokens");
  SPORE_CHECK(pos_ + n_total <= o_.ctx, ErrorCode::invalid_argument,
              "context full: {} tokens held + {} new > ctx {} (raise --ctx)", pos_, n_total, o_.ctx);
  for (int32_t id : tokens)
    SPORE_CHECK(id >= 0 && id < c.n_vocab, ErrorCode::invalid_argument, "token id {} is outside the vocabulary [0, {})", id,
                c.n_vocab);
  const float* last = nullptr;
  int64_t done = 0;
  while (done < n_total) {
    const int64_t n = std::min(n_total - done, o_.max_batch);
    const int64_t t = bucket(n, pos_);
    Plan& plan = plan_for(t, all_logits);
    Tensor tok = Tensor::zeros({t}, DType::i64), pos = Tensor::empty({t}, DType::i64);
    for (int64_t i = 0; i < t; ++i) {
      if (i < n) tok.data<int64_t>()[i] = tokens[static_cast<size_t>(done + i)];
      pos.data<int64_t>()[i] = pos_ + i;
    }
    std::vector<Tensor> in{tok, pos};
    if (!all_logits) {
      Tensor last = Tensor::empty({1}, DType::i64);
      last.data<int64_t>()[0] = n - 1;
      in.push_back(last);
    }
    // The order of Model::step_graph's inputs: per layer k, v (and for i8 their row scales).
    for (int64_t l = 0; l < c.n_layer; ++l) {
      in.push_back(cache_.k(l));
      in.push_back(cache_.v(l));
      if (cache_.dtype() == DType::i8) {
        in.push_back(cache_.k_scale(l));
        in.push_back(cache_.v_scale(l));
      }
    }
    cache_.reserve(pos_ + n);
    std::vector<Tensor> out = plan.run(in);
    for (int64_t l = 0; l < c.n_layer; ++l)
      cache_.write(l, out[1 + 2 * static_cast<size_t>(l)], out[2 + 2 * static_cast<size_t>(l)], pos_, n);
    last_out_ = out[0];
    const float* lg = last_out_.data<float>();
    if (all_logits) all->insert(all->end(), lg, lg + n * c.n_vocab);
    last = all_logits ? lg + (n - 1) * c.n_vocab : lg;
    pos_ += n;
    done += n;
  }
  return last;
}

size_t utf8_complete(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return len > back ? n - back : n;
  }
  return n;
}

GenerateResult generate(Session& s, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const std::function<void(const std::string&)>& on_text,
                        const std::function<void(int32_t, std::span<const float>)>& on_logits) {
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  SPORE_CHECK(!prompt.empty(), ErrorCode::invalid_argument, "generate: empty prompt");
  SPORE_CHECK(o.max_tokens >= 0, ErrorCode::invalid_argument, "max tokens must be >= 0, got {}", o.max_tokens);
  o.sampler.validate();
  const Model& m = s.model();
  const Tokenizer* tok = m.has_tokenizer() ? &m.tokenizer() : nullptr;
  GenerateResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  Sampler sampler(o.sampler);
  StopMatcher stops(o.stop);
  std::vector<int32_t> history = prompt;
  std::string decoded;  // text of r.tokens so far
  size_t shown = 0;     // bytes of `decoded` passed to the stop matcher
  auto emit = [&](const std::string& t) {
    if (t.empty()) return;
    r.text += t;
    if (on_text) on_text(t);
  };

  const auto t0 = clock::now();
  std::span<const float> logits = s.feed_view(prompt);
  const auto t1 = clock::now();
  r.prefill_ms = ms(t1 - t0);
  r.stop_reason = "length";
  clock::time_point t_first = t1;
  for (int64_t i = 0; i < o.max_tokens; ++i) {
    const int32_t id = sampler.sample(logits, history);
    sampler.accept(id);
    if (on_logits) on_logits(id, logits);
    if (i == 0) {
      t_first = clock::now();
      r.ttft_ms = ms(t_first - t0);
    }
    const bool eog = tok && tok->is_eog(id);
    if (eog && !o.ignore_eos) {
      r.stop_reason = "eos";
      break;
    }
    r.tokens.push_back(id);
    history.push_back(id);
    if (tok) {
      decoded = tok->decode(r.tokens, /*skip_special=*/true);
      const size_t ok = utf8_complete(decoded);
      if (ok > shown) {
        emit(stops.feed(decoded.substr(shown, ok - shown)));
        shown = ok;
      }
      if (stops.stopped()) {
        r.stop_reason = "stop";
        break;
      }
    }
    if (i + 1 == o.max_tokens) break;
    if (s.position() + 1 > s.ctx()) {
      r.stop_reason = "ctx";
      break;
    }
    logits = s.feed_view(std::span<const int32_t>(&id, 1));
  }
  if (!stops.stopped()) {
    if (tok && shown < decoded.size()) emit(stops.feed(decoded.substr(shown)));
    if (!stops.stopped()) emit(stops.flush());
  }
  const auto t2 = clock::now();
  r.decode_ms = r.tokens.size() > 1 ? ms(t2 - t_first) : 0;
  r.prefill_tok_s = r.prefill_ms > 0 ? 1e3 * static_cast<double>(r.prompt_tokens) / r.prefill_ms : 0;
  // Decode speed: tokens fed one at a time after the first sampled one.
  const double fed = static_cast<double>(r.tokens.size()) - 1;
  r.decode_tok_s = r.decode_ms > 0 && fed > 0 ? 1e3 * fed / r.decode_ms : 0;
  return r;
}

}  // namespace spore::llm
