// Convolution and pooling over NCHW tensors: conv2d, conv_transpose2d, max/avg pooling, global average pooling.
// Geometry (ONNX/PyTorch): effective kernel (k-1)*d+1; "same" is SAME_UPPER (the odd pad goes at the end);
// ceil_mode drops a last window that would start in the end padding (PyTorch's rule).
#include <limits>
#include <string>

#include "ops/conv3d.h"
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace {
using infer::dims_compatible;
using infer::dims_str;

std::string ints_str(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ",")); }

const std::vector<int64_t>& ints_of_len(const InferContext& c, const char* name, size_t len, int64_t min_value) {
  const auto& v = c.attrs.ints(name);
  if (!(v.size() == len)) [[unlikely]]
    c.fail(ErrorCode::invalid_argument,
           fmt::format("attribute '{}' must have {} values, got {}", name, len, ints_str(v)));
  for (int64_t x : v)
    if (!(x >= min_value)) [[unlikely]]
      c.fail(ErrorCode::invalid_argument,
             fmt::format("attribute '{}' values must be >= {}, got {}", name, min_value, ints_str(v)));
  return v;
}

const std::string& pad_mode_of(const InferContext& c) { return c.attrs.s("pad_mode"); }  // checked by normalize

// Output size of one spatial axis of a sliding window (conv or pool).
Dim window_out(const InferContext& c, const char* axis, const Dim& in, int64_t k, int64_t s, int64_t d,
               int64_t pad_begin, int64_t pad_end, const std::string& mode, bool ceil_mode, bool pool) {
  const int64_t eff = (k - 1) * d + 1;
  if (!in.is_static()) {  // symbolic: a name that records the window so different windows give different dims
    return Dim::symbol(fmt::format("{}_k{}s{}p{}{}", in.sym, eff, s, mode == "pad" ? pad_begin + pad_end : -1,
                                   mode == "same" ? "same"
                                   : ceil_mode    ? "ceil"
                                                  : ""));
  }
  const int64_t n = in.size;
  if (mode == "valid") pad_begin = pad_end = 0;
  if (mode == "same") {
    const int64_t out = (n + s - 1) / s;
    const int64_t total = std::max<int64_t>(0, (out - 1) * s + eff - n);
    pad_begin = total / 2;
    pad_end = total - pad_begin;
  }
  if (pool && mode == "pad") {
    c.check(pad_begin < eff && pad_end < eff, ErrorCode::invalid_argument,
            "{} padding ({}, {}) must be smaller than the effective kernel size {}", axis, pad_begin,
                        pad_end, eff);
  }
  const int64_t padded = n + pad_begin + pad_end;
  c.check(padded >= eff, ErrorCode::shape_mismatch,
          "{}: effective kernel size {} is larger than the padded input size {}", axis, eff, padded);
  int64_t out = ceil_mode ? (padded - eff + s - 1) / s + 1 : (padded - eff) / s + 1;
  if (ceil_mode && (out - 1) * s >= n + pad_begin) --out;  // last window would start in the end padding
  return Dim(out);
}

void check_rank(const InferContext& c, int input, const char* name, size_t rank, const char* layout) {
  const auto& d = c.in(input).dims;
  if (!(d.size() == rank)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("{} must be {} (rank {}), got {}", name, layout, rank, dims_str(d)));
}

std::vector<TensorType> infer_conv2d(const InferContext& c) {
  const DType t = infer::common_dtype(c);
  check_rank(c, 0, "x", 4, "[N,C,H,W]");
  check_rank(c, 1, "w", 4, "[O,C/groups,kH,kW]");
  const auto& x = c.in(0).dims;
  const auto& w = c.in(1).dims;
  const auto& stride = ints_of_len(c, "stride", 2, 1);
  const auto& padding = ints_of_len(c, "padding", 4, 0);
  const auto& dilation = ints_of_len(c, "dilation", 2, 1);
  const int64_t g = c.attrs.i("groups");
  const std::string& mode = pad_mode_of(c);
  c.check(g >= 1, ErrorCode::invalid_argument, "groups must be >= 1, got {}", g);
  for (int i = 0; i < 4; ++i)
    if (!(w[i].is_static())) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("w dims must be static, got {}", dims_str(w)));
  if (x[1].is_static()) {
    c.check(x[1].size % g == 0, ErrorCode::shape_mismatch,
            "input channels {} are not divisible by groups={}", x[1].size, g);
    if (!(w[1].size == x[1].size / g)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("w {} expects {} input channels per group, x {} with groups={} has {}", dims_str(w), w[1].size,
                         dims_str(x), g, x[1].size / g));
  }
  c.check(w[0].size % g == 0, ErrorCode::shape_mismatch,
          "output channels {} are not divisible by groups={}", w[0].size, g);
  if (c.num_inputs() > 2) {
    const auto& b = c.in(2).dims;
    if (!(b.size() == 1 && dims_compatible(b[0], w[0]))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("bias must be [{}], got {}", w[0].size, dims_str(b)));
  }
  const Dim h = window_out(c, "H", x[2], w[2].size, stride[0], dilation[0], padding[0], padding[2], mode, false, false);
  const Dim wd =
      window_out(c, "W", x[3], w[3].size, stride[1], dilation[1], padding[1], padding[3], mode, false, false);
  return {TensorType(t, {x[0], w[0], h, wd})};
}

std::vector<TensorType> infer_conv_transpose2d(const InferContext& c) {
  const DType t = infer::common_dtype(c);
  check_rank(c, 0, "x", 4, "[N,C,H,W]");
  check_rank(c, 1, "w", 4, "[C,O/groups,kH,kW]");
  const auto& x = c.in(0).dims;
  const auto& w = c.in(1).dims;
  const auto& stride = ints_of_len(c, "stride", 2, 1);
  const auto& padding = ints_of_len(c, "padding", 4, 0);
  const auto& out_pad = ints_of_len(c, "output_padding", 2, 0);
  const auto& dilation = ints_of_len(c, "dilation", 2, 1);
  const int64_t g = c.attrs.i("groups");
  c.check(g >= 1, ErrorCode::invalid_argument, "groups must be >= 1, got {}", g);
  for (int i = 0; i < 4; ++i)
    if (!(w[i].is_static())) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("w dims must be static, got {}", dims_str(w)));
  if (!(dims_compatible(x[1], w[0]))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("x {} has {} channels, w {} expects {}", dims_str(x), x[1].str(), dims_str(w), w[0].size));
  c.check(w[0].size % g == 0, ErrorCode::shape_mismatch,
          "input channels {} are not divisible by groups={}", w[0].size, g);
  const int64_t o = w[1].size * g;
  if (c.num_inputs() > 2) {
    const auto& b = c.in(2).dims;
    if (!(b.size() == 1 && dims_compatible(b[0], Dim(o)))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("bias must be [{}], got {}", o, dims_str(b)));
  }
  std::vector<Dim> out{x[0], Dim(o)};
  for (int i = 0; i < 2; ++i) {
    if (!(out_pad[i] < std::max(stride[i], dilation[i]))) [[unlikely]]
      c.fail(ErrorCode::invalid_argument,
             fmt::format("output_padding {} must be smaller than stride or dilation ({}, {})", ints_str(out_pad),
                         ints_str(stride), ints_str(dilation)));
    const Dim& in = x[2 + i];
    const int64_t eff = (w[2 + i].size - 1) * dilation[i] + 1;
    if (!in.is_static()) {
      out.push_back(Dim::symbol(fmt::format("{}_tk{}s{}p{}", in.sym, eff, stride[i], padding[i] + padding[2 + i])));
      continue;
    }
    const int64_t n = (in.size - 1) * stride[i] - padding[i] - padding[2 + i] + eff + out_pad[i];
    if (!(n >= 1)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("{} output size {} is not positive (padding {} too large)",
                                                    i == 0 ? "H" : "W", n, ints_str(padding)));
    out.push_back(Dim(n));
  }
  return {TensorType(t, out)};
}

