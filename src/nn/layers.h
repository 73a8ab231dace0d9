#pragma once
// Standard layers, each a Cell whose construct() is written with ops:: (so autodiff and tracing see
// plain ops). Default initialization follows PyTorch: Dense/Conv weights kaiming_uniform(a=sqrt(5)),
// biases uniform(+-1/sqrt(fan_in)); norms start at weight 1, bias 0.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nn/cell.h"
#include "ops/conv3d.h"
#include "ops/ops.h"

namespace spore::nn {

// ---- linear and convolution
class Dense : public Cell {
 public:
  // activation: "" (none) | "relu" | "gelu" | "silu" | "tanh" | "sigmoid".
  Dense(int64_t in_channels, int64_t out_channels, bool has_bias = true, std::string activation = "",
        DType dtype = DType::f32);
  Tensor construct(const Tensor& x) override;
  Tensor& weight() { return *weight_; }  // [out, in]
  Tensor* bias() { return bias_; }       // [out] or nullptr

 private:
  Tensor* weight_;
  Tensor* bias_ = nullptr;
  std::string activation_;
};

struct Conv2dConfig {
  int64_t stride = 1;
  std::string pad_mode = "pad";  // "pad" (explicit `padding`) | "same" | "valid"
  int64_t padding = 0;           // every side, pad_mode "pad" only
  int64_t dilation = 1;
  int64_t groups = 1;
  bool has_bias = true;
};

class Conv2d : public Cell {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dConfig cfg = {},
         DType dtype = DType::f32);
  Tensor construct(const Tensor& x) override;
  Tensor& weight() { return *weight_; }  // [out, in/groups, k, k]
  Tensor* bias() { return bias_; }

 private:
  Tensor* weight_;
  Tensor* bias_ = nullptr;
  ops::Conv2dOptions opts_;
};

struct Conv2dTransposeConfig {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool has_bias = true;
};

class Conv2dTranspose : public Cell {
 public:
  Conv2dTranspose(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dTransposeConfig cfg = {},
                  DType dtype = DType::f32);
  Tensor construct(const Tensor& x) override;
  Tensor& weight() { return *weight_; }  // [in, out/groups, k, k]
  Tensor* bias() { return bias_; }

 private:
  Tensor* weight_;
  Tensor* bias_ = nullptr;
  ops::ConvTranspose2dOptions opts_;
};

// 3-D (NCDHW) layers, as PyTorch's Conv3d / ConvTranspose3d: kernel_size, stride, padding and dilation take one
// value (every axis) or three (D, H, W); padding is symmetric per axis.
struct Conv3dConfig {
  ops::Ints stride{1};
  std::string pad_mode = "pad";  // "pad" (explicit `padding`) | "same" | "valid"
  ops::Ints padding{0};          // pad_mode "pad" only
  ops::Ints dilation{1};
  int64_t groups = 1;
  bool has_bias = true;
};

class Conv3d : public Cell {
 public:
  Conv3d(int64_t in_channels, int64_t out_channels, ops::Ints kernel_size, Conv3dConfig cfg = {},
         DType dtype = DType::f32);
  Tensor construct(const Tensor& x) override;
  Tensor& weight() { return *weight_; }  // [out, in/groups, kD, kH, kW]
  Tensor* bias() { return bias_; }

 private:
  Tensor* weight_;
  Tensor* bias_ = nullptr;
  ops::Conv3dOptions opts_;
};

struct Conv3dTransposeConfig {
  ops::Ints stride{1};
  ops::Ints padding{0};
  ops::Ints output_padding{0};
  ops::Ints dilation{1};
  int64_t groups = 1;
  bool has_bias = true;
};

class Conv3dTranspose : public Cell {
 public:
  Conv3dTranspose(int64_t in_channels, int64_t out_channels, ops::Ints kernel_size, Conv3dTransposeConfig cfg = {},
                  DType dtype = DType::f32);
  Tensor construct(const Tensor& x) override;
  Tensor& weight() { return *weight_; }  // [in, out/groups, kD, kH, kW]
  Tensor* bias() { return bias_; }

