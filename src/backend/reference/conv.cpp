// Reference kernels of the conv family: direct loops in double over NCHW.
#include <cmath>
#include <limits>

#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {
namespace {

// Begin/end padding of one spatial axis (i = 0 for H, 1 for W) as shape inference resolved it.
struct AxisPad {
  int64_t begin, end;
};
AxisPad axis_pad(const Attrs& a, int i, int64_t in, int64_t eff, int64_t stride) {
  const std::string& mode = a.s("pad_mode");
  if (mode == "valid") return {0, 0};
  if (mode == "same") {  // SAME_UPPER: the odd pad goes at the end
    const int64_t out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride + eff - in);
    return {total / 2, total - total / 2};
  }
  const auto& p = a.ints("padding");
  return {p[i], p[2 + i]};
}

void conv2d_kernel(KernelContext& k) {
  const Shape& xs = k.in(0).shape();
  const Shape& ws = k.in(1).shape();
  const Shape& ys = k.out(0).shape();
  const auto& stride = k.attrs.ints("stride");
  const auto& dil = k.attrs.ints("dilation");
  const int64_t groups = k.attrs.i("groups");
  const int64_t n = xs[0], c = xs[1], h = xs[2], w = xs[3];
  const int64_t o = ws[0], cg = ws[1], kh = ws[2], kw = ws[3];
  const int64_t oh = ys[2], ow = ys[3], og = o / groups;
  const AxisPad ph = axis_pad(k.attrs, 0, h, (kh - 1) * dil[0] + 1, stride[0]);
  const AxisPad pw = axis_pad(k.attrs, 1, w, (kw - 1) * dil[1] + 1, stride[1]);
  const auto x = k.in(0).to_doubles(), wt = k.in(1).to_doubles();
  const auto bias = k.num_inputs() > 2 ? k.in(2).to_doubles() : std::vector<double>(o, 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double s = bias[oc];
          const int64_t g = oc / og;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iy = y * stride[0] - ph.begin + i * dil[0];
                const int64_t ix = z * stride[1] - pw.begin + j * dil[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                s += x[((b * c + g * cg + ic) * h + iy) * w + ix] * wt[((oc * cg + ic) * kh + i) * kw + j];
              }
          put(k.out(0), ((b * o + oc) * oh + y) * ow + z, s);
        }
}

// Gather form of the transposed conv: out[y] takes x[iy] wherever y + pad - i*dil == iy*stride.
void conv_transpose2d_kernel(KernelContext& k) {
  const Shape& xs = k.in(0).shape();
  const Shape& ws = k.in(1).shape();
  const Shape& ys = k.out(0).shape();
  const auto& stride = k.attrs.ints("stride");
  const auto& dil = k.attrs.ints("dilation");
  const auto& pad = k.attrs.ints("padding");
  const int64_t groups = k.attrs.i("groups");
  const int64_t n = xs[0], c = xs[1], h = xs[2], w = xs[3];
  const int64_t og = ws[1], kh = ws[2], kw = ws[3], cg = c / groups;
  const int64_t o = ys[1], oh = ys[2], ow = ys[3];
  const auto x = k.in(0).to_doubles(), wt = k.in(1).to_doubles();
  const auto bias = k.num_inputs() > 2 ? k.in(2).to_doubles() : std::vector<double>(o, 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double s = bias[oc];
          const int64_t g = oc / og, ocg = oc % og;
          for (int64_t ic = g * cg; ic < (g + 1) * cg; ++ic)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ty = y + pad[0] - i * dil[0], tx = z + pad[1] - j * dil[1];
                if (ty < 0 || tx < 0 || ty % stride[0] || tx % stride[1]) continue;
                const int64_t iy = ty / stride[0], ix = tx / stride[1];
                if (iy >= h || ix >= w) continue;
                s += x[((b * c + ic) * h + iy) * w + ix] * wt[((ic * og + ocg) * kh + i) * kw + j];
              }
          put(k.out(0), ((b * o + oc) * oh + y) * ow + z, s);
        }
}

