// The decoder graph (llm/model.h) and sessions (llm/generate.h) against an independent reference forward pass written
// here in plain double-precision loops over the weights as stored in the file (dequantized), on random tiny models:
// Llama (normal rope, GGUF-permuted Q/K), Qwen2 (neox rope, QKV bias, tied embeddings) and a Hugging Face folder.
// Also: prefill vs decode vs chunked prefill vs threads bit-identical (every KV cache type, int8 included), KV cache
// f16 and int8 vs f32, memory refusal, errors.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "io/gguf/gguf.h"
#include "io/gguf/gguf_writer.h"
#include "io/safetensors.h"
#include "llm/generate.h"
#include "llm/model.h"
#include "runtime/runtime.h"
#include "tiny_gguf.h"
#include "test_util.h"

namespace spore::llm {
namespace {

namespace fs = std::filesystem;

using namespace spore::llm::tiny;  // Spec, Weights, make_weights, permute_qk, write_gguf

// The weights as the file stores them (quantization applied), in HF order (un-permuted back when needed).
Weights stored_weights(const Spec& s, const std::string& path, bool permuted) {
  io::GgufFile f = io::GgufFile::open(path);
  Weights w;
  for (const auto& t : f.tensors()) {
    Tensor v = f.dequantize_f32(t.name);
    if (permuted && (t.name.find("attn_q.weight") != std::string::npos ||
                     t.name.find("attn_k.weight") != std::string::npos)) {
      const int64_t heads = t.name.find("attn_q") != std::string::npos ? s.H : s.Hkv;
      // inverse of permute_qk
      const int64_t rows = v.shape()[0], cols = v.shape()[1], d = rows / heads;
      Tensor out = Tensor::empty(v.shape(), DType::f32);
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < d / 2; ++i)
          for (int two = 0; two < 2; ++two) {
            const float* src = v.data<float>() + (h * d + 2 * i + two) * cols;
            std::copy(src, src + cols, out.data<float>() + (h * d + two * (d / 2) + i) * cols);
          }
      v = out;
    }
    w[t.name] = v;
  }
  return w;
}

// Reference forward over `tokens` at positions 0..n-1 with HF semantics (neox rotation on un-permuted weights), in
// double. Returns logits [n][V].
std::vector<std::vector<double>> reference(const Spec& s, const Weights& w, const std::vector<int32_t>& tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size()), E = s.E, D = s.D;
  using Mat = std::vector<std::vector<double>>;
  auto at = [&](const std::string& name) { return w.at(name).data<float>(); };
  auto linear = [&](const Mat& x, const std::string& name, int64_t out, const std::string& bias) {
    const float* W = at(name);
    const int64_t in = static_cast<int64_t>(x[0].size());
    Mat y(x.size(), std::vector<double>(static_cast<size_t>(out)));
    for (size_t r = 0; r < x.size(); ++r)
      for (int64_t o = 0; o < out; ++o) {
        double acc = bias.empty() || !w.count(bias) ? 0.0 : at(bias)[o];
        for (int64_t k = 0; k < in; ++k) acc += x[r][static_cast<size_t>(k)] * W[o * in + k];
        y[r][static_cast<size_t>(o)] = acc;
      }
    return y;
  };
  auto rms = [&](const Mat& x, const std::string& name) {
    Mat y = x;
    const float* g = at(name);
    for (auto& row : y) {
      double ss = 0;
      for (double v : row) ss += v * v;
      const double sc = 1.0 / std::sqrt(ss / static_cast<double>(row.size()) + s.eps);
      for (size_t i = 0; i < row.size(); ++i) row[i] *= sc * g[i];
    }
    return y;
  };
  auto rope = [&](Mat& x, int64_t heads) {  // neox: pairs (i, i + D/2)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double ang = static_cast<double>(t) * std::pow(s.theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
          double& a = x[static_cast<size_t>(t)][static_cast<size_t>(h * D + i)];
          double& b = x[static_cast<size_t>(t)][static_cast<size_t>(h * D + i + D / 2)];
          const double a0 = a, b0 = b;
          a = a0 * std::cos(ang) - b0 * std::sin(ang);
          b = a0 * std::sin(ang) + b0 * std::cos(ang);
        }
  };
  Mat x(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(E)));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < E; ++i) x[static_cast<size_t>(t)][static_cast<size_t>(i)] = at("token_embd.weight")[tokens[static_cast<size_t>(t)] * E + i];
  for (int64_t l = 0; l < s.L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Mat h = rms(x, p + "attn_norm.weight");
    Mat q = linear(h, p + "attn_q.weight", s.H * D, p + "attn_q.bias");
    Mat k = linear(h, p + "attn_k.weight", s.Hkv * D, p + "attn_k.bias");
    Mat v = linear(h, p + "attn_v.weight", s.Hkv * D, p + "attn_v.bias");
    rope(q, s.H);
    rope(k, s.Hkv);
    Mat att(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(s.H * D)));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t hh = 0; hh < s.H; ++hh) {
        const int64_t kh = hh / (s.H / s.Hkv);
        std::vector<double> sc(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += q[static_cast<size_t>(t)][static_cast<size_t>(hh * D + i)] * k[static_cast<size_t>(j)][static_cast<size_t>(kh * D + i)];
          sc[static_cast<size_t>(j)] = d / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (double& e : sc) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t i = 0; i < D; ++i)
            att[static_cast<size_t>(t)][static_cast<size_t>(hh * D + i)] += sc[static_cast<size_t>(j)] / sum * v[static_cast<size_t>(j)][static_cast<size_t>(kh * D + i)];
      }
    Mat o = linear(att, p + "attn_output.weight", E, "");
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < E; ++i) x[static_cast<size_t>(t)][static_cast<size_t>(i)] += o[static_cast<size_t>(t)][static_cast<size_t>(i)];
    h = rms(x, p + "ffn_norm.weight");
    Mat g = linear(h, p + "ffn_gate.weight", s.F, ""), u = linear(h, p + "ffn_up.weight", s.F, "");
    for (size_t t = 0; t < g.size(); ++t)
      for (size_t i = 0; i < g[t].size(); ++i) g[t][i] = g[t][i] / (1 + std::exp(-g[t][i])) * u[t][i];
    Mat dn = linear(g, p + "ffn_down.weight", E, "");
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < E; ++i) x[static_cast<size_t>(t)][static_cast<size_t>(i)] += dn[static_cast<size_t>(t)][static_cast<size_t>(i)];
  }
  x = rms(x, "output_norm.weight");
  return linear(x, s.tied ? "token_embd.weight" : "output.weight", s.V, "");
}

