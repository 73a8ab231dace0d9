// LoRA (nn/llama.h add_lora, train/finetune.h, llm/lora.h): a fresh adapter leaves the logits bit for bit, scale 0 is
// the base, the trained graph == the run-time adapter == the merged model within f32 tolerance, PEFT and GGUF adapter
// files round-trip, fine-tuning leaves the base's parameters bit-unchanged and lowers the validation loss (KJV on a
// tinyshakespeare base from ../shared/data), bad inputs are errors naming the tensor or key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/file_util.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_writer.h"
#include "io/safetensors.h"
#include "llm/generate.h"
#include "llm/lora.h"
#include "llm/model.h"
#include "llm/tokenizer.h"
#include "nn/init.h"
#include "nn/llama.h"
#include "runtime/runtime.h"
#include "test_util.h"
#include "train/finetune.h"
#include "train/lm.h"

namespace spore {
namespace {
namespace fs = std::filesystem;

fs::path dir() { return testing::temp_dir("lora"); }

nn::LlamaConfig tiny(const std::string& arch = "llama") {
  return {.arch = arch, .vocab = 64, .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 64, .ctx = 16};
}

Tensor tokens_of(const std::vector<int32_t>& ids) {
  Tensor t = Tensor::empty({1, static_cast<int64_t>(ids.size())}, DType::i64);
  for (size_t i = 0; i < ids.size(); ++i) t.data<int64_t>()[i] = ids[i];
  return t;
}

const std::vector<int32_t> kIds = {3, 17, 42, 5, 9, 60, 1, 33, 21, 8};

// Every lora_b of the model set to normal(0, std) (a trained adapter's stand-in: B = 0 would make every check moot).
void randomize_b(nn::LlamaModel& m, double std) {
  for (auto& [name, t] : m.parameters_and_names())
    if (name.size() > 7 && name.compare(name.size() - 7, 7, ".lora_b") == 0) *t = nn::init::normal(t->shape(), 0, std);
}

llm::LoraAdapter adapter_of(nn::LlamaModel& m) {
  const nn::LlamaConfig& c = m.config();
  llm::LoraAdapter a;
  a.arch = c.arch;
  a.r = m.lora()->r;
  a.alpha = m.lora()->alpha;
  a.targets = m.lora()->targets;
  a.permuted_qk = c.arch == "llama";
  a.n_head = c.heads;
  a.n_head_kv = c.kv_heads;
  for (auto& [name, t] : m.parameters_and_names()) {
    const bool is_a = name.find(".lora_a") != std::string::npos, is_b = name.find(".lora_b") != std::string::npos;
    if (!is_a && !is_b) continue;
    llm::LoraPair& p = a.tensors[name.substr(0, name.size() - 7) + ".weight"];
    (is_a ? p.a : p.b) = t->contiguous();
  }
  return a;
}

std::vector<float> last_logits(const Tensor& logits) {  // [1, T, V] -> the last row
  const Tensor c = logits.contiguous();
  const int64_t T = c.shape()[1], V = c.shape()[2];
  return std::vector<float>(c.data<float>() + (T - 1) * V, c.data<float>() + T * V);
}

std::vector<float> run_llm(const llm::Model& m) {
  llm::Session s(m, {.ctx = 16});
  return s.feed(kIds);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(double(a[i]) - b[i]));
  return d;
}

TEST(Lora, FreshAdapterGivesTheBaseLogitsBitForBit) {
  init();
  for (const std::string arch : {"llama", "qwen2"}) {
    nn::set_seed(3);
    nn::LlamaModel m(tiny(arch));
    const int64_t base_params = m.num_parameters();
    const Tensor before = m(tokens_of(kIds)).contiguous();
    m.add_lora({.r = 4, .alpha = 8, .dropout = 0.1, .targets = nn::lora_target_cells("all-linear")});
    m.set_train(false);
    const Tensor after = m(tokens_of(kIds)).contiguous();
    ASSERT_EQ(before.shape(), after.shape());
    EXPECT_EQ(std::memcmp(before.data<float>(), after.data<float>(), before.nbytes()), 0) << arch;
    // Only the adapters train: 7 projections x 2 layers, r (in + out) each.
    const int64_t E = 32, Dkv = 16, F = 64, r = 4;
    const int64_t per_layer = r * ((E + E) + (E + Dkv) * 2 + (E + E) + (E + F) * 2 + (F + E));
    EXPECT_EQ(m.num_parameters(true), 2 * per_layer) << arch;
    EXPECT_EQ(m.num_parameters(), base_params + 2 * per_layer) << arch;
    // A nonzero B changes them (so the comparison above can fail).
    randomize_b(m, 0.05);
    EXPECT_GT(max_abs_diff(last_logits(before), last_logits(m(tokens_of(kIds)))), 1e-4) << arch;
  }
}

// The training graph (nn::LlamaModel with LoRA), llm::Model with the adapter applied at run time (read back from the
// PEFT folder and from the GGUF adapter) and the merged GGUF agree within f32 tolerance; scale 0 is the base bit for
// bit. Llama (q/k rows permuted between GGUF and PEFT) and Qwen2 (biases, neox rope).
TEST(Lora, TrainedGraphRunTimeAdapterAndMergedModelAgree) {
  init();
  for (const std::string arch : {"llama", "qwen2"}) {
    nn::set_seed(11);
    nn::LlamaModel m(tiny(arch));
    const fs::path base = dir() / (arch + "_base.gguf");
    train::export_llama_gguf(m, nullptr, base.string());
    m.add_lora({.r = 4, .alpha = 8, .targets = nn::lora_target_cells("all-linear")});
    randomize_b(m, 0.05);
    m.set_train(false);
    const std::vector<float> trained = last_logits(m(tokens_of(kIds)));
    const llm::LoraAdapter a = adapter_of(m);
    const fs::path peft = dir() / (arch + "_peft"), gguf = dir() / (arch + "_adapter.gguf"),
                   merged = dir() / (arch + "_merged.gguf");
    llm::write_peft(a, peft.string());
    llm::write_gguf_adapter(a, gguf.string());

    const std::vector<float> plain = run_llm(llm::Model::load(base.string()));
    llm::Model zero = llm::Model::load(base.string());
    zero.add_lora(llm::read_adapter(peft.string()), 0.0);
    EXPECT_EQ(run_llm(zero), plain) << arch;  // scale 0: base + 0 * delta, bit for bit

    llm::Model hot_peft = llm::Model::load(base.string()), hot_gguf = llm::Model::load(base.string());
    hot_peft.add_lora(llm::read_adapter(peft.string()));
    hot_gguf.add_lora(llm::read_adapter(gguf.string()));
    const std::vector<float> hp = run_llm(hot_peft), hg = run_llm(hot_gguf);
    EXPECT_EQ(hp, hg) << arch;                         // the same tensors in the same order
    EXPECT_GT(max_abs_diff(hp, plain), 1e-3) << arch;  // the adapter does something
    // Tolerances: logits are O(1); the graphs differ in summation order only (linear vs linear_blockq, merged W).
    EXPECT_LT(max_abs_diff(hp, trained), 1e-4) << arch;
    llm::merge_lora(base.string(), llm::read_adapter(gguf.string()), 1.0, merged.string());
    EXPECT_LT(max_abs_diff(run_llm(llm::Model::load(merged.string())), hp), 1e-4) << arch;
    // Merged and quantized: Q8_0's error, not a wrong merge.
    const fs::path q8 = dir() / (arch + "_merged_q8.gguf");
    llm::merge_lora(base.string(), llm::read_adapter(gguf.string()), 1.0, q8.string(), "q8_0");
    const llm::Model mq = llm::Model::load(q8.string());
    EXPECT_EQ(mq.config().weight_type, "q8_0");
    EXPECT_LT(max_abs_diff(run_llm(mq), hp), 0.05) << arch;
  }
}

TEST(Lora, PeftAndGgufFilesRoundTrip) {
  init();
  nn::set_seed(5);
  nn::LlamaModel m(tiny());
  m.add_lora({.r = 2, .alpha = 16, .dropout = 0.05, .targets = nn::lora_target_cells("q_proj,v_proj")});
  randomize_b(m, 0.1);
  llm::LoraAdapter a = adapter_of(m);
  a.dropout = 0.05;
  a.base_model = "base.gguf";
  const fs::path peft = dir() / "rt_peft", gguf = dir() / "rt.gguf";
  llm::write_peft(a, peft.string());
  llm::write_gguf_adapter(a, gguf.string());

  const nlohmann::json cfg = nlohmann::json::parse(io::read_file_bytes((peft / "adapter_config.json").string()));
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["r"], 2);
  EXPECT_EQ(cfg["lora_alpha"], 16.0);
  EXPECT_EQ(cfg["lora_dropout"], 0.05);
  EXPECT_EQ(cfg["target_modules"], nlohmann::json({"q_proj", "v_proj"}));
  EXPECT_EQ(cfg["base_model_name_or_path"], "base.gguf");
  const io::SafetensorsFile st = io::read_safetensors((peft / "adapter_model.safetensors").string());
  EXPECT_EQ(st.tensors.size(), 8u);  // 2 layers x 2 targets x (A, B)
  const Tensor& qa = st.tensors.at("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight");
  const Tensor& qb = st.tensors.at("base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight");
  const Tensor& vb = st.tensors.at("base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight");
  EXPECT_EQ(qa.shape(), Shape({2, 32}));
  EXPECT_EQ(qb.shape(), Shape({32, 2}));
  EXPECT_EQ(vb.shape(), Shape({16, 2}));
  // Hugging Face row order for q: GGUF row 2j + s of a head is HF row s * hd/2 + j (hd = 8).
  const Tensor& mine = a.tensors.at("blk.1.attn_q.weight").b;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t s = 0; s < 2; ++s)
        for (int64_t k = 0; k < 2; ++k)
          ASSERT_EQ(qb.data<float>()[(h * 8 + s * 4 + j) * 2 + k], mine.data<float>()[(h * 8 + 2 * j + s) * 2 + k]);

  const io::GgufFile g = io::GgufFile::open(gguf.string());
  EXPECT_EQ(g.get_string("general.type"), "adapter");
  EXPECT_EQ(g.get_string("adapter.type"), "lora");
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_float("adapter.lora.alpha"), 16.0);
  EXPECT_EQ(g.tensor("blk.0.attn_q.weight.lora_a").shape, std::vector<int64_t>({2, 32}));  // ne [in, r]
  EXPECT_EQ(g.tensor("blk.0.attn_v.weight.lora_b").shape, std::vector<int64_t>({16, 2}));  // ne [r, out]

  const llm::ModelConfig base{.arch = "llama",
                              .n_layer = 2,
                              .n_embd = 32,
                              .n_head = 4,
                              .n_head_kv = 2,
                              .head_dim = 8,
                              .n_ff = 64,
                              .rope_mode = "normal"};
  for (const fs::path& p : {peft, gguf}) {
    llm::LoraAdapter b = llm::read_adapter(p.string());
    llm::fit_adapter(b, base);
    EXPECT_EQ(b.r, 2);
    EXPECT_EQ(b.alpha, 16.0);
    EXPECT_EQ(b.targets, a.targets);
    ASSERT_EQ(b.tensors.size(), a.tensors.size());
    for (const auto& [name, pair] : a.tensors) {
      const llm::LoraPair& q = b.tensors.at(name);
      EXPECT_EQ(q.a.to_doubles(), pair.a.to_doubles()) << p << " " << name;
      EXPECT_EQ(q.b.to_doubles(), pair.b.to_doubles()) << p << " " << name;
    }
  }
  EXPECT_EQ(llm::read_adapter(peft.string()).dropout, 0.05);
  EXPECT_EQ(llm::read_adapter(peft.string()).base_model, "base.gguf");
}

