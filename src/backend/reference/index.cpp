// Reference kernels of the indexing family (ops/index.cpp): scatter_nd, gather_nd, grid_sample (+ grad), roi_align
// (+ grad), einsum. Computed in double, element by element, following the ONNX / PyTorch definitions literally.
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/reference/families.h"
#include "backend/reference/util.h"
#include "ops/einsum.h"

namespace spore::reference {
namespace {

using Ints = std::vector<int64_t>;

// Component j of index tuple `m` (a [M, k] view of the index tensor), wrapped; out of range is a user error.
int64_t tuple_at(const Tensor& idx, int64_t m, int64_t j, int64_t k, int64_t bound, std::string_view op, int64_t dim) {
  const int64_t raw = static_cast<int64_t>(get(idx, m * k + j));
  const int64_t v = raw < 0 ? raw + bound : raw;
  SPORE_CHECK(v >= 0 && v < bound, ErrorCode::invalid_argument,
              "[{}] index {} (tuple {}, component {}) is out of range for dim {} of size {}", op, raw, m, j, dim,
              bound);
  return v;
}

double reduce(const std::string& red, double cur, double u, bool is_bool) {
  if (red == "add") return is_bool ? double(cur != 0 || u != 0) : cur + u;
  if (red == "mul") return is_bool ? double(cur != 0 && u != 0) : cur * u;
  if (red == "max") return std::max(cur, u);
  if (red == "min") return std::min(cur, u);
  return u;
}

// Tuples apply in order, so with "none" the last repeated tuple wins.
void scatter_nd(KernelContext& k) {
  const Tensor &x = k.in(0), &idx = k.in(1), &upd = k.in(2);
  const int64_t depth = idx.shape().back();
  const int64_t tuples = shape_numel(Shape(idx.shape().begin(), idx.shape().end() - 1));
  int64_t slice = 1;
  for (size_t d = static_cast<size_t>(depth); d < x.shape().size(); ++d) slice *= x.shape()[d];
  const std::string& red = k.attrs.s("reduction");
  for (int64_t i = 0; i < x.numel(); ++i) put(k.out(), i, get(x, i));
  for (int64_t m = 0; m < tuples; ++m) {
    int64_t base = 0;
    for (int64_t j = 0; j < depth; ++j)
      base = base * x.shape()[j] + tuple_at(idx, m, j, depth, x.shape()[j], "scatter_nd", j);
    for (int64_t s = 0; s < slice; ++s) {
      const int64_t dst = base * slice + s;
      put(k.out(), dst, reduce(red, get(k.out(), dst), get(upd, m * slice + s), x.dtype() == DType::boolean));
    }
  }
}

void gather_nd(KernelContext& k) {
  const Tensor &x = k.in(0), &idx = k.in(1);
  const Shape& xs = x.shape();
  const int64_t b = k.attrs.i("batch_dims"), depth = idx.shape().back();
  int64_t batches = 1, inner = 1, slice = 1;
  for (int64_t d = 0; d < b; ++d) batches *= xs[d];
  for (int64_t d = b; d < b + depth; ++d) inner *= xs[d];
  for (size_t d = static_cast<size_t>(b + depth); d < xs.size(); ++d) slice *= xs[d];
  const int64_t tuples = shape_numel(Shape(idx.shape().begin(), idx.shape().end() - 1));
  const int64_t per_batch = batches ? tuples / batches : 0;
  for (int64_t m = 0; m < tuples; ++m) {
    int64_t base = 0;
    for (int64_t j = 0; j < depth; ++j)
      base = base * xs[b + j] + tuple_at(idx, m, j, depth, xs[b + j], "gather_nd", b + j);
    const int64_t src = ((m / per_batch) * inner + base) * slice;
    for (int64_t s = 0; s < slice; ++s) put(k.out(), m * slice + s, get(x, src + s));
  }
}

// ---- grid_sample, as PyTorch's GridSampler.h defines it.

double unnormalize(double g, int64_t size, bool align) {
  return align ? (g + 1) / 2 * static_cast<double>(size - 1) : ((g + 1) * static_cast<double>(size) - 1) / 2;
}
double d_unnormalize(int64_t size, bool align) {
  return align ? static_cast<double>(size - 1) / 2 : static_cast<double>(size) / 2;
}

// Border / reflection padding of a source coordinate, and d(result)/d(coord).
double pad_coord(double c, int64_t size, const std::string& pm, bool align, double* dc) {
  double grad = 1;
  const double hi = static_cast<double>(size - 1);
  const auto clip = [&](double v) {
    if (v <= 0) {
      grad = 0;
      return 0.0;
    }
    if (v >= hi) {
      grad = 0;
      return hi;
    }
    return v;
  };
  if (pm == "border") {
    c = clip(c);
  } else if (pm == "reflection") {
    const double lo2 = align ? 0 : -1, hi2 = align ? 2 * hi : 2 * static_cast<double>(size) - 1;
    if (lo2 == hi2) {
      c = 0;
      grad = 0;
    } else {
      const double mn = lo2 / 2, span = (hi2 - lo2) / 2;
      double v = c - mn;
      double sgn = 1;
      if (v < 0) {
        v = -v;
        sgn = -1;
      }
      const double extra = std::fmod(v, span);
      const int64_t flips = static_cast<int64_t>(std::floor(v / span));
      if (flips % 2 == 0) {
        c = extra + mn;
      } else {
        c = span - extra + mn;
        sgn = -sgn;
      }
      grad = sgn;
      c = clip(c);
    }
  }
  if (dc) *dc = grad;
  return c;
}

double cubic1(double t, double a) { return ((a + 2) * t - (a + 3)) * t * t + 1; }
double cubic2(double t, double a) { return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a; }
double dcubic1(double t, double a) { return (3 * (a + 2) * t - 2 * (a + 3)) * t; }
double dcubic2(double t, double a) { return (3 * a * t - 10 * a) * t + 8 * a; }

// One tap of an output point: the input element it reads (or -1 outside: zero) and its weight, with the weight's
// derivatives along the source x and y coordinates.
struct Tap {
  int64_t h, w;  // -1: outside
  double wt, dwx, dwy;
};

// The taps of the point at grid (gx, gy) in an H x W image, and d(source coordinate)/d(grid) per axis.
std::vector<Tap> taps_of(double gx, double gy, int64_t H, int64_t W, const Attrs& a, double* sx_scale,
                         double* sy_scale) {
  const std::string& mode = a.s("mode");
  const std::string& pm = a.s("padding_mode");
  const bool align = a.b("align_corners");
  std::vector<Tap> taps;
  const auto inside = [&](int64_t y, int64_t x) { return y >= 0 && y < H && x >= 0 && x < W; };
  double ix = unnormalize(gx, W, align), iy = unnormalize(gy, H, align);
  if (mode == "bicubic") {
    *sx_scale = d_unnormalize(W, align);
    *sy_scale = d_unnormalize(H, align);
    const double x0 = std::floor(ix), y0 = std::floor(iy), tx = ix - x0, ty = iy - y0;
    constexpr double A = -0.75;
    const double cx[4] = {cubic2(tx + 1, A), cubic1(tx, A), cubic1(1 - tx, A), cubic2(2 - tx, A)};
    const double cy[4] = {cubic2(ty + 1, A), cubic1(ty, A), cubic1(1 - ty, A), cubic2(2 - ty, A)};
    const double dx[4] = {dcubic2(tx + 1, A), dcubic1(tx, A), -dcubic1(1 - tx, A), -dcubic2(2 - tx, A)};
    const double dy[4] = {dcubic2(ty + 1, A), dcubic1(ty, A), -dcubic1(1 - ty, A), -dcubic2(2 - ty, A)};
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        // Each tap is padded on its own (an integer position: no derivative through it).
        const double px = pad_coord(x0 - 1 + i, W, pm, align, nullptr),
                     py = pad_coord(y0 - 1 + j, H, pm, align, nullptr);
        const int64_t xi = static_cast<int64_t>(px), yi = static_cast<int64_t>(py);
        const bool in = inside(yi, xi);
        taps.push_back({in ? yi : -1, in ? xi : -1, cx[i] * cy[j], dx[i] * cy[j], cx[i] * dy[j]});
      }
    return taps;
  }
  double gxs = 0, gys = 0;
  ix = pad_coord(ix, W, pm, align, &gxs);
  iy = pad_coord(iy, H, pm, align, &gys);
  *sx_scale = gxs * d_unnormalize(W, align);
  *sy_scale = gys * d_unnormalize(H, align);
  if (mode == "nearest") {
    const int64_t xi = static_cast<int64_t>(std::nearbyint(ix)), yi = static_cast<int64_t>(std::nearbyint(iy));
    const bool in = inside(yi, xi);
    taps.push_back({in ? yi : -1, in ? xi : -1, 1.0, 0.0, 0.0});
    return taps;
  }
  const double x0 = std::floor(ix), y0 = std::floor(iy), tx = ix - x0, ty = iy - y0;
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 2; ++i) {
      const int64_t xi = static_cast<int64_t>(x0) + i, yi = static_cast<int64_t>(y0) + j;
      const double wx = i ? tx : 1 - tx, wy = j ? ty : 1 - ty;
      const bool in = inside(yi, xi);
      taps.push_back({in ? yi : -1, in ? xi : -1, wx * wy, (i ? 1.0 : -1.0) * wy, wx * (j ? 1.0 : -1.0)});
    }
  return taps;
}