// max |a - ref| / max |ref| over all rows.
double rel_err(const std::vector<float>& got, const std::vector<std::vector<double>>& ref) {
  double md = 0, mr = 0;
  size_t i = 0;
  for (const auto& row : ref)
    for (double r : row) {
      md = std::max(md, std::abs(static_cast<double>(got.at(i++)) - r));
      mr = std::max(mr, std::abs(r));
    }
  EXPECT_EQ(i, got.size());
  return md / mr;
}

std::string tmp_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("spore_llm_model_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

const std::vector<int32_t> kTokens = {5, 17, 3, 96, 42, 0, 7, 7, 64, 31, 12};

struct Case {
  const char* name;
  Spec spec;
  double tol;  // on max abs error / max |logit|
};

class ModelVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(ModelVsReference, LogitsOfEveryPositionMatch) {
  const Case& c = GetParam();
  const bool permute = c.spec.arch == "llama";  // GGUF Llama files carry permuted Q/K, Qwen2 files do not
  const std::string path = tmp_path(std::string(c.name) + ".gguf");
  write_gguf(c.spec, make_weights(c.spec, 7), path, permute);
  const Weights stored = stored_weights(c.spec, path, permute);
  const auto ref = reference(c.spec, stored, kTokens);
  const Model m = Model::load(path);
  EXPECT_EQ(m.config().rope_mode, c.spec.arch == "qwen2" ? "neox" : "normal");
  EXPECT_EQ(m.config().tied_embeddings, c.spec.tied);
  EXPECT_EQ(m.config().qkv_bias, c.spec.bias);
  Session s(m, {.ctx = 64});
  const std::vector<float> got = s.feed(kTokens, /*all_logits=*/true);
  EXPECT_LE(rel_err(got, ref), c.tol) << c.name;
  // Decode one token more: equals the reference over the longer sequence (last row).
  std::vector<int32_t> longer = kTokens;
  longer.push_back(11);
  const auto ref2 = reference(c.spec, stored, longer);
  const std::vector<float> last = s.feed(std::vector<int32_t>{11});
  EXPECT_LE(rel_err(last, {ref2.back()}), c.tol) << c.name << " decode";
}

Spec with(Spec s, std::string arch, io::GgmlType t, bool bias, bool tied) {
  s.arch = std::move(arch);
  s.wtype = t;
  s.bias = bias;
  s.tied = tied;
  return s;
}

// Tolerances: f32 weights differ from the double reference only by f32 rounding; f16/bf16 round the activations to
// that type before each matrix product (as llama.cpp does); q8_0/q4_0 quantize them to Q8_0 blocks (~0.4% per value).
INSTANTIATE_TEST_SUITE_P(
    Tiny, ModelVsReference,
    ::testing::Values(Case{"llama_f32", with({}, "llama", io::GgmlType::f32, false, false), 1e-5},
                      Case{"qwen2_f32_bias_tied", with({}, "qwen2", io::GgmlType::f32, true, true), 1e-5},
                      Case{"llama_f16", with({}, "llama", io::GgmlType::f16, false, true), 3e-3},
                      Case{"qwen2_bf16", with({}, "qwen2", io::GgmlType::bf16, true, false), 2e-2},
                      Case{"llama_q8_0", with({}, "llama", io::GgmlType::q8_0, false, false), 3e-2},
                      Case{"qwen2_q4_0", with({}, "qwen2", io::GgmlType::q4_0, true, true), 3e-2}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(LlmModel, HuggingFaceFolderEqualsGgufWithPermutedQk) {
  const Spec s = with({}, "llama", io::GgmlType::f32, false, false);
  const Weights w = make_weights(s, 11);
  const std::string gguf = tmp_path("hf_vs_gguf.gguf");
  write_gguf(s, w, gguf, /*permute=*/true);
  const std::string dir = tmp_path("hf_folder");
  fs::create_directories(dir);
  std::map<std::string, Tensor> st;
  st["model.embed_tokens.weight"] = w.at("token_embd.weight");
  st["model.norm.weight"] = w.at("output_norm.weight");
  st["lm_head.weight"] = w.at("output.weight");
  const std::pair<const char*, const char*> names[] = {
      {"attn_norm.weight", "input_layernorm.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},   {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},   {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},    {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  for (int64_t l = 0; l < s.L; ++l)
    for (const auto& [g, h] : names)
      st["model.layers." + std::to_string(l) + "." + h] = w.at("blk." + std::to_string(l) + "." + g);
  io::write_safetensors(dir + "/model.safetensors", st);
  std::ofstream(dir + "/config.json")
      << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96,
            "vocab_size": 97, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false})";
  const Model hf = Model::load(dir), gg = Model::load(gguf);
  EXPECT_EQ(hf.config().rope_mode, "neox");
  EXPECT_EQ(gg.config().rope_mode, "normal");
  Session a(hf, {.ctx = 32}), b(gg, {.ctx = 32});
  const auto la = a.feed(kTokens, true), lb = b.feed(kTokens, true);
  ASSERT_EQ(la.size(), lb.size());
  double md = 0, mx = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    md = std::max(md, static_cast<double>(std::abs(la[i] - lb[i])));
    mx = std::max(mx, static_cast<double>(std::abs(lb[i])));
  }
  EXPECT_LE(md / mx, 1e-5);  // same math, pairs rotated in another order
  // Weights read into memory (--no-mmap) instead of mapped: the same bits, for both layouts.
  for (const std::string& p : {dir, gguf}) {
    const Model mapped = Model::load(p), read = Model::load(p, /*use_mmap=*/false);
    Session sm(mapped, {.ctx = 32}), sr(read, {.ctx = 32});
    EXPECT_EQ(sm.feed(kTokens, true), sr.feed(kTokens, true)) << p;
  }
}

// warm_up runs a prompt and a decode step and forgets them: what follows is bit-identical to a fresh session's.
TEST(LlmModel, WarmUpLeavesNoTrace) {
  const Spec s;
  write_gguf(s, make_weights(s, 3), tmp_path("warm.gguf"), false);
  const Model m = Model::load(tmp_path("warm.gguf"));
  Session fresh(m, {.ctx = 32}), warmed(m, {.ctx = 32});
  warmed.warm_up(std::vector<int32_t>{5, 9, 2, 7, 1, 3});
  EXPECT_EQ(warmed.position(), 0);
  EXPECT_EQ(fresh.feed(kTokens), warmed.feed(kTokens));
  EXPECT_EQ(fresh.feed(std::vector<int32_t>{4}), warmed.feed(std::vector<int32_t>{4}));
}

// feed_view: the same logits as feed, without a copy, valid until the next feed.
TEST(LlmModel, FeedViewIsFeedWithoutACopy) {
  const Spec s;
  write_gguf(s, make_weights(s, 4), tmp_path("view.gguf"), false);
  const Model m = Model::load(tmp_path("view.gguf"));
  Session a(m, {.ctx = 32}), b(m, {.ctx = 32});
  const std::vector<float> la = a.feed(kTokens);
  std::span<const float> lb = b.feed_view(kTokens);
  ASSERT_EQ(lb.size(), la.size());
  EXPECT_TRUE(std::equal(la.begin(), la.end(), lb.begin()));
  const std::vector<float> kept(lb.begin(), lb.end());
  for (int32_t t : {4, 9, 1}) {
    const std::vector<float> da = a.feed(std::vector<int32_t>{t});
    lb = b.feed_view(std::vector<int32_t>{t});
    EXPECT_TRUE(std::equal(da.begin(), da.end(), lb.begin(), lb.end())) << t;
  }
  EXPECT_FALSE(std::equal(kept.begin(), kept.end(), lb.begin()));  // it moved on to the newest logits
}

// KvCache::reserve makes the rows up to a window past the position resident (one madvise per head), and leaves
// the rest of a long cache untouched: mincore sees which pages are in memory.
TEST(LlmModel, KvCacheReservePopulatesAWindowAhead) {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head_kv = 2;
  c.head_dim = 64;
  const int64_t ctx = 8192 + 40;  // ~4 MiB per tensor, a size no other test allocates
  KvCache kv(c, ctx, DType::f32);
  const int64_t page = sysconf(_SC_PAGESIZE);
  const auto resident = [&](const Tensor& t, int64_t h, int64_t p0, int64_t p1) {  // pages of rows [p0, p1) of head h
    auto* lo = static_cast<uint8_t*>(const_cast<void*>(t.raw_data())) + (h * ctx + p0) * 64 * 4;
    auto* a = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(lo) / page * page);
    const int64_t len = (p1 - p0) * 64 * 4;
    std::vector<unsigned char> v(static_cast<size_t>((lo + len - a + page - 1) / page));
    EXPECT_EQ(mincore(a, static_cast<size_t>(lo + len - a), v.data()), 0);
    int64_t in = 0;
    for (unsigned char x : v) in += x & 1;
    return std::pair<int64_t, int64_t>{in, static_cast<int64_t>(v.size())};
  };
  // Rows far past the window: reserve leaves them as they were (untouched, unless the allocator reused memory).
  std::vector<int64_t> far_before;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < 2; ++h)
      for (const Tensor* t : {&kv.k(l), &kv.v(l)}) far_before.push_back(resident(*t, h, 2048, 4096).first);
  kv.reserve(3);
  size_t i = 0;
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t h = 0; h < 2; ++h)
      for (const Tensor* t : {&kv.k(l), &kv.v(l)}) {
        const auto [in, total] = resident(*t, h, 0, KvCache::kPopulateRows);
        EXPECT_EQ(in, total) << l << " " << h;
        EXPECT_EQ(resident(*t, h, 2048, 4096).first, far_before[i++]) << l << " " << h;
      }
  // Past the window: the next window.
  kv.reserve(KvCache::kPopulateRows + 1);
  const auto [in, total] = resident(kv.v(1), 1, KvCache::kPopulateRows, 2 * KvCache::kPopulateRows);
  EXPECT_EQ(in, total);
}

