// Reference kernels of the norm family: two-pass statistics in double.
#include <cmath>

#include "backend/reference/families.h"
#include "backend/reference/util.h"
#include "base/rng.h"

namespace spore::reference {
namespace {

// layout nchw8c: x is [N, C/8, H, W, 8], lane l of block cb is channel cb * 8 + l.
void batch_norm_kernel(KernelContext& k) {
  const Tensor& xt = k.in(0);
  const bool blocked = k.attrs.has("layout") && k.attrs.s("layout") == "nchw8c";
  const int64_t c = blocked ? xt.dim(1) * 8 : xt.dim(1);
  const int64_t inner = xt.numel() / std::max<int64_t>(xt.dim(0) * c, 1);
  const double eps = k.attrs.f("epsilon");
  const auto x = xt.to_doubles(), scale = k.in(1).to_doubles(), bias = k.in(2).to_doubles();
  const auto mean = k.in(3).to_doubles(), var = k.in(4).to_doubles();
  for (int64_t i = 0; i < xt.numel(); ++i) {
    const int64_t ch = blocked ? (i / (inner * 8)) % (c / 8) * 8 + i % 8 : (i / inner) % c;
    put(k.out(0), i, (x[i] - mean[ch]) / std::sqrt(var[ch] + eps) * scale[ch] + bias[ch]);
  }
}

// Rows of `size` elements: everything from `axis` on is one row.
int64_t row_size(const Tensor& x, int64_t axis) {
  if (axis < 0) axis += x.rank();
  int64_t s = 1;
  for (int i = static_cast<int>(axis); i < x.rank(); ++i) s *= x.shape()[i];
  return s;
}

void layer_norm_kernel(KernelContext& k) {
  const int64_t size = row_size(k.in(0), k.attrs.i("axis"));
  const int64_t rows = size ? k.in(0).numel() / size : 0;
  const double eps = k.attrs.f("epsilon");
  const auto x = k.in(0).to_doubles();
  const auto w = k.num_inputs() > 1 ? k.in(1).to_doubles() : std::vector<double>(size, 1.0);
  const auto b = k.num_inputs() > 2 ? k.in(2).to_doubles() : std::vector<double>(size, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * size;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < size; ++i) mean += row[i];
    mean /= static_cast<double>(size);
    for (int64_t i = 0; i < size; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= static_cast<double>(size);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < size; ++i) put(k.out(0), r * size + i, (row[i] - mean) * inv * w[i] + b[i]);
  }
}

void rms_norm_kernel(KernelContext& k) {
  const int64_t size = row_size(k.in(0), k.attrs.i("axis"));
  const int64_t rows = size ? k.in(0).numel() / size : 0;
  const double eps = k.attrs.f("epsilon");
  const auto x = k.in(0).to_doubles();
  const auto w = k.num_inputs() > 1 ? k.in(1).to_doubles() : std::vector<double>(size, 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * size;
    double ss = 0;
    for (int64_t i = 0; i < size; ++i) ss += row[i] * row[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(size) + eps);
    for (int64_t i = 0; i < size; ++i) put(k.out(0), r * size + i, row[i] * inv * w[i]);
  }
}

void group_norm_kernel(KernelContext& k) {
  const Tensor& xt = k.in(0);
  const int64_t n = xt.dim(0), c = xt.dim(1), groups = k.attrs.i("num_groups");
  const int64_t inner = xt.numel() / std::max<int64_t>(n * c, 1);
  const int64_t size = c / groups * inner;  // elements of one (sample, group)
  const double eps = k.attrs.f("epsilon");
  const auto x = xt.to_doubles();
  const auto w = k.num_inputs() > 1 ? k.in(1).to_doubles() : std::vector<double>(c, 1.0);
  const auto b = k.num_inputs() > 2 ? k.in(2).to_doubles() : std::vector<double>(c, 0.0);
  for (int64_t r = 0; r < n * groups; ++r) {
    const double* row = x.data() + r * size;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < size; ++i) mean += row[i];
    mean /= static_cast<double>(size);
    for (int64_t i = 0; i < size; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= static_cast<double>(size);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < size; ++i) {
      const int64_t ch = (r % groups) * (c / groups) + i / inner;
      put(k.out(0), r * size + i, (row[i] - mean) * inv * w[ch] + b[ch]);
    }
  }
}

// The optional offset input: an i64 or i32 scalar (rank 0 or [1]); 0 when absent.
uint64_t dropout_offset(const KernelContext& k) {
  if (k.num_inputs() < 2) return 0;
  const Tensor& o = k.in(1);
  const int64_t v = o.dtype() == DType::i64 ? o.data<int64_t>()[0] : static_cast<int64_t>(o.data<int32_t>()[0]);
  return static_cast<uint64_t>(v);
}

// The mask rule is part of the op's definition: keep element i iff philox_uniform(seed, offset, i) >= p.
void dropout_kernel(KernelContext& k) {
  const double p = k.attrs.f("p");
  const bool training = k.attrs.b("training");
  const uint64_t seed = static_cast<uint64_t>(k.attrs.i("seed"));
  const uint64_t offset = dropout_offset(k);
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  const auto x = k.in(0).to_doubles();
  for (int64_t i = 0; i < k.in(0).numel(); ++i) {
    if (!training) {
      put(k.out(0), i, x[i]);
      continue;
    }
    const bool keep = static_cast<double>(philox_uniform(seed, offset, static_cast<uint64_t>(i))) >= p;
    put(k.out(0), i, keep ? x[i] * scale : 0.0);
  }
}

}  // namespace

void register_norm(KernelRegistry& r) {
  r.add(Backend::reference, "batch_norm"_op, dtypes::floating, batch_norm_kernel);
  r.add(Backend::reference, "layer_norm"_op, dtypes::floating, layer_norm_kernel);
  r.add(Backend::reference, "rms_norm"_op, dtypes::floating, rms_norm_kernel);
  r.add(Backend::reference, "group_norm"_op, dtypes::floating, group_norm_kernel);
  r.add(Backend::reference, "dropout"_op, dtypes::floating, dropout_kernel);
}

}  // namespace spore::reference