std::vector<TensorType> infer_pool(const InferContext& c, bool is_max) {
  // layout "nchw8c" (set by passes/layout.cpp inside a blocked chain): x is [N, C/8, H, W, 8] and so is y.
  // (max_pool2d_grad shares this inference and has no layout.)
  const std::string layout = c.attrs.has("layout") ? c.attrs.s("layout") : std::string("nchw");
  const bool blocked = layout == "nchw8c";
  c.check(blocked || layout == "nchw", ErrorCode::invalid_argument, "layout must be \"nchw\" or \"nchw8c\", got \"{}\"",
          layout);
  if (blocked) {
    if (!(c.in(0).dims.size() == 5 && c.in(0).dims[4].is_static() && c.in(0).dims[4].size == 8)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("layout nchw8c needs x as [N, C/8, H, W, 8], got {}", dims_str(c.in(0).dims)));
  } else {
    check_rank(c, 0, "x", 4, "[N,C,H,W]");
  }
  const auto& x = c.in(0).dims;
  const auto& kernel = ints_of_len(c, "kernel", 2, 1);
  const auto& padding = ints_of_len(c, "padding", 4, 0);
  std::vector<int64_t> stride = c.attrs.ints("stride");
  if (stride.empty())
    stride = kernel;
  else
    stride = ints_of_len(c, "stride", 2, 1);
  const std::vector<int64_t> dilation = is_max ? ints_of_len(c, "dilation", 2, 1) : std::vector<int64_t>{1, 1};
  const std::string& mode = pad_mode_of(c);
  const bool ceil_mode = c.attrs.b("ceil_mode");
  const Dim h =
      window_out(c, "H", x[2], kernel[0], stride[0], dilation[0], padding[0], padding[2], mode, ceil_mode, true);
  const Dim w =
      window_out(c, "W", x[3], kernel[1], stride[1], dilation[1], padding[1], padding[3], mode, ceil_mode, true);
  if (blocked) return {TensorType(c.in(0).dtype, {x[0], x[1], h, w, x[4]})};
  return {TensorType(c.in(0).dtype, {x[0], x[1], h, w})};
}

std::vector<TensorType> infer_global_avg_pool(const InferContext& c) {
  const auto& x = c.in(0).dims;
  if (!(x.size() >= 3)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("x must be [N,C,spatial...] (rank >= 3), got {}", dims_str(x)));
  std::vector<Dim> out{x[0], x[1]};
  out.resize(x.size(), Dim(1));
  return {TensorType(c.in(0).dtype, out)};
}

// x [N,C,H,W], dy [N,O,Ho,Wo] -> dW [O, C/groups, kH, kW]; dy must have conv2d's output size.
std::vector<TensorType> infer_conv2d_weight_grad(const InferContext& c) {
  const DType t = infer::common_dtype(c);
  check_rank(c, 0, "x", 4, "[N,C,H,W]");
  check_rank(c, 1, "dy", 4, "[N,O,Ho,Wo]");
  const auto& x = c.in(0).dims;
  const auto& dy = c.in(1).dims;
  const auto& kernel = ints_of_len(c, "kernel", 2, 1);
  const auto& stride = ints_of_len(c, "stride", 2, 1);
  const auto& dilation = ints_of_len(c, "dilation", 2, 1);
  // End pads may be negative (a transposed conv's output_padding is taken off them).
  const auto& padding = c.attrs.ints("padding");
  if (!(padding.size() == 4 && padding[0] >= 0 && padding[1] >= 0)) [[unlikely]]
    c.fail(
        ErrorCode::invalid_argument,
        fmt::format("padding must be 4 values (top, left, bottom, right) with begins >= 0, got {}", ints_str(padding)));
  const int64_t g = c.attrs.i("groups");
  c.check(g >= 1, ErrorCode::invalid_argument, "groups must be >= 1, got {}", g);
  if (!(x[1].is_static() && dy[1].is_static())) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("the channels of x {} and dy {} must be static", dims_str(x), dims_str(dy)));
  if (!(x[1].size % g == 0 && dy[1].size % g == 0)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("channels of x {} and dy {} must be divisible by groups={}", dims_str(x), dims_str(dy), g));
  if (!(dims_compatible(x[0], dy[0]))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("x {} and dy {} differ in batch", dims_str(x), dims_str(dy)));
  for (int i = 0; i < 2; ++i) {
    const Dim o = window_out(c, i == 0 ? "H" : "W", x[2 + i], kernel[i], stride[i], dilation[i], padding[i],
                             padding[2 + i], "pad", false, false);
    if (!(dims_compatible(o, dy[2 + i]))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("dy {} does not match the conv output size {} of x {} on {}",
                                                    dims_str(dy), o.str(), dims_str(x), i == 0 ? "H" : "W"));
  }
  return {TensorType(t, {Dim(dy[1].size), Dim(x[1].size / g), Dim(kernel[0]), Dim(kernel[1])})};
}

// x [N,C,H,W], dy = shape of max_pool2d(x) -> dx like x.
std::vector<TensorType> infer_max_pool2d_grad(const InferContext& c) {
  const TensorType y = infer_pool(c, true)[0];
  const DType t = infer::common_dtype(c);
  const auto& dy = c.in(1).dims;
  bool ok = dy.size() == 4;
  for (size_t i = 0; ok && i < 4; ++i) ok = dims_compatible(dy[i], y.dims[i]);
  if (!(ok)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("dy must have max_pool2d's output shape {}, got {}", dims_str(y.dims), dims_str(dy)));
  return {TensorType(t, c.in(0).dims)};
}

double static_numel(const TensorType& t) { return static_cast<double>(std::max<int64_t>(t.numel(), 0)); }