// Logits of each position, computed by a prefill of all tokens, by one-at-a-time decode, by prefill in chunks, with
// 1 or 2 threads, and for each KV cache type: bit-identical (batch-invariant kernels, docs/LLM.md).
TEST(LlmModel, PrefillDecodeChunksAndThreadsAreBitIdentical) {
  for (io::GgmlType wt : {io::GgmlType::f32, io::GgmlType::q8_0}) {
    const Spec s = with({}, "qwen2", wt, true, true);
    const std::string path = tmp_path(std::string("bitwise_") + io::ggml_type_name(wt).data() + ".gguf");
    write_gguf(s, make_weights(s, 3), path, false);
    const Model m = Model::load(path);
    for (DType kv : {DType::f32, DType::f16, DType::bf16, DType::i8}) {
      SCOPED_TRACE(std::string(io::ggml_type_name(wt)) + " kv " + std::string(dtype_name(kv)));
      set_threads(2);
      Session whole(m, {.ctx = 64, .kv_dtype = kv});
      const auto all = whole.feed(kTokens, true);
      Session chunked(m, {.ctx = 64, .kv_dtype = kv, .max_batch = 4});
      const auto ch = chunked.feed(kTokens, true);
      EXPECT_EQ(all, ch) << "prefill in chunks of 4";
      set_threads(1);
      Session one(m, {.ctx = 64, .kv_dtype = kv});
      std::vector<float> dec;
      for (int32_t t : kTokens) {
        const auto l = one.feed(std::vector<int32_t>{t});
        dec.insert(dec.end(), l.begin(), l.end());
      }
      EXPECT_EQ(all, dec) << "decode one token at a time, 1 thread";
      set_threads(0);
    }
  }
}