TEST(Lora, BadAdaptersAreErrorsNamingWhat) {
  init();
  nn::set_seed(5);
  nn::LlamaModel m(tiny());
  m.add_lora({.r = 2, .alpha = 4, .targets = nn::lora_target_cells("q_proj,v_proj")});
  const llm::LoraAdapter a = adapter_of(m);
  auto err = [](const std::function<void()>& f) { return testing::error_of(f); };
  // Wrong base: other widths, fewer layers, another architecture.
  const llm::ModelConfig wide{.arch = "llama",
                              .n_layer = 2,
                              .n_embd = 48,
                              .n_head = 4,
                              .n_head_kv = 2,
                              .head_dim = 12,
                              .n_ff = 64,
                              .rope_mode = "normal"};
  llm::LoraAdapter b = a;
  EXPECT_NE(err([&] { llm::fit_adapter(b, wide); }).find("'blk.0.attn_q.weight'"), std::string::npos);
  llm::ModelConfig shallow = wide;
  shallow.n_layer = 1, shallow.n_embd = 32, shallow.head_dim = 8;
  b = a;
  EXPECT_NE(err([&] { llm::fit_adapter(b, shallow); }).find("'blk.1.attn_q.weight': the base model has 1 layers"),
            std::string::npos);
  llm::ModelConfig qwen = shallow;
  qwen.arch = "qwen2", qwen.n_layer = 2;
  b = a;
  EXPECT_NE(err([&] { llm::fit_adapter(b, qwen); }).find("architecture 'llama', the base model is 'qwen2'"),
            std::string::npos);
  // Missing half of a pair, unknown tensors, bad configs.
  const fs::path peft = dir() / "bad_peft";
  llm::write_peft(a, peft.string());
  const fs::path st_path = peft / "adapter_model.safetensors";
  io::SafetensorsFile st = io::read_safetensors(st_path.string());
  st.tensors.erase("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight");
  io::write_safetensors(st_path.string(), st.tensors);
  EXPECT_NE(err([&] { llm::read_adapter(peft.string()); }).find("'blk.1.attn_v.weight' has lora_a but no lora_b"),
            std::string::npos);
  st.tensors["base_model.model.model.layers.0.self_attn.rotary.lora_A.weight"] = Tensor::zeros({2, 32}, DType::f32);
  io::write_safetensors(st_path.string(), st.tensors);
  EXPECT_NE(err([&] { llm::read_adapter(peft.string()); }).find("'base_model.model.model.layers.0.self_attn.rotary"),
            std::string::npos);
  llm::write_peft(a, peft.string());
  const fs::path cfg = peft / "adapter_config.json";
  nlohmann::json j = nlohmann::json::parse(io::read_file_bytes(cfg.string()));
  auto write_cfg = [&](const nlohmann::json& v) { std::ofstream(cfg) << v.dump(); };
  nlohmann::json k = j;
  k["peft_type"] = "PREFIX_TUNING";
  write_cfg(k);
  EXPECT_NE(err([&] { llm::read_adapter(peft.string()); }).find("peft_type"), std::string::npos);
  k = j;
  k.erase("r");
  write_cfg(k);
  EXPECT_NE(err([&] { llm::read_adapter(peft.string()); }).find("key 'r'"), std::string::npos);
  k = j;
  k["r"] = 3;
  write_cfg(k);
  EXPECT_NE(err([&] { llm::read_adapter(peft.string()); }).find("r = 3, the tensors 2"), std::string::npos);
  k = j;
  k["use_dora"] = true;
  write_cfg(k);
  EXPECT_NE(err([&] { llm::read_adapter(peft.string()); }).find("'use_dora'"), std::string::npos);
  std::ofstream(cfg) << "{not json";
  EXPECT_NE(err([&] { llm::read_adapter(peft.string()); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(err([&] { llm::read_adapter((dir() / "missing").string()); }).find("does not exist"), std::string::npos);
  // A GGUF that is not an adapter.
  const fs::path model = dir() / "not_adapter.gguf";
  nn::set_seed(1);
  nn::LlamaModel plain(tiny());
  train::export_llama_gguf(plain, nullptr, model.string());
  EXPECT_NE(err([&] { llm::read_adapter(model.string()); }).find("general.type"), std::string::npos);
  // Bad LoRA settings.
  EXPECT_NE(err([] { nn::lora_target_cells("q_proj,x_proj"); }).find("'x_proj'"), std::string::npos);
  nn::LlamaModel again(tiny());
  EXPECT_NE(err([&] { again.add_lora({.r = 0, .targets = {"attn_q"}}); }).find("r > 0"), std::string::npos);
}

// A small trained base (train-lm, a few steps) and its tokenizer.
std::string trained_base(const std::string& text_path, int64_t steps, const nn::LlamaConfig& c, int64_t vocab) {
  const fs::path d = dir() / fmt::format("base_{}_{}", steps, c.dim);
  const fs::path out = d / "base.gguf";
  if (fs::exists(out)) return out.string();
  train::LmOptions o;
  o.model = c;
  o.data = text_path;
  o.train_tokenizer = true;
  o.vocab = vocab;
  o.batch = 8;
  o.steps = steps;
  o.warmup = 2;
  o.lr = 5e-3;
  o.eval_batches = 2;
  o.seed = 1;
  o.ckpt_dir = (d / "ckpt").string();
  o.out = out.string();
  train::train_lm(o);
  return out.string();
}

fs::path rhymes() {
  const fs::path p = dir() / "rhymes.txt";
  if (fs::exists(p)) return p;
  std::ofstream f(p);
  const char* names[] = {"one", "two", "three", "four", "five", "six", "seven", "eight"};
  for (int i = 0; i < 300; ++i)
    f << names[i % 8] << " little ducks went out one day, " << names[(i + 1) % 8] << " came back.\n";
  return p;
}

fs::path other_text() {
  const fs::path p = dir() / "other.txt";
  if (fs::exists(p)) return p;
  std::ofstream f(p);
  const char* names[] = {"red", "blue", "green", "white"};
  for (int i = 0; i < 300; ++i)
    f << "the " << names[i % 4] << " bottles fell from the wall, " << names[(i + 1) % 4] << " stayed.\n";
  return p;
}

// Fine-tuning trains the adapters only: after training every base parameter has its bits, the adapters moved, and
// the loss on the new text fell. The same with a bf16 and a Q8_0 base.
TEST(Lora, FinetuneTrainsTheAdaptersOnlyAndLowersTheLoss) {
  init();
  const nn::LlamaConfig c{.arch = "llama", .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 64, .ctx = 16};
  const std::string base = trained_base(rhymes().string(), 20, c, 300);

  std::unique_ptr<nn::LlamaModel> net = train::load_llama_base(base);
  net->add_lora({.r = 4, .alpha = 8, .dropout = 0.05, .targets = nn::lora_target_cells("all-linear")});
  std::map<std::string, std::vector<double>> before;
  for (auto& [name, t] : net->parameters_and_names()) before[name] = t->to_doubles();
  const llm::Tokenizer tok = llm::Tokenizer::from_gguf(io::GgufFile::open(base));
  train::LmTokens data;
  data.train = tok.encode(io::read_file_bytes(other_text().string()));
  train::split_validation(data, 0.1);
  train::LmRunOptions o;
  o.batch = 8;
  o.steps = 15;
  o.lr = 1e-2;
  o.weight_decay = 0;
  o.eval_batches = 2;
  o.ckpt_dir = (dir() / "ft_direct").string();
  fs::remove_all(o.ckpt_dir);
  const train::LmReport r = train::train_decoder(*net, data, 16, o, "test", {}, true);
  int moved = 0;
  for (auto& [name, t] : net->parameters_and_names()) {
    const bool adapter = name.find(".lora_") != std::string::npos;
    if (adapter) moved += t->to_doubles() != before.at(name);
    else EXPECT_EQ(t->to_doubles(), before.at(name)) << name;  // bit for bit
  }
  EXPECT_EQ(moved, 2 * 7 * 2);
  ASSERT_EQ(r.val_curve.size(), 2u);
  EXPECT_LT(r.val_curve.back().second, 0.95 * r.val_curve.front().second);

  // The library entry point with a frozen bf16 / Q8_0 base: the adapters still learn the new text.
  for (const std::string dt : {"f32", "bf16", "q8_0"}) {
    train::FinetuneOptions f;
    f.base = base;
    f.data = other_text().string();
    f.ctx = 16;
    f.batch = 8;
    f.steps = 15;
    f.lr = 1e-2;
    f.eval_batches = 2;
    f.base_dtype = dt;
    f.lora = {.r = 4, .alpha = 8, .targets = nn::lora_target_cells("q_proj,v_proj,down_proj")};
    f.lr = 2e-2;
    f.ckpt_dir = (dir() / ("ft_" + dt) / "ckpt").string();
    f.out_dir = (dir() / ("ft_" + dt)).string();
    fs::remove_all(f.out_dir);
    const train::FinetuneReport fr = train::finetune(f);
    EXPECT_LT(fr.val_loss, 0.95 * fr.base_val_loss) << dt;
    std::printf("[%s base] val loss %.3f -> %.3f\n", dt.c_str(), fr.base_val_loss, fr.val_loss);
    EXPECT_EQ(fr.trainable_params, 2 * 4 * ((32 + 32) + (32 + 16) + (64 + 32))) << dt;
    EXPECT_TRUE(fs::exists(fs::path(f.out_dir) / "adapter_model.safetensors")) << dt;
    EXPECT_TRUE(fs::exists(fr.gguf_adapter)) << dt;
    llm::Model hot = llm::Model::load(base);
    hot.add_lora(llm::read_adapter(f.out_dir));
    EXPECT_EQ(run_llm(hot).size(), 300u);
  }
}

// Chats: only the assistant turns are targets; the masked loss ignores the rest.
TEST(Lora, ChatDataTrainsOnAssistantTokens) {
  init();
  Tensor logits = Tensor::zeros({1, 2, 4}, DType::f32);
  logits.data<float>()[0] = 5;  // row 0 predicts token 0 well
  Tensor labels = Tensor::empty({1, 2}, DType::i64);
  labels.data<int64_t>()[0] = 0;
  labels.data<int64_t>()[1] = -1;  // not a target
  int64_t n = 0;
  const double ce = train::lm_cross_entropy(logits, labels, &n);
  EXPECT_EQ(n, 1);
  EXPECT_NEAR(ce, std::log(std::exp(5.0) + 3.0) - 5.0, 1e-9);

  const nn::LlamaConfig c{.arch = "llama", .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 64, .ctx = 16};
  const std::string base = trained_base(rhymes().string(), 20, c, 300);
  const fs::path chats = dir() / "chats.jsonl";
  {
    std::ofstream f(chats);
    const char* colors[] = {"red", "blue", "green", "white"};
    for (int i = 0; i < 200; ++i)
      f << nlohmann::json{{"messages",
                           {{{"role", "user"}, {"content", fmt::format("color {}?", i % 4)}},
                            {{"role", "assistant"}, {"content", colors[i % 4]}}}}}
               .dump()
        << "\n";
  }
  train::FinetuneOptions f;
  f.base = base;
  f.data = chats.string();
  f.chat_template = "chatml";
  f.ctx = 16;
  f.batch = 8;
  f.steps = 40;
  f.lr = 2e-2;
  f.eval_batches = 2;
  f.lora = {.r = 4, .alpha = 8, .targets = nn::lora_target_cells("all-linear")};
  f.out_dir = (dir() / "ft_chat").string();
  f.ckpt_dir = f.out_dir + "/ckpt";
  fs::remove_all(f.out_dir);
  const train::FinetuneReport r = train::finetune(f);
  std::printf("[chat] assistant-token val loss %.3f -> %.3f\n", r.base_val_loss, r.val_loss);
  EXPECT_LT(r.val_loss, 0.93 * r.base_val_loss);
  // A template-less base without --chat-template, and conversations without an assistant turn, are refused.
  f.chat_template = "";
  EXPECT_NE(testing::error_of([&] { train::finetune(f); }).find("chat-template"), std::string::npos);
  std::ofstream(chats) << R"({"messages": [{"role": "user", "content": "hi"}]})"
                       << "\n";
  f.chat_template = "chatml";
  EXPECT_NE(testing::error_of([&] { train::finetune(f); }).find("no assistant message"), std::string::npos);
  std::ofstream(chats) << R"({"messages": [{"role": "robot", "content": "hi"}]})"
                       << "\n";
  EXPECT_NE(testing::error_of([&] { train::finetune(f); }).find("role 'robot'"), std::string::npos);
}

std::vector<int32_t> greedy(const llm::Model& m, const std::vector<int32_t>& prompt, int n) {
  llm::Session s(m, {.ctx = 128});
  std::vector<float> logits = s.feed(prompt);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    logits = s.feed(std::vector<int32_t>{next});
  }
  return out;
}

// spore finetune BASE with BASE a Hugging Face folder: the shipped model (data/lm/shakespeare.gguf, f16) exported as a
// folder (export_llama_hf: f32 safetensors holding the same values, llama's q/k rows in HF order) and tuned with the
// same options and seed as the GGUF gives the same adapter, bit for bit: load_llama_base takes the folder's q/k rows
// back into GGUF's order (a permutation, exact), f16 -> f32 widening is exact, the config's rms_norm_eps (1e-5 in the
// JSON, float(1e-5) in the GGUF) and rope_theta are taken at f32 precision from both, and tokenizer.json tokenizes as
// the GGUF's metadata, so the two runs compute the same numbers. Either adapter on either base then gives the same
// greedy tokens (the bases' logits differ only in summation order: f16 against f32 weight kernels, rope pairing). Bad
// folders are errors naming the file or field.
TEST(Lora, FinetuneFromAHuggingFaceFolderWritesTheGgufBasesAdapter) {
  init();
  const std::string gguf = testing::repo_root() + "/data/lm/shakespeare.gguf";
  const fs::path hf = dir() / "shakespeare_hf";
  fs::remove_all(hf);
  {
    std::unique_ptr<nn::LlamaModel> net = train::load_llama_base(gguf);
    train::export_llama_hf(*net, llm::Tokenizer::from_gguf(io::GgufFile::open(gguf)), hf.string());
  }
  // As train-lm --hf-out writes it beside the GGUF: epsilon 1e-5 as a double, where the GGUF holds float(1e-5).
  {
    nlohmann::json j = nlohmann::json::parse(io::read_file_bytes((hf / "config.json").string()));
    ASSERT_NEAR(j["rms_norm_eps"].get<double>(), 1e-5, 1e-12);
    j["rms_norm_eps"] = 1e-5;
    std::ofstream(hf / "config.json") << j.dump(2);
  }
  // The folder loads as the same parameters (q/k rows permuted back exactly).
  {
    std::unique_ptr<nn::LlamaModel> a = train::load_llama_base(gguf), b = train::load_llama_base(hf.string());
    EXPECT_EQ(a->config().rms_eps, b->config().rms_eps);
    EXPECT_EQ(a->config().rope_theta, b->config().rope_theta);
    EXPECT_EQ(a->config().ctx, b->config().ctx);
    auto pa = a->parameters_and_names(), pb = b->parameters_and_names();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      ASSERT_EQ(pa[i].first, pb[i].first);
      EXPECT_EQ(pa[i].second->to_doubles(), pb[i].second->to_doubles()) << pa[i].first;
    }
  }
  auto tune = [&](const std::string& base, const std::string& tag) {
    train::FinetuneOptions f;
    f.base = base;
    f.data = rhymes().string();
    f.ctx = 32;
    f.batch = 4;
    f.steps = 4;
    f.warmup = 1;
    f.lr = 1e-2;
    f.eval_batches = 1;
    f.seed = 3;
    f.lora = {.r = 4, .alpha = 8, .dropout = 0.05, .targets = nn::lora_target_cells("all-linear")};
    f.out_dir = (dir() / ("ft_hf_" + tag)).string();
    f.ckpt_dir = f.out_dir + "/ckpt";
    fs::remove_all(f.out_dir);
    const train::FinetuneReport r = train::finetune(f);
    EXPECT_EQ(r.steps, 4) << tag;
    return f.out_dir;
  };
  const std::string from_gguf = tune(gguf, "gguf"), from_hf = tune(hf.string(), "folder");
  const llm::LoraAdapter ag = llm::read_peft(from_gguf), ah = llm::read_peft(from_hf);
  EXPECT_FALSE(ag.permuted_qk);  // PEFT files hold HF's row order
  ASSERT_EQ(ag.tensors.size(), 4u * 7u);
  ASSERT_EQ(ah.tensors.size(), ag.tensors.size());
  for (const auto& [name, p] : ag.tensors) {
    ASSERT_TRUE(ah.tensors.count(name)) << name;
    EXPECT_EQ(p.a.to_doubles(), ah.tensors.at(name).a.to_doubles()) << name << " lora_a";
    EXPECT_EQ(p.b.to_doubles(), ah.tensors.at(name).b.to_doubles()) << name << " lora_b";
  }
  EXPECT_EQ(io::read_file_bytes(from_gguf + "/adapter.gguf"), io::read_file_bytes(from_hf + "/adapter.gguf"));
  EXPECT_EQ(ah.base_model, "shakespeare_hf");

  // spore generate --lora: the folder's adapter on the folder and on the GGUF, the GGUF's on the folder.
  llm::Model mg = llm::Model::load(gguf), mh = llm::Model::load(hf.string()), mh2 = llm::Model::load(hf.string());
  mg.add_lora(llm::read_adapter(from_hf));
  mh.add_lora(llm::read_adapter(from_hf));
  mh2.add_lora(llm::read_adapter(from_gguf + "/adapter.gguf"));
  const std::vector<int32_t> prompt = mg.tokenizer().encode("ROMEO:\none little ducks went out one day,");
  const std::vector<int32_t> want = greedy(mg, prompt, 32);
  EXPECT_EQ(greedy(mh, prompt, 32), want);
  EXPECT_EQ(greedy(mh2, prompt, 32), want);
  llm::Model plain = llm::Model::load(gguf);
  EXPECT_NE(greedy(plain, prompt, 32), want);  // the adapter changed something

  // Bad folders: errors name the file or the field.
  auto bad_copy = [&](const std::string& tag) {
    const fs::path d = dir() / ("bad_hf_" + tag);
    fs::remove_all(d);
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(hf)) fs::copy(e.path(), d / e.path().filename());
    return d;
  };
  auto finetune_error = [&](const fs::path& base) {
    return testing::error_of([&] {
      train::FinetuneOptions f;
      f.base = base.string();
      f.data = rhymes().string();
      f.steps = 1;
      f.out_dir = (dir() / "ft_bad").string();
      train::finetune(f);
    });
  };
  const fs::path no_config = bad_copy("no_config");
  fs::remove(no_config / "config.json");
  EXPECT_NE(finetune_error(no_config).find("config.json"), std::string::npos) << finetune_error(no_config);
  const fs::path gpt2 = bad_copy("gpt2");
  {
    nlohmann::json j = nlohmann::json::parse(io::read_file_bytes((gpt2 / "config.json").string()));
    j["model_type"] = "gpt2";
    j["architectures"] = {"GPT2LMHeadModel"};
    std::ofstream(gpt2 / "config.json") << j.dump();
  }
  const std::string e1 = finetune_error(gpt2);
  EXPECT_NE(e1.find("model_type 'gpt2'"), std::string::npos) << e1;
  const fs::path qwen = bad_copy("qwen2");  // a llama checkpoint that says qwen2: no q/k/v biases
  {
    nlohmann::json j = nlohmann::json::parse(io::read_file_bytes((qwen / "config.json").string()));
    j["model_type"] = "qwen2";
    std::ofstream(qwen / "config.json") << j.dump();
  }
  const std::string e2 = finetune_error(qwen);
  EXPECT_NE(e2.find("qwen2 without q/k/v biases"), std::string::npos) << e2;
  const fs::path wide = bad_copy("wide");  // config.json and the tensors disagree
  {
    nlohmann::json j = nlohmann::json::parse(io::read_file_bytes((wide / "config.json").string()));
    j["intermediate_size"] = 640;
    std::ofstream(wide / "config.json") << j.dump();
  }
  const std::string e3 = finetune_error(wide);
  EXPECT_NE(e3.find("mlp.gate_proj.weight"), std::string::npos) << e3;
  const fs::path no_heads = bad_copy("no_heads");
  {
    nlohmann::json j = nlohmann::json::parse(io::read_file_bytes((no_heads / "config.json").string()));
    j.erase("num_attention_heads");
    std::ofstream(no_heads / "config.json") << j.dump();
  }
  const std::string e4 = finetune_error(no_heads);
  EXPECT_NE(e4.find("num_attention_heads"), std::string::npos) << e4;
  const fs::path no_tok = bad_copy("no_tok");
  fs::remove(no_tok / "tokenizer.json");
  const std::string e5 = finetune_error(no_tok);
  EXPECT_NE(e5.find("tokenizer.json"), std::string::npos) << e5;
}

