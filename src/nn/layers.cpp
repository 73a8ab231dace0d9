#include "nn/layers.h"

#include <cmath>

#include "autodiff/autodiff.h"
#include "nn/init.h"

namespace spore::nn {
namespace {

void check_positive(int64_t v, const char* layer, const char* what) {
  SPORE_CHECK(v > 0, ErrorCode::invalid_argument, "nn::{}: expected {} > 0, got {}", layer, what, v);
}

void check_rank(const Tensor& x, int rank, const char* layer) {
  SPORE_CHECK(x.rank() == rank, ErrorCode::shape_mismatch, "nn::{}: expected a rank-{} input, got shape {}", layer,
              rank, shape_str(x.shape()));
}

Tensor activate(const Tensor& x, const std::string& a) {
  if (a.empty()) return x;
  if (a == "relu") return ops::relu(x);
  if (a == "gelu") return ops::gelu(x);
  if (a == "silu") return ops::silu(x);
  if (a == "tanh") return ops::tanh(x);
  if (a == "sigmoid") return ops::sigmoid(x);
  throw_error(ErrorCode::invalid_argument, fmt::format("nn::Dense: unknown activation '{}'", a));
}

// PyTorch's default for Linear/Conv: kaiming_uniform(a=sqrt(5)) weights, bias U(+-1/sqrt(fan_in)).
Tensor default_weight(const Shape& shape, DType dtype) {
  return init::kaiming_uniform(shape, std::sqrt(5.0), "fan_in", "leaky_relu", dtype);
}
Tensor default_bias(int64_t n, int64_t fan_in, DType dtype) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  return init::uniform({n}, -bound, bound, dtype);
}

ops::Pool2dOptions pool_options(const char* layer, int64_t k, int64_t s, const std::string& pad_mode, int64_t p) {
  check_positive(k, layer, "kernel_size");
  SPORE_CHECK(s >= 0 && p >= 0, ErrorCode::invalid_argument, "nn::{}: expected stride, padding >= 0, got {}, {}",
              layer, s, p);
  SPORE_CHECK(pad_mode == "valid" || pad_mode == "same" || pad_mode == "pad", ErrorCode::invalid_argument,
              "nn::{}: expected pad_mode valid|same|pad, got '{}'", layer, pad_mode);
  ops::Pool2dOptions o;
  o.kernel = {k, k};
  o.stride = {s == 0 ? k : s, s == 0 ? k : s};
  o.pad_mode = pad_mode;
  if (pad_mode == "pad") o.padding = {p, p, p, p};
  return o;
}

// One value for every spatial axis, or one per axis (D, H, W).
ops::Ints per_axis3(const ops::Ints& v, const char* layer, const char* what, int64_t min) {
  SPORE_CHECK(v.size() == 1 || v.size() == 3, ErrorCode::invalid_argument, "nn::{}: {} takes 1 or 3 values, got {}",
              layer, what, v.size());
  for (int64_t x : v)
    SPORE_CHECK(x >= min, ErrorCode::invalid_argument, "nn::{}: expected {} >= {}, got {}", layer, what, min, x);
  return v.size() == 1 ? ops::Ints(3, v[0]) : v;
}

ops::Pool3dOptions pool3d_options(const char* layer, const ops::Ints& k, const Pool3dConfig& cfg) {
  SPORE_CHECK(cfg.pad_mode == "valid" || cfg.pad_mode == "same" || cfg.pad_mode == "pad", ErrorCode::invalid_argument,
              "nn::{}: expected pad_mode valid|same|pad, got '{}'", layer, cfg.pad_mode);
  ops::Pool3dOptions o;
  o.kernel = per_axis3(k, layer, "kernel_size", 1);
  o.stride = cfg.stride.empty() ? o.kernel : per_axis3(cfg.stride, layer, "stride", 1);
  o.pad_mode = cfg.pad_mode;
  const ops::Ints p = per_axis3(cfg.padding, layer, "padding", 0);
  if (cfg.pad_mode == "pad") o.padding = {p[0], p[1], p[2], p[0], p[1], p[2]};
  o.ceil_mode = cfg.ceil_mode;
  o.count_include_pad = cfg.count_include_pad;
  return o;
}

}  // namespace