TEST(LlmModel, KvF16HalvesTheCacheAndKeepsGreedyOutput) {
  const Spec s = with({}, "llama", io::GgmlType::f16, false, false);
  const std::string path = tmp_path("kv_f16.gguf");
  write_gguf(s, make_weights(s, 5), path, true);
  const Model m = Model::load(path);
  Session a(m, {.ctx = 128, .kv_dtype = DType::f32}), b(m, {.ctx = 128, .kv_dtype = DType::f16});
  EXPECT_EQ(a.cache().bytes(), 2 * b.cache().bytes());
  EXPECT_EQ(b.cache().bytes(), m.kv_bytes_per_token(DType::f16) * 128);
  GenerateOptions o;
  o.max_tokens = 64;
  o.ignore_eos = true;
  const auto ra = generate(a, {1, 2, 3}, o), rb = generate(b, {1, 2, 3}, o);
  ASSERT_EQ(ra.tokens.size(), 64u);
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_EQ(ra.stop_reason, "length");
}

// int8 KV cache: D + 4 bytes per (layer, k/v, kv head, position) row, (D + 4) / (4 D) of f32 (0.31 at D = 16, 0.27 at
// the usual D = 64), and the same greedy tokens as f32 over 64 steps on the test model. The logits differ from f32's
// by the cache's rounding (each K/V value within half a step of max|row| / 127); measured on this model the largest
// difference over the 64 steps is 0.6% of the largest logit, and the bound below, 5%, would still catch a row read
// with a wrong or missing scale (off by tens of percent).
TEST(LlmModel, KvInt8IsAQuarterOfTheCacheAndKeepsGreedyOutput) {
  const Spec s = with({}, "llama", io::GgmlType::f16, false, false);
  const std::string path = tmp_path("kv_i8.gguf");
  write_gguf(s, make_weights(s, 5), path, true);
  const Model m = Model::load(path);
  const int64_t ctx = 128;
  Session a(m, {.ctx = ctx, .kv_dtype = DType::f32}), b(m, {.ctx = ctx, .kv_dtype = DType::i8});
  EXPECT_EQ(b.cache().bytes(), 2 * s.L * s.Hkv * ctx * (s.D + 4));
  EXPECT_EQ(b.cache().bytes(), m.kv_bytes_per_token(DType::i8) * ctx);
  EXPECT_EQ(a.cache().bytes() * (s.D + 4), b.cache().bytes() * 4 * s.D);
  GenerateOptions o;
  o.max_tokens = 64;
  o.ignore_eos = true;
  std::vector<std::vector<float>> la, lb;
  const auto keep = [](std::vector<std::vector<float>>& into) {
    return [&into](int32_t, std::span<const float> l) { into.emplace_back(l.begin(), l.end()); };
  };
  const auto ra = generate(a, {1, 2, 3}, o, {}, keep(la)), rb = generate(b, {1, 2, 3}, o, {}, keep(lb));
  ASSERT_EQ(ra.tokens.size(), 64u);
  ASSERT_EQ(la.size(), lb.size());
  // Per step: the largest logit difference relative to the largest f32 logit; reported at the first differing token.
  double worst = 0;
  size_t first_diff = ra.tokens.size();
  for (size_t i = 0; i < la.size(); ++i) {
    double md = 0, mx = 0;
    for (size_t v = 0; v < la[i].size(); ++v) {
      md = std::max(md, static_cast<double>(std::abs(la[i][v] - lb[i][v])));
      mx = std::max(mx, static_cast<double>(std::abs(la[i][v])));
    }
    if (first_diff == ra.tokens.size() && i < rb.tokens.size() && ra.tokens[i] != rb.tokens[i]) {
      first_diff = i;
      ADD_FAILURE() << "int8 KV: greedy token " << i << " is " << rb.tokens[i] << ", f32 gives " << ra.tokens[i]
                    << "; logit error at that step " << md << " (of max |logit| " << mx << ")";
    }
    if (i <= first_diff) worst = std::max(worst, md / mx);  // after a different token the inputs differ
  }
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_GT(worst, 0.0) << "the int8 cache changed nothing: is it used?";
  EXPECT_LT(worst, 0.05);
  RecordProperty("int8_vs_f32_max_rel_logit_error", std::to_string(worst));
  std::printf("int8 vs f32 KV cache: max logit error / max |logit| over %zu steps: %.3g\n", la.size(), worst);
}

