// LoRA fine-tuning (train/finetune.h).
#include "train/finetune.h"

#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/gguf/gguf.h"
#include "io/gguf/gguf_writer.h"
#include "io/hf_model.h"
#include "llm/chat_template.h"
#include "llm/lora.h"
#include "llm/model.h"
#include "llm/tokenizer.h"
#include "nn/init.h"
#include "ops/ops.h"

namespace spore::train {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// Conversations rendered with the chat style, tokenized piece by piece: what the template adds before an assistant
// turn's content is a prompt (mask 0), the rest of that turn up to the next message a target (mask 1).
void encode_chats(const std::string& text, const std::string& path, const llm::Tokenizer& tok,
                  const llm::ChatStyle& style, std::vector<int32_t>& ids, std::vector<uint8_t>& mask) {
  std::istringstream in(text);
  std::string line;
  int64_t n = 0, assistant_turns = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      SPORE_FAIL(ErrorCode::parse_error, "'{}' line {}: not valid JSON: {}", path, n, e.what());
    }
    SPORE_CHECK(j.is_object() && j.contains("messages") && j["messages"].is_array() && !j["messages"].empty(),
                ErrorCode::parse_error, "'{}' line {}: expected {{\"messages\": [{{\"role\", \"content\"}}, ...]}}",
                path, n);
    std::vector<llm::ChatMessage> msgs;
    std::string done;  // the rendering of the messages so far
    for (const json& m : j["messages"]) {
      SPORE_CHECK(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") &&
                      m["content"].is_string(),
                  ErrorCode::parse_error, "'{}' line {}: message {} needs string \"role\" and \"content\"", path, n,
                  msgs.size());
      const std::string role = m["role"].get<std::string>();
      SPORE_CHECK(role == "system" || role == "user" || role == "assistant", ErrorCode::parse_error,
                  "'{}' line {}: role '{}' is not system, user or assistant", path, n, role);
      const bool asst = role == "assistant";
      const std::string prompt = asst ? llm::render_chat(style, msgs, true) : done;
      msgs.push_back({role, m["content"].get<std::string>()});
      const std::string full = llm::render_chat(style, msgs, false);
      SPORE_CHECK(full.compare(0, prompt.size(), prompt) == 0 && prompt.compare(0, done.size(), done) == 0,
                  ErrorCode::unsupported,
                  "'{}' line {}: the chat template does not render message {} as an extension "
                  "of the ones before it",
                  path, n, msgs.size() - 1);
      auto add = [&](const std::string& piece, uint8_t target) {
        for (int32_t id : tok.encode(piece, false, true)) {
          ids.push_back(id);
          mask.push_back(target);
        }
      };
      add(prompt.substr(done.size()), 0);
      add(full.substr(prompt.size()), asst ? 1 : 0);
      assistant_turns += asst;
      done = full;
    }
  }
  SPORE_CHECK(assistant_turns > 0, ErrorCode::invalid_argument, "'{}' has no assistant message to learn from", path);
}

// Tokens (and, for .jsonl, the target mask) of a data file.
void encode_file(const std::string& path, const char* what, const llm::Tokenizer& tok, const std::string& tmpl,
                 std::vector<int32_t>& ids, std::vector<uint8_t>& mask) {
  const std::string text = read_text_file(path, what);
  if (!ends_with(path, ".jsonl")) {
    ids = tok.encode(text);
    return;
  }
  encode_chats(text, path, tok, llm::detect_chat_style(tok.chat_template(), tmpl), ids, mask);
}

// The base's tokenizer: GGUF tokenizer.ggml.* metadata, or the folder's tokenizer.json.
llm::Tokenizer load_base_tokenizer(const std::string& base) {
  if (fs::is_directory(base)) {
    SPORE_CHECK(fs::is_regular_file(fs::path(base) / "tokenizer.json"), ErrorCode::invalid_argument,
                "base model '{}' has no tokenizer ('{}' does not exist)", base,
                (fs::path(base) / "tokenizer.json").string());
    return llm::Tokenizer::load(base);
  }
  const io::GgufFile f = io::GgufFile::open(base);
  SPORE_CHECK(f.has("tokenizer.ggml.model"), ErrorCode::invalid_argument,
              "base model '{}' has no tokenizer (tokenizer.ggml.* metadata)", base);
  return llm::Tokenizer::from_gguf(f);
}

}  // namespace