// Conv flops: 2 * output elements * (input channels per group * kH * kW).
OpCost conv_cost(std::span<const TensorType> ins, std::span<const TensorType> outs, bool transpose, const Attrs& a) {
  OpCost c;
  for (const auto& t : ins) c.bytes += static_numel(t) * dtype_size(t.dtype);
  for (const auto& t : outs) c.bytes += static_numel(t) * dtype_size(t.dtype);
  const auto& w = ins[1].dims;
  const double k = static_cast<double>(w[2].size * w[3].size);
  // Transposed conv: every input element meets O/groups * kH * kW weights.
  c.flops = transpose ? 2.0 * static_numel(ins[0]) * static_cast<double>(w[1].size) * k
                      : 2.0 * static_numel(outs[0]) * static_cast<double>(w[1].size) * k;
  return c;
}


// ---- gradient rules: the adjoints of convolution are convolutions again
using Grads = std::vector<Tensor>;
using Ints = std::vector<int64_t>;

// The (begin, end) padding actually applied on one axis, as window_out resolves "same"/"valid".
std::pair<int64_t, int64_t> resolved_pads(int64_t n, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe,
                                          const std::string& mode) {
  if (mode == "valid") return {0, 0};
  if (mode != "same") return {pb, pe};
  const int64_t eff = (k - 1) * d + 1, out = (n + s - 1) / s;
  const int64_t total = std::max<int64_t>(0, (out - 1) * s + eff - n);
  return {total / 2, total - total / 2};
}

// Pads (top, left, bottom, right) of a conv2d node, resolved for its input.
Ints conv_pads(const GradContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1];
  const Ints &st = c.attrs.ints("stride"), &p = c.attrs.ints("padding"), &dl = c.attrs.ints("dilation");
  const std::string& mode = c.attrs.s("pad_mode");
  const auto [t, b] = resolved_pads(x.dim(2), w.dim(2), st[0], dl[0], p[0], p[2], mode);
  const auto [l, r] = resolved_pads(x.dim(3), w.dim(3), st[1], dl[1], p[1], p[3], mode);
  return {t, l, b, r};
}

// dW[o,c,i,j] = sum_{n,y,x} dy[n,o,y,x] * xpad[n,c,y*s+i*d,x*s+j*d]: one conv2d_weight_grad op (oneDNN's
// backward-weights kernel on cpu), not a conv of transposed tensors (that ran a 28x28 "kernel" per image).
Tensor conv_weight_grad(const Tensor& x, const Tensor& dy, int64_t kh, int64_t kw, const Ints& stride,
                        const Ints& pads, const Ints& dilation, int64_t groups) {
  ops::Conv2dOptions o;
  o.stride = stride;
  o.padding = pads;
  o.dilation = dilation;
  o.groups = groups;
  return ops::conv2d_weight_grad(x, dy, {kh, kw}, o);
}

Grads conv2d_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.output_grads[0];
  const Ints &st = c.attrs.ints("stride"), &dl = c.attrs.ints("dilation");
  const int64_t groups = c.attrs.i("groups");
  const Ints pads = conv_pads(c);
  // The transposed conv recovers x's size; output_padding adds back the rows the stride skipped.
  ops::ConvTranspose2dOptions t;
  t.stride = st;
  t.padding = pads;
  t.dilation = dl;
  t.groups = groups;
  t.output_padding.resize(2);
  for (int i = 0; i < 2; ++i) {
    const int64_t eff = (w.dim(2 + i) - 1) * dl[i] + 1;
    t.output_padding[i] = x.dim(2 + i) - ((g.dim(2 + i) - 1) * st[i] - pads[i] - pads[2 + i] + eff);
  }
  Grads r{c.wants(0) ? ops::conv_transpose2d(g, w, std::nullopt, t) : Tensor(),
          c.wants(1) ? conv_weight_grad(x, g, w.dim(2), w.dim(3), st, pads, dl, groups) : Tensor()};
  if (c.inputs.size() > 2) r.push_back(c.wants(2) ? ops::reduce_sum(g, {0, 2, 3}) : Tensor());
  return r;
}

// y[n,o,i*s-p+k*d] += x[n,c,i] w[c,o,k]: the input gradient is a conv of dy, the weight gradient the same
// correlation as conv2d's with x and dy exchanged.
Grads conv_transpose2d_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.output_grads[0];
  const Ints &st = c.attrs.ints("stride"), &dl = c.attrs.ints("dilation"), &pads = c.attrs.ints("padding");
  const int64_t groups = c.attrs.i("groups");
  ops::Conv2dOptions o;
  o.stride = st;
  o.padding = pads;
  o.dilation = dl;
  o.groups = groups;
  Tensor dx = ops::conv2d(g, w, std::nullopt, o);
  if (dx.dim(2) != x.dim(2) || dx.dim(3) != x.dim(3)) dx = ops::slice(dx, {0, 0}, {x.dim(2), x.dim(3)}, {2, 3});
  // The same correlation with x and dy exchanged; output_padding comes off the end padding so the conv of
  // dy has exactly x's size.
  const Ints& op = c.attrs.ints("output_padding");
  const Ints wpads{pads[0], pads[1], pads[2] - op[0], pads[3] - op[1]};
  Grads r{dx, conv_weight_grad(g, x, w.dim(2), w.dim(3), st, wpads, dl, groups)};
  if (c.inputs.size() > 2) r.push_back(ops::reduce_sum(g, {0, 2, 3}));
  return r;
}


// Pooling: each kernel offset (i, j) sees the strided view x_pad[.., i*d + y*s, j*d + x*s] of the padded
// input. Gradients for all offsets are stacked as channels and placed back with ONE depthwise transposed
// conv whose kernel is one-hot per offset (ceil_mode overhang and padding are cropped by its padding).
struct PoolGeom {
  int64_t kh, kw;
  Ints stride, dilation, pads;  // pads: top, left, bottom, right (resolved)
  int64_t ho, wo;
};

PoolGeom pool_geom(const GradContext& c, bool is_max) {
  const Tensor& x = c.inputs[0];
  PoolGeom p;
  const Ints& k = c.attrs.ints("kernel");
  p.kh = k[0];
  p.kw = k[1];
  p.stride = c.attrs.ints("stride").empty() ? k : c.attrs.ints("stride");
  p.dilation = is_max ? c.attrs.ints("dilation") : Ints{1, 1};
  const Ints& pd = c.attrs.ints("padding");
  const std::string& mode = c.attrs.s("pad_mode");
  const auto [t, b] = resolved_pads(x.dim(2), p.kh, p.stride[0], p.dilation[0], pd[0], pd[2], mode);
  const auto [l, r] = resolved_pads(x.dim(3), p.kw, p.stride[1], p.dilation[1], pd[1], pd[3], mode);
  p.pads = {t, l, b, r};
  p.ho = c.outputs[0].dim(2);
  p.wo = c.outputs[0].dim(3);
  return p;
}