// ---- Dense
Dense::Dense(int64_t in, int64_t out, bool has_bias, std::string activation, DType dtype)
    : activation_(std::move(activation)) {
  check_positive(in, "Dense", "in_channels");
  check_positive(out, "Dense", "out_channels");
  const std::string& a = activation_;
  SPORE_CHECK(a.empty() || a == "relu" || a == "gelu" || a == "silu" || a == "tanh" || a == "sigmoid",
              ErrorCode::invalid_argument, "nn::Dense: unknown activation '{}'", a);
  weight_ = &register_parameter("weight", default_weight({out, in}, dtype));
  if (has_bias) bias_ = &register_parameter("bias", default_bias(out, in, dtype));
}

Tensor Dense::construct(const Tensor& x) {
  SPORE_CHECK(x.rank() >= 1 && x.dim(-1) == weight_->dim(1), ErrorCode::shape_mismatch,
              "nn::Dense: expected input [..., {}], got {}", weight_->dim(1), shape_str(x.shape()));
  Tensor y = bias_ ? ops::linear(x, *weight_, *bias_) : ops::linear(x, *weight_);
  return activate(y, activation_);
}

// ---- Conv2d
Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, Conv2dConfig cfg, DType dtype) {
  check_positive(in, "Conv2d", "in_channels");
  check_positive(out, "Conv2d", "out_channels");
  check_positive(k, "Conv2d", "kernel_size");
  check_positive(cfg.stride, "Conv2d", "stride");
  check_positive(cfg.dilation, "Conv2d", "dilation");
  check_positive(cfg.groups, "Conv2d", "groups");
  SPORE_CHECK(in % cfg.groups == 0 && out % cfg.groups == 0, ErrorCode::invalid_argument,
              "nn::Conv2d: channels {} -> {} are not divisible by groups {}", in, out, cfg.groups);
  SPORE_CHECK(cfg.pad_mode == "pad" || cfg.pad_mode == "same" || cfg.pad_mode == "valid", ErrorCode::invalid_argument,
              "nn::Conv2d: expected pad_mode pad|same|valid, got '{}'", cfg.pad_mode);
  SPORE_CHECK(cfg.padding >= 0 && (cfg.padding == 0 || cfg.pad_mode == "pad"), ErrorCode::invalid_argument,
              "nn::Conv2d: padding {} needs pad_mode 'pad' and must be >= 0", cfg.padding);
  opts_.stride = {cfg.stride, cfg.stride};
  opts_.dilation = {cfg.dilation, cfg.dilation};
  opts_.groups = cfg.groups;
  opts_.pad_mode = cfg.pad_mode;
  opts_.padding = {cfg.padding, cfg.padding, cfg.padding, cfg.padding};
  weight_ = &register_parameter("weight", default_weight({out, in / cfg.groups, k, k}, dtype));
  if (cfg.has_bias) bias_ = &register_parameter("bias", default_bias(out, in / cfg.groups * k * k, dtype));
}

Tensor Conv2d::construct(const Tensor& x) {
  check_rank(x, 4, "Conv2d");
  SPORE_CHECK(x.dim(1) == weight_->dim(1) * opts_.groups, ErrorCode::shape_mismatch,
              "nn::Conv2d: expected {} input channels, got shape {}", weight_->dim(1) * opts_.groups,
              shape_str(x.shape()));
  return bias_ ? ops::conv2d(x, *weight_, *bias_, opts_) : ops::conv2d(x, *weight_, std::nullopt, opts_);
}