void grid_sample(KernelContext& k) {
  const Tensor &x = k.in(0), &grid = k.in(1);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t Ho = grid.shape()[1], Wo = grid.shape()[2];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < Ho * Wo; ++p) {
      double sx = 0, sy = 0;
      const auto taps =
          taps_of(get(grid, (n * Ho * Wo + p) * 2), get(grid, (n * Ho * Wo + p) * 2 + 1), H, W, k.attrs, &sx, &sy);
      for (int64_t c = 0; c < C; ++c) {
        double acc = 0;
        for (const Tap& t : taps)
          if (t.h >= 0) acc += t.wt * get(x, ((n * C + c) * H + t.h) * W + t.w);
        put(k.out(), (n * C + c) * Ho * Wo + p, acc);
      }
    }
}

void grid_sample_grad(KernelContext& k) {
  const Tensor &x = k.in(0), &grid = k.in(1), &dy = k.in(2);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t Ho = grid.shape()[1], Wo = grid.shape()[2];
  std::vector<double> dx(static_cast<size_t>(x.numel()), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < Ho * Wo; ++p) {
      double sx = 0, sy = 0;
      const int64_t gi = (n * Ho * Wo + p) * 2;
      const auto taps = taps_of(get(grid, gi), get(grid, gi + 1), H, W, k.attrs, &sx, &sy);
      double gx = 0, gy = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double go = get(dy, (n * C + c) * Ho * Wo + p);
        for (const Tap& t : taps) {
          if (t.h < 0) continue;
          const int64_t xi = ((n * C + c) * H + t.h) * W + t.w;
          dx[static_cast<size_t>(xi)] += t.wt * go;
          gx += t.dwx * get(x, xi) * go;
          gy += t.dwy * get(x, xi) * go;
        }
      }
      put(k.out(1), gi, gx * sx);
      put(k.out(1), gi + 1, gy * sy);
    }
  for (int64_t i = 0; i < x.numel(); ++i) put(k.out(0), i, dx[static_cast<size_t>(i)]);
}