// The issue's LoRA acceptance at test size: the Shakespeare model spore trained (data/lm/shakespeare.gguf, shipped)
// tuned on KJV text for 20 steps of 8 x 64 tokens: the KJV validation loss falls by at least 20% (measured: 5.17 ->
// 3.59, -30.6%), and the base's file is only read.
TEST(Lora, KjvValidationLossFallsOnAShakespeareBase) {
  SPORE_SHARED_DATA_DIR(data, "text-corpus");
  init();
  const std::string kjv = io::read_file_bytes((fs::path(data) / "kjv-bible.txt").string());
  ASSERT_GT(kjv.size(), 2100000u);
  const fs::path k = dir() / "kjv_train.txt", kv = dir() / "kjv_val.txt";
  std::ofstream(k, std::ios::binary) << kjv.substr(100000, 200000);
  std::ofstream(kv, std::ios::binary) << kjv.substr(2000000, 40000);
  const std::string base = testing::repo_root() + "/data/lm/shakespeare.gguf";
  const std::string before = io::read_file_bytes(base);
  train::FinetuneOptions f;
  f.base = base;
  f.data = k.string();
  f.val_data = kv.string();
  f.batch = 8;
  f.ctx = 64;
  f.steps = 20;
  f.warmup = 2;
  f.lr = 1e-2;
  f.eval_batches = 4;
  f.lora = {.r = 8, .alpha = 16, .dropout = 0.05, .targets = nn::lora_target_cells("all-linear")};
  f.out_dir = (dir() / "ft_kjv").string();
  f.ckpt_dir = f.out_dir + "/ckpt";
  fs::remove_all(f.out_dir);
  const train::FinetuneReport r = train::finetune(f);
  std::printf("[kjv] base val loss %.3f -> %.3f (%.1f%%), trainable %lld of %lld\n", r.base_val_loss, r.val_loss,
              100.0 * (r.val_loss - r.base_val_loss) / r.base_val_loss, static_cast<long long>(r.trainable_params),
              static_cast<long long>(r.all_params));
  EXPECT_LT(r.val_loss, 0.8 * r.base_val_loss);
  EXPECT_EQ(io::read_file_bytes(base), before);
}

}  // namespace
}  // namespace spore
