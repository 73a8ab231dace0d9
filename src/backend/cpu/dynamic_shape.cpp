// CPU kernels of the data-dependent ops (ops/dynamic_shape.h). They size their outputs once they know them
// (dynamic_output). Work splits into fixed-size chunks or per (batch, class) tasks and results are put together in
// task order, so the bits never depend on the thread count.
//   - nonzero: counts per 64K-element chunk in parallel, then each chunk writes its indices at its prefix offset;
//   - compress: memcpy of the kept slices;
//   - unique: a stable sort of slice indices by typed keys (O(n log n) comparisons), groups of equal neighbours;
//   - non_max_suppression: corners and areas once per box, then per (batch, class) task the candidates above the
//     score threshold sorted by (score desc, index asc) and kept greedily, in f32 with ONNX Runtime's IoU test.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "backend/cpu/families.h"
#include "base/thread_pool.h"
#include "ops/dynamic_shape.h"

namespace spore::cpu {
namespace {

// The value compared: f16/bf16 as float, bool as 0/1, others as themselves.
template <typename T>
auto key(T v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) return static_cast<float>(v);
  else if constexpr (std::is_same_v<T, bool>) return static_cast<int>(v);
  else return v;
}

// -1, 0, 1 with NaN equal to NaN and after every number.
template <typename K>
int compare_keys(K a, K b) {
  if constexpr (std::is_floating_point_v<K>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
  }
  return a < b ? -1 : (b < a ? 1 : 0);
}

constexpr int64_t kChunk = 1 << 16;

template <typename T>
void nonzero_typed(KernelContext& k) {
  const Tensor& x = k.in(0);
  const T* p = x.data<T>();
  const int64_t n = x.numel();
  const Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
  const int64_t r = static_cast<int64_t>(shape.size());
  const int64_t tasks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> offset(static_cast<size_t>(tasks) + 1, 0);
  parallel_for(tasks, [&](int64_t t) {
    int64_t c = 0;
    for (int64_t i = t * kChunk, e = std::min(n, (t + 1) * kChunk); i < e; ++i) c += key(p[i]) != 0;
    offset[static_cast<size_t>(t) + 1] = c;
  });
  std::partial_sum(offset.begin(), offset.end(), offset.begin());
  const int64_t total = offset.back();
  int64_t* out = dynamic_output(k, 0, {r, total}, DType::i64).data<int64_t>();
  parallel_for(tasks, [&](int64_t t) {
    const int64_t begin = t * kChunk, end = std::min(n, (t + 1) * kChunk);
    std::vector<int64_t> idx(static_cast<size_t>(r));  // the multi-index of `begin`, then counted up
    for (int64_t d = r - 1, f = begin; d >= 0; --d) {
      idx[static_cast<size_t>(d)] = f % shape[static_cast<size_t>(d)];
      f /= shape[static_cast<size_t>(d)];
    }
    int64_t j = offset[static_cast<size_t>(t)];
    for (int64_t i = begin; i < end; ++i) {
      if (key(p[i]) != 0) {
        for (int64_t d = 0; d < r; ++d) out[d * total + j] = idx[static_cast<size_t>(d)];
        ++j;
      }
      for (int64_t d = r - 1; d >= 0; --d) {
        if (++idx[static_cast<size_t>(d)] < shape[static_cast<size_t>(d)]) break;
        idx[static_cast<size_t>(d)] = 0;
      }
    }
  });
}

void nonzero_kernel(KernelContext& k) {
  visit_dtype(k.in(0).dtype(), [&](auto t) { nonzero_typed<decltype(t)>(k); });
}

// x as [outer, n, inner] around the axis (flatten: [1, numel, 1]).
struct Slices {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t axis = 0;
};
Slices slices_of(const Tensor& x, const Attrs& a) {
  Slices s;
  if (a.b("flatten")) {
    s.n = x.numel();
    return s;
  }
  s.axis = a.i("axis") < 0 ? a.i("axis") + x.rank() : a.i("axis");
  for (int d = 0; d < x.rank(); ++d) {
    if (d < s.axis) s.outer *= x.dim(d);
    else if (d > s.axis) s.inner *= x.dim(d);
  }
  s.n = x.dim(static_cast<int>(s.axis));
  return s;
}
Shape resized(const Tensor& x, const Attrs& a, const Slices& s, int64_t m) {
  if (a.b("flatten")) return {m};
  Shape sh = x.shape();
  sh[static_cast<size_t>(s.axis)] = m;
  return sh;
}

void compress_kernel(KernelContext& k) {
  const Tensor &x = k.in(0), &cond = k.in(1);
  const Slices s = slices_of(x, k.attrs);
  SPORE_CHECK(cond.numel() <= s.n, ErrorCode::shape_mismatch,
              "[compress] condition has {} entries, more than the {} {} of x {}", cond.numel(), s.n,
              k.attrs.b("flatten") ? "elements" : "slices along the axis", shape_str(x.shape()));
  const bool* c = cond.data<bool>();
  std::vector<int64_t> keep;
  for (int64_t j = 0; j < cond.numel(); ++j)
    if (c[j]) keep.push_back(j);
  const int64_t m = static_cast<int64_t>(keep.size());
  Tensor& out = dynamic_output(k, 0, resized(x, k.attrs, s, m), x.dtype());
  const size_t row = static_cast<size_t>(s.inner) * dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t j = 0; j < m; ++j)
      std::memcpy(dst + static_cast<size_t>(o * m + j) * row,
                  src + static_cast<size_t>(o * s.n + keep[static_cast<size_t>(j)]) * row, row);
}

