// CPU kernels of the reduce family. Every op computes in one of three types: f32 (f32/f16/bf16 inputs,
// converted once with Highway), f64, or wrapping i64 (integer inputs), and writes back with rounding
// (RNE) or truncation. Determinism: each output element's combine order depends only on the shape:
// reductions fold fixed blocks of `block` elements and combine the block results in order, so it does
// not matter whether rows or blocks are spread over threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <immintrin.h>

#include "backend/cpu/families.h"
#include "base/thread_pool.h"

namespace spore::cpu {

// Highway kernels, defined in reduce_hwy.cpp (op codes: 0 sum, 1 prod, 2 max, 3 min).
float reduce_block_f32(const float* x, int64_t n, int op);
void accumulate_f32(float* acc, const float* x, int64_t n, int op);
void softmax_row_f32(const float* x, float* y, int64_t n, bool log);
void softmax_cols_f32(const float* x, float* y, int64_t n, int64_t stride, int64_t w, bool log);
void half_to_f32(const uint16_t* src, bool bf16, float* dst, int64_t n);
void f32_to_half(const float* src, bool bf16, uint16_t* dst, int64_t n);

namespace {

enum : int { op_sum = 0, op_prod = 1, op_max = 2, op_min = 3 };
constexpr int64_t block = 4096;        // reduction chunk; partials are combined in chunk order
constexpr int64_t task_elems = 32768;  // about this many elements per parallel task
constexpr int64_t tile = 1024;         // columns per task when reducing a non-inner axis

// ---- compute types and conversions

template <typename A, int kOp>
inline A op2(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;  // wrap like C, without signed-overflow UB
    if constexpr (kOp == op_sum) return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
    else if constexpr (kOp == op_prod) return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
    else if constexpr (kOp == op_max) return b > a ? b : a;
    else return b < a ? b : a;
  } else {
    if constexpr (kOp == op_sum) return a + b;
    else if constexpr (kOp == op_prod) return a * b;
    else {
      if (std::isnan(a)) return a;  // NaN propagates like NumPy
      if (std::isnan(b)) return b;
      if constexpr (kOp == op_max) return b > a ? b : a;
      else return b < a ? b : a;
    }
  }
}
template <typename A, int kOp>
constexpr A identity() {
  if constexpr (kOp == op_sum) return A(0);
  else if constexpr (kOp == op_prod) return A(1);
  else if constexpr (std::is_floating_point_v<A>)
    return kOp == op_max ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
  else if constexpr (kOp == op_max) return std::numeric_limits<A>::lowest();
  else return std::numeric_limits<A>::max();
}
template <typename A>
bool has_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return std::isnan(v);
  else return false;
}

// Splits [0, n) into tasks of about `grain` elements and runs fn(begin, end) on each.
template <typename F>
void parallel_ranges(int64_t n, int64_t grain, const F& fn) {
  grain = std::max<int64_t>(grain, 1);
  parallel_for(num_chunks(n, grain), [&](int64_t c) { fn(c * grain, std::min(n, (c + 1) * grain)); });
}

// The input in compute type A: the tensor's own data when it already is A, else a converted copy.
template <typename A>
const A* as_compute(KernelContext& k, const Tensor& t) {
  if (t.dtype() == dtype_v<A>) return t.data<A>();
  const int64_t n = t.numel();
  A* buf = static_cast<A*>(k.scratch(static_cast<size_t>(n) * sizeof(A)));
  const DType dt = t.dtype();
  const void* src = t.raw_data();
  parallel_ranges(n, task_elems, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<A, float>) {
      half_to_f32(static_cast<const uint16_t*>(src) + b, dt == DType::bf16, buf + b, e - b);
    } else if constexpr (std::is_integral_v<A>) {
      for (int64_t i = b; i < e; ++i) {
        switch (dt) {
          case DType::i32: buf[i] = static_cast<const int32_t*>(src)[i]; break;
          case DType::i8: buf[i] = static_cast<const int8_t*>(src)[i]; break;
          default: buf[i] = static_cast<const uint8_t*>(src)[i]; break;
        }
      }
    }
  });
  return buf;
}

