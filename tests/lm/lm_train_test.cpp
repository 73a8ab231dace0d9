// Language-model pretraining (train/lm.h) on a tiny model: a resumed run gives the bits of an uninterrupted one
// (losses and the exported GGUF), 1 and 2 threads and graph and PyNative mode give the same bits, the loss falls on
// tinyshakespeare (../shared/data/text-corpus), bad inputs are errors naming what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "base/thread_pool.h"
#include "io/file_util.h"
#include "io/gguf/gguf.h"
#include "llm/generate.h"
#include "llm/model.h"
#include "runtime/runtime.h"
#include "test_util.h"
#include "train/lm.h"

namespace spore::train {
namespace {
namespace fs = std::filesystem;

// A small text with structure to learn: counting rhymes.
fs::path tiny_text() {
  const fs::path p = testing::temp_dir("lm_train") / "text.txt";
  if (fs::exists(p)) return p;
  std::ofstream f(p);
  const char* names[] = {"one", "two", "three", "four", "five", "six", "seven", "eight"};
  const char* things[] = {"little ducks", "green bottles", "speckled frogs", "black cats"};
  for (int i = 0; i < 300; ++i)
    f << names[i % 8] << " " << things[(i / 8) % 4] << " went out one day, " << names[(i + 1) % 8] << " came back.\n";
  return p;
}

LmOptions tiny_options(const std::string& tag) {
  LmOptions o;
  o.model = {.arch = "llama", .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 48, .ctx = 16};
  o.data = tiny_text().string();
  o.train_tokenizer = true;
  o.vocab = 300;
  o.batch = 4;
  o.steps = 10;
  o.warmup = 2;
  o.accum = 2;
  o.eval_every = 4;
  o.eval_batches = 2;
  o.lr = 3e-3;
  o.seed = 5;
  const fs::path d = testing::temp_dir("lm_train") / tag;
  fs::remove_all(d);
  o.ckpt_dir = (d / "ckpt").string();
  o.out = (d / "model.gguf").string();
  return o;
}

TEST(TrainLm, ResumeGivesTheBitsOfAnUninterruptedRun) {
  init();
  const LmOptions a = tiny_options("uninterrupted");
  const LmReport ra = train_lm(a);
  ASSERT_EQ(ra.steps, 10);
  ASSERT_EQ(ra.step_losses.size(), 10u);
  EXPECT_TRUE(fs::exists(ra.gguf));
  EXPECT_TRUE(fs::exists(ra.svg));
  EXPECT_EQ(fs::path(ra.svg).filename(), "model.loss.svg");

  LmOptions b = tiny_options("resumed");
  b.stop_after = 6;
  const LmReport rb1 = train_lm(b);
  EXPECT_EQ(rb1.steps, 6);
  EXPECT_TRUE(rb1.gguf.empty());  // not finished: no model yet
  b.stop_after = 0;
  int resumes = 0;
  const LmReport rb = train_lm(b, [&](const LmProgress& p) { resumes += p.kind == "resume"; });
  EXPECT_EQ(resumes, 1);
  EXPECT_EQ(rb.start_step, 6);
  EXPECT_EQ(rb.steps, 10);
  EXPECT_EQ(rb.step_losses, ra.step_losses);  // bit for bit, the steps before the interruption included
  EXPECT_EQ(rb.val_loss, ra.val_loss);
  EXPECT_EQ(io::read_file_bytes(rb.gguf), io::read_file_bytes(ra.gguf));

  // A finished run resumed again does no step and writes the same model.
  const LmReport again = train_lm(b);
  EXPECT_EQ(again.start_step, 10);
  EXPECT_EQ(io::read_file_bytes(again.gguf), io::read_file_bytes(ra.gguf));

  // The exported model runs in llm::Model with the trained tokenizer.
  const llm::Model m = llm::Model::load(ra.gguf);
  ASSERT_TRUE(m.has_tokenizer());
  const auto ids = m.tokenizer().encode("three little ducks went out");
  EXPECT_EQ(m.tokenizer().decode(ids), "three little ducks went out");
  llm::Session s(m, {.ctx = 16});
  EXPECT_EQ(static_cast<int64_t>(s.feed(ids).size()), m.config().n_vocab);
}

TEST(TrainLm, SameBitsOnOneAndTwoThreadsAndInBothModes) {
  init();
  const int saved = num_threads();
  set_threads(1);
  LmOptions o = tiny_options("t1");
  o.steps = 4;
  o.eval_every = 0;
  const LmReport r1 = train_lm(o);
  set_threads(2);
  o = tiny_options("t2");
  o.steps = 4;
  o.eval_every = 0;
  const LmReport r2 = train_lm(o);
  o = tiny_options("pynative");
  o.steps = 4;
  o.eval_every = 0;
  o.mode = "pynative";
  const LmReport rp = train_lm(o);
  set_threads(saved);
  EXPECT_EQ(r1.step_losses, r2.step_losses);
  EXPECT_EQ(io::read_file_bytes(r1.gguf), io::read_file_bytes(r2.gguf));
  EXPECT_EQ(r1.step_losses, rp.step_losses);
  EXPECT_EQ(io::read_file_bytes(r1.gguf), io::read_file_bytes(rp.gguf));
}

// --tokenizer GGUF (here the one an earlier run trained) and a Qwen2 model (q/k/v biases, tied embeddings): the
// exported GGUF carries that tokenizer's vocabulary and merges, and llm::Model runs it.
TEST(TrainLm, GgufTokenizerAndQwen2) {
  init();
  LmOptions a = tiny_options("tok_source");
  a.steps = 3;
  a.eval_every = 0;
  train_lm(a);
  LmOptions o = tiny_options("qwen2");
  o.train_tokenizer = false;
  o.tokenizer = (fs::path(a.ckpt_dir) / "tokenizer.gguf").string();
  o.model.arch = "qwen2";
  o.model.tie_embeddings = true;
  o.steps = 8;
  o.eval_every = 0;
  o.lr = 1e-2;
  o.val_data = o.data;  // --val-data: all of --data trains, the other file validates
  const LmReport r = train_lm(o);
  EXPECT_EQ(r.vocab, 300);
  EXPECT_EQ(r.val_tokens, r.train_tokens);
  EXPECT_LT(r.step_losses.back(), r.step_losses.front());
  const llm::Model m = llm::Model::load(r.gguf);
  EXPECT_EQ(m.config().arch, "qwen2");
  EXPECT_TRUE(m.config().tied_embeddings);
  EXPECT_TRUE(m.config().qkv_bias);
  const io::GgufFile src = io::GgufFile::open(o.tokenizer), out = io::GgufFile::open(r.gguf);
  EXPECT_EQ(out.get_strings("tokenizer.ggml.tokens"), src.get_strings("tokenizer.ggml.tokens"));
  EXPECT_EQ(out.get_strings("tokenizer.ggml.merges"), src.get_strings("tokenizer.ggml.merges"));
  const std::string text = "five black cats went out one day";
  EXPECT_EQ(m.tokenizer().encode(text), llm::Tokenizer::from_gguf(src).encode(text));
  o.tokenizer = "/nonexistent/tok.gguf";
  EXPECT_NE(testing::error_of([&] { train_lm(o); }).find("does not exist"), std::string::npos);
}

// Mixed precision (O2 bf16: everything but norms, softmax, reductions and the loss in bf16, f32 master weights):
// the losses follow f32's closely, and graph and PyNative mode still agree bit for bit.
TEST(TrainLm, MixedPrecisionO2) {
  init();
  LmOptions o = tiny_options("amp_f32");
  o.steps = 6;
  o.eval_every = 0;
  const LmReport f32 = train_lm(o);
  o = tiny_options("amp_graph");
  o.steps = 6;
  o.eval_every = 0;
  o.amp_level = "O2";
  const LmReport graph = train_lm(o);
  o = tiny_options("amp_pynative");
  o.steps = 6;
  o.eval_every = 0;
  o.amp_level = "O2";
  o.mode = "pynative";
  const LmReport py = train_lm(o);
  EXPECT_EQ(graph.step_losses, py.step_losses);
  EXPECT_NE(graph.step_losses, f32.step_losses);  // bf16 did run
  for (size_t i = 0; i < f32.step_losses.size(); ++i)
    EXPECT_NEAR(graph.step_losses[i], f32.step_losses[i], 0.05) << "step " << i + 1;
  EXPECT_NEAR(graph.val_loss, f32.val_loss, 0.05);
}

TEST(TrainLm, LossFallsOnTinyShakespeare) {
  SPORE_SHARED_DATA_DIR(dir, "text-corpus");
  init();
  const std::string full = io::read_file_bytes((fs::path(dir) / "tinyshakespeare.txt").string());
  ASSERT_GT(full.size(), 300000u);
  const fs::path part = testing::temp_dir("lm_train") / "shakespeare_300k.txt";
  std::ofstream(part, std::ios::binary) << full.substr(0, 300000);
  LmOptions o = tiny_options("shakespeare");
  o.data = part.string();
  o.model = {.arch = "llama", .dim = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 128, .ctx = 32};
  o.vocab = 384;
  o.batch = 8;
  o.accum = 1;
  o.steps = 40;
  o.warmup = 4;
  o.eval_every = 20;
  o.eval_batches = 4;
  o.lr = 5e-3;
  std::vector<double> val;
  const LmReport r = train_lm(o, [&](const LmProgress& p) {
    if (p.kind == "eval") val.push_back(p.val_loss);
  });
  ASSERT_EQ(val.size(), 2u);
  const double first = r.step_losses.front();
  EXPECT_NEAR(first, std::log(384.0), 0.3);  // starts near uniform
  EXPECT_LT(val.back(), val.front());
  EXPECT_LT(val.back(), first - 1.0);
  std::printf("[tinyshakespeare] step 1 loss %.3f, val loss %.3f -> %.3f (ppl %.1f), %.0f tok/s\n", first, val.front(),
              val.back(), std::exp(val.back()), r.tokens_per_s);
}

TEST(TrainLm, BadInputsAreErrors) {
  init();
  LmOptions o = tiny_options("errors");
  o.data = "/nonexistent/text.txt";
  EXPECT_NE(testing::error_of([&] { train_lm(o); }).find("'/nonexistent/text.txt' does not exist"), std::string::npos);
  o = tiny_options("errors");
  o.model.ctx = 100000;
  EXPECT_NE(testing::error_of([&] { train_lm(o); }).find("too few for windows"), std::string::npos);
  o = tiny_options("errors");
  o.vocab = 10;
  EXPECT_NE(testing::error_of([&] { train_lm(o); }).find("at least 257"), std::string::npos);
  o = tiny_options("errors");
  o.warmup = 20;
  EXPECT_NE(testing::error_of([&] { train_lm(o); }).find("warmup < steps"), std::string::npos);
  // A checkpoint directory of another run is refused, not silently mixed.
  o = tiny_options("other_run");
  o.steps = 3;
  o.eval_every = 0;
  train_lm(o);
  o.model.dim = 48;
  o.model.ffn = 64;
  EXPECT_NE(testing::error_of([&] { train_lm(o); }).find("written by another run"), std::string::npos);
}

}  // namespace
}  // namespace spore::train
