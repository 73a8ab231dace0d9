// CPU kernels of the index ops (gather, index_select, embedding, gather_elements, scatter, scatter_nd, gather_nd,
// one_hot) and the creation ops (arange, full). Indices are checked serially before anything is written, so a bad index
// gives the same error for any thread count; the copies then run in fixed-size chunks with disjoint outputs.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/byte_copy.h"
#include "backend/cpu/families.h"
#include "base/half.h"
#include "base/thread_pool.h"

namespace spore::cpu {
namespace {
using namespace bytes;


int64_t prod(const Shape& s, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= s[i];
  return p;
}

// Index tensors are i32 or i64 (checked by shape inference).
struct Indices {
  const void* p;
  bool wide;
  explicit Indices(const Tensor& t) : p(t.raw_data()), wide(t.dtype() == DType::i64) {}
  int64_t operator[](int64_t i) const {
    return wide ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
  }
};
inline int64_t wrap(int64_t v, int64_t n) { return v < 0 ? v + n : v; }

// Fails on the first index (in order) outside [-bound, bound).
void check_indices(const Tensor& idx, int64_t bound, OpId op, int64_t axis) {
  const Indices ix(idx);
  for (int64_t i = 0; i < idx.numel(); ++i) {
    const int64_t v = ix[i];
    SPORE_CHECK(v >= -bound && v < bound, ErrorCode::invalid_argument,
                "[{}] index {} is out of range for axis {} of size {}", op_name(op), v, axis, bound);
  }
}


// Rows [q0, q1) of a take: row q = (o, j) copies x row o * n + w[j] (w: the wrapped indices). Walked as runs of
// j within one o, so a 1-element row (a gather along the last axis: Resize's taps) is one load and one store.
template <typename T>
void take_rows_chunk(char* out, const char* x, const int64_t* w, int64_t q0, int64_t q1, int64_t nidx, int64_t n,
                     int64_t row_bytes) {
  int64_t o = q0 / nidx, j = q0 % nidx;
  for (int64_t q = q0; q < q1; ++o, j = 0) {
    const int64_t j1 = std::min(nidx, j + (q1 - q));
    const char* xo = x + o * n * row_bytes;
    char* dst = out + q * row_bytes;
    if (row_bytes == sizeof(T)) {
      for (int64_t i = j; i < j1; ++i, dst += sizeof(T)) store<T>(dst, load<T>(xo + w[i] * int64_t{sizeof(T)}));
    } else {
      for (int64_t i = j; i < j1; ++i, dst += row_bytes)
        std::memcpy(dst, xo + w[i] * row_bytes, static_cast<size_t>(row_bytes));
    }
    q += j1 - j;
  }
}

// out[o, j, :] = x[o, idx[j], :] for x viewed as [outer, n, inner]: one copy per row.
void take_rows(const Tensor& x, const Tensor& idx, const Tensor& out, int64_t outer, int64_t n, int64_t inner, OpId op,
               int64_t axis) {
  check_indices(idx, n, op, axis);
  const int64_t nidx = idx.numel(), rows = outer * nidx;
  if (rows == 0 || inner == 0) return;
  const int64_t ies = static_cast<int64_t>(dtype_size(x.dtype())), row_bytes = inner * ies;
  const int64_t grain = std::max<int64_t>(1, chunk_bytes / row_bytes);
  const char* xp = in_bytes(x);
  char* op_ = out_bytes(out);
  const Indices ix(idx);
  std::vector<int64_t> wrapped(static_cast<size_t>(nidx));
  for (int64_t i = 0; i < nidx; ++i) wrapped[static_cast<size_t>(i)] = wrap(ix[i], n);
  const int64_t* w = wrapped.data();
  with_elem(static_cast<size_t>(ies), [&](auto t) {
    using T = decltype(t);
    parallel_for(num_chunks(rows, grain), [&](int64_t c) {
      const int64_t r0 = c * grain;
      take_rows_chunk<T>(op_, xp, w, r0, std::min(rows, r0 + grain), nidx, n, row_bytes);
    });
  });
}

void gather(KernelContext& k) {
  const Tensor& x = k.in(0);
  const size_t axis = static_cast<size_t>(norm_axis(k.attrs.i("axis"), x.rank()));
  const Shape& s = x.shape();
  take_rows(x, k.in(1), k.out(), prod(s, 0, axis), s[axis], prod(s, axis + 1, s.size()), k.op,
            static_cast<int64_t>(axis));
}

void embedding(KernelContext& k) {
  const Shape& s = k.in(0).shape();
  take_rows(k.in(0), k.in(1), k.out(), 1, s[0], s[1], k.op, 0);
}

// ---- resample: x viewed as [outer, n, inner], y as [outer, out, inner]; indices checked and wrapped once, serially.
// Every output element sums its taps in tap order in A (f32; f64 for f64 data) and is rounded to S once. Along an
// inner axis a y row is a weighted sum of `taps` contiguous x rows; along the last axis (inner 1) each element
// gathers its taps. Tasks are fixed-size chunks of y, so the bits do not depend on the thread count.
template <typename S, typename A>
void resample_rows(const S* __restrict x, S* __restrict y, const int64_t* ix, const A* w, int64_t q0, int64_t q1,
                   int64_t n, int64_t out, int64_t taps, int64_t inner, A* __restrict acc) {
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t o = q / out, j = q % out;
    const S* xo = x + o * n * inner;
    S* __restrict yr = y + q * inner;
    const int64_t* jt = ix + j * taps;
    const A* wt = w + j * taps;
    if (taps == 2) {
      const S* __restrict x0 = xo + jt[0] * inner;
      const S* __restrict x1 = xo + jt[1] * inner;
      const A w0 = wt[0], w1 = wt[1];
      for (int64_t i = 0; i < inner; ++i)
        yr[i] = static_cast<S>(w0 * static_cast<A>(x0[i]) + w1 * static_cast<A>(x1[i]));
      continue;
    }
    for (int64_t i = 0; i < inner; ++i) acc[i] = wt[0] * static_cast<A>(xo[jt[0] * inner + i]);
    for (int64_t t = 1; t < taps; ++t) {
      const S* __restrict xt = xo + jt[t] * inner;
      const A wv = wt[t];
      for (int64_t i = 0; i < inner; ++i) acc[i] += wv * static_cast<A>(xt[i]);
    }
    for (int64_t i = 0; i < inner; ++i) yr[i] = static_cast<S>(acc[i]);
  }
}

template <typename S, typename A>
void resample_last(const S* __restrict x, S* __restrict y, const int64_t* ix, const A* w, int64_t o0, int64_t o1,
                   int64_t n, int64_t out, int64_t taps) {
  for (int64_t o = o0; o < o1; ++o) {
    const S* xo = x + o * n;
    S* __restrict yo = y + o * out;
    for (int64_t j = 0; j < out; ++j) {
      const int64_t* jt = ix + j * taps;
      const A* wt = w + j * taps;
      A a = wt[0] * static_cast<A>(xo[jt[0]]);
      for (int64_t t = 1; t < taps; ++t) a += wt[t] * static_cast<A>(xo[jt[t]]);
      yo[j] = static_cast<S>(a);
    }
  }
}

template <typename S, typename A>
void resample_typed(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& idx = k.in(1);
  const size_t axis = static_cast<size_t>(norm_axis(k.attrs.i("axis"), x.rank()));
  const Shape& s = x.shape();
  const int64_t outer = prod(s, 0, axis), n = s[axis], inner = prod(s, axis + 1, s.size());
  const int64_t out = idx.shape()[0], taps = idx.shape()[1];
  check_indices(idx, n, k.op, static_cast<int64_t>(axis));
  if (k.out().numel() == 0) return;
  std::vector<int64_t> ix(static_cast<size_t>(out * taps));
  std::vector<A> w(ix.size());
  const Indices raw(idx);
  const S* wp = k.in(2).data<S>();
  for (size_t i = 0; i < ix.size(); ++i) {
    ix[i] = wrap(raw[static_cast<int64_t>(i)], n);
    w[i] = static_cast<A>(wp[i]);
  }
  const S* xp = x.data<S>();
  S* yp = k.out().data<S>();
  if (taps == 0) {
    std::fill(yp, yp + k.out().numel(), static_cast<S>(A{0}));
    return;
  }
  if (inner == 1) {
    const int64_t grain = std::max<int64_t>(1, chunk_bytes / static_cast<int64_t>(sizeof(S) * taps) / out);
    parallel_for(num_chunks(outer, grain), [&](int64_t c) {
      resample_last<S, A>(xp, yp, ix.data(), w.data(), c * grain, std::min(outer, (c + 1) * grain), n, out, taps);
    });
    return;
  }
  const int64_t rows = outer * out;
  const int64_t grain = std::max<int64_t>(1, chunk_bytes / static_cast<int64_t>(sizeof(S) * taps) / inner);
  parallel_for(num_chunks(rows, grain), [&](int64_t c) {
    std::vector<A> acc(taps == 2 ? 0 : static_cast<size_t>(inner));
    resample_rows<S, A>(xp, yp, ix.data(), w.data(), c * grain, std::min(rows, (c + 1) * grain), n, out, taps, inner,
                        acc.data());
  });
}

void resample(KernelContext& k) {
  switch (k.in(0).dtype()) {
    case DType::f32: return resample_typed<float, float>(k);
    case DType::f64: return resample_typed<double, double>(k);
    case DType::f16: return resample_typed<f16, float>(k);
    case DType::bf16: return resample_typed<bf16, float>(k);
    default: SPORE_FAIL(ErrorCode::dtype_mismatch, "[resample] no CPU kernel for {}", dtype_name(k.in(0).dtype()));
  }
}

// One row of gather_elements: out[j] = x[idx[e0 + j] * axis stride (+ j when the axis is not the last)].
template <typename T>
void gather_elements_row(char* out, const char* x, Indices ix, int64_t e0, int64_t nl, int64_t n, int64_t ax_bytes,
                         bool step) {
  constexpr int64_t es = sizeof(T);
  for (int64_t j = 0; j < nl; ++j)
    store<T>(out + j * es, load<T>(x + wrap(ix[e0 + j], n) * ax_bytes + (step ? j * es : 0)));
}

// out has the shape of idx; a row (all dims but the last) finds its x offset once, the axis coordinate
// of each element comes from idx.
void gather_elements(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& idx = k.in(1);
  const int r = x.rank();
  const int64_t axis = norm_axis(k.attrs.i("axis"), r), n = x.shape()[axis];
  check_indices(idx, n, k.op, axis);
  if (idx.numel() == 0) return;
  const Strides xs = contiguous_strides(x.shape());
  const Shape& is = idx.shape();
  const int64_t nl = is[r - 1], rows = idx.numel() / nl, ax_stride = xs[axis];
  const bool last_axis = axis == r - 1;
  const int64_t ies = static_cast<int64_t>(dtype_size(x.dtype()));
  const int64_t grain = std::max<int64_t>(1, chunk_bytes / (nl * ies));
  const char* xp = in_bytes(x);
  char* op_ = out_bytes(k.out());
  const Indices ix(idx);
  with_elem(static_cast<size_t>(ies), [&](auto t) {
    using T = decltype(t);
    parallel_for(num_chunks(rows, grain), [&](int64_t c) {
      const int64_t r0 = c * grain, r1 = std::min(rows, r0 + grain);
      for (int64_t row = r0; row < r1; ++row) {
        int64_t base = 0, rem = row;
        for (int d = r - 2; d >= 0; --d) {
          const int64_t i = rem % is[d];
          rem /= is[d];
          if (d != axis) base += i * xs[d];
        }
        gather_elements_row<T>(op_ + row * nl * ies, xp + base * ies, ix, row * nl, nl, n, ax_stride * ies, !last_axis);
      }
    });
  });
}

// Scatter reductions in the dtype's compute type: f32 for f16/bf16, wrapping integers, or/and for bool (max/min of
// bools are or/and too). mode 1 add, 2 mul, 3 max, 4 min; max/min keep `a` unless `b` compares larger/smaller, as
// std::max/min do (so a NaN update never replaces, and a NaN in x stays), the same as the reference.
template <typename T>
T reduce_pair(T a, T b, int mode) {
  if constexpr (std::is_same_v<T, bool>) {
    return mode == 2 || mode == 4 ? (a && b) : (a || b);
  } else if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
    const float x = float(a), y = float(b);
    if (mode == 3) return x < y ? b : a;
    if (mode == 4) return y < x ? b : a;
    return T(mode == 2 ? x * y : x + y);
  } else if constexpr (std::is_integral_v<T>) {
    if (mode == 3) return a < b ? b : a;
    if (mode == 4) return b < a ? b : a;
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(mode == 2 ? static_cast<U>(static_cast<U>(a) * static_cast<U>(b))
                                    : static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    if (mode == 3) return a < b ? b : a;
    if (mode == 4) return b < a ? b : a;
    return mode == 2 ? a * b : a + b;
  }
}

// One update line: na updates `us` elements apart, written `xstride` apart at their indices.
template <typename T>
void scatter_line(T* out, const T* upd, Indices ix, int64_t e0, int64_t us, int64_t na, int64_t n, int64_t xstride,
                  int red) {
  for (int64_t a = 0; a < na; ++a) {
    T& dst = out[wrap(ix[e0 + a * us], n) * xstride];
    const T u = upd[a * us];
    dst = red == 0 ? u : reduce_pair<T>(dst, u, red);
  }
}

// Every update line (all coordinates but the axis fixed) only writes the matching line of out, so lines
// run in parallel and each applies its updates in order: with "none", the last repeated index wins.
template <typename T>
void scatter_typed(KernelContext& k, int64_t axis, int red) {
  const Tensor& x = k.in(0);
  const Tensor& upd = k.in(2);
  const int r = x.rank();
  const Shape& is = upd.shape();
  const Strides xs = contiguous_strides(x.shape()), ist = contiguous_strides(is);
  const int64_t na = is[axis], n = x.shape()[axis];
  const int64_t lines = upd.numel() / na, grain = std::max<int64_t>(1, 4096 / na);
  const T* up = upd.data<T>();
  T* op_ = k.out().data<T>();
  const Indices ix(k.in(1));
  parallel_for(num_chunks(lines, grain), [&](int64_t c) {
    const int64_t l0 = c * grain, l1 = std::min(lines, l0 + grain);
    for (int64_t line = l0; line < l1; ++line) {
      int64_t ib = 0, ob = 0, rem = line;
      for (int d = r - 1; d >= 0; --d) {
        if (d == axis) continue;
        const int64_t i = rem % is[d];
        rem /= is[d];
        ib += i * ist[d];
        ob += i * xs[d];
      }
      scatter_line<T>(op_ + ob, up + ib, ix, ib, ist[axis], na, n, xs[axis], red);
    }
  });
}

void scatter(KernelContext& k) {
  const Tensor& x = k.in(0);
  const int64_t axis = norm_axis(k.attrs.i("axis"), x.rank());
  check_indices(k.in(1), x.shape()[axis], k.op, axis);
  parallel_memcpy(out_bytes(k.out()), in_bytes(x), static_cast<int64_t>(x.nbytes()));
  if (k.in(2).numel() == 0) return;
  const std::string& red = k.attrs.s("reduction");
  const int mode = red == "add" ? 1 : red == "mul" ? 2 : red == "max" ? 3 : red == "min" ? 4 : 0;
  visit_dtype(x.dtype(), [&](auto t) { scatter_typed<decltype(t)>(k, axis, mode); });
}

// ---- scatter_nd / gather_nd. x is viewed as [batches, L, S]: L rows addressed by a k-component index tuple (the dims
// after the batch dims), S elements per row. The tuples are checked and turned into rows serially, in order, so a bad
// index gives the same error for any thread count.
std::vector<int64_t> tuple_rows(const Tensor& idx, const Shape& xs, int64_t first, int64_t depth, OpId op) {
  const Indices ix(idx);
  const int64_t tuples = prod(idx.shape(), 0, idx.shape().size() - 1);
  std::vector<int64_t> rows(static_cast<size_t>(tuples));
  for (int64_t m = 0; m < tuples; ++m) {
    int64_t row = 0;
    for (int64_t j = 0; j < depth; ++j) {
      const int64_t n = xs[static_cast<size_t>(first + j)], v = ix[m * depth + j];
      SPORE_CHECK(v >= -n && v < n, ErrorCode::invalid_argument,
                  "[{}] index {} (tuple {}, component {}) is out of range for dim {} of size {}", op_name(op), v, m, j,
                  first + j, n);
      row = row * n + wrap(v, n);
    }
    rows[static_cast<size_t>(m)] = row;
  }
  return rows;
}

// Every destination element is written by one task, which applies the tuples that reach it in order (with "none"
// the last repeated tuple wins). Wide rows split by columns; narrow rows by row ranges, each task skipping the
// tuples outside its range.
template <typename T>
void scatter_nd_typed(T* out, const T* upd, const std::vector<int64_t>& rows, int64_t L, int64_t S, int mode) {
  const int64_t M = static_cast<int64_t>(rows.size());
  const int64_t* rp = rows.data();
  const auto apply = [=](int64_t m, int64_t s0, int64_t s1) {
    T* dst = out + rp[m] * S;
    const T* src = upd + m * S;
    if (mode == 0) std::memcpy(dst + s0, src + s0, static_cast<size_t>(s1 - s0) * sizeof(T));
    else
      for (int64_t s = s0; s < s1; ++s) dst[s] = reduce_pair<T>(dst[s], src[s], mode);
  };
  constexpr int64_t kCols = 1024, kElems = 16384;
  if (S >= kCols) {
    parallel_for(num_chunks(S, kCols), [&](int64_t c) {
      const int64_t s0 = c * kCols, s1 = std::min(S, s0 + kCols);
      for (int64_t m = 0; m < M; ++m) apply(m, s0, s1);
    });
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kElems / std::max<int64_t>(S, 1));
  parallel_for(num_chunks(L, grain), [&](int64_t c) {
    const int64_t r0 = c * grain, r1 = std::min(L, r0 + grain);
    for (int64_t m = 0; m < M; ++m)
      if (rp[m] >= r0 && rp[m] < r1) apply(m, 0, S);
  });
}

void scatter_nd(KernelContext& k) {
  const Tensor &x = k.in(0), &idx = k.in(1);
  const Shape& xs = x.shape();
  const int64_t depth = idx.shape().back();
  const std::vector<int64_t> rows = tuple_rows(idx, xs, 0, depth, k.op);
  parallel_memcpy(out_bytes(k.out()), in_bytes(x), static_cast<int64_t>(x.nbytes()));
  const int64_t L = prod(xs, 0, static_cast<size_t>(depth)), S = prod(xs, static_cast<size_t>(depth), xs.size());
  if (rows.empty() || S == 0) return;
  const std::string& red = k.attrs.s("reduction");
  const int mode = red == "add" ? 1 : red == "mul" ? 2 : red == "max" ? 3 : red == "min" ? 4 : 0;
  visit_dtype(x.dtype(), [&](auto t) {
    using T = decltype(t);
    scatter_nd_typed<T>(k.out().data<T>(), k.in(2).data<T>(), rows, L, S, mode);
  });
}

// out row m (S elements) = x row (batch of m) * L + tuple row m: one copy per row, in fixed-size chunks.
void gather_nd(KernelContext& k) {
  const Tensor &x = k.in(0), &idx = k.in(1);
  const Shape& xs = x.shape();
  const int64_t b = k.attrs.i("batch_dims"), depth = idx.shape().back();
  std::vector<int64_t> rows = tuple_rows(idx, xs, b, depth, k.op);
  const int64_t M = static_cast<int64_t>(rows.size());
  const int64_t batches = prod(xs, 0, static_cast<size_t>(b));
  const int64_t L = prod(xs, static_cast<size_t>(b), static_cast<size_t>(b + depth));
  const int64_t S = prod(xs, static_cast<size_t>(b + depth), xs.size());
  if (M == 0 || S == 0) return;
  const int64_t per_batch = M / batches;
  for (int64_t m = 0; m < M; ++m) rows[static_cast<size_t>(m)] += (m / per_batch) * L;
  const int64_t row_bytes = S * static_cast<int64_t>(dtype_size(x.dtype()));
  const int64_t grain = std::max<int64_t>(1, chunk_bytes / row_bytes);
  const char* xp = in_bytes(x);
  char* op_ = out_bytes(k.out());
  const int64_t* rp = rows.data();
  parallel_for(num_chunks(M, grain), [&](int64_t c) {
    const int64_t m0 = c * grain, m1 = std::min(M, m0 + grain);
    for (int64_t m = m0; m < m1; ++m)
      std::memcpy(op_ + m * row_bytes, xp + rp[m] * row_bytes, static_cast<size_t>(row_bytes));
  });
}

// Positions [i0, i1) of one outer row of one_hot, the row holding `depth` runs of `inner` elements.
template <typename T>
void one_hot_block(char* row, Indices ix, int64_t first, int64_t i0, int64_t i1, int64_t inner, int64_t depth, T on,
                   T off) {
  constexpr int64_t es = sizeof(T);
  if (i0 == 0 && i1 == inner)
    fill_run<T>(row, depth * inner, off);
  else
    for (int64_t d = 0; d < depth; ++d) fill_run<T>(row + (d * inner + i0) * es, i1 - i0, off);
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t v = wrap(ix[first + i], depth);
    if (v >= 0 && v < depth) store<T>(row + (v * inner + i) * es, on);
  }
}