// ---- Conv2dTranspose
Conv2dTranspose::Conv2dTranspose(int64_t in, int64_t out, int64_t k, Conv2dTransposeConfig cfg, DType dtype) {
  check_positive(in, "Conv2dTranspose", "in_channels");
  check_positive(out, "Conv2dTranspose", "out_channels");
  check_positive(k, "Conv2dTranspose", "kernel_size");
  check_positive(cfg.stride, "Conv2dTranspose", "stride");
  check_positive(cfg.dilation, "Conv2dTranspose", "dilation");
  check_positive(cfg.groups, "Conv2dTranspose", "groups");
  SPORE_CHECK(in % cfg.groups == 0 && out % cfg.groups == 0, ErrorCode::invalid_argument,
              "nn::Conv2dTranspose: channels {} -> {} are not divisible by groups {}", in, out, cfg.groups);
  SPORE_CHECK(cfg.padding >= 0 && cfg.output_padding >= 0, ErrorCode::invalid_argument,
              "nn::Conv2dTranspose: expected padding, output_padding >= 0, got {}, {}", cfg.padding,
              cfg.output_padding);
  opts_.stride = {cfg.stride, cfg.stride};
  opts_.padding = {cfg.padding, cfg.padding, cfg.padding, cfg.padding};
  opts_.output_padding = {cfg.output_padding, cfg.output_padding};
  opts_.dilation = {cfg.dilation, cfg.dilation};
  opts_.groups = cfg.groups;
  // PyTorch computes fan_in of the [in, out/groups, k, k] weight from dim 1.
  weight_ = &register_parameter("weight", default_weight({in, out / cfg.groups, k, k}, dtype));
  if (cfg.has_bias) bias_ = &register_parameter("bias", default_bias(out, out / cfg.groups * k * k, dtype));
}

Tensor Conv2dTranspose::construct(const Tensor& x) {
  check_rank(x, 4, "Conv2dTranspose");
  SPORE_CHECK(x.dim(1) == weight_->dim(0), ErrorCode::shape_mismatch,
              "nn::Conv2dTranspose: expected {} input channels, got shape {}", weight_->dim(0), shape_str(x.shape()));
  return bias_ ? ops::conv_transpose2d(x, *weight_, *bias_, opts_)
               : ops::conv_transpose2d(x, *weight_, std::nullopt, opts_);
}

// ---- Conv3d
Conv3d::Conv3d(int64_t in, int64_t out, ops::Ints kernel, Conv3dConfig cfg, DType dtype) {
  check_positive(in, "Conv3d", "in_channels");
  check_positive(out, "Conv3d", "out_channels");
  check_positive(cfg.groups, "Conv3d", "groups");
  const ops::Ints k = per_axis3(kernel, "Conv3d", "kernel_size", 1);
  SPORE_CHECK(in % cfg.groups == 0 && out % cfg.groups == 0, ErrorCode::invalid_argument,
              "nn::Conv3d: channels {} -> {} are not divisible by groups {}", in, out, cfg.groups);
  SPORE_CHECK(cfg.pad_mode == "pad" || cfg.pad_mode == "same" || cfg.pad_mode == "valid", ErrorCode::invalid_argument,
              "nn::Conv3d: expected pad_mode pad|same|valid, got '{}'", cfg.pad_mode);
  const ops::Ints p = per_axis3(cfg.padding, "Conv3d", "padding", 0);
  SPORE_CHECK(cfg.pad_mode == "pad" || (p[0] == 0 && p[1] == 0 && p[2] == 0), ErrorCode::invalid_argument,
              "nn::Conv3d: padding needs pad_mode 'pad'");
  opts_.stride = per_axis3(cfg.stride, "Conv3d", "stride", 1);
  opts_.dilation = per_axis3(cfg.dilation, "Conv3d", "dilation", 1);
  opts_.groups = cfg.groups;
  opts_.pad_mode = cfg.pad_mode;
  opts_.padding = {p[0], p[1], p[2], p[0], p[1], p[2]};
  weight_ = &register_parameter("weight", default_weight({out, in / cfg.groups, k[0], k[1], k[2]}, dtype));
  if (cfg.has_bias) bias_ = &register_parameter("bias", default_bias(out, in / cfg.groups * k[0] * k[1] * k[2], dtype));
}

Tensor Conv3d::construct(const Tensor& x) {
  check_rank(x, 5, "Conv3d");
  SPORE_CHECK(x.dim(1) == weight_->dim(1) * opts_.groups, ErrorCode::shape_mismatch,
              "nn::Conv3d: expected {} input channels, got shape {}", weight_->dim(1) * opts_.groups,
              shape_str(x.shape()));
  return bias_ ? ops::conv3d(x, *weight_, *bias_, opts_) : ops::conv3d(x, *weight_, std::nullopt, opts_);
}