// Places stacked per-offset gradients [N, C*K, Ho, Wo] back onto x's grid with kernel `w` [C*K,1,kh,kw].
Tensor place_windows(const Tensor& stacked, const Tensor& w, const PoolGeom& p, const Tensor& x) {
  ops::ConvTranspose2dOptions t;
  t.stride = p.stride;
  t.dilation = p.dilation;
  t.groups = x.dim(1);
  t.padding = {p.pads[0], p.pads[1], 0, 0};
  t.output_padding = {0, 0};
  const int64_t out[2] = {p.ho, p.wo}, k[2] = {p.kh, p.kw};
  for (int i = 0; i < 2; ++i) {
    // Size without end padding; crop the excess at the end, or add the rows no window reached.
    const int64_t need = (out[i] - 1) * p.stride[i] + (k[i] - 1) * p.dilation[i] + 1 - p.pads[i] - x.dim(2 + i);
    if (need >= 0)
      t.padding[2 + i] = need;
    else
      t.output_padding[i] = -need;
  }
  return ops::conv_transpose2d(stacked, w, std::nullopt, t);
}

// Depthwise kernel [C*K, 1, kh, kw]: channel c*K + k is one-hot at offset k (all ones when `ones`).
Tensor offset_kernel(int64_t channels, const PoolGeom& p, DType dt, bool ones) {
  const int64_t K = p.kh * p.kw;
  std::vector<double> v(static_cast<size_t>(channels * (ones ? 1 : K) * K), ones ? 1.0 : 0.0);
  if (!ones)
    for (int64_t ch = 0; ch < channels; ++ch)
      for (int64_t k = 0; k < K; ++k) v[static_cast<size_t>((ch * K + k) * K + k)] = 1.0;
  return Tensor::from_doubles(v, {channels * (ones ? 1 : K), 1, p.kh, p.kw}, dt);
}

// The max_pool2d_grad op routes each dy element to the input its window selected (ties: the first in
// row-major window order, like PyTorch's argmax); one pass instead of a mask per kernel offset.
Grads max_pool2d_grad(const GradContext& c) {
  SPORE_CHECK(!c.attrs.has("layout") || c.attrs.s("layout") == "nchw", ErrorCode::unsupported,
              "[max_pool2d] no gradient for layout {} (an inference-only rewrite)", c.attrs.s("layout"));
  ops::Pool2dOptions o;
  o.kernel = c.attrs.ints("kernel");
  o.stride = c.attrs.ints("stride");
  o.padding = c.attrs.ints("padding");
  o.dilation = c.attrs.ints("dilation");
  o.ceil_mode = c.attrs.b("ceil_mode");
  o.pad_mode = c.attrs.s("pad_mode");
  return {ops::max_pool2d_grad(c.inputs[0], c.output_grads[0], o)};
}

// Every window element gets dy / divisor; divisors depend only on the geometry, so they are a constant.
Grads avg_pool2d_grad(const GradContext& c) {
  SPORE_CHECK(!c.attrs.has("layout") || c.attrs.s("layout") == "nchw", ErrorCode::unsupported,
              "[avg_pool2d] no gradient for layout {} (an inference-only rewrite)", c.attrs.s("layout"));
  const Tensor &x = c.inputs[0], &g = c.output_grads[0];
  const PoolGeom p = pool_geom(c, false);
  const bool include_pad = c.attrs.b("count_include_pad");
  const int64_t h = x.dim(2), w = x.dim(3);
  std::vector<double> inv(static_cast<size_t>(p.ho * p.wo));
  for (int64_t oy = 0; oy < p.ho; ++oy) {
    for (int64_t ox = 0; ox < p.wo; ++ox) {
      const int64_t y0 = oy * p.stride[0] - p.pads[0], x0 = ox * p.stride[1] - p.pads[1];
      // count_include_pad counts the padding but not the ceil_mode overhang.
      const int64_t lo_y = include_pad ? -p.pads[0] : 0, hi_y = include_pad ? h + p.pads[2] : h;
      const int64_t lo_x = include_pad ? -p.pads[1] : 0, hi_x = include_pad ? w + p.pads[3] : w;
      const int64_t cy = std::max<int64_t>(0, std::min(y0 + p.kh, hi_y) - std::max(y0, lo_y));
      const int64_t cx = std::max<int64_t>(0, std::min(x0 + p.kw, hi_x) - std::max(x0, lo_x));
      inv[static_cast<size_t>(oy * p.wo + ox)] = cy * cx > 0 ? 1.0 / static_cast<double>(cy * cx) : 0.0;
    }
  }
  const Tensor scaled = ops::mul(g, Tensor::from_doubles(inv, {p.ho, p.wo}, g.dtype()));
  return {place_windows(scaled, offset_kernel(x.dim(1), p, x.dtype(), true), p, x)};
}

Grads global_avg_pool_grad(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  const double n = static_cast<double>(x.numel()) / static_cast<double>(std::max<int64_t>(c.outputs[0].numel(), 1));
  return {ops::expand(ops::div(c.output_grads[0], n), x.shape())};
}

// ---- 3-D (ops/conv3d.h): the same geometry as the 2-D ops on nsp = 3 spatial axes, written for any nsp. Pads are
// (begins..., ends...), one per spatial axis each.
const char* axis_name(int nsp, int i) {
  static const char* const names[] = {"D", "H", "W"};
  return names[3 - nsp + i];
}

std::string spatial_layout(int nsp, const char* lead) {
  std::string s = fmt::format("[{}", lead);
  for (int i = 0; i < nsp; ++i) s += fmt::format(",{}", axis_name(nsp, i));
  return s + "]";
}

std::string kernel_layout(int nsp, const char* lead) {
  std::string s = fmt::format("[{}", lead);
  for (int i = 0; i < nsp; ++i) s += fmt::format(",k{}", axis_name(nsp, i));
  return s + "]";
}

void check_static_w(const InferContext& c, const std::vector<Dim>& w) {
  for (const Dim& d : w)
    if (!(d.is_static())) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("w dims must be static, got {}", dims_str(w)));
}

std::vector<TensorType> infer_conv_nd(const InferContext& c, int nsp) {
  const DType t = infer::common_dtype(c);
  check_rank(c, 0, "x", 2 + nsp, spatial_layout(nsp, "N,C").c_str());
  check_rank(c, 1, "w", 2 + nsp, kernel_layout(nsp, "O,C/groups").c_str());
  const auto& x = c.in(0).dims;
  const auto& w = c.in(1).dims;
  const auto& stride = ints_of_len(c, "stride", nsp, 1);
  const auto& padding = ints_of_len(c, "padding", 2 * nsp, 0);
  const auto& dilation = ints_of_len(c, "dilation", nsp, 1);
  const int64_t g = c.attrs.i("groups");
  const std::string& mode = pad_mode_of(c);
  c.check(g >= 1, ErrorCode::invalid_argument, "groups must be >= 1, got {}", g);
  check_static_w(c, w);
  if (x[1].is_static()) {
    c.check(x[1].size % g == 0, ErrorCode::shape_mismatch, "input channels {} are not divisible by groups={}",
            x[1].size, g);
    if (!(w[1].size == x[1].size / g)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("w {} expects {} input channels per group, x {} with groups={} has {}", dims_str(w), w[1].size,
                         dims_str(x), g, x[1].size / g));
  }
  c.check(w[0].size % g == 0, ErrorCode::shape_mismatch, "output channels {} are not divisible by groups={}", w[0].size,
          g);
  if (c.num_inputs() > 2) {
    const auto& b = c.in(2).dims;
    if (!(b.size() == 1 && dims_compatible(b[0], w[0]))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("bias must be [{}], got {}", w[0].size, dims_str(b)));
  }
  std::vector<Dim> out{x[0], w[0]};
  for (int i = 0; i < nsp; ++i)
    out.push_back(window_out(c, axis_name(nsp, i), x[2 + i], w[2 + i].size, stride[i], dilation[i], padding[i],
                             padding[nsp + i], mode, false, false));
  return {TensorType(t, out)};
}

