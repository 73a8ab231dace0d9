// Decoder-only LLMs as spore graphs (llm/model.h, docs/LLM.md).
#include "llm/model.h"

#include <cmath>
#include <filesystem>
#include <numbers>

#include "base/error.h"
#include "io/gguf/gguf.h"
#include "io/hf_model.h"
#include "llm/lora.h"
#include "ops/ops.h"
#include "runtime/trace.h"

namespace spore::llm {
namespace {
using llm_ops::WeightFormat;

// A GGUF tensor as a spore tensor aliasing the mapping: typed for F32/F16/BF16, u8 [rows, row_bytes] for Q8_0/Q4_0.
// Other quant types are dequantized to f16 once (more memory, but the file loads).
Weight gguf_weight(const io::GgufFile& f, const std::shared_ptr<const void>& keep, const std::string& name,
                   const std::vector<int64_t>& shape) {
  const io::GgufTensorInfo& t = f.tensor(name, shape);
  Weight w;
  switch (t.type) {
    case io::GgmlType::f32: w.format = WeightFormat::f32; w.data = f.view(name); return w;
    case io::GgmlType::f16: w.format = WeightFormat::f16; w.data = f.view(name); return w;
    case io::GgmlType::bf16: w.format = WeightFormat::bf16; w.data = f.view(name); return w;
    case io::GgmlType::q8_0:
    case io::GgmlType::q4_0: {
      w.format = t.type == io::GgmlType::q8_0 ? WeightFormat::q8_0 : WeightFormat::q4_0;
      SPORE_CHECK(shape.size() == 2 && shape[1] % llm_ops::qk == 0, ErrorCode::shape_mismatch,
                  "gguf '{}': tensor '{}' ({}) has rows of {} values, not a multiple of {}", f.path(), name,
                  io::ggml_type_name(t.type), shape.back(), llm_ops::qk);
      const int64_t rb = llm_ops::row_bytes(w.format, shape[1]);
      SPORE_CHECK(static_cast<uint64_t>(rb * shape[0]) == t.nbytes, ErrorCode::parse_error,
                  "gguf '{}': tensor '{}' holds {} bytes, {} rows of {} bytes expected", f.path(), name, t.nbytes,
                  shape[0], rb);
      auto storage = Storage::wrap(const_cast<uint8_t*>(t.data), t.nbytes, [keep] {});
      const Shape rows{shape[0], rb};
      w.data = Tensor::from_storage(std::move(storage), rows, contiguous_strides(rows), 0, DType::u8);
      return w;
    }
    default:
      if (io::ggml_block_layout(t.type)) {  // a quant type spore dequantizes (Q4_K, Q6_K, Q4_1, Q5_*)
        w.format = WeightFormat::f16;
        w.data = ops::cast(f.dequantize_f32(name), DType::f16);
        return w;
      }
      SPORE_FAIL(ErrorCode::unsupported,
                 "gguf '{}': tensor '{}' has type {}, which spore cannot use (F32, F16, BF16, Q8_0, Q4_0; Q4_1, "
                 "Q5_0, Q5_1, Q4_K, Q6_K are dequantized to F16)",
                 f.path(), name, io::ggml_type_name(t.type));
  }
}

Tensor f32_vector(const Tensor& t) { return t.dtype() == DType::f32 ? t : ops::cast(t, DType::f32); }

Weight hf_weight(const io::HfModel& m, const std::string& name, const Shape& shape) {
  const Tensor& t = m.tensor(name, shape);
  Weight w;
  w.data = t;
  switch (t.dtype()) {
    case DType::f32: w.format = WeightFormat::f32; break;
    case DType::f16: w.format = WeightFormat::f16; break;
    case DType::bf16: w.format = WeightFormat::bf16; break;
    default:
      SPORE_FAIL(ErrorCode::unsupported, "model '{}': tensor '{}' has dtype {} (f32, f16 or bf16 expected)", m.dir, name,
                 dtype_name(t.dtype()));
  }
  return w;
}

// Llama 3.1 rope scaling ("rope_type": "llama3"): per-pair divisors of the rotation frequency, as the HF
// transformers implementation defines them (GGUF files carry the same numbers as the rope_freqs tensor).
Tensor llama3_freq_factors(const nlohmann::json& rs, double theta, int64_t dim) {
  const double factor = rs.value("factor", 8.0), lo = rs.value("low_freq_factor", 1.0),
               hi = rs.value("high_freq_factor", 4.0), orig = rs.value("original_max_position_embeddings", 8192.0);
  const double lo_wavelen = orig / lo, hi_wavelen = orig / hi;
  Tensor ff = Tensor::empty({dim / 2}, DType::f32);
  float* p = ff.data<float>();
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
    const double wavelen = 2 * std::numbers::pi / freq;
    double f = 1.0;
    if (wavelen > lo_wavelen) {
      f = factor;
    } else if (wavelen >= hi_wavelen) {
      const double smooth = (orig / wavelen - lo) / (hi - lo);
      f = 1.0 / ((1 - smooth) / factor + smooth);
    }
    p[i] = static_cast<float>(f);
  }
  return ff;
}

std::string fmt_of(WeightFormat f) { return std::string(llm_ops::format_name(f)); }

void derive(ModelConfig& c, const std::vector<LayerWeights>& layers) {
  std::map<std::string, int64_t> by_format;
  for (const auto& l : layers)
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      by_format[fmt_of(w->format)] += w->bytes();
  int64_t best = -1;
  for (const auto& [f, b] : by_format)
    if (b > best) best = b, c.weight_type = f;
}
}  // namespace