std::unique_ptr<nn::LlamaModel> load_llama_base(const std::string& path) {
  const bool hf = fs::is_directory(path);
  SPORE_CHECK(hf || fs::is_regular_file(path), ErrorCode::not_found, "base model '{}' does not exist", path);
  SPORE_CHECK(hf || ends_with(path, ".gguf"), ErrorCode::unsupported,
              "base model '{}': finetune takes a .gguf file or a Hugging Face folder (config.json, *.safetensors)",
              path);
  if (hf)
    SPORE_CHECK(fs::is_regular_file(fs::path(path) / "config.json"), ErrorCode::not_found,
                "base model '{}': a Hugging Face folder needs config.json, and '{}' does not exist", path,
                (fs::path(path) / "config.json").string());
  // The config as spore generate reads it (GGUF metadata, or config.json: errors name the file and the field).
  const llm::Model info = llm::Model::load(path);
  const llm::ModelConfig& c = info.config();
  SPORE_CHECK(c.head_dim * c.n_head == c.n_embd, ErrorCode::unsupported,
              "base model '{}': head dim {} x {} heads != embedding {} (not supported for training)", path, c.head_dim,
              c.n_head, c.n_embd);
  SPORE_CHECK((c.rope_dim == 0 || c.rope_dim == c.head_dim) && c.rope_freq_scale == 1.0, ErrorCode::unsupported,
              "base model '{}': partial or scaled rope is not supported for training", path);
  SPORE_CHECK(c.qkv_bias == (c.arch == "qwen2"), ErrorCode::unsupported,
              "base model '{}': {} with{} q/k/v biases is not supported for training", path, c.arch,
              c.qkv_bias ? "" : "out");
  std::optional<io::GgufFile> gguf;
  std::optional<io::HfModel> folder;
  if (hf) {
    folder = io::read_hf_model(path);
    const nlohmann::json& j = folder->config;
    SPORE_CHECK(!j.contains("rope_scaling") || j["rope_scaling"].is_null() ||
                    (j["rope_scaling"].is_object() &&
                     j["rope_scaling"].value("rope_type", j["rope_scaling"].value("type", "default")) == "default"),
                ErrorCode::unsupported,
                "base model '{}': config.json rope_scaling (Llama 3.1 / linear rope scaling) is not supported for "
                "training",
                path);
  } else {
    gguf = io::GgufFile::open(path);
    SPORE_CHECK(gguf->find_tensor("rope_freqs.weight") == nullptr, ErrorCode::unsupported,
                "base model '{}': rope_freqs (Llama 3.1 rope scaling) is not supported for training", path);
  }
  nn::LlamaConfig lc;
  lc.arch = c.arch;
  lc.vocab = c.n_vocab;
  lc.dim = c.n_embd;
  lc.layers = c.n_layer;
  lc.heads = c.n_head;
  lc.kv_heads = c.n_head_kv;
  lc.ffn = c.n_ff;
  lc.ctx = c.n_ctx_train > 0 ? c.n_ctx_train : 2048;
  // As f32, the precision GGUF stores them in (and that PyTorch adds an f32 tensor's epsilon in): a folder written
  // beside its GGUF (train-lm --hf-out) holds the double 1e-5 where the GGUF holds float(1e-5), and the two must
  // train the same numbers.
  // (Through a volatile float: GCC 12 -O3 folded the plain double -> float -> double round trip away here.)
  const auto as_f32 = [](double v) {
    const volatile float f = static_cast<float>(v);
    return static_cast<double>(f);
  };
  lc.rms_eps = as_f32(c.rms_eps);
  lc.rope_theta = as_f32(c.rope_theta);
  lc.tie_embeddings = c.tied_embeddings;
  lc.init_std = 0;  // every weight is replaced below
  auto m = std::make_unique<nn::LlamaModel>(lc);
  for (auto& [name, t] : m->parameters_and_names()) {
    if (gguf) {
      gguf->tensor(name, t->shape());  // missing or of another shape: an error naming it
      *t = gguf->dequantize_f32(name);
      continue;
    }
    // HF names and row order: nn::LlamaModel runs GGUF's (llama's q/k rows permuted for adjacent-pair rope, as
    // llama.cpp's converter stores them), so the folder and its GGUF conversion train the same numbers.
    Tensor w = folder->tensor(llama_hf_name(name), t->shape());  // missing or of another shape: an error naming it
    SPORE_CHECK(w.dtype() == DType::f32 || w.dtype() == DType::f16 || w.dtype() == DType::bf16, ErrorCode::unsupported,
                "base model '{}': tensor '{}' has dtype {} (f32, f16 or bf16 expected)", path, llama_hf_name(name),
                dtype_name(w.dtype()));
    w = w.dtype() == DType::f32 ? w.clone() : ops::cast(w, DType::f32);
    if (c.arch == "llama" && t->rank() == 2) {
      if (name.find(".attn_q.weight") != std::string::npos) w = llm::permute_qk_rows(w, c.n_head, true);
      if (name.find(".attn_k.weight") != std::string::npos) w = llm::permute_qk_rows(w, c.n_head_kv, true);
    }
    *t = w;
  }
  return m;
}