 private:
  Tensor* weight_;
  Tensor* bias_ = nullptr;
  ops::ConvTranspose3dOptions opts_;
};

// ---- activations
class ReLU : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return ops::relu(x); }
};
class GELU : public Cell {
 public:
  explicit GELU(bool approximate = false) : approximate_(approximate) {}
  Tensor construct(const Tensor& x) override { return ops::gelu(x, approximate_ ? "tanh" : "none"); }

 private:
  bool approximate_;
};
class SiLU : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return ops::silu(x); }
};
class Tanh : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return ops::tanh(x); }
};
class Sigmoid : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return ops::sigmoid(x); }
};
class Softmax : public Cell {
 public:
  explicit Softmax(int64_t axis = -1) : axis_(axis) {}
  Tensor construct(const Tensor& x) override { return ops::softmax(x, axis_); }

 private:
  int64_t axis_;
};

// ---- pooling and reshaping
class MaxPool2d : public Cell {
 public:
  // stride 0 = kernel_size; pad_mode "valid" | "same" | "pad" (with `padding` on every side).
  explicit MaxPool2d(int64_t kernel_size = 1, int64_t stride = 0, std::string pad_mode = "valid",
                     int64_t padding = 0);
  Tensor construct(const Tensor& x) override { return ops::max_pool2d(x, opts_); }

 private:
  ops::Pool2dOptions opts_;
};
class AvgPool2d : public Cell {
 public:
  explicit AvgPool2d(int64_t kernel_size = 1, int64_t stride = 0, std::string pad_mode = "valid",
                     int64_t padding = 0);
  Tensor construct(const Tensor& x) override { return ops::avg_pool2d(x, opts_); }

 private:
  ops::Pool2dOptions opts_;
};
// 3-D pooling: kernel_size / stride / padding take one value (every axis) or three (D, H, W); stride {} = kernel.
struct Pool3dConfig {
  ops::Ints stride{};
  std::string pad_mode = "valid";  // "valid" | "same" | "pad" (with `padding`)
  ops::Ints padding{0};
  bool ceil_mode = false;
  bool count_include_pad = false;  // AvgPool3d only
};
class MaxPool3d : public Cell {
 public:
  explicit MaxPool3d(ops::Ints kernel_size, Pool3dConfig cfg = {});
  Tensor construct(const Tensor& x) override { return ops::max_pool3d(x, opts_); }

 private:
  ops::Pool3dOptions opts_;
};
class AvgPool3d : public Cell {
 public:
  explicit AvgPool3d(ops::Ints kernel_size, Pool3dConfig cfg = {});
  Tensor construct(const Tensor& x) override { return ops::avg_pool3d(x, opts_); }

 private:
  ops::Pool3dOptions opts_;
};
// PyTorch's adaptive average pooling: output cell (i, j) averages rows [floor(i*H/oh), ceil((i+1)*H/oh)).
class AdaptiveAvgPool2d : public Cell {
 public:
  explicit AdaptiveAvgPool2d(int64_t output_size = 1) : AdaptiveAvgPool2d(output_size, output_size) {}
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w);
  Tensor construct(const Tensor& x) override;

 private:
  int64_t out_h_, out_w_;
};
class Flatten : public Cell {
 public:
  explicit Flatten(int64_t axis = 1) : axis_(axis) {}
  Tensor construct(const Tensor& x) override { return ops::flatten(x, axis_); }

 private:
  int64_t axis_;
};