// ---- roi_align, as ONNX's reference (and ONNX Runtime) define it.

struct Sample {
  int64_t pos[4];  // y_low*W+x_low, y_low*W+x_high, y_high*W+x_low, y_high*W+x_high
  double w[4];
};

// The samples of bin (ph, pw) of roi r, and the count avg divides by.
std::vector<Sample> roi_samples(const Tensor& rois, int64_t r, int64_t ph, int64_t pw, int64_t H, int64_t W,
                                const Attrs& a, double* count) {
  const double scale = a.f("spatial_scale");
  const bool half = a.s("coordinate_transformation_mode") == "half_pixel";
  const int64_t oh = a.i("output_height"), ow = a.i("output_width"), ratio = a.i("sampling_ratio");
  const double off = half ? 0.5 : 0.0;
  const double x1 = get(rois, r * 4) * scale - off, y1 = get(rois, r * 4 + 1) * scale - off;
  const double x2 = get(rois, r * 4 + 2) * scale - off, y2 = get(rois, r * 4 + 3) * scale - off;
  double rw = x2 - x1, rh = y2 - y1;
  if (!half) {
    rw = std::max(rw, 1.0);
    rh = std::max(rh, 1.0);
  }
  const double bh = rh / static_cast<double>(oh), bw = rw / static_cast<double>(ow);
  const int64_t gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / static_cast<double>(oh)));
  const int64_t gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / static_cast<double>(ow)));
  *count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
  std::vector<Sample> out;
  for (int64_t iy = 0; iy < gh; ++iy)
    for (int64_t ix = 0; ix < gw; ++ix) {
      double y = y1 + static_cast<double>(ph) * bh + (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh);
      double x = x1 + static_cast<double>(pw) * bw + (static_cast<double>(ix) + 0.5) * bw / static_cast<double>(gw);
      Sample s{{0, 0, 0, 0}, {0, 0, 0, 0}};
      if (y < -1.0 || y > static_cast<double>(H) || x < -1.0 || x > static_cast<double>(W)) {
        out.push_back(s);
        continue;
      }
      y = std::max(y, 0.0);
      x = std::max(x, 0.0);
      int64_t yl = static_cast<int64_t>(y), xl = static_cast<int64_t>(x), yh, xh;
      if (yl >= H - 1) {
        yh = yl = H - 1;
        y = static_cast<double>(yl);
      } else {
        yh = yl + 1;
      }
      if (xl >= W - 1) {
        xh = xl = W - 1;
        x = static_cast<double>(xl);
      } else {
        xh = xl + 1;
      }
      const double ly = y - static_cast<double>(yl), lx = x - static_cast<double>(xl), hy = 1 - ly, hx = 1 - lx;
      s = {{yl * W + xl, yl * W + xh, yh * W + xl, yh * W + xh}, {hy * hx, hy * lx, ly * hx, ly * lx}};
      out.push_back(s);
    }
  return out;
}

