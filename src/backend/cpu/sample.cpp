// CPU kernels of the sampling ops (ops/index.cpp): grid_sample, grid_sample_grad, roi_align, roi_align_grad.
// Sample positions and weights are computed in double (the reference's arithmetic, so a nearest-mode rounding or a
// corner choice never differs from it); values are accumulated in f32 (f64 for f64 data) in a fixed order. Work is
// split by output rows, channels or rois, never by thread count, so the bits do not depend on it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/families.h"
#include "base/half.h"
#include "base/thread_pool.h"

namespace spore::cpu {
namespace {

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
inline Acc<T> ld(const T* p, int64_t i) {
  return static_cast<Acc<T>>(p[i]);
}

// ---- grid_sample: PyTorch's GridSampler.h arithmetic.

enum class Mode { bilinear, nearest, bicubic };
enum class Pad { zeros, border, reflection };

struct GridAttrs {
  Mode mode;
  Pad pad;
  bool align;
  explicit GridAttrs(const Attrs& a)
      : mode(a.s("mode") == "nearest"   ? Mode::nearest
             : a.s("mode") == "bicubic" ? Mode::bicubic
                                        : Mode::bilinear),
        pad(a.s("padding_mode") == "border"       ? Pad::border
            : a.s("padding_mode") == "reflection" ? Pad::reflection
                                                  : Pad::zeros),
        align(a.b("align_corners")) {}
  int taps() const { return mode == Mode::nearest ? 1 : mode == Mode::bilinear ? 4 : 16; }
};

double unnormalize(double g, int64_t size, bool align) {
  return align ? (g + 1) / 2 * static_cast<double>(size - 1) : ((g + 1) * static_cast<double>(size) - 1) / 2;
}
double d_unnormalize(int64_t size, bool align) {
  return align ? static_cast<double>(size - 1) / 2 : static_cast<double>(size) / 2;
}

double pad_coord(double c, int64_t size, Pad pm, bool align, double* dc) {
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
  if (pm == Pad::border) {
    c = clip(c);
  } else if (pm == Pad::reflection) {
    const double lo2 = align ? 0 : -1, hi2 = align ? 2 * hi : 2 * static_cast<double>(size) - 1;
    if (lo2 == hi2) {
      c = 0;
      grad = 0;
    } else {
      const double mn = lo2 / 2, span = (hi2 - lo2) / 2;
      double v = c - mn, sgn = 1;
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

// The taps of one output point: element offset in the H x W plane (-1: outside, reads zero), weight and the weight's
// derivatives along the source x / y coordinates; *sx, *sy: d(source coordinate)/d(grid).
template <typename A>
void point_taps(double gx, double gy, int64_t H, int64_t W, const GridAttrs& a, int64_t* off, A* wt, A* dwx, A* dwy,
                double* sx, double* sy) {
  double ix = unnormalize(gx, W, a.align), iy = unnormalize(gy, H, a.align);
  const auto at = [&](int64_t y, int64_t x) { return y >= 0 && y < H && x >= 0 && x < W ? y * W + x : int64_t{-1}; };
  if (a.mode == Mode::bicubic) {
    *sx = d_unnormalize(W, a.align);
    *sy = d_unnormalize(H, a.align);
    const double x0 = std::floor(ix), y0 = std::floor(iy), tx = ix - x0, ty = iy - y0;
    constexpr double K = -0.75;
    const double cx[4] = {cubic2(tx + 1, K), cubic1(tx, K), cubic1(1 - tx, K), cubic2(2 - tx, K)};
    const double cy[4] = {cubic2(ty + 1, K), cubic1(ty, K), cubic1(1 - ty, K), cubic2(2 - ty, K)};
    const double dx[4] = {dcubic2(tx + 1, K), dcubic1(tx, K), -dcubic1(1 - tx, K), -dcubic2(2 - tx, K)};
    const double dy[4] = {dcubic2(ty + 1, K), dcubic1(ty, K), -dcubic1(1 - ty, K), -dcubic2(2 - ty, K)};
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        const double px = pad_coord(x0 - 1 + i, W, a.pad, a.align, nullptr);
        const double py = pad_coord(y0 - 1 + j, H, a.pad, a.align, nullptr);
        const int t = j * 4 + i;
        off[t] = at(static_cast<int64_t>(py), static_cast<int64_t>(px));
        wt[t] = static_cast<A>(cx[i] * cy[j]);
        dwx[t] = static_cast<A>(dx[i] * cy[j]);
        dwy[t] = static_cast<A>(cx[i] * dy[j]);
      }
    return;
  }
  double gxs = 0, gys = 0;
  ix = pad_coord(ix, W, a.pad, a.align, &gxs);
  iy = pad_coord(iy, H, a.pad, a.align, &gys);
  *sx = gxs * d_unnormalize(W, a.align);
  *sy = gys * d_unnormalize(H, a.align);
  if (a.mode == Mode::nearest) {
    off[0] = at(static_cast<int64_t>(std::nearbyint(iy)), static_cast<int64_t>(std::nearbyint(ix)));
    wt[0] = 1;
    dwx[0] = dwy[0] = 0;
    return;
  }
  const double x0 = std::floor(ix), y0 = std::floor(iy), tx = ix - x0, ty = iy - y0;
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 2; ++i) {
      const double wx = i ? tx : 1 - tx, wy = j ? ty : 1 - ty;
      const int t = j * 2 + i;
      off[t] = at(static_cast<int64_t>(y0) + j, static_cast<int64_t>(x0) + i);
      wt[t] = static_cast<A>(wx * wy);
      dwx[t] = static_cast<A>((i ? 1.0 : -1.0) * wy);
      dwy[t] = static_cast<A>(wx * (j ? 1.0 : -1.0));
    }
}

// Taps of every output point of image n: [Ho * Wo, taps] each, plus the per-point coordinate derivatives.
template <typename T>
struct ImageTaps {
  using A = Acc<T>;
  std::vector<int64_t> off;
  std::vector<A> wt, dwx, dwy;
  std::vector<double> sx, sy;
};

template <typename T>
void taps_for_rows(const T* grid, int64_t n, int64_t h0, int64_t h1, int64_t Ho, int64_t Wo, int64_t H, int64_t W,
                   const GridAttrs& a, ImageTaps<T>& t) {
  const int nt = a.taps();
  for (int64_t p = h0 * Wo; p < h1 * Wo; ++p) {
    const T* g = grid + (n * Ho * Wo + p) * 2;
    const size_t b = static_cast<size_t>(p) * static_cast<size_t>(nt);
    point_taps<Acc<T>>(static_cast<double>(g[0]), static_cast<double>(g[1]), H, W, a, &t.off[b], &t.wt[b], &t.dwx[b],
                       &t.dwy[b], &t.sx[static_cast<size_t>(p)], &t.sy[static_cast<size_t>(p)]);
  }
}

template <typename T>
ImageTaps<T> alloc_taps(int64_t points, int nt) {
  ImageTaps<T> t;
  const size_t n = static_cast<size_t>(points) * static_cast<size_t>(nt);
  t.off.resize(n);
  t.wt.resize(n);
  t.dwx.resize(n);
  t.dwy.resize(n);
  t.sx.resize(static_cast<size_t>(points));
  t.sy.resize(static_cast<size_t>(points));
  return t;
}

// Forward taps of one output point: the same offsets and weights as point_taps (the same double arithmetic, so the
// same bits), without the derivatives the gradient needs.
template <typename A>
void point_taps_fwd(double gx, double gy, int64_t H, int64_t W, const GridAttrs& a, int64_t* off, A* wt) {
  if (a.mode == Mode::bilinear) {
    const double ix = pad_coord(unnormalize(gx, W, a.align), W, a.pad, a.align, nullptr);
    const double iy = pad_coord(unnormalize(gy, H, a.align), H, a.pad, a.align, nullptr);
    const double x0 = std::floor(ix), y0 = std::floor(iy), tx = ix - x0, ty = iy - y0;
    const int64_t xi = static_cast<int64_t>(x0), yi = static_cast<int64_t>(y0);
    const bool x0in = xi >= 0 && xi < W, x1in = xi + 1 >= 0 && xi + 1 < W;
    const bool y0in = yi >= 0 && yi < H, y1in = yi + 1 >= 0 && yi + 1 < H;
    off[0] = y0in && x0in ? yi * W + xi : -1;
    off[1] = y0in && x1in ? yi * W + xi + 1 : -1;
    off[2] = y1in && x0in ? (yi + 1) * W + xi : -1;
    off[3] = y1in && x1in ? (yi + 1) * W + xi + 1 : -1;
    wt[0] = static_cast<A>((1 - tx) * (1 - ty));
    wt[1] = static_cast<A>(tx * (1 - ty));
    wt[2] = static_cast<A>((1 - tx) * ty);
    wt[3] = static_cast<A>(tx * ty);
    return;
  }
  A dwx[16], dwy[16];
  double sx = 0, sy = 0;
  point_taps<A>(gx, gy, H, W, a, off, wt, dwx, dwy, &sx, &sy);
}

// Blocks of kFwdPoints output points of one image: their taps on the stack once, then every channel. Small grids
// over many images (RAFT's correlation lookup: 7 x 7 points on each of H*W one-channel images) are cut into
// tasks of enough points to outweigh a task's cost, with no allocation per task.
constexpr int64_t kFwdPoints = 64;

template <typename T>
void grid_sample_typed(KernelContext& k) {
  using A = Acc<T>;
  const Tensor &x = k.in(0), &grid = k.in(1);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t Ho = grid.shape()[1], Wo = grid.shape()[2], P = Ho * Wo;
  const GridAttrs a(k.attrs);
  const int nt = a.taps();
  const T* xp = x.data<T>();
  const T* gp = grid.data<T>();
  T* yp = k.out().data<T>();
  const int64_t blocks = (P + kFwdPoints - 1) / kFwdPoints;
  parallel_for(N * blocks, [&](int64_t task) {
    const int64_t n = task / blocks, p0 = task % blocks * kFwdPoints, np = std::min(kFwdPoints, P - p0);
    int64_t off[kFwdPoints * 16];
    A wt[kFwdPoints * 16];
    for (int64_t i = 0; i < np; ++i) {
      const T* g = gp + (n * P + p0 + i) * 2;
      point_taps_fwd<A>(static_cast<double>(g[0]), static_cast<double>(g[1]), H, W, a, &off[i * nt], &wt[i * nt]);
    }
    for (int64_t c = 0; c < C; ++c) {
      const T* plane = xp + (n * C + c) * H * W;
      T* yr = yp + (n * C + c) * P + p0;
      for (int64_t i = 0; i < np; ++i) {
        const int64_t* o = &off[i * nt];
        const A* w = &wt[i * nt];
        A acc = 0;
        for (int q = 0; q < nt; ++q)
          if (o[q] >= 0) acc += w[q] * ld(plane, o[q]);
        yr[i] = static_cast<T>(acc);
      }
    }
  });
}

// dx: per image, the taps of all points, then one task per channel plane adding every point's taps in point order;
// dgrid: one task per output row, summing over channels then taps.
template <typename T>
void grid_sample_grad_typed(KernelContext& k) {
  using A = Acc<T>;
  const Tensor &x = k.in(0), &grid = k.in(1), &dy = k.in(2);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t Ho = grid.shape()[1], Wo = grid.shape()[2], P = Ho * Wo;
  const GridAttrs a(k.attrs);
  const int nt = a.taps();
  const T* xp = x.data<T>();
  const T* gp = grid.data<T>();
  const T* dyp = dy.data<T>();
  T* dxp = k.out(0).data<T>();
  T* dgp = k.out(1).data<T>();
  std::vector<A> acc(static_cast<size_t>(C * H * W));
  for (int64_t n = 0; n < N; ++n) {
    ImageTaps<T> t = alloc_taps<T>(P, nt);
    parallel_for(Ho, [&](int64_t ho) { taps_for_rows<T>(gp, n, ho, ho + 1, Ho, Wo, H, W, a, t); });
    parallel_for(C, [&](int64_t c) {
      A* d = acc.data() + c * H * W;
      std::fill(d, d + H * W, A(0));
      const T* g = dyp + (n * C + c) * P;
      for (int64_t p = 0; p < P; ++p) {
        const A go = ld(g, p);
        const size_t b = static_cast<size_t>(p * nt);
        for (int q = 0; q < nt; ++q)
          if (t.off[b + q] >= 0) d[t.off[b + q]] += t.wt[b + q] * go;
      }
      T* out = dxp + (n * C + c) * H * W;
      for (int64_t i = 0; i < H * W; ++i) out[i] = static_cast<T>(d[i]);
    });
    parallel_for(Ho, [&](int64_t ho) {
      std::vector<A> gx(static_cast<size_t>(Wo), A(0)), gy(static_cast<size_t>(Wo), A(0));
      for (int64_t c = 0; c < C; ++c) {
        const T* plane = xp + (n * C + c) * H * W;
        const T* g = dyp + (n * C + c) * P + ho * Wo;
        for (int64_t wo = 0; wo < Wo; ++wo) {
          const A go = ld(g, wo);
          const size_t b = static_cast<size_t>((ho * Wo + wo) * nt);
          A sx = 0, sy = 0;
          for (int q = 0; q < nt; ++q)
            if (t.off[b + q] >= 0) {
              const A v = ld(plane, t.off[b + q]);
              sx += t.dwx[b + q] * v;
              sy += t.dwy[b + q] * v;
            }
          gx[static_cast<size_t>(wo)] += sx * go;
          gy[static_cast<size_t>(wo)] += sy * go;
        }
      }
      for (int64_t wo = 0; wo < Wo; ++wo) {
        const int64_t p = ho * Wo + wo;
        T* o = dgp + (n * P + p) * 2;
        o[0] = static_cast<T>(static_cast<double>(gx[static_cast<size_t>(wo)]) * t.sx[static_cast<size_t>(p)]);
        o[1] = static_cast<T>(static_cast<double>(gy[static_cast<size_t>(wo)]) * t.sy[static_cast<size_t>(p)]);
      }
    });
  }
}

// ---- roi_align: ONNX's reference / ONNX Runtime arithmetic.

template <typename A>
struct Sample {
  int64_t pos[4];
  A w[4];
};

struct RoiAttrs {
  int64_t oh, ow, ratio;
  double scale;
  bool half, is_max;
  explicit RoiAttrs(const Attrs& a)
      : oh(a.i("output_height")),
        ow(a.i("output_width")),
        ratio(a.i("sampling_ratio")),
        scale(a.f("spatial_scale")),
        half(a.s("coordinate_transformation_mode") == "half_pixel"),
        is_max(a.s("mode") == "max") {}
};

// The samples of every bin of roi r, bin-major ([oh * ow][gh * gw]); *per_bin: samples per bin; *count: avg's divisor.
template <typename T>
std::vector<Sample<Acc<T>>> roi_samples(const T* roi, int64_t H, int64_t W, const RoiAttrs& a, int64_t* per_bin,
                                        double* count) {
  using A = Acc<T>;
  const double off = a.half ? 0.5 : 0.0;
  const double x1 = static_cast<double>(roi[0]) * a.scale - off, y1 = static_cast<double>(roi[1]) * a.scale - off;
  const double x2 = static_cast<double>(roi[2]) * a.scale - off, y2 = static_cast<double>(roi[3]) * a.scale - off;
  double rw = x2 - x1, rh = y2 - y1;
  if (!a.half) {
    rw = std::max(rw, 1.0);
    rh = std::max(rh, 1.0);
  }
  const double bh = rh / static_cast<double>(a.oh), bw = rw / static_cast<double>(a.ow);
  const int64_t gh = a.ratio > 0 ? a.ratio : static_cast<int64_t>(std::ceil(rh / static_cast<double>(a.oh)));
  const int64_t gw = a.ratio > 0 ? a.ratio : static_cast<int64_t>(std::ceil(rw / static_cast<double>(a.ow)));
  *count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
  *per_bin = std::max<int64_t>(gh, 0) * std::max<int64_t>(gw, 0);
  std::vector<Sample<A>> out;
  out.reserve(static_cast<size_t>(a.oh * a.ow * *per_bin));
  for (int64_t ph = 0; ph < a.oh; ++ph)
    for (int64_t pw = 0; pw < a.ow; ++pw)
      for (int64_t iy = 0; iy < gh; ++iy)
        for (int64_t ix = 0; ix < gw; ++ix) {
          double y = y1 + static_cast<double>(ph) * bh + (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh);
          double x = x1 + static_cast<double>(pw) * bw + (static_cast<double>(ix) + 0.5) * bw / static_cast<double>(gw);
          Sample<A> s{{0, 0, 0, 0}, {0, 0, 0, 0}};
          if (!(y < -1.0 || y > static_cast<double>(H) || x < -1.0 || x > static_cast<double>(W))) {
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
            s = {{yl * W + xl, yl * W + xh, yh * W + xl, yh * W + xh},
                 {static_cast<A>(hy * hx), static_cast<A>(hy * lx), static_cast<A>(ly * hx), static_cast<A>(ly * lx)}};
          }
          out.push_back(s);
        }
  return out;
}

// Batch index of roi r, checked.
int64_t roi_batch(const Tensor& bi, int64_t r, int64_t n) {
  const int64_t b = bi.dtype() == DType::i64 ? bi.data<int64_t>()[r] : bi.data<int32_t>()[r];
  SPORE_CHECK(b >= 0 && b < n, ErrorCode::invalid_argument,
              "[roi_align] batch index {} of roi {} is out of range for {} images", b, r, n);
  return b;
}

constexpr int64_t kRoiChannels = 16;  // channels per task

template <typename T>
void roi_align_typed(KernelContext& k) {
  using A = Acc<T>;
  const Tensor &x = k.in(0), &rois = k.in(1), &bi = k.in(2);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3], R = rois.shape()[0];
  const RoiAttrs a(k.attrs);
  std::vector<int64_t> batch(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) batch[static_cast<size_t>(r)] = roi_batch(bi, r, N);
  const T* xp = x.data<T>();
  const T* rp = rois.data<T>();
  T* yp = k.out().data<T>();
  const int64_t cchunks = (C + kRoiChannels - 1) / kRoiChannels, bins = a.oh * a.ow;
  parallel_for(R * cchunks, [&](int64_t task) {
    const int64_t r = task / cchunks, c0 = (task % cchunks) * kRoiChannels, c1 = std::min(C, c0 + kRoiChannels);
    int64_t per_bin = 0;
    double count = 1;
    const auto samples = roi_samples<T>(rp + r * 4, H, W, a, &per_bin, &count);
    for (int64_t c = c0; c < c1; ++c) {
      const T* plane = xp + (batch[static_cast<size_t>(r)] * C + c) * H * W;
      T* yr = yp + (r * C + c) * bins;
      for (int64_t bin = 0; bin < bins; ++bin) {
        const Sample<A>* s = samples.data() + bin * per_bin;
        A acc = 0;
        if (a.is_max) {
          bool first = true;
          for (int64_t i = 0; i < per_bin; ++i)
            for (int q = 0; q < 4; ++q) {
              const A v = s[i].w[q] * ld(plane, s[i].pos[q]);
              acc = first ? v : std::max(acc, v);
              first = false;
            }
          yr[bin] = static_cast<T>(acc);
        } else {
          for (int64_t i = 0; i < per_bin; ++i)
            for (int q = 0; q < 4; ++q) acc += s[i].w[q] * ld(plane, s[i].pos[q]);
          yr[bin] = static_cast<T>(static_cast<double>(acc) / count);
        }
      }
    }
  });
}

// One task per channel: it owns dx[:, c] of every image and adds the rois in order.
template <typename T>
void roi_align_grad_typed(KernelContext& k) {
  using A = Acc<T>;
  const Tensor &x = k.in(0), &rois = k.in(1), &bi = k.in(2), &dy = k.in(3);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3], R = rois.shape()[0];
  const RoiAttrs a(k.attrs);
  const int64_t bins = a.oh * a.ow;
  std::vector<int64_t> batch(static_cast<size_t>(R)), per_bin(static_cast<size_t>(R));
  std::vector<double> count(static_cast<size_t>(R));
  std::vector<std::vector<Sample<A>>> samples(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) batch[static_cast<size_t>(r)] = roi_batch(bi, r, N);
  const T* rp = rois.data<T>();
  parallel_for(R, [&](int64_t r) {
    const size_t i = static_cast<size_t>(r);
    samples[i] = roi_samples<T>(rp + r * 4, H, W, a, &per_bin[i], &count[i]);
  });
  const T* xp = x.data<T>();
  const T* gp = dy.data<T>();
  T* dxp = k.out().data<T>();
  parallel_for(C, [&](int64_t c) {
    std::vector<A> acc(static_cast<size_t>(N * H * W), A(0));
    for (int64_t r = 0; r < R; ++r) {
      const size_t ri = static_cast<size_t>(r);
      const int64_t b = batch[ri];
      A* d = acc.data() + b * H * W;
      const T* plane = xp + (b * C + c) * H * W;
      const T* g = gp + (r * C + c) * bins;
      for (int64_t bin = 0; bin < bins; ++bin) {
        const Sample<A>* s = samples[ri].data() + bin * per_bin[ri];
        const A go = ld(g, bin);
        if (a.is_max) {
          A best = 0, wt = 0;
          int64_t at = -1;
          for (int64_t i = 0; i < per_bin[ri]; ++i)
            for (int q = 0; q < 4; ++q) {
              const A v = s[i].w[q] * ld(plane, s[i].pos[q]);
              if (at < 0 || v > best) {
                best = v;
                at = s[i].pos[q];
                wt = s[i].w[q];
              }
            }
          if (at >= 0) d[at] += wt * go;
        } else {
          const A share = static_cast<A>(static_cast<double>(go) / count[ri]);
          for (int64_t i = 0; i < per_bin[ri]; ++i)
            for (int q = 0; q < 4; ++q) d[s[i].pos[q]] += s[i].w[q] * share;
        }
      }
    }
    for (int64_t n = 0; n < N; ++n) {
      T* out = dxp + (n * C + c) * H * W;
      const A* src = acc.data() + n * H * W;
      for (int64_t i = 0; i < H * W; ++i) out[i] = static_cast<T>(src[i]);
    }
  });
}

template <template <typename> class F>
void by_float(KernelContext& k, DType t) {
  switch (t) {
    case DType::f64: return F<double>::run(k);
    case DType::f32: return F<float>::run(k);
    case DType::f16: return F<f16>::run(k);
    case DType::bf16: return F<bf16>::run(k);
    default: SPORE_FAIL(ErrorCode::dtype_mismatch, "[{}] no CPU kernel for {}", op_name(k.op), dtype_name(t));
  }
}
template <typename T>
struct GridSampleK {
  static void run(KernelContext& k) { grid_sample_typed<T>(k); }
};
template <typename T>
struct GridSampleGradK {
  static void run(KernelContext& k) { grid_sample_grad_typed<T>(k); }
};
template <typename T>
struct RoiAlignK {
  static void run(KernelContext& k) { roi_align_typed<T>(k); }
};
template <typename T>
struct RoiAlignGradK {
  static void run(KernelContext& k) { roi_align_grad_typed<T>(k); }
};

void grid_sample(KernelContext& k) { by_float<GridSampleK>(k, k.in(0).dtype()); }
void grid_sample_grad(KernelContext& k) { by_float<GridSampleGradK>(k, k.in(0).dtype()); }
void roi_align(KernelContext& k) { by_float<RoiAlignK>(k, k.in(0).dtype()); }
void roi_align_grad(KernelContext& k) { by_float<RoiAlignGradK>(k, k.in(0).dtype()); }

}  // namespace

void register_sample(KernelRegistry& r) {
  r.add(Backend::cpu, "grid_sample"_op, dtypes::floating, grid_sample, "blocks");
  r.add(Backend::cpu, "grid_sample_grad"_op, dtypes::floating, grid_sample_grad, "planes");
  r.add(Backend::cpu, "roi_align"_op, dtypes::floating, roi_align, "rois");
  r.add(Backend::cpu, "roi_align_grad"_op, dtypes::floating, roi_align_grad, "planes");
}

}  // namespace spore::cpu
