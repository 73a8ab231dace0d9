// Sampler: greedy, penalties (against hand-computed values), filters (against a brute-force reference on small
// vocabularies), the draw's distribution (frequencies vs probabilities), seed determinism, bad configs, stop strings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.h"
#include "llm/sampling.h"

namespace spore::llm {
namespace {

std::vector<float> random_logits(size_t n, uint32_t seed, double scale = 3.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<float> l(n);
  for (float& x : l) x = static_cast<float>(d(rng));
  return l;
}

TEST(Sampler, GreedyIsArgmaxWithTheLowestIdOnTies) {
  SamplerConfig c;  // temperature 0
  Sampler s(c);
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  EXPECT_EQ(s.sample(l), 1);
  const auto logits = random_logits(1000, 3);
  EXPECT_EQ(s.sample(logits), std::max_element(logits.begin(), logits.end()) - logits.begin());
  // top_k = 1 at any temperature is greedy too.
  c.temperature = 5.0;
  c.top_k = 1;
  Sampler k1(c);
  EXPECT_EQ(k1.sample(logits), std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The greedy pick runs in vector passes: against a plain scan on random sizes (tails of every length), with ties
// (the lowest index wins), signed zeros (equal), all -inf, and NaN anywhere (an error naming the token).
TEST(Sampler, GreedyVectorPassesMatchAPlainScan) {
  const auto scan = [](const std::vector<float>& l) {
    size_t best = 0;
    for (size_t i = 0; i < l.size(); ++i)
      if (l[i] > l[best]) best = i;
    return static_cast<int32_t>(best);
  };
  std::mt19937 rng(7);
  for (size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000, 151936}) {
    for (uint32_t seed = 0; seed < 4; ++seed) {
      std::vector<float> l = random_logits(n, seed * 131 + static_cast<uint32_t>(n));
      Sampler g(SamplerConfig{});
      EXPECT_EQ(g.sample(l), scan(l)) << n;
      // A tie of the maximum at two random places: the lower one.
      const size_t a = rng() % n, b = rng() % n;
      const float top = *std::max_element(l.begin(), l.end()) + 1.0f;
      l[a] = top;
      l[b] = top;
      EXPECT_EQ(g.sample(l), static_cast<int32_t>(std::min(a, b))) << n;
    }
    std::vector<float> z(n, -1.0f);
    z[n - 1] = 0.0f;
    z[n / 2] = -0.0f;  // equal to +0: the lower index wins
    EXPECT_EQ(Sampler(SamplerConfig{}).sample(z), static_cast<int32_t>(n / 2)) << n;
    const std::vector<float> ninf(n, -INFINITY);
    EXPECT_EQ(Sampler(SamplerConfig{}).sample(ninf), 0) << n;
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      std::vector<float> bad = random_logits(n, 5);
      bad[at] = NAN;
      try {
        Sampler(SamplerConfig{}).sample(bad);
        ADD_FAILURE() << "no error for NaN at " << at << " of " << n;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("token " + std::to_string(at) + " is NaN"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(Sampler, PenaltiesFollowLlamaCppRules) {
  SamplerConfig c;
  c.temperature = 1.0;
  c.repeat_penalty = 2.0;
  c.frequency_penalty = 0.25;
  c.presence_penalty = 0.5;
  c.penalty_last_n = 3;
  Sampler s(c);
  const std::vector<float> l = {4.0f, -2.0f, 1.0f, 3.0f};
  // The last 3 history tokens: 1, 0, 0 (token 2 is older than the window).
  const std::vector<int32_t> history = {2, 1, 0, 0};
  const auto cs = s.candidates(l, history);
  std::vector<float> got(4);
  for (const auto& cand : cs) got[static_cast<size_t>(cand.id)] = cand.logit;
  EXPECT_FLOAT_EQ(got[0], 4.0f / 2 - 2 * 0.25f - 0.5f);   // positive: divided; seen twice
  EXPECT_FLOAT_EQ(got[1], -2.0f * 2 - 1 * 0.25f - 0.5f);  // negative: multiplied; seen once
  EXPECT_FLOAT_EQ(got[2], 1.0f);                           // outside the window
  EXPECT_FLOAT_EQ(got[3], 3.0f);
  // Greedy with penalties picks the penalized argmax (token 3 now).
  c.temperature = 0;
  EXPECT_EQ(Sampler(c).sample(l, history), 3);
}

// Brute-force reference of the filter chain (llama.cpp's order): sort all, top-k, renormalize, top-p prefix, min-p,
// temperature.
std::vector<std::pair<int32_t, double>> reference(const SamplerConfig& c, const std::vector<float>& l) {
  std::vector<int32_t> ids(l.size());
  for (size_t i = 0; i < l.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  if (c.top_k > 0 && static_cast<size_t>(c.top_k) < ids.size()) ids.resize(static_cast<size_t>(c.top_k));
  const auto probs = [&](double t) {
    std::vector<double> p;
    double sum = 0;
    for (int32_t id : ids) sum += std::exp((double(l[id]) - double(l[ids[0]])) / t);
    for (int32_t id : ids) p.push_back(std::exp((double(l[id]) - double(l[ids[0]])) / t) / sum);
    return p;
  };
  if (c.top_p < 1) {
    const auto p = probs(1.0);
    double cum = 0;
    size_t k = 0;
    while (k < ids.size() && cum < c.top_p) cum += p[k++];
    ids.resize(std::max<size_t>(k, 1));
  }
  if (c.min_p > 0) {
    const auto p = probs(1.0);
    std::vector<int32_t> kept;
    for (size_t i = 0; i < ids.size(); ++i)
      if (p[i] >= c.min_p * p[0] * (1 - 1e-12)) kept.push_back(ids[i]);
    ids = kept;
  }
  const auto p = probs(c.temperature);
  std::vector<std::pair<int32_t, double>> r;
  for (size_t i = 0; i < ids.size(); ++i) r.emplace_back(ids[i], p[i]);
  return r;
}

TEST(Sampler, FiltersMatchABruteForceReference) {
  for (uint32_t seed = 0; seed < 40; ++seed) {
    SamplerConfig c;
    c.temperature = 0.3 + 0.05 * seed;
    c.top_k = seed % 3 == 0 ? 0 : 5 + seed;
    c.top_p = seed % 4 == 1 ? 1.0 : 0.5 + 0.01 * seed;
    c.min_p = seed % 5 == 2 ? 0.0 : 0.002 * seed;
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " T " << c.temperature << " k " << c.top_k << " p " << c.top_p
                                      << " min_p " << c.min_p);
    const auto l = random_logits(200 + seed, seed);
    const auto want = reference(c, l);
    const auto got = Sampler(c).candidates(l);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].id, want[i].first);
      EXPECT_NEAR(got[i].p, want[i].second, 1e-12);
    }
  }
}

TEST(Sampler, DrawsFollowTheProbabilitiesAndASeedRepeats) {
  SamplerConfig c;
  c.temperature = 1.0;
  c.seed = 1234;
  const std::vector<float> l = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  const auto cs = Sampler(c).candidates(l);
  std::vector<double> p(l.size());
  for (const auto& cand : cs) p[static_cast<size_t>(cand.id)] = cand.p;
  Sampler s(c);
  const int n = 40000;
  std::vector<int> counts(l.size());
  std::vector<int32_t> first;
  for (int i = 0; i < n; ++i) {
    const int32_t t = s.sample(l);
    if (i < 100) first.push_back(t);
    ++counts[static_cast<size_t>(t)];
    s.accept(t);
  }
  for (size_t i = 0; i < l.size(); ++i)  // ~4.5 standard deviations
    EXPECT_NEAR(counts[i] / double(n), p[i], 4.5 * std::sqrt(p[i] * (1 - p[i]) / n)) << "token " << i;
  Sampler again(c);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(again.sample(l), first[static_cast<size_t>(i)]) << "step " << i;
    again.accept(first[static_cast<size_t>(i)]);
  }
  c.seed = 1235;  // another seed, another sequence
  Sampler other(c);
  int same = 0;
  for (int i = 0; i < 100; ++i) {
    const int32_t t = other.sample(l);
    same += t == first[static_cast<size_t>(i)];
    other.accept(t);
  }
  EXPECT_LT(same, 90);
}

TEST(Sampler, BadConfigsAndLogitsAreClearErrors) {
  const auto err = [](SamplerConfig c) {
    try {
      Sampler s(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SamplerConfig c;
  c.top_p = 0;
  EXPECT_NE(err(c).find("top_p"), std::string::npos);
  c = {};
  c.top_k = -1;
  EXPECT_NE(err(c).find("top_k"), std::string::npos);
  c = {};
  c.repeat_penalty = 0;
  EXPECT_NE(err(c).find("repeat_penalty"), std::string::npos);
  c = {};
  c.min_p = 2;
  EXPECT_NE(err(c).find("min_p"), std::string::npos);
  Sampler s(SamplerConfig{});
  EXPECT_THROW(s.sample(std::vector<float>{}), Error);
  EXPECT_THROW(s.sample(std::vector<float>{1.0f, std::nanf("")}), Error);
}

TEST(StopMatcher, HoldsBackPossibleStartsAndCutsAtTheStop) {
  StopMatcher m({"</s>", "\n\nUser:"});
  EXPECT_EQ(m.feed("Hello"), "Hello");
  EXPECT_EQ(m.feed(" wor<"), " wor");   // "<" may start "</s>"
  EXPECT_EQ(m.feed("b>"), "<b>");       // it did not
  EXPECT_EQ(m.feed("\n"), "");          // may start "\n\nUser:"
  EXPECT_EQ(m.feed("\nUs"), "");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.feed("er: hi"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.feed("more"), "");
  StopMatcher n({"STOP"});
  EXPECT_EQ(n.feed("abcST"), "abc");
  EXPECT_EQ(n.flush(), "ST");
  StopMatcher o({"xy"});
  EXPECT_EQ(o.feed("axyb"), "a");
  EXPECT_TRUE(o.stopped());
}

}  // namespace
}  // namespace spore::llm
