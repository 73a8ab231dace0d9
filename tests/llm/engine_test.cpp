// The serving engine (llm/engine.h): continuous batching over pooled KV caches. What it promises and these tests
// check: a request's tokens and logprobs are bit-identical to a single-sequence llm::generate run, whether it runs
// alone or with other requests in the batch, after a prefix-cache hit or a miss, with chunked prefill, with 1 or 2
// threads, for every KV cache type; the queue refuses with Error(unavailable) when full; cancel, timeouts,
// max_tokens, stop strings and embeddings behave as documented.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "base/thread_pool.h"
#include "llm/engine.h"
#include "llm/generate.h"
#include "llm/model.h"
#include "runtime/runtime.h"
#include "test_util.h"
#include "tiny_gguf.h"

namespace spore::llm {
namespace {

namespace fs = std::filesystem;

// Collects one request's events (called on the engine's thread).
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text;
  Event done;
  bool finished = false;
  std::function<void(const Event&)> fn() {
    return [this](const Event& e) {
      std::lock_guard<std::mutex> lk(mu);
      text += e.text;
      if (e.kind == Event::Kind::token) {
        tokens.push_back(e.token);
        logprobs.push_back(e.logprob);
      } else {
        done = e;
        finished = true;
        cv.notify_all();
      }
    };
  }
  void wait() {
    std::unique_lock<std::mutex> lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return finished; })) << "request never finished";
  }
};

class EngineTest : public ::testing::Test {
 protected:
  static std::string model_path(io::GgmlType wtype) {
    const std::string path = (fs::temp_directory_path() /
                              ("spore_engine_test_" + std::to_string(static_cast<int>(wtype)) + "_" +
                               std::to_string(::getpid()) + ".gguf"))
                                 .string();
    if (!fs::exists(path)) {
      tiny::Spec s;
      s.L = 2;
      s.E = 64;
      s.H = 4;
      s.Hkv = 2;
      s.D = 16;
      s.V = 97;
      s.wtype = wtype;
      tiny::write_gguf(s, tiny::make_weights(s, 11), path, true);
    }
    return path;
  }
  void SetUp() override { init(); }
  void TearDown() override { set_threads(0); }
};

std::vector<int32_t> prompt_of(int64_t n, int32_t salt, int64_t vocab = 97) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((i * 31 + salt * 7 + 3) % vocab));
  return p;
}

// The reference: one llm::Session, prompt then one token at a time, the engine's sampler rules.
std::vector<int32_t> reference_tokens(const Model& m, const std::vector<int32_t>& prompt, const Request& r,
                                      DType kv, int64_t ctx) {
  Session s(m, {.ctx = ctx, .kv_dtype = kv});
  GenerateOptions o;
  o.max_tokens = r.max_tokens;
  o.sampler = r.sampler;
  o.ignore_eos = true;
  return generate(s, prompt, o).tokens;
}

Request greedy(std::vector<int32_t> prompt, int64_t n) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.ignore_eos = true;
  r.logprobs = 0;
  return r;
}

TEST_F(EngineTest, AloneEqualsASingleSequenceSessionForEveryCacheType) {
  for (io::GgmlType wt : {io::GgmlType::f32, io::GgmlType::q8_0}) {
    const Model m = Model::load(model_path(wt));
    for (DType kv : {DType::f32, DType::f16, DType::bf16, DType::i8}) {
      SCOPED_TRACE(dtype_name(kv));
      Collector c;
      Engine e(m, {.slots = 2, .ctx = 128, .kv_dtype = kv, .max_memory = 1 << 30, .step_tokens = 16});
      e.wait_ready();
      const auto prompt = prompt_of(37, 1);  // prefilled in chunks of 16
      Request r = greedy(prompt, 12);
      r.on_event = c.fn();
      e.submit(r);
      c.wait();
      EXPECT_EQ(c.done.finish_reason, "length");
      EXPECT_EQ(c.done.prompt_tokens, 37);
      EXPECT_EQ(c.done.completion_tokens, 12);
      EXPECT_EQ(c.tokens, reference_tokens(m, prompt, r, kv, 128));
    }
  }
}