// Writes n compute-type values to `out` (rounding / truncating); `div` != 1 divides first (mean).
template <typename A>
void store_compute(const A* src, const Tensor& out, A div = A(1)) {
  const DType dt = out.dtype();
  void* dst = out.raw_data();
  if (static_cast<const void*>(src) == dst && div == A(1)) return;
  parallel_ranges(out.numel(), task_elems, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; c += block) {
      const int64_t ce = std::min(e, c + block);
      const A* s = src + c;
      A tmp[block];
      if (div != A(1)) {
        for (int64_t i = c; i < ce; ++i) tmp[i - c] = src[i] / div;
        s = tmp;
      }
      if constexpr (std::is_same_v<A, float>) {
        if (dt == DType::f32) std::memcpy(static_cast<float*>(dst) + c, s, (ce - c) * sizeof(float));
        else f32_to_half(s, dt == DType::bf16, static_cast<uint16_t*>(dst) + c, ce - c);
      } else if constexpr (std::is_same_v<A, double>) {
        std::memcpy(static_cast<double*>(dst) + c, s, (ce - c) * sizeof(double));
      } else {
        for (int64_t i = c; i < ce; ++i) {
          switch (dt) {
            case DType::i64: static_cast<int64_t*>(dst)[i] = s[i - c]; break;
            case DType::i32: static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(s[i - c]); break;
            case DType::i8: static_cast<int8_t*>(dst)[i] = static_cast<int8_t>(s[i - c]); break;
            default: static_cast<uint8_t*>(dst)[i] = static_cast<uint8_t>(s[i - c]); break;
          }
        }
      }
    }
  });
}

// Runs f.template operator()<A>() with A the compute type of `t`.
template <typename F>
void visit_compute(DType t, F&& f) {
  if (t == DType::f32 || t == DType::f16 || t == DType::bf16) f.template operator()<float>();
  else if (t == DType::f64) f.template operator()<double>();
  else f.template operator()<int64_t>();
}

// [outer, n, inner] around `axis`.
struct Split3 {
  int64_t outer = 1, n = 1, inner = 1;
};
Split3 split_at(const Shape& s, int64_t axis) {
  Split3 r;
  const int rank = static_cast<int>(s.size());
  if (rank == 0) return r;
  if (axis < 0) axis += rank;
  for (int d = 0; d < rank; ++d) (d < axis ? r.outer : d == axis ? r.n : r.inner) *= s[d];
  return r;
}

// ---- reduce_sum / mean / max / min / prod

// One block (n <= block) of a contiguous row; rows of >= 64 f32 elements use the Highway block kernel.
template <typename A, int kOp>
A reduce_span(const A* x, int64_t n) {
  if constexpr (std::is_same_v<A, float>) {
    if (n >= 64) return reduce_block_f32(x, n, kOp);
  }
  A acc = identity<A, kOp>();
  for (int64_t i = 0; i < n; ++i) acc = op2<A, kOp>(acc, x[i]);
  return acc;
}

// Reduces contiguous rows: y[o] = op over x[o, 0..r).
template <typename A, int kOp>
void reduce_rows(const A* x, A* y, int64_t outer, int64_t r) {
  const int64_t nb = num_chunks(r, block);
  if (outer < 4 && nb > 2) {  // few long rows: blocks in parallel, partials combined in order
    std::vector<A> part(nb);
    for (int64_t o = 0; o < outer; ++o) {
      const A* row = x + o * r;
      parallel_for(nb, [&](int64_t c) { part[c] = reduce_span<A, kOp>(row + c * block, std::min(block, r - c * block)); });
      A acc = part[0];
      for (int64_t c = 1; c < nb; ++c) acc = op2<A, kOp>(acc, part[c]);
      y[o] = acc;
    }
    return;
  }
  parallel_ranges(outer, task_elems / std::max<int64_t>(r, 1), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const A* row = x + o * r;
      A acc = reduce_span<A, kOp>(row, std::min(block, r));
      for (int64_t c = block; c < r; c += block) acc = op2<A, kOp>(acc, reduce_span<A, kOp>(row + c, std::min(block, r - c)));
      y[o] = acc;
    }
  });
}