TEST(LlmModel, SeededSamplingIsDeterministicAndContextEnds) {
  const Spec s = with({}, "qwen2", io::GgmlType::q8_0, true, true);
  const std::string path = tmp_path("sample.gguf");
  write_gguf(s, make_weights(s, 9), path, false);
  const Model m = Model::load(path);
  GenerateOptions o;
  o.max_tokens = 40;
  o.sampler.temperature = 3.0;  // flat enough that a random tiny model gives varied tokens
  o.sampler.seed = 1234;
  Session a(m, {.ctx = 64}), b(m, {.ctx = 64});
  set_threads(1);
  const auto ra = generate(a, {4, 5, 6}, o);
  set_threads(2);
  const auto rb = generate(b, {4, 5, 6}, o);
  set_threads(0);
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_GT(std::set<int32_t>(ra.tokens.begin(), ra.tokens.end()).size(), 1u);
  o.sampler.seed = 99;
  Session c(m, {.ctx = 64});
  EXPECT_NE(generate(c, {4, 5, 6}, o).tokens, ra.tokens);
  // A context of 16 ends generation at 16 positions: 3 prompt tokens + 13 fed back, 14 sampled.
  Session d(m, {.ctx = 16});
  const auto rd = generate(d, {4, 5, 6}, o);
  EXPECT_EQ(rd.stop_reason, "ctx");
  EXPECT_EQ(d.position(), 16);
}