Model Model::load(const std::string& path, bool use_mmap) {
  namespace fs = std::filesystem;
  SPORE_CHECK(fs::exists(path), ErrorCode::not_found, "model '{}' does not exist", path);
  Model m = fs::is_directory(path) ? load_hf(path, use_mmap) : load_gguf(path, use_mmap);
  m.prefault();
  return m;
}

// Touches every page of the mapped weights once, so that the first tokens do not pay the page faults (~0.2 s for
// 0.5 GB, measured as a slower first decode) and the load time says what loading costs.
void Model::prefault() const {
  volatile uint8_t sink = 0;
  auto touch = [&](const Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.raw_data());
    const int64_t n = t.nbytes();
    for (int64_t i = 0; i < n; i += 4096) sink = sink + p[i];
  };
  touch(tok_embd_);
  touch(output_.data);
  for (const auto& l : layers_)
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) touch(w->data);
}

Model Model::load_gguf(const std::string& path, bool use_mmap) {
  auto file = std::make_shared<io::GgufFile>(io::GgufFile::open(path, use_mmap));
  const io::GgufFile& f = *file;
  Model m;
  m.path_ = path;
  m.keep_ = file;
  m.file_bytes_ = static_cast<int64_t>(std::filesystem::file_size(path));
  ModelConfig& c = m.cfg_;
  c.source = "gguf";
  c.arch = f.get_string("general.architecture");
  SPORE_CHECK(c.arch == "llama" || c.arch == "qwen2", ErrorCode::unsupported,
              "gguf '{}': architecture '{}' is not supported (llama — also Mistral and Llama 3 — or qwen2 — also "
              "Qwen2.5 and DeepSeek-R1-Distill-Qwen)",
              path, c.arch);
  const std::string a = c.arch + ".";
  c.n_layer = f.get_int(a + "block_count");
  c.n_embd = f.get_int(a + "embedding_length");
  c.n_ff = f.get_int(a + "feed_forward_length");
  c.n_head = f.get_int(a + "attention.head_count");
  c.n_head_kv = f.get_int_or(a + "attention.head_count_kv", c.n_head);
  SPORE_CHECK(c.n_layer > 0 && c.n_embd > 0 && c.n_head > 0 && c.n_head_kv > 0 && c.n_ff > 0 &&
                  c.n_head % c.n_head_kv == 0,
              ErrorCode::parse_error,
              "gguf '{}': bad hyperparameters: {} layers, embedding {}, {} heads, {} kv heads, ffn {}", path,
              c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.n_ff);
  c.head_dim = f.get_int_or(a + "attention.key_length", c.n_embd / c.n_head);
  c.n_ctx_train = f.get_int_or(a + "context_length", 2048);
  c.rms_eps = f.get_float_or(a + "attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_theta = f.get_float_or(a + "rope.freq_base", 10000.0);
  c.rope_dim = f.get_int_or(a + "rope.dimension_count", c.head_dim);
  if (f.get_string_or(a + "rope.scaling.type", "none") == "linear") {
    const double factor = f.get_float_or(a + "rope.scaling.factor", 1.0);
    if (factor > 0) c.rope_freq_scale = 1.0 / factor;
  }
  // llama.cpp: LLM_ARCH_LLAMA rotates adjacent pairs (its converter permutes Q/K rows for that); QWEN2 is NeoX.
  c.rope_mode = c.arch == "qwen2" ? "neox" : "normal";
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;

  const io::GgufTensorInfo& te = f.tensor("token_embd.weight");
  SPORE_CHECK(te.shape.size() == 2 && te.shape[1] == c.n_embd, ErrorCode::shape_mismatch,
              "gguf '{}': token_embd.weight has shape {}, expected [vocab, {}]", path,
              shape_str(te.shape), c.n_embd);
  c.n_vocab = te.shape[0];
  const int64_t E = c.n_embd, Dq = c.n_head * c.head_dim, Dkv = c.n_head_kv * c.head_dim;
  Weight emb = gguf_weight(f, m.keep_, "token_embd.weight", {c.n_vocab, E});
  m.tok_embd_ = emb.data;
  m.tok_embd_format_ = emb.format;
  m.output_norm_ = f32_vector(f.view("output_norm.weight"));
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  m.output_ = c.tied_embeddings ? emb : gguf_weight(f, m.keep_, "output.weight", {c.n_vocab, E});
  if (f.find_tensor("rope_freqs.weight")) m.rope_freqs_ = f32_vector(f.view("rope_freqs.weight"));
  auto norm = [&](const std::string& n) {
    Tensor t = f32_vector(f.view(n));
    SPORE_CHECK(t.shape() == Shape{E}, ErrorCode::shape_mismatch, "gguf '{}': tensor '{}' has shape {}, expected [{}]",
                path, n, shape_str(t.shape()), E);
    return t;
  };
  auto bias = [&](const std::string& n, int64_t len) -> std::optional<Tensor> {
    if (!f.find_tensor(n)) return std::nullopt;
    Tensor t = f32_vector(f.view(n));
    SPORE_CHECK(t.shape() == Shape{len}, ErrorCode::shape_mismatch, "gguf '{}': tensor '{}' has shape {}, expected [{}]",
                path, n, shape_str(t.shape()), len);
    return t;
  };
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = norm(p + "attn_norm.weight");
    l.ffn_norm = norm(p + "ffn_norm.weight");
    l.wq = gguf_weight(f, m.keep_, p + "attn_q.weight", {Dq, E});
    l.wk = gguf_weight(f, m.keep_, p + "attn_k.weight", {Dkv, E});
    l.wv = gguf_weight(f, m.keep_, p + "attn_v.weight", {Dkv, E});
    l.wo = gguf_weight(f, m.keep_, p + "attn_output.weight", {E, Dq});
    l.w_gate = gguf_weight(f, m.keep_, p + "ffn_gate.weight", {c.n_ff, E});
    l.w_up = gguf_weight(f, m.keep_, p + "ffn_up.weight", {c.n_ff, E});
    l.w_down = gguf_weight(f, m.keep_, p + "ffn_down.weight", {E, c.n_ff});
    l.bq = bias(p + "attn_q.bias", Dq);
    l.bk = bias(p + "attn_k.bias", Dkv);
    l.bv = bias(p + "attn_v.bias", Dkv);
    m.layers_.push_back(std::move(l));
  }
  derive(c, m.layers_);
  // A file without a vocabulary still runs on token ids (--tokens); text needs one.
  if (f.has("tokenizer.ggml.model")) m.tokenizer_ = std::make_shared<const Tokenizer>(Tokenizer::from_gguf(f));
  return m;
}

