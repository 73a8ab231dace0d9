// Reference kernels of the data-dependent ops (ops/dynamic_shape.h): the plainest form of each ONNX definition,
// values compared as doubles, quadratic where that is simplest. They size their outputs (dynamic_output).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/reference/families.h"
#include "backend/reference/util.h"
#include "ops/dynamic_shape.h"

namespace spore::reference {
namespace {

void nonzero_kernel(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
  std::vector<std::vector<int64_t>> found;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (get(x, i) != 0) found.push_back(unravel(i, shape));  // NaN != 0: non-zero, as in NumPy
  const int64_t r = static_cast<int64_t>(shape.size()), n = static_cast<int64_t>(found.size());
  Tensor& out = dynamic_output(k, 0, {r, n}, DType::i64);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < r; ++d)
      out.data<int64_t>()[d * n + j] = found[static_cast<size_t>(j)][static_cast<size_t>(d)];
}

// x as [outer, n, inner] around `axis` (flatten: [1, numel, 1]).
struct Slices {
  int64_t outer = 1, n = 1, inner = 1;
};
Slices slices_of(const Tensor& x, bool flatten, int64_t axis) {
  Slices s;
  if (flatten) {
    s.n = x.numel();
    return s;
  }
  if (axis < 0) axis += x.rank();
  for (int d = 0; d < x.rank(); ++d) {
    if (d < axis) s.outer *= x.dim(d);
    else if (d > axis) s.inner *= x.dim(d);
  }
  s.n = x.dim(static_cast<int>(axis));
  return s;
}

// Copies slice `from` of x into slice `to` of out (both [outer, *, inner], out with `out_n` slices).
void copy_slice(const Tensor& x, const Slices& s, int64_t from, Tensor& out, int64_t out_n, int64_t to) {
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < s.outer; ++o)
    std::memcpy(dst + ((o * out_n + to) * s.inner) * static_cast<int64_t>(es),
                src + ((o * s.n + from) * s.inner) * static_cast<int64_t>(es), static_cast<size_t>(s.inner) * es);
}

Shape with_axis(const Tensor& x, bool flatten, int64_t axis, int64_t n) {
  if (flatten) return {n};
  Shape s = x.shape();
  s[static_cast<size_t>(axis < 0 ? axis + x.rank() : axis)] = n;
  return s;
}

void compress_kernel(KernelContext& k) {
  const Tensor &x = k.in(0), &cond = k.in(1);
  const bool flatten = k.attrs.b("flatten");
  const Slices s = slices_of(x, flatten, k.attrs.i("axis"));
  SPORE_CHECK(cond.numel() <= s.n, ErrorCode::shape_mismatch,
              "[compress] condition has {} entries, more than the {} {} of x {}", cond.numel(), s.n,
              flatten ? "elements" : "slices along the axis", shape_str(x.shape()));
  std::vector<int64_t> keep;
  for (int64_t j = 0; j < cond.numel(); ++j)
    if (get(cond, j) != 0) keep.push_back(j);
  const int64_t m = static_cast<int64_t>(keep.size());
  Tensor& out = dynamic_output(k, 0, with_axis(x, flatten, k.attrs.i("axis"), m), x.dtype());
  for (int64_t j = 0; j < m; ++j) copy_slice(x, s, keep[static_cast<size_t>(j)], out, m, j);
}

// Slices compared element by element in row-major order; NaN equals NaN and sorts after every number.
int compare_slices(const Tensor& x, const Slices& s, int64_t a, int64_t b) {
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      const double va = get(x, (o * s.n + a) * s.inner + i), vb = get(x, (o * s.n + b) * s.inner + i);
      const bool na = std::isnan(va), nb = std::isnan(vb);
      if (na || nb) {
        if (na && nb) continue;
        return na ? 1 : -1;
      }
      if (va != vb) return va < vb ? -1 : 1;
    }
  return 0;
}

void unique_kernel(KernelContext& k) {
  const Tensor& x = k.in(0);
  const bool flatten = k.attrs.b("flatten");
  const Slices s = slices_of(x, flatten, k.attrs.i("axis"));
  std::vector<int64_t> first, inverse(static_cast<size_t>(s.n)), counts;
  for (int64_t j = 0; j < s.n; ++j) {
    size_t g = 0;
    while (g < first.size() && compare_slices(x, s, first[g], j) != 0) ++g;
    if (g == first.size()) {
      first.push_back(j);
      counts.push_back(0);
    }
    inverse[static_cast<size_t>(j)] = static_cast<int64_t>(g);
    ++counts[g];
  }
  const int64_t u = static_cast<int64_t>(first.size());
  std::vector<int64_t> order(static_cast<size_t>(u));  // order[p]: the group at output position p
  std::iota(order.begin(), order.end(), 0);
  if (k.attrs.b("sorted"))
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return compare_slices(x, s, first[static_cast<size_t>(a)], first[static_cast<size_t>(b)]) < 0;
    });
  std::vector<int64_t> pos(static_cast<size_t>(u));
  for (int64_t p = 0; p < u; ++p) pos[static_cast<size_t>(order[static_cast<size_t>(p)])] = p;
  Tensor& y = dynamic_output(k, 0, with_axis(x, flatten, k.attrs.i("axis"), u), x.dtype());
  Tensor& idx = dynamic_output(k, 1, {u}, DType::i64);
  Tensor& inv = dynamic_output(k, 2, {s.n}, DType::i64);
  Tensor& cnt = dynamic_output(k, 3, {u}, DType::i64);
  for (int64_t p = 0; p < u; ++p) {
    const size_t g = static_cast<size_t>(order[static_cast<size_t>(p)]);
    copy_slice(x, s, first[g], y, u, p);
    idx.data<int64_t>()[p] = first[g];
    cnt.data<int64_t>()[p] = counts[g];
  }
  for (int64_t j = 0; j < s.n; ++j) inv.data<int64_t>()[j] = pos[static_cast<size_t>(inverse[static_cast<size_t>(j)])];
}