// acc[c] = op(acc[c], row[c]) for c < w.
template <typename A, int kOp>
void fold(A* acc, const A* row, int64_t w) {
  if constexpr (std::is_same_v<A, float>) accumulate_f32(acc, row, w, kOp);
  else for (int64_t c = 0; c < w; ++c) acc[c] = op2<A, kOp>(acc[c], row[c]);
}

// Reduces the middle axis of [outer, r, inner] (inner > 1), vectorized across inner: each output folds
// its rows in blocks of `block`, block results combined in order.
template <typename A, int kOp>
void reduce_cols(const A* x, A* y, int64_t outer, int64_t r, int64_t inner) {
  const int64_t ntile = num_chunks(inner, tile), nb = num_chunks(r, block);
  // Folds rows [j0, j1) of (o, tile t) into acc (w columns), starting from the identity.
  auto fold_rows = [&](A* acc, int64_t o, int64_t t0, int64_t w, int64_t j0, int64_t j1) {
    // A few columns (a blocked tensor's 8 channels over H, W: the mobile nets' squeeze-excite pools) fold in
    // registers, not by one dispatched call per row; sum and product are lane-wise, so the bits are fold's.
    // An f32 sum folds in double: these are global average pools (squeeze-excite, the classifier's pool) whose
    // f32 running sum over H*W positive values drifted by up to ~20 ulp, more than the conv before it.
    if constexpr (std::is_floating_point_v<A> && (kOp == op_sum || kOp == op_prod)) {
      if (w == 8) {
        using S = std::conditional_t<std::is_same_v<A, float> && kOp == op_sum, double, A>;
        S a[8];
        std::fill(a, a + 8, identity<S, kOp>());
        for (int64_t j = j0; j < j1; ++j) {
          const A* row = x + (o * r + j) * inner + t0;
          for (int c = 0; c < 8; ++c) a[c] = op2<S, kOp>(a[c], static_cast<S>(row[c]));
        }
        for (int c = 0; c < 8; ++c) acc[c] = static_cast<A>(a[c]);
        return;
      }
    }
    std::fill(acc, acc + w, identity<A, kOp>());
    for (int64_t j = j0; j < j1; ++j) fold<A, kOp>(acc, x + (o * r + j) * inner + t0, w);
  };
  if (outer * ntile < 4 && nb > 2) {  // tall and narrow: row blocks in parallel
    std::vector<A> part(static_cast<size_t>(nb * std::min(tile, inner)));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t t = 0; t < ntile; ++t) {
        const int64_t t0 = t * tile, w = std::min(tile, inner - t0);
        parallel_for(nb, [&](int64_t b) { fold_rows(part.data() + b * w, o, t0, w, b * block, std::min(r, (b + 1) * block)); });
        A* yt = y + o * inner + t0;
        std::copy_n(part.data(), w, yt);
        for (int64_t b = 1; b < nb; ++b) fold<A, kOp>(yt, part.data() + b * w, w);
      }
    return;
  }
  const int64_t tasks_per = std::max<int64_t>(1, task_elems / std::max<int64_t>(r * std::min(tile, inner), 1));
  parallel_ranges(outer * ntile, tasks_per, [&](int64_t b, int64_t e) {
    std::vector<A> part(nb > 1 ? std::min(tile, inner) : 0);
    for (int64_t task = b; task < e; ++task) {
      const int64_t o = task / ntile, t0 = (task % ntile) * tile, w = std::min(tile, inner - t0);
      A* yt = y + o * inner + t0;
      fold_rows(yt, o, t0, w, 0, std::min(r, block));
      for (int64_t j = block; j < r; j += block) {
        fold_rows(part.data(), o, t0, w, j, std::min(r, j + block));
        fold<A, kOp>(yt, part.data(), w);
      }
    }
  });
}

