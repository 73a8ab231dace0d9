// Reference kernels of the quantization family. quantize/dequantize follow ONNX literally (x / scale and
// (q - zp) * scale in f32, round half to even); qconv2d / qlinear accumulate (x_q - x_zp) * w_q exactly in
// int64 and scale the sum in double: acc * x_scale * w_scale[o] + bias[o], rounded once to f32.
#include <algorithm>
#include <cmath>

#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {
namespace {

// Per-axis parameters: element `flat` of x uses entry (flat / inner) % channels; per-tensor: entry 0.
struct ParamIndex {
  int64_t inner = 1, channels = 1;
  int64_t operator()(int64_t flat) const { return channels == 1 ? 0 : (flat / inner) % channels; }
};
ParamIndex param_index(const Tensor& x, const Tensor& scale, int64_t axis) {
  ParamIndex p;
  if (scale.numel() <= 1 || x.rank() == 0) return p;
  if (axis < 0) axis += x.rank();
  p.channels = x.dim(static_cast<int>(axis));
  for (int i = static_cast<int>(axis) + 1; i < x.rank(); ++i) p.inner *= x.dim(i);
  return p;
}

void quantize_kernel(KernelContext& k) {
  const Tensor &x = k.in(0), &scale = k.in(1);
  const DType out = k.out(0).dtype();
  const double lo = out == DType::u8 ? 0 : -128, hi = out == DType::u8 ? 255 : 127;
  const ParamIndex pi = param_index(x, scale, k.attrs.i("axis"));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = pi(i);
    const float v = static_cast<float>(get(x, i)) / static_cast<float>(get(scale, c));
    const double zp = k.num_inputs() > 2 ? get(k.in(2), c) : 0.0;
    put(k.out(0), i, std::clamp(std::nearbyint(static_cast<double>(v)) + zp, lo, hi));  // nearbyint: half to even
  }
}

void dequantize_kernel(KernelContext& k) {
  const Tensor &q = k.in(0), &scale = k.in(1);
  const ParamIndex pi = param_index(q, scale, k.attrs.i("axis"));
  for (int64_t i = 0; i < q.numel(); ++i) {
    const int64_t c = pi(i);
    const auto d = static_cast<int64_t>(get(q, i)) - (k.num_inputs() > 2 ? static_cast<int64_t>(get(k.in(2), c)) : 0);
    put(k.out(0), i, static_cast<double>(static_cast<float>(d) * static_cast<float>(get(scale, c))));
  }
}

// Shared epilogue of the int8 compute ops: f32 output from an exact integer sum.
double scale_out(int64_t acc, double x_scale, const Tensor& w_scale, int64_t o, const Tensor* bias) {
  const double ws = get(w_scale, w_scale.numel() == 1 ? 0 : o);
  return static_cast<double>(acc) * x_scale * ws + (bias ? get(*bias, o) : 0.0);
}

struct AxisPad {
  int64_t begin, end;
};
AxisPad axis_pad(const Attrs& a, int i, int64_t in, int64_t eff, int64_t stride) {
  const std::string& mode = a.s("pad_mode");
  if (mode == "valid") return {0, 0};
  if (mode == "same") {  // SAME_UPPER, as conv2d
    const int64_t out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride + eff - in);
    return {total / 2, total - total / 2};
  }
  const auto& p = a.ints("padding");
  return {p[i], p[2 + i]};
}

// Padded positions contribute nothing: (x - x_zp) is taken as 0 there, as if padded with the zero point.
void qconv2d_kernel(KernelContext& k) {
  const Shape& xs = k.in(0).shape();
  const Shape& ws = k.in(3).shape();
  const Shape& ys = k.out(0).shape();
  const auto& stride = k.attrs.ints("stride");
  const auto& dil = k.attrs.ints("dilation");
  const int64_t groups = k.attrs.i("groups");
  const int64_t n = xs[0], c = xs[1], h = xs[2], w = xs[3];
  const int64_t o = ws[0], cg = ws[1], kh = ws[2], kw = ws[3];
  const int64_t oh = ys[2], ow = ys[3], og = o / groups;
  const AxisPad ph = axis_pad(k.attrs, 0, h, (kh - 1) * dil[0] + 1, stride[0]);
  const AxisPad pw = axis_pad(k.attrs, 1, w, (kw - 1) * dil[1] + 1, stride[1]);
  const auto x = k.in(0).to_doubles(), wt = k.in(3).to_doubles();
  const auto zp = static_cast<int64_t>(get(k.in(2), 0));
  const double x_scale = get(k.in(1), 0);
  const Tensor* bias = k.num_inputs() > 5 ? &k.in(5) : nullptr;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          int64_t s = 0;
          const int64_t g = oc / og;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iy = y * stride[0] - ph.begin + i * dil[0];
                const int64_t ix = z * stride[1] - pw.begin + j * dil[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                const auto xv = static_cast<int64_t>(x[((b * c + g * cg + ic) * h + iy) * w + ix]);
                s += (xv - zp) * static_cast<int64_t>(wt[((oc * cg + ic) * kh + i) * kw + j]);
              }
          put(k.out(0), ((b * o + oc) * oh + y) * ow + z, scale_out(s, x_scale, k.in(4), oc, bias));
        }
}

void qlinear_kernel(KernelContext& k) {
  const int64_t in = k.in(3).dim(1), out = k.in(3).dim(0);
  const int64_t rows = out ? k.out(0).numel() / out : 0;
  const auto x = k.in(0).to_doubles(), w = k.in(3).to_doubles();
  const auto zp = static_cast<int64_t>(get(k.in(2), 0));
  const double x_scale = get(k.in(1), 0);
  const Tensor* bias = k.num_inputs() > 5 ? &k.in(5) : nullptr;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      int64_t s = 0;
      for (int64_t p = 0; p < in; ++p)
        s += (static_cast<int64_t>(x[r * in + p]) - zp) * static_cast<int64_t>(w[o * in + p]);
      put(k.out(0), r * out + o, scale_out(s, x_scale, k.in(4), o, bias));
    }
}

}  // namespace

void register_quant(KernelRegistry& r) {
  r.add(Backend::reference, "quantize_linear"_op, {DType::f32}, quantize_kernel);
  r.add(Backend::reference, "dequantize_linear"_op, {DType::i8, DType::u8, DType::i32}, dequantize_kernel);
  r.add(Backend::reference, "qconv2d"_op, {DType::i8, DType::u8}, qconv2d_kernel);
  r.add(Backend::reference, "qlinear"_op, {DType::i8, DType::u8}, qlinear_kernel);
}

}  // namespace spore::reference
