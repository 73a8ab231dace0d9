// Sampling: penalties, then the filters in llama.cpp's default order (top-k, top-p, min-p on the temperature-1
// distribution, each renormalized over what the previous one kept), then temperature and one counter-based draw.
#include "llm/sampling.h"

#include <algorithm>
#include <cmath>

#include <unordered_map>

#include "base/error.h"
#include "base/rng.h"
#include "ops/ops.h"
#include "tensor/storage.h"

namespace spore::llm {

void SamplerConfig::validate() const {
  SPORE_CHECK(std::isfinite(temperature), ErrorCode::invalid_argument, "temperature must be finite, got {}", temperature);
  SPORE_CHECK(top_k >= 0, ErrorCode::invalid_argument, "top_k must be >= 0 (0 = off), got {}", top_k);
  SPORE_CHECK(top_p > 0 && top_p <= 1, ErrorCode::invalid_argument, "top_p must be in (0, 1], got {}", top_p);
  SPORE_CHECK(min_p >= 0 && min_p <= 1, ErrorCode::invalid_argument, "min_p must be in [0, 1], got {}", min_p);
  SPORE_CHECK(repeat_penalty > 0 && std::isfinite(repeat_penalty), ErrorCode::invalid_argument,
              "repeat_penalty must be > 0 (1 = off), got {}", repeat_penalty);
  SPORE_CHECK(std::isfinite(frequency_penalty) && std::isfinite(presence_penalty), ErrorCode::invalid_argument,
              "frequency_penalty and presence_penalty must be finite");
  SPORE_CHECK(penalty_last_n >= -1, ErrorCode::invalid_argument, "penalty_last_n must be >= -1, got {}", penalty_last_n);
}

Sampler::Sampler(SamplerConfig c) : c_(c) { c_.validate(); }

namespace {

bool penalties_on(const SamplerConfig& c) {
  return c.penalty_last_n != 0 && (c.repeat_penalty != 1.0 || c.frequency_penalty != 0.0 || c.presence_penalty != 0.0);
}

// Penalized logits: a copy of `logits` with the history's tokens adjusted.
std::vector<float> penalized(const SamplerConfig& c, std::span<const float> logits, std::span<const int32_t> history) {
  std::vector<float> out(logits.begin(), logits.end());
  if (!penalties_on(c) || history.empty()) return out;
  const size_t n = c.penalty_last_n < 0 ? history.size() : std::min(history.size(), static_cast<size_t>(c.penalty_last_n));
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - n; i < history.size(); ++i) ++counts[history[i]];
  for (const auto& [id, count] : counts) {
    if (id < 0 || static_cast<size_t>(id) >= out.size()) continue;  // e.g. a special id beyond the logits
    float& l = out[static_cast<size_t>(id)];
    l = l > 0 ? static_cast<float>(l / c.repeat_penalty) : static_cast<float>(l * c.repeat_penalty);
    l -= static_cast<float>(count * c.frequency_penalty + c.presence_penalty);
  }
  return out;
}

// Higher logit first; the lower id wins a tie, so the order (and the greedy pick) is a function of the values.
bool before(const Sampler::Candidate& a, const Sampler::Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Index of the largest value, the lowest index among equal ones (0 and -0 are equal); any NaN is an error naming
// its token. argmax (the backend's kernel, over the logits in place) returns the first NaN if there is one.
size_t greedy_pick(std::span<const float> l) {
  const auto n = static_cast<int64_t>(l.size());
  const Tensor logits = Tensor::from_storage(Storage::wrap(const_cast<float*>(l.data()), l.size() * sizeof(float)),
                                             {n}, {1}, 0, DType::f32);
  const auto best = static_cast<size_t>(ops::argmax(logits, 0).item_at(0));
  SPORE_CHECK(!std::isnan(l[best]), ErrorCode::invalid_argument, "sampler: logit of token {} is NaN", best);
  return best;
}

void softmax(std::vector<Sampler::Candidate>& cs, double temperature) {
  if (cs.empty()) return;
  const double mx = cs.front().logit;  // sorted: the first is the largest
  double sum = 0;
  for (auto& c : cs) sum += (c.p = std::exp((static_cast<double>(c.logit) - mx) / temperature));
  for (auto& c : cs) c.p /= sum;
}

}  // namespace

std::vector<Sampler::Candidate> Sampler::candidates(std::span<const float> logits, std::span<const int32_t> history) const {
  SPORE_CHECK(!logits.empty(), ErrorCode::invalid_argument, "sampler: empty logits");
  if (c_.temperature <= 0) {
    // Greedy: one pass over the (penalized) logits, no candidate list (building and copying it for a large
    // vocabulary was a costly part of every decode step). The same pick as the general path: the largest logit,
    // the lower id on a tie.
    std::vector<float> pen;
    std::span<const float> l = logits;
    if (penalties_on(c_) && !history.empty()) l = pen = penalized(c_, logits, history);
    const size_t best = greedy_pick(l);
    return {{static_cast<int32_t>(best), l[best], 1.0}};
  }
  const std::vector<float> l = penalized(c_, logits, history);
  std::vector<Candidate> cs;
  cs.reserve(l.size());
  for (size_t i = 0; i < l.size(); ++i) {
    SPORE_CHECK(!std::isnan(l[i]), ErrorCode::invalid_argument, "sampler: logit of token {} is NaN", i);
    cs.push_back({static_cast<int32_t>(i), l[i], 0.0});
  }
  if (c_.top_k > 0 && static_cast<size_t>(c_.top_k) < cs.size()) {
    std::nth_element(cs.begin(), cs.begin() + c_.top_k, cs.end(), before);
    cs.resize(static_cast<size_t>(c_.top_k));
  }
  // min_p: p >= min_p * p_max  <=>  logit >= max_logit + log(min_p). The best token survives top-p, so the cut is the
  // same before or after it; without top-p it runs before the sort and shrinks it.
  const auto min_p_cut = [&] {
    if (c_.min_p <= 0) return;
    const float mx = std::min_element(cs.begin(), cs.end(), before)->logit;
    const double cut = static_cast<double>(mx) + std::log(c_.min_p);
    std::erase_if(cs, [&](const Candidate& c) { return static_cast<double>(c.logit) < cut; });
  };
  if (c_.top_p >= 1) min_p_cut();
  std::sort(cs.begin(), cs.end(), before);
  if (c_.top_p < 1) {
    softmax(cs, 1.0);
    double cum = 0;
    size_t keep = 0;
    while (keep < cs.size() && cum < c_.top_p) cum += cs[keep++].p;
    cs.resize(std::max<size_t>(keep, 1));
    min_p_cut();
  }
  softmax(cs, c_.temperature);
  return cs;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const std::vector<Candidate> cs = candidates(logits, history);
  if (cs.size() == 1) return cs[0].id;
  const double u = philox_uniform(c_.seed, c_.stream, static_cast<uint64_t>(step_));
  double cum = 0;
  for (const Candidate& c : cs) {
    cum += c.p;
    if (u < cum) return c.id;
  }
  return cs.back().id;  // u within rounding of 1
}

std::string StopMatcher::feed(const std::string& piece) {
  if (stopped_) return {};
  pending_ += piece;
  for (const std::string& s : stops_) {
    if (s.empty()) continue;
    if (const size_t at = pending_.find(s); at != std::string::npos) {
      stopped_ = true;
      std::string out = pending_.substr(0, at);
      pending_.clear();
      return out;
    }
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); k > hold; --k)
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  return out;
}

}  // namespace spore::llm