int64_t roi_batch(const Tensor& bi, int64_t r, int64_t n) {
  const int64_t b = static_cast<int64_t>(get(bi, r));
  SPORE_CHECK(b >= 0 && b < n, ErrorCode::invalid_argument,
              "[roi_align] batch index {} of roi {} is out of range for {} images", b, r, n);
  return b;
}

void roi_align(KernelContext& k) {
  const Tensor &x = k.in(0), &rois = k.in(1), &bi = k.in(2);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3], R = rois.shape()[0];
  const int64_t oh = k.attrs.i("output_height"), ow = k.attrs.i("output_width");
  const bool is_max = k.attrs.s("mode") == "max";
  for (int64_t r = 0; r < R; ++r) {
    const int64_t b = roi_batch(bi, r, N);
    for (int64_t ph = 0; ph < oh; ++ph)
      for (int64_t pw = 0; pw < ow; ++pw) {
        double count = 1;
        const auto samples = roi_samples(rois, r, ph, pw, H, W, k.attrs, &count);
        for (int64_t c = 0; c < C; ++c) {
          const int64_t plane = (b * C + c) * H * W;
          double acc = 0;
          bool first = true;
          for (const Sample& s : samples) {
            if (is_max) {
              for (int q = 0; q < 4; ++q) {
                const double v = s.w[q] * get(x, plane + s.pos[q]);
                acc = first ? v : std::max(acc, v);
                first = false;
              }
            } else {
              for (int q = 0; q < 4; ++q) acc += s.w[q] * get(x, plane + s.pos[q]);
            }
          }
          put(k.out(), ((r * C + c) * oh + ph) * ow + pw, is_max ? acc : acc / count);
        }
      }
  }
}