template <typename A, int kOp>
void reduce_pass(const A* x, A* y, int64_t outer, int64_t r, int64_t inner) {
  if (inner == 1) reduce_rows<A, kOp>(x, y, outer, r);
  else reduce_cols<A, kOp>(x, y, outer, r, inner);
}

int red_op(OpId op) {
  switch (op) {
    case "reduce_prod"_op: return op_prod;
    case "reduce_max"_op: return op_max;
    case "reduce_min"_op: return op_min;
    default: return op_sum;
  }
}

template <typename A, int kOp>
void reduce_typed(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& y = k.out(0);
  const int64_t n_in = x.numel(), n_out = y.numel();
  if (n_out == 0) return;
  const bool mean = k.op == "reduce_mean"_op;
  const A count = static_cast<A>(n_out ? n_in / n_out : 0);
  if (n_in == 0) {  // reducing an empty axis: the identity (mean: 0/0)
    std::vector<A> v(n_out, identity<A, kOp>());
    store_compute<A>(v.data(), y, mean ? count : A(1));
    return;
  }
  // Merge the shape into alternating kept/reduced groups (size-1 dims dropped), then reduce one
  // reduced group per pass, innermost first.
  const int rank = x.rank();
  std::vector<bool> mask(rank, k.attrs.ints("axes").empty());
  for (int64_t a : k.attrs.ints("axes")) {
    const int64_t d = a < 0 ? a + rank : a;
    if (d >= 0 && d < rank) mask[d] = true;
  }
  std::vector<std::pair<int64_t, bool>> groups;
  for (int d = 0; d < rank; ++d) {
    if (x.shape()[d] == 1) continue;
    if (!groups.empty() && groups.back().second == mask[d]) groups.back().first *= x.shape()[d];
    else groups.push_back({x.shape()[d], mask[d]});
  }
  A* direct = y.dtype() == dtype_v<A> && !mean ? static_cast<A*>(y.raw_data()) : nullptr;
  const A* cur = as_compute<A>(k, x);
  for (;;) {
    int g = -1, reduced = 0;
    for (int i = 0; i < static_cast<int>(groups.size()); ++i)
      if (groups[i].second) g = i, ++reduced;
    if (g < 0) break;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < g; ++i) outer *= groups[i].first;
    for (int i = g + 1; i < static_cast<int>(groups.size()); ++i) inner *= groups[i].first;
    A* dst = reduced == 1 && direct ? direct : static_cast<A*>(k.scratch(static_cast<size_t>(outer * inner) * sizeof(A)));
    reduce_pass<A, kOp>(cur, dst, outer, groups[g].first, inner);
    cur = dst;
    groups.erase(groups.begin() + g);
    if (g > 0 && g < static_cast<int>(groups.size()) && groups[g - 1].second == groups[g].second) {
      groups[g - 1].first *= groups[g].first;
      groups.erase(groups.begin() + g);
    }
  }
  store_compute<A>(cur, y, mean ? count : A(1));
}

void reduce_kernel(KernelContext& k) {
  visit_compute(k.in(0).dtype(), [&]<typename A>() {
    switch (red_op(k.op)) {
      case op_sum: return reduce_typed<A, op_sum>(k);
      case op_prod: return reduce_typed<A, op_prod>(k);
      case op_max: return reduce_typed<A, op_max>(k);
      default: return reduce_typed<A, op_min>(k);
    }
  });
}

// ---- argmax / argmin

// True when v beats the current best b (first index wins ties; NaN wins like NumPy).
template <typename A>
inline bool better(A v, A b, bool max) {
  if constexpr (std::is_floating_point_v<A>) {
    if (std::isnan(b)) return false;
    if (std::isnan(v)) return true;
  }
  return max ? v > b : v < b;
}

