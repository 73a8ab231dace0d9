// CPU kernels of the data-movement ops. They all go through one strided-copy engine that works on element
// sizes (1/2/4/8 bytes), so one kernel serves every dtype: dims are simplified (size-1 dims dropped,
// runs contiguous in both source and destination merged), then rows are memcpy'd, broadcast rows filled
// and transposes done in cache-sized tiles. Work is split into chunks fixed by the problem size and every
// chunk writes its own outputs, so results are identical for any thread count.
#include <algorithm>
#include <cstring>
#include <string>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "backend/cpu/byte_copy.h"
#include "backend/cpu/families.h"
#include "backend/cpu/transpose8.h"
#include "ops/pad_index.h"
#include "base/thread_pool.h"

namespace spore::cpu {
void register_shape_index(KernelRegistry& r);  // shape_index.cpp: gather, scatter, one_hot, arange, full

namespace {
using namespace bytes;

using Ints = std::vector<int64_t>;
constexpr int64_t tile_edge = 32;          // transpose tile edge (32x32x8 bytes fits L1 twice)

template <typename T>
void fill_strided(char* d, int64_t n, int64_t ds, T v) {  // ds in bytes
  if (ds == static_cast<int64_t>(sizeof(T))) return fill_run<T>(d, n, v);
  for (int64_t j = 0; j < n; ++j) store<T>(d + j * ds, v);
}
template <typename T>
void copy_strided_run(char* d, int64_t ds, const char* s, int64_t ss, int64_t n) {  // strides in bytes
  for (int64_t j = 0; j < n; ++j) store<T>(d + j * ds, load<T>(s + j * ss));
}
#ifdef __AVX2__
// 8x8 block of 4-byte elements transposed in registers (transpose8.h; the build baseline is AVX2).
inline void transpose8x8_b32(char* d, int64_t dr, const char* s, int64_t sr) {
  __m256 r[8];
  for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(reinterpret_cast<const float*>(s + j * sr));
  transpose8(r);
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(reinterpret_cast<float*>(d + i * dr), r[i]);
}
#endif

// One transpose tile: d[i][j] = s[j][i], d rows `dr` bytes apart, s rows `sr` bytes apart.
template <typename T>
void copy_tile(char* d, int64_t dr, const char* s, int64_t sr, int64_t ni, int64_t nj) {
  constexpr int64_t es = sizeof(T);
  int64_t i_done = 0, j_done = 0;
#ifdef __AVX2__
  if constexpr (sizeof(T) == 4) {
    i_done = ni & ~int64_t{7};
    j_done = nj & ~int64_t{7};
    for (int64_t i = 0; i < i_done; i += 8)
      for (int64_t j = 0; j < j_done; j += 8) transpose8x8_b32(d + i * dr + j * es, dr, s + i * es + j * sr, sr);
  }
#endif
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t j = i < i_done ? j_done : 0; j < nj; ++j) store<T>(d + i * dr + j * es, load<T>(s + i * es + j * sr));
}
// d[j] = s[map[j]] for j in [j0, j1).
template <typename T>
void gather_run(char* d, const char* s, const int64_t* map, int64_t j0, int64_t j1) {
  constexpr int64_t es = sizeof(T);
  for (int64_t j = j0; j < j1; ++j) store<T>(d + j * es, load<T>(s + map[j] * es));
}

// Fills n elements of size es at dst with the bytes at `value`, in parallel chunks.
void fill(char* dst, int64_t n, const char* value, size_t es) {
  const int64_t grain = chunk_bytes / static_cast<int64_t>(es);
  with_elem(es, [&](auto t) {
    using T = decltype(t);
    const T v = load<T>(value);
    parallel_for(num_chunks(n, grain), [&](int64_t c) {
      const int64_t b = c * grain, e = std::min(n, b + grain);
      fill_run<T>(dst + b * static_cast<int64_t>(sizeof(T)), e - b, v);
    });
  });
}


// A copy of a box of elements: per dim its extent and the source/destination strides (in elements).
struct CopyPlan {
  Ints size, src, dst;
  void add(int64_t n, int64_t s, int64_t d) {
    size.push_back(n);
    src.push_back(s);
    dst.push_back(d);
  }
};

// Drops size-1 dims and merges a dim into the previous one when both strides continue its run.
CopyPlan simplify(const CopyPlan& p) {
  CopyPlan q;
  for (size_t i = 0; i < p.size.size(); ++i) {
    if (p.size[i] == 1) continue;
    if (!q.size.empty() && q.src.back() == p.src[i] * p.size[i] && q.dst.back() == p.dst[i] * p.size[i]) {
      q.size.back() *= p.size[i];
      q.src.back() = p.src[i];
      q.dst.back() = p.dst[i];
    } else {
      q.add(p.size[i], p.src[i], p.dst[i]);
    }
  }
  return q;
}

// Walks the multi-index of the first `nd` dims of a plan in row-major order, tracking both offsets.
struct Odometer {
  const CopyPlan& p;
  int nd;
  Ints idx;
  int64_t so = 0, dof = 0;
  Odometer(const CopyPlan& plan, int dims, int64_t flat) : p(plan), nd(dims), idx(dims, 0) {
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = flat % p.size[d];
      flat /= p.size[d];
      so += idx[d] * p.src[d];
      dof += idx[d] * p.dst[d];
    }
  }
  void next() {
    for (int d = nd - 1; d >= 0; --d) {
      so += p.src[d];
      dof += p.dst[d];
      if (++idx[d] < p.size[d]) return;
      so -= p.src[d] * p.size[d];
      dof -= p.dst[d] * p.size[d];
      idx[d] = 0;
    }
  }
};

