// Language-model pretraining (train/lm.h).
#include "train/lm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/file_util.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_writer.h"
#include "io/safetensors.h"
#include "llm/bpe_train.h"
#include "llm/lora.h"
#include "llm/tokenizer.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "ops/ops.h"
#include "parallel/communicator.h"
#include "train/model.h"
#include "train/model_parallel.h"
#include "train/optimizer.h"
#include "train/pipeline.h"
#include "train/tensor_parallel.h"

namespace spore::train {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

}  // namespace

std::string read_text_file(const std::string& path, const char* what) {
  SPORE_CHECK(fs::is_regular_file(path), ErrorCode::not_found, "{} '{}' does not exist or is not a file", what, path);
  std::string s = io::read_file_bytes(path);
  SPORE_CHECK(!s.empty(), ErrorCode::invalid_argument, "{} '{}' is empty", what, path);
  return s;
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::pair<Tensor, Tensor> lm_windows(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& mask,
                                     const std::vector<int64_t>& offsets, int64_t T) {
  const auto B = static_cast<int64_t>(offsets.size());
  Tensor x = Tensor::empty({B, T}, DType::i64), y = Tensor::empty({B, T}, DType::i64);
  int64_t* xp = x.data<int64_t>();
  int64_t* yp = y.data<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const size_t at = static_cast<size_t>(offsets[static_cast<size_t>(b)] + t);
      xp[b * T + t] = tokens[at];
      yp[b * T + t] = mask.empty() || mask[at + 1] ? tokens[at + 1] : -1;
    }
  return {x, y};
}

namespace {

// The model and the data (token counts) a checkpoint belongs to.
std::string model_key(const nn::LlamaConfig& c) {
  return fmt::format("{} vocab {} dim {} layers {} heads {} kv_heads {} ffn {} ctx {} tied {} rope_theta {}", c.arch,
                     c.vocab, c.dim, c.layers, c.heads, c.kv_heads, c.ffn, c.ctx, c.tie_embeddings, c.rope_theta);
}
}  // namespace

int64_t lm_window_offset(uint64_t seed, uint64_t m, int64_t B, int64_t b, int64_t n_train, int64_t T) {
  return static_cast<int64_t>(splitmix64(splitmix64(seed) ^ (m * static_cast<uint64_t>(B) + static_cast<uint64_t>(b))) %
                              static_cast<uint64_t>(n_train - T - 1));
}

std::string lm_run_key(const LmRunOptions& o) {
  // Not the mode: graph and PyNative give the same bits, so a run may resume in the other one.
  // Nor the rank count: with the same grad_shards, data parallelism gives the same bits on any.
  return fmt::format("batch {} steps {} warmup {} accum {} lr {} min_lr_ratio {} clip {} weight_decay {} seed {}",
                     o.batch, o.steps, o.warmup, o.accum, o.lr, o.min_lr_ratio, o.clip, o.weight_decay, o.seed) +
         (o.data_parallel ? fmt::format(" grad_shards {}", o.grad_shards) : std::string()) +
         (o.amp_level == "O0" ? std::string() : fmt::format(" amp {} {}", o.amp_level, dtype_name(o.amp_dtype)));
}

