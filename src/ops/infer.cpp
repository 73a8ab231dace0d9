#include "ops/infer.h"

namespace spore::infer {

std::vector<TensorType> same_as_input(const InferContext& c) { return {c.in(0)}; }

std::vector<Dim> broadcast_dims(const InferContext& c, const std::vector<Dim>& a, const std::vector<Dim>& b) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<Dim> out(r);
  for (size_t i = 0; i < r; ++i) {
    const Dim one(1);
    const Dim& x = i + a.size() >= r ? a[i + a.size() - r] : one;
    const Dim& y = i + b.size() >= r ? b[i + b.size() - r] : one;
    if (x == y) out[i] = x;
    else if (x.is_static() && x.size == 1) out[i] = y;
    else if (y.is_static() && y.size == 1) out[i] = x;
    else if (!x.is_static() && y.is_static()) out[i] = y;
    else if (!y.is_static() && x.is_static()) out[i] = x;
    else if (!x.is_static() && !y.is_static()) out[i] = x;  // two symbols: assume equal at run time
    else c.fail(ErrorCode::shape_mismatch, fmt::format("cannot broadcast shapes {} and {} (dim {}: {} vs {})",
                                                       dims_str(a), dims_str(b),
                                                       i, x.str(), y.str()));
  }
  return out;
}

DType common_dtype(const InferContext& c, int first, int count) {
  const int end = count < 0 ? c.num_inputs() : first + count;
  const DType t = c.in(first).dtype;
  for (int i = first + 1; i < end; ++i) {
    c.check(c.in(i).dtype == t, ErrorCode::dtype_mismatch,
            "inputs must have the same dtype: input {} is {}, input {} is {}", first, dtype_name(t), i,
            dtype_name(c.in(i).dtype));
  }
  return t;
}

int64_t normalize_axis(const InferContext& c, int64_t axis, int rank, const char* attr) {
  c.check(axis >= -rank && axis < std::max(rank, 1), ErrorCode::invalid_argument, "{}={} is out of range for rank {}",
          attr, axis, rank);
  return axis < 0 ? axis + rank : axis;
}

Dim mul_dims(const Dim& a, const Dim& b) {
  if (a.is_static() && b.is_static()) return Dim(a.size * b.size);
  if (a.is_static() && a.size == 1) return b;
  if (b.is_static() && b.size == 1) return a;
  return Dim::symbol(a.str() + "*" + b.str());
}

bool dims_equal(const Dim& a, const Dim& b) { return a == b; }

std::string dims_str(const std::vector<Dim>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ',';
    s += d[i].str();
  }
  return s + "]";
}

}  // namespace spore::infer