template <bool is_max>
void pool_kernel(KernelContext& k) {
  const Shape& xs = k.in(0).shape();
  const Shape& ys = k.out(0).shape();
  const auto& kernel = k.attrs.ints("kernel");
  std::vector<int64_t> stride = k.attrs.ints("stride");
  if (stride.empty()) stride = kernel;
  const std::vector<int64_t> dil = is_max ? k.attrs.ints("dilation") : std::vector<int64_t>{1, 1};
  const bool include_pad = !is_max && k.attrs.b("count_include_pad");
  const int64_t h = xs[2], w = xs[3], oh = ys[2], ow = ys[3];
  const AxisPad ph = axis_pad(k.attrs, 0, h, (kernel[0] - 1) * dil[0] + 1, stride[0]);
  const AxisPad pw = axis_pad(k.attrs, 1, w, (kernel[1] - 1) * dil[1] + 1, stride[1]);
  const auto x = k.in(0).to_doubles();
  // layout nchw8c: [N, C/8, H, W, 8]; plane p is channel p % C of image p / C either way.
  const bool blocked = k.attrs.has("layout") && k.attrs.s("layout") == "nchw8c";
  const int64_t planes = xs[0] * xs[1] * (blocked ? 8 : 1);
  const auto at = [&](int64_t p, int64_t hh, int64_t ww, int64_t y, int64_t z) {
    return blocked ? ((p / 8 * hh + y) * ww + z) * 8 + p % 8 : (p * hh + y) * ww + z;
  };
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t z = 0; z < ow; ++z) {
        const int64_t y0 = y * stride[0] - ph.begin, x0 = z * stride[1] - pw.begin;
        double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t count = 0;
        for (int64_t i = 0; i < kernel[0]; ++i)
          for (int64_t j = 0; j < kernel[1]; ++j) {
            const int64_t iy = y0 + i * dil[0], ix = x0 + j * dil[1];
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const double v = x[at(p, h, w, iy, ix)];
            acc = is_max ? (std::isnan(v) || v > acc ? v : acc) : acc + v;
            ++count;
          }
        if (!is_max) {
          // count_include_pad counts the padded input, not the ceil_mode overhang past it (PyTorch).
          const int64_t dh = std::min(y0 + kernel[0], h + ph.end) - y0, dw = std::min(x0 + kernel[1], w + pw.end) - x0;
          acc /= static_cast<double>(include_pad ? dh * dw : count);
        }
        put(k.out(0), at(p, oh, ow, y, z), acc);
      }
}

// dW[o,c,i,j] = sum over (n, y, x) of dy[n,o,y,x] * x[n, g*cg + c, y*s - pad + i*d, x*s - pad + j*d].
void conv2d_weight_grad_kernel(KernelContext& k) {
  const Shape& xs = k.in(0).shape();
  const Shape& ds = k.in(1).shape();
  const Shape& ws = k.out(0).shape();
  const auto& stride = k.attrs.ints("stride");
  const auto& dil = k.attrs.ints("dilation");
  const auto& pad = k.attrs.ints("padding");
  const int64_t groups = k.attrs.i("groups");
  const int64_t n = xs[0], c = xs[1], h = xs[2], w = xs[3];
  const int64_t o = ds[1], oh = ds[2], ow = ds[3];
  const int64_t cg = ws[1], kh = ws[2], kw = ws[3], og = o / groups;
  const auto x = k.in(0).to_doubles(), dy = k.in(1).to_doubles();
  for (int64_t oc = 0; oc < o; ++oc)
    for (int64_t ic = 0; ic < cg; ++ic)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) {
          double s = 0;
          const int64_t xc = (oc / og) * cg + ic;
          for (int64_t b = 0; b < n; ++b)
            for (int64_t y = 0; y < oh; ++y)
              for (int64_t z = 0; z < ow; ++z) {
                const int64_t iy = y * stride[0] - pad[0] + i * dil[0], ix = z * stride[1] - pad[1] + j * dil[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                s += dy[((b * o + oc) * oh + y) * ow + z] * x[((b * c + xc) * h + iy) * w + ix];
              }
          put(k.out(0), ((oc * cg + ic) * kh + i) * kw + j, s);
        }
}

