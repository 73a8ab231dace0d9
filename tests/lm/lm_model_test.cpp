// The trainable decoder (nn/llama.h) against the inference decoder (llm/model.h) on the GGUF export_llama_gguf
// writes: Llama (normal rope, GQA, untied) and Qwen2 (neox rope, q/k/v biases, tied embeddings), random non-zero
// weights. Logits of every position must agree within f32 tolerance: |a - b| <= 1e-4 + 1e-4 |b| (the two run
// different kernels: linear/attention vs linear_blockq/attention_kv, so sums round differently).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "io/gguf/gguf.h"
#include "io/gguf/gguf_writer.h"
#include "llm/bpe_train.h"
#include "llm/generate.h"
#include "llm/model.h"
#include "nn/init.h"
#include "nn/llama.h"
#include "runtime/runtime.h"
#include "test_util.h"
#include "train/lm.h"

namespace spore {
namespace {

// Replaces every parameter with normal(0, std) values (norms around 1), so logits are far from flat.
void randomize(nn::LlamaModel& m, uint32_t seed) {
  std::mt19937 g(seed);
  for (auto& [name, t] : m.parameters_and_names()) {
    const bool norm = name.find("norm") != std::string::npos;
    std::normal_distribution<double> n(norm ? 1.0 : 0.0, norm ? 0.1 : 0.3);
    std::vector<double> v(static_cast<size_t>(t->numel()));
    for (double& x : v) x = n(g);
    *t = Tensor::from_doubles(v, t->shape(), DType::f32);
  }
}

std::string tokenizer_gguf(const std::string& path) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  const llm::BpeVocab v = llm::train_bpe(text, 300);
  io::GgufWriter w;
  w.add_string("general.architecture", "tokenizer");
  llm::add_tokenizer_metadata(w, v);
  w.write(path);
  return path;
}

void check_same_logits(const nn::LlamaConfig& c, uint32_t seed) {
  init();
  const auto dir = testing::temp_dir("lm_model");
  const io::GgufFile tok = io::GgufFile::open(tokenizer_gguf((dir / "tok.gguf").string()));
  nn::set_seed(seed);
  nn::LlamaModel net(c);
  randomize(net, seed);
  const std::string path = (dir / (c.arch + ".gguf")).string();
  train::export_llama_gguf(net, &tok, path);
  const llm::Model lm = llm::Model::load(path);
  EXPECT_EQ(lm.config().arch, c.arch);
  EXPECT_EQ(lm.config().n_vocab, c.vocab);
  EXPECT_EQ(lm.config().tied_embeddings, c.tie_embeddings);
  EXPECT_EQ(lm.config().qkv_bias, c.qkv_bias());
  ASSERT_TRUE(lm.has_tokenizer());

  const int64_t B = 2, T = c.ctx;
  std::mt19937 g(seed + 1);
  Tensor ids = Tensor::empty({B, T}, DType::i64);
  for (int64_t i = 0; i < B * T; ++i) ids.data<int64_t>()[i] = static_cast<int64_t>(g() % c.vocab);
  const Tensor logits = net(ids);
  ASSERT_EQ(logits.shape(), (Shape{B, T, c.vocab}));
  const auto got = logits.to_doubles();
  double max_diff = 0, spread = 0;
  for (int64_t b = 0; b < B; ++b) {
    llm::Session s(lm, {.ctx = T});
    std::vector<int32_t> toks;
    for (int64_t t = 0; t < T; ++t) toks.push_back(static_cast<int32_t>(ids.data<int64_t>()[b * T + t]));
    const std::vector<float> ref = s.feed(toks, true);
    ASSERT_EQ(static_cast<int64_t>(ref.size()), T * c.vocab);
    for (int64_t i = 0; i < T * c.vocab; ++i) {
      const double a = got[static_cast<size_t>(b * T * c.vocab + i)], r = ref[static_cast<size_t>(i)];
      max_diff = std::max(max_diff, std::fabs(a - r));
      spread = std::max(spread, std::fabs(r));
      ASSERT_NEAR(a, r, 1e-4 + 1e-4 * std::fabs(r)) << c.arch << " sequence " << b << " element " << i;
    }
  }
  EXPECT_GT(spread, 0.5);  // logits far from flat: the comparison means something
  std::printf("[%s] max |decoder - llm| = %.3g over logits up to %.3g\n", c.arch.c_str(), max_diff, spread);
}

TEST(LlamaModel, LlamaLogitsEqualLlmInferenceOnTheExportedGguf) {
  check_same_logits(
      {.arch = "llama", .vocab = 300, .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 48, .ctx = 9}, 11);
}

TEST(LlamaModel, Qwen2TiedLogitsEqualLlmInferenceOnTheExportedGguf) {
  check_same_logits({.arch = "qwen2",
                     .vocab = 300,
                     .dim = 32,
                     .layers = 2,
                     .heads = 2,
                     .kv_heads = 1,
                     .ffn = 40,
                     .ctx = 7,
                     .tie_embeddings = true},
                    12);
}

// --out-type: matrices stored as f16 / bf16 / q8_0 (rows not a multiple of 32 fall back to f16), 1-D tensors f32,
// general.file_type set to match; llm inference on the file stays close to the f32 export (a loose bound: the
// weights are rounded, q8_0 the most). An unknown type is an error naming it.
TEST(LlamaModel, ExportStoresMatricesInTheAskedType) {
  init();
  const auto dir = testing::temp_dir("lm_out_type");
  const io::GgufFile tok = io::GgufFile::open(tokenizer_gguf((dir / "tok.gguf").string()));
  const nn::LlamaConfig c{
      .arch = "llama", .vocab = 300, .dim = 64, .layers = 1, .heads = 4, .kv_heads = 2, .ffn = 80, .ctx = 6};
  nn::set_seed(5);
  nn::LlamaModel net(c);
  randomize(net, 5);
  const std::vector<int32_t> toks = {3, 17, 250, 9, 42, 1};
  auto logits_of = [&](const std::string& path) {
    const llm::Model lm = llm::Model::load(path);
    llm::Session s(lm, {.ctx = c.ctx});
    return s.feed(toks, true);
  };
  const std::string f32_path = (dir / "f32.gguf").string();
  train::export_llama_gguf(net, &tok, f32_path);
  const std::vector<float> ref = logits_of(f32_path);
  struct Case {
    std::string type;
    io::GgmlType want;
    int64_t file_type;
    double tol;
  };
  for (const Case& k : {Case{"f16", io::GgmlType::f16, 1, 0.05}, Case{"bf16", io::GgmlType::bf16, 32, 0.4},
                        Case{"q8_0", io::GgmlType::q8_0, 7, 0.4}}) {
    const std::string path = (dir / (k.type + ".gguf")).string();
    train::export_llama_gguf(net, &tok, path, k.type);
    const io::GgufFile f = io::GgufFile::open(path);
    EXPECT_EQ(f.get_int("general.file_type"), k.file_type) << k.type;
    for (const io::GgufTensorInfo& t : f.tensors()) {
      io::GgmlType want = t.shape.size() < 2 ? io::GgmlType::f32 : k.want;
      if (want == io::GgmlType::q8_0 && t.shape.back() % 32 != 0) want = io::GgmlType::f16;  // ffn_down: rows of 80
      EXPECT_EQ(t.type, want) << k.type << " " << t.name;
    }
    const std::vector<float> got = logits_of(path);
    ASSERT_EQ(got.size(), ref.size());
    double max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, std::fabs(double{got[i]} - ref[i]));
    EXPECT_GT(max_diff, 0.0) << k.type << ": the weights were rounded, so the logits should move";
    EXPECT_LT(max_diff, k.tol) << k.type;
  }
  EXPECT_THROW(
      {
        try {
          train::export_llama_gguf(net, &tok, (dir / "x.gguf").string(), "q4_k");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("'q4_k'"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

TEST(LlamaModel, ParameterNamesAreGgufNames) {
  init();
  nn::LlamaModel m(
      {.arch = "qwen2", .vocab = 300, .dim = 16, .layers = 1, .heads = 2, .kv_heads = 1, .ffn = 24, .ctx = 4});
  std::vector<std::string> names;
  for (auto& [n, t] : m.parameters_and_names()) names.push_back(n);
  const std::vector<std::string> want = {"token_embd.weight",     "blk.0.attn_norm.weight", "blk.0.attn_q.weight",
                                         "blk.0.attn_q.bias",     "blk.0.attn_k.weight",    "blk.0.attn_k.bias",
                                         "blk.0.attn_v.weight",   "blk.0.attn_v.bias",      "blk.0.attn_output.weight",
                                         "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight",  "blk.0.ffn_up.weight",
                                         "blk.0.ffn_down.weight", "output_norm.weight",     "output.weight"};
  EXPECT_EQ(names, want);
}

TEST(LlamaModel, BadConfigsAreErrors) {
  init();
  EXPECT_NE(testing::error_of([] {
              nn::LlamaModel m(
                  {.arch = "gpt2", .vocab = 8, .dim = 8, .layers = 1, .heads = 2, .kv_heads = 1, .ffn = 8, .ctx = 4});
            }).find("arch 'gpt2'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              nn::LlamaModel m({.vocab = 8, .dim = 8, .layers = 1, .heads = 3, .kv_heads = 1, .ffn = 8, .ctx = 4});
            }).find("not a multiple of heads"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              nn::LlamaModel m({.vocab = 8, .dim = 8, .layers = 1, .heads = 4, .kv_heads = 3, .ffn = 8, .ctx = 4});
            }).find("kv heads"),
            std::string::npos);
}

}  // namespace
}  // namespace spore
