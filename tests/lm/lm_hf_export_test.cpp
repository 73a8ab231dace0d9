// train-lm and Hugging Face files (train/lm.h export_llama_hf, llm::Tokenizer::gguf_metadata / write_hf): --hf-out
// writes a folder that llm::Model::load_hf runs with the GGUF's logits and greedy tokens, under HF's tensor names
// and shapes with llama's q/k rows in HF order; a tokenizer.json given as the tokenizer becomes GGUF metadata that
// tokenizes real text as the tokenizer.json does; what GGUF cannot express is an error naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "data/gzip.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_writer.h"
#include "io/safetensors.h"
#include "llm/bpe_train.h"
#include "llm/generate.h"
#include "llm/model.h"
#include "llm/tokenizer.h"
#include "runtime/runtime.h"
#include "test_util.h"
#include "train/lm.h"

namespace spore::train {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_all(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

fs::path tiny_text() {
  const fs::path p = testing::temp_dir("lm_hf") / "text.txt";
  if (fs::exists(p)) return p;
  std::ofstream f(p);
  const char* names[] = {"one", "two", "three", "four", "five", "six", "seven", "eight"};
  const char* things[] = {"little ducks", "green bottles", "speckled frogs", "black cats"};
  for (int i = 0; i < 300; ++i)
    f << names[i % 8] << " " << things[(i / 8) % 4] << " went out one day, " << names[(i + 1) % 8] << " came back.\n";
  return p;
}

LmOptions tiny_options(const std::string& tag, const std::string& arch) {
  LmOptions o;
  o.model = {.arch = arch, .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 48, .ctx = 64};
  o.model.tie_embeddings = arch == "qwen2";
  o.data = tiny_text().string();
  o.train_tokenizer = true;
  o.vocab = 300;
  o.batch = 4;
  o.steps = 12;
  o.warmup = 2;
  o.eval_batches = 2;
  o.lr = 1e-2;
  o.seed = 7;
  const fs::path d = testing::temp_dir("lm_hf") / tag;
  fs::remove_all(d);
  o.ckpt_dir = (d / "ckpt").string();
  o.out = (d / "model.gguf").string();
  o.hf_out = (d / "hf").string();
  return o;
}

// Real text: the first `n` bytes of tinyshakespeare, else (no shared data) the counting rhyme.
std::string real_text(size_t n) {
  const fs::path p = fs::path(testing::shared_data_dir("text-corpus")) / "tinyshakespeare.txt";
  std::string s = fs::exists(p) ? read_all(p) : read_all(tiny_text());
  return s.substr(0, std::min(n, s.size()));
}

// Greedy continuation of `prompt` by argmax over the logits, `n` tokens.
std::vector<int32_t> greedy(const llm::Model& m, const std::vector<int32_t>& prompt, int n) {
  llm::Session s(m, {.ctx = 64});
  std::vector<float> logits = s.feed(prompt);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    logits = s.feed(std::vector<int32_t>{next});
  }
  return out;
}

TEST(HfExport, HfOutRunsAsTheGguf) {
  spore::init();
  set_threads(2);
  for (const std::string arch : {"llama", "qwen2"}) {
    SCOPED_TRACE(arch);
    const LmOptions o = tiny_options("roundtrip_" + arch, arch);
    const LmReport r = train_lm(o);
    ASSERT_EQ(r.hf_dir, o.hf_out);
    const nn::LlamaConfig& c = o.model;
    const int64_t V = r.vocab, hd = c.dim / c.heads;

    // config.json: what transformers' LlamaConfig / Qwen2Config read.
    const json cfg = json::parse(read_all(fs::path(o.hf_out) / "config.json"));
    EXPECT_EQ(cfg["architectures"], json::array({arch == "llama" ? "LlamaForCausalLM" : "Qwen2ForCausalLM"}));
    EXPECT_EQ(cfg["model_type"], arch);
    EXPECT_EQ(cfg["hidden_size"], c.dim);
    EXPECT_EQ(cfg["intermediate_size"], c.ffn);
    EXPECT_EQ(cfg["num_attention_heads"], c.heads);
    EXPECT_EQ(cfg["num_key_value_heads"], c.kv_heads);
    EXPECT_EQ(cfg["num_hidden_layers"], c.layers);
    EXPECT_EQ(cfg["vocab_size"], V);
    EXPECT_EQ(cfg["max_position_embeddings"], c.ctx);
    EXPECT_DOUBLE_EQ(cfg["rms_norm_eps"].get<double>(), c.rms_eps);
    EXPECT_DOUBLE_EQ(cfg["rope_theta"].get<double>(), c.rope_theta);
    EXPECT_EQ(cfg["tie_word_embeddings"], c.tie_embeddings);
    EXPECT_EQ(cfg["torch_dtype"], "float32");

    // model.safetensors: exactly HF's names and shapes.
    const io::SafetensorsFile st = io::read_safetensors((fs::path(o.hf_out) / "model.safetensors").string());
    EXPECT_EQ(st.metadata.at("format"), "pt");
    std::map<std::string, Shape> want = {{"model.embed_tokens.weight", {V, c.dim}}, {"model.norm.weight", {c.dim}}};
    if (!c.tie_embeddings) want["lm_head.weight"] = {V, c.dim};
    for (int64_t i = 0; i < c.layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      want[p + "input_layernorm.weight"] = {c.dim};
      want[p + "post_attention_layernorm.weight"] = {c.dim};
      want[p + "self_attn.q_proj.weight"] = {c.heads * hd, c.dim};
      want[p + "self_attn.k_proj.weight"] = {c.kv_heads * hd, c.dim};
      want[p + "self_attn.v_proj.weight"] = {c.kv_heads * hd, c.dim};
      want[p + "self_attn.o_proj.weight"] = {c.dim, c.heads * hd};
      want[p + "mlp.gate_proj.weight"] = {c.ffn, c.dim};
      want[p + "mlp.up_proj.weight"] = {c.ffn, c.dim};
      want[p + "mlp.down_proj.weight"] = {c.dim, c.ffn};
      if (arch == "qwen2") {
        want[p + "self_attn.q_proj.bias"] = {c.heads * hd};
        want[p + "self_attn.k_proj.bias"] = {c.kv_heads * hd};
        want[p + "self_attn.v_proj.bias"] = {c.kv_heads * hd};
      }
    }
    std::map<std::string, Shape> got;
    for (const auto& [name, t] : st.tensors) {
      got[name] = t.shape();
      EXPECT_EQ(t.dtype(), DType::f32) << name;
    }
    EXPECT_EQ(got, want);

    // q/k rows: GGUF llama holds head h's row 2j + s where HF holds row s * hd/2 + j; qwen2 (NeoX) is unpermuted.
    const io::GgufFile g = io::GgufFile::open(o.out);
    for (const auto& [cell, hf, heads] : {std::tuple{"attn_q", "q_proj", c.heads}, {"attn_k", "k_proj", c.kv_heads}}) {
      const Tensor gw = g.dequantize_f32(std::string("blk.1.") + cell + ".weight");
      const Tensor& hw = st.tensors.at(std::string("model.layers.1.self_attn.") + hf + ".weight");
      int64_t mismatched = 0;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < hd / 2; ++j)
          for (int64_t s = 0; s < 2; ++s) {
            const int64_t grow = h * hd + (arch == "llama" ? 2 * j + s : s * hd / 2 + j),
                          hrow = h * hd + s * hd / 2 + j;
            mismatched += !std::equal(gw.data<float>() + grow * c.dim, gw.data<float>() + (grow + 1) * c.dim,
                                      hw.data<float>() + hrow * c.dim);
          }
      EXPECT_EQ(mismatched, 0) << cell;
    }

    // The tokenizer: tokenizer.json (+ config) encodes real text as the GGUF's metadata does.
    const llm::Model mg = llm::Model::load(o.out), mh = llm::Model::load(o.hf_out);
    const std::string text = real_text(20000) + "\nnaïve café — 日本語 \t  tabs\r\n<|endoftext|>";
    for (bool special : {false, true})
      EXPECT_EQ(mh.tokenizer().encode(text, special, special), mg.tokenizer().encode(text, special, special));
    EXPECT_EQ(mh.tokenizer().bos_id(), mg.tokenizer().bos_id());
    EXPECT_EQ(mh.tokenizer().eos_id(), mg.tokenizer().eos_id());
    EXPECT_EQ(mh.tokenizer().add_bos(), mg.tokenizer().add_bos());
    const json tcfg = json::parse(read_all(fs::path(o.hf_out) / "tokenizer_config.json"));
    EXPECT_EQ(tcfg["eos_token"], "<|endoftext|>");
    EXPECT_EQ(tcfg["add_bos_token"], false);

    // Logits of every position agree within f32 tolerance: 1e-4 absolute on logits of magnitude ~10 (the graphs
    // differ in rope's pairing of the same values, so in summation order only), and greedy tokens are identical.
    EXPECT_EQ(mh.config().rope_mode, "neox");
    const std::vector<int32_t> ids = mg.tokenizer().encode("three speckled frogs went out one day, four");
    llm::Session sg(mg, {.ctx = 64}), sh(mh, {.ctx = 64});
    const std::vector<float> lg = sg.feed(ids, true), lh = sh.feed(ids, true);
    ASSERT_EQ(lg.size(), ids.size() * static_cast<size_t>(V));
    ASSERT_EQ(lh.size(), lg.size());
    double diff = 0, scale = 0;
    for (size_t i = 0; i < lg.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(lg[i]) - lh[i]));
      scale = std::max(scale, std::abs(static_cast<double>(lg[i])));
    }
    EXPECT_LT(diff, 1e-4) << "max |logit| " << scale;
    EXPECT_GT(scale, 1.0);  // trained: the logits are not flat
    EXPECT_EQ(greedy(mh, ids, 16), greedy(mg, ids, 16));
  }
}