// 16 copies of one prompt (greedy, and sampled with a seed) sent alone, then all at once mixed with other prompts
// of other lengths, through 4 slots with chunked prefill: every copy gives the alone run's tokens and logprobs.
TEST_F(EngineTest, ARequestsTokensDoNotDependOnWhatSharesTheBatch) {
  const Model m = Model::load(model_path(io::GgmlType::q8_0));
  for (bool sampled : {false, true}) {
    SCOPED_TRACE(sampled ? "sampled" : "greedy");
    // The collectors outlive the engine (its destructor finishes every request through them).
    Collector alone;
    std::vector<std::unique_ptr<Collector>> same, other;
    Engine e(m, {.slots = 4, .ctx = 160, .kv_dtype = DType::f16, .max_memory = 1 << 30, .step_tokens = 24,
                 .max_queued_tokens = 100000, .prefix_cache_bytes = 0});
    e.wait_ready();
    Request base = greedy(prompt_of(29, 5), 20);
    if (sampled) {
      base.sampler.temperature = 1.5;
      base.sampler.top_p = 0.9;
      base.sampler.seed = 1234;
    }
    Request r = base;
    r.on_event = alone.fn();
    e.submit(r);
    alone.wait();
    ASSERT_EQ(alone.tokens.size(), 20u);

    for (int i = 0; i < 16; ++i) {
      same.push_back(std::make_unique<Collector>());
      Request q = base;
      q.on_event = same.back()->fn();
      e.submit(q);
      other.push_back(std::make_unique<Collector>());
      Request x = greedy(prompt_of(3 + 11 * i % 50, 100 + i), 5 + i % 7);
      x.on_event = other.back()->fn();
      e.submit(x);
    }
    for (auto& c : same) {
      c->wait();
      EXPECT_EQ(c->tokens, alone.tokens);
      EXPECT_EQ(c->logprobs, alone.logprobs);  // bit for bit
    }
    for (auto& c : other) c->wait();
    const EngineStats st = e.stats();
    int64_t batched = 0;
    for (size_t b = 1; b < st.batch_hist.size(); ++b) batched += st.batch_hist[b];
    EXPECT_GT(batched, 0) << "no step ran more than one sequence: the test did not test batching";
  }
}

TEST_F(EngineTest, APrefixCacheHitGivesTheColdRunsTokens) {
  const Model m = Model::load(model_path(io::GgmlType::q8_0));
  for (DType kv : {DType::f16, DType::i8}) {
    Collector cold, warm, part;
    Engine e(m, {.slots = 2, .ctx = 128, .kv_dtype = kv, .max_memory = 1 << 30, .step_tokens = 32});
    e.wait_ready();
    const auto prompt = prompt_of(50, 9);
    Request r = greedy(prompt, 10);
    r.on_event = cold.fn();
    e.submit(r);
    cold.wait();
    EXPECT_EQ(cold.done.cached_tokens, 0);
    r.on_event = warm.fn();
    e.submit(r);
    warm.wait();
    EXPECT_EQ(warm.done.cached_tokens, 48);  // three blocks of 16; the last prompt token is always computed
    EXPECT_EQ(warm.tokens, cold.tokens);
    EXPECT_EQ(warm.logprobs, cold.logprobs);
    // A prompt that shares only the first block reuses only that one.
    auto p2 = prompt;
    p2[20] = (p2[20] + 1) % 97;
    Request r2 = greedy(p2, 10);
    r2.on_event = part.fn();
    e.submit(r2);
    part.wait();
    EXPECT_EQ(part.done.cached_tokens, 16);
    EXPECT_EQ(part.tokens, reference_tokens(m, p2, r2, kv, 128));
    const EngineStats st = e.stats();
    EXPECT_EQ(st.prefix_cache_hits, 64);
    EXPECT_EQ(st.prefix_cache_queries, 150);
  }
}