// Transpose-like copy: the last dim is contiguous in dst, dim k contiguous in src. Copies 32x32 tiles so
// both sides stay in cache; one task per (outer index, block of k).
void tiled_copy(const char* src, char* dst, const CopyPlan& p, int k, size_t es) {
  const int r = static_cast<int>(p.size.size());
  CopyPlan outer;
  for (int d = 0; d < r - 1; ++d)
    if (d != k) outer.add(p.size[d], p.src[d], p.dst[d]);
  int64_t n_outer = 1;
  for (int64_t s : outer.size) n_outer *= s;
  const int64_t nk = p.size[k], nl = p.size[r - 1], ls = p.src[r - 1], kd = p.dst[k];
  const int64_t kblocks = num_chunks(nk, tile_edge);
  with_elem(es, [&](auto t) {
    using T = decltype(t);
    parallel_for(n_outer * kblocks, [&](int64_t task) {
      const Odometer od(outer, static_cast<int>(outer.size.size()), task / kblocks);
      const int64_t i0 = (task % kblocks) * tile_edge, i1 = std::min(nk, i0 + tile_edge);
      const char* s = src + od.so * static_cast<int64_t>(es);
      char* d = dst + od.dof * static_cast<int64_t>(es);
      constexpr int64_t te = sizeof(T);
      for (int64_t j0 = 0; j0 < nl; j0 += tile_edge) {
        copy_tile<T>(d + (i0 * kd + j0) * te, kd * te, s + (i0 + j0 * ls) * te, ls * te, i1 - i0,
                     std::min(nl, j0 + tile_edge) - j0);
      }
    });
  });
}

