#include "nn/loss.h"

#include "ops/ops.h"

namespace spore::nn {
namespace {

void check_same_shape(const Tensor& a, const Tensor& b, const char* name) {
  SPORE_CHECK(a.shape() == b.shape(), ErrorCode::shape_mismatch, "nn::{}: prediction {} and target {} differ in shape",
              name, shape_str(a.shape()), shape_str(b.shape()));
  SPORE_CHECK(a.dtype() == b.dtype(), ErrorCode::dtype_mismatch, "nn::{}: prediction is {}, target is {}", name,
              dtype_name(a.dtype()), dtype_name(b.dtype()));
  SPORE_CHECK(is_floating(a.dtype()), ErrorCode::dtype_mismatch, "nn::{}: expected a floating prediction, got {}",
              name, dtype_name(a.dtype()));
}

// Checks [N, C] scores against [N] class ids and returns the one-hot target in the scores' dtype.
Tensor one_hot_target(const Tensor& scores, const Tensor& labels, const char* name) {
  SPORE_CHECK(scores.rank() == 2, ErrorCode::shape_mismatch, "nn::{}: expected [N, C] scores, got {}", name,
              shape_str(scores.shape()));
  SPORE_CHECK(labels.dtype() == DType::i32 || labels.dtype() == DType::i64, ErrorCode::dtype_mismatch,
              "nn::{}: expected i32 or i64 class ids, got {}", name, dtype_name(labels.dtype()));
  SPORE_CHECK(labels.rank() == 1 && labels.dim(0) == scores.dim(0), ErrorCode::shape_mismatch,
              "nn::{}: expected labels [{}], got {}", name, scores.dim(0), shape_str(labels.shape()));
  return ops::one_hot(labels, scores.dim(1), scores.dtype());
}

}  // namespace

LossBase::LossBase(std::string reduction) : reduction_(std::move(reduction)) {
  SPORE_CHECK(reduction_ == "none" || reduction_ == "mean" || reduction_ == "sum", ErrorCode::invalid_argument,
              "nn loss: expected reduction none|mean|sum, got '{}'", reduction_);
}

Tensor LossBase::construct(std::span<const Tensor> xs) {
  SPORE_CHECK(xs.size() == 2, ErrorCode::invalid_argument, "nn::{}: expected (prediction, target), got {} inputs",
              name_, xs.size());
  return reduce(compute(xs[0], xs[1]));
}

Tensor LossBase::construct(const Tensor& x) { return construct(std::span<const Tensor>(&x, 1)); }

Tensor LossBase::reduce(const Tensor& loss) const {
  if (reduction_ == "mean") return ops::reduce_mean(loss);
  if (reduction_ == "sum") return ops::reduce_sum(loss);
  return loss;
}

SoftmaxCrossEntropyWithLogits::SoftmaxCrossEntropyWithLogits(bool sparse, std::string reduction, double smoothing)
    : LossBase(std::move(reduction)), sparse_(sparse), smoothing_(smoothing) {
  name_ = "SoftmaxCrossEntropyWithLogits";
  SPORE_CHECK(smoothing >= 0 && smoothing <= 1, ErrorCode::invalid_argument,
              "nn::SoftmaxCrossEntropyWithLogits: expected 0 <= label_smoothing <= 1, got {}", smoothing);
}

Tensor SoftmaxCrossEntropyWithLogits::compute(const Tensor& logits, const Tensor& labels) {
  SPORE_CHECK(is_floating(logits.dtype()), ErrorCode::dtype_mismatch,
              "nn::SoftmaxCrossEntropyWithLogits: expected floating logits, got {}", dtype_name(logits.dtype()));
  Tensor target;
  if (sparse_) {
    target = one_hot_target(logits, labels, name_);
  } else {
    SPORE_CHECK(logits.rank() == 2, ErrorCode::shape_mismatch,
                "nn::SoftmaxCrossEntropyWithLogits: expected [N, C] logits, got {}", shape_str(logits.shape()));
    check_same_shape(logits, labels, name_);
    target = labels;
  }
  if (smoothing_ > 0)
    target = ops::add(ops::mul(target, 1.0 - smoothing_), smoothing_ / static_cast<double>(logits.dim(1)));
  return ops::neg(ops::reduce_sum(ops::mul(target, ops::log_softmax(logits, -1)), {-1}));
}

MSELoss::MSELoss(std::string reduction) : LossBase(std::move(reduction)) { name_ = "MSELoss"; }

Tensor MSELoss::compute(const Tensor& pred, const Tensor& target) {
  check_same_shape(pred, target, name_);
  const Tensor d = ops::sub(pred, target);
  return ops::mul(d, d);
}

L1Loss::L1Loss(std::string reduction) : LossBase(std::move(reduction)) { name_ = "L1Loss"; }

Tensor L1Loss::compute(const Tensor& pred, const Tensor& target) {
  check_same_shape(pred, target, name_);
  return ops::abs(ops::sub(pred, target));
}

SmoothL1Loss::SmoothL1Loss(double beta, std::string reduction) : LossBase(std::move(reduction)), beta_(beta) {
  name_ = "SmoothL1Loss";
  SPORE_CHECK(beta > 0, ErrorCode::invalid_argument, "nn::SmoothL1Loss: expected beta > 0, got {}", beta);
}

Tensor SmoothL1Loss::compute(const Tensor& pred, const Tensor& target) {
  check_same_shape(pred, target, name_);
  const Tensor d = ops::abs(ops::sub(pred, target));
  // min(d, beta) covers both branches: q = min(d, beta); loss = 0.5 q^2 / beta + (d - q).
  const Tensor q = ops::minimum(d, ops::full({}, beta_, d.dtype()));
  return ops::add(ops::mul(ops::mul(q, q), 0.5 / beta_), ops::sub(d, q));
}

BCEWithLogitsLoss::BCEWithLogitsLoss(std::string reduction) : LossBase(std::move(reduction)) {
  name_ = "BCEWithLogitsLoss";
}

Tensor BCEWithLogitsLoss::compute(const Tensor& x, const Tensor& y) {
  check_same_shape(x, y, name_);
  const Tensor softplus_neg_abs = ops::log(ops::add(ops::exp(ops::neg(ops::abs(x))), 1.0));
  return ops::add(ops::sub(ops::relu(x), ops::mul(x, y)), softplus_neg_abs);
}

NLLLoss::NLLLoss(std::string reduction) : LossBase(std::move(reduction)) { name_ = "NLLLoss"; }

Tensor NLLLoss::compute(const Tensor& log_probs, const Tensor& target) {
  SPORE_CHECK(is_floating(log_probs.dtype()), ErrorCode::dtype_mismatch,
              "nn::NLLLoss: expected floating log-probabilities, got {}", dtype_name(log_probs.dtype()));
  const Tensor onehot = one_hot_target(log_probs, target, name_);
  return ops::neg(ops::reduce_sum(ops::mul(onehot, log_probs), {-1}));
}

}  // namespace spore::nn
