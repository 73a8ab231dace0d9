// Reference kernels of the reduce family: plain loops in double (floating dtypes) or wrapping
// 64-bit integers (integer dtypes, so i64 stays exact and sums/products wrap like C).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {
namespace {

const char* elem(const Tensor& t, int64_t i) {
  return static_cast<const char*>(t.raw_data()) + i * static_cast<int64_t>(dtype_size(t.dtype()));
}
double ld(const Tensor& t, int64_t i) { return load_as_double(elem(t, i), t.dtype()); }
int64_t ldi(const Tensor& t, int64_t i) {
  const char* p = elem(t, i);
  switch (t.dtype()) {
    case DType::i64: return *reinterpret_cast<const int64_t*>(p);
    case DType::i32: return *reinterpret_cast<const int32_t*>(p);
    case DType::i8: return *reinterpret_cast<const int8_t*>(p);
    case DType::u8: return *reinterpret_cast<const uint8_t*>(p);
    default: return static_cast<int64_t>(load_as_double(p, t.dtype()));
  }
}
// Stores an integer, truncating to the dtype's width (two's complement wrap).
void sti(const Tensor& t, int64_t i, uint64_t v) {
  char* p = static_cast<char*>(t.raw_data()) + i * static_cast<int64_t>(dtype_size(t.dtype()));
  switch (t.dtype()) {
    case DType::i64: *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
    case DType::i32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
    case DType::i8: *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
    case DType::u8: *reinterpret_cast<uint8_t*>(p) = static_cast<uint8_t>(v); break;
    default: store_from_double(p, t.dtype(), static_cast<double>(static_cast<int64_t>(v)));
  }
}

// The reduced axes, sorted (empty attribute = all axes).
std::vector<bool> reduced_mask(const Attrs& a, int rank) {
  std::vector<bool> m(rank, a.ints("axes").empty());
  for (int64_t ax : a.ints("axes")) {
    const int64_t n = ax < 0 ? ax + rank : ax;
    if (n >= 0 && n < rank) m[n] = true;
  }
  return m;
}

// Views the tensor as [outer, n, inner] around `axis`.
struct Split3 {
  int64_t outer = 1, n = 1, inner = 1;
};
Split3 split_at(const Shape& s, int64_t axis) {
  Split3 r;
  const int rank = static_cast<int>(s.size());
  if (rank == 0) return r;
  if (axis < 0) axis += rank;
  for (int d = 0; d < rank; ++d) {
    if (d < axis) r.outer *= s[d];
    else if (d == axis) r.n = s[d];
    else r.inner *= s[d];
  }
  return r;
}

void reduce_kernel(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& y = k.out(0);
  const Shape& s = x.shape();
  const auto mask = reduced_mask(k.attrs, x.rank());
  Shape keep = s;
  for (size_t d = 0; d < s.size(); ++d)
    if (mask[d]) keep[d] = 1;
  const int64_t n_out = y.numel();
  const int64_t count = n_out ? x.numel() / n_out : 0;
  const OpId op = k.op;
  std::vector<int64_t> dst(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, s);
    for (size_t d = 0; d < s.size(); ++d)
      if (mask[d]) idx[d] = 0;
    dst[i] = ravel(idx, keep);
  }
  if (is_floating(x.dtype())) {
    const double init = op == "reduce_prod"_op ? 1.0 : 0.0;
    std::vector<double> acc(n_out, init);
    std::vector<bool> seen(n_out, false);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = ld(x, i);
      double& a = acc[dst[i]];
      if (op == "reduce_sum"_op || op == "reduce_mean"_op) a += v;
      else if (op == "reduce_prod"_op) a *= v;
      else if (!seen[dst[i]] || std::isnan(v)) a = v;
      else if (!std::isnan(a) && (op == "reduce_max"_op ? v > a : v < a)) a = v;
      seen[dst[i]] = true;
    }
    for (int64_t o = 0; o < n_out; ++o) put(y, o, op == "reduce_mean"_op ? acc[o] / static_cast<double>(count) : acc[o]);
  } else {
    std::vector<uint64_t> acc(n_out, op == "reduce_prod"_op ? 1 : 0);
    std::vector<bool> seen(n_out, false);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t v = ldi(x, i);
      uint64_t& a = acc[dst[i]];
      if (op == "reduce_sum"_op) a += static_cast<uint64_t>(v);
      else if (op == "reduce_prod"_op) a *= static_cast<uint64_t>(v);
      else if (!seen[dst[i]] || (op == "reduce_max"_op ? v > static_cast<int64_t>(a) : v < static_cast<int64_t>(a)))
        a = static_cast<uint64_t>(v);
      seen[dst[i]] = true;
    }
    for (int64_t o = 0; o < n_out; ++o) sti(y, o, acc[o]);
  }
}

// True when element i beats the current best b for argmax (argmin when !max); NaN wins like NumPy.
template <typename K>
bool better(K v, K b, bool max) {
  if constexpr (std::is_floating_point_v<K>) {
    if (std::isnan(b)) return false;
    if (std::isnan(v)) return true;
  }
  return max ? v > b : v < b;
}