bool resume_lm_run(const LmRunOptions& o, const std::string& data_key,
                   const std::function<void(const std::string&)>& load, const std::function<int64_t()>& step,
                   LmReport& rep, const std::function<void(const LmProgress&)>& progress) {
  const fs::path dir(o.ckpt_dir);
  const fs::path ckpt = dir / "checkpoint.safetensors", state_path = dir / "state.json";
  if (!fs::exists(state_path) || !fs::exists(ckpt)) return false;
  json st;
  try {
    st = json::parse(read_text_file(state_path.string(), "checkpoint state"));
  } catch (const json::exception& e) {
    SPORE_FAIL(ErrorCode::parse_error, "checkpoint state '{}' is not valid JSON: {}", state_path.string(), e.what());
  }
  SPORE_CHECK(st.value("model", "") == data_key && st.value("run", "") == lm_run_key(o), ErrorCode::invalid_argument,
              "checkpoint '{}' was written by another run ({}; {}), not this one ({}; {}): use another --ckpt-dir",
              o.ckpt_dir, st.value("model", ""), st.value("run", ""), data_key, lm_run_key(o));
  load(ckpt.string());
  rep.step_losses = st.at("losses").get<std::vector<double>>();
  rep.val_curve = st.at("val").get<std::vector<std::pair<int64_t, double>>>();
  SPORE_CHECK(static_cast<int64_t>(rep.step_losses.size()) == step(), ErrorCode::parse_error,
              "checkpoint state '{}' has {} losses for step {}", state_path.string(), rep.step_losses.size(), step());
  LmProgress p;
  p.kind = "resume";
  p.step = step();
  p.steps = o.steps;
  progress(p);
  return true;
}

void commit_lm_checkpoint(const LmRunOptions& o, const std::string& data_key, int64_t step, const LmReport& rep) {
  const fs::path dir(o.ckpt_dir);
  const fs::path ckpt = dir / "checkpoint.safetensors";
  fs::rename(ckpt.string() + ".tmp", ckpt);
  const json st{
      {"model", data_key}, {"run", lm_run_key(o)}, {"step", step}, {"losses", rep.step_losses}, {"val", rep.val_curve}};
  io::write_file_atomic((dir / "state.json").string(), st.dump());
}

namespace {

// The loss curve: every step's training loss and the validation losses, on one linear scale.
void write_svg(const std::string& path, const std::vector<double>& train,
               const std::vector<std::pair<int64_t, double>>& val, const std::string& title) {
  const double W = 720, H = 420, L = 60, R = 20, T = 30, Bm = 50;
  double lo = 1e300, hi = -1e300;
  for (double v : train) lo = std::min(lo, v), hi = std::max(hi, v);
  for (const auto& [s, v] : val) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(hi > lo)) hi = lo + 1;
  const double n = std::max<double>(2, static_cast<double>(train.size()));
  auto X = [&](double step) { return L + (W - L - R) * (step - 1) / (n - 1); };
  auto Y = [&](double v) { return T + (H - T - Bm) * (hi - v) / (hi - lo); };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"18\">{}: loss per step (train: blue, validation: orange)</text>\n"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
      W, H, L, title, L, T, L, H - Bm, L, H - Bm, W - R, H - Bm);
  for (int i = 0; i <= 4; ++i) {
    const double v = lo + (hi - lo) * i / 4;
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3f}</text>\n", L - 4, Y(v) + 4, v);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\">1</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">step {}</text>\n", L,
                   H - Bm + 16, W - R, H - Bm + 16, train.size());
  std::string pts;
  for (size_t i = 0; i < train.size(); ++i)
    pts += fmt::format("{:.1f},{:.1f} ", X(static_cast<double>(i + 1)), Y(train[i]));
  s += fmt::format("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.2\" points=\"{}\"/>\n", pts);
  pts.clear();
  for (const auto& [st, v] : val)
    pts += fmt::format("{:.1f},{:.1f} ", X(std::max<double>(1, static_cast<double>(st))), Y(v));
  s += fmt::format("<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" points=\"{}\"/>\n", pts);
  for (const auto& [st, v] : val)
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"#ff7f0e\"/>\n",
                     X(std::max<double>(1, static_cast<double>(st))), Y(v));
  s += "</svg>\n";
  io::write_file_atomic(path, s);
}

}  // namespace

