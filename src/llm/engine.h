#pragma once
// Serving many generation requests at once (issue 23, docs/SERVE.md): an Engine owns a model's KV memory for a
// fixed number of sequence slots and runs one loop thread that, every step, decodes one token for every running
// sequence and feeds a chunk of a waiting prompt, all in one pass over the weights (continuous batching). Requests
// join and leave between steps.
//
// The promise: a request's tokens (greedy, or sampled with a seed) are bit-identical whatever else runs - alone or
// with other requests in the batch, after a prefix-cache hit or a miss, with 1 or 2 threads. The step kernels are
// batch invariant (docs/LLM.md), every request samples from its own counter-based stream, and the prefix cache
// stores exactly the rows a cold prefill writes.
//
//   llm::Engine e(model, {.slots = 4, .ctx = 2048});
//   e.wait_ready();
//   llm::Request r;  r.prompt = tok.encode("Hello", true);  r.max_tokens = 16;
//   r.on_event = [&](const llm::Event& ev) { ... };        // called on the engine's thread: keep it short
//   uint64_t id = e.submit(std::move(r));                   // throws Error(unavailable) when the queue is full
//
// The engine knows tokens, not HTTP: src/serve turns requests and events into OpenAI / KServe messages.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "llm/sampling.h"

namespace spore::llm {

class Model;
class JsonConstraint;

struct EngineOptions {
  int64_t slots = 4;          // sequences decoded together (`spore serve --parallel`)
  int64_t ctx = 0;            // tokens per sequence, prompt + generated; 0: the model's training context, at most
                              // 4096, lowered to what max_memory allows
  DType kv_dtype = DType::f16;
  int64_t max_memory = 0;     // bytes for weights + every slot's KV rows + the prefix cache + activations; 0: the
                              // machine's available memory. What does not fit is refused at start, naming the flags.
  int64_t step_tokens = 128;  // token budget of one step: the running sequences' decode tokens plus a prefill chunk
  int64_t max_queue = 64;     // requests waiting for a slot (beyond the slots free now); one more is refused with
                              // Error(unavailable); 0: take a request only when a slot is free
  int64_t max_queued_tokens = 0;   // prompt tokens waiting; 0: slots * ctx
  int64_t prefix_cache_bytes = -1;  // KV rows of shared prompt prefixes kept for reuse; -1: a quarter of the slots'
                                    // KV bytes, 0: off
  int64_t threads = 0;        // 0: the runtime's default
  bool warm_up = true;        // compile and run every step shape once before wait_ready() returns
  std::vector<std::string> disabled_passes;
};

struct Event;

struct Request {
  std::vector<int32_t> prompt;   // token ids, BOS included when the model wants one
  int64_t max_tokens = 16;       // cut to what the slot's context leaves (finish "length")
  SamplerConfig sampler;         // seed and stream make sampling reproducible
  std::vector<std::string> stop; // stop strings: generation ends before them (finish "stop")
  bool ignore_eos = false;
  int64_t logprobs = -1;         // -1: none; k >= 0: each token's logprob and the k most likely alternatives
  double timeout_s = 0;          // > 0: cancelled (finish "timeout") when not finished this long after submit
  // Constrained decoding (llm/json_constraint.h): only tokens that keep the output a prefix of a document the
  // constraint accepts are sampled; the request finishes ("stop") when the document closes. Needs a tokenizer.
  std::shared_ptr<const JsonConstraint> json;
  // Called on the engine's thread for every event of this request, last a `done` (always exactly one).
  std::function<void(const Event&)> on_event;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;  // log-softmax of the model's logits (before temperature and filtering), as vLLM reports
};

struct Event {
  enum class Kind { token, done };
  Kind kind = Kind::token;
  uint64_t request = 0;
  // token: the sampled id, the text that became safe to show with it (UTF-8 complete, not a possible start of a
  // stop string; may be empty, and the `done` event may carry held-back text), and, when asked, its logprob and the
  // top alternatives (most likely first).
  int32_t token = -1;
  std::string text;
  float logprob = 0;
  std::vector<TokenLogprob> top;
  // done: why it ended - "stop" (end-of-generation token or stop string), "length" (max_tokens or context),
  // "cancelled" (cancel() or shutdown), "timeout", "error" (then `error` says why).
  std::string finish_reason;
  std::string error;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // cached: prompt tokens from the prefix cache
  double queue_ms = 0, ttft_ms = 0, total_ms = 0;                        // from submit
};

// Counters since start and current gauges, for /metrics. Reading them takes a mutex the loop holds only to copy.
struct EngineStats {
  int64_t running = 0, waiting = 0, waiting_tokens = 0;
  int64_t kv_used_tokens = 0, kv_capacity_tokens = 0;        // slots' rows in use / all slots' rows
  int64_t prefix_cache_bytes = 0, prefix_cache_capacity_bytes = 0;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;   // in prompt tokens looked up / found
  int64_t requests_finished = 0, requests_refused = 0;
  int64_t prompt_tokens = 0, generation_tokens = 0;  // prompt tokens prefilled (prefix-cache hits excluded)
  int64_t steps = 0;
  int64_t plans = 0;  // step plans compiled (all at start: one per step size; a later compile would be a bug)
  // Steps by the number of sequences they advanced: [1], [2], [3-4], [5-8], [9-16], [17-32], [33+].
  std::vector<int64_t> batch_hist = std::vector<int64_t>(7, 0);
  int64_t batch_sequences = 0;  // the sum over steps of the sequences each advanced (the histogram's _sum)
};

class Engine {
 public:
  // Plans memory (throws out_of_memory naming --ctx / --parallel / --max-memory), then starts the loop thread,
  // which compiles and, with warm_up, runs every step shape once.
  Engine(const Model& m, EngineOptions o);
  ~Engine();  // shutdown(0)
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  bool ready() const;      // warm-up done (the server's /health turns 200)
  void wait_ready();       // blocks until ready; rethrows a start-up failure
  double startup_ms() const;

  // Queues a request; returns its id. Throws Error(invalid_argument) for an empty prompt, a prompt that leaves no
  // room to generate in the context ("prompt has N tokens, the context is C") or bad sampler fields, and
  // Error(unavailable) when the queue (requests or tokens) is full or the engine is shutting down.
  uint64_t submit(Request r);
  // Ends a request (finish "cancelled"); unknown or finished ids are ignored.
  void cancel(uint64_t id);
  // Stops taking requests; running and queued ones finish until `deadline_s` has passed, then are cancelled.
  // Returns when the loop has stopped.
  void shutdown(double deadline_s);

  // Mean-pooled final hidden states (after the output norm) of a token sequence, L2-normalized: /v1/embeddings.
  // Runs between steps on the engine's thread; blocks the caller until done.
  std::vector<float> embed(std::span<const int32_t> tokens);

  EngineStats stats() const;
  const Model& model() const;
  const EngineOptions& options() const;  // with ctx and prefix_cache_bytes resolved
  // Retry-After seconds to advise when refusing (an estimate of when a slot frees up).
  int64_t retry_after_s() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spore::llm