// out viewed as [outer, depth, inner] (inner = the index dims after the axis): each task fills a block of
// inner positions with off_value for every depth, then sets on_value where the index points.
void one_hot(KernelContext& k) {
  const Tensor& idx = k.in(0);
  const Tensor& out = k.out();
  if (out.numel() == 0) return;
  const int64_t depth = k.attrs.i("depth");
  const size_t axis = static_cast<size_t>(norm_axis(k.attrs.i("axis"), out.rank()));
  const int64_t outer = prod(idx.shape(), 0, axis), inner = prod(idx.shape(), axis, idx.shape().size());
  const int64_t ies = static_cast<int64_t>(dtype_size(out.dtype()));
  char on[8], off[8];
  store_from_double(on, out.dtype(), k.attrs.f("on_value"));
  store_from_double(off, out.dtype(), k.attrs.f("off_value"));
  // Small rows: whole outer rows per task; long rows: blocks of inner positions per task.
  const int64_t row_bytes = depth * inner * ies;
  const int64_t rows_per_task = std::max<int64_t>(1, chunk_bytes / row_bytes);
  const int64_t grain = row_bytes > chunk_bytes ? std::max<int64_t>(1, chunk_bytes / (depth * ies)) : inner;
  const int64_t blocks = num_chunks(inner, grain);
  char* ob = out_bytes(out);
  const Indices ix(idx);
  with_elem(static_cast<size_t>(ies), [&](auto t) {
    using T = decltype(t);
    const T von = load<T>(on), voff = load<T>(off);
    if (blocks == 1) {
      parallel_for(num_chunks(outer, rows_per_task), [&](int64_t c) {
        const int64_t o0 = c * rows_per_task, o1 = std::min(outer, o0 + rows_per_task);
        for (int64_t o = o0; o < o1; ++o)
          one_hot_block<T>(ob + o * row_bytes, ix, o * inner, 0, inner, inner, depth, von, voff);
      });
      return;
    }
    parallel_for(outer * blocks, [&](int64_t task) {
      const int64_t o = task / blocks, i0 = (task % blocks) * grain;
      one_hot_block<T>(ob + o * row_bytes, ix, o * inner, i0, std::min(inner, i0 + grain), inner, depth, von, voff);
    });
  });
}

