// The trainable Llama / Qwen2 decoder (nn/llama.h).
#include "nn/llama.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "base/error.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "ops/llm_ops.h"
#include "ops/ops.h"

namespace spore::nn {
namespace {

// A cell that only holds "weight" (and "bias"): the GGUF names are <cell>.weight / <cell>.bias. A projection may
// carry a LoRA adapter ("lora_a", "lora_b") and a frozen weight in a storage format the forward dequantizes.
class WeightCell : public Cell {
 public:
  explicit WeightCell(Tensor w, const Tensor& b = Tensor()) : w_(&register_parameter("weight", std::move(w))) {
    if (b.defined()) b_ = &register_parameter("bias", b);
  }
  const Tensor& w() const { return *w_; }
  std::optional<Tensor> b() const { return b_ ? std::optional<Tensor>(*b_) : std::nullopt; }
  Tensor linear(const Tensor& x) {
    Tensor y = ops::linear(x, weight_f32(), b());
    if (!lora_a_) return y;
    Tensor xi = dropout_ ? (*dropout_)(x) : x;
    Tensor a = *lora_a_, bm = *lora_b_;
    if (lora_dtype_ != DType::f32) {  // the low-precision branch: every cast is a node of its own
      if (xi.dtype() != lora_dtype_) xi = ops::cast(xi, lora_dtype_);
      a = ops::cast(a, lora_dtype_);
      bm = ops::cast(bm, lora_dtype_);
    }
    Tensor d = ops::linear(ops::linear(xi, a), bm);
    if (d.dtype() != y.dtype()) d = ops::cast(d, y.dtype());
    return ops::add(y, ops::mul(d, lora_scale_));
  }
  int64_t out_features() const { return w_->shape()[0]; }
  int64_t in_features() const { return in_; }

  void add_lora(const LoraConfig& c) {
    in_ = in_features_of_weight();
    lora_a_ = &register_parameter("lora_a", init::kaiming_uniform({c.r, in_}, std::sqrt(5.0)));
    lora_b_ = &register_parameter("lora_b", init::zeros({out_features(), c.r}));
    lora_scale_ = c.scale();
    lora_dtype_ = c.dtype;
    if (c.dropout > 0) {
      dropout_ = std::make_unique<Dropout>(c.dropout);
      register_cell("lora_dropout", *dropout_);
    }
  }
  void set_frozen(Tensor w, const std::string& format) {
    const int64_t n = out_features(), k = in_features_of_weight();
    if (format == "f32" || format == "bf16") {
      const DType want = format == "f32" ? DType::f32 : DType::bf16;
      SPORE_CHECK(w.dtype() == want && w.shape() == Shape({n, k}), ErrorCode::shape_mismatch,
                  "frozen {} matrix: expected {} [{}, {}], got {} {}", format, dtype_name(want), n, k,
                  dtype_name(w.dtype()), shape_str(w.shape()));
    } else {
      SPORE_CHECK(format == "q8_0", ErrorCode::invalid_argument, "frozen matrix format '{}' is not f32, bf16 or q8_0",
                  format);
      SPORE_CHECK(k % 32 == 0 && w.dtype() == DType::u8 && w.shape() == Shape({n, k / 32 * 34}),
                  ErrorCode::shape_mismatch,
                  "frozen q8_0 matrix: expected u8 [{}, {}] (K = {} in blocks of 32), got {} {}", n, k / 32 * 34, k,
                  dtype_name(w.dtype()), shape_str(w.shape()));
    }
    in_ = k;
    format_ = format;
    for (Parameter* p : parameter_slots(false))
      if (&p->value == w_) {
        p->value = std::move(w);
        p->requires_grad = false;
      }
  }

 private:
  int64_t in_features_of_weight() const { return format_ == "f32" || format_ == "bf16" ? w_->shape()[1] : in_; }
  // The weight as f32 [N, K]: itself, or dequantized where it is used (no gradient reaches a frozen copy).
  Tensor weight_f32() const {
    if (format_ == "f32") return *w_;
    if (format_ == "bf16") return ops::cast(*w_, DType::f32);
    const int64_t n = w_->shape()[0];
    Tensor rows = Tensor::empty({n}, DType::i64);
    for (int64_t i = 0; i < n; ++i) rows.data<int64_t>()[i] = i;
    return ops::embed_blockq(*w_, rows, format_);
  }

