// Convolution and pooling over NCHW tensors: conv2d, conv_transpose2d, max/avg pooling, global average pooling.
// Geometry (ONNX/PyTorch): effective kernel (k-1)*d+1; "same" is SAME_UPPER (the odd pad goes at the end);
// ceil_mode drops a last window that would start in the end padding (PyTorch's rule).
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace {

std::string dims_str(const std::vector<Dim>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ',';
    s += d[i].str();
  }
  return s + ']';
}
std::string ints_str(const std::vector<int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ",")); }
bool dims_compatible(const Dim& a, const Dim& b) { return !a.is_static() || !b.is_static() || a.size == b.size; }

const std::vector<int64_t>& ints_of_len(const InferContext& c, const char* name, size_t len, int64_t min_value) {
  const auto& v = c.attrs.ints(name);
  c.check(v.size() == len, ErrorCode::invalid_argument,
          "attribute '{}' must have {} values, got {}", name, len, ints_str(v));
  for (int64_t x : v)
    c.check(x >= min_value, ErrorCode::invalid_argument,
            "attribute '{}' values must be >= {}, got {}", name, min_value, ints_str(v));
  return v;
}

const std::string& pad_mode_of(const InferContext& c) {
  const std::string& m = c.attrs.s("pad_mode");
  c.check(m == "pad" || m == "same" || m == "valid", ErrorCode::invalid_argument,
          "pad_mode must be \"pad\", \"same\" or \"valid\", got \"{}\"", m);
  return m;
}

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
  c.check(d.size() == rank, ErrorCode::shape_mismatch,
          "{} must be {} (rank {}), got {}", name, layout, rank, dims_str(d));
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
    c.check(w[i].is_static(), ErrorCode::shape_mismatch, "w dims must be static, got {}", dims_str(w));
  if (x[1].is_static()) {
    c.check(x[1].size % g == 0, ErrorCode::shape_mismatch,
            "input channels {} are not divisible by groups={}", x[1].size, g);
    c.check(w[1].size == x[1].size / g, ErrorCode::shape_mismatch,
            "w {} expects {} input channels per group, x {} with groups={} has {}", dims_str(w), w[1].size,
                        dims_str(x), g, x[1].size / g);
  }
  c.check(w[0].size % g == 0, ErrorCode::shape_mismatch,
          "output channels {} are not divisible by groups={}", w[0].size, g);
  if (c.num_inputs() > 2) {
    const auto& b = c.in(2).dims;
    c.check(b.size() == 1 && dims_compatible(b[0], w[0]), ErrorCode::shape_mismatch,
            "bias must be [{}], got {}", w[0].size, dims_str(b));
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
    c.check(w[i].is_static(), ErrorCode::shape_mismatch, "w dims must be static, got {}", dims_str(w));
  c.check(dims_compatible(x[1], w[0]), ErrorCode::shape_mismatch,
          "x {} has {} channels, w {} expects {}", dims_str(x), x[1].str(), dims_str(w), w[0].size);
  c.check(w[0].size % g == 0, ErrorCode::shape_mismatch,
          "input channels {} are not divisible by groups={}", w[0].size, g);
  const int64_t o = w[1].size * g;
  if (c.num_inputs() > 2) {
    const auto& b = c.in(2).dims;
    c.check(b.size() == 1 && dims_compatible(b[0], Dim(o)), ErrorCode::shape_mismatch,
            "bias must be [{}], got {}", o, dims_str(b));
  }
  std::vector<Dim> out{x[0], Dim(o)};
  for (int i = 0; i < 2; ++i) {
    c.check(out_pad[i] < std::max(stride[i], dilation[i]), ErrorCode::invalid_argument,
            "output_padding {} must be smaller than stride or dilation ({}, {})", ints_str(out_pad),
                        ints_str(stride), ints_str(dilation));
    const Dim& in = x[2 + i];
    const int64_t eff = (w[2 + i].size - 1) * dilation[i] + 1;
    if (!in.is_static()) {
      out.push_back(Dim::symbol(fmt::format("{}_tk{}s{}p{}", in.sym, eff, stride[i], padding[i] + padding[2 + i])));
      continue;
    }
    const int64_t n = (in.size - 1) * stride[i] - padding[i] - padding[2 + i] + eff + out_pad[i];
    c.check(n >= 1, ErrorCode::shape_mismatch,
            "{} output size {} is not positive (padding {} too large)", i == 0 ? "H" : "W", n,
                        ints_str(padding));
    out.push_back(Dim(n));
  }
  return {TensorType(t, out)};
}