// ---- Conv3dTranspose
Conv3dTranspose::Conv3dTranspose(int64_t in, int64_t out, ops::Ints kernel, Conv3dTransposeConfig cfg, DType dtype) {
  check_positive(in, "Conv3dTranspose", "in_channels");
  check_positive(out, "Conv3dTranspose", "out_channels");
  check_positive(cfg.groups, "Conv3dTranspose", "groups");
  const ops::Ints k = per_axis3(kernel, "Conv3dTranspose", "kernel_size", 1);
  SPORE_CHECK(in % cfg.groups == 0 && out % cfg.groups == 0, ErrorCode::invalid_argument,
              "nn::Conv3dTranspose: channels {} -> {} are not divisible by groups {}", in, out, cfg.groups);
  const ops::Ints p = per_axis3(cfg.padding, "Conv3dTranspose", "padding", 0);
  opts_.stride = per_axis3(cfg.stride, "Conv3dTranspose", "stride", 1);
  opts_.padding = {p[0], p[1], p[2], p[0], p[1], p[2]};
  opts_.output_padding = per_axis3(cfg.output_padding, "Conv3dTranspose", "output_padding", 0);
  opts_.dilation = per_axis3(cfg.dilation, "Conv3dTranspose", "dilation", 1);
  opts_.groups = cfg.groups;
  // PyTorch computes fan_in of the [in, out/groups, k...] weight from dim 1.
  weight_ = &register_parameter("weight", default_weight({in, out / cfg.groups, k[0], k[1], k[2]}, dtype));
  if (cfg.has_bias)
    bias_ = &register_parameter("bias", default_bias(out, out / cfg.groups * k[0] * k[1] * k[2], dtype));
}

Tensor Conv3dTranspose::construct(const Tensor& x) {
  check_rank(x, 5, "Conv3dTranspose");
  SPORE_CHECK(x.dim(1) == weight_->dim(0), ErrorCode::shape_mismatch,
              "nn::Conv3dTranspose: expected {} input channels, got shape {}", weight_->dim(0), shape_str(x.shape()));
  return bias_ ? ops::conv_transpose3d(x, *weight_, *bias_, opts_)
               : ops::conv_transpose3d(x, *weight_, std::nullopt, opts_);
}

MaxPool3d::MaxPool3d(ops::Ints k, Pool3dConfig cfg) : opts_(pool3d_options("MaxPool3d", k, cfg)) {}
AvgPool3d::AvgPool3d(ops::Ints k, Pool3dConfig cfg) : opts_(pool3d_options("AvgPool3d", k, cfg)) {}

// ---- pooling
MaxPool2d::MaxPool2d(int64_t k, int64_t s, std::string pad_mode, int64_t p)
    : opts_(pool_options("MaxPool2d", k, s, pad_mode, p)) {}
AvgPool2d::AvgPool2d(int64_t k, int64_t s, std::string pad_mode, int64_t p)
    : opts_(pool_options("AvgPool2d", k, s, pad_mode, p)) {}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : out_h_(out_h), out_w_(out_w) {
  check_positive(out_h, "AdaptiveAvgPool2d", "output height");
  check_positive(out_w, "AdaptiveAvgPool2d", "output width");
}

Tensor AdaptiveAvgPool2d::construct(const Tensor& x) {
  check_rank(x, 4, "AdaptiveAvgPool2d");
  const int64_t h = x.dim(2), w = x.dim(3);
  SPORE_CHECK(h >= out_h_ && w >= out_w_, ErrorCode::shape_mismatch,
              "nn::AdaptiveAvgPool2d: input {} is smaller than the output {}x{}", shape_str(x.shape()), out_h_, out_w_);
  if (out_h_ == 1 && out_w_ == 1) return ops::global_avg_pool(x);
  if (h % out_h_ == 0 && w % out_w_ == 0) {
    ops::Pool2dOptions o;
    o.kernel = {h / out_h_, w / out_w_};
    o.stride = o.kernel;
    return ops::avg_pool2d(x, o);
  }
  // Uneven windows: average each [start, end) window and stitch rows and columns back together.
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < out_h_; ++i) {
    const int64_t h0 = i * h / out_h_, h1 = ((i + 1) * h + out_h_ - 1) / out_h_;
    std::vector<Tensor> cols;
    for (int64_t j = 0; j < out_w_; ++j) {
      const int64_t w0 = j * w / out_w_, w1 = ((j + 1) * w + out_w_ - 1) / out_w_;
      cols.push_back(ops::reduce_mean(ops::slice(x, {h0, w0}, {h1, w1}, {2, 3}), {2, 3}, true));
    }
    rows.push_back(ops::concat(cols, 3));
  }
  return ops::concat(rows, 2);
}