// Copies the box described by `plan` from src to dst (both already offset to the box origin).
void strided_copy(const char* src, char* dst, const CopyPlan& plan, size_t es) {
  for (int64_t n : plan.size)
    if (n == 0) return;
  const CopyPlan p = simplify(plan);
  const int r = static_cast<int>(p.size.size());
  if (r == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  const int64_t inner = p.size[r - 1], ss = p.src[r - 1], ds = p.dst[r - 1];
  if (ds == 1 && ss != 1 && ss != 0) {
    for (int k = r - 2; k >= 0; --k)
      if (p.src[k] == 1) return tiled_copy(src, dst, p, k, es);
  }
  int64_t rows = 1;
  for (int d = 0; d < r - 1; ++d) rows *= p.size[d];
  const int64_t ies = static_cast<int64_t>(es), row_bytes = inner * ies;
  if (ss == 1 && ds == 1 && row_bytes >= chunk_bytes) {
    // Long contiguous rows: split each row into pieces so even one row uses every thread.
    const int64_t pieces = num_chunks(row_bytes, chunk_bytes);
    parallel_for(rows * pieces, [&](int64_t task) {
      const Odometer od(p, r - 1, task / pieces);
      const int64_t b = (task % pieces) * chunk_bytes;
      std::memcpy(dst + od.dof * ies + b, src + od.so * ies + b,
                  static_cast<size_t>(std::min(row_bytes, b + chunk_bytes) - b));
    });
    return;
  }
  const int64_t grain = std::max<int64_t>(1, chunk_bytes / row_bytes);
  with_elem(es, [&](auto t) {
    using T = decltype(t);
    parallel_for(num_chunks(rows, grain), [&](int64_t c) {
      const int64_t r0 = c * grain, r1 = std::min(rows, r0 + grain);
      Odometer od(p, r - 1, r0);
      for (int64_t row = r0; row < r1; ++row, od.next()) {
        const char* s = src + od.so * ies;
        char* d = dst + od.dof * ies;
        if (ss == 1 && ds == 1) {
          std::memcpy(d, s, static_cast<size_t>(row_bytes));
        } else if (ss == 0) {
          fill_strided<T>(d, inner, ds * ies, load<T>(s));
        } else {
          copy_strided_run<T>(d, ds * ies, s, ss * ies, inner);
        }
      }
    });
  });
}


// reshape, squeeze, unsqueeze, flatten: inputs are contiguous, so the bytes are already in order.
void copy_kernel(KernelContext& k) {
  parallel_memcpy(out_bytes(k.out()), in_bytes(k.in(0)), static_cast<int64_t>(k.out().nbytes()));
}

void transpose(KernelContext& k) {
  const Tensor& x = k.in(0);
  const int r = x.rank();
  Ints perm = k.attrs.ints("perm");
  if (perm.empty())
    for (int d = r - 1; d >= 0; --d) perm.push_back(d);
  const Strides xs = contiguous_strides(x.shape()), os = contiguous_strides(k.out().shape());
  CopyPlan p;
  for (int d = 0; d < r; ++d) p.add(k.out().shape()[d], xs[norm_axis(perm[d], r)], os[d]);
  strided_copy(in_bytes(x), out_bytes(k.out()), p, dtype_size(x.dtype()));
}

// ONNX Slice: the output shape holds each axis' length; only the first index and step are needed here.
void slice(KernelContext& k) {
  const Tensor& x = k.in(0);
  if (k.out().numel() == 0) return;
  const int r = x.rank();
  const Ints& starts = k.attrs.ints("starts");
  Ints axes = k.attrs.ints("axes"), steps = k.attrs.ints("steps");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  const Strides xs = contiguous_strides(x.shape()), os = contiguous_strides(k.out().shape());
  Ints first(r, 0), step(r, 1);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t a = norm_axis(axes[i], r), n = x.shape()[a];
    const int64_t s = starts[i] < 0 ? starts[i] + n : starts[i];
    first[a] = steps[i] > 0 ? std::clamp<int64_t>(s, 0, n) : std::clamp<int64_t>(s, 0, n - 1);
    step[a] = steps[i];
  }
  CopyPlan p;
  int64_t off = 0;
  for (int d = 0; d < r; ++d) {
    p.add(k.out().shape()[d], xs[d] * step[d], os[d]);
    off += first[d] * xs[d];
  }
  const size_t es = dtype_size(x.dtype());
  strided_copy(in_bytes(x) + off * static_cast<int64_t>(es), out_bytes(k.out()), p, es);
}

void expand(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Shape& out = k.out().shape();
  const size_t lead = out.size() - x.shape().size();
  const Strides xs = contiguous_strides(x.shape()), os = contiguous_strides(out);
  CopyPlan p;
  for (size_t d = 0; d < out.size(); ++d)
    p.add(out[d], d < lead || x.shape()[d - lead] != out[d] ? 0 : xs[d - lead], os[d]);
  strided_copy(in_bytes(x), out_bytes(k.out()), p, dtype_size(x.dtype()));
}

// tile: out dim d of size reps*n splits into (reps, n); the reps dim reads with stride 0.
void tile(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Ints& reps = k.attrs.ints("repeats");
  const Strides xs = contiguous_strides(x.shape()), os = contiguous_strides(k.out().shape());
  CopyPlan p;
  for (int d = 0; d < x.rank(); ++d) {
    p.add(reps[d], 0, os[d] * x.shape()[d]);
    p.add(x.shape()[d], xs[d], os[d]);
  }
  strided_copy(in_bytes(x), out_bytes(k.out()), p, dtype_size(x.dtype()));
}

// concat/split: each piece is an [outer, len*inner] box inside an [outer, total*inner] one.
void concat(KernelContext& k) {
  const Tensor& out = k.out();
  const int64_t axis = norm_axis(k.attrs.i("axis"), out.rank());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= out.shape()[d];
  for (int d = static_cast<int>(axis) + 1; d < out.rank(); ++d) inner *= out.shape()[d];
  const int64_t total = out.shape()[axis] * inner;
  const int64_t es = static_cast<int64_t>(dtype_size(out.dtype()));
  int64_t at = 0;
  for (const Tensor& x : k.inputs) {
    const int64_t len = x.shape()[axis] * inner;
    CopyPlan p;
    p.add(outer, len, total);
    p.add(len, 1, 1);
    strided_copy(in_bytes(x), out_bytes(out) + at * es, p, static_cast<size_t>(es));
    at += len;
  }
}

void split(KernelContext& k) {
  const Tensor& x = k.in(0);
  const int64_t axis = norm_axis(k.attrs.i("axis"), x.rank());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (int d = static_cast<int>(axis) + 1; d < x.rank(); ++d) inner *= x.shape()[d];
  const int64_t total = x.shape()[axis] * inner;
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype()));
  int64_t at = 0;
  for (Tensor& out : k.outputs) {
    const int64_t len = out.shape()[axis] * inner;
    CopyPlan p;
    p.add(outer, total, len);
    p.add(len, 1, 1);
    strided_copy(in_bytes(x) + at * es, out_bytes(out), p, static_cast<size_t>(es));
    at += len;
  }
}