std::vector<TensorType> infer_pool(const InferContext& c, bool is_max) {
  check_rank(c, 0, "x", 4, "[N,C,H,W]");
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
  return {TensorType(c.in(0).dtype, {x[0], x[1], h, w})};
}

std::vector<TensorType> infer_global_avg_pool(const InferContext& c) {
  const auto& x = c.in(0).dims;
  c.check(x.size() >= 3, ErrorCode::shape_mismatch,
          "x must be [N,C,spatial...] (rank >= 3), got {}", dims_str(x));
  std::vector<Dim> out{x[0], x[1]};
  out.resize(x.size(), Dim(1));
  return {TensorType(c.in(0).dtype, out)};
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

}  // namespace

void register_conv_ops(OpRegistry& r) {
  using V = std::vector<int64_t>;
  r.def(OpId::conv2d)
      .doc("2-D convolution: x [N,C,H,W], w [O,C/groups,kH,kW], bias [O]; padding is (top,left,bottom,right).")
      .inputs({"x", "w", "bias?"})
      .attr("stride", AttrKind::i64s, V{1, 1})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1})
      .attr("groups", AttrKind::i64, int64_t{1})
      .attr("pad_mode", AttrKind::str, std::string("pad"))
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::out_fusable, AmpPolicy::low)
      .infer(infer_conv2d)
      .cost([](auto ins, auto outs, const Attrs& a) { return conv_cost(ins, outs, false, a); });
  r.def(OpId::conv_transpose2d)
      .doc("2-D transposed convolution: x [N,C,H,W], w [C,O/groups,kH,kW], bias [O].")
      .inputs({"x", "w", "bias?"})
      .attr("stride", AttrKind::i64s, V{1, 1})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("output_padding", AttrKind::i64s, V{0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1})
      .attr("groups", AttrKind::i64, int64_t{1})
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::out_fusable, AmpPolicy::low)
      .infer(infer_conv_transpose2d)
      .cost([](auto ins, auto outs, const Attrs& a) { return conv_cost(ins, outs, true, a); });
  r.def(OpId::max_pool2d)
      .doc("2-D max pooling over NCHW; padded positions never win; stride empty = kernel.")
      .inputs({"x"})
      .attr("kernel", AttrKind::i64s, V{2, 2})
      .attr("stride", AttrKind::i64s, V{})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1})
      .attr("ceil_mode", AttrKind::boolean, false)
      .attr("pad_mode", AttrKind::str, std::string("pad"))
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer([](const InferContext& c) { return infer_pool(c, true); });
  r.def(OpId::avg_pool2d)
      .doc(
          "2-D average pooling over NCHW; count_include_pad counts padding (not the ceil_mode overhang) in the "
          "divisor.")
      .inputs({"x"})
      .attr("kernel", AttrKind::i64s, V{2, 2})
      .attr("stride", AttrKind::i64s, V{})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("ceil_mode", AttrKind::boolean, false)
      .attr("count_include_pad", AttrKind::boolean, false)
      .attr("pad_mode", AttrKind::str, std::string("pad"))
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer([](const InferContext& c) { return infer_pool(c, false); });
  r.def(OpId::global_avg_pool)
      .doc("Mean over all spatial dims: [N,C,spatial...] -> [N,C,1,...].")
      .inputs({"x"})
      .dtypes(dtypes::floating)
      .traits(Trait::reduction, FusionKind::reduce, AmpPolicy::keep_f32)
      .infer(infer_global_avg_pool);
}

}  // namespace spore