// A tokenizer.json as train-lm's tokenizer: the GGUF's metadata tokenizes real text as the tokenizer.json does.
TEST(HfExport, TokenizerJsonAsTheTokenizer) {
  spore::init();
  set_threads(2);
  const fs::path dir = testing::temp_dir("lm_hf") / "tokjson";
  fs::remove_all(dir);
  llm::tokenizer_of(llm::train_bpe(read_all(tiny_text()), 320)).write_hf((dir / "tok").string());
  const fs::path tj = dir / "tok" / "tokenizer.json";
  const llm::Tokenizer hf = llm::Tokenizer::load(tj.string());
  for (const std::string& source : {tj.string(), (dir / "tok").string()}) {  // the file, or its folder
    LmOptions o = tiny_options("tokjson_run", "llama");
    o.train_tokenizer = false;
    o.tokenizer = source;
    o.hf_out.clear();
    o.steps = 3;
    const LmReport r = train_lm(o);
    EXPECT_EQ(r.vocab, 320);
    const io::GgufFile g = io::GgufFile::open(r.gguf);
    EXPECT_EQ(g.get_string_or("tokenizer.ggml.pre", ""), "gpt-2");
    const llm::Tokenizer gt = llm::Tokenizer::from_gguf(g);
    const std::string text = real_text(50000) + "\nnaïve café — 日本語 \t  tabs\r\n";
    const std::vector<int32_t> want = hf.encode(text);
    EXPECT_GT(want.size(), text.size() / 4);  // merges apply: not one token per byte
    EXPECT_EQ(gt.encode(text), want);
    EXPECT_EQ(gt.decode(want), text);
    EXPECT_EQ(r.train_tokens + r.val_tokens, static_cast<int64_t>(hf.encode(read_all(tiny_text())).size()));
  }
}