// avg: each sample's corners get w * dy / count; max: the corner term that won (the first largest) gets w * dy.
void roi_align_grad(KernelContext& k) {
  const Tensor &x = k.in(0), &rois = k.in(1), &bi = k.in(2), &dy = k.in(3);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3], R = rois.shape()[0];
  const int64_t oh = k.attrs.i("output_height"), ow = k.attrs.i("output_width");
  const bool is_max = k.attrs.s("mode") == "max";
  std::vector<double> dx(static_cast<size_t>(x.numel()), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t b = roi_batch(bi, r, N);
    for (int64_t ph = 0; ph < oh; ++ph)
      for (int64_t pw = 0; pw < ow; ++pw) {
        double count = 1;
        const auto samples = roi_samples(rois, r, ph, pw, H, W, k.attrs, &count);
        for (int64_t c = 0; c < C; ++c) {
          const int64_t plane = (b * C + c) * H * W;
          const double go = get(dy, ((r * C + c) * oh + ph) * ow + pw);
          if (is_max) {
            double best = 0;
            int64_t at = -1;
            double wt = 0;
            for (const Sample& s : samples)
              for (int q = 0; q < 4; ++q) {
                const double v = s.w[q] * get(x, plane + s.pos[q]);
                if (at < 0 || v > best) {
                  best = v;
                  at = plane + s.pos[q];
                  wt = s.w[q];
                }
              }
            if (at >= 0) dx[static_cast<size_t>(at)] += wt * go;
          } else {
            for (const Sample& s : samples)
              for (int q = 0; q < 4; ++q) dx[static_cast<size_t>(plane + s.pos[q])] += s.w[q] * go / count;
          }
        }
      }
  }
  for (int64_t i = 0; i < x.numel(); ++i) put(k.out(), i, dx[static_cast<size_t>(i)]);
}

// ---- einsum: every assignment of every label, the product of the operands added into the output element.
void einsum(KernelContext& k) {
  std::vector<int> ranks;
  for (const Tensor& t : k.inputs) ranks.push_back(t.rank());
  const EinsumSpec s = parse_einsum(k.attrs.s("equation"), ranks);
  std::vector<int64_t> size(static_cast<size_t>(s.num_labels), 1);
  std::vector<bool> used(static_cast<size_t>(s.num_labels), false);
  for (size_t i = 0; i < s.inputs.size(); ++i)
    for (size_t d = 0; d < s.inputs[i].size(); ++d) {
      const size_t id = static_cast<size_t>(s.inputs[i][d]);
      size[id] = std::max(size[id], k.in(static_cast<int>(i)).shape()[d]);
      used[id] = true;
    }
  std::vector<int> labels;
  Shape all;
  for (int id = 0; id < s.num_labels; ++id)
    if (used[static_cast<size_t>(id)]) {
      labels.push_back(id);
      all.push_back(size[static_cast<size_t>(id)]);
    }
  std::vector<double> out(static_cast<size_t>(k.out().numel()), 0.0);
  std::vector<int64_t> value(static_cast<size_t>(s.num_labels), 0);
  const int64_t total = shape_numel(all);
  for (int64_t f = 0; f < total; ++f) {
    const Ints a = unravel(f, all);
    for (size_t j = 0; j < labels.size(); ++j) value[static_cast<size_t>(labels[j])] = a[j];
    double prod = 1;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const Tensor& t = k.in(static_cast<int>(i));
      int64_t flat = 0;
      for (size_t d = 0; d < s.inputs[i].size(); ++d)
        flat = flat * t.shape()[d] + (t.shape()[d] == 1 ? 0 : value[static_cast<size_t>(s.inputs[i][d])]);
      prod *= get(t, flat);
    }
    int64_t o = 0;
    for (size_t d = 0; d < s.output.size(); ++d)
      o = o * size[static_cast<size_t>(s.output[d])] + value[static_cast<size_t>(s.output[d])];
    out[static_cast<size_t>(o)] += prod;
  }
  for (size_t i = 0; i < out.size(); ++i) put(k.out(), static_cast<int64_t>(i), out[i]);
}

}  // namespace

void register_index(KernelRegistry& r) {
  const auto add = [&](OpId op, DTypeSet s, KernelFn fn) { r.add(Backend::reference, op, s, fn, "scalar"); };
  add("scatter_nd"_op, dtypes::all, scatter_nd);
  add("gather_nd"_op, dtypes::all, gather_nd);
  add("grid_sample"_op, dtypes::floating, grid_sample);
  add("grid_sample_grad"_op, dtypes::floating, grid_sample_grad);
  add("roi_align"_op, dtypes::floating, roi_align);
  add("roi_align_grad"_op, dtypes::floating, roi_align_grad);
  add("einsum"_op, dtypes::floating, einsum);
}

}  // namespace spore::reference