void pad(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out();
  if (out.numel() == 0) return;
  const int r = x.rank();
  const Ints& pads = k.attrs.ints("pads");
  const std::string& mode = k.attrs.s("mode");
  const size_t es = dtype_size(x.dtype());
  const int64_t ies = static_cast<int64_t>(es);
  const Strides xs = contiguous_strides(x.shape()), os = contiguous_strides(out.shape());
  if (mode == "constant") {
    // Fill with the value unless nothing is padded, then copy the (possibly cropped) interior box.
    if (std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v > 0; })) {
      char value[8];
      store_from_double(value, x.dtype(), k.attrs.f("value"));
      fill(out_bytes(out), out.numel(), value, es);
    }
    CopyPlan p;
    int64_t so = 0, dof = 0;
    for (int d = 0; d < r; ++d) {
      const int64_t b = pads[d], e = pads[r + d];
      const int64_t len = x.shape()[d] - std::max<int64_t>(0, -b) - std::max<int64_t>(0, -e);
      if (len <= 0) return;
      so += std::max<int64_t>(0, -b) * xs[d];
      dof += std::max<int64_t>(0, b) * os[d];
      p.add(len, xs[d], os[d]);
    }
    strided_copy(in_bytes(x) + so * ies, out_bytes(out) + dof * ies, p, es);
    return;
  }
  // reflect/edge: every output index has a source; map each dim once, then copy row by row with the
  // in-range middle of each row as one memcpy.
  if (r == 0) {
    std::memcpy(out_bytes(out), in_bytes(x), es);
    return;
  }
  const PadMode pm = pad_mode(mode);
  std::vector<Ints> src_of(r);
  for (int d = 0; d < r; ++d) {
    for (int64_t o = 0; o < out.shape()[d]; ++o) src_of[d].push_back(pad_source(o, x.shape()[d], pads[d], pm));
  }
  const int64_t nl = out.shape()[r - 1], nx = x.shape()[r - 1], b = pads[r - 1];
  const int64_t mid0 = std::clamp<int64_t>(b, 0, nl), mid1 = std::clamp<int64_t>(b + nx, 0, nl);
  const int64_t rows = out.numel() / nl, grain = std::max<int64_t>(1, chunk_bytes / (nl * ies));
  const Ints& last = src_of[r - 1];
  with_elem(es, [&](auto t) {
    using T = decltype(t);
    parallel_for(num_chunks(rows, grain), [&](int64_t c) {
      const int64_t r0 = c * grain, r1 = std::min(rows, r0 + grain);
      for (int64_t row = r0; row < r1; ++row) {
        int64_t so = 0, rem = row;
        for (int d = r - 2; d >= 0; --d) {
          so += src_of[d][rem % out.shape()[d]] * xs[d];
          rem /= out.shape()[d];
        }
        const char* s = in_bytes(x) + so * ies;
        char* dst = out_bytes(out) + row * nl * ies;
        gather_run<T>(dst, s, last.data(), 0, mid0);
        if (mid1 > mid0) std::memcpy(dst + mid0 * ies, s + last[mid0] * ies, static_cast<size_t>((mid1 - mid0) * ies));
        gather_run<T>(dst, s, last.data(), mid1, nl);
      }
    });
  });
}

}  // namespace

void transpose_2d(const void* src, void* dst, int64_t rows, int64_t cols, size_t es) {
  CopyPlan p;  // dst [cols, rows] row-major: dst[j, i] = src[i, j]
  p.add(cols, 1, rows);
  p.add(rows, cols, 1);
  strided_copy(static_cast<const char*>(src), static_cast<char*>(dst), p, es);
}

void register_shape(KernelRegistry& r) {
  for (OpId op : {"reshape"_op, "squeeze"_op, "unsqueeze"_op, "flatten"_op})
    r.add(Backend::cpu, op, dtypes::all, copy_kernel, "memcpy");
  r.add(Backend::cpu, "transpose"_op, dtypes::all, transpose, "tiled");
  r.add(Backend::cpu, "slice"_op, dtypes::all, slice, "copy");
  r.add(Backend::cpu, "expand"_op, dtypes::all, expand, "copy");
  r.add(Backend::cpu, "tile"_op, dtypes::all, tile, "copy");
  r.add(Backend::cpu, "concat"_op, dtypes::all, concat, "copy");
  r.add(Backend::cpu, "split"_op, dtypes::all, split, "copy");
  r.add(Backend::cpu, "pad"_op, dtypes::all, pad, "copy");
  register_shape_index(r);
}

}  // namespace spore::cpu