FinetuneReport finetune(const FinetuneOptions& o, const std::function<void(const LmProgress&)>& on_progress) {
  SPORE_CHECK(!o.out_dir.empty(), ErrorCode::invalid_argument, "finetune needs an output folder");
  SPORE_CHECK(o.base_dtype == "f32" || o.base_dtype == "bf16" || o.base_dtype == "q8_0", ErrorCode::invalid_argument,
              "base dtype '{}' is not f32, bf16 or q8_0", o.base_dtype);
  nn::LoraConfig lora = o.lora;
  if (lora.targets.empty()) lora.targets = nn::lora_target_cells("q_proj,v_proj");
  lora.validate();
  std::unique_ptr<nn::LlamaModel> net = load_llama_base(o.base);
  const llm::Tokenizer tok = load_base_tokenizer(o.base);
  const nn::LlamaConfig& cfg = net->config();
  const int64_t ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(cfg.ctx, 256);
  SPORE_CHECK(ctx <= cfg.ctx, ErrorCode::invalid_argument, "--ctx {} is longer than the base's context {}", ctx,
              cfg.ctx);

  LmTokens data;
  encode_file(o.data, "training data", tok, o.chat_template, data.train, data.train_mask);
  if (!o.val_data.empty()) {
    encode_file(o.val_data, "validation data", tok, o.chat_template, data.val, data.val_mask);
    SPORE_CHECK(data.train_mask.empty() == data.val_mask.empty(), ErrorCode::invalid_argument,
                "training and validation data must both be text or both be .jsonl conversations");
  } else {
    split_validation(data, o.val_fraction);
  }

  nn::set_seed(o.seed);
  net->add_lora(lora);
  FinetuneReport rep;
  rep.all_params = net->num_parameters();
  rep.trainable_params = net->num_parameters(true);
  // The frozen matrices in the asked storage (after counting: a Q8_0 matrix's tensor holds bytes, not weights).
  if (o.base_dtype != "f32") {
    for (auto& [name, t] : net->parameters_and_names()) {
      if (name.rfind("blk.", 0) != 0 || t->rank() != 2 || name.find(".lora_") != std::string::npos) continue;
      Tensor w;
      if (o.base_dtype == "bf16") {
        w = ops::cast(*t, DType::bf16);
      } else {
        const int64_t n = t->shape()[0], k = t->shape()[1];
        SPORE_CHECK(k % 32 == 0, ErrorCode::unsupported, "base dtype q8_0: '{}' has rows of {}, not whole blocks of 32",
                    name, k);
        const std::string bytes = io::quantize_row(io::GgmlType::q8_0, t->contiguous().data<float>(), n * k);
        w = Tensor::empty({n, k / 32 * 34}, DType::u8);
        std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(w.data<uint8_t>()));
      }
      net->set_frozen_matrix(name, std::move(w), o.base_dtype);
    }
  }
  const std::string key = fmt::format(
      "finetune of '{}' ({}, {} layers, dim {}), lora r {} alpha {} dropout {} targets {} {}, base {}, ctx {}, data "
      "'{}'",
      o.base, cfg.arch, cfg.layers, cfg.dim, lora.r, lora.alpha, lora.dropout, fmt::join(lora.targets, ","),
      dtype_name(lora.dtype), o.base_dtype, ctx, o.data);
  LmReport r = train_decoder(*net, data, ctx, o, key, on_progress, /*eval_at_start=*/true);
  static_cast<LmReport&>(rep) = r;
  if (!r.val_curve.empty() && r.val_curve.front().first == 0) rep.base_val_loss = r.val_curve.front().second;
  if (rep.steps != o.steps) return rep;

  llm::LoraAdapter a;
  a.arch = cfg.arch;
  a.r = lora.r;
  a.alpha = lora.alpha;
  a.dropout = lora.dropout;
  a.targets = lora.targets;
  a.base_model = fs::path(o.base).lexically_normal().filename().string();
  if (a.base_model.empty()) a.base_model = fs::path(o.base).lexically_normal().parent_path().filename().string();
  a.permuted_qk = cfg.arch == "llama";  // nn::LlamaModel runs GGUF's row order (rope on adjacent pairs)
  a.n_head = cfg.heads;
  a.n_head_kv = cfg.kv_heads;
  for (auto& [name, t] : net->parameters_and_names()) {
    const bool is_a = ends_with(name, ".lora_a"), is_b = ends_with(name, ".lora_b");
    if (!is_a && !is_b) continue;
    llm::LoraPair& p = a.tensors[name.substr(0, name.size() - 7) + ".weight"];
    (is_a ? p.a : p.b) = t->contiguous();
  }
  fs::create_directories(o.out_dir);
  llm::write_peft(a, o.out_dir);
  rep.peft_dir = o.out_dir;
  rep.gguf_adapter = (fs::path(o.out_dir) / "adapter.gguf").string();
  llm::write_gguf_adapter(a, rep.gguf_adapter);
  rep.svg = (fs::path(o.out_dir) / "loss.svg").string();
  write_loss_svg(rep.svg, rep, "spore finetune");
  return rep;
}

}  // namespace spore::train