// The first j with x[j] == m (0 == -0), or the first NaN when `nan`; m is one of x's values, so one is found. Eight
// lanes a compare: over an LLM's vocabulary (the sampler's greedy pick) an early-exit scalar loop was not vectorized.
int64_t first_match_f32(const float* x, int64_t n, float m, bool nan) {
  int64_t j = 0;
  const __m256 mv = _mm256_set1_ps(m);
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const int hit = _mm256_movemask_ps(nan ? _mm256_cmp_ps(v, v, _CMP_UNORD_Q) : _mm256_cmp_ps(v, mv, _CMP_EQ_OQ));
    if (hit) return j + __builtin_ctz(static_cast<unsigned>(hit));
  }
  for (; j < n; ++j)
    if (nan ? std::isnan(x[j]) : x[j] == m) return j;
  return n - 1;  // not reached: m is one of the values
}

template <typename A>
int64_t arg_row(const A* x, int64_t n, bool max) {
  if constexpr (std::is_same_v<A, float>) {
    if (n >= 64) {  // vectorized extreme, then the first element equal to it (or the first NaN)
      float m = max ? reduce_span<float, op_max>(x, std::min(n, block)) : reduce_span<float, op_min>(x, std::min(n, block));
      for (int64_t c = block; c < n && !std::isnan(m); c += block)
        m = max ? op2<float, op_max>(m, reduce_span<float, op_max>(x + c, std::min(block, n - c)))
                : op2<float, op_min>(m, reduce_span<float, op_min>(x + c, std::min(block, n - c)));
      const bool nan = std::isnan(m);
      return first_match_f32(x, n, m, nan);
    }
  }
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (better(x[j], x[best], max)) best = j;
  return best;
}

template <typename A>
void arg_typed(KernelContext& k) {
  const Tensor& xt = k.in(0);
  if (k.out(0).numel() == 0) return;
  const A* x = as_compute<A>(k, xt);
  const Split3 p = split_at(xt.shape(), xt.rank() ? k.attrs.i("axis") : 0);
  const bool max = k.op == "argmax"_op;
  int64_t* out = k.out(0).data<int64_t>();
  if (p.inner == 1) {
    parallel_ranges(p.outer, task_elems / std::max<int64_t>(p.n, 1), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) out[o] = arg_row(x + o * p.n, p.n, max);
    });
    return;
  }
  const int64_t ntile = num_chunks(p.inner, tile);
  parallel_ranges(p.outer * ntile, std::max<int64_t>(1, task_elems / std::max<int64_t>(p.n * tile, 1)),
                  [&](int64_t b, int64_t e) {
    std::vector<A> best(std::min(tile, p.inner));
    for (int64_t task = b; task < e; ++task) {
      const int64_t o = task / ntile, t0 = (task % ntile) * tile, w = std::min(tile, p.inner - t0);
      const A* x0 = x + o * p.n * p.inner + t0;
      int64_t* oi = out + o * p.inner + t0;
      std::copy_n(x0, w, best.data());
      std::fill(oi, oi + w, 0);
      for (int64_t j = 1; j < p.n; ++j) {
        const A* row = x0 + j * p.inner;
        for (int64_t c = 0; c < w; ++c)
          if (better(row[c], best[c], max)) best[c] = row[c], oi[c] = j;
      }
    }
  });
}

void arg_kernel(KernelContext& k) {
  visit_compute(k.in(0).dtype(), [&]<typename A>() { arg_typed<A>(k); });
}

// ---- softmax / log_softmax

void softmax_f64(const double* x, double* y, const Split3& p, bool log) {
  parallel_ranges(p.outer * p.inner, std::max<int64_t>(1, task_elems / std::max<int64_t>(p.n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t base = (r / p.inner) * p.n * p.inner + r % p.inner;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < p.n; ++j) m = op2<double, op_max>(m, x[base + j * p.inner]);
      if (!std::isfinite(m)) m = std::numeric_limits<double>::quiet_NaN();
      double s = 0;
      for (int64_t j = 0; j < p.n; ++j) s += std::exp(x[base + j * p.inner] - m);
      const double ls = std::log(s), inv = 1.0 / s;
      for (int64_t j = 0; j < p.n; ++j) {
        const int64_t i = base + j * p.inner;
        y[i] = log ? (x[i] - m) - ls : std::exp(x[i] - m) * inv;
      }
    }
  });
}