std::vector<TensorType> infer_conv_transpose_nd(const InferContext& c, int nsp) {
  const DType t = infer::common_dtype(c);
  check_rank(c, 0, "x", 2 + nsp, spatial_layout(nsp, "N,C").c_str());
  check_rank(c, 1, "w", 2 + nsp, kernel_layout(nsp, "C,O/groups").c_str());
  const auto& x = c.in(0).dims;
  const auto& w = c.in(1).dims;
  const auto& stride = ints_of_len(c, "stride", nsp, 1);
  const auto& padding = ints_of_len(c, "padding", 2 * nsp, 0);
  const auto& out_pad = ints_of_len(c, "output_padding", nsp, 0);
  const auto& dilation = ints_of_len(c, "dilation", nsp, 1);
  const int64_t g = c.attrs.i("groups");
  c.check(g >= 1, ErrorCode::invalid_argument, "groups must be >= 1, got {}", g);
  check_static_w(c, w);
  if (!(dims_compatible(x[1], w[0]))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("x {} has {} channels, w {} expects {}", dims_str(x), x[1].str(), dims_str(w), w[0].size));
  c.check(w[0].size % g == 0, ErrorCode::shape_mismatch, "input channels {} are not divisible by groups={}", w[0].size,
          g);
  const int64_t o = w[1].size * g;
  if (c.num_inputs() > 2) {
    const auto& b = c.in(2).dims;
    if (!(b.size() == 1 && dims_compatible(b[0], Dim(o)))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("bias must be [{}], got {}", o, dims_str(b)));
  }
  std::vector<Dim> out{x[0], Dim(o)};
  for (int i = 0; i < nsp; ++i) {
    if (!(out_pad[i] < std::max(stride[i], dilation[i]))) [[unlikely]]
      c.fail(ErrorCode::invalid_argument,
             fmt::format("output_padding {} must be smaller than stride or dilation ({}, {})", ints_str(out_pad),
                         ints_str(stride), ints_str(dilation)));
    const Dim& in = x[2 + i];
    const int64_t eff = (w[2 + i].size - 1) * dilation[i] + 1;
    if (!in.is_static()) {
      out.push_back(Dim::symbol(fmt::format("{}_tk{}s{}p{}", in.sym, eff, stride[i], padding[i] + padding[nsp + i])));
      continue;
    }
    const int64_t n = (in.size - 1) * stride[i] - padding[i] - padding[nsp + i] + eff + out_pad[i];
    if (!(n >= 1)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("{} output size {} is not positive (padding {} too large)",
                                                    axis_name(nsp, i), n, ints_str(padding)));
    out.push_back(Dim(n));
  }
  return {TensorType(t, out)};
}

std::vector<TensorType> infer_pool_nd(const InferContext& c, bool is_max, int nsp) {
  check_rank(c, 0, "x", 2 + nsp, spatial_layout(nsp, "N,C").c_str());
  const auto& x = c.in(0).dims;
  const auto& kernel = ints_of_len(c, "kernel", nsp, 1);
  const auto& padding = ints_of_len(c, "padding", 2 * nsp, 0);
  std::vector<int64_t> stride = c.attrs.ints("stride");
  if (stride.empty()) stride = kernel;
  else stride = ints_of_len(c, "stride", nsp, 1);
  const std::vector<int64_t> dilation = is_max ? ints_of_len(c, "dilation", nsp, 1) : std::vector<int64_t>(nsp, 1);
  const std::string& mode = pad_mode_of(c);
  const bool ceil_mode = c.attrs.b("ceil_mode");
  std::vector<Dim> out{x[0], x[1]};
  for (int i = 0; i < nsp; ++i)
    out.push_back(window_out(c, axis_name(nsp, i), x[2 + i], kernel[i], stride[i], dilation[i], padding[i],
                             padding[nsp + i], mode, ceil_mode, true));
  return {TensorType(c.in(0).dtype, out)};
}

// x [N,C,spatial...], dy [N,O,out...] -> dW [O, C/groups, k...]; dy must have the conv's output size.
std::vector<TensorType> infer_conv_weight_grad_nd(const InferContext& c, int nsp) {
  const DType t = infer::common_dtype(c);
  check_rank(c, 0, "x", 2 + nsp, spatial_layout(nsp, "N,C").c_str());
  check_rank(c, 1, "dy", 2 + nsp, spatial_layout(nsp, "N,O").c_str());
  const auto& x = c.in(0).dims;
  const auto& dy = c.in(1).dims;
  const auto& kernel = ints_of_len(c, "kernel", nsp, 1);
  const auto& stride = ints_of_len(c, "stride", nsp, 1);
  const auto& dilation = ints_of_len(c, "dilation", nsp, 1);
  const auto& padding = c.attrs.ints("padding");  // end pads may be negative (a transposed conv's output_padding)
  bool pads_ok = padding.size() == static_cast<size_t>(2 * nsp);
  for (int i = 0; pads_ok && i < nsp; ++i) pads_ok = padding[i] >= 0;
  if (!pads_ok) [[unlikely]]
    c.fail(ErrorCode::invalid_argument,
           fmt::format("padding must be {} values (begins then ends) with begins >= 0, got {}", 2 * nsp,
                       ints_str(padding)));
  const int64_t g = c.attrs.i("groups");
  c.check(g >= 1, ErrorCode::invalid_argument, "groups must be >= 1, got {}", g);
  if (!(x[1].is_static() && dy[1].is_static())) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("the channels of x {} and dy {} must be static", dims_str(x), dims_str(dy)));
  if (!(x[1].size % g == 0 && dy[1].size % g == 0)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("channels of x {} and dy {} must be divisible by groups={}", dims_str(x), dims_str(dy), g));
  if (!(dims_compatible(x[0], dy[0]))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("x {} and dy {} differ in batch", dims_str(x), dims_str(dy)));
  std::vector<Dim> out{Dim(dy[1].size), Dim(x[1].size / g)};
  for (int i = 0; i < nsp; ++i) {
    const Dim o = window_out(c, axis_name(nsp, i), x[2 + i], kernel[i], stride[i], dilation[i], padding[i],
                             padding[nsp + i], "pad", false, false);
    if (!(dims_compatible(o, dy[2 + i]))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("dy {} does not match the conv output size {} of x {} on {}",
                                                    dims_str(dy), o.str(), dims_str(x), axis_name(nsp, i)));
    out.push_back(Dim(kernel[i]));
  }
  return {TensorType(t, out)};
}