// dx: every dy element is added to the input its window selected, found by the forward's own scan
// (NaN wins; otherwise a strictly larger value; so ties keep the first in row-major window order).
void max_pool2d_grad_kernel(KernelContext& k) {
  const Shape& xs = k.in(0).shape();
  const Shape& ds = k.in(1).shape();
  const auto& kernel = k.attrs.ints("kernel");
  std::vector<int64_t> stride = k.attrs.ints("stride");
  if (stride.empty()) stride = kernel;
  const auto& dil = k.attrs.ints("dilation");
  const int64_t h = xs[2], w = xs[3], oh = ds[2], ow = ds[3];
  const AxisPad ph = axis_pad(k.attrs, 0, h, (kernel[0] - 1) * dil[0] + 1, stride[0]);
  const AxisPad pw = axis_pad(k.attrs, 1, w, (kernel[1] - 1) * dil[1] + 1, stride[1]);
  const auto x = k.in(0).to_doubles(), dy = k.in(1).to_doubles();
  std::vector<double> dx(x.size(), 0.0);
  const int64_t planes = xs[0] * xs[1];
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t z = 0; z < ow; ++z) {
        const int64_t y0 = y * stride[0] - ph.begin, x0 = z * stride[1] - pw.begin;
        double best = 0;
        int64_t arg = -1;
        for (int64_t i = 0; i < kernel[0]; ++i)
          for (int64_t j = 0; j < kernel[1]; ++j) {
            const int64_t iy = y0 + i * dil[0], ix = x0 + j * dil[1];
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const int64_t at = (p * h + iy) * w + ix;
            if (arg < 0 || std::isnan(x[at]) || x[at] > best) best = x[at], arg = at;
          }
        if (arg >= 0) dx[arg] += dy[(p * oh + y) * ow + z];
      }
  for (size_t i = 0; i < dx.size(); ++i) put(k.out(0), static_cast<int64_t>(i), dx[i]);
}

void global_avg_pool_kernel(KernelContext& k) {
  const int64_t planes = k.in(0).dim(0) * k.in(0).dim(1);
  const int64_t size = planes ? k.in(0).numel() / planes : 0;
  const auto x = k.in(0).to_doubles();
  for (int64_t p = 0; p < planes; ++p) {
    double s = 0;
    for (int64_t i = 0; i < size; ++i) s += x[p * size + i];
    put(k.out(0), p, s / static_cast<double>(size));
  }
}

// ---- 3-D (NCDHW): the same loops with a depth axis. Pads are (front, top, left, back, bottom, right).
struct Geom3 {
  int64_t n, c, o, groups;
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3];  // sizes, window, stride, dilation, begin pads per axis
};

// Resolved begin pads of a forward conv/pool (axis_pad's rule per axis); transposed convs use padding as given.
Geom3 geom3(const Shape& xs, const Shape& ys, const int64_t* kernel, const Attrs& a, bool dilated, bool resolve) {
  Geom3 g{};
  g.n = xs[0];
  g.c = xs[1];
  g.o = ys[1];
  g.groups = a.has("groups") ? a.i("groups") : 1;
  std::vector<int64_t> stride = a.ints("stride");
  for (int i = 0; i < 3; ++i) {
    g.in[i] = xs[2 + i];
    g.out[i] = ys[2 + i];
    g.k[i] = kernel[i];
    g.s[i] = stride.empty() ? kernel[i] : stride[i];
    g.d[i] = dilated ? a.ints("dilation")[i] : 1;
  }
  const auto& p = a.ints("padding");
  const std::string mode = a.has("pad_mode") ? a.s("pad_mode") : std::string("pad");
  for (int i = 0; i < 3; ++i) {
    g.pb[i] = p[i];
    if (!resolve || mode == "pad") continue;
    if (mode == "valid") {
      g.pb[i] = 0;
      continue;
    }
    const int64_t eff = (g.k[i] - 1) * g.d[i] + 1, out = (g.in[i] + g.s[i] - 1) / g.s[i];
    g.pb[i] = std::max<int64_t>(0, (out - 1) * g.s[i] + eff - g.in[i]) / 2;
  }
  return g;
}

