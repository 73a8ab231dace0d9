#include <gtest/gtest.h>

#include "test_util.h"
#include "train/metrics.h"

namespace spore::train {
namespace {

// Batch 1: predictions 1, 0 (a tie: first index wins), 2, 0 for labels 1, 1, 2, 2. Class 3 never occurs.
Tensor logits1(DType dt) {
  return Tensor::from_doubles({0.1, 2.0, 0.3, -10, 1.0, 1.0, 0.5, -10, 0.25, 0.125, 0.875, -10, 3.0, 0.0, 2.0, -10},
                              {4, 4}, dt);
}
// Batch 2: predictions 2, 0 for labels 0, 0; the first row ranks its label third.
Tensor logits2(DType dt) { return Tensor::from_doubles({0, 1, 5, -10, 5, 0, 0, -10}, {2, 4}, dt); }
Tensor labels(std::vector<int64_t> v, DType dt) {
  const auto n = static_cast<int64_t>(v.size());
  return Tensor::from_doubles(std::vector<double>(v.begin(), v.end()), {n}, dt);
}

double run(Metric& m, DType logit_dt, DType label_dt) {
  m.reset();
  m.update(logits1(logit_dt), labels({1, 1, 2, 2}, label_dt), Tensor::scalar(2.0, DType::f32));
  m.update(logits2(logit_dt), labels({0, 0}, label_dt), Tensor::scalar(0.5, DType::f32));
  return m.value();
}

TEST(Metrics, HandValuesForEveryDtype) {
  // Confusion over both batches: class 0 tp 1 fp 2 fn 1; class 1 tp 1 fp 0 fn 1; class 2 tp 1 fp 1 fn 1.
  const std::vector<std::pair<std::string, double>> want{
      {"accuracy", 3.0 / 6},
      {"top1_accuracy", 3.0 / 6},
      {"top2_accuracy", 5.0 / 6},  // all but batch 2's first row
      {"top5_accuracy", 1.0},
      {"loss", (2.0 * 4 + 0.5 * 2) / 6},
      {"precision", (1.0 / 3 + 1.0 + 1.0 / 2) / 3},
      {"recall", 0.5},
      {"f1", (2.0 / 5 + 2.0 / 3 + 1.0 / 2) / 3},
  };
  for (DType logit_dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (DType label_dt : {DType::i32, DType::i64}) {
      for (const auto& [name, value] : want) {
        auto m = make_metric(name);
        EXPECT_EQ(m->name(), name);
        EXPECT_EQ(m->value(), 0.0) << name;
        EXPECT_DOUBLE_EQ(run(*m, logit_dt, label_dt), value) << name << " " << dtype_name(logit_dt);
        // reset() starts over: the same batches give the same value.
        EXPECT_DOUBLE_EQ(run(*m, logit_dt, label_dt), value) << name;
        m->reset();
        EXPECT_EQ(m->value(), 0.0) << name;
      }
    }
  }
}

TEST(Metrics, SingleBatchAndStridedLogits) {
  Accuracy acc;
  // The transpose of a [C,B] tensor: a non-contiguous [B,C] view.
  const Tensor cb = Tensor::from_doubles({0.9, 0.1, 0.2, 0.1, 0.8, 0.3, 0.0, 0.1, 0.7}, {3, 3}, DType::f32);
  const Tensor bc = cb.permute(std::vector<int64_t>{1, 0});
  acc.update(bc, labels({0, 1, 2}, DType::i64));
  EXPECT_EQ(acc.value(), 1.0);
  acc.update(bc, labels({2, 1, 0}, DType::i32));
  EXPECT_EQ(acc.value(), 4.0 / 6);

  // 1000 rows, 7 classes: label = row % 7, logits favour (row % 7) on even rows and class 0 otherwise.
  const int64_t rows = 1000, classes = 7;
  std::vector<double> v(static_cast<size_t>(rows * classes), 0.0);
  std::vector<int64_t> y(static_cast<size_t>(rows));
  int64_t expected = 0;
  for (int64_t r = 0; r < rows; ++r) {
    y[static_cast<size_t>(r)] = r % classes;
    v[static_cast<size_t>(r * classes + (r % 2 == 0 ? r % classes : 0))] = 1.0;
    expected += r % 2 == 0 || r % classes == 0;
  }
  Accuracy big;
  big.update(Tensor::from_doubles(v, {rows, classes}, DType::f32), labels(y, DType::i64));
  EXPECT_DOUBLE_EQ(big.value(), static_cast<double>(expected) / rows);
  TopKAccuracy top7(7);
  top7.update(Tensor::from_doubles(v, {rows, classes}, DType::f32), labels(y, DType::i64));
  EXPECT_EQ(top7.value(), 1.0);
}

TEST(Metrics, LossNeedsOnlyTheBatchSize) {
  LossMetric loss;
  loss.update(Tensor(), labels({0, 1, 2}, DType::i64), Tensor::scalar(1.0, DType::f64));
  loss.update(Tensor::zeros({1, 5}, DType::f32), Tensor(), Tensor::from_doubles({3.0}, {1}, DType::f16));
  EXPECT_DOUBLE_EQ(loss.value(), 1.5);
}

TEST(Metrics, BadInputsAreClearErrors) {
  Accuracy acc;
  std::string m = testing::error_of([&] { acc.update(logits1(DType::f32), labels({1, 1, 2, 2}, DType::f32)); });
  EXPECT_NE(m.find("[accuracy] expected labels of dtype i32 or i64, got f32"), std::string::npos) << m;
  m = testing::error_of([&] { acc.update(logits1(DType::f32), labels({1, 1, 2}, DType::i64)); });
  EXPECT_NE(m.find("[accuracy] expected 4 labels (logits [4,4]), got 3"), std::string::npos) << m;
  m = testing::error_of([&] { acc.update(logits1(DType::f32), labels({1, 1, 4, 2}, DType::i64)); });
  EXPECT_NE(m.find("label 4 at row 2 is out of range [0, 4)"), std::string::npos) << m;
  m = testing::error_of([&] { acc.update(Tensor::zeros({4}, DType::f32), labels({1, 1, 2, 2}, DType::i64)); });
  EXPECT_NE(m.find("expected logits of shape [B,C], got [4]"), std::string::npos) << m;
  m = testing::error_of([&] { acc.update(Tensor::zeros({4, 4}, DType::i32), labels({1, 1, 2, 2}, DType::i64)); });
  EXPECT_NE(m.find("expected floating logits, got i32"), std::string::npos) << m;
  auto f1 = make_metric("f1");
  f1->update(logits1(DType::f32), labels({1, 1, 2, 2}, DType::i64));
  m = testing::error_of([&] { f1->update(Tensor::zeros({2, 3}, DType::f32), labels({1, 1}, DType::i64)); });
  EXPECT_NE(m.find("[f1] expected 4 classes (as in earlier batches), got 3"), std::string::npos) << m;
  m = testing::error_of([] { make_metric("loss")->update(Tensor(), labels({0}, DType::i64)); });
  EXPECT_NE(m.find("[loss] update needs the batch's loss"), std::string::npos) << m;
  for (const char* bad : {"top0_accuracy", "topx_accuracy", "auc"}) {
    m = testing::error_of([&] { make_metric(bad); });
    EXPECT_NE(m.find("unknown metric"), std::string::npos) << bad << ": " << m;
  }
}

}  // namespace
}  // namespace spore::train