  Tensor* w_;
  Tensor* b_ = nullptr;
  std::string format_ = "f32";
  int64_t in_ = 0;  // K (a q8_0 weight's shape does not say it directly)
  Tensor* lora_a_ = nullptr;
  Tensor* lora_b_ = nullptr;
  double lora_scale_ = 0;
  DType lora_dtype_ = DType::f32;
  std::unique_ptr<Dropout> dropout_;
};

std::unique_ptr<WeightCell> matrix(int64_t rows, int64_t cols, double std, bool bias = false) {
  Tensor w = init::normal({rows, cols}, 0.0, std);
  return std::make_unique<WeightCell>(std::move(w), bias ? init::zeros({rows}) : Tensor());
}
std::unique_ptr<WeightCell> norm(int64_t n) { return std::make_unique<WeightCell>(init::ones({n})); }

}  // namespace

void LlamaConfig::validate() const {
  SPORE_CHECK(arch == "llama" || arch == "qwen2", ErrorCode::invalid_argument, "arch '{}' is not llama or qwen2", arch);
  SPORE_CHECK(vocab > 0 && dim > 0 && layers > 0 && heads > 0 && kv_heads > 0 && ffn > 0 && ctx > 0,
              ErrorCode::invalid_argument,
              "model sizes must be > 0: vocab {}, dim {}, layers {}, heads {}, kv heads {}, ffn {}, ctx {}", vocab, dim,
              layers, heads, kv_heads, ffn, ctx);
  SPORE_CHECK(dim % heads == 0, ErrorCode::invalid_argument, "dim {} is not a multiple of heads {}", dim, heads);
  SPORE_CHECK(heads % kv_heads == 0, ErrorCode::invalid_argument, "heads {} is not a multiple of kv heads {}", heads,
              kv_heads);
  SPORE_CHECK(head_dim() % 2 == 0, ErrorCode::invalid_argument, "head dim {} (dim / heads) must be even for rope",
              head_dim());
}

struct LlamaModel::Block : Cell {
  std::unique_ptr<WeightCell> attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down;
  explicit Block(const LlamaConfig& c) {
    const int64_t E = c.dim, Dq = c.heads * c.head_dim(), Dkv = c.kv_heads * c.head_dim();
    const double s = c.init_std;
    attn_norm = norm(E);
    attn_q = matrix(Dq, E, s, c.qkv_bias());
    attn_k = matrix(Dkv, E, s, c.qkv_bias());
    attn_v = matrix(Dkv, E, s, c.qkv_bias());
    attn_output = matrix(E, Dq, s);
    ffn_norm = norm(E);
    ffn_gate = matrix(c.ffn, E, s);
    ffn_up = matrix(c.ffn, E, s);
    ffn_down = matrix(E, c.ffn, s);
    register_cell("attn_norm", *attn_norm);
    register_cell("attn_q", *attn_q);
    register_cell("attn_k", *attn_k);
    register_cell("attn_v", *attn_v);
    register_cell("attn_output", *attn_output);
    register_cell("ffn_norm", *ffn_norm);
    register_cell("ffn_gate", *ffn_gate);
    register_cell("ffn_up", *ffn_up);
    register_cell("ffn_down", *ffn_down);
  }
  WeightCell* projection(const std::string& cell) {
    for (auto [name, w] : {std::pair{"attn_q", &attn_q},
                           {"attn_k", &attn_k},
                           {"attn_v", &attn_v},
                           {"attn_output", &attn_output},
                           {"ffn_gate", &ffn_gate},
                           {"ffn_up", &ffn_up},
                           {"ffn_down", &ffn_down}})
      if (cell == name) return w->get();
    return nullptr;
  }
};

LlamaModel::LlamaModel(const LlamaConfig& c) : cfg_(c) {
  c.validate();
  token_embd_ = matrix(c.vocab, c.dim, c.init_std);
  register_cell("token_embd", *token_embd_);
  for (int64_t l = 0; l < c.layers; ++l) {
    auto b = std::make_unique<Block>(c);
    blocks_.push_back(b.get());
    blk_.append(std::move(b));
  }
  register_cell("blk", blk_);
  output_norm_ = norm(c.dim);
  register_cell("output_norm", *output_norm_);
  if (!c.tie_embeddings) {
    output_ = matrix(c.vocab, c.dim, c.init_std);
    register_cell("output", *output_);
  }
}

LlamaModel::~LlamaModel() = default;

const std::vector<LlamaProjection>& llama_projections() {
  static const std::vector<LlamaProjection> p = {{"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
                                                 {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"},
                                                 {"ffn_gate", "mlp.gate_proj"},  {"ffn_up", "mlp.up_proj"},
                                                 {"ffn_down", "mlp.down_proj"}};
  return p;
}

std::string peft_module_name(const std::string& cell) {
  for (const LlamaProjection& p : llama_projections())
    if (cell == p.cell) {
      const std::string m = p.hf_module;
      return m.substr(m.find('.') + 1);
    }
  SPORE_FAIL(ErrorCode::invalid_argument, "'{}' is not a projection of a Llama block", cell);
}

std::vector<std::string> lora_target_cells(const std::string& spec) {
  std::vector<std::string> out;
  std::string known;
  for (const LlamaProjection& p : llama_projections()) known += (known.empty() ? "" : ", ") + peft_module_name(p.cell);
  if (spec == "all-linear") {
    for (const LlamaProjection& p : llama_projections()) out.emplace_back(p.cell);
    return out;
  }
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t end = std::min(spec.find(',', at), spec.size());
    const std::string name = spec.substr(at, end - at);
    at = end + 1;
    std::string cell;
    for (const LlamaProjection& p : llama_projections())
      if (name == p.cell || name == peft_module_name(p.cell)) cell = p.cell;
    SPORE_CHECK(!cell.empty(), ErrorCode::invalid_argument,
                "LoRA target '{}' is not a projection of a Llama block ({}, or all-linear)", name, known);
    if (std::find(out.begin(), out.end(), cell) == out.end()) out.push_back(cell);
  }
  return out;
}

void LoraConfig::validate() const {
  SPORE_CHECK(r > 0 && std::isfinite(alpha) && alpha > 0 && dropout >= 0 && dropout < 1, ErrorCode::invalid_argument,
              "LoRA needs r > 0, alpha > 0 and 0 <= dropout < 1 (r {}, alpha {}, dropout {})", r, alpha, dropout);
  SPORE_CHECK(!targets.empty(), ErrorCode::invalid_argument, "LoRA needs at least one target projection");
  for (const std::string& t : targets) lora_target_cells(t);
  SPORE_CHECK(dtype == DType::f32 || dtype == DType::bf16, ErrorCode::invalid_argument,
              "LoRA dtype must be f32 or bf16, got {}", dtype_name(dtype));
}

void LlamaModel::add_lora(const LoraConfig& c) {
  SPORE_CHECK(!lora_, ErrorCode::invalid_argument, "LlamaModel::add_lora: the model has adapters already");
  c.validate();
  for (Parameter* p : parameter_slots()) p->requires_grad = false;
  for (Block* b : blocks_)
    for (const std::string& t : c.targets) b->projection(t)->add_lora(c);
  lora_ = c;
}

void LlamaModel::set_frozen_matrix(const std::string& name, Tensor w, const std::string& format) {
  // "blk.<i>.<cell>.weight"
  const std::string pre = "blk.", suf = ".weight";
  WeightCell* cell = nullptr;
  if (name.rfind(pre, 0) == 0 && name.size() > pre.size() + suf.size() &&
      name.compare(name.size() - suf.size(), suf.size(), suf) == 0) {
    const std::string mid = name.substr(pre.size(), name.size() - pre.size() - suf.size());
    const size_t dot = mid.find('.');
    if (dot != std::string::npos && dot > 0 && mid.find_first_not_of("0123456789") == dot) {
      const int64_t i = std::stoll(mid.substr(0, dot));
      if (i < cfg_.layers) cell = blocks_[static_cast<size_t>(i)]->projection(mid.substr(dot + 1));
    }
  }
  SPORE_CHECK(cell != nullptr, ErrorCode::invalid_argument, "'{}' is not a block matrix of this model", name);
  cell->set_frozen(std::move(w), format);
}

Tensor LlamaModel::construct(const Tensor& tokens) {
  SPORE_CHECK(tokens.rank() == 2 && (tokens.dtype() == DType::i64 || tokens.dtype() == DType::i32),
              ErrorCode::invalid_argument, "LlamaModel takes token ids i64 [batch, time], got {} {}",
              dtype_name(tokens.dtype()), shape_str(tokens.shape()));
  return forward_part(tokens, tokens.shape()[1], 0, cfg_.layers, true, true);
}

Tensor LlamaModel::forward_part(const Tensor& in, int64_t T, int64_t first, int64_t last, bool embed, bool head) {
  const LlamaConfig& c = cfg_;
  SPORE_CHECK(0 <= first && first <= last && last <= c.layers, ErrorCode::invalid_argument,
              "LlamaModel: blocks [{}, {}) outside [0, {})", first, last, c.layers);
  if (embed)
    SPORE_CHECK(in.rank() == 2 && (in.dtype() == DType::i64 || in.dtype() == DType::i32) && in.shape()[1] == T,
                ErrorCode::invalid_argument, "LlamaModel takes token ids i64 [batch, {}], got {} {}", T,
                dtype_name(in.dtype()), shape_str(in.shape()));
  else
    SPORE_CHECK(in.rank() == 2 && T > 0 && in.shape()[0] % T == 0 && in.shape()[1] == c.dim,
                ErrorCode::invalid_argument, "LlamaModel: a stage takes the residual stream [batch * {}, {}], got {}",
                T, c.dim, shape_str(in.shape()));
  const int64_t B = embed ? in.shape()[0] : in.shape()[0] / T;
  SPORE_CHECK(B > 0 && T > 0 && T <= c.ctx, ErrorCode::invalid_argument,
              "LlamaModel: [batch, time] = [{}, {}] needs batch > 0 and 0 < time <= ctx {}", B, T, c.ctx);
  const int64_t H = c.heads, Hkv = c.kv_heads, G = H / Hkv, D = c.head_dim();
  // Positions 0..T-1 for every sequence (rope takes rows [B*T, heads, D]); the causal mask of the G query heads
  // stacked on one kv head: row r is query r % T.
  Tensor pos = Tensor::empty({B * T}, DType::i64);
  for (int64_t i = 0; i < B * T; ++i) pos.data<int64_t>()[i] = i % T;
  Tensor mask = Tensor::empty({G * T, T}, DType::f32);
  for (int64_t r = 0; r < G * T; ++r)
    for (int64_t j = 0; j < T; ++j)
      mask.data<float>()[r * T + j] = j <= r % T ? 0.0f : -std::numeric_limits<float>::infinity();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const Attrs att{{"scale", scale}};

  auto heads_first = [&](const Tensor& t, int64_t h) {  // [B*T, h, D] -> [B, h, T, D]
    return ops::transpose(ops::reshape(t, {B, T, h, D}), {0, 2, 1, 3});
  };
  // Rows stay 2-D [B*T, E] between the attention blocks: linear and its gradients then run as plain 2-D products
  // (a 3-D x makes the input gradient a batched matmul, which ran 1.2x slower on 1 thread and did not scale to 2).
  Tensor x = embed ? ops::embedding(static_cast<WeightCell&>(*token_embd_).w(), ops::reshape(in, {B * T})) : in;
  for (int64_t l = first; l < last; ++l) {
    Block* b = blocks_[static_cast<size_t>(l)];
    Tensor h = ops::rms_norm(x, b->attn_norm->w(), -1, c.rms_eps);
    Tensor q = ops::reshape(b->attn_q->linear(h), {B * T, H, D});
    Tensor k = ops::reshape(b->attn_k->linear(h), {B * T, Hkv, D});
    Tensor v = ops::reshape(b->attn_v->linear(h), {B * T, Hkv, D});
    // rope is f32 only: under mixed precision (train::ModelOptions::amp_level) q and k arrive in the low dtype.
    if (q.dtype() != DType::f32) q = ops::cast(q, DType::f32);
    if (k.dtype() != DType::f32) k = ops::cast(k, DType::f32);
    q = ops::rope(q, pos, c.rope_theta, c.rope_mode());
    k = ops::rope(k, pos, c.rope_theta, c.rope_mode());
    const Tensor qh = ops::reshape(heads_first(q, H), {B, Hkv, G * T, D});
    const Tensor in4[4] = {qh, heads_first(k, Hkv), heads_first(v, Hkv), mask};
    Tensor a = ops::call1("attention"_op, in4, att);  // [B, Hkv, G*T, D] = [B, H, T, D]
    a = ops::reshape(ops::transpose(ops::reshape(a, {B, H, T, D}), {0, 2, 1, 3}), {B * T, H * D});
    x = ops::add(x, b->attn_output->linear(a));
    h = ops::rms_norm(x, b->ffn_norm->w(), -1, c.rms_eps);
    const Tensor ff = ops::mul(ops::silu(b->ffn_gate->linear(h)), b->ffn_up->linear(h));
    x = ops::add(x, b->ffn_down->linear(ff));
  }
  if (!head) return x;
  x = ops::rms_norm(x, static_cast<WeightCell&>(*output_norm_).w(), -1, c.rms_eps);
  const WeightCell& out = static_cast<WeightCell&>(c.tie_embeddings ? *token_embd_ : *output_);
  return ops::reshape(ops::linear(x, out.w()), {B, T, c.vocab});
}

}  // namespace spore::nn