const int64_t* spatial(const Shape& s) { return s.data() + 2; }

void conv3d_kernel(KernelContext& k) {
  const Shape& ws = k.in(1).shape();
  const Geom3 g = geom3(k.in(0).shape(), k.out(0).shape(), spatial(ws), k.attrs, true, true);
  const int64_t cg = ws[1], og = g.o / g.groups;
  const auto x = k.in(0).to_doubles(), wt = k.in(1).to_doubles();
  const auto bias = k.num_inputs() > 2 ? k.in(2).to_doubles() : std::vector<double>(g.o, 0.0);
  int64_t at = 0;
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oc = 0; oc < g.o; ++oc)
      for (int64_t z = 0; z < g.out[0]; ++z)
        for (int64_t y = 0; y < g.out[1]; ++y)
          for (int64_t v = 0; v < g.out[2]; ++v) {
            double s = bias[oc];
            for (int64_t ic = 0; ic < cg; ++ic) {
              const int64_t xc = (oc / og) * cg + ic;
              for (int64_t a = 0; a < g.k[0]; ++a)
                for (int64_t i = 0; i < g.k[1]; ++i)
                  for (int64_t j = 0; j < g.k[2]; ++j) {
                    const int64_t iz = z * g.s[0] - g.pb[0] + a * g.d[0], iy = y * g.s[1] - g.pb[1] + i * g.d[1],
                                  ix = v * g.s[2] - g.pb[2] + j * g.d[2];
                    if (iz < 0 || iz >= g.in[0] || iy < 0 || iy >= g.in[1] || ix < 0 || ix >= g.in[2]) continue;
                    s += x[(((b * g.c + xc) * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix] *
                         wt[(((oc * cg + ic) * g.k[0] + a) * g.k[1] + i) * g.k[2] + j];
                  }
            }
            put(k.out(0), at++, s);
          }
}

// Gather form: out[z] takes x[iz] wherever z + pad - a*dil == iz*stride.
void conv_transpose3d_kernel(KernelContext& k) {
  const Shape& ws = k.in(1).shape();
  const Geom3 g = geom3(k.in(0).shape(), k.out(0).shape(), spatial(ws), k.attrs, true, false);
  const int64_t og = ws[1], cg = g.c / g.groups;
  const auto x = k.in(0).to_doubles(), wt = k.in(1).to_doubles();
  const auto bias = k.num_inputs() > 2 ? k.in(2).to_doubles() : std::vector<double>(g.o, 0.0);
  int64_t at = 0;
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oc = 0; oc < g.o; ++oc)
      for (int64_t z = 0; z < g.out[0]; ++z)
        for (int64_t y = 0; y < g.out[1]; ++y)
          for (int64_t v = 0; v < g.out[2]; ++v) {
            double s = bias[oc];
            const int64_t grp = oc / og, ocg = oc % og;
            const int64_t o3[3] = {z, y, v};
            for (int64_t ic = grp * cg; ic < (grp + 1) * cg; ++ic)
              for (int64_t a = 0; a < g.k[0]; ++a)
                for (int64_t i = 0; i < g.k[1]; ++i)
                  for (int64_t j = 0; j < g.k[2]; ++j) {
                    const int64_t tap[3] = {a, i, j};
                    int64_t src[3];
                    bool ok = true;
                    for (int e = 0; ok && e < 3; ++e) {
                      const int64_t t = o3[e] + g.pb[e] - tap[e] * g.d[e];
                      ok = t >= 0 && t % g.s[e] == 0 && t / g.s[e] < g.in[e];
                      src[e] = ok ? t / g.s[e] : 0;
                    }
                    if (!ok) continue;
                    s += x[(((b * g.c + ic) * g.in[0] + src[0]) * g.in[1] + src[1]) * g.in[2] + src[2]] *
                         wt[(((ic * og + ocg) * g.k[0] + a) * g.k[1] + i) * g.k[2] + j];
                  }
            put(k.out(0), at++, s);
          }
}