double lm_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t* count) {
  SPORE_CHECK(logits.rank() == 3 && logits.dtype() == DType::f32 && labels.rank() == 2 &&
                  labels.shape()[0] == logits.shape()[0] && labels.shape()[1] == logits.shape()[1],
              ErrorCode::shape_mismatch, "lm_cross_entropy: logits f32 [B, T, V] and labels [B, T], got {} and {}",
              shape_str(logits.shape()), shape_str(labels.shape()));
  const Tensor lg = logits.contiguous();
  const Tensor lb = labels.dtype() == DType::i64 ? labels.contiguous() : labels;
  const int64_t rows = lg.shape()[0] * lg.shape()[1], V = lg.shape()[2];
  const float* p = lg.data<float>();
  const auto ids = lb.to_doubles();
  double total = 0;
  int64_t n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto id = static_cast<int64_t>(ids[static_cast<size_t>(r)]);
    if (id < 0) continue;  // not a target
    SPORE_CHECK(id < V, ErrorCode::invalid_argument, "lm_cross_entropy: label {} outside [0, {})", id, V);
    const float* row = p + r * V;
    double mx = row[0];
    for (int64_t j = 1; j < V; ++j) mx = std::max(mx, static_cast<double>(row[j]));
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(row[j]) - mx);
    total += mx + std::log(sum) - static_cast<double>(row[id]);
    ++n;
  }
  if (count) *count = n;
  return n > 0 ? total / static_cast<double>(n) : 0.0;
}

void write_loss_svg(const std::string& path, const LmReport& r, const std::string& title) {
  write_svg(path, r.step_losses, r.val_curve, title);
}

void split_validation(LmTokens& t, double val_fraction) {
  const auto n_val = static_cast<size_t>(static_cast<double>(t.train.size()) * val_fraction);
  const auto cut = static_cast<std::ptrdiff_t>(t.train.size() - n_val);
  t.val.assign(t.train.begin() + cut, t.train.end());
  t.train.resize(static_cast<size_t>(cut));
  if (!t.train_mask.empty()) {
    t.val_mask.assign(t.train_mask.begin() + cut, t.train_mask.end());
    t.train_mask.resize(static_cast<size_t>(cut));
  }
}

