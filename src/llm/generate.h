#pragma once
// Running a decoder: the KV cache, a Session that feeds tokens through cached plans (one per shape bucket), and the
// generation loop with sampling, stop strings and timing (docs/LLM.md).
//
//   llm::Model m = llm::Model::load(path);
//   llm::Session s(m, {.ctx = 2048, .kv_dtype = DType::f16});
//   auto r = llm::generate(s, m.tokenizer().encode("Hello", true), {.max_tokens = 32}, on_text);
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "llm/model.h"
#include "llm/sampling.h"
#include "runtime/plan.h"

namespace spore::llm {

// [layers] x {k, v} of [kv_heads, ctx, head_dim] in f32, f16 or bf16, or i8 with an f32 scale per (kv head,
// position) row, [layers] x {k, v} of [kv_heads, ctx] (ops/llm_kv_quant.h).
class KvCache {
 public:
  KvCache(const ModelConfig& c, int64_t ctx, DType dtype);
  // Writes rows [0, n) of k_new / v_new f32 [T, Hkv, D] at positions p0.. p0+n-1 of layer l (converted; i8: each row
  // quantized with llm_ops::kv_quantize_row, as attention_kv rounds the new rows).
  void write(int64_t layer, const Tensor& k_new, const Tensor& v_new, int64_t p0, int64_t n);
  // Makes the rows of positions [0, end) resident before they are written (Session::feed calls it): the pages are
  // populated ahead in windows of kPopulateRows positions with one call per head (populate_pages), instead of a
  // page fault every 4 KiB of a head's rows as decoding reaches them (with f32 rows of 64 values, 6 faults per
  // token for a 24-layer, 2-KV-head model). Rows past the window stay untouched.
  void reserve(int64_t end);
  static constexpr int64_t kPopulateRows = 256;
  const Tensor& k(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  const Tensor& v(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }
  // i8 only: the row scales f32 [kv_heads, ctx].
  const Tensor& k_scale(int64_t layer) const { return k_scale_.at(static_cast<size_t>(layer)); }
  const Tensor& v_scale(int64_t layer) const { return v_scale_.at(static_cast<size_t>(layer)); }
  int64_t ctx() const { return ctx_; }
  DType dtype() const { return dtype_; }
  int64_t bytes() const;

 private:
  std::vector<Tensor> k_, v_;
  std::vector<Tensor> k_scale_, v_scale_;  // i8 only
  int64_t ctx_ = 0;
  DType dtype_ = DType::f32;
  int64_t resident_ = 0;  // positions [0, resident_) populated by reserve
};

struct SessionOptions {
  int64_t ctx = 0;         // KV cache length; 0 = what fits in max_memory, at most the model's training context
  DType kv_dtype = DType::f32;  // f32, f16, bf16 or i8 (int8 with per-row scales)
  int64_t max_memory = 0;  // bytes for weights + KV cache + activations; 0 = the machine's available memory
  int64_t max_batch = 512;  // tokens per prefill step (longer prompts run in several steps)
  std::vector<std::string> disabled_passes;  // passes the step plans skip (CompileOptions::disabled_passes)
};

// The memory a session needs, for the refusal message and reports.
struct MemoryBudget {
  int64_t weights = 0, kv = 0, activations = 0, allowed = 0;
  int64_t total() const { return weights + kv + activations; }
};
// Sizes the cache: picks ctx when o.ctx == 0, or checks the given one; throws out_of_memory naming the bytes needed,
// the bytes allowed and the flags to change when it does not fit.
MemoryBudget plan_memory(const Model& m, SessionOptions& o);

class Session {
 public:
  Session(const Model& m, SessionOptions o);
  // Feeds tokens at the current position (in steps of at most max_batch) and returns the logits after the last one.
  // With all_logits the logits of every fed token, row-major [n, V].
  std::vector<float> feed(std::span<const int32_t> tokens, bool all_logits = false);
  // The same, into `logits` (its capacity is reused: a decode loop allocates no 600 KB vector per token, which
  // glibc would map and fault in again after each free).
  void feed(std::span<const int32_t> tokens, std::vector<float>& logits, bool all_logits = false);
  // Feeds tokens and returns the logits after the last one as a view of the step's output: valid until the next
  // feed, warm_up or the session's end. No copy (the decode loop's 600 KB per token copy cost ~70 us).
  std::span<const float> feed_view(std::span<const int32_t> tokens);
  // Compiles the plans a prompt of this many tokens and the decode steps after it will use (warm-up before timing).
  void prepare(int64_t prompt_tokens);
  // Runs the prompt and one decode step, then forgets them (the position goes back; the cache rows written are
  // past it, so never read): the plans' arenas, outputs and scratch get their pages now, as llama-bench's warm-up
  // run does, and the next feed of this length runs in the steady state (without it a first long prefill pays
  // the page faults).
  void warm_up(std::span<const int32_t> prompt);
  int64_t position() const { return pos_; }
  void reset() { pos_ = 0; }
  const KvCache& cache() const { return cache_; }
  const MemoryBudget& memory() const { return budget_; }
  int64_t ctx() const { return cache_.ctx(); }
  int64_t num_plans() const { return static_cast<int64_t>(plans_.size()); }
  const Model& model() const { return m_; }

 private:
  struct Key {
    int64_t t;
    bool all;
    bool operator<(const Key& o) const { return t != o.t ? t < o.t : all < o.all; }
  };
  Plan& plan_for(int64_t t, bool all);
  // Runs the steps of a feed; appends every token's logits to *all when given, and returns the last token's row of
  // last_out_ (the last step's logits output, kept alive for feed_view).
  const float* feed_steps(std::span<const int32_t> tokens, std::vector<float>* all);
  int64_t bucket(int64_t n, int64_t pos) const;
  const Model& m_;
  SessionOptions o_;
  MemoryBudget budget_;
  KvCache cache_;
  int64_t pos_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  Tensor last_out_;  // the last step's logits output (feed_view points into it)
};

struct GenerateOptions {
  int64_t max_tokens = 128;
  SamplerConfig sampler;
  std::vector<std::string> stop;
  bool ignore_eos = false;  // keep going past end-of-generation tokens (benchmarks)
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids
  std::string text;             // generated text (stop string excluded)
  std::string stop_reason;      // "eos", "stop", "length", "ctx"
  int64_t prompt_tokens = 0;
  double ttft_ms = 0, prefill_ms = 0, decode_ms = 0;
  double prefill_tok_s = 0, decode_tok_s = 0;
};

// Prefills `prompt` (after whatever the session already holds) and samples up to max_tokens. on_text receives text
// as it becomes safe to show (UTF-8 complete, not the start of a stop string); on_logits, if set, the logits each
// sampled token was drawn from.
GenerateResult generate(Session& s, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const std::function<void(const std::string&)>& on_text = {},
                        const std::function<void(int32_t, std::span<const float>)>& on_logits = {});

// Length of the longest prefix of s that ends on a UTF-8 character boundary (text safe to show while streaming).
size_t utf8_complete(const std::string& s);

// Bytes of memory the machine can give (MemAvailable), 0 when unknown.
int64_t available_memory();

}  // namespace spore::llm
