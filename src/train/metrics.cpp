#include "train/metrics.h"

#include <charconv>

#include <fmt/format.h>

namespace spore::train {

namespace {

// A batch read to the host: logits row-major [B,C] as doubles, labels as int64 checked to be in [0, C).
struct Batch {
  int64_t rows = 0, classes = 0;
  std::vector<double> logits;
  std::vector<int64_t> labels;
  const double* row(int64_t r) const { return logits.data() + r * classes; }
};

std::vector<int64_t> read_labels(const Tensor& labels, const std::string& metric) {
  SPORE_CHECK(labels.defined(), ErrorCode::invalid_argument, "[{}] labels are undefined", metric);
  SPORE_CHECK(labels.dtype() == DType::i32 || labels.dtype() == DType::i64, ErrorCode::dtype_mismatch,
              "[{}] expected labels of dtype i32 or i64, got {}", metric, dtype_name(labels.dtype()));
  SPORE_CHECK(labels.rank() == 1, ErrorCode::shape_mismatch, "[{}] expected labels of shape [B], got {}", metric,
              shape_str(labels.shape()));
  std::vector<int64_t> out(static_cast<size_t>(labels.numel()));
  for (int64_t i = 0; i < labels.numel(); ++i) out[static_cast<size_t>(i)] = static_cast<int64_t>(labels.item_at(i));
  return out;
}

Batch read_batch(const Tensor& logits, const Tensor& labels, const std::string& metric) {
  SPORE_CHECK(logits.defined(), ErrorCode::invalid_argument, "[{}] logits are undefined", metric);
  SPORE_CHECK(is_floating(logits.dtype()), ErrorCode::dtype_mismatch, "[{}] expected floating logits, got {}", metric,
              dtype_name(logits.dtype()));
  SPORE_CHECK(logits.rank() == 2, ErrorCode::shape_mismatch, "[{}] expected logits of shape [B,C], got {}", metric,
              shape_str(logits.shape()));
  Batch b;
  b.rows = logits.dim(0);
  b.classes = logits.dim(1);
  SPORE_CHECK(b.classes > 0, ErrorCode::shape_mismatch, "[{}] expected at least one class, got logits {}", metric,
              shape_str(logits.shape()));
  b.labels = read_labels(labels, metric);
  SPORE_CHECK(static_cast<int64_t>(b.labels.size()) == b.rows, ErrorCode::shape_mismatch,
              "[{}] expected {} labels (logits {}), got {}", metric, b.rows, shape_str(logits.shape()), b.labels.size());
  for (size_t i = 0; i < b.labels.size(); ++i)
    SPORE_CHECK(b.labels[i] >= 0 && b.labels[i] < b.classes, ErrorCode::invalid_argument,
                "[{}] label {} at row {} is out of range [0, {})", metric, b.labels[i], i, b.classes);
  b.logits = logits.to_doubles();
  return b;
}

// First index of the row maximum (NaN never wins).
int64_t argmax_row(const double* row, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (row[j] > row[best]) best = j;
  return best;
}

double ratio(int64_t num, int64_t den) { return den ? static_cast<double>(num) / static_cast<double>(den) : 0.0; }

}  // namespace

void Accuracy::update(const Tensor& logits, const Tensor& labels, const Tensor&) {
  const Batch b = read_batch(logits, labels, name());
  for (int64_t r = 0; r < b.rows; ++r) correct_ += argmax_row(b.row(r), b.classes) == b.labels[static_cast<size_t>(r)];
  total_ += b.rows;
}
double Accuracy::value() const { return ratio(correct_, total_); }

TopKAccuracy::TopKAccuracy(int64_t k) : k_(k) {
  SPORE_CHECK(k >= 1, ErrorCode::invalid_argument, "[top_k_accuracy] expected k >= 1, got {}", k);
}
std::string TopKAccuracy::name() const { return fmt::format("top{}_accuracy", k_); }
void TopKAccuracy::update(const Tensor& logits, const Tensor& labels, const Tensor&) {
  const Batch b = read_batch(logits, labels, name());
  for (int64_t r = 0; r < b.rows; ++r) {
    const double* row = b.row(r);
    const int64_t y = b.labels[static_cast<size_t>(r)];
    // The label's rank: classes ahead of it are larger, or equal with a lower index.
    int64_t ahead = 0;
    for (int64_t j = 0; j < b.classes; ++j) ahead += row[j] > row[y] || (row[j] == row[y] && j < y);
    correct_ += ahead < k_;
  }
  total_ += b.rows;
}
double TopKAccuracy::value() const { return ratio(correct_, total_); }

void LossMetric::update(const Tensor& logits, const Tensor& labels, const Tensor& loss) {
  SPORE_CHECK(loss.defined(), ErrorCode::invalid_argument, "[loss] update needs the batch's loss, got none");
  SPORE_CHECK(loss.numel() == 1, ErrorCode::shape_mismatch, "[loss] expected a scalar loss, got shape {}",
              shape_str(loss.shape()));
  int64_t rows = 0;
  if (labels.defined()) {
    SPORE_CHECK(labels.rank() >= 1, ErrorCode::shape_mismatch, "[loss] expected labels [B,...], got a scalar");
    rows = labels.dim(0);
  } else {
    SPORE_CHECK(logits.defined() && logits.rank() >= 1, ErrorCode::invalid_argument,
                "[loss] needs labels or logits to know the batch size");
    rows = logits.dim(0);
  }
  sum_ += loss.item() * static_cast<double>(rows);
  count_ += rows;
}

std::string ClassificationMetric::name() const {
  switch (kind_) {
    case Kind::precision: return "precision";
    case Kind::recall: return "recall";
    case Kind::f1: return "f1";
  }
  return "f1";
}

void ClassificationMetric::update(const Tensor& logits, const Tensor& labels, const Tensor&) {
  const Batch b = read_batch(logits, labels, name());
  if (tp_.empty()) {
    tp_.assign(static_cast<size_t>(b.classes), 0);
    fp_ = fn_ = tp_;
  }
  SPORE_CHECK(static_cast<int64_t>(tp_.size()) == b.classes, ErrorCode::shape_mismatch,
              "[{}] expected {} classes (as in earlier batches), got {}", name(), tp_.size(), b.classes);
  for (int64_t r = 0; r < b.rows; ++r) {
    const auto pred = static_cast<size_t>(argmax_row(b.row(r), b.classes));
    const auto y = static_cast<size_t>(b.labels[static_cast<size_t>(r)]);
    if (pred == y) {
      ++tp_[y];
    } else {
      ++fp_[pred];
      ++fn_[y];
    }
  }
}

double ClassificationMetric::value() const {
  double sum = 0;
  int64_t classes = 0;
  for (size_t c = 0; c < tp_.size(); ++c) {
    if (tp_[c] + fp_[c] + fn_[c] == 0) continue;  // neither a label nor a prediction
    ++classes;
    switch (kind_) {
      case Kind::precision: sum += ratio(tp_[c], tp_[c] + fp_[c]); break;
      case Kind::recall: sum += ratio(tp_[c], tp_[c] + fn_[c]); break;
      case Kind::f1: sum += ratio(2 * tp_[c], 2 * tp_[c] + fp_[c] + fn_[c]); break;
    }
  }
  return classes ? sum / static_cast<double>(classes) : 0.0;
}

std::unique_ptr<Metric> make_metric(const std::string& name) {
  if (name == "accuracy") return std::make_unique<Accuracy>();
  if (name == "loss") return std::make_unique<LossMetric>();
  if (name == "precision") return std::make_unique<ClassificationMetric>(ClassificationMetric::Kind::precision);
  if (name == "recall") return std::make_unique<ClassificationMetric>(ClassificationMetric::Kind::recall);
  if (name == "f1") return std::make_unique<ClassificationMetric>(ClassificationMetric::Kind::f1);
  const std::string suffix = "_accuracy";
  if (name.size() > 3 + suffix.size() && name.starts_with("top") && name.ends_with(suffix)) {
    int64_t k = 0;
    const char* first = name.data() + 3;
    const char* last = name.data() + name.size() - suffix.size();
    const auto [ptr, ec] = std::from_chars(first, last, k);
    if (ec == std::errc() && ptr == last && k >= 1) return std::make_unique<TopKAccuracy>(k);
  }
  SPORE_FAIL(ErrorCode::invalid_argument,
             "[make_metric] unknown metric '{}' (expected accuracy, top<k>_accuracy, loss, precision, recall, f1)", name);
}

}  // namespace spore::train