void arange(KernelContext& k) {
  const double start = k.attrs.f("start"), step = k.attrs.f("step");
  const Tensor& out = k.out();
  const int64_t n = out.numel(), ies = static_cast<int64_t>(dtype_size(out.dtype())), grain = 16384;
  char* ob = out_bytes(out);
  const DType dt = out.dtype();
  parallel_for(num_chunks(n, grain), [&](int64_t c) {
    const int64_t b = c * grain, e = std::min(n, b + grain);
    for (int64_t i = b; i < e; ++i) store_from_double(ob + i * ies, dt, start + static_cast<double>(i) * step);
  });
}

void full(KernelContext& k) {
  const Tensor& out = k.out();
  const size_t es = dtype_size(out.dtype());
  char value[8];
  store_from_double(value, out.dtype(), k.attrs.f("value"));
  const int64_t n = out.numel(), grain = chunk_bytes / static_cast<int64_t>(es);
  char* ob = out_bytes(out);
  with_elem(es, [&](auto t) {
    using T = decltype(t);
    const T v = load<T>(value);
    parallel_for(num_chunks(n, grain), [&](int64_t c) {
      const int64_t b = c * grain, e = std::min(n, b + grain);
      fill_run<T>(ob + b * static_cast<int64_t>(sizeof(T)), e - b, v);
    });
  });
}

}  // namespace

void register_shape_index(KernelRegistry& r) {
  r.add(Backend::cpu, "gather"_op, dtypes::all, gather, "memcpy");
  r.add(Backend::cpu, "index_select"_op, dtypes::all, gather, "memcpy");
  r.add(Backend::cpu, "resample"_op, dtypes::floating, resample, "rows");
  r.add(Backend::cpu, "embedding"_op, dtypes::all, embedding, "memcpy");
  r.add(Backend::cpu, "gather_elements"_op, dtypes::all, gather_elements, "copy");
  r.add(Backend::cpu, "scatter"_op, dtypes::all, scatter, "copy");
  r.add(Backend::cpu, "scatter_nd"_op, dtypes::all, scatter_nd, "rows");
  r.add(Backend::cpu, "gather_nd"_op, dtypes::all, gather_nd, "memcpy");
  r.add(Backend::cpu, "one_hot"_op, dtypes::index, one_hot, "fill");
  r.add(Backend::cpu, "arange"_op, dtypes::numeric, arange, "fill");
  r.add(Backend::cpu, "full"_op, dtypes::numeric, full, "fill");
}

}  // namespace spore::cpu