void export_llama_gguf(nn::LlamaModel& m, const io::GgufFile* tokenizer, const std::string& path,
                       const std::string& type) {
  // general.file_type is llama.cpp's LLAMA_FTYPE: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32.
  struct OutType {
    const char* name;
    io::GgmlType ggml;
    int64_t file_type;
  };
  static constexpr OutType kTypes[] = {{"f32", io::GgmlType::f32, 0},
                                       {"f16", io::GgmlType::f16, 1},
                                       {"bf16", io::GgmlType::bf16, 32},
                                       {"q8_0", io::GgmlType::q8_0, 7}};
  const OutType* out = nullptr;
  for (const OutType& t : kTypes)
    if (type == t.name) out = &t;
  SPORE_CHECK(out != nullptr, ErrorCode::invalid_argument,
              "export_llama_gguf: tensor type '{}' is not one of f32, f16, bf16, q8_0", type);
  const nn::LlamaConfig& c = m.config();
  io::GgufWriter w;
  const std::string a = c.arch + ".";
  using VT = io::GgufValueType;
  w.add_string("general.architecture", c.arch);
  w.add_string("general.name", "spore train-lm");
  w.add_int("general.file_type", out->file_type, VT::u32);
  w.add_int(a + "context_length", c.ctx, VT::u32);
  w.add_int(a + "embedding_length", c.dim, VT::u32);
  w.add_int(a + "block_count", c.layers, VT::u32);
  w.add_int(a + "feed_forward_length", c.ffn, VT::u32);
  w.add_int(a + "attention.head_count", c.heads, VT::u32);
  w.add_int(a + "attention.head_count_kv", c.kv_heads, VT::u32);
  w.add_int(a + "rope.dimension_count", c.head_dim(), VT::u32);
  w.add_float(a + "rope.freq_base", c.rope_theta);
  w.add_float(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
  w.add_int(a + "vocab_size", c.vocab, VT::u32);
  if (tokenizer)
    for (const auto& [key, value] : tokenizer->metadata())
      if (key.rfind("tokenizer.", 0) == 0) w.add(key, value);
  for (const auto& [name, t] : m.parameters_and_names()) {
    // q8_0 blocks run along a row: rows whose length is not a multiple of 32 stay f16.
    io::GgmlType as = t->rank() < 2 ? io::GgmlType::f32 : out->ggml;
    if (as == io::GgmlType::q8_0 && t->dim(-1) % 32 != 0) as = io::GgmlType::f16;
    w.add_tensor(name, *t, as);
  }
  w.write(path);
}

std::string llama_hf_name(const std::string& name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  const std::string pre = "blk.";
  const size_t dot = name.find('.', pre.size());
  const size_t last = name.rfind('.');
  if (name.rfind(pre, 0) == 0 && dot != std::string::npos && last > dot) {
    const std::string layer = name.substr(pre.size(), dot - pre.size());
    const std::string cell = name.substr(dot + 1, last - dot - 1), kind = name.substr(last);
    const std::string p = "model.layers." + layer + ".";
    if (cell == "attn_norm") return p + "input_layernorm" + kind;
    if (cell == "ffn_norm") return p + "post_attention_layernorm" + kind;
    for (const nn::LlamaProjection& proj : nn::llama_projections())
      if (cell == proj.cell) return p + proj.hf_module + kind;
  }
  SPORE_FAIL(ErrorCode::internal, "no Hugging Face name for parameter '{}'", name);
}

void export_llama_hf(nn::LlamaModel& m, const llm::Tokenizer& tokenizer, const std::string& dir) {
  const nn::LlamaConfig& c = m.config();
  SPORE_CHECK(tokenizer.vocab_size() == c.vocab, ErrorCode::invalid_argument,
              "export_llama_hf: the tokenizer has {} tokens, the model {}", tokenizer.vocab_size(), c.vocab);
  fs::create_directories(dir);
  const bool qwen2 = c.arch == "qwen2";
  auto id_or_null = [](int32_t id) { return id >= 0 ? json(id) : json(nullptr); };
  nlohmann::ordered_json cfg{{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                             {"model_type", c.arch},
                             {"hidden_size", c.dim},
                             {"intermediate_size", c.ffn},
                             {"num_attention_heads", c.heads},
                             {"num_key_value_heads", c.kv_heads},
                             {"num_hidden_layers", c.layers},
                             {"head_dim", c.head_dim()},
                             {"vocab_size", c.vocab},
                             {"max_position_embeddings", c.ctx},
                             {"rms_norm_eps", c.rms_eps},
                             {"rope_theta", c.rope_theta},
                             {"rope_scaling", nullptr},
                             {"hidden_act", "silu"},
                             {"attention_bias", c.qkv_bias()},
                             {"attention_dropout", 0.0},
                             {"tie_word_embeddings", c.tie_embeddings},
                             {"bos_token_id", id_or_null(tokenizer.bos_id())},
                             {"eos_token_id", id_or_null(tokenizer.eos_id())},
                             {"torch_dtype", "float32"},
                             {"use_cache", true}};
  if (qwen2) cfg.update({{"use_sliding_window", false}, {"sliding_window", c.ctx}, {"max_window_layers", c.layers}});
  else cfg.update({{"mlp_bias", false}, {"pretraining_tp", 1}});
  io::write_file_atomic((fs::path(dir) / "config.json").string(), cfg.dump(2) + "\n");
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, t] : m.parameters_and_names()) {
    Tensor w = t->contiguous();
    // GGUF llama files (and train-lm's training) hold q/k rows in rope's adjacent-pair order; HF in halves.
    if (!qwen2 && t->rank() == 2) {
      if (name.find(".attn_q.weight") != std::string::npos) w = llm::permute_qk_rows(w, c.heads, false);
      if (name.find(".attn_k.weight") != std::string::npos) w = llm::permute_qk_rows(w, c.kv_heads, false);
    }
    tensors.emplace(llama_hf_name(name), w);
  }
  io::write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  tokenizer.write_hf(dir);
}