// ONNX Runtime's suppression test (SuppressByIOU), in double.
bool suppresses(const double* a, const double* b, bool center) {
  double ax0, ay0, ax1, ay1, bx0, by0, bx1, by1;
  if (center) {
    ax0 = a[0] - a[2] / 2, ax1 = a[0] + a[2] / 2, ay0 = a[1] - a[3] / 2, ay1 = a[1] + a[3] / 2;
    bx0 = b[0] - b[2] / 2, bx1 = b[0] + b[2] / 2, by0 = b[1] - b[3] / 2, by1 = b[1] + b[3] / 2;
  } else {
    ay0 = std::min(a[0], a[2]), ay1 = std::max(a[0], a[2]), ax0 = std::min(a[1], a[3]), ax1 = std::max(a[1], a[3]);
    by0 = std::min(b[0], b[2]), by1 = std::max(b[0], b[2]), bx0 = std::min(b[1], b[3]), bx1 = std::max(b[1], b[3]);
  }
  const double iw = std::min(ax1, bx1) - std::max(ax0, bx0), ih = std::min(ay1, by1) - std::max(ay0, by0);
  if (iw <= 0 || ih <= 0) return false;
  const double inter = iw * ih, area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
  const double uni = area_a + area_b - inter;
  if (area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > a[4];  // a[4]: the threshold, carried with the box
}

void nms_kernel(KernelContext& k) {
  const Tensor &boxes = k.in(0), &scores = k.in(1);
  const int64_t nb = boxes.dim(0), n = boxes.dim(1), nc = scores.dim(1);
  SPORE_CHECK(scores.dim(0) == nb && scores.dim(2) == n, ErrorCode::shape_mismatch,
              "[non_max_suppression] boxes {} and scores {} disagree on the batch or the number of boxes",
              shape_str(boxes.shape()), shape_str(scores.shape()));
  const int64_t max_out = k.num_inputs() > 2 ? static_cast<int64_t>(get(k.in(2), 0)) : 0;
  const double iou = k.num_inputs() > 3 ? get(k.in(3), 0) : 0.0;
  const bool has_score = k.num_inputs() > 4;
  const double score_thr = has_score ? get(k.in(4), 0) : 0.0;
  SPORE_CHECK(iou >= 0 && iou <= 1, ErrorCode::invalid_argument,
              "[non_max_suppression] iou_threshold must be in [0, 1], got {}", iou);
  const bool center = k.attrs.b("center_point_box");
  std::vector<int64_t> rows;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t c = 0; c < nc && max_out > 0; ++c) {
      std::vector<int64_t> cand;
      for (int64_t i = 0; i < n; ++i)
        if (!has_score || get(scores, (b * nc + c) * n + i) > score_thr) cand.push_back(i);
      std::stable_sort(cand.begin(), cand.end(), [&](int64_t i, int64_t j) {
        return get(scores, (b * nc + c) * n + i) > get(scores, (b * nc + c) * n + j);
      });
      std::vector<int64_t> kept;
      for (int64_t i : cand) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        double bi[5], bj[5];
        for (int d = 0; d < 4; ++d) bi[d] = get(boxes, (b * n + i) * 4 + d);
        bool ok = true;
        for (int64_t j : kept) {
          for (int d = 0; d < 4; ++d) bj[d] = get(boxes, (b * n + j) * 4 + d);
          bj[4] = iou;
          ok = ok && !suppresses(bj, bi, center);
        }
        if (!ok) continue;
        kept.push_back(i);
        rows.insert(rows.end(), {b, c, i});
      }
    }
  Tensor& out = dynamic_output(k, 0, {static_cast<int64_t>(rows.size() / 3), 3}, DType::i64);
  std::copy(rows.begin(), rows.end(), out.data<int64_t>());
}

}  // namespace

void register_dynamic_shape(KernelRegistry& r) {
  r.add(Backend::reference, "nonzero"_op, dtypes::all, nonzero_kernel);
  r.add(Backend::reference, "compress"_op, dtypes::all, compress_kernel);
  r.add(Backend::reference, "unique"_op, dtypes::all, unique_kernel);
  r.add(Backend::reference, "non_max_suppression"_op, DTypeSet{DType::f32}, nms_kernel);
}

}  // namespace spore::reference