// ---- Dropout
namespace {
// splitmix64 of (seed, n) so consecutive n get unrelated keys; non-negative to fit the i64 attribute.
int64_t mix_seed(uint64_t seed, uint64_t n) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * n;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<int64_t>(z & 0x7FFFFFFFFFFFFFFFull);
}
}  // namespace

Dropout::Dropout(double p, std::optional<uint64_t> seed) : p_(p) {
  SPORE_CHECK(p >= 0 && p < 1, ErrorCode::invalid_argument, "nn::Dropout: expected 0 <= p < 1, got {}", p);
  if (seed) {
    seed_ = *seed;
  } else {
    // Distinct per cell and reproducible under nn::set_seed, like a parameter's initializer key.
    const InitKey k = next_init_key();
    seed_ = static_cast<uint64_t>(mix_seed(k.seed, k.stream + 1));
  }
}

Tensor Dropout::construct(const Tensor& x) {
  if (!training() || p_ == 0) return x;
  ++calls_;
  if (StepScope* scope = StepScope::current()) {
    const int64_t k = scope->next_call(this);
    return ops::dropout(x, p_, true, mix_seed(seed_, static_cast<uint64_t>(k) + 1), scope->counter());
  }
  return ops::dropout(x, p_, true, mix_seed(seed_, static_cast<uint64_t>(calls_)));
}

// ---- BatchNorm
namespace {
thread_local const BatchNormSync* t_bn_sync = nullptr;
}
BatchNormSync::BatchNormSync(std::function<Tensor(const Tensor&)> allreduce_sum, int64_t ranks)
    : fn_(std::move(allreduce_sum)), ranks_(ranks), prev_(t_bn_sync) {
  SPORE_CHECK(fn_ != nullptr && ranks_ >= 1, ErrorCode::invalid_argument,
              "nn::BatchNormSync: needs an allreduce function and ranks >= 1, got {}", ranks_);
  t_bn_sync = this;
}
BatchNormSync::~BatchNormSync() { t_bn_sync = prev_; }
const BatchNormSync* BatchNormSync::current() { return t_bn_sync; }

BatchNorm::BatchNorm(int64_t n, double eps, double momentum, int rank, DType dtype)
    : num_features_(n), eps_(eps), momentum_(momentum), rank_(rank) {
  check_positive(n, "BatchNorm", "num_features");
  SPORE_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, ErrorCode::invalid_argument,
              "nn::BatchNorm: expected eps > 0 and 0 <= momentum <= 1, got {}, {}", eps, momentum);
  gamma_ = &register_parameter("gamma", init::ones({n}, dtype));
  beta_ = &register_parameter("beta", init::zeros({n}, dtype));
  mean_ = &register_parameter("moving_mean", init::zeros({n}, dtype), false);
  var_ = &register_parameter("moving_variance", init::ones({n}, dtype), false);
}