template <typename T>
void unique_typed(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Slices s = slices_of(x, k.attrs);
  const T* p = x.data<T>();
  const auto cmp = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < s.outer; ++o) {
      const T* ra = p + (o * s.n + a) * s.inner;
      const T* rb = p + (o * s.n + b) * s.inner;
      for (int64_t i = 0; i < s.inner; ++i)
        if (const int c = compare_keys(key(ra[i]), key(rb[i])); c != 0) return c;
    }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(s.n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
  // Groups of equal slices in sorted order; stability makes each group's first entry its first occurrence.
  std::vector<int64_t> group_first, group_count, group_of(static_cast<size_t>(s.n));
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || cmp(order[i - 1], order[i]) != 0) {
      group_first.push_back(order[i]);
      group_count.push_back(0);
    }
    group_of[static_cast<size_t>(order[i])] = static_cast<int64_t>(group_first.size()) - 1;
    ++group_count.back();
  }
  const int64_t u = static_cast<int64_t>(group_first.size());
  std::vector<int64_t> out_group(static_cast<size_t>(u));  // the group at each output position
  std::iota(out_group.begin(), out_group.end(), 0);
  if (!k.attrs.b("sorted"))
    std::sort(out_group.begin(), out_group.end(), [&](int64_t a, int64_t b) {
      return group_first[static_cast<size_t>(a)] < group_first[static_cast<size_t>(b)];
    });
  std::vector<int64_t> pos(static_cast<size_t>(u));
  for (int64_t q = 0; q < u; ++q) pos[static_cast<size_t>(out_group[static_cast<size_t>(q)])] = q;
  Tensor& y = dynamic_output(k, 0, resized(x, k.attrs, s, u), x.dtype());
  int64_t* idx = dynamic_output(k, 1, {u}, DType::i64).data<int64_t>();
  int64_t* inv = dynamic_output(k, 2, {s.n}, DType::i64).data<int64_t>();
  int64_t* cnt = dynamic_output(k, 3, {u}, DType::i64).data<int64_t>();
  T* yp = y.data<T>();
  for (int64_t q = 0; q < u; ++q) {
    const size_t g = static_cast<size_t>(out_group[static_cast<size_t>(q)]);
    idx[q] = group_first[g];
    cnt[q] = group_count[g];
    for (int64_t o = 0; o < s.outer; ++o)
      std::copy_n(p + (o * s.n + group_first[g]) * s.inner, s.inner, yp + (o * u + q) * s.inner);
  }
  for (int64_t j = 0; j < s.n; ++j) inv[j] = pos[static_cast<size_t>(group_of[static_cast<size_t>(j)])];
}

void unique_kernel(KernelContext& k) {
  visit_dtype(k.in(0).dtype(), [&](auto t) { unique_typed<decltype(t)>(k); });
}

