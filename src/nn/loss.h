#pragma once
// Losses as Cells taking (prediction, target), written with ops:: so autodiff differentiates them.
// reduction: "none" (per-sample/element losses) | "mean" | "sum".
#include <string>

#include "nn/cell.h"

namespace spore::nn {

class LossBase : public Cell {
 public:
  explicit LossBase(std::string reduction);
  Tensor construct(std::span<const Tensor> xs) override;
  Tensor construct(const Tensor& x) override;  // an error: losses take (prediction, target)
  const std::string& reduction() const { return reduction_; }

 protected:
  virtual Tensor compute(const Tensor& pred, const Tensor& target) = 0;  // unreduced
  Tensor reduce(const Tensor& loss) const;
  const char* name_ = "loss";

 private:
  std::string reduction_;
};

// logits [N, C]; labels: sparse -> i32/i64 class ids [N]; dense -> probabilities [N, C] (logits' dtype).
// Label smoothing mixes the target with the uniform distribution: t' = t * (1 - s) + s / C.
// Unreduced output: [N].
class SoftmaxCrossEntropyWithLogits : public LossBase {
 public:
  explicit SoftmaxCrossEntropyWithLogits(bool sparse = false, std::string reduction = "none",
                                         double label_smoothing = 0.0);

 protected:
  Tensor compute(const Tensor& logits, const Tensor& labels) override;

 private:
  bool sparse_;
  double smoothing_;
};

class MSELoss : public LossBase {
 public:
  explicit MSELoss(std::string reduction = "mean");

 protected:
  Tensor compute(const Tensor& pred, const Tensor& target) override;
};

class L1Loss : public LossBase {
 public:
  explicit L1Loss(std::string reduction = "mean");

 protected:
  Tensor compute(const Tensor& pred, const Tensor& target) override;
};

// 0.5 * d^2 / beta where |d| < beta, else |d| - 0.5 * beta.
class SmoothL1Loss : public LossBase {
 public:
  explicit SmoothL1Loss(double beta = 1.0, std::string reduction = "mean");

 protected:
  Tensor compute(const Tensor& pred, const Tensor& target) override;

 private:
  double beta_;
};

// Numerically stable: max(x, 0) - x * y + log(1 + exp(-|x|)).
class BCEWithLogitsLoss : public LossBase {
 public:
  explicit BCEWithLogitsLoss(std::string reduction = "mean");

 protected:
  Tensor compute(const Tensor& logits, const Tensor& target) override;
};

// log_probs [N, C], target i32/i64 [N]: -log_probs[n, target[n]]. Unreduced output: [N].
class NLLLoss : public LossBase {
 public:
  explicit NLLLoss(std::string reduction = "mean");

 protected:
  Tensor compute(const Tensor& log_probs, const Tensor& target) override;
};

}  // namespace spore::nn
