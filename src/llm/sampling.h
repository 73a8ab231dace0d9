#pragma once
// Token sampling for generation (docs/LLM.md): penalties, then greedy or temperature + top-k + top-p + min-p, with a
// counter-based random draw. The draw for the i-th generated token of a request is philox_uniform(seed, stream, i), so
// a seed gives the same tokens whatever else runs (threads, other requests in the batch).
//
//   llm::SamplerConfig c;  c.temperature = 0.8;  c.top_p = 0.95;  c.seed = 42;
//   llm::Sampler s(c);
//   int32_t tok = s.sample(logits, history);   // history: prompt + generated ids so far (for the penalties)
//   s.accept(tok);
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace spore::llm {

struct SamplerConfig {
  double temperature = 0.0;  // <= 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  double min_p = 0.0;        // 0: off; keeps tokens with p >= min_p * p_max
  // Penalties over the last `penalty_last_n` tokens of the history (-1: all of it, 0: none), as llama.cpp applies
  // them: repetition divides positive logits and multiplies negative ones; frequency subtracts count * f; presence
  // subtracts p once per token that occurred.
  double repeat_penalty = 1.0;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  int64_t penalty_last_n = 64;
  uint64_t seed = 0;
  uint64_t stream = 0;  // distinguishes requests that share a seed

  // Throws invalid_argument naming the field for values out of range (negative top_k, top_p outside (0, 1], ...).
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(SamplerConfig c);

  // Picks the next token from `logits` (one per vocabulary entry). Deterministic: same config, same number of
  // accepted tokens, same logits and history -> same token.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history = {});
  // Records that a token was emitted (advances the random counter).
  void accept(int32_t token) { ++step_; (void)token; }
  int64_t step() const { return step_; }
  const SamplerConfig& config() const { return c_; }

  // The candidates after penalties and filtering with their probabilities (sorted by probability, descending):
  // what `sample` draws from. For tests and --json reports.
  struct Candidate {
    int32_t id;
    float logit;
    double p;
  };
  std::vector<Candidate> candidates(std::span<const float> logits, std::span<const int32_t> history = {}) const;

 private:
  SamplerConfig c_;
  int64_t step_ = 0;
};

// Stop strings: feed each emitted piece of text; says whether a stop string has appeared, and how much of the text
// is safe to show now (text that could still be the start of a stop string is held back).
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends `piece`; returns the text that can be emitted now. After a stop is found, `stopped()` is true and the
  // returned text ends right before the stop string.
  std::string feed(const std::string& piece);
  // Text held back at the end of generation (no stop string followed).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace spore::llm