TEST(LlmModel, MemoryCapIsRefusedWithTheNumbersAndDefaultCtxFits) {
  const Spec s = with({}, "llama", io::GgmlType::f32, false, false);
  const std::string path = tmp_path("mem.gguf");
  write_gguf(s, make_weights(s, 1), path, true);
  const Model m = Model::load(path);
  SessionOptions o;
  o.ctx = 1 << 20;
  o.max_memory = 256 << 20;
  try {
    Session big(m, o);
    FAIL() << "expected out_of_memory";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--ctx 1048576"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--max-memory allows"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(m.kv_bytes_per_token(DType::f32) * (1 << 20))), std::string::npos) << msg;
    EXPECT_NE(msg.find("--kv-type f16"), std::string::npos) << msg;
  }
  SessionOptions d;
  d.max_memory = 256 << 20;
  Session fit(m, d);
  EXPECT_EQ(fit.ctx(), 4096);  // the model's training context: it fits
  EXPECT_LE(fit.memory().total(), d.max_memory);
  SessionOptions t;
  const MemoryBudget need = plan_memory(m, d);
  t.max_memory = need.weights + need.activations + 1000 * m.kv_bytes_per_token(DType::f32);  // room for 1000 tokens
  Session small(m, t);
  EXPECT_EQ(small.ctx(), 768);  // rounded down to a multiple of 256
  EXPECT_LE(small.memory().total(), t.max_memory);
}