// Qwen2/3's tokenizer.json (Split regex + ByteLevel, NFC normalizer, 26 added tokens): as GGUF metadata with
// pre "qwen2" it gives llama.cpp's ids on llama.cpp's qwen2 test strings and the tokenizer.json's on real text.
TEST(HfExport, QwenTokenizerJsonAsGgufMetadata) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests");
  const llm::Tokenizer hf = llm::Tokenizer::load(dir + "/hf-qwen3/tokenizer.json.gz");
  EXPECT_NE(testing::error_of([&] { hf.gguf_metadata(); }).find("normalizer NFC"), std::string::npos);
  const llm::TokenizerMetadata md = hf.gguf_metadata(/*drop_nfc=*/true);
  EXPECT_EQ(md.pre, "qwen2");
  io::GgufWriter w;
  w.add_string("general.architecture", "tokenizer");
  llm::add_tokenizer_metadata(w, md);
  const std::string bytes = w.encode();
  const llm::Tokenizer gt = llm::Tokenizer::from_gguf(io::GgufFile::parse(bytes.data(), bytes.size(), "qwen"));
  EXPECT_EQ(gt.vocab_size(), hf.vocab_size());
  EXPECT_EQ(gt.eos_id(), hf.eos_id());
  EXPECT_EQ(gt.chat_template(), hf.chat_template());
  std::string inp = read_all(dir + "/llama.cpp-vocab/ggml-vocab-qwen2.gguf.inp");
  std::istringstream out(read_all(dir + "/llama.cpp-vocab/ggml-vocab-qwen2.gguf.out"));
  const std::string delim = "\n__ggml_vocab_test__\n";
  int cases = 0;
  for (size_t pos; (pos = inp.find(delim)) != std::string::npos; inp.erase(0, pos + delim.size()), ++cases) {
    const std::string s = inp.substr(0, pos);
    std::string line;
    std::getline(out, line);
    std::istringstream ids(line);
    std::vector<int32_t> want;
    for (int32_t id; ids >> id;) want.push_back(id);
    EXPECT_EQ(gt.encode(s), want) << "case " << cases << " '" << s << "'";
  }
  EXPECT_GT(cases, 40);
  const std::string text = real_text(30000) + "\n<|im_start|>user\nnaïve café — 日本語<|im_end|>\n";
  EXPECT_EQ(gt.encode(text, true, true), hf.encode(text, true, true));
}

