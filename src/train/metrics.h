#pragma once
// Streaming classification metrics, accumulated over batches on the host (they are not traced).
//
//   auto acc = train::make_metric("accuracy");
//   for (batch : data) acc->update(logits, labels);   // logits [B,C] floating, labels [B] i32/i64
//   double a = acc->value();  acc->reset();
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace spore::train {

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void reset() = 0;
  // `loss` is the batch's mean loss (a scalar); only the "loss" metric needs it, and it alone accepts
  // undefined logits.
  virtual void update(const Tensor& logits, const Tensor& labels, const Tensor& loss = Tensor()) = 0;
  // The metric over everything since the last reset; 0 before any update.
  virtual double value() const = 0;
  virtual std::string name() const = 0;
};

// Fraction of rows whose argmax (first index on ties) is the label.
class Accuracy final : public Metric {
 public:
  void reset() override { correct_ = total_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, const Tensor& loss = Tensor()) override;
  double value() const override;
  std::string name() const override { return "accuracy"; }

 private:
  int64_t correct_ = 0, total_ = 0;
};

// Fraction of rows whose label is among the k largest logits (ties: lower index ranks first, like topk).
class TopKAccuracy final : public Metric {
 public:
  explicit TopKAccuracy(int64_t k);
  void reset() override { correct_ = total_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, const Tensor& loss = Tensor()) override;
  double value() const override;
  std::string name() const override;

 private:
  int64_t k_;
  int64_t correct_ = 0, total_ = 0;
};

// Mean of the per-batch mean losses, weighted by batch size (= the mean loss per example).
class LossMetric final : public Metric {
 public:
  void reset() override { sum_ = 0, count_ = 0; }
  void update(const Tensor& logits, const Tensor& labels, const Tensor& loss = Tensor()) override;
  double value() const override { return count_ ? sum_ / static_cast<double>(count_) : 0.0; }
  std::string name() const override { return "loss"; }

 private:
  double sum_ = 0;
  int64_t count_ = 0;
};

// Macro-averaged precision / recall / F1 over the classes that occur as a label or a prediction
// (scikit-learn's "macro" with zero_division=0); F1 is the mean of the per-class F1 scores.
class ClassificationMetric final : public Metric {
 public:
  enum class Kind { precision, recall, f1 };
  explicit ClassificationMetric(Kind kind) : kind_(kind) {}
  void reset() override { tp_.clear(), fp_.clear(), fn_.clear(); }
  void update(const Tensor& logits, const Tensor& labels, const Tensor& loss = Tensor()) override;
  double value() const override;
  std::string name() const override;

 private:
  Kind kind_;
  std::vector<int64_t> tp_, fp_, fn_;  // per class; sized by the first batch's class count
};

// "accuracy", "top<k>_accuracy" (e.g. "top5_accuracy"), "loss", "precision", "recall", "f1".
std::unique_ptr<Metric> make_metric(const std::string& name);

}  // namespace spore::train