Model Model::load_hf(const std::string& dir, bool use_mmap) {
  auto hf = std::make_shared<io::HfModel>(io::read_hf_model(dir, use_mmap));
  const io::HfModel& h = *hf;
  const nlohmann::json& j = h.config;
  Model m;
  m.path_ = dir;
  m.keep_ = hf;
  for (const auto& wf : h.weight_files)
    m.file_bytes_ += static_cast<int64_t>(std::filesystem::file_size(std::filesystem::path(dir) / wf));
  ModelConfig& c = m.cfg_;
  c.source = "hf";
  const std::string mt = j.value("model_type", "");
  SPORE_CHECK(mt == "llama" || mt == "mistral" || mt == "qwen2", ErrorCode::unsupported,
              "model '{}': config.json model_type '{}' (architecture '{}') is not supported (llama, mistral, qwen2)", dir,
              mt, h.architecture());
  c.arch = mt == "qwen2" ? "qwen2" : "llama";
  auto need = [&](const char* key) -> int64_t {
    SPORE_CHECK(j.contains(key) && j[key].is_number_integer(), ErrorCode::parse_error,
                "model '{}': config.json has no integer '{}'", dir, key);
    return j[key].get<int64_t>();
  };
  c.n_layer = need("num_hidden_layers");
  c.n_embd = need("hidden_size");
  c.n_ff = need("intermediate_size");
  c.n_head = need("num_attention_heads");
  c.n_head_kv = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                    ? j["num_key_value_heads"].get<int64_t>()
                    : c.n_head;
  SPORE_CHECK(c.n_layer > 0 && c.n_embd > 0 && c.n_head > 0 && c.n_head_kv > 0 && c.n_head % c.n_head_kv == 0,
              ErrorCode::parse_error, "model '{}': bad config: {} layers, hidden {}, {} heads, {} kv heads", dir,
              c.n_layer, c.n_embd, c.n_head, c.n_head_kv);
  c.head_dim = j.contains("head_dim") && j["head_dim"].is_number_integer() ? j["head_dim"].get<int64_t>()
                                                                             : c.n_embd / c.n_head;
  c.n_vocab = need("vocab_size");
  c.n_ctx_train = j.value("max_position_embeddings", int64_t{2048});
  c.rms_eps = j.value("rms_norm_eps", 1e-6);
  c.rope_theta = j.contains("rope_theta") && j["rope_theta"].is_number() ? j["rope_theta"].get<double>() : 10000.0;
  c.rope_dim = c.head_dim;
  c.rope_mode = "neox";  // HF checkpoints rotate halves (rotate_half); no Q/K permutation as in GGUF
  c.tied_embeddings = j.value("tie_word_embeddings", false) || !h.find("lm_head.weight");
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const auto& rs = j["rope_scaling"];
    const std::string type = rs.value("rope_type", rs.value("type", ""));
    if (type == "linear") c.rope_freq_scale = 1.0 / rs.value("factor", 1.0);
    else if (type == "llama3") m.rope_freqs_ = llama3_freq_factors(rs, c.rope_theta, c.rope_dim);
    else
      SPORE_CHECK(type.empty() || type == "default", ErrorCode::unsupported,
                  "model '{}': rope_scaling type '{}' is not supported (linear, llama3)", dir, type);
  }
  const int64_t E = c.n_embd, Dq = c.n_head * c.head_dim, Dkv = c.n_head_kv * c.head_dim;
  Weight emb = hf_weight(h, "model.embed_tokens.weight", {c.n_vocab, E});
  m.tok_embd_ = emb.data;
  m.tok_embd_format_ = emb.format;
  m.output_norm_ = f32_vector(h.tensor("model.norm.weight", {E}));
  m.output_ = c.tied_embeddings ? emb : hf_weight(h, "lm_head.weight", {c.n_vocab, E});
  c.qkv_bias = h.find("model.layers.0.self_attn.q_proj.bias") != nullptr;
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = f32_vector(h.tensor(p + "input_layernorm.weight", {E}));
    l.ffn_norm = f32_vector(h.tensor(p + "post_attention_layernorm.weight", {E}));
    l.wq = hf_weight(h, p + "self_attn.q_proj.weight", {Dq, E});
    l.wk = hf_weight(h, p + "self_attn.k_proj.weight", {Dkv, E});
    l.wv = hf_weight(h, p + "self_attn.v_proj.weight", {Dkv, E});
    l.wo = hf_weight(h, p + "self_attn.o_proj.weight", {E, Dq});
    l.w_gate = hf_weight(h, p + "mlp.gate_proj.weight", {c.n_ff, E});
    l.w_up = hf_weight(h, p + "mlp.up_proj.weight", {c.n_ff, E});
    l.w_down = hf_weight(h, p + "mlp.down_proj.weight", {E, c.n_ff});
    if (c.qkv_bias) {
      l.bq = f32_vector(h.tensor(p + "self_attn.q_proj.bias", {Dq}));
      l.bk = f32_vector(h.tensor(p + "self_attn.k_proj.bias", {Dkv}));
      l.bv = f32_vector(h.tensor(p + "self_attn.v_proj.bias", {Dkv}));
    }
    m.layers_.push_back(std::move(l));
  }
  derive(c, m.layers_);
  if (!h.tokenizer_json.empty()) m.tokenizer_ = std::make_shared<const Tokenizer>(Tokenizer::load(dir));
  return m;
}