// What GGUF metadata cannot express, and bad inputs, are one-line errors naming the field or file.
TEST(HfExport, BadTokenizersAreNamedErrors) {
  spore::init();
  set_threads(2);
  const fs::path dir = testing::temp_dir("lm_hf") / "bad";
  fs::remove_all(dir);
  llm::tokenizer_of(llm::train_bpe(read_all(tiny_text()), 300)).write_hf((dir / "good").string());
  const json good = json::parse(read_all(dir / "good" / "tokenizer.json"));
  auto variant = [&](const std::string& name, const std::function<void(json&)>& edit) {
    json j = good;
    edit(j);
    fs::create_directories(dir / name);
    write_all(dir / name / "tokenizer.json", j.dump());
    return (dir / name / "tokenizer.json").string();
  };
  auto train_error = [&](const std::string& tokenizer, const std::string& data = "") {
    LmOptions o = tiny_options("bad_run", "llama");
    o.train_tokenizer = false;
    o.tokenizer = tokenizer;
    o.steps = 2;
    o.warmup = 0;
    if (!data.empty()) o.data = data;
    const std::string e = testing::error_of([&] { train_lm(o); });
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    return e;
  };
  auto has = [](const std::string& e, const std::string& what) {
    EXPECT_NE(e.find(what), std::string::npos) << "error '" << e << "' does not name '" << what << "'";
  };
  has(train_error(variant("fallback", [](json& j) { j["model"]["byte_fallback"] = true; })), "model.byte_fallback");
  has(train_error(variant("regex",
                          [](json& j) {
                            j["pre_tokenizer"] = {
                                {"type", "Sequence"},
                                {"pretokenizers",
                                 {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+|\\w+"}}}, {"behavior", "Isolated"}},
                                  {{"type", "ByteLevel"}, {"use_regex", false}}}}};
                          })),
      "pre_tokenizer regexes ['\\s+|\\w+']");
  has(train_error(variant("lstrip",
                          [](json& j) {
                            for (auto& t : j["added_tokens"]) t["lstrip"] = true;
                          })),
      "added_tokens '<|endoftext|>'");
  has(train_error(variant("metaspace",
                          [](json& j) {
                            j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}};
                          })),
      "SentencePiece-style BPE");
  has(train_error(variant("notjson", [](json&) {}) + ".missing"), "does not exist");
  write_all(dir / "garbage.json", "{\"model\": ");
  has(train_error((dir / "garbage.json").string()), "not valid JSON");
  // An NFC normalizer: dropped from the GGUF, which is fine on text in NFC and an error on text that is not.
  const std::string nfc = variant("nfc", [](json& j) { j["normalizer"] = {{"type", "NFC"}}; });
  write_all(dir / "decomposed.txt", read_all(tiny_text()) + "cafe\xCC\x81 cafe\xCC\x81\n");
  has(train_error(nfc, (dir / "decomposed.txt").string()), "tokenizes '" + (dir / "decomposed.txt").string());
  LmOptions ok = tiny_options("nfc_ok", "llama");
  ok.train_tokenizer = false;
  ok.tokenizer = nfc;
  ok.steps = 2;
  ok.warmup = 0;
  EXPECT_EQ(train_lm(ok).steps, 2);
  // --hf-out needs a byte-level BPE (tokenizer.json cannot carry SentencePiece scores): refused before training.
  SPORE_SHARED_DATA_DIR(models, "gguf-models");
  LmOptions spm = tiny_options("spm_hf", "llama");
  spm.train_tokenizer = false;
  spm.tokenizer = models + "/llama-2-tiny-random.gguf";
  has(testing::error_of([&] { train_lm(spm); }), "--hf-out writes a byte-level BPE tokenizer.json");
  EXPECT_FALSE(fs::exists(fs::path(spm.ckpt_dir) / "checkpoint.safetensors"));
}

}  // namespace
}  // namespace spore::train