LmReport train_decoder(nn::LlamaModel& net, const LmTokens& data, int64_t ctx, const LmRunOptions& o,
                       const std::string& key, const std::function<void(const LmProgress&)>& on_progress,
                       bool eval_at_start) {
  auto progress = [&](const LmProgress& p) {
    if (on_progress) on_progress(p);
  };
  SPORE_CHECK(!o.ckpt_dir.empty(), ErrorCode::invalid_argument, "training needs a checkpoint directory");
  SPORE_CHECK(o.batch > 0 && o.steps > 0 && o.accum > 0 && o.warmup >= 0 && o.warmup < o.steps && o.eval_every >= 0 &&
                  o.eval_batches > 0,
              ErrorCode::invalid_argument,
              "training needs batch, steps, accum, eval batches > 0 and 0 <= warmup < steps (batch {}, steps {}, "
              "accum {}, eval batches {}, warmup {})",
              o.batch, o.steps, o.accum, o.eval_batches, o.warmup);
  SPORE_CHECK(std::isfinite(o.lr) && o.lr > 0 && o.clip >= 0 && o.weight_decay >= 0 && o.min_lr_ratio >= 0 &&
                  o.min_lr_ratio <= 1,
              ErrorCode::invalid_argument,
              "training needs lr > 0, clip >= 0, weight decay >= 0, min lr ratio in [0, 1]");
  SPORE_CHECK(o.mode == "graph" || o.mode == "pynative", ErrorCode::invalid_argument,
              "mode '{}' is not graph or pynative", o.mode);
  SPORE_CHECK(ctx > 0 && ctx <= net.config().ctx, ErrorCode::invalid_argument,
              "the training window {} must be in [1, the model's context {}]", ctx, net.config().ctx);
  // Data parallel: only rank 0 writes files (the others wait at a barrier where they need them).
  parallel::Communicator* comm = o.data_parallel ? &parallel::world() : nullptr;
  const bool writer = comm == nullptr || comm->rank() == 0;
  fs::create_directories(o.ckpt_dir);
  const fs::path dir(o.ckpt_dir);
  const fs::path ckpt = dir / "checkpoint.safetensors";
  const std::vector<int32_t>& train_tokens = data.train;
  const std::vector<int32_t>& val_tokens = data.val;
  const int64_t T = ctx, B = o.batch;
  const auto n_train = static_cast<int64_t>(train_tokens.size()), n_val = static_cast<int64_t>(val_tokens.size());
  SPORE_CHECK(n_train > T + 1, ErrorCode::invalid_argument,
              "the training text has {} tokens, too few for windows of ctx {} + 1", n_train, T);
  SPORE_CHECK(n_val > T + 1, ErrorCode::invalid_argument,
              "the validation text has {} tokens, too few for one window of ctx {} + 1", n_val, T);

  AdamOptions ao;
  ao.lr = o.lr;
  ao.beta2 = 0.95;
  ao.weight_decay = o.weight_decay;
  std::unique_ptr<Optimizer> opt = make_adamw(trainable_names(net), ao);
  opt->set_schedule(warmup_lr(o.warmup, cosine_lr(o.lr, o.steps - o.warmup, o.lr * o.min_lr_ratio)));
  const bool masked = !data.train_mask.empty();
  nn::SoftmaxCrossEntropyWithLogits ce(true, masked ? "none" : "mean");
  LossFn loss_fn = [&ce, masked](const Tensor& logits, const Tensor& labels) {
    const int64_t V = logits.shape()[2];
    const Tensor lg = ops::reshape(logits, {-1, V}), lb = ops::reshape(labels, {-1});
    if (!masked) return ce(lg, lb);
    // Labels -1 are not targets: the mean over the others (at least one counted, so a window without targets
    // gives 0).
    const Tensor zero = Tensor::scalar(0, DType::i64);
    const Tensor keep = ops::ge(lb, zero);
    const Tensor per = ce(lg, ops::where(keep, lb, zero));
    const Tensor m = ops::cast(keep, per.dtype());
    return ops::div(ops::reduce_sum(ops::mul(per, m)),
                    ops::maximum(ops::reduce_sum(m), Tensor::scalar(1, per.dtype())));
  };
  ModelOptions mo;
  mo.mode = o.mode;
  mo.grad_accumulation = o.accum;
  mo.clip_norm = o.clip;
  mo.seed = o.seed;
  mo.amp_level = o.amp_level;
  mo.amp_dtype = o.amp_dtype;
  if (comm)
    mo.parallel = {
        .parallel_mode = "data_parallel", .grad_shards = o.grad_shards, .comm = comm, .bucket_mb = o.bucket_mb};
  Model model(net, loss_fn, *opt, {}, mo);
  // This rank's rows of each step's batch (all of them stand-alone).
  const int64_t rows = comm ? B / comm->size() : B, first_row = comm ? comm->rank() * rows : 0;
  SPORE_CHECK(!comm || B % model.grad_shards() == 0, ErrorCode::invalid_argument,
              "data parallel: batch {} does not split into grad_shards {} equal shards", B, model.grad_shards());

  LmReport rep;
  rep.vocab = net.config().vocab;
  rep.params = net.num_parameters();
  rep.train_tokens = n_train;
  rep.val_tokens = n_val;
  const std::string data_key = fmt::format("{}; data {} + {} tokens", key, n_train, n_val);
  resume_lm_run(
      o, data_key, [&](const std::string& path) { model.load_checkpoint(path); }, [&] { return model.global_step(); },
      rep, progress);
  rep.start_step = model.global_step();

  auto save = [&] {
    model.save_checkpoint(ckpt.string() + ".tmp");  // data parallel: rank 0 writes, everyone waits for it
    if (writer) commit_lm_checkpoint(o, data_key, model.global_step(), rep);
    if (comm) comm->barrier();
  };
  // Validation windows: the first ones of the validation tokens, in batches of at most B; the mean over their
  // targets.
  const int64_t n_windows = std::min<int64_t>(o.eval_batches * B, (n_val - 1) / T);
  auto evaluate = [&] {
    double total = 0;
    int64_t targets = 0;
    for (int64_t w0 = 0; w0 < n_windows; w0 += B) {
      std::vector<int64_t> offs;
      for (int64_t w = w0; w < std::min(n_windows, w0 + B); ++w) offs.push_back(w * T);
      auto [x, y] = lm_windows(val_tokens, data.val_mask, offs, T);
      int64_t n = 0;
      const double mean = lm_cross_entropy(model.predict(x), y, &n);
      total += mean * static_cast<double>(n);
      targets += n;
    }
    SPORE_CHECK(targets > 0, ErrorCode::invalid_argument,
                "the validation windows hold no target tokens (no assistant turns in the first {} windows)", n_windows);
    return total / static_cast<double>(targets);
  };
  if (eval_at_start && model.global_step() == 0) {
    LmProgress e;
    e.kind = "eval";
    e.steps = o.steps;
    e.val_loss = evaluate();
    e.val_ppl = std::exp(e.val_loss);
    e.train_loss = std::nan("");
    e.train_ppl = std::nan("");
    rep.val_curve.emplace_back(0, e.val_loss);
    progress(e);
  }

  LmStepLog log(o, rep, progress, evaluate, save);
  const int64_t last = o.stop_after > 0 ? std::min(o.steps, o.stop_after) : o.steps;
  for (int64_t step = model.global_step(); step < last; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    double loss = 0;
    for (int64_t i = 0; i < o.accum; ++i) {
      const uint64_t m = static_cast<uint64_t>(step * o.accum + i);
      std::vector<int64_t> offs(static_cast<size_t>(rows));
      for (int64_t b = first_row; b < first_row + rows; ++b)
        offs[static_cast<size_t>(b - first_row)] = lm_window_offset(o.seed, m, B, b, n_train, T);
      auto [x, y] = lm_windows(train_tokens, data.train_mask, offs, T);
      loss += model.train_step(x, y);
    }
    loss /= static_cast<double>(o.accum);
    log.step_done(step, last, loss, opt->lr_at(step),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), B * T * o.accum);
  }
  log.finish(model.global_step(), ckpt.string());
  return rep;
}