std::vector<TensorType> infer_max_pool_grad_nd(const InferContext& c, int nsp) {
  const TensorType y = infer_pool_nd(c, true, nsp)[0];
  const DType t = infer::common_dtype(c);
  const auto& dy = c.in(1).dims;
  bool ok = dy.size() == y.dims.size();
  for (size_t i = 0; ok && i < dy.size(); ++i) ok = dims_compatible(dy[i], y.dims[i]);
  if (!(ok)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("dy must have the max pool's output shape {}, got {}", dims_str(y.dims), dims_str(dy)));
  return {TensorType(t, c.in(0).dims)};
}

// Flops as conv_cost, over every kernel dim.
OpCost conv_cost_nd(std::span<const TensorType> ins, std::span<const TensorType> outs, bool transpose) {
  OpCost c;
  for (const auto& t : ins) c.bytes += static_numel(t) * dtype_size(t.dtype);
  for (const auto& t : outs) c.bytes += static_numel(t) * dtype_size(t.dtype);
  const auto& w = ins[1].dims;
  double k = static_cast<double>(w[1].size);
  for (size_t i = 2; i < w.size(); ++i) k *= static_cast<double>(w[i].size);
  c.flops = 2.0 * static_numel(transpose ? ins[0] : outs[0]) * k;
  return c;
}

// Resolved pads (begins..., ends...) of an N-d conv/pool node whose spatial input is x, kernel k, dilation d.
Ints resolved_pads_nd(const Tensor& x, const Ints& k, const Ints& s, const Ints& d, const Ints& p,
                      const std::string& mode) {
  const size_t nsp = k.size();
  Ints r(2 * nsp);
  for (size_t i = 0; i < nsp; ++i) {
    const auto [b, e] = resolved_pads(x.dim(static_cast<int>(2 + i)), k[i], s[i], d[i], p[i], p[nsp + i], mode);
    r[i] = b;
    r[nsp + i] = e;
  }
  return r;
}

Ints spatial_axes_of(const Tensor& t) {
  Ints a{0};
  for (int i = 2; i < t.rank(); ++i) a.push_back(i);
  return a;
}

Grads conv3d_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.output_grads[0];
  const Ints &st = c.attrs.ints("stride"), &dl = c.attrs.ints("dilation");
  const int64_t groups = c.attrs.i("groups");
  const Ints k{w.dim(2), w.dim(3), w.dim(4)};
  const Ints pads = resolved_pads_nd(x, k, st, dl, c.attrs.ints("padding"), c.attrs.s("pad_mode"));
  ops::ConvTranspose3dOptions t;
  t.stride = st;
  t.padding = pads;
  t.dilation = dl;
  t.groups = groups;
  for (int i = 0; i < 3; ++i) {
    const int64_t eff = (k[i] - 1) * dl[i] + 1;
    t.output_padding[i] = x.dim(2 + i) - ((g.dim(2 + i) - 1) * st[i] - pads[i] - pads[3 + i] + eff);
  }
  ops::Conv3dOptions o;
  o.stride = st;
  o.padding = pads;
  o.dilation = dl;
  o.groups = groups;
  Grads r{c.wants(0) ? ops::conv_transpose3d(g, w, std::nullopt, t) : Tensor(),
          c.wants(1) ? ops::conv3d_weight_grad(x, g, k, o) : Tensor()};
  if (c.inputs.size() > 2) r.push_back(c.wants(2) ? ops::reduce_sum(g, spatial_axes_of(g)) : Tensor());
  return r;
}

Grads conv_transpose3d_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.output_grads[0];
  const Ints &st = c.attrs.ints("stride"), &dl = c.attrs.ints("dilation"), &pads = c.attrs.ints("padding");
  ops::Conv3dOptions o;
  o.stride = st;
  o.padding = pads;
  o.dilation = dl;
  o.groups = c.attrs.i("groups");
  Tensor dx = ops::conv3d(g, w, std::nullopt, o);
  if (dx.dim(2) != x.dim(2) || dx.dim(3) != x.dim(3) || dx.dim(4) != x.dim(4))
    dx = ops::slice(dx, {0, 0, 0}, {x.dim(2), x.dim(3), x.dim(4)}, {2, 3, 4});
  const Ints& op = c.attrs.ints("output_padding");
  o.padding = {pads[0], pads[1], pads[2], pads[3] - op[0], pads[4] - op[1], pads[5] - op[2]};
  Grads r{dx, ops::conv3d_weight_grad(g, x, {w.dim(2), w.dim(3), w.dim(4)}, o)};
  if (c.inputs.size() > 2) r.push_back(ops::reduce_sum(g, spatial_axes_of(g)));
  return r;
}

ops::Pool3dOptions pool3d_options(const Attrs& a, bool is_max) {
  ops::Pool3dOptions o;
  o.kernel = a.ints("kernel");
  o.stride = a.ints("stride");
  o.padding = a.ints("padding");
  if (is_max) o.dilation = a.ints("dilation");
  o.ceil_mode = a.b("ceil_mode");
  if (!is_max) o.count_include_pad = a.b("count_include_pad");
  o.pad_mode = a.s("pad_mode");
  return o;
}

Grads max_pool3d_grad_rule(const GradContext& c) {
  return {ops::max_pool3d_grad(c.inputs[0], c.output_grads[0], pool3d_options(c.attrs, true))};
}