TEST(LlmModel, BadFilesNameWhatIsWrong) {
  const Spec s;
  Weights w = make_weights(s, 2);
  auto expect_error = [](const std::string& path, const std::string& needle) {
    try {
      Model::load(path);
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Spec gpt = s;
  gpt.arch = "gpt2";
  write_gguf(gpt, w, tmp_path("gpt2.gguf"), false);
  expect_error(tmp_path("gpt2.gguf"), "architecture 'gpt2' is not supported");
  Weights missing = w;
  missing.erase("blk.1.ffn_up.weight");
  write_gguf(s, missing, tmp_path("missing.gguf"), false);
  expect_error(tmp_path("missing.gguf"), "blk.1.ffn_up.weight");
  Weights wrong = w;
  wrong["blk.0.attn_k.weight"] = Tensor::zeros({s.H * s.D, s.E}, DType::f32);
  write_gguf(s, wrong, tmp_path("wrong.gguf"), false);
  expect_error(tmp_path("wrong.gguf"), "blk.0.attn_k.weight");
  expect_error(tmp_path("nothing_here.gguf"), "does not exist");
  std::ofstream(tmp_path("empty.gguf")).close();
  for (bool mm : {true, false}) {
    try {
      Model::load(tmp_path("empty.gguf"), mm);
      ADD_FAILURE() << "no error for an empty file (use_mmap " << mm << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the file is empty"), std::string::npos) << e.what();
    }
  }
  const Model m = Model::load([&] {
    write_gguf(s, w, tmp_path("ok.gguf"), false);
    return tmp_path("ok.gguf");
  }());
  Session ss(m, {.ctx = 8});
  EXPECT_THROW(ss.feed(std::vector<int32_t>{97}), Error);  // outside the vocabulary
  EXPECT_THROW(ss.feed(std::vector<int32_t>(9, 1)), Error);  // more than ctx
  EXPECT_THROW(m.tokenizer(), Error);                        // no vocabulary in this file
}

}  // namespace
}  // namespace spore::llm