const Tokenizer& Model::tokenizer() const {
  SPORE_CHECK(tokenizer_ != nullptr, ErrorCode::not_found, "model '{}' has no tokenizer (no tokenizer.json or tokenizer.ggml.* metadata); give the prompt as --tokens", path_);
  return *tokenizer_;
}

int64_t Model::weight_bytes_per_token() const {
  int64_t b = output_.bytes() + tok_embd_.nbytes() / std::max<int64_t>(cfg_.n_vocab, 1);
  for (const auto& l : layers_)
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) b += w->bytes();
  return b;
}

std::unique_ptr<Graph> Model::step_graph(const StepOptions& o) const {
  const ModelConfig& c = cfg_;
  const int64_t T = o.tokens, C = o.ctx, H = c.n_head, Hkv = c.n_head_kv, D = c.head_dim;
  SPORE_CHECK(T > 0 && C > 0, ErrorCode::invalid_argument, "step graph needs tokens > 0 and ctx > 0, got {} and {}", T,
              C);
  SPORE_CHECK(o.kv_dtype == DType::f32 || o.kv_dtype == DType::f16 || o.kv_dtype == DType::bf16 ||
                  o.kv_dtype == DType::i8,
              ErrorCode::unsupported, "KV cache type {} is not supported (f32, f16, bf16, i8)", dtype_name(o.kv_dtype));
  const bool i8 = o.kv_dtype == DType::i8;
  const size_t per_layer = i8 ? 4 : 2;  // k, v cache inputs (and their row scales)
  SPORE_CHECK(o.slots >= 0 && o.picks >= 1, ErrorCode::invalid_argument,
              "step graph needs slots >= 0 and picks >= 1, got {} and {}", o.slots, o.picks);
  const bool pooled = o.slots > 0, picks = !o.all_logits;
  std::vector<TensorType> types{TensorType(DType::i64, {T}), TensorType(DType::i64, {T})};
  std::vector<std::string> names{"tokens", "positions"};
  if (pooled) {
    types.emplace_back(DType::i64, std::vector<Dim>{T});
    names.emplace_back("slots");
  }
  const size_t last_at = types.size();
  if (picks) {
    types.emplace_back(DType::i64, std::vector<Dim>{o.picks});
    names.emplace_back("last");
  }
  const size_t kv0 = types.size();
  const auto cache_dims = [&](std::vector<Dim> d) {
    if (pooled) d.insert(d.begin(), Dim(o.slots));
    return d;
  };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    types.emplace_back(o.kv_dtype, cache_dims({Hkv, C, D}));
    names.push_back("k_cache_" + std::to_string(l));
    types.emplace_back(o.kv_dtype, cache_dims({Hkv, C, D}));
    names.push_back("v_cache_" + std::to_string(l));
    if (i8) {
      types.emplace_back(DType::f32, cache_dims({Hkv, C}));
      names.push_back("k_scale_" + std::to_string(l));
      types.emplace_back(DType::f32, cache_dims({Hkv, C}));
      names.push_back("v_scale_" + std::to_string(l));
    }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto fn = [&](std::span<const Tensor> in) -> std::vector<Tensor> {
    const Tensor& pos = in[1];
    Tensor x = ops::embed_blockq(tok_embd_, in[0], fmt_of(tok_embd_format_));
    std::vector<Tensor> kv;
    auto rope = [&](const Tensor& t) {
      return ops::rope(t, pos, c.rope_theta, c.rope_mode, c.rope_dim == D ? 0 : c.rope_dim, c.rope_freq_scale,
                       rope_freqs_);
    };
    auto lin = [](const Tensor& a, const Weight& w, const std::optional<Tensor>& b = std::nullopt) {
      Tensor y = ops::linear_blockq(a, w.data, fmt_of(w.format), b);
      for (const LoraDelta& d : w.lora)
        y = ops::add(y, ops::mul(ops::linear_blockq(ops::linear_blockq(a, d.a, "f32"), d.b, "f32"), d.scale));
      return y;
    };
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const LayerWeights& w = layers_[static_cast<size_t>(l)];
      Tensor h = ops::rms_norm(x, w.attn_norm, -1, c.rms_eps);
      Tensor q = rope(ops::reshape(lin(h, w.wq, w.bq), {T, H, D}));
      Tensor k = rope(ops::reshape(lin(h, w.wk, w.bk), {T, Hkv, D}));
      Tensor v = ops::reshape(lin(h, w.wv, w.bv), {T, Hkv, D});
      const size_t at = kv0 + per_layer * static_cast<size_t>(l);
      std::optional<Tensor> ks, vs;
      if (i8) {
        ks = in[at + 2];
        vs = in[at + 3];
      }
      std::optional<Tensor> slots;
      if (pooled) slots = in[2];
      Tensor att = ops::attention_kv(q, in[at], in[at + 1], k, v, pos, scale, ks, vs, slots);
      x = ops::add(x, lin(ops::reshape(att, {T, H * D}), w.wo));
      h = ops::rms_norm(x, w.ffn_norm, -1, c.rms_eps);
      Tensor ff = ops::mul(ops::silu(lin(h, w.w_gate)), lin(h, w.w_up));
      x = ops::add(x, lin(ff, w.w_down));
      kv.push_back(k);
      kv.push_back(v);
    }
    std::optional<Tensor> hidden;
    if (o.with_hidden) hidden = ops::rms_norm(x, output_norm_, -1, c.rms_eps);  // per row: the picked rows' bits
    if (picks) x = ops::embedding(x, in[last_at]);
    x = ops::rms_norm(x, output_norm_, -1, c.rms_eps);
    std::vector<Tensor> out{lin(x, output_)};
    out.insert(out.end(), kv.begin(), kv.end());
    if (hidden) out.push_back(*hidden);
    return out;
  };
  return trace_function(fn, types, names);
}

void Model::add_lora(LoraAdapter a, double scale) {
  SPORE_CHECK(std::isfinite(scale), ErrorCode::invalid_argument, "LoRA scale {} is not finite", scale);
  fit_adapter(a, cfg_);
  for (auto& [name, p] : a.tensors) {
    // fit_adapter checked the name: blk.<i>.<cell>.weight
    const size_t d1 = name.find('.'), d2 = name.find('.', d1 + 1);
    const auto l = static_cast<size_t>(std::stoll(name.substr(d1 + 1, d2 - d1 - 1)));
    const std::string cell = name.substr(d2 + 1, name.size() - d2 - 1 - 7);
    LayerWeights& w = layers_.at(l);
    Weight* target = cell == "attn_q"        ? &w.wq
                     : cell == "attn_k"      ? &w.wk
                     : cell == "attn_v"      ? &w.wv
                     : cell == "attn_output" ? &w.wo
                     : cell == "ffn_gate"    ? &w.w_gate
                     : cell == "ffn_up"      ? &w.w_up
                                             : &w.w_down;
    target->lora.push_back({p.a.contiguous(), p.b.contiguous(), scale * a.scale()});
  }
}

}  // namespace spore::llm