void LmStepLog::step_done(int64_t step, int64_t last, double loss, double lr, double seconds, int64_t tokens) {
  train_s_ += seconds;
  tokens_done_ += tokens;
  rep_.step_losses.push_back(loss);
  interval_loss_ += loss;
  ++interval_steps_;
  LmProgress p;
  p.kind = "step";
  p.step = step + 1;
  p.steps = o_.steps;
  p.loss = loss;
  p.lr = lr;
  p.tokens_per_s = static_cast<double>(tokens_done_) / train_s_;
  p.elapsed_s = train_s_;
  progress_(p);
  if ((o_.eval_every > 0 && (step + 1) % o_.eval_every == 0) || step + 1 == o_.steps) {
    LmProgress e = p;
    e.kind = "eval";
    e.train_loss = interval_loss_ / static_cast<double>(interval_steps_);
    e.train_ppl = std::exp(e.train_loss);
    e.val_loss = evaluate_();
    e.val_ppl = std::exp(e.val_loss);
    rep_.val_curve.emplace_back(step + 1, e.val_loss);
    rep_.val_loss = e.val_loss;
    rep_.val_ppl = e.val_ppl;
    interval_loss_ = 0;
    interval_steps_ = 0;
    save_();
    progress_(e);
  } else if (step + 1 == last) {
    save_();
  }
}