Tensor BatchNorm::construct(const Tensor& x) {
  const bool ok_rank = rank_ == 4 ? x.rank() == 4 : (x.rank() == 2 || x.rank() == 3);
  SPORE_CHECK(ok_rank && x.dim(1) == num_features_, ErrorCode::shape_mismatch,
              "nn::BatchNorm{}: expected input [N, {}{}], got {}", rank_ == 4 ? "2d" : "1d", num_features_,
              rank_ == 4 ? ", H, W" : "(, L)", shape_str(x.shape()));
  if (!training()) return ops::batch_norm(x, *gamma_, *beta_, *mean_, *var_, eps_);
  std::vector<int64_t> axes{0}, bshape{1, num_features_};
  for (int d = 2; d < x.rank(); ++d) {
    axes.push_back(d);
    bshape.push_back(1);
  }
  const BatchNormSync* sync = BatchNormSync::current();
  // Rows behind each channel's statistics: this input's, or the global batch's under SyncBatchNorm.
  const int64_t count = x.numel() / num_features_ * (sync ? sync->ranks() : 1);
  // SyncBatchNorm: sums over the ranks, then / count (one process: reduce_mean).
  const auto batch_mean = [&](const Tensor& t) {
    if (!sync) return ops::reduce_mean(t, axes, true);
    return ops::div(sync->allreduce_sum(ops::reduce_sum(t, axes, true)), static_cast<double>(count));
  };
  const Tensor mean = batch_mean(x);
  const Tensor centered = ops::sub(x, mean);
  const Tensor var = batch_mean(ops::mul(centered, centered));
  Tensor y = ops::mul(centered, ops::rsqrt(ops::add(var, eps_)));
  y = ops::add(ops::mul(y, ops::reshape(*gamma_, bshape)), ops::reshape(*beta_, bshape));
  // Running stats update eagerly, and under a trace only inside a StepScope (whose owner binds the buffers as
  // plan inputs/outputs); a trace outside one leaves them as they are rather than leak symbolic tensors.
  if (!mean.is_symbolic() || StepScope::current() != nullptr) {
    autodiff::NoGradGuard no_grad;
    const double unbias = count > 1 ? static_cast<double>(count) / static_cast<double>(count - 1) : 1.0;
    const Tensor m = ops::cast(ops::reshape(mean, {num_features_}), mean_->dtype());
    const Tensor v = ops::cast(ops::mul(ops::reshape(var, {num_features_}), unbias), var_->dtype());
    *mean_ = ops::add(ops::mul(*mean_, momentum_), ops::mul(m, 1.0 - momentum_));
    *var_ = ops::add(ops::mul(*var_, momentum_), ops::mul(v, 1.0 - momentum_));
  }
  return y;
}

// ---- LayerNorm / RMSNorm
LayerNorm::LayerNorm(std::vector<int64_t> normalized_shape, double eps, bool affine, DType dtype)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  SPORE_CHECK(!shape_.empty(), ErrorCode::invalid_argument, "nn::LayerNorm: normalized_shape is empty");
  for (int64_t d : shape_) check_positive(d, "LayerNorm", "normalized dim");
  if (affine) {
    gamma_ = &register_parameter("gamma", init::ones(shape_, dtype));
    beta_ = &register_parameter("beta", init::zeros(shape_, dtype));
  }
}

Tensor LayerNorm::construct(const Tensor& x) {
  const int k = static_cast<int>(shape_.size());
  bool ok = x.rank() >= k;
  for (int i = 0; ok && i < k; ++i) ok = x.dim(x.rank() - k + i) == shape_[i];
  SPORE_CHECK(ok, ErrorCode::shape_mismatch, "nn::LayerNorm: expected input [..., {}], got {}",
              shape_str(shape_).substr(1, shape_str(shape_).size() - 2), shape_str(x.shape()));
  std::optional<Tensor> g, b;
  if (gamma_) g = *gamma_, b = *beta_;
  return ops::layer_norm(x, g, b, -k, eps_);
}

RMSNorm::RMSNorm(int64_t dim, double eps, DType dtype) : dim_(dim), eps_(eps) {
  check_positive(dim, "RMSNorm", "dim");
  weight_ = &register_parameter("weight", init::ones({dim}, dtype));
}

Tensor RMSNorm::construct(const Tensor& x) {
  SPORE_CHECK(x.rank() >= 1 && x.dim(-1) == dim_, ErrorCode::shape_mismatch,
              "nn::RMSNorm: expected input [..., {}], got {}", dim_, shape_str(x.shape()));
  return ops::rms_norm(x, *weight_, -1, eps_);
}

// ---- Embedding
Embedding::Embedding(int64_t vocab, int64_t dim, DType dtype) : vocab_(vocab) {
  check_positive(vocab, "Embedding", "vocab_size");
  check_positive(dim, "Embedding", "embedding_size");
  table_ = &register_parameter("embedding_table", init::normal({vocab, dim}, 0.0, 1.0, dtype));
}

Tensor Embedding::construct(const Tensor& ids) {
  SPORE_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, ErrorCode::dtype_mismatch,
              "nn::Embedding: expected i32 or i64 ids, got {}", dtype_name(ids.dtype()));
  return ops::embedding(*table_, ids);
}

}  // namespace spore::nn