void softmax_kernel(KernelContext& k) {
  const Tensor& xt = k.in(0);
  const Tensor& yt = k.out(0);
  if (xt.numel() == 0) return;
  const Split3 p = split_at(xt.shape(), k.attrs.i("axis"));
  const bool log = k.op == "log_softmax"_op;
  if (xt.dtype() == DType::f64) return softmax_f64(xt.data<double>(), yt.data<double>(), p, log);
  const float* x = as_compute<float>(k, xt);
  float* y = yt.dtype() == DType::f32 ? yt.data<float>() : static_cast<float*>(k.scratch(yt.numel() * sizeof(float)));
  if (p.inner == 1) {
    parallel_ranges(p.outer, task_elems / std::max<int64_t>(p.n, 1), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) softmax_row_f32(x + o * p.n, y + o * p.n, p.n, log);
    });
  } else {
    constexpr int64_t col_tile = 256;  // the most softmax_cols_f32 takes
    const int64_t ntile = num_chunks(p.inner, col_tile);
    parallel_ranges(p.outer * ntile, std::max<int64_t>(1, task_elems / std::max<int64_t>(p.n * col_tile, 1)),
                    [&](int64_t b, int64_t e) {
      for (int64_t task = b; task < e; ++task) {
        const int64_t o = task / ntile, t0 = (task % ntile) * col_tile;
        const int64_t off = o * p.n * p.inner + t0;
        softmax_cols_f32(x + off, y + off, p.n, p.inner, std::min(col_tile, p.inner - t0), log);
      }
    });
  }
  store_compute<float>(y, yt);
}

// ---- cumsum

template <typename A>
void cumsum_typed(KernelContext& k) {
  const Tensor& xt = k.in(0);
  const Tensor& yt = k.out(0);
  if (xt.numel() == 0) return;
  const A* x = as_compute<A>(k, xt);
  A* y = yt.dtype() == dtype_v<A> ? static_cast<A*>(yt.raw_data()) : static_cast<A*>(k.scratch(xt.numel() * sizeof(A)));
  const Split3 p = split_at(xt.shape(), xt.rank() ? k.attrs.i("axis") : 0);
  const bool exclusive = k.attrs.b("exclusive"), reverse = k.attrs.b("reverse");
  if (p.inner == 1) {  // contiguous rows: a plain running sum per row
    parallel_ranges(p.outer, std::max<int64_t>(1, task_elems / std::max<int64_t>(p.n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const A* xr = x + o * p.n;
        A* yr = y + o * p.n;
        A acc = A(0);
        for (int64_t step = 0; step < p.n; ++step) {
          const int64_t j = reverse ? p.n - 1 - step : step;
          const A v = xr[j];
          if (exclusive) yr[j] = acc;
          acc = op2<A, op_sum>(acc, v);
          if (!exclusive) yr[j] = acc;
        }
      }
    });
    return store_compute<A>(y, yt);
  }
  const int64_t w_max = std::min(tile, p.inner), ntile = num_chunks(p.inner, tile);
  parallel_ranges(p.outer * ntile, std::max<int64_t>(1, task_elems / std::max<int64_t>(p.n * w_max, 1)),
                  [&](int64_t b, int64_t e) {
    std::vector<A> acc(w_max);
    for (int64_t task = b; task < e; ++task) {
      const int64_t o = task / ntile, t0 = (task % ntile) * tile, w = std::min(tile, p.inner - t0);
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t step = 0; step < p.n; ++step) {
        const int64_t j = reverse ? p.n - 1 - step : step;
        const A* xr = x + (o * p.n + j) * p.inner + t0;
        A* yr = y + (o * p.n + j) * p.inner + t0;
        if (exclusive) {
          for (int64_t c = 0; c < w; ++c) {
            const A v = xr[c];
            yr[c] = acc[c];
            acc[c] = op2<A, op_sum>(acc[c], v);
          }
        } else {
          for (int64_t c = 0; c < w; ++c) yr[c] = acc[c] = op2<A, op_sum>(acc[c], xr[c]);
        }
      }
    }
  });
  store_compute<A>(y, yt);
}