void LmStepLog::finish(int64_t steps, const std::string& checkpoint) {
  rep_.steps = steps;
  rep_.last_loss = rep_.step_losses.empty() ? 0.0 : rep_.step_losses.back();
  rep_.train_seconds = train_s_;
  rep_.tokens_per_s = train_s_ > 0 ? static_cast<double>(tokens_done_) / train_s_ : 0.0;
  rep_.checkpoint = checkpoint;
  if (rep_.steps == o_.steps && !rep_.val_curve.empty() && rep_.val_curve.back().first == o_.steps) {
    rep_.val_loss = rep_.val_curve.back().second;
    rep_.val_ppl = std::exp(rep_.val_loss);
  }
}

namespace {

bool is_gguf_file(const std::string& path) {
  if (!fs::is_regular_file(path)) return false;
  std::ifstream f(path, std::ios::binary);
  char head[4] = {};
  f.read(head, 4);
  return f.gcount() == 4 && std::string_view(head, 4) == "GGUF";
}

// The GGUF metadata made from a tokenizer.json must tokenize `what` as the tokenizer.json does.
void check_same_tokens(const std::vector<int32_t>& hf, const std::vector<int32_t>& gguf, const std::string& tokenizer,
                       const std::string& what) {
  size_t i = 0;
  while (i < hf.size() && i < gguf.size() && hf[i] == gguf[i]) ++i;
  SPORE_CHECK(
      i == hf.size() && i == gguf.size(), ErrorCode::unsupported,
      "tokenizer '{}': its GGUF metadata tokenizes '{}' differently from the tokenizer.json from token {} on "
      "({} vs {} tokens): the text needs a rule of the tokenizer.json (its normalizer) that GGUF cannot express",
      tokenizer, what, i, gguf.size(), hf.size());
}

}  // namespace