template <typename K, typename Load>
void arg_rows(KernelContext& k, Load load) {
  const Tensor& x = k.in(0);
  const Split3 p = split_at(x.shape(), x.rank() ? k.attrs.i("axis") : 0);
  const bool max = k.op == "argmax"_op;
  int64_t* out = k.out(0).data<int64_t>();
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      int64_t best = 0;
      K bv = load(x, o * p.n * p.inner + i);
      for (int64_t j = 1; j < p.n; ++j) {
        const K v = load(x, (o * p.n + j) * p.inner + i);
        if (better(v, bv, max)) bv = v, best = j;
      }
      out[o * p.inner + i] = best;
    }
}

void arg_kernel(KernelContext& k) {
  if (is_floating(k.in(0).dtype())) arg_rows<double>(k, ld);
  else arg_rows<int64_t>(k, ldi);
}

void softmax_kernel(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Split3 p = split_at(x.shape(), k.attrs.i("axis"));
  const bool log = k.op == "log_softmax"_op;
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      auto at = [&](int64_t j) { return (o * p.n + j) * p.inner + i; };
      double m = -std::numeric_limits<double>::infinity();
      bool nan = false;
      for (int64_t j = 0; j < p.n; ++j) {
        const double v = ld(x, at(j));
        if (std::isnan(v)) nan = true;
        else m = std::max(m, v);
      }
      if (nan) m = std::numeric_limits<double>::quiet_NaN();
      double s = 0;
      for (int64_t j = 0; j < p.n; ++j) s += std::exp(ld(x, at(j)) - m);
      for (int64_t j = 0; j < p.n; ++j) {
        const double v = ld(x, at(j)) - m;
        put(k.out(0), at(j), log ? v - std::log(s) : std::exp(v) / s);
      }
    }
}

void cumsum_kernel(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Split3 p = split_at(x.shape(), x.rank() ? k.attrs.i("axis") : 0);
  const bool exclusive = k.attrs.b("exclusive"), reverse = k.attrs.b("reverse");
  const bool fp = is_floating(x.dtype());
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      double acc = 0;
      uint64_t iacc = 0;
      for (int64_t step = 0; step < p.n; ++step) {
        const int64_t j = reverse ? p.n - 1 - step : step;
        const int64_t at = (o * p.n + j) * p.inner + i;
        if (exclusive) fp ? put(k.out(0), at, acc) : sti(k.out(0), at, iacc);
        if (fp) acc += ld(x, at);
        else iacc += static_cast<uint64_t>(ldi(x, at));
        if (!exclusive) fp ? put(k.out(0), at, acc) : sti(k.out(0), at, iacc);
      }
    }
}

// Orders candidates: larger (smaller when !largest) first, NaN as the largest, ties by lower index.
template <typename K>
bool topk_before(K a, int64_t ia, K b, int64_t ib, bool largest) {
  if constexpr (std::is_floating_point_v<K>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) {
      if (na && nb) return ia < ib;
      return largest ? na : nb;
    }
  }
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

template <typename K, typename Load>
void topk_rows(KernelContext& k, Load load) {
  const Tensor& x = k.in(0);
  const Split3 p = split_at(x.shape(), k.attrs.i("axis"));
  const int64_t kk = k.attrs.i("k");
  const bool largest = k.attrs.b("largest");
  const size_t esz = dtype_size(x.dtype());
  char* vals = static_cast<char*>(k.out(0).raw_data());
  int64_t* idx = k.out(1).data<int64_t>();
  std::vector<int64_t> order(p.n);
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      auto at = [&](int64_t j) { return (o * p.n + j) * p.inner + i; };
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return topk_before<K>(load(x, at(a)), a, load(x, at(b)), b, largest);
      });
      for (int64_t j = 0; j < kk; ++j) {
        const int64_t dst = (o * kk + j) * p.inner + i;
        std::copy_n(elem(x, at(order[j])), esz, vals + dst * static_cast<int64_t>(esz));
        idx[dst] = order[j];
      }
    }
}

void topk_kernel(KernelContext& k) {
  if (is_floating(k.in(0).dtype())) topk_rows<double>(k, ld);
  else topk_rows<int64_t>(k, ldi);
}

}  // namespace

void register_reduce(KernelRegistry& r) {
  for (OpId op : {"reduce_sum"_op, "reduce_max"_op, "reduce_min"_op, "reduce_prod"_op})
    r.add(Backend::reference, op, dtypes::numeric, reduce_kernel);
  r.add(Backend::reference, "reduce_mean"_op, dtypes::floating, reduce_kernel);
  r.add(Backend::reference, "argmax"_op, dtypes::numeric, arg_kernel);
  r.add(Backend::reference, "argmin"_op, dtypes::numeric, arg_kernel);
  r.add(Backend::reference, "softmax"_op, dtypes::floating, softmax_kernel);
  r.add(Backend::reference, "log_softmax"_op, dtypes::floating, softmax_kernel);
  r.add(Backend::reference, "cumsum"_op, dtypes::numeric, cumsum_kernel);
  r.add(Backend::reference, "topk"_op, dtypes::numeric, topk_kernel);
}

}  // namespace spore::reference