// Inverted dropout, active only in training mode. Each call draws a fresh mask, reproducible from the seed:
// inside an nn::StepScope the op's seed hashes (seed, call index in the scope) and its offset input is the
// scope's step counter (so a compiled training step draws fresh masks); outside one the seed hashes (seed,
// host call counter). Without a seed, each Dropout takes a distinct one from nn::next_init_key(), so
// nn::set_seed makes the masks reproducible and no two cells share masks.
class Dropout : public Cell {
 public:
  explicit Dropout(double p = 0.5, std::optional<uint64_t> seed = std::nullopt);
  Tensor construct(const Tensor& x) override;
  int64_t calls() const { return calls_; }  // training-mode calls so far
  uint64_t seed() const { return seed_; }

 private:
  double p_;
  uint64_t seed_;
  int64_t calls_ = 0;
};

// ---- normalization
// Train mode: batch statistics (biased variance) normalize the input and update the running stats
// with running = momentum * running + (1 - momentum) * batch (MindSpore's convention; the running
// variance uses the unbiased estimate). Eval mode: ops::batch_norm with the running stats. Under a trace the
// running stats are updated only inside an nn::StepScope (they become symbolic: the scope's owner binds them).
// SyncBatchNorm for data parallelism (RAII, per thread; train::Model opens one around each shard's forward and
// backward under ParallelContext::sync_bn). While one is active, BatchNorm in train mode normalizes with the global
// batch's statistics: it passes the per-channel sums of its input and of the squared deviations through
// `allreduce_sum` (a sum over the ranks, differentiable: its gradient is the allreduce of the incoming gradient, which
// makes the statistics' gradients global too) and divides by its rows times `ranks` (every rank has as many rows).
class BatchNormSync {
 public:
  BatchNormSync(std::function<Tensor(const Tensor&)> allreduce_sum, int64_t ranks);
  ~BatchNormSync();
  BatchNormSync(const BatchNormSync&) = delete;
  BatchNormSync& operator=(const BatchNormSync&) = delete;
  static const BatchNormSync* current();  // the innermost on this thread, or nullptr
  Tensor allreduce_sum(const Tensor& t) const { return fn_(t); }
  int64_t ranks() const { return ranks_; }

 private:
  std::function<Tensor(const Tensor&)> fn_;
  int64_t ranks_;
  const BatchNormSync* prev_;
};

class BatchNorm : public Cell {
 public:
  Tensor construct(const Tensor& x) override;
  Tensor& gamma() { return *gamma_; }
  Tensor& beta() { return *beta_; }
  Tensor& moving_mean() { return *mean_; }
  Tensor& moving_variance() { return *var_; }

 protected:
  BatchNorm(int64_t num_features, double eps, double momentum, int rank, DType dtype);

 private:
  int64_t num_features_;
  double eps_, momentum_;
  int rank_;  // 2 or 3 (BatchNorm1d), 4 (BatchNorm2d)
  Tensor *gamma_, *beta_, *mean_, *var_;
};
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.9, DType dtype = DType::f32)
      : BatchNorm(num_features, eps, momentum, 2, dtype) {}
};
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.9, DType dtype = DType::f32)
      : BatchNorm(num_features, eps, momentum, 4, dtype) {}
};

// Normalizes over the trailing dims given by normalized_shape.
class LayerNorm : public Cell {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     DType dtype = DType::f32);
  Tensor construct(const Tensor& x) override;

 private:
  std::vector<int64_t> shape_;
  double eps_;
  Tensor *gamma_ = nullptr, *beta_ = nullptr;
};

class RMSNorm : public Cell {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, DType dtype = DType::f32);
  Tensor construct(const Tensor& x) override;

 private:
  int64_t dim_;
  double eps_;
  Tensor* weight_;
};

// ---- embedding
class Embedding : public Cell {
 public:
  // Table initialized N(0, 1) like PyTorch.
  Embedding(int64_t vocab_size, int64_t embedding_size, DType dtype = DType::f32);
  Tensor construct(const Tensor& ids) override;
  Tensor& embedding_table() { return *table_; }

 private:
  int64_t vocab_;
  Tensor* table_;
};

}  // namespace spore::nn