// As avg_pool2d_grad: dy / divisor, placed back onto x's grid by a depthwise transposed conv with a ones kernel.
Grads avg_pool3d_grad(const GradContext& c) {
  const Tensor &x = c.inputs[0], &g = c.output_grads[0];
  const Ints& k = c.attrs.ints("kernel");
  const Ints s = c.attrs.ints("stride").empty() ? k : c.attrs.ints("stride");
  const Ints pads = resolved_pads_nd(x, k, s, {1, 1, 1}, c.attrs.ints("padding"), c.attrs.s("pad_mode"));
  const bool include_pad = c.attrs.b("count_include_pad");
  const Ints out{g.dim(2), g.dim(3), g.dim(4)};
  // Per axis, the window's count of counted positions at each output index.
  std::vector<double> cnt[3];
  for (int i = 0; i < 3; ++i) {
    const int64_t n = x.dim(2 + i), lo = include_pad ? -pads[i] : 0, hi = include_pad ? n + pads[3 + i] : n;
    for (int64_t o = 0; o < out[i]; ++o) {
      const int64_t b0 = o * s[i] - pads[i];
      cnt[i].push_back(static_cast<double>(std::max<int64_t>(0, std::min(b0 + k[i], hi) - std::max(b0, lo))));
    }
  }
  std::vector<double> inv;
  inv.reserve(static_cast<size_t>(out[0] * out[1] * out[2]));
  for (double a : cnt[0])
    for (double b : cnt[1])
      for (double e : cnt[2]) inv.push_back(a * b * e > 0 ? 1.0 / (a * b * e) : 0.0);
  const Tensor scaled = ops::mul(g, Tensor::from_doubles(inv, out, g.dtype()));
  ops::ConvTranspose3dOptions t;
  t.stride = s;
  t.groups = x.dim(1);
  t.padding = {pads[0], pads[1], pads[2], 0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    // Size without end padding; crop the excess at the end, or add the rows no window reached.
    const int64_t need = (out[i] - 1) * s[i] + k[i] - pads[i] - x.dim(2 + i);
    if (need >= 0) t.padding[3 + i] = need;
    else t.output_padding[i] = -need;
  }
  const std::vector<double> ones(static_cast<size_t>(x.dim(1) * k[0] * k[1] * k[2]), 1.0);
  return {ops::conv_transpose3d(scaled, Tensor::from_doubles(ones, {x.dim(1), 1, k[0], k[1], k[2]}, x.dtype()),
                                std::nullopt, t)};
}

void register_conv3d_ops(OpRegistry& r) {
  using V = std::vector<int64_t>;
  r.def("conv3d"_op)
      .doc(
          "3-D convolution: x [N,C,D,H,W], w [O,C/groups,kD,kH,kW], bias [O]; padding is (begins, ends) per "
          "axis, pad_mode as conv2d's.")
      .inputs({"x", "w", "bias?"})
      .attr("stride", AttrKind::i64s, V{1, 1, 1})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1, 1})
      .attr("groups", AttrKind::i64, int64_t{1})
      .choice("pad_mode", {"pad", "same", "valid"})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::low)
      .weight({.input = 1, .channel_axis = 0, .bias_input = 2, .output_channel_axis = 1})
      .infer([](const InferContext& c) { return infer_conv_nd(c, 3); })
      .grad(conv3d_grad)
      .cost([](auto ins, auto outs, const Attrs&) { return conv_cost_nd(ins, outs, false); });
  r.def("conv_transpose3d"_op)
      .doc("3-D transposed convolution: x [N,C,D,H,W], w [C,O/groups,kD,kH,kW], bias [O].")
      .inputs({"x", "w", "bias?"})
      .attr("stride", AttrKind::i64s, V{1, 1, 1})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0, 0, 0})
      .attr("output_padding", AttrKind::i64s, V{0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1, 1})
      .attr("groups", AttrKind::i64, int64_t{1})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::low)
      .weight({.input = 1, .channel_axis = 1, .bias_input = 2, .output_channel_axis = 1})
      .infer([](const InferContext& c) { return infer_conv_transpose_nd(c, 3); })
      .grad(conv_transpose3d_grad)
      .cost([](auto ins, auto outs, const Attrs&) { return conv_cost_nd(ins, outs, true); });
  r.def("max_pool3d"_op)
      .doc(
          "3-D max pooling over NCDHW; padded positions never win (NaN does, else the first maximum); stride "
          "empty = kernel.")
      .inputs({"x"})
      .attr("kernel", AttrKind::i64s, V{2, 2, 2})
      .attr("stride", AttrKind::i64s, V{})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1, 1})
      .attr("ceil_mode", AttrKind::boolean, false)
      .choice("pad_mode", {"pad", "same", "valid"})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer([](const InferContext& c) { return infer_pool_nd(c, true, 3); })
      .grad(max_pool3d_grad_rule);
  r.def("avg_pool3d"_op)
      .doc(
          "3-D average pooling over NCDHW; count_include_pad counts padding (not the ceil_mode overhang) in the "
          "divisor.")
      .inputs({"x"})
      .attr("kernel", AttrKind::i64s, V{2, 2, 2})
      .attr("stride", AttrKind::i64s, V{})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0, 0, 0})
      .attr("ceil_mode", AttrKind::boolean, false)
      .attr("count_include_pad", AttrKind::boolean, false)
      .choice("pad_mode", {"pad", "same", "valid"})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer([](const InferContext& c) { return infer_pool_nd(c, false, 3); })
      .grad(avg_pool3d_grad);
  r.def("conv3d_weight_grad"_op)
      .doc(
          "Weight gradient of conv3d: x [N,C,D,H,W], dy [N,O,Do,Ho,Wo] -> dW [O,C/groups,kD,kH,kW]; padding is "
          "resolved (begins, ends; an end pad may be negative).")
      .inputs({"x", "dy"})
      .attr("kernel", AttrKind::i64s, V{1, 1, 1})
      .attr("stride", AttrKind::i64s, V{1, 1, 1})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1, 1})
      .attr("groups", AttrKind::i64, int64_t{1})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::low)
      .infer([](const InferContext& c) { return infer_conv_weight_grad_nd(c, 3); })
      .cost([](auto ins, auto outs, const Attrs&) {
        OpCost c;
        for (const auto& t : ins) c.bytes += static_numel(t) * dtype_size(t.dtype);
        c.bytes += static_numel(outs[0]) * dtype_size(outs[0].dtype);
        c.flops = 2.0 * static_numel(ins[1]) * static_numel(outs[0]) / static_cast<double>(outs[0].dims[0].size);
        return c;
      });
  r.def("max_pool3d_grad"_op)
      .doc(
          "Input gradient of max_pool3d (same attributes): dy goes to the element each window selected (NaN "
          "wins, else the first maximum in window order).")
      .inputs({"x", "dy"})
      .attr("kernel", AttrKind::i64s, V{2, 2, 2})
      .attr("stride", AttrKind::i64s, V{})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1, 1})
      .attr("ceil_mode", AttrKind::boolean, false)
      .choice("pad_mode", {"pad", "same", "valid"})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer([](const InferContext& c) { return infer_max_pool_grad_nd(c, 3); });
}

}  // namespace