// Visits each window of plane p's output (z, y, v) with fn(input index or -1 for a padded position).
template <typename Fn>
void for_window3(const Geom3& g, int64_t p, int64_t z, int64_t y, int64_t v, Fn&& fn) {
  for (int64_t a = 0; a < g.k[0]; ++a)
    for (int64_t i = 0; i < g.k[1]; ++i)
      for (int64_t j = 0; j < g.k[2]; ++j) {
        const int64_t iz = z * g.s[0] - g.pb[0] + a * g.d[0], iy = y * g.s[1] - g.pb[1] + i * g.d[1],
                      ix = v * g.s[2] - g.pb[2] + j * g.d[2];
        if (iz < 0 || iz >= g.in[0] || iy < 0 || iy >= g.in[1] || ix < 0 || ix >= g.in[2]) continue;
        fn(((p * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix);
      }
}

template <bool is_max>
void pool3d_kernel(KernelContext& k) {
  const Geom3 g = geom3(k.in(0).shape(), k.out(0).shape(), k.attrs.ints("kernel").data(), k.attrs, is_max, true);
  const bool include_pad = !is_max && k.attrs.b("count_include_pad");
  const auto x = k.in(0).to_doubles();
  // count_include_pad's divisor: the window clipped to the padded input (not the ceil_mode overhang), per axis.
  std::vector<int64_t> pe(3);
  for (int i = 0; i < 3; ++i) {
    const auto& p = k.attrs.ints("padding");
    const std::string& mode = k.attrs.s("pad_mode");
    const int64_t eff = (g.k[i] - 1) * g.d[i] + 1, out = (g.in[i] + g.s[i] - 1) / g.s[i];
    const int64_t total = std::max<int64_t>(0, (out - 1) * g.s[i] + eff - g.in[i]);
    pe[i] = mode == "valid" ? 0 : mode == "same" ? total - total / 2 : p[3 + i];
  }
  int64_t at = 0;
  for (int64_t p = 0; p < g.n * g.c; ++p)
    for (int64_t z = 0; z < g.out[0]; ++z)
      for (int64_t y = 0; y < g.out[1]; ++y)
        for (int64_t v = 0; v < g.out[2]; ++v) {
          double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
          int64_t count = 0;
          for_window3(g, p, z, y, v, [&](int64_t i) {
            acc = is_max ? (std::isnan(x[i]) || x[i] > acc ? x[i] : acc) : acc + x[i];
            ++count;
          });
          if (!is_max) {
            int64_t div = 1;
            const int64_t o3[3] = {z, y, v};
            for (int e = 0; e < 3; ++e) {
              const int64_t b0 = o3[e] * g.s[e] - g.pb[e];
              div *= std::min(b0 + g.k[e], g.in[e] + pe[e]) - b0;
            }
            acc /= static_cast<double>(include_pad ? div : count);
          }
          put(k.out(0), at++, acc);
        }
}

// dW[o,c,a,i,j] = sum over (n, z, y, v) of dy[n,o,z,y,v] * x[n, g*cg + c, z*s - pad + a*d, ...].
void conv3d_weight_grad_kernel(KernelContext& k) {
  const Shape& ws = k.out(0).shape();
  const Geom3 g = geom3(k.in(0).shape(), k.in(1).shape(), spatial(ws), k.attrs, true, false);
  const int64_t cg = ws[1], og = g.o / g.groups;
  const auto x = k.in(0).to_doubles(), dy = k.in(1).to_doubles();
  int64_t at = 0;
  for (int64_t oc = 0; oc < g.o; ++oc)
    for (int64_t ic = 0; ic < cg; ++ic)
      for (int64_t a = 0; a < g.k[0]; ++a)
        for (int64_t i = 0; i < g.k[1]; ++i)
          for (int64_t j = 0; j < g.k[2]; ++j) {
            double s = 0;
            const int64_t xc = (oc / og) * cg + ic;
            for (int64_t b = 0; b < g.n; ++b)
              for (int64_t z = 0; z < g.out[0]; ++z)
                for (int64_t y = 0; y < g.out[1]; ++y)
                  for (int64_t v = 0; v < g.out[2]; ++v) {
                    const int64_t iz = z * g.s[0] - g.pb[0] + a * g.d[0], iy = y * g.s[1] - g.pb[1] + i * g.d[1],
                                  ix = v * g.s[2] - g.pb[2] + j * g.d[2];
                    if (iz < 0 || iz >= g.in[0] || iy < 0 || iy >= g.in[1] || ix < 0 || ix >= g.in[2]) continue;
                    s += dy[(((b * g.o + oc) * g.out[0] + z) * g.out[1] + y) * g.out[2] + v] *
                         x[(((b * g.c + xc) * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix];
                  }
            put(k.out(0), at++, s);
          }
}

// dx: every dy element goes to the input its window selected by the forward's rule (NaN wins, else strictly
// larger, so ties keep the first in window order).
void max_pool3d_grad_kernel(KernelContext& k) {
  const Geom3 g = geom3(k.in(0).shape(), k.in(1).shape(), k.attrs.ints("kernel").data(), k.attrs, true, true);
  const auto x = k.in(0).to_doubles(), dy = k.in(1).to_doubles();
  std::vector<double> dx(x.size(), 0.0);
  int64_t at = 0;
  for (int64_t p = 0; p < g.n * g.c; ++p)
    for (int64_t z = 0; z < g.out[0]; ++z)
      for (int64_t y = 0; y < g.out[1]; ++y)
        for (int64_t v = 0; v < g.out[2]; ++v, ++at) {
          int64_t arg = -1;
          for_window3(g, p, z, y, v, [&](int64_t i) {
            if (arg < 0 || std::isnan(x[i]) || x[i] > x[arg]) arg = i;
          });
          if (arg >= 0) dx[arg] += dy[at];
        }
  for (size_t i = 0; i < dx.size(); ++i) put(k.out(0), static_cast<int64_t>(i), dx[i]);
}

}  // namespace

void register_conv(KernelRegistry& r) {
  r.add(Backend::reference, "conv2d"_op, dtypes::floating, conv2d_kernel);
  r.add(Backend::reference, "conv_transpose2d"_op, dtypes::floating, conv_transpose2d_kernel);
  r.add(Backend::reference, "max_pool2d"_op, dtypes::floating, pool_kernel<true>);
  r.add(Backend::reference, "avg_pool2d"_op, dtypes::floating, pool_kernel<false>);
  r.add(Backend::reference, "global_avg_pool"_op, dtypes::floating, global_avg_pool_kernel);
  r.add(Backend::reference, "conv2d_weight_grad"_op, dtypes::floating, conv2d_weight_grad_kernel);
  r.add(Backend::reference, "max_pool2d_grad"_op, dtypes::floating, max_pool2d_grad_kernel);
  r.add(Backend::reference, "conv3d"_op, dtypes::floating, conv3d_kernel);
  r.add(Backend::reference, "conv_transpose3d"_op, dtypes::floating, conv_transpose3d_kernel);
  r.add(Backend::reference, "max_pool3d"_op, dtypes::floating, pool3d_kernel<true>);
  r.add(Backend::reference, "avg_pool3d"_op, dtypes::floating, pool3d_kernel<false>);
  r.add(Backend::reference, "conv3d_weight_grad"_op, dtypes::floating, conv3d_weight_grad_kernel);
  r.add(Backend::reference, "max_pool3d_grad"_op, dtypes::floating, max_pool3d_grad_kernel);
}

}  // namespace spore::reference