// A box as ONNX Runtime's SuppressByIOU sees it: corners ordered, area, all in f32.
struct Box {
  float x0, y0, x1, y1, area;
};
Box box_of(const float* b, bool center) {
  Box r;
  if (center) {
    const float hw = b[2] / 2, hh = b[3] / 2;
    r.x0 = b[0] - hw, r.x1 = b[0] + hw, r.y0 = b[1] - hh, r.y1 = b[1] + hh;
  } else {
    r.y0 = std::min(b[0], b[2]), r.y1 = std::max(b[0], b[2]), r.x0 = std::min(b[1], b[3]), r.x1 = std::max(b[1], b[3]);
  }
  r.area = (r.x1 - r.x0) * (r.y1 - r.y0);
  return r;
}
bool suppresses(const Box& a, const Box& b, float iou_threshold) {
  const float ix0 = std::max(a.x0, b.x0), ix1 = std::min(a.x1, b.x1);
  if (ix1 <= ix0) return false;
  const float iy0 = std::max(a.y0, b.y0), iy1 = std::min(a.y1, b.y1);
  if (iy1 <= iy0) return false;
  const float inter = (ix1 - ix0) * (iy1 - iy0);
  if (inter <= 0.f) return false;
  const float uni = a.area + b.area - inter;
  if (a.area <= 0.f || b.area <= 0.f || uni <= 0.f) return false;
  return inter / uni > iou_threshold;
}

int64_t scalar_i64(const Tensor& t) { return t.dtype() == DType::i32 ? t.data<int32_t>()[0] : t.data<int64_t>()[0]; }

void nms_kernel(KernelContext& k) {
  const Tensor &boxes = k.in(0), &scores = k.in(1);
  const int64_t nb = boxes.dim(0), n = boxes.dim(1), nc = scores.dim(1);
  SPORE_CHECK(scores.dim(0) == nb && scores.dim(2) == n, ErrorCode::shape_mismatch,
              "[non_max_suppression] boxes {} and scores {} disagree on the batch or the number of boxes",
              shape_str(boxes.shape()), shape_str(scores.shape()));
  const int64_t max_out = std::max<int64_t>(k.num_inputs() > 2 ? scalar_i64(k.in(2)) : 0, 0);
  const float iou = k.num_inputs() > 3 ? k.in(3).data<float>()[0] : 0.f;
  const bool has_score = k.num_inputs() > 4;
  const float score_thr = has_score ? k.in(4).data<float>()[0] : 0.f;
  SPORE_CHECK(iou >= 0.f && iou <= 1.f, ErrorCode::invalid_argument,
              "[non_max_suppression] iou_threshold must be in [0, 1], got {}", iou);
  const bool center = k.attrs.b("center_point_box");
  const float* bp = boxes.data<float>();
  const float* sp = scores.data<float>();
  std::vector<Box> bx(static_cast<size_t>(nb * n));
  for (int64_t i = 0; i < nb * n; ++i) bx[static_cast<size_t>(i)] = box_of(bp + i * 4, center);
  std::vector<std::vector<int64_t>> kept(static_cast<size_t>(nb * nc));
  if (max_out > 0)
    parallel_for(nb * nc, [&](int64_t t) {
      const int64_t b = t / nc;
      const float* s = sp + t * n;
      const Box* row = bx.data() + b * n;
      std::vector<int64_t> cand;
      for (int64_t i = 0; i < n; ++i)
        if (!has_score || s[i] > score_thr) cand.push_back(i);
      std::sort(cand.begin(), cand.end(), [&](int64_t i, int64_t j) { return s[i] > s[j] || (s[i] == s[j] && i < j); });
      std::vector<int64_t>& out = kept[static_cast<size_t>(t)];
      for (int64_t i : cand) {
        if (static_cast<int64_t>(out.size()) >= max_out) break;
        bool ok = true;
        for (int64_t j : out)
          if (suppresses(row[j], row[i], iou)) {
            ok = false;
            break;
          }
        if (ok) out.push_back(i);
      }
    });
  int64_t total = 0;
  for (const auto& v : kept) total += static_cast<int64_t>(v.size());
  int64_t* o = dynamic_output(k, 0, {total, 3}, DType::i64).data<int64_t>();
  for (int64_t t = 0; t < nb * nc; ++t)
    for (int64_t i : kept[static_cast<size_t>(t)]) {
      *o++ = t / nc;
      *o++ = t % nc;
      *o++ = i;
    }
}

}  // namespace

void register_dynamic_shape(KernelRegistry& r) {
  r.add(Backend::cpu, "nonzero"_op, dtypes::all, nonzero_kernel, "parallel chunks");
  r.add(Backend::cpu, "compress"_op, dtypes::all, compress_kernel, "memcpy");
  r.add(Backend::cpu, "unique"_op, dtypes::all, unique_kernel, "sort");
  r.add(Backend::cpu, "non_max_suppression"_op, DTypeSet{DType::f32}, nms_kernel, "greedy per class");
}

}  // namespace spore::cpu