void register_conv_ops(OpRegistry& r) {
  using V = std::vector<int64_t>;
  r.def("conv2d"_op)
      .doc("2-D convolution: x [N,C,H,W], w [O,C/groups,kH,kW], bias [O]; padding is (top,left,bottom,right).")
      .inputs({"x", "w", "bias?"})
      .attr("stride", AttrKind::i64s, V{1, 1})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1})
      .attr("groups", AttrKind::i64, int64_t{1})
      .choice("pad_mode", {"pad", "same", "valid"})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::out_fusable, AmpPolicy::low)
      .weight({.input = 1, .channel_axis = 0, .bias_input = 2, .output_channel_axis = 1})
      .infer(infer_conv2d)
      .grad(conv2d_grad)
      .cost([](auto ins, auto outs, const Attrs& a) { return conv_cost(ins, outs, false, a); });
  r.def("conv_transpose2d"_op)
      .doc("2-D transposed convolution: x [N,C,H,W], w [C,O/groups,kH,kW], bias [O].")
      .inputs({"x", "w", "bias?"})
      .attr("stride", AttrKind::i64s, V{1, 1})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("output_padding", AttrKind::i64s, V{0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1})
      .attr("groups", AttrKind::i64, int64_t{1})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::out_fusable, AmpPolicy::low)
      .weight({.input = 1, .channel_axis = 1, .bias_input = 2, .output_channel_axis = 1})
      .infer(infer_conv_transpose2d)
      .grad(conv_transpose2d_grad)
      .cost([](auto ins, auto outs, const Attrs& a) { return conv_cost(ins, outs, true, a); });
  r.def("max_pool2d"_op)
      .doc("2-D max pooling over NCHW (layout \"nchw8c\": [N,C/8,H,W,8], inside a blocked conv chain); padded "
           "positions never win; stride empty = kernel.")
      .inputs({"x"})
      .attr("kernel", AttrKind::i64s, V{2, 2})
      .attr("stride", AttrKind::i64s, V{})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1})
      .attr("ceil_mode", AttrKind::boolean, false)
      .choice("pad_mode", {"pad", "same", "valid"})
      .attr("layout", AttrKind::str, std::string("nchw"))
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer([](const InferContext& c) { return infer_pool(c, true); })
      .grad(max_pool2d_grad);
  r.def("conv2d_weight_grad"_op)
      .doc("Weight gradient of conv2d: x [N,C,H,W], dy [N,O,Ho,Wo] -> dW [O,C/groups,kH,kW]; padding is resolved "
           "(top,left,bottom,right; an end pad may be negative).")
      .inputs({"x", "dy"})
      .attr("kernel", AttrKind::i64s, V{1, 1})
      .attr("stride", AttrKind::i64s, V{1, 1})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1})
      .attr("groups", AttrKind::i64, int64_t{1})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::low)
      .infer(infer_conv2d_weight_grad)
      .cost([](auto ins, auto outs, const Attrs&) {
        OpCost c;
        for (const auto& t : ins) c.bytes += static_numel(t) * dtype_size(t.dtype);
        c.bytes += static_numel(outs[0]) * dtype_size(outs[0].dtype);
        // every dy element meets C/groups * kH * kW inputs
        const auto& w = outs[0].dims;
        c.flops = 2.0 * static_numel(ins[1]) * static_cast<double>(w[1].size * w[2].size * w[3].size);
        return c;
      });
  r.def("max_pool2d_grad"_op)
      .doc("Input gradient of max_pool2d (same attributes): dy [N,C,Ho,Wo] goes to the element each window "
           "selected (NaN wins, else the first maximum in row-major window order).")
      .inputs({"x", "dy"})
      .attr("kernel", AttrKind::i64s, V{2, 2})
      .attr("stride", AttrKind::i64s, V{})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1})
      .attr("ceil_mode", AttrKind::boolean, false)
      .choice("pad_mode", {"pad", "same", "valid"})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_max_pool2d_grad);
  r.def("avg_pool2d"_op)
      .doc(
          "2-D average pooling over NCHW (layout \"nchw8c\": [N,C/8,H,W,8], inside a blocked conv chain); "
          "count_include_pad counts padding (not the ceil_mode overhang) in the divisor.")
      .inputs({"x"})
      .attr("kernel", AttrKind::i64s, V{2, 2})
      .attr("stride", AttrKind::i64s, V{})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("ceil_mode", AttrKind::boolean, false)
      .attr("count_include_pad", AttrKind::boolean, false)
      .choice("pad_mode", {"pad", "same", "valid"})
      .attr("layout", AttrKind::str, std::string("nchw"))
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer([](const InferContext& c) { return infer_pool(c, false); })
      .grad(avg_pool2d_grad);
  r.def("global_avg_pool"_op)
      .doc("Mean over all spatial dims: [N,C,spatial...] -> [N,C,1,...].")
      .inputs({"x"})
      .dtypes(dtypes::floating)
      .traits(Trait::reduction, FusionKind::reduce, AmpPolicy::keep_f32)
      .infer(infer_global_avg_pool)
      .grad(global_avg_pool_grad);
  register_conv3d_ops(r);
}

namespace ops {
Tensor conv3d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const Conv3dOptions& o) {
  std::vector<Tensor> ins{x, w};
  if (bias) ins.push_back(*bias);
  return call("conv3d"_op, ins,
              {{"stride", o.stride},
               {"padding", o.padding},
               {"dilation", o.dilation},
               {"groups", o.groups},
               {"pad_mode", o.pad_mode}})[0];
}
Tensor conv_transpose3d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias,
                        const ConvTranspose3dOptions& o) {
  std::vector<Tensor> ins{x, w};
  if (bias) ins.push_back(*bias);
  return call("conv_transpose3d"_op, ins,
              {{"stride", o.stride},
               {"padding", o.padding},
               {"output_padding", o.output_padding},
               {"dilation", o.dilation},
               {"groups", o.groups}})[0];
}
Tensor max_pool3d(const Tensor& x, const Pool3dOptions& o) {
  const Tensor ins[] = {x};
  return call("max_pool3d"_op, ins,
              {{"kernel", o.kernel},
               {"stride", o.stride},
               {"padding", o.padding},
               {"dilation", o.dilation},
               {"ceil_mode", o.ceil_mode},
               {"pad_mode", o.pad_mode}})[0];
}
Tensor avg_pool3d(const Tensor& x, const Pool3dOptions& o) {
  const Tensor ins[] = {x};
  return call("avg_pool3d"_op, ins,
              {{"kernel", o.kernel},
               {"stride", o.stride},
               {"padding", o.padding},
               {"ceil_mode", o.ceil_mode},
               {"count_include_pad", o.count_include_pad},
               {"pad_mode", o.pad_mode}})[0];
}
Tensor conv3d_weight_grad(const Tensor& x, const Tensor& dy, const Ints& kernel, const Conv3dOptions& o) {
  const Tensor ins[] = {x, dy};
  return call("conv3d_weight_grad"_op, ins,
              {{"kernel", kernel},
               {"stride", o.stride},
               {"padding", o.padding},
               {"dilation", o.dilation},
               {"groups", o.groups}})[0];
}
Tensor max_pool3d_grad(const Tensor& x, const Tensor& dy, const Pool3dOptions& o) {
  const Tensor ins[] = {x, dy};
  return call("max_pool3d_grad"_op, ins,
              {{"kernel", o.kernel},
               {"stride", o.stride},
               {"padding", o.padding},
               {"dilation", o.dilation},
               {"ceil_mode", o.ceil_mode},
               {"pad_mode", o.pad_mode}})[0];
}
}  // namespace ops

}  // namespace spore