TEST_F(EngineTest, OneAndTwoThreadsGiveTheSameTokens) {
  const Model m = Model::load(model_path(io::GgmlType::q8_0));
  std::vector<std::vector<int32_t>> runs;
  for (int threads : {1, 2}) {
    std::vector<std::unique_ptr<Collector>> cs;
    Engine e(m, {.slots = 3, .ctx = 96, .kv_dtype = DType::f16, .max_memory = 1 << 30, .threads = threads});
    e.wait_ready();
    for (int i = 0; i < 3; ++i) {
      cs.push_back(std::make_unique<Collector>());
      Request r = greedy(prompt_of(10 + 7 * i, i), 15);
      r.on_event = cs.back()->fn();
      e.submit(r);
    }
    std::vector<int32_t> all;
    for (auto& c : cs) {
      c->wait();
      all.insert(all.end(), c->tokens.begin(), c->tokens.end());
    }
    runs.push_back(all);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST_F(EngineTest, RefusesWhatDoesNotFitAndEndsRequestsAsAsked) {
  const Model m = Model::load(model_path(io::GgmlType::f32));
  Collector running, q1, q2, full, slow;
  Engine e(m, {.slots = 1, .ctx = 64, .kv_dtype = DType::f32, .max_memory = 1 << 30, .max_queue = 2});
  e.wait_ready();
  std::string err = testing::error_of([&] { e.submit(greedy(prompt_of(64, 1), 4)); });
  EXPECT_NE(err.find("the prompt has 64 tokens, but the context is 64 tokens"), std::string::npos) << err;
  err = testing::error_of([&] { e.submit(greedy({}, 4)); });
  EXPECT_NE(err.find("the prompt is empty"), std::string::npos) << err;
  err = testing::error_of([&] { e.submit(greedy({5, 97}, 4)); });
  EXPECT_NE(err.find("prompt token 1 is 97, outside the vocabulary"), std::string::npos) << err;
  Request bad = greedy({5}, 4);
  bad.sampler.top_p = 0;
  EXPECT_FALSE(testing::error_of([&] { e.submit(bad); }).empty());

  // One slot, a queue of 2: a long request runs, two wait, the fourth is refused as unavailable.
  Request longr = greedy(prompt_of(4, 2), 60);
  longr.on_event = running.fn();
  const uint64_t id = e.submit(longr);
  // Wait until it holds the slot, so the queue holds exactly the next two.
  for (int i = 0; i < 2000 && e.stats().running == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Request a = greedy(prompt_of(4, 3), 2), b = greedy(prompt_of(4, 4), 2);
  a.on_event = q1.fn();
  b.on_event = q2.fn();
  e.submit(a);
  e.submit(b);
  try {
    e.submit(greedy(prompt_of(4, 5), 2));
    ADD_FAILURE() << "a full queue took a request";
  } catch (const Error& x) {
    EXPECT_EQ(x.code(), ErrorCode::unavailable);
    EXPECT_NE(std::string(x.what()).find("--max-queue 2"), std::string::npos) << x.what();
  }
  EXPECT_GE(e.retry_after_s(), 1);
  e.cancel(id);
  running.wait();
  EXPECT_EQ(running.done.finish_reason, "cancelled");
  EXPECT_LT(running.done.completion_tokens, 60);
  q1.wait();
  q2.wait();
  EXPECT_EQ(q1.done.finish_reason, "length");
  EXPECT_EQ(q1.tokens.size(), 2u);
  EXPECT_EQ(e.stats().requests_refused, 1);

  // The context ends a generation: prompt 60 of 64 leaves 4 tokens.
  Request r = greedy(prompt_of(60, 6), 100);
  r.on_event = full.fn();
  e.submit(r);
  full.wait();
  EXPECT_EQ(full.done.finish_reason, "length");
  EXPECT_EQ(full.done.completion_tokens, 4);

  // A timeout ends a request that runs too long.
  Request t = greedy(prompt_of(4, 7), 60);
  t.timeout_s = 1e-6;
  t.on_event = slow.fn();
  e.submit(t);
  slow.wait();
  EXPECT_EQ(slow.done.finish_reason, "timeout");
}

TEST_F(EngineTest, ShutdownFinishesOrCancelsWithinTheDeadlineAndThenRefuses) {
  const Model m = Model::load(model_path(io::GgmlType::f32));
  Collector a, b;
  Engine e(m, {.slots = 1, .ctx = 64, .kv_dtype = DType::f32, .max_memory = 1 << 30});
  e.wait_ready();
  Request r = greedy(prompt_of(4, 1), 3);
  r.on_event = a.fn();
  e.submit(r);
  r.on_event = b.fn();
  e.submit(r);
  e.shutdown(30);  // both finish well within 30 s
  EXPECT_EQ(a.done.finish_reason, "length");
  EXPECT_EQ(b.done.finish_reason, "length");
  try {
    e.submit(greedy(prompt_of(4, 1), 3));
    ADD_FAILURE() << "a stopped engine took a request";
  } catch (const Error& x) {
    EXPECT_EQ(x.code(), ErrorCode::unavailable);
  }
}

// Embeddings: mean of the normed final hidden states, L2-normalized; the same bits alone and while sequences decode,
// and in one chunk or several (an input longer than the largest step plan).
TEST_F(EngineTest, EmbeddingsAreNormalizedAndDoNotDependOnWhatRuns) {
  const Model m = Model::load(model_path(io::GgmlType::q8_0));
  Collector c;
  Engine e(m, {.slots = 2, .ctx = 128, .kv_dtype = DType::f16, .max_memory = 1 << 30, .step_tokens = 8});
  e.wait_ready();
  const int64_t plans = e.stats().plans;
  EXPECT_EQ(plans, 4);  // step sizes 1, 2, 4, 8: compiled at start
  const auto ids = prompt_of(40, 3);  // 5 chunks of the 8-token plans
  const std::vector<float> a = e.embed(ids);
  EXPECT_EQ(e.stats().plans, plans) << "embeddings run on the warmed step plans";
  EXPECT_NE(a, e.embed(prompt_of(13, 3))) << "13 tokens: a chunk of 8, then 5 on the 8-row plan";
  ASSERT_EQ(static_cast<int64_t>(a.size()), m.config().n_embd);
  double n2 = 0;
  for (float x : a) n2 += static_cast<double>(x) * x;
  EXPECT_NEAR(n2, 1.0, 1e-5);
  Request r = greedy(prompt_of(20, 4), 30);
  r.on_event = c.fn();
  e.submit(r);
  const std::vector<float> b = e.embed(ids);
  EXPECT_EQ(a, b);
  c.wait();
  EXPECT_NE(a, e.embed(prompt_of(40, 4)));
}

// The tokenizer path on a real vocabulary: text arrives UTF-8 complete, a stop string ends the request before it and
// is not shown, and the text is what the tokens decode to.
TEST_F(EngineTest, StopStringsAndTextOnARealVocabulary) {
  SPORE_SHARED_DATA_DIR(dir, "gguf-models");
  const Model m = Model::load(dir + "/llama-2-tiny-random.gguf");
  Collector full, cut;
  Engine e(m, {.slots = 2, .ctx = 256, .kv_dtype = DType::f16, .max_memory = 1 << 30});
  e.wait_ready();
  const auto prompt = m.tokenizer().encode("Once upon a time", true);
  Request r = greedy(prompt, 24);
  r.on_event = full.fn();
  e.submit(r);
  full.wait();
  ASSERT_EQ(full.tokens.size(), 24u);
  EXPECT_EQ(full.text, m.tokenizer().decode(full.tokens, true));
  // Stop at a piece of that text: the output ends right before it.
  ASSERT_GT(full.text.size(), 12u);
  const std::string stop = full.text.substr(8, 4);
  Request s = greedy(prompt, 24);
  s.stop = {stop};
  s.on_event = cut.fn();
  e.submit(s);
  cut.wait();
  EXPECT_EQ(cut.done.finish_reason, "stop");
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
}

}  // namespace
}  // namespace spore::llm