void cumsum_kernel(KernelContext& k) {
  visit_compute(k.in(0).dtype(), [&]<typename A>() { cumsum_typed<A>(k); });
}

// ---- topk

// Larger (smaller when !largest) first, NaN as the largest, ties by lower index: a total order, so
// partial_sort gives one answer.
template <typename A>
struct TopkLess {
  bool largest;
  bool operator()(const std::pair<A, int64_t>& a, const std::pair<A, int64_t>& b) const {
    if constexpr (std::is_floating_point_v<A>) {
      const bool na = std::isnan(a.first), nb = std::isnan(b.first);
      if (na || nb) return na && nb ? a.second < b.second : (largest ? na : nb);
    }
    if (a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
    return a.second < b.second;
  }
};

template <typename A>
void topk_typed(KernelContext& k) {
  const Tensor& xt = k.in(0);
  const int64_t kk = k.attrs.i("k");
  if (k.out(0).numel() == 0) return;
  const A* x = as_compute<A>(k, xt);
  const Split3 p = split_at(xt.shape(), k.attrs.i("axis"));
  const TopkLess<A> less{k.attrs.b("largest")};
  const size_t esz = dtype_size(xt.dtype());
  const char* src = static_cast<const char*>(xt.raw_data());
  char* vals = static_cast<char*>(k.out(0).raw_data());
  int64_t* idx = k.out(1).data<int64_t>();
  parallel_ranges(p.outer * p.inner, std::max<int64_t>(1, task_elems / std::max<int64_t>(p.n, 1)), [&](int64_t b, int64_t e) {
    std::vector<std::pair<A, int64_t>> row(p.n);
    for (int64_t r = b; r < e; ++r) {
      const int64_t o = r / p.inner, i = r % p.inner;
      const int64_t base = o * p.n * p.inner + i;
      for (int64_t j = 0; j < p.n; ++j) row[j] = {x[base + j * p.inner], j};
      if (kk * 8 < p.n) std::partial_sort(row.begin(), row.begin() + kk, row.end(), less);
      else std::sort(row.begin(), row.end(), less);
      for (int64_t j = 0; j < kk; ++j) {
        const int64_t dst = (o * kk + j) * p.inner + i;
        std::memcpy(vals + dst * esz, src + (base + row[j].second * p.inner) * esz, esz);
        idx[dst] = row[j].second;
      }
    }
  });
}

void topk_kernel(KernelContext& k) {
  visit_compute(k.in(0).dtype(), [&]<typename A>() { topk_typed<A>(k); });
}

}  // namespace

void register_reduce(KernelRegistry& r) {
  for (OpId op : {"reduce_sum"_op, "reduce_max"_op, "reduce_min"_op, "reduce_prod"_op})
    r.add(Backend::cpu, op, dtypes::numeric, reduce_kernel, "hwy");
  r.add(Backend::cpu, "reduce_mean"_op, dtypes::floating, reduce_kernel, "hwy");
  r.add(Backend::cpu, "argmax"_op, dtypes::numeric, arg_kernel, "hwy");
  r.add(Backend::cpu, "argmin"_op, dtypes::numeric, arg_kernel, "hwy");
  r.add(Backend::cpu, "softmax"_op, dtypes::floating, softmax_kernel, "hwy");
  r.add(Backend::cpu, "log_softmax"_op, dtypes::floating, softmax_kernel, "hwy");
  r.add(Backend::cpu, "cumsum"_op, dtypes::numeric, cumsum_kernel, "scalar");
  r.add(Backend::cpu, "topk"_op, dtypes::numeric, topk_kernel, "scalar");
}

}  // namespace spore::cpu