LmReport train_lm(const LmOptions& o, const std::function<void(const LmProgress&)>& on_progress) {
  SPORE_CHECK(!o.ckpt_dir.empty(), ErrorCode::invalid_argument, "train-lm needs a checkpoint directory");
  SPORE_CHECK(o.train_tokenizer != !o.tokenizer.empty(), ErrorCode::invalid_argument,
              "give either a tokenizer GGUF or train_tokenizer (one of them)");
  fs::create_directories(o.ckpt_dir);
  const fs::path tok_path = fs::path(o.ckpt_dir) / "tokenizer.gguf";
  // Data or model parallel: rank 0 trains the tokenizer and writes the model; the others wait for the tokenizer.
  parallel::Communicator* comm = o.data_parallel || !o.model_parallel.empty() ? &parallel::world() : nullptr;
  const bool writer = comm == nullptr || comm->rank() == 0;

  // Tokenizer: trained once and kept in the checkpoint directory (a resumed run must tokenize alike). A Hugging Face
  // tokenizer.json becomes GGUF metadata there too, checked below to tokenize the data as the tokenizer.json does.
  const std::string text = read_text_file(o.data, "training data");
  std::string tok_source = o.tokenizer;
  std::optional<llm::Tokenizer> hf_tok;
  if (o.train_tokenizer) {
    if (writer && !fs::exists(tok_path)) {
      const llm::BpeVocab v = llm::train_bpe(text, o.vocab);
      io::GgufWriter w;
      w.add_string("general.architecture", "tokenizer");
      llm::add_tokenizer_metadata(w, v);
      w.write(tok_path.string());
    }
    if (comm) comm->barrier();
    tok_source = tok_path.string();
  } else {
    SPORE_CHECK(fs::exists(tok_source), ErrorCode::not_found, "tokenizer '{}' does not exist", tok_source);
    if (!is_gguf_file(tok_source)) {
      hf_tok = llm::Tokenizer::load(tok_source);
      io::GgufWriter w;
      w.add_string("general.architecture", "tokenizer");
      llm::add_tokenizer_metadata(w, hf_tok->gguf_metadata(/*drop_nfc=*/true));
      w.write(tok_path.string());
      tok_source = tok_path.string();
    }
  }
  const io::GgufFile tok_file = io::GgufFile::open(tok_source);
  const llm::Tokenizer tok = llm::Tokenizer::from_gguf(tok_file);
  SPORE_CHECK(o.hf_out.empty() || tok.type() == llm::VocabType::bpe, ErrorCode::unsupported,
              "--hf-out writes a byte-level BPE tokenizer.json; tokenizer '{}' is not byte-level BPE (model {})",
              o.tokenizer, tok.pre_type());

  LmTokens data;
  data.train = tok.encode(text);
  std::string val_text;
  if (!o.val_data.empty()) {
    val_text = read_text_file(o.val_data, "validation data");
    data.val = tok.encode(val_text);
  }
  if (hf_tok) {
    check_same_tokens(hf_tok->encode(text), data.train, o.tokenizer, o.data);
    if (!o.val_data.empty()) check_same_tokens(hf_tok->encode(val_text), data.val, o.tokenizer, o.val_data);
  }
  if (o.val_data.empty()) split_validation(data, o.val_fraction);
  nn::LlamaConfig cfg = o.model;
  cfg.vocab = tok.vocab_size();
  cfg.validate();
  nn::set_seed(o.seed);
  nn::LlamaModel net(cfg);
  const std::string key =
      model_key(cfg) + (o.train_tokenizer ? fmt::format("; bpe {}", o.vocab) : "; tokenizer " + o.tokenizer);
  SPORE_CHECK(o.model_parallel.empty() || o.model_parallel == "pipeline" || o.model_parallel == "tensor",
              ErrorCode::invalid_argument, "model parallelism '{}' is not pipeline or tensor", o.model_parallel);
  LmReport rep = o.model_parallel == "pipeline"
                     ? train_decoder_pipeline(net, data, cfg.ctx, o, o.pipeline_schedule, key, on_progress)
                 : o.model_parallel == "tensor" ? train_decoder_tensor_parallel(net, data, cfg.ctx, o, key, on_progress)
                                                : train_decoder(net, data, cfg.ctx, o, key, on_progress);
  if (!o.out.empty() && rep.steps == o.steps && writer) {
    export_llama_gguf(net, &tok_file, o.out, o.out_type);
    rep.gguf = o.out;
    if (!o.hf_out.empty()) {
      export_llama_hf(net, tok, o.hf_out);
      rep.hf_dir = o.hf_out;
    }
    fs::path svg(o.out);
    svg.replace_extension(".loss.svg");
    write_loss_svg(svg.string(), rep, "spore train-lm");
    rep.svg = svg.string();
  }
  return rep;
}

}  // namespace spore::train
