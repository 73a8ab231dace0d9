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

}  // namespace

void register_conv(KernelRegistry& r) {
  r.add(Backend::reference, "conv2d"_op, dtypes::floating, conv2d_kernel);
  r.add(Backend::reference, "conv_transpose2d"_op, dtypes::floating, conv_transpose2d_kernel);
  r.add(Backend::reference, "max_pool2d"_op, dtypes::floating, pool_kernel<true>);
  r.add(Backend::reference, "avg_pool2d"_op, dtypes::floating, pool_kernel<false>);
  r.add(Backend::reference, "global_avg_pool"_op, dtypes::floating, global_avg_pool_kernel);
  r.add(Backend::reference, "conv2d_weight_grad"_op, dtypes::floating, conv2d_weight_grad_kernel);
  r.add(Backend::reference, "max_pool2d_grad"_op, dtypes::floating, max_pool2d_grad_kernel);
}

}  // namespace spore::reference
