// The ONNX op table: how each ONNX op (default domain, opsets 1-17 as far as each mapping says) becomes spore
// ops. Semantics follow the ONNX operator spec of the schema version in effect (NodeCtx::since); where a spore op
// differs (Softmax < 13 coerces to 2-D, auto_pad, legacy broadcast attributes...) the mapping adapts it here.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include <fmt/format.h>

#include "base/error.h"
#include "io/onnx/onnx_import_internal.h"
#include "ops/rnn.h"

namespace spore::io::onnx_import {

namespace {

using V = std::vector<Value*>;
using Ints = std::vector<int64_t>;

Value* full_value(NodeCtx& c, const Ints& shape, double value, DType dt);  // a constant-filled tensor (below)

Ints normalize_axes(const NodeCtx& c, Ints axes, int rank) {
  for (int64_t& a : axes) a = c.norm_axis(a, rank);
  return axes;
}

// ------------------------------------------------------------------------------------------- elementwise

EmitFn unary(OpId id) {
  return [id](NodeCtx& c) -> V { return {c.op(id, {c.in(0)})}; };
}

// Opset < 7 binary ops broadcast only with broadcast=1, aligning B at `axis` of A.
Value* legacy_broadcast(NodeCtx& c, Value* a, Value* b) {
  if (c.since >= 7 || c.attr_i("broadcast", 0) == 0 || !c.has_attr("axis")) return b;
  const int ra = c.rank(a), rb = c.rank(b);
  const int64_t axis = c.norm_axis(c.attr_i("axis", 0), ra);
  const int64_t trailing = ra - axis - rb;
  if (trailing <= 0) return b;
  Shape s = c.static_shape(b, "input B");
  for (int64_t i = 0; i < trailing; ++i) s.push_back(1);
  return c.reshape(b, s);
}

EmitFn binary(OpId id) {
  return [id](NodeCtx& c) -> V {
    Value* a = c.in(0);
    Value* b = legacy_broadcast(c, a, c.in(1));
    return {c.op(id, {a, b})};
  };
}

// Sum/Max/Min/Mean: variadic with broadcasting.
EmitFn variadic(OpId id, bool mean) {
  return [id, mean](NodeCtx& c) -> V {
    Value* acc = nullptr;
    int n = 0;
    for (Value* v : c.inputs()) {
      if (!v) continue;
      acc = acc ? c.op(id, {acc, v}) : v;
      ++n;
    }
    if (!acc) c.fail(ErrorCode::invalid_argument, "needs at least one input");
    if (mean && n > 1) acc = c.op("div"_op, {acc, c.scalar(n, c.dtype(acc))});
    if (n == 1) acc = c.op("identity"_op, {acc});
    return {acc};
  };
}

Value* zero_like(NodeCtx& c, Value* x) { return c.scalar(0, c.dtype(x)); }

V emit_pow(NodeCtx& c) {
  Value* a = c.in(0);
  Value* b = legacy_broadcast(c, a, c.in(1));
  const DType dt = c.dtype(a);
  // x^2 (LayerNorm as PyTorch exports it before opset 17: Pow(x - mean, 2)) as x * x: exact (correctly rounded,
  // where powf may be off by an ulp) and ~20x cheaper; it was a quarter of a transformer encoder's run time.
  if (is_floating(dt) && c.is_const(b) && b->type.numel() == 1 && b->type.rank() <= a->type.rank() &&
      c.floats_in(1).at(0) == 2.0)
    return {c.op("mul"_op, {a, a})};
  if (is_floating(dt)) return {c.op("pow"_op, {a, c.cast(b, dt)})};
  // Integer bases: spore's pow is floating; f64 holds every exact integer power that fits i32/i64 loosely.
  Value* r = c.op("pow"_op, {c.cast(a, DType::f64), c.cast(b, DType::f64)});
  return {c.cast(r, dt)};
}

V emit_clip(NodeCtx& c) {
  Value* x = c.in(0);
  const DType dt = c.dtype(x);
  const double inf = std::numeric_limits<double>::infinity();
  if (c.since < 11) return {c.op("clip"_op, {x}, {{"min", c.attr_f("min", -inf)}, {"max", c.attr_f("max", inf)}})};
  Value* lo = c.has_input(1) ? c.in(1) : nullptr;
  Value* hi = c.has_input(2) ? c.in(2) : nullptr;
  if (is_floating(dt) && (!lo || c.is_const(lo)) && (!hi || c.is_const(hi)))
    return {c.op("clip"_op, {x}, {{"min", lo ? c.floats_in(1).at(0) : -inf}, {"max", hi ? c.floats_in(2).at(0) : inf}})};
  Value* y = x;
  if (lo) y = c.op("maximum"_op, {y, lo});
  if (hi) y = c.op("minimum"_op, {y, hi});
  if (y == x) y = c.op("identity"_op, {x});
  return {y};
}

V emit_cast(NodeCtx& c) {
  const auto dt = dtype_from_onnx(static_cast<int32_t>(c.attr_i("to", 0)));
  return {c.op("cast"_op, {c.in(0)}, {{"dtype", *dt}})};
}
std::string check_cast(const onnx::NodeProto& n, int, const NodeInfo&) {
  const int64_t to = node_attr_i(n, "to", 0);
  if (!dtype_from_onnx(static_cast<int32_t>(to))) return "Cast to " + onnx_type_name(static_cast<int32_t>(to)) + ", which spore lacks";
  return "";
}

// Activations composed from spore ops.
Value* mulc(NodeCtx& c, Value* x, double k) { return k == 1.0 ? x : c.op("mul"_op, {x, c.scalar(k, c.dtype(x))}); }
Value* addc(NodeCtx& c, Value* x, double k) { return k == 0.0 ? x : c.op("add"_op, {x, c.scalar(k, c.dtype(x))}); }

Value* act_elu(NodeCtx& c, Value* x, double alpha) {
  Value* neg = mulc(c, addc(c, c.op("exp"_op, {x}), -1.0), alpha);
  return c.op("where"_op, {c.op("gt"_op, {x, zero_like(c, x)}), x, neg});
}
Value* act_hard_sigmoid(NodeCtx& c, Value* x, double alpha, double beta) {
  return c.op("hardsigmoid"_op, {x}, {{"alpha", alpha}, {"beta", beta}});
}
Value* act_softplus(NodeCtx& c, Value* x) { return c.op("softplus"_op, {x}); }
Value* act_softsign(NodeCtx& c, Value* x) { return c.op("div"_op, {x, addc(c, c.op("abs"_op, {x}), 1.0)}); }

// ------------------------------------------------------------------------------------------- conv / pool

struct Window {
  Ints kernel, strides, dilations, pads;  // pads: begins then ends (ONNX order)
};

std::pair<int64_t, int64_t> same_pads(int64_t in, int64_t k, int64_t s, int64_t d, bool upper) {
  const int64_t out = (in + s - 1) / s;
  const int64_t total = std::max<int64_t>((out - 1) * s + (k - 1) * d + 1 - in, 0);
  const int64_t small = total / 2, big = total - small;
  return upper ? std::pair{small, big} : std::pair{big, small};
}

// Reads kernel/strides/dilations/pads/auto_pad for `nsp` spatial dims; resolves SAME_* and VALID to explicit pads
// (static spatial dims needed for SAME_*). Returns false in `same_symbolic` cases handled by pad_mode "same".
Window read_window(NodeCtx& c, Value* x, const Ints& kernel, int nsp, std::string* pad_mode) {
  Window w;
  w.kernel = kernel;
  w.strides = c.attr_ints("strides", Ints(nsp, 1));
  w.dilations = c.attr_ints("dilations", Ints(nsp, 1));
  w.pads = c.attr_ints("pads", Ints(2 * nsp, 0));
  if (static_cast<int>(w.strides.size()) != nsp || static_cast<int>(w.dilations.size()) != nsp ||
      static_cast<int>(w.pads.size()) != 2 * nsp || static_cast<int>(w.kernel.size()) != nsp)
    c.fail(ErrorCode::invalid_argument, "kernel/strides/dilations/pads do not match {} spatial dims", nsp);
  const std::string auto_pad = c.attr_s("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    std::fill(w.pads.begin(), w.pads.end(), 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    bool all_static = true;
    for (int i = 0; i < nsp; ++i) all_static = all_static && x->type.dims[2 + i].is_static();
    if (!all_static) {
      if (auto_pad == "SAME_LOWER" || !pad_mode)
        c.fail(ErrorCode::unsupported, "auto_pad {} needs static spatial dims (input is {})", auto_pad, x->type.str());
      *pad_mode = "same";
      std::fill(w.pads.begin(), w.pads.end(), 0);
      return w;
    }
    for (int i = 0; i < nsp; ++i) {
      auto [b, e] = same_pads(x->type.dims[2 + i].size, w.kernel[i], w.strides[i], w.dilations[i], auto_pad == "SAME_UPPER");
      w.pads[i] = b;
      w.pads[nsp + i] = e;
    }
  } else if (auto_pad != "NOTSET" && !auto_pad.empty()) {
    c.fail(ErrorCode::invalid_argument, "unknown auto_pad '{}'", auto_pad);
  }
  return w;
}

// 1-D windows run as 2-D with a unit H dim.
Window to_2d(const Window& w) {
  return {{1, w.kernel[0]}, {1, w.strides[0]}, {1, w.dilations[0]}, {0, w.pads[0], 0, w.pads[1]}};
}

std::string check_spatial(const onnx::NodeProto& n, int, const NodeInfo& info) {
  if (const auto* a = find_attr(n, "kernel_shape"); a && a->ints_size() > 3)
    return fmt::format("{}-D windows (spore has 1-D, 2-D and 3-D)", a->ints_size());
  for (int i = 0; i < 2; ++i)
    if (info.rank(i) > 5) return fmt::format("{}-D windows (spore has 1-D, 2-D and 3-D)", info.rank(i) - 2);
  return "";
}

// Conv's attributes applied to x, w (and bias b, may be null); ConvInteger and QLinearConv share it.
Value* conv_of(NodeCtx& c, Value* x, Value* w, Value* b) {
  const int nsp = c.rank(x) - 2;
  if (nsp < 1 || nsp > 3) c.fail(ErrorCode::unsupported, "{}-D convolution (spore has 1-D, 2-D and 3-D)", nsp);
  const Shape ws = c.static_shape(w, "weight W");
  std::string pad_mode = "pad";
  Window win = read_window(c, x, c.attr_ints("kernel_shape", Ints(ws.begin() + 2, ws.end())), nsp, &pad_mode);
  if (nsp == 1) {
    x = c.op("unsqueeze"_op, {x}, {{"axes", Ints{2}}});
    w = c.op("unsqueeze"_op, {w}, {{"axes", Ints{2}}});
    win = to_2d(win);
  }
  V ins{x, w};
  if (b) ins.push_back(b);
  Value* y = c.op(nsp == 3 ? "conv3d"_op : "conv2d"_op, ins,
                  {{"stride", win.strides},
                   {"padding", win.pads},
                   {"dilation", win.dilations},
                   {"groups", c.attr_i("group", 1)},
                   {"pad_mode", pad_mode}});
  if (nsp == 1) y = c.op("squeeze"_op, {y}, {{"axes", Ints{2}}});
  return y;
}

V emit_conv(NodeCtx& c) { return {conv_of(c, c.in(0), c.in(1), c.has_input(2) ? c.in(2) : nullptr)}; }

V emit_conv_transpose(NodeCtx& c) {
  Value* x = c.in(0);
  Value* w = c.in(1);
  Value* b = c.has_input(2) ? c.in(2) : nullptr;
  const int nsp = c.rank(x) - 2;
  if (nsp < 1 || nsp > 3)
    c.fail(ErrorCode::unsupported, "{}-D transposed convolution (spore has 1-D, 2-D and 3-D)", nsp);
  const Shape ws = c.static_shape(w, "weight W");
  const Ints kernel = c.attr_ints("kernel_shape", Ints(ws.begin() + 2, ws.end()));
  Ints strides = c.attr_ints("strides", Ints(nsp, 1));
  Ints dil = c.attr_ints("dilations", Ints(nsp, 1));
  Ints pads = c.attr_ints("pads", Ints(2 * nsp, 0));
  Ints out_pad = c.attr_ints("output_padding", Ints(nsp, 0));
  const Ints out_shape = c.attr_ints("output_shape", {});
  const std::string auto_pad = c.attr_s("auto_pad", "NOTSET");
  if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const Shape xs = c.static_shape(x, "input X");
    for (int i = 0; i < nsp; ++i) {
      const int64_t in = xs[2 + i];
      const int64_t want = out_shape.empty() ? in * strides[i] : out_shape[out_shape.size() - nsp + i];
      int64_t total = strides[i] * (in - 1) + out_pad[i] + ((kernel[i] - 1) * dil[i] + 1) - want;
      if (total < 0) {  // a larger output than the windows cover: the extra rows/cols come as output padding
        out_pad[i] -= total;
        total = 0;
      }
      if (auto_pad == "SAME_UPPER") {
        pads[i] = total / 2;
        pads[nsp + i] = total - total / 2;
      } else {
        pads[i] = total - total / 2;
        pads[nsp + i] = total / 2;
      }
    }
  } else if (auto_pad == "VALID") {
    std::fill(pads.begin(), pads.end(), 0);
  }
  if (nsp == 1) {
    x = c.op("unsqueeze"_op, {x}, {{"axes", Ints{2}}});
    w = c.op("unsqueeze"_op, {w}, {{"axes", Ints{2}}});
    strides = {1, strides[0]};
    dil = {1, dil[0]};
    pads = {0, pads[0], 0, pads[1]};
    out_pad = {0, out_pad[0]};
  }
  V ins{x, w};
  if (b) ins.push_back(b);
  Value* y = c.op(nsp == 3 ? "conv_transpose3d"_op : "conv_transpose2d"_op, ins,
                  {{"stride", strides},
                   {"padding", pads},
                   {"output_padding", out_pad},
                   {"dilation", dil},
                   {"groups", c.attr_i("group", 1)}});
  if (nsp == 1) y = c.op("squeeze"_op, {y}, {{"axes", Ints{2}}});
  return {y};
}

// MaxPool with its Indices output: each window's elements gathered from the flattened input (padding reads a
// -inf slot) by a constant [windows, window size] table, the first maximum's position taken by argmax and mapped
// to the flat index ONNX defines: ((n * C + c) * D1 + d1) * D2 + d2 ... over the unpadded input (row-major), or
// with the spatial dims in column-major order for storage_order = 1.
V emit_max_pool_with_indices(NodeCtx& c) {
  Value* x = c.in(0);
  const Shape s = c.static_shape(x, "input X");
  const int nsp = static_cast<int>(s.size()) - 2;
  if (nsp < 1 || nsp > 3) c.fail(ErrorCode::unsupported, "{}-D pooling (spore has 1-D, 2-D and 3-D)", nsp);
  const Window win = read_window(c, x, c.attr_ints("kernel_shape"), nsp, nullptr);
  const bool ceil_mode = c.attr_i("ceil_mode", 0) != 0, col_major = c.attr_i("storage_order", 0) != 0;
  Ints in(s.begin() + 2, s.end()), out(static_cast<size_t>(nsp));
  for (int i = 0; i < nsp; ++i) {
    const int64_t eff = (win.kernel[i] - 1) * win.dilations[i] + 1;
    const int64_t span = in[i] + win.pads[i] + win.pads[nsp + i] - eff;
    if (span < 0) c.fail(ErrorCode::invalid_argument, "the window ({}) is larger than the padded input dim {}", eff, i);
    int64_t o = (ceil_mode ? (span + win.strides[i] - 1) / win.strides[i] : span / win.strides[i]) + 1;
    if (ceil_mode && (o - 1) * win.strides[i] >= in[i] + win.pads[i]) --o;  // the last window starts in the input
    out[i] = o;
  }
  const int64_t n_win = std::accumulate(out.begin(), out.end(), int64_t{1}, std::multiplies<>());
  const int64_t k_sz = std::accumulate(win.kernel.begin(), win.kernel.end(), int64_t{1}, std::multiplies<>());
  const int64_t plane = std::accumulate(in.begin(), in.end(), int64_t{1}, std::multiplies<>());
  // table[o * k_sz + j]: the row-major flat position of window o's element j (plane = padding);
  // onnx_pos: the same element's index as ONNX reports it (storage order).
  std::vector<int64_t> table(static_cast<size_t>(n_win * k_sz)), onnx_pos(table.size());
  Ints oi(static_cast<size_t>(nsp), 0);
  for (int64_t o = 0; o < n_win; ++o) {
    for (int64_t j = 0, rem = o; j < nsp; ++j) {  // o -> multi-index (row-major)
      const int64_t d = nsp - 1 - j;
      oi[static_cast<size_t>(d)] = rem % out[d];
      rem /= out[d];
    }
    for (int64_t kj = 0; kj < k_sz; ++kj) {
      int64_t rest = kj, row = 0, col = 0, col_stride = 1;
      bool inside = true;
      Ints pos(static_cast<size_t>(nsp));
      for (int d = nsp - 1; d >= 0; --d) {
        const int64_t kd = rest % win.kernel[d];
        rest /= win.kernel[d];
        pos[static_cast<size_t>(d)] = oi[static_cast<size_t>(d)] * win.strides[d] - win.pads[d] + kd * win.dilations[d];
        inside = inside && pos[static_cast<size_t>(d)] >= 0 && pos[static_cast<size_t>(d)] < in[d];
      }
      for (int d = 0; d < nsp; ++d) row = row * in[d] + pos[static_cast<size_t>(d)];
      for (int d = 0; d < nsp; ++d) {
        col += pos[static_cast<size_t>(d)] * col_stride;
        col_stride *= in[d];
      }
      const auto at = static_cast<size_t>(o * k_sz + kj);
      table[at] = inside ? row : plane;
      onnx_pos[at] = inside ? (col_major ? col : row) : 0;
    }
  }
  const DType dt = c.dtype(x);
  const DType vt = is_floating(dt) ? dt : DType::f64;  // integers: exact in f64, -inf below every value
  const int64_t n = s[0], ch = s[1];
  Value* flat = c.reshape(c.cast(x, vt), {n, ch, plane});
  flat = c.op("concat"_op, {flat, full_value(c, {n, ch, 1}, -std::numeric_limits<double>::infinity(), vt)},
              {{"axis", int64_t{2}}});
  Value* g = c.op("gather"_op, {flat, c.konst(Tensor::from_vector(table, {n_win, k_sz}))}, {{"axis", int64_t{2}}});
  Value* am = c.op("argmax"_op, {g}, {{"axis", int64_t{3}}, {"keepdims", true}});  // first maximum
  Value* y = c.reshape(c.op("gather_elements"_op, {g, am}, {{"axis", int64_t{3}}}), {n, ch, n_win});
  std::vector<int64_t> base(static_cast<size_t>(n_win));
  for (int64_t o = 0; o < n_win; ++o) base[static_cast<size_t>(o)] = o * k_sz;
  Value* at = c.op("add"_op, {c.reshape(am, {n, ch, n_win}), c.konst(Tensor::from_vector(base, {n_win}))});
  Value* idx = c.op("gather"_op, {c.konst(Tensor::from_vector(onnx_pos, {n_win * k_sz})), at}, {{"axis", int64_t{0}}});
  std::vector<int64_t> offs(static_cast<size_t>(n * ch));
  for (int64_t i = 0; i < n * ch; ++i) offs[static_cast<size_t>(i)] = i * plane;
  idx = c.op("add"_op, {idx, c.konst(Tensor::from_vector(offs, {n, ch, 1}))});
  Ints ys{n, ch};
  ys.insert(ys.end(), out.begin(), out.end());
  return {c.cast(c.reshape(y, ys), dt), c.reshape(idx, ys)};
}

// MaxUnpool: X scattered into a zero tensor of the inferred shape ((in - 1) * stride + kernel - pads) at the flat
// indices I (MaxPool's, which span N and C too), then, for an output_shape larger than that, zero-padded up to it
// (total / 2 before, the rest after, as ConvTranspose splits an output_shape's padding; the indices keep
// addressing the inferred layout, as the ONNX test data has it).
V emit_max_unpool(NodeCtx& c) {
  Value* x = c.in(0);
  Value* ind = c.in(1);
  const Shape s = c.static_shape(x, "input X");
  const int nsp = static_cast<int>(s.size()) - 2;
  if (nsp < 1) c.fail(ErrorCode::invalid_argument, "input X is {}; it needs N, C and spatial dims", shape_str(s));
  if (c.static_shape(ind, "input I") != s)
    c.fail(ErrorCode::invalid_argument, "indices I are {}, X is {}", shape_str(c.static_shape(ind, "input I")),
           shape_str(s));
  const Ints k = c.attr_ints("kernel_shape"), st = c.attr_ints("strides", Ints(nsp, 1)),
             pads = c.attr_ints("pads", Ints(2 * nsp, 0));
  if (static_cast<int>(k.size()) != nsp || static_cast<int>(st.size()) != nsp ||
      static_cast<int>(pads.size()) != 2 * nsp)
    c.fail(ErrorCode::invalid_argument, "kernel_shape/strides/pads do not match {} spatial dims", nsp);
  Ints inferred{s[0], s[1]};
  for (int i = 0; i < nsp; ++i) inferred.push_back((s[2 + i] - 1) * st[i] + k[i] - pads[i] - pads[nsp + i]);
  int64_t total = 1;
  for (int64_t d : inferred) {
    if (d <= 0) c.fail(ErrorCode::invalid_argument, "the unpooled shape {} has an empty dim", shape_str(inferred));
    total *= d;
  }
  const int64_t count = std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
  Value* y = c.op(
      "scatter"_op,
      {full_value(c, {total}, 0.0, c.dtype(x)), c.reshape(c.cast(ind, DType::i64), {count}), c.reshape(x, {count})},
      {{"axis", int64_t{0}}, {"reduction", std::string("none")}});
  y = c.reshape(y, inferred);
  if (!c.has_input(2)) return {y};
  const Ints out = c.ints_in(2);
  if (static_cast<int>(out.size()) != nsp + 2)
    c.fail(ErrorCode::invalid_argument, "output_shape has {} dims, X has {}", out.size(), nsp + 2);
  Ints pad(static_cast<size_t>(2 * (nsp + 2)), 0);
  bool any = false;
  for (int i = 0; i < nsp + 2; ++i) {
    const int64_t extra = out[static_cast<size_t>(i)] - inferred[static_cast<size_t>(i)];
    if (extra < 0 || (i < 2 && extra != 0))
      c.fail(ErrorCode::invalid_argument, "output_shape {} is smaller than the unpooled shape {} (or changes N or C)",
             shape_str(out), shape_str(inferred));
    pad[static_cast<size_t>(i)] = extra / 2;
    pad[static_cast<size_t>(nsp + 2 + i)] = extra - extra / 2;
    any = any || extra > 0;
  }
  return {any ? c.op("pad"_op, {y}, {{"pads", pad}}) : y};
}

EmitFn pool(bool is_max) {
  return [is_max](NodeCtx& c) -> V {
    if (is_max && c.wants_output(1)) return emit_max_pool_with_indices(c);
    Value* x = c.in(0);
    const int nsp = c.rank(x) - 2;
    if (nsp < 1 || nsp > 3) c.fail(ErrorCode::unsupported, "{}-D pooling (spore has 1-D, 2-D and 3-D)", nsp);
    const OpId max_op = nsp == 3 ? "max_pool3d"_op : "max_pool2d"_op,
               avg_op = nsp == 3 ? "avg_pool3d"_op : "avg_pool2d"_op;
    std::string pad_mode = "pad";
    Window win = read_window(c, x, c.attr_ints("kernel_shape"), nsp, &pad_mode);
    if (nsp == 1) {
      x = c.op("unsqueeze"_op, {x}, {{"axes", Ints{2}}});
      win = to_2d(win);
    }
    Attrs a{{"kernel", win.kernel}, {"stride", win.strides}, {"padding", win.pads},
            {"ceil_mode", c.attr_i("ceil_mode", 0) != 0}, {"pad_mode", pad_mode}};
    Value* y;
    if (is_max) {
      a.set("dilation", win.dilations);
      const DType dt = c.dtype(x);
      if (!is_floating(dt)) {  // spore pools floats; small integers are exact in f32, the rest in f64
        const DType ft = dt == DType::u8 || dt == DType::i8 ? DType::f32 : DType::f64;
        y = c.cast(c.op(max_op, {c.cast(x, ft)}, a), dt);
      } else {
        y = c.op(max_op, {x}, a);
      }
    } else {
      for (int64_t d : win.dilations)  // opset 19 added dilations to AveragePool
        if (d != 1) c.fail(ErrorCode::unsupported, "AveragePool with dilations (spore's avg_pool2d/3d have none)");
      a.set("count_include_pad", c.attr_i("count_include_pad", 0) != 0);
      y = c.op(avg_op, {x}, a);
    }
    if (nsp == 1) y = c.op("squeeze"_op, {y}, {{"axes", Ints{2}}});
    return {y};
  };
}

// storage_order only changes the Indices output, which emit_max_pool_with_indices honours.
std::string check_maxpool(const onnx::NodeProto& n, int since, const NodeInfo& info) {
  return check_spatial(n, since, info);
}

Ints spatial_axes(int rank) {
  Ints a;
  for (int i = 2; i < rank; ++i) a.push_back(i);
  return a;
}

// ------------------------------------------------------------------------------------------- linear algebra

V emit_gemm(NodeCtx& c) {
  Value* a = c.in(0);
  Value* b = c.in(1);
  Value* cc = c.has_input(2) ? c.in(2) : nullptr;
  const bool ta = c.attr_i("transA", 0) != 0, tb = c.attr_i("transB", 0) != 0;
  const double alpha = c.attr_f("alpha", 1.0), beta = c.attr_f("beta", 1.0);
  if (!ta && tb && alpha == 1.0 && (!cc || (beta == 1.0 && c.rank(cc) == 1))) {  // the Linear layer pattern
    V ins{a, b};
    if (cc) ins.push_back(cc);
    return {c.op("linear"_op, ins)};
  }
  Value* y = mulc(c, c.op("matmul"_op, {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}}), alpha);
  if (cc && beta != 0.0) y = c.op("add"_op, {y, mulc(c, cc, beta)});
  return {y};
}

// ------------------------------------------------------------------------------------------- normalization

// BatchNormalization-14/15 with training_mode = 1: Y normalised by the batch's own mean and (population) variance
// over every axis but 1, and the running statistics updated as input * momentum + batch * (1 - momentum).
V emit_batch_norm_training(NodeCtx& c) {
  Value* x = c.in(0);
  const int r = c.rank(x);
  if (r < 2) c.fail(ErrorCode::invalid_argument, "input X has rank {}; it needs a channel dim", r);
  Ints axes{0}, bshape(static_cast<size_t>(r), 1);
  for (int i = 2; i < r; ++i) axes.push_back(i);
  bshape[1] = -1;
  Value* mean = c.op("reduce_mean"_op, {x}, {{"axes", axes}, {"keepdims", false}});
  Value* d = c.op("sub"_op, {x, c.reshape(mean, bshape)});
  Value* var = c.op("reduce_mean"_op, {c.op("mul"_op, {d, d})}, {{"axes", axes}, {"keepdims", false}});
  V outs{c.op("batch_norm"_op, {x, c.in(1), c.in(2), mean, var}, {{"epsilon", c.attr_f("epsilon", 1e-5)}})};
  const double momentum = c.attr_f("momentum", 0.9);
  auto blend = [&](Value* running, Value* batch) {
    return c.op("add"_op, {mulc(c, c.cast(running, c.dtype(batch)), momentum), mulc(c, batch, 1.0 - momentum)});
  };
  if (c.wants_output(1)) outs.push_back(blend(c.in(3), mean));
  if (c.wants_output(2)) outs.push_back(blend(c.in(4), var));
  return outs;
}

V emit_batch_norm(NodeCtx& c) {
  if (c.since >= 14 && c.attr_i("training_mode", 0) != 0) return emit_batch_norm_training(c);
  return {c.op("batch_norm"_op, {c.in(0), c.in(1), c.in(2), c.in(3), c.in(4)}, {{"epsilon", c.attr_f("epsilon", 1e-5)}})};
}
std::string check_batch_norm(const onnx::NodeProto& n, int since, const NodeInfo&) {
  if (since >= 14 && node_attr_i(n, "training_mode", 0) != 0) return "";
  for (int i = 1; i < n.output_size(); ++i)
    if (!n.output(i).empty())
      return "training outputs without training_mode (BatchNormalization before opset 14: re-export at opset 14+, "
             "where training_mode=1 gives the running mean/var)";
  if (since < 9 && node_attr_i(n, "spatial", 1) == 0) return "spatial=0 (per-activation statistics)";
  return "";
}

V emit_instance_norm(NodeCtx& c) {
  Value* x = c.in(0);
  const Dim& ch = x->type.dims.at(1);
  if (!ch.is_static()) c.fail(ErrorCode::unsupported, "needs a static channel dim (input is {})", x->type.str());
  return {c.op("group_norm"_op, {x, c.in(1), c.in(2)}, {{"num_groups", ch.size}, {"epsilon", c.attr_f("epsilon", 1e-5)}})};
}

V emit_layer_norm(NodeCtx& c) {
  Value* x = c.in(0);
  const int r = c.rank(x);
  const int64_t axis = c.norm_axis(c.attr_i("axis", -1), r);
  const double eps = c.attr_f("epsilon", 1e-5);
  std::vector<Dim> norm_dims(x->type.dims.begin() + axis, x->type.dims.end());
  auto fit = [&](Value* p) -> Value* {  // weight/bias must have the normalized shape; ONNX lets them broadcast
    if (p->type.dims == norm_dims) return p;
    Ints shape;
    for (const Dim& d : norm_dims) {
      if (!d.is_static()) c.fail(ErrorCode::unsupported, "Scale/B broadcast over a symbolic dim");
      shape.push_back(d.size);
    }
    return c.op("expand"_op, {p}, {{"shape", shape}});
  };
  V ins{x, fit(c.in(1))};
  if (c.has_input(2)) ins.push_back(fit(c.in(2)));
  V outs{c.op("layer_norm"_op, ins, {{"axis", axis}, {"epsilon", eps}})};
  if (c.wants_output(1) || c.wants_output(2)) {
    Ints axes;
    for (int i = static_cast<int>(axis); i < r; ++i) axes.push_back(i);
    Value* mean = c.op("reduce_mean"_op, {x}, {{"axes", axes}, {"keepdims", true}});
    Value* d = c.op("sub"_op, {x, mean});
    Value* var = c.op("reduce_mean"_op, {c.op("mul"_op, {d, d})}, {{"axes", axes}, {"keepdims", true}});
    outs.push_back(mean);
    outs.push_back(c.op("rsqrt"_op, {addc(c, var, eps)}));
  }
  return outs;
}

// LRN: sum of squares over a window of channels as an average pool over a [N,1,C,H*W] view.
V emit_lrn(NodeCtx& c) {
  Value* x = c.in(0);
  const Shape s = c.static_shape(x, "input X");
  const int64_t size = c.attr_i("size", 1);
  const double alpha = c.attr_f("alpha", 1e-4), beta = c.attr_f("beta", 0.75), bias = c.attr_f("bias", 1.0);
  int64_t rest = 1;
  for (size_t i = 2; i < s.size(); ++i) rest *= s[i];
  Value* sq = c.reshape(c.op("mul"_op, {x, x}), {s[0], 1, s[1], rest});
  const int64_t lo = (size - 1) / 2, hi = (size - 1) - lo;
  Value* avg = c.op("avg_pool2d"_op, {sq},
                    {{"kernel", Ints{size, 1}}, {"stride", Ints{1, 1}}, {"padding", Ints{lo, 0, hi, 0}},
                     {"count_include_pad", true}});
  Value* sum = mulc(c, c.reshape(avg, s), static_cast<double>(size));
  Value* den = c.op("pow"_op, {addc(c, mulc(c, sum, alpha / static_cast<double>(size)), bias), c.scalar(beta, c.dtype(x))});
  return {c.op("div"_op, {x, den})};
}

// Softmax, LogSoftmax, Hardmax: before opset 13 they coerce the input to 2-D at `axis` (default 1).
EmitFn softmax_like(OpId id, bool hard) {
  return [id, hard](NodeCtx& c) -> V {
    Value* x = c.in(0);
    const int r = c.rank(x);
    const bool legacy = c.since < 13;
    const int64_t axis = c.norm_axis(c.attr_i("axis", legacy ? 1 : -1), r);
    auto apply = [&](Value* v, int64_t ax) -> Value* {
      if (!hard) return c.op(id, {v}, {{"axis", ax}});
      const Dim& d = v->type.dims.at(ax);
      if (!d.is_static()) c.fail(ErrorCode::unsupported, "Hardmax over a symbolic dim");
      Value* idx = c.op("argmax"_op, {v}, {{"axis", ax}, {"keepdims", false}});
      return c.op("one_hot"_op, {idx}, {{"depth", d.size}, {"dtype", c.dtype(v)}, {"axis", ax}});
    };
    if (!legacy || axis == r - 1) return {apply(x, axis)};
    const Shape s = c.static_shape(x, "input");
    Value* flat = c.op("flatten"_op, {x}, {{"axis", axis}});
    return {c.reshape(apply(flat, 1), s)};
  };
}

// ------------------------------------------------------------------------------------------- reductions

enum class Red { sum, mean, max, min, prod, l1, l2, log_sum, log_sum_exp, sum_square };

EmitFn reduce(Red kind) {
  return [kind](NodeCtx& c) -> V {
    Value* x = c.in(0);
    const bool keep = c.attr_i("keepdims", 1) != 0;
    Ints axes;
    if ((c.since >= 13 && kind == Red::sum) || c.since >= 18) {  // opset 18 moved every reduction's axes to input 1
      if (c.has_input(1)) axes = c.ints_in(1);
    } else {
      axes = c.attr_ints("axes", {});
    }
    if (axes.empty() && c.attr_i("noop_with_empty_axes", 0) != 0) return {c.op("identity"_op, {x})};
    axes = normalize_axes(c, axes, c.rank(x));
    if (axes.empty())
      for (int i = 0; i < c.rank(x); ++i) axes.push_back(i);
    const Attrs a{{"axes", axes}, {"keepdims", keep}};
    switch (kind) {
      case Red::sum: return {c.op("reduce_sum"_op, {x}, a)};
      case Red::mean: return {c.op("reduce_mean"_op, {x}, a)};
      case Red::max: return {c.op("reduce_max"_op, {x}, a)};
      case Red::min: return {c.op("reduce_min"_op, {x}, a)};
      case Red::prod: return {c.op("reduce_prod"_op, {x}, a)};
      case Red::l1: return {c.op("reduce_sum"_op, {c.op("abs"_op, {x})}, a)};
      case Red::l2: {
        Value* s = c.op("reduce_sum"_op, {c.op("mul"_op, {x, x})}, a);
        if (is_floating(c.dtype(x))) return {c.op("sqrt"_op, {s})};
        return {c.cast(c.op("sqrt"_op, {c.cast(s, DType::f64)}), c.dtype(x))};
      }
      case Red::log_sum: return {c.op("log"_op, {c.op("reduce_sum"_op, {x}, a)})};
      case Red::sum_square: return {c.op("reduce_sum"_op, {c.op("mul"_op, {x, x})}, a)};
      case Red::log_sum_exp: {
        Value* m = c.op("reduce_max"_op, {x}, {{"axes", axes}, {"keepdims", true}});
        // Rows that are all -inf give max -inf; subtracting it would make nan, so shift by 0 there.
        Value* finite = c.op("eq"_op, {m, c.op("sub"_op, {m, m})});
        Value* shift = c.op("where"_op, {finite, m, zero_like(c, m)});
        Value* s = c.op("reduce_sum"_op, {c.op("exp"_op, {c.op("sub"_op, {x, shift})})}, a);
        Value* ms = keep ? shift : c.op("squeeze"_op, {shift}, {{"axes", axes}});
        return {c.op("add"_op, {c.op("log"_op, {s}), ms})};
      }
    }
    return {};
  };
}

EmitFn arg_reduce(OpId id) {
  return [id](NodeCtx& c) -> V {
    Value* x = c.in(0);
    const int64_t axis = c.norm_axis(c.attr_i("axis", 0), c.rank(x));
    const bool keep = c.attr_i("keepdims", 1) != 0;
    const Attrs a{{"axis", axis}, {"keepdims", keep}};
    if (c.attr_i("select_last_index", 0) == 0) return {c.op(id, {x}, a)};
    const Dim& d = x->type.dims.at(axis);
    if (!d.is_static()) c.fail(ErrorCode::unsupported, "select_last_index over a symbolic dim");
    Value* rev = c.op("slice"_op, {x},
                      {{"starts", Ints{-1}}, {"ends", Ints{std::numeric_limits<int64_t>::min()}}, {"axes", Ints{axis}},
                       {"steps", Ints{-1}}});
    Value* i = c.op(id, {rev}, a);
    return {c.op("sub"_op, {c.scalar(static_cast<double>(d.size - 1), DType::i64), i})};
  };
}

// ------------------------------------------------------------------------------------------- shapes

Ints axes_input_or_attr(NodeCtx& c, int input) {
  if (c.since >= 13) return c.has_input(input) ? c.ints_in(input) : Ints{};
  return c.attr_ints("axes", {});
}

V emit_reshape(NodeCtx& c) {
  Value* x = c.in(0);
  Ints shape = c.since < 5 ? c.attr_ints("shape") : c.ints_in(1);
  const bool allowzero = c.attr_i("allowzero", 0) != 0;
  const bool has_minus1 = std::count(shape.begin(), shape.end(), -1) > 0;
  bool used_minus1 = has_minus1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != 0 || allowzero) continue;
    if (static_cast<int>(i) >= c.rank(x)) c.fail(ErrorCode::invalid_argument, "shape[{}] = 0 copies a dim the input lacks", i);
    const Dim& d = x->type.dims[i];
    if (d.is_static()) {
      shape[i] = d.size;
    } else if (!used_minus1) {
      shape[i] = -1;  // the symbolic dim is the one size the element count leaves open
      used_minus1 = true;
    } else {
      c.fail(ErrorCode::unsupported, "shape copies symbolic dim '{}' and also has a -1", d.sym);
    }
  }
  return {c.reshape(x, shape)};
}

V emit_shape(NodeCtx& c) {
  Value* x = c.in(0);
  const int r = c.rank(x);
  int64_t start = c.attr_i("start", 0), end = c.attr_i("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) {
    const Dim& d = x->type.dims[i];
    if (!d.is_static())
      c.fail(ErrorCode::unsupported, "Shape of '{}' ({}) has the symbolic dim '{}': spore folds Shape at import; fix the "
             "input shapes (--input-shape) or export with static shapes", x->name, x->type.str(), d.sym);
    dims.push_back(d.size);
  }
  return {c.konst(Tensor::from_vector<int64_t>(dims, {static_cast<int64_t>(dims.size())}))};
}

V emit_size(NodeCtx& c) {
  Value* x = c.in(0);
  const int64_t n = x->type.numel();
  if (n < 0) c.fail(ErrorCode::unsupported, "Size of '{}' ({}) with symbolic dims", x->name, x->type.str());
  return {c.konst(Tensor::scalar(static_cast<double>(n), DType::i64))};
}

V emit_flatten(NodeCtx& c) {
  Value* x = c.in(0);
  const int r = c.rank(x);
  int64_t axis = c.attr_i("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) c.fail(ErrorCode::invalid_argument, "axis {} out of range for rank {}", c.attr_i("axis", 1), r);
  if (axis == 0) {  // [1, all]
    Value* f = c.op("flatten"_op, {x}, {{"axis", int64_t{0}}});
    return {f};
  }
  return {c.op("flatten"_op, {x}, {{"axis", axis}})};
}

V emit_squeeze(NodeCtx& c) {
  Value* x = c.in(0);
  Ints axes = normalize_axes(c, axes_input_or_attr(c, 1), c.rank(x));
  return {c.op("squeeze"_op, {x}, {{"axes", axes}})};
}

V emit_unsqueeze(NodeCtx& c) {
  Value* x = c.in(0);
  Ints axes = axes_input_or_attr(c, 1);
  const int out_rank = c.rank(x) + static_cast<int>(axes.size());
  axes = normalize_axes(c, axes, out_rank);
  std::sort(axes.begin(), axes.end());
  return {c.op("unsqueeze"_op, {x}, {{"axes", axes}})};
}

V emit_concat(NodeCtx& c) {
  V ins;
  for (Value* v : c.inputs())
    if (v) ins.push_back(v);
  if (ins.empty()) c.fail(ErrorCode::invalid_argument, "needs inputs");
  const int64_t axis = c.norm_axis(c.attr_i("axis", 0), c.rank(ins[0]));
  if (ins.size() == 1) return {c.op("identity"_op, ins)};
  return {c.op("concat"_op, ins, {{"axis", axis}})};
}

V emit_split(NodeCtx& c) {
  Value* x = c.in(0);
  const int64_t axis = c.norm_axis(c.attr_i("axis", 0), c.rank(x));
  Ints sizes = c.since >= 13 ? (c.has_input(1) ? c.ints_in(1) : Ints{}) : c.attr_ints("split", {});
  const int n = c.node.output_size();
  if (sizes.empty()) {
    const Dim& d = x->type.dims.at(axis);
    if (!d.is_static()) c.fail(ErrorCode::unsupported, "an even split of symbolic dim '{}'", d.sym);
    if (c.since >= 18 && c.has_attr("num_outputs")) {
      // opset 18: num_outputs chunks of ceil(size / num_outputs), the last one smaller when it does not divide
      const int64_t k = c.attr_i("num_outputs", n);
      if (k != n) c.fail(ErrorCode::invalid_argument, "num_outputs is {} but the node has {} outputs", k, n);
      const int64_t chunk = (d.size + k - 1) / k;
      if (k <= 0 || (k > 1 && chunk * (k - 1) >= d.size))
        c.fail(ErrorCode::invalid_argument, "dim {} ({}) cannot be split into {} non-empty chunks", axis, d.size, k);
      sizes.assign(static_cast<size_t>(k), chunk);
      sizes.back() = d.size - chunk * (k - 1);
    } else {
      if (n <= 0 || d.size % n != 0) c.fail(ErrorCode::invalid_argument, "dim {} ({}) does not split evenly into {} outputs", axis, d.size, n);
      sizes.assign(n, d.size / n);
    }
  }
  if (static_cast<int>(sizes.size()) != n)
    c.fail(ErrorCode::invalid_argument, "{} split sizes for {} outputs", sizes.size(), n);
  return c.op_n("split"_op, {x}, {{"sizes", sizes}, {"axis", axis}});
}

V emit_slice(NodeCtx& c) {
  Value* x = c.in(0);
  Ints starts, ends, axes, steps;
  if (c.since < 10) {
    starts = c.attr_ints("starts");
    ends = c.attr_ints("ends");
    axes = c.attr_ints("axes", {});
  } else {
    starts = c.ints_in(1);
    ends = c.ints_in(2);
    if (c.has_input(3)) axes = c.ints_in(3);
    if (c.has_input(4)) steps = c.ints_in(4);
  }
  if (!axes.empty()) axes = normalize_axes(c, axes, c.rank(x));
  return {c.op("slice"_op, {x}, {{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}})};
}

V emit_transpose(NodeCtx& c) {
  Value* x = c.in(0);
  Ints perm = c.attr_ints("perm", {});
  if (perm.empty())
    for (int i = c.rank(x) - 1; i >= 0; --i) perm.push_back(i);
  return {c.op("transpose"_op, {x}, {{"perm", perm}})};
}

V emit_pad(NodeCtx& c) {
  Value* x = c.in(0);
  const std::string mode = c.attr_s("mode", "constant");
  Ints pads;
  double value = 0;
  if (c.since < 11) {
    pads = c.attr_ints(c.since < 2 ? "paddings" : "pads");
    value = c.attr_f("value", 0.0);
  } else {
    pads = c.ints_in(1);
    if (c.has_input(2)) value = c.floats_in(2).at(0);
  }
  if (c.has_input(3)) {  // opset 18: pads cover only these axes ([begin..., end...] in the axes' order)
    const int r = c.rank(x);
    const Ints axes = normalize_axes(c, c.ints_in(3), r);
    if (pads.size() != 2 * axes.size())
      c.fail(ErrorCode::invalid_argument, "{} pads for {} axes (want 2 per axis)", pads.size(), axes.size());
    Ints full(2 * static_cast<size_t>(r), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      full[static_cast<size_t>(axes[i])] = pads[i];
      full[static_cast<size_t>(axes[i] + r)] = pads[i + axes.size()];
    }
    pads = std::move(full);
  }
  if (mode != "constant" && mode != "reflect" && mode != "edge") c.fail(ErrorCode::unsupported, "pad mode '{}'", mode);
  return {c.op("pad"_op, {x}, {{"pads", pads}, {"mode", mode}, {"value", value}})};
}
std::string check_pad(const onnx::NodeProto& n, int, const NodeInfo&) {
  const std::string mode = node_attr_s(n, "mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge") return "pad mode '" + mode + "'";
  return "";
}

// GroupNormalization: opset 18 gives scale and bias per group, opset 21 per channel (spore's group_norm).
V emit_group_norm(NodeCtx& c) {
  Value* x = c.in(0);
  const int64_t groups = c.attr_i("num_groups", 0);
  if (c.rank(x) < 2) c.fail(ErrorCode::invalid_argument, "input of rank {} (want [N, C, ...])", c.rank(x));
  const Dim& cd = x->type.dims[1];
  if (!cd.is_static()) c.fail(ErrorCode::unsupported, "a symbolic channel dim '{}'", cd.sym);
  if (groups <= 0 || cd.size % groups != 0)
    c.fail(ErrorCode::invalid_argument, "{} channels do not split into num_groups = {}", cd.size, groups);
  Value* w = c.in(1);
  Value* b = c.in(2);
  if (c.since < 21) {  // per group -> per channel: channel i takes group i / (C / groups)
    std::vector<int64_t> idx(static_cast<size_t>(cd.size));
    for (int64_t i = 0; i < cd.size; ++i) idx[static_cast<size_t>(i)] = i / (cd.size / groups);
    Value* iv = c.konst(Tensor::from_vector(idx, {cd.size}));
    w = c.op("gather"_op, {w, iv}, {{"axis", int64_t{0}}});
    b = c.op("gather"_op, {b, iv}, {{"axis", int64_t{0}}});
  }
  return {c.op("group_norm"_op, {x, w, b}, {{"num_groups", groups}, {"epsilon", c.attr_f("epsilon", 1e-5)}})};
}

V emit_gather(NodeCtx& c) {
  Value* x = c.in(0);
  return {c.op("gather"_op, {x, c.in(1)}, {{"axis", c.norm_axis(c.attr_i("axis", 0), c.rank(x))}})};
}
V emit_gather_elements(NodeCtx& c) {
  Value* x = c.in(0);
  return {c.op("gather_elements"_op, {x, c.in(1)}, {{"axis", c.norm_axis(c.attr_i("axis", 0), c.rank(x))}})};
}
V emit_scatter_elements(NodeCtx& c) {
  Value* x = c.in(0);
  return {c.op("scatter"_op, {x, c.in(1), c.in(2)},
               {{"axis", c.norm_axis(c.attr_i("axis", 0), c.rank(x))}, {"reduction", c.attr_s("reduction", "none")}})};
}
std::string check_scatter(const onnx::NodeProto& n, int, const NodeInfo&) {
  const std::string r = node_attr_s(n, "reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min") return "reduction '" + r + "'";
  return "";
}

V emit_gather_nd(NodeCtx& c) {
  return {c.op("gather_nd"_op, {c.in(0), c.in(1)}, {{"batch_dims", c.attr_i("batch_dims", 0)}})};
}
V emit_scatter_nd(NodeCtx& c) {
  return {c.op("scatter_nd"_op, {c.in(0), c.in(1), c.in(2)}, {{"reduction", c.attr_s("reduction", "none")}})};
}

// GridSample: opset 16's mode names (bilinear, bicubic) and opset 20's (linear, cubic); 4-D input only.
std::string grid_sample_mode(const std::string& m) {
  if (m == "linear" || m == "bilinear") return "bilinear";
  if (m == "cubic" || m == "bicubic") return "bicubic";
  if (m == "nearest") return m;
  return "";
}
V emit_grid_sample(NodeCtx& c) {
  Value* x = c.in(0);
  if (c.rank(x) != 4)
    c.fail(ErrorCode::unsupported, "a {}-D input (grid_sample takes [N, C, H, W]; no volumetric sampling)", c.rank(x));
  const std::string mode = grid_sample_mode(c.attr_s("mode", c.since >= 20 ? "linear" : "bilinear"));
  if (mode.empty()) c.fail(ErrorCode::unsupported, "mode '{}'", c.attr_s("mode", ""));
  return {c.op("grid_sample"_op, {x, c.in(1)},
               {{"mode", mode},
                {"padding_mode", c.attr_s("padding_mode", "zeros")},
                {"align_corners", c.attr_i("align_corners", 0) != 0}})};
}
std::string check_grid_sample(const onnx::NodeProto& n, int, const NodeInfo& info) {
  const std::string m = node_attr_s(n, "mode", "bilinear");
  if (grid_sample_mode(m).empty()) return "mode '" + m + "'";
  const std::string p = node_attr_s(n, "padding_mode", "zeros");
  if (p != "zeros" && p != "border" && p != "reflection") return "padding_mode '" + p + "'";
  if (const int r = info.rank(0); r >= 0 && r != 4) return "a " + std::to_string(r) + "-D input (4-D only)";
  return "";
}

// RoiAlign: opset 10 has no coordinate_transformation_mode and behaves as "output_half_pixel".
V emit_roi_align(NodeCtx& c) {
  return {c.op("roi_align"_op, {c.in(0), c.in(1), c.in(2)},
               {{"output_height", c.attr_i("output_height", 1)},
                {"output_width", c.attr_i("output_width", 1)},
                {"sampling_ratio", c.attr_i("sampling_ratio", 0)},
                {"spatial_scale", c.attr_f("spatial_scale", 1.0)},
                {"mode", c.attr_s("mode", "avg")},
                {"coordinate_transformation_mode",
                 c.attr_s("coordinate_transformation_mode", c.since >= 16 ? "half_pixel" : "output_half_pixel")}})};
}

// Col2Im (opset 18), 2-D images: the columns [N, C*kh*kw, L] as [N, C*K, Lh, Lw], put back by a depthwise
// conv_transpose2d whose kernel for channel c*K + k is one-hot at block offset k, so each image element sums the
// column entries that cover it (what Col2Im adds).
V emit_col2im(NodeCtx& c) {
  Value* x = c.in(0);
  const Ints image = c.ints_in(1), block = c.ints_in(2);
  if (image.size() != 2 || block.size() != 2)
    c.fail(ErrorCode::unsupported, "a {}-D image (spore's Col2Im is 2-D)", image.size());
  const Ints dil = c.attr_ints("dilations", {1, 1}), strides = c.attr_ints("strides", {1, 1});
  const Ints pads = c.attr_ints("pads", {0, 0, 0, 0});
  if (dil.size() != 2 || strides.size() != 2 || pads.size() != 4)
    c.fail(ErrorCode::invalid_argument, "dilations, strides and pads must have 2, 2 and 4 values");
  const Shape xs = c.static_shape(x, "input");
  if (xs.size() != 3) c.fail(ErrorCode::invalid_argument, "input of rank {} (want [N, C * block size, L])", xs.size());
  const int64_t K = block[0] * block[1];
  if (K <= 0 || xs[1] % K != 0)
    c.fail(ErrorCode::invalid_argument, "input dim 1 ({}) is not a multiple of the block size {}", xs[1], K);
  Ints L(2), out_pad(2);
  for (size_t i = 0; i < 2; ++i) {
    const int64_t span = dil[i] * (block[i] - 1) + 1;
    L[i] = (image[i] + pads[i] + pads[i + 2] - span) / strides[i] + 1;
    out_pad[i] = image[i] - ((L[i] - 1) * strides[i] - pads[i] - pads[i + 2] + span);
  }
  if (L[0] < 1 || L[1] < 1 || L[0] * L[1] != xs[2])
    c.fail(ErrorCode::invalid_argument, "input dim 2 ({}) is not the {} x {} blocks of the image", xs[2], L[0], L[1]);
  const int64_t C = xs[1] / K;
  std::vector<double> w(static_cast<size_t>(C * K * K), 0.0);
  for (int64_t ch = 0; ch < C; ++ch)
    for (int64_t k = 0; k < K; ++k) w[static_cast<size_t>((ch * K + k) * K + k)] = 1.0;
  Value* wv = c.konst(Tensor::from_doubles(w, {C * K, 1, block[0], block[1]}, c.dtype(x)));
  return {
      c.op("conv_transpose2d"_op, {c.reshape(x, {xs[0], xs[1], L[0], L[1]}), wv},
           {{"stride", strides}, {"padding", pads}, {"output_padding", out_pad}, {"dilation", dil}, {"groups", C}})};
}

V emit_einsum(NodeCtx& c) {
  std::vector<Value*> ins;
  for (int i = 0; i < c.num_inputs(); ++i) ins.push_back(c.in(i));
  return {c.op("einsum"_op, ins, {{"equation", c.attr_s("equation", "")}})};
}

V emit_expand(NodeCtx& c) { return {c.op("expand"_op, {c.in(0)}, {{"shape", c.ints_in(1)}})}; }
V emit_tile(NodeCtx& c) { return {c.op("tile"_op, {c.in(0)}, {{"repeats", c.ints_in(1)}})}; }

V emit_constant(NodeCtx& c) {
  if (c.has_attr("value")) return {c.konst(c.attr_tensor("value"))};
  if (c.has_attr("value_float")) return {c.konst(Tensor::scalar(c.attr_f("value_float", 0), DType::f32))};
  if (c.has_attr("value_int")) return {c.konst(Tensor::scalar(static_cast<double>(c.attr_i("value_int", 0)), DType::i64))};
  if (c.has_attr("value_floats")) {
    const auto f = c.attr_floats("value_floats");
    return {c.konst(Tensor::from_doubles(f, {static_cast<int64_t>(f.size())}, DType::f32))};
  }
  if (c.has_attr("value_ints")) {
    const auto v = c.attr_ints("value_ints");
    return {c.konst(Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}))};
  }
  c.fail(ErrorCode::unsupported, "no supported value attribute (string and sparse constants are not supported)");
}
std::string check_constant(const onnx::NodeProto& n, int, const NodeInfo&) {
  for (const char* a : {"sparse_value", "value_string", "value_strings"})
    if (find_attr(n, a)) return std::string(a) + " constants";
  if (const auto* a = find_attr(n, "value"); a && !dtype_from_onnx(a->t().data_type()))
    return "a constant of type " + onnx_type_name(a->t().data_type());
  return "";
}

Value* full_value(NodeCtx& c, const Ints& shape, double value, DType dt) {
  if (dt == DType::boolean) return c.cast(c.op("full"_op, {}, {{"shape", shape}, {"value", value}, {"dtype", DType::u8}}), dt);
  return c.op("full"_op, {}, {{"shape", shape}, {"value", value}, {"dtype", dt}});
}

V emit_constant_of_shape(NodeCtx& c) {
  const Ints shape = c.ints_in(0);
  double value = 0;
  DType dt = DType::f32;
  if (c.has_attr("value")) {
    const Tensor t = c.attr_tensor("value");
    dt = t.dtype();
    if (t.numel() != 1) c.fail(ErrorCode::invalid_argument, "value must have one element");
    value = t.item_at(0);
  }
  return {full_value(c, shape, value, dt)};
}

V emit_range(NodeCtx& c) {
  const DType dt = c.dtype(c.in(0));
  const double start = c.floats_in(0).at(0), limit = c.floats_in(1).at(0), delta = c.floats_in(2).at(0);
  if (delta == 0) c.fail(ErrorCode::invalid_argument, "delta is 0");
  return {c.op("arange"_op, {}, {{"start", start}, {"stop", limit}, {"step", delta}, {"dtype", dt}})};
}

V emit_topk(NodeCtx& c) {
  Value* x = c.in(0);
  const int64_t k = c.since < 10 ? c.attr_i("k", 1) : c.ints_in(1).at(0);
  const int64_t axis = c.norm_axis(c.attr_i("axis", -1), c.rank(x));
  return c.op_n("topk"_op, {x},
                {{"k", k}, {"axis", axis}, {"largest", c.attr_i("largest", 1) != 0}, {"sorted", c.attr_i("sorted", 1) != 0}});
}

V emit_cumsum(NodeCtx& c) {
  Value* x = c.in(0);
  const int64_t axis = c.norm_axis(c.ints_in(1).at(0), c.rank(x));
  return {c.op("cumsum"_op, {x},
               {{"axis", axis}, {"exclusive", c.attr_i("exclusive", 0) != 0}, {"reverse", c.attr_i("reverse", 0) != 0}})};
}

V emit_one_hot(NodeCtx& c) {
  Value* idx = c.in(0);
  if (is_floating(c.dtype(idx))) idx = c.cast(idx, DType::i64);
  else if (c.dtype(idx) != DType::i64 && c.dtype(idx) != DType::i32) idx = c.cast(idx, DType::i64);
  const int64_t depth = static_cast<int64_t>(c.floats_in(1).at(0));
  const Tensor& vals = c.const_in(2);
  if (vals.numel() != 2) c.fail(ErrorCode::invalid_argument, "values must be [off_value, on_value]");
  const int64_t axis = c.attr_i("axis", -1);
  const int out_rank = c.rank(idx) + 1;
  return {c.op("one_hot"_op, {idx},
               {{"depth", depth}, {"dtype", vals.dtype()}, {"axis", axis < 0 ? axis + out_rank : axis},
                {"on_value", vals.item_at(1)}, {"off_value", vals.item_at(0)}})};
}

V emit_where(NodeCtx& c) { return {c.op("where"_op, {c.in(0), c.in(1), c.in(2)})}; }

// Dropout is the identity unless training_mode is true and ratio is not 0. A run-time training_mode (and then
// ratio) is read by value: a deployed session binds such scalar inputs and compiles per value.
V emit_dropout(NodeCtx& c) {
  Value* x = c.in(0);
  if (c.since >= 12 && c.has_input(2) && c.floats_in(2).at(0) != 0) {
    const double ratio = c.has_input(1) ? c.floats_in(1).at(0) : 0.5;
    if (!(ratio >= 0 && ratio < 1)) c.fail(ErrorCode::invalid_argument, "ratio {} is outside [0, 1)", ratio);
    if (ratio != 0)
      c.fail(ErrorCode::unsupported,
             "training_mode=true with ratio {}: random masks (spore runs imported graphs for inference, and no two "
             "engines draw the same masks); export with training_mode false or ratio 0",
             ratio);
  }
  V outs{c.op("identity"_op, {x})};
  if (c.wants_output(1)) {
    Ints shape;
    for (int64_t d : c.static_shape(x, "input")) shape.push_back(d);
    outs.push_back(full_value(c, shape, 1.0, c.since >= 10 ? DType::boolean : c.dtype(x)));
  }
  return outs;
}

V emit_trilu(NodeCtx& c) {
  Value* x = c.in(0);
  const Shape s = c.static_shape(x, "input");
  const int64_t k = c.has_input(1) ? c.ints_in(1).at(0) : 0;
  const bool upper = c.attr_i("upper", 1) != 0;
  const int64_t n = s[s.size() - 2], m = s.back();
  Tensor mask = Tensor::empty({n, m}, DType::boolean);
  auto* p = static_cast<uint8_t*>(mask.raw_data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) p[i * m + j] = upper ? (j - i >= k) : (j - i <= k);
  return {c.op("where"_op, {c.konst(mask), x, zero_like(c, x)})};
}

V emit_eye_like(NodeCtx& c) {
  Value* x = c.in(0);
  const Shape s = c.static_shape(x, "input");
  const int64_t k = c.attr_i("k", 0);
  DType dt = c.dtype(x);
  if (c.has_attr("dtype")) {
    const auto d = dtype_from_onnx(static_cast<int32_t>(c.attr_i("dtype", 1)));
    if (!d) c.fail(ErrorCode::unsupported, "dtype {}", onnx_type_name(static_cast<int32_t>(c.attr_i("dtype", 1))));
    dt = *d;
  }
  std::vector<double> v(static_cast<size_t>(s[0] * s[1]), 0.0);
  for (int64_t i = 0; i < s[0]; ++i)
    if (i + k >= 0 && i + k < s[1]) v[static_cast<size_t>(i * s[1] + i + k)] = 1.0;
  return {c.konst(Tensor::from_doubles(v, s, dt))};
}

V emit_depth_to_space(NodeCtx& c) {
  Value* x = c.in(0);
  const Shape s = c.static_shape(x, "input");
  const int64_t b = c.attr_i("blocksize", 1), n = s[0], ch = s[1], h = s[2], w = s[3];
  const bool crd = c.attr_s("mode", "DCR") == "CRD";
  Value* t = crd ? c.reshape(x, {n, ch / (b * b), b, b, h, w}) : c.reshape(x, {n, b, b, ch / (b * b), h, w});
  t = c.op("transpose"_op, {t}, {{"perm", crd ? Ints{0, 1, 4, 2, 5, 3} : Ints{0, 3, 4, 1, 5, 2}}});
  return {c.reshape(t, {n, ch / (b * b), h * b, w * b})};
}

V emit_space_to_depth(NodeCtx& c) {
  Value* x = c.in(0);
  const Shape s = c.static_shape(x, "input");
  const int64_t b = c.attr_i("blocksize", 1), n = s[0], ch = s[1], h = s[2], w = s[3];
  Value* t = c.reshape(x, {n, ch, h / b, b, w / b, b});
  t = c.op("transpose"_op, {t}, {{"perm", Ints{0, 3, 5, 1, 2, 4}}});
  return {c.reshape(t, {n, ch * b * b, h / b, w / b})};
}

// DequantizeLinear: (x - zero_point) * scale, per tensor or per `axis`.
V emit_dequantize(NodeCtx& c) {
  Value* x = c.in(0);
  Value* scale = c.in(1);
  const DType ft = c.dtype(scale);
  Value* xf = c.cast(x, ft);
  auto per_axis = [&](Value* v) -> Value* {
    if (c.rank(v) != 1 || c.rank(x) <= 1) return v;
    const int64_t axis = c.norm_axis(c.attr_i("axis", 1), c.rank(x));
    Ints shape(c.rank(x), 1);
    shape[axis] = -1;
    return c.reshape(v, shape);
  };
  if (c.has_input(2)) xf = c.op("sub"_op, {xf, per_axis(c.cast(c.in(2), ft))});
  return {c.op("mul"_op, {xf, per_axis(scale)})};
}

// QuantizeLinear: saturate(round_half_even(x / scale) + zero_point) into u8 (default) or the zero point's type.
V emit_quantize(NodeCtx& c) {
  Value* x = c.in(0);
  Value* scale = c.in(1);
  const DType ft = c.dtype(x);
  DType qt = c.has_input(2) ? c.dtype(c.in(2)) : DType::u8;
  auto per_axis = [&](Value* v) -> Value* {
    if (c.rank(v) != 1 || c.rank(x) <= 1) return v;
    const int64_t axis = c.norm_axis(c.attr_i("axis", 1), c.rank(x));
    Ints shape(c.rank(x), 1);
    shape[axis] = -1;
    return c.reshape(v, shape);
  };
  Value* q = c.op("round"_op, {c.op("div"_op, {x, per_axis(c.cast(scale, ft))})});
  if (c.has_input(2)) q = c.op("add"_op, {q, per_axis(c.cast(c.in(2), ft))});
  const double lo = qt == DType::u8 ? 0 : -128, hi = qt == DType::u8 ? 255 : 127;
  q = c.op("clip"_op, {q}, {{"min", lo}, {"max", hi}});
  return {c.cast(q, qt)};
}
std::string check_quantize(const onnx::NodeProto& n, int, const NodeInfo& info) {
  if (n.input_size() > 2 && !n.input(2).empty()) {
    const auto* t = info.type(2);
    if (t && t->has_tensor_type() && t->tensor_type().elem_type() != onnx::TensorProto::UINT8 &&
        t->tensor_type().elem_type() != onnx::TensorProto::INT8)
      return "zero point of type " + onnx_type_name(t->tensor_type().elem_type());
  }
  return "";
}

// ---- integer ops with exact integer results. 8-bit codes minus their zero points are small integers, so every
// product and every sum of up to 2^37 of them is exact in f64: the convolutions and matmuls run in f64 and their
// results are exact int32 accumulators.

// v with one entry per index of `axis` of a rank-`rank` tensor (a per-channel / per-row parameter) shaped to
// broadcast there; one-element parameters broadcast as they are.
Value* along_axis(NodeCtx& c, Value* v, int rank, int64_t axis, const char* what) {
  const int64_t n = c.static_shape(v, what).empty() ? 1 : v->type.numel();
  if (n == 1) return c.rank(v) == 0 ? v : c.reshape(v, {});
  if (c.rank(v) != 1 || axis < 0 || axis >= rank)
    c.fail(ErrorCode::invalid_argument, "{} has shape {}; it must be a scalar or 1-D along axis {} of a rank-{} tensor",
           what, v->type.str(), axis, rank);
  Ints shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(axis)] = n;
  return c.reshape(v, shape);
}

Value* int8_input(NodeCtx& c, int i, const char* what) {
  Value* v = c.in(i);
  if (c.dtype(v) != DType::u8 && c.dtype(v) != DType::i8)
    c.fail(ErrorCode::invalid_argument, "input {} ('{}', {}) is {}; it must be uint8 or int8", i, c.node.input(i), what,
           dtype_name(c.dtype(v)));
  return v;
}

// (q - zero_point) in f64; the zero point (input zp, optional) is per tensor or per index of `axis`.
// (Any float dtype holds these small integers exactly; `ft` f32 serves where the sums are bounded, see below.)
Value* centered(NodeCtx& c, int q_index, int zp_index, int64_t axis, const char* what, DType ft = DType::f64) {
  Value* q = int8_input(c, q_index, what);
  Value* v = c.cast(q, ft);
  if (!c.has_input(zp_index)) return v;
  Value* zp = c.in(zp_index);
  if (c.dtype(zp) != c.dtype(q))
    c.fail(ErrorCode::invalid_argument, "the zero point of {} is {}, the input is {}", what, dtype_name(c.dtype(zp)),
           dtype_name(c.dtype(q)));
  return c.op("sub"_op, {v, along_axis(c, c.cast(zp, ft), c.rank(q), axis, "a zero point")});
}

// Largest |q - zero_point| possible for input q: from the constant values when q and a one-element zero point are
// constants, from the zero point and the code range when only it is, else 255.
int64_t max_centered(NodeCtx& c, int q_i, int zp_i) {
  Value* zp = c.has_input(zp_i) ? c.in(zp_i) : nullptr;
  if (zp && (!c.is_const(zp) || zp->type.numel() != 1)) return 255;
  const double z = zp ? c.floats_in(zp_i).at(0) : 0.0;
  if (c.is_const(c.in(q_i))) {
    double m = 0;
    for (double v : c.floats_in(q_i)) m = std::max(m, std::abs(v - z));
    return static_cast<int64_t>(m);
  }
  const bool u8 = c.dtype(c.in(q_i)) == DType::u8;
  return static_cast<int64_t>(u8 ? std::max(z, 255 - z) : std::max(z + 128, 127 - z));
}

// The matmul of the centred codes: in f32 when every partial sum is an integer below 2^24 in magnitude
// (K * max|a - az| * max|b - bz| < 2^24, so any summation order is exact), else in f64. Returns f64.
Value* centered_matmul(NodeCtx& c, int a_i, int az_i, int b_i, int bz_i, const char* an, const char* bn) {
  Value* a = c.in(a_i);
  Value* b = c.in(b_i);
  const int ra = c.rank(a), rb = c.rank(b);
  const Dim& kd = b->type.dims.at(static_cast<size_t>(std::max(rb - 2, 0)));
  const bool f32_exact =
      kd.is_static() && kd.size * max_centered(c, a_i, az_i) * max_centered(c, b_i, bz_i) < (int64_t{1} << 24);
  const DType ft = f32_exact ? DType::f32 : DType::f64;
  return c.cast(c.op("matmul"_op, {centered(c, a_i, az_i, ra - 2, an, ft), centered(c, b_i, bz_i, rb - 1, bn, ft)}),
                DType::f64);
}

// QLinear* outputs: saturate(round_half_even(v) + zero_point) into the zero point's type (uint8 when absent).
Value* requantize(NodeCtx& c, Value* v, int zp_index) {
  const DType qt = c.has_input(zp_index) ? c.dtype(c.in(zp_index)) : DType::u8;
  if (qt != DType::u8 && qt != DType::i8)
    c.fail(ErrorCode::invalid_argument, "the output zero point is {}; it must be uint8 or int8", dtype_name(qt));
  Value* q = c.op("round"_op, {v});
  if (c.has_input(zp_index))
    q = c.op("add"_op, {q, along_axis(c, c.cast(c.in(zp_index), DType::f64), 0, 0, "y_zero_point")});
  q = c.op("clip"_op, {q}, {{"min", qt == DType::u8 ? 0.0 : -128.0}, {"max", qt == DType::u8 ? 255.0 : 127.0}});
  return c.cast(q, qt);
}

Value* f64_param(NodeCtx& c, int i, int rank, int64_t axis, const char* what) {
  return along_axis(c, c.cast(c.in(i), DType::f64), rank, axis, what);
}

// ---- the fast path: spore's int8 kernels (qconv2d / qlinear: oneDNN int8, int32 accumulation) with unit scales,
// so their f32 output is the int32 sum itself, exact while every |sum| < 2^24. Taken when the activation zero point
// is one constant, the weights are constant int8 with zero points all 0 (symmetric: what ONNX Runtime's quantizer
// writes), and the reduction is split into chunks whose worst-case sum stays below 2^24 (the chunks' sums are
// added in f64, exactly). Otherwise (and for what it does not cover) the f64 path above gives the same integers.

// max |x - zero_point| over the codes of x's dtype, with the zero point (a scalar of x's dtype) for the kernel;
// nullopt when the zero point is not one constant.
std::optional<std::pair<int64_t, Value*>> act_zero_point(NodeCtx& c, int x_i, int xz_i) {
  const DType dt = c.dtype(c.in(x_i));
  const bool u8 = dt == DType::u8;
  if (!c.has_input(xz_i)) return std::pair{u8 ? int64_t{255} : int64_t{128}, c.scalar(0, dt)};
  Value* z = c.in(xz_i);
  if (!c.is_const(z) || z->type.numel() != 1 || c.dtype(z) != dt) return std::nullopt;
  const auto zv = static_cast<int64_t>(c.floats_in(xz_i).at(0));
  return std::pair{u8 ? std::max(zv, 255 - zv) : std::max(zv + 128, 127 - zv), c.rank(z) ? c.reshape(z, {}) : z};
}
// max |w| of constant int8 weights whose zero points (if any) are all 0; nullopt otherwise.
std::optional<int64_t> sym_int8_weights(NodeCtx& c, int w_i, int wz_i) {
  Value* w = c.in(w_i);
  if (c.dtype(w) != DType::i8 || !c.is_const(w)) return std::nullopt;
  if (c.has_input(wz_i)) {
    if (!c.is_const(c.in(wz_i))) return std::nullopt;
    for (double z : c.floats_in(wz_i))
      if (z != 0) return std::nullopt;
  }
  int64_t m = 1;
  for (double v : c.floats_in(w_i)) m = std::max(m, static_cast<int64_t>(std::abs(v)));
  return m;
}
constexpr int64_t kExactF32 = (int64_t{1} << 24) - 1;

// conv(x - xz, w) (2-D, one group) as exact integers in f64 through qconv2d; nullptr where the path does not apply.
Value* int8_conv_acc(NodeCtx& c, int x_i, int xz_i, int w_i, int wz_i) {
  Value* x = c.in(x_i);
  if (c.rank(x) != 4 || c.attr_i("group", 1) != 1) return nullptr;
  const auto zp = act_zero_point(c, x_i, xz_i);
  const auto wmax = sym_int8_weights(c, w_i, wz_i);
  if (!zp || !wmax) return nullptr;
  const Shape ws = c.static_shape(c.in(w_i), "weight w");
  const int64_t per_channel = ws[2] * ws[3] * zp->first * *wmax;  // worst-case |sum| per input channel
  if (per_channel > kExactF32) return nullptr;
  const int64_t chunk = kExactF32 / per_channel, channels = ws[1];
  std::string pad_mode = "pad";
  const Window win = read_window(c, x, c.attr_ints("kernel_shape", Ints(ws.begin() + 2, ws.end())), 2, &pad_mode);
  const Attrs a{{"stride", win.strides},
                {"padding", win.pads},
                {"dilation", win.dilations},
                {"groups", int64_t{1}},
                {"pad_mode", pad_mode}};
  Value* one = c.scalar(1, DType::f32);
  Value* acc = nullptr;
  for (int64_t c0 = 0; c0 < channels; c0 += chunk) {
    const int64_t c1 = std::min(channels, c0 + chunk);
    auto part = [&](Value* v) {
      return c0 == 0 && c1 == channels
                 ? v
                 : c.op("slice"_op, {v}, {{"starts", Ints{c0}}, {"ends", Ints{c1}}, {"axes", Ints{1}}});
    };
    Value* q = c.cast(c.op("qconv2d"_op, {part(x), one, zp->second, part(c.in(w_i)), one}, a), DType::f64);
    acc = acc ? c.op("add"_op, {acc, q}) : q;
  }
  return acc;
}

// (A - az) B as exact integers in f64 through qlinear (B constant 2-D int8, symmetric; A's zero point one
// constant); nullptr where the path does not apply.
Value* int8_matmul_acc(NodeCtx& c, int a_i, int az_i, int b_i, int bz_i) {
  Value* a = c.in(a_i);
  Value* b = c.in(b_i);
  if (c.rank(a) < 2 || c.rank(b) != 2) return nullptr;
  const auto zp = act_zero_point(c, a_i, az_i);
  const auto bmax = sym_int8_weights(c, b_i, bz_i);
  if (!zp || !bmax || zp->first * *bmax > kExactF32) return nullptr;
  const int64_t chunk = kExactF32 / (zp->first * *bmax), k = c.static_shape(b, "B")[0];
  Value* bt = c.op("transpose"_op, {b}, {{"perm", Ints{1, 0}}});  // [N, K], folded (B is constant)
  Value* one = c.scalar(1, DType::f32);
  Value* acc = nullptr;
  for (int64_t k0 = 0; k0 < k; k0 += chunk) {
    const int64_t k1 = std::min(k, k0 + chunk);
    const bool all = k0 == 0 && k1 == k;
    Value* ap =
        all ? a : c.op("slice"_op, {a}, {{"starts", Ints{k0}}, {"ends", Ints{k1}}, {"axes", Ints{c.rank(a) - 1}}});
    Value* bp = all ? bt : c.op("slice"_op, {bt}, {{"starts", Ints{k0}}, {"ends", Ints{k1}}, {"axes", Ints{1}}});
    Value* q = c.cast(c.op("qlinear"_op, {ap, one, zp->second, bp, one}), DType::f64);
    acc = acc ? c.op("add"_op, {acc, q}) : q;
  }
  return acc;
}

// MatMulInteger: (A - a_zero_point) (B - b_zero_point) as int32; a_zero_point per row of A, b_zero_point per column.
V emit_matmul_integer(NodeCtx& c) {
  int8_input(c, 0, "A");
  int8_input(c, 1, "B");
  if (Value* acc = int8_matmul_acc(c, 0, 2, 1, 3)) return {c.cast(acc, DType::i32)};
  return {c.cast(centered_matmul(c, 0, 2, 1, 3, "A", "B"), DType::i32)};
}

// QLinearMatMul: requantize((A - a_zp)(B - b_zp) * a_scale * b_scale / y_scale) with y_zero_point.
V emit_qlinear_matmul(NodeCtx& c) {
  int8_input(c, 0, "a");
  int8_input(c, 3, "b");
  Value* acc = int8_matmul_acc(c, 0, 2, 3, 5);
  if (!acc) acc = centered_matmul(c, 0, 2, 3, 5, "a", "b");
  const int r = c.rank(acc);
  Value* scale = c.op("mul"_op, {f64_param(c, 1, r, r - 2, "a_scale"), f64_param(c, 4, r, r - 1, "b_scale")});
  scale = c.op("div"_op, {scale, f64_param(c, 6, 0, 0, "y_scale")});
  return {requantize(c, c.op("mul"_op, {acc, scale}), 7)};
}

// ConvInteger: Conv of (x - x_zero_point) and (w - w_zero_point) (per output channel) as int32. Padding adds the
// zero point (a 0 after centering), as ONNX Runtime does.
V emit_conv_integer(NodeCtx& c) {
  int8_input(c, 0, "x");
  int8_input(c, 1, "w");
  if (Value* acc = int8_conv_acc(c, 0, 2, 1, 3)) return {c.cast(acc, DType::i32)};
  Value* x = centered(c, 0, 2, 1, "x");
  Value* w = centered(c, 1, 3, 0, "w");
  return {c.cast(conv_of(c, x, w, nullptr), DType::i32)};
}

// QLinearConv: requantize((conv(x - x_zp, w - w_zp) + B) * x_scale * w_scale / y_scale) with y_zero_point;
// w_scale/w_zero_point per tensor or per output channel, B int32 per output channel.
V emit_qlinear_conv(NodeCtx& c) {
  int8_input(c, 0, "x");
  int8_input(c, 3, "w");
  Value* acc = int8_conv_acc(c, 0, 2, 3, 5);
  if (!acc) acc = conv_of(c, centered(c, 0, 2, 1, "x"), centered(c, 3, 5, 0, "w"), nullptr);
  const int r = c.rank(acc);
  if (c.has_input(8)) acc = c.op("add"_op, {acc, f64_param(c, 8, r, 1, "B")});
  Value* scale = c.op("mul"_op, {f64_param(c, 1, r, 1, "x_scale"), f64_param(c, 4, r, 1, "w_scale")});
  scale = c.op("div"_op, {scale, f64_param(c, 6, 0, 0, "y_scale")});
  return {requantize(c, c.op("mul"_op, {acc, scale}), 7)};
}

// BitShift on unsigned integers (spore's one is uint8): in f64, x * 2^y reduced modulo 2^bits, or floor(x / 2^y).
// 2^y comes from a table (exact; a shift by >= bits gives 0 either way, as NumPy's shifts of unsigned integers do).
V emit_bit_shift(NodeCtx& c) {
  Value* x = c.in(0);
  Value* y = c.in(1);
  const DType dt = c.dtype(x);
  if (dt != DType::u8 || c.dtype(y) != dt)
    c.fail(ErrorCode::invalid_argument, "inputs are {} and {}; BitShift takes unsigned integers (uint8 in spore)",
           dtype_name(dt), dtype_name(c.dtype(y)));
  const std::string dir = c.attr_s("direction", "");
  if (dir != "LEFT" && dir != "RIGHT") c.fail(ErrorCode::invalid_argument, "direction '{}' (LEFT or RIGHT)", dir);
  const int bits = 8;
  std::vector<double> pow2(256);
  for (int i = 0; i < 256; ++i) pow2[static_cast<size_t>(i)] = std::ldexp(1.0, i);
  Value* p = c.op("gather"_op, {c.konst(Tensor::from_doubles(pow2, {256}, DType::f64)), c.cast(y, DType::i64)},
                  {{"axis", int64_t{0}}});
  Value* xf = c.cast(x, DType::f64);
  Value* v;
  if (dir == "LEFT") {
    const double m = std::ldexp(1.0, bits);
    v = c.op("mul"_op, {xf, p});
    v = c.op("sub"_op, {v, mulc(c, c.op("floor"_op, {mulc(c, v, 1.0 / m)}), m)});
  } else {
    v = c.op("floor"_op, {c.op("div"_op, {xf, p})});
  }
  return {c.cast(v, dt)};
}

// ReverseSequence: gather_elements along the time axis with index len[b] - 1 - t for t < len[b], else t.
V emit_reverse_sequence(NodeCtx& c) {
  Value* x = c.in(0);
  const Shape s = c.static_shape(x, "input");
  const int64_t batch_axis = c.attr_i("batch_axis", 1), time_axis = c.attr_i("time_axis", 0);
  if (s.size() < 2 || batch_axis + time_axis != 1 || batch_axis * time_axis != 0)
    c.fail(ErrorCode::invalid_argument, "batch_axis {} and time_axis {} for input {}: they must be 0 and 1", batch_axis,
           time_axis, shape_str(s));
  const int64_t t_len = s[static_cast<size_t>(time_axis)], b_len = s[static_cast<size_t>(batch_axis)];
  Value* lens = c.in(1);
  if (c.static_shape(lens, "sequence_lens") != Shape{b_len} || is_floating(c.dtype(lens)))
    c.fail(ErrorCode::invalid_argument, "sequence_lens is {}; it must be integer [{}]", lens->type.str(), b_len);
  std::vector<int64_t> ts(static_cast<size_t>(t_len));
  std::iota(ts.begin(), ts.end(), int64_t{0});
  Value* t = c.konst(Tensor::from_vector(ts, time_axis == 0 ? Shape{t_len, 1} : Shape{1, t_len}));
  Value* l = c.reshape(c.cast(lens, DType::i64), batch_axis == 0 ? Ints{b_len, 1} : Ints{1, b_len});
  Value* rev = c.op("sub"_op, {c.op("sub"_op, {l, c.scalar(1, DType::i64)}), t});
  Value* idx = c.op("where"_op, {c.op("lt"_op, {t, l}), rev, t});
  Ints full{s[0], s[1]}, ones{s[0], s[1]};
  for (size_t i = 2; i < s.size(); ++i) {
    ones.push_back(1);
    full.push_back(s[i]);
  }
  if (s.size() > 2) idx = c.op("expand"_op, {c.reshape(idx, ones)}, {{"shape", full}});
  return {c.op("gather_elements"_op, {x, idx}, {{"axis", time_axis}})};
}

// Det: LU decomposition with partial pivoting (LAPACK getrf's choice of pivot: the first largest |a|) unrolled
// into the graph, batched over the leading dims. Step k takes the trailing (n-k)x(n-k) matrix M: the pivot row p,
// the other rows with row p replaced by row 0 (one transposition, a sign flip when p != 0), det *= sign * pivot,
// and M' = rest[:, 1:] - (rest[:, 0] / pivot) pivot_row[1:]. A zero pivot (a singular matrix) gives det 0.
V emit_det(NodeCtx& c) {
  Value* x = c.in(0);
  const DType dt = c.dtype(x);
  if (!is_floating(dt)) c.fail(ErrorCode::invalid_argument, "input is {}; Det takes floating-point", dtype_name(dt));
  const Shape s = c.static_shape(x, "input");
  const int r = static_cast<int>(s.size());
  if (r < 2 || s[r - 1] != s[r - 2])
    c.fail(ErrorCode::invalid_argument, "input is {}; Det takes [..., n, n]", shape_str(s));
  const int64_t n = s.back();
  constexpr int64_t kMaxN = 256;
  if (n > kMaxN)
    c.fail(ErrorCode::unsupported, "{}x{} matrices: spore unrolls Det's LU steps into the graph, up to {}x{}", n, n,
           kMaxN, kMaxN);
  const Shape batch(s.begin(), s.end() - 2);
  const int64_t b = std::accumulate(batch.begin(), batch.end(), int64_t{1}, std::multiplies<>());
  const DType ct = dt == DType::f64 ? DType::f64 : DType::f32;
  Value* m = c.reshape(c.cast(x, ct), {b, n, n});
  Value* det = full_value(c, {b, 1, 1}, 1.0, ct);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t w = n - k;
    auto cut = [&](Value* v, Ints starts, Ints ends) {
      return c.op("slice"_op, {v}, {{"starts", starts}, {"ends", ends}, {"axes", Ints{1, 2}}});
    };
    Value* p =
        c.op("argmax"_op, {c.op("abs"_op, {cut(m, {0, 0}, {w, 1})})}, {{"axis", int64_t{1}}, {"keepdims", true}});
    Value* prow =
        c.op("gather_elements"_op, {m, c.op("expand"_op, {p}, {{"shape", Ints{b, 1, w}}})}, {{"axis", int64_t{1}}});
    Value* pivot = cut(prow, {0, 0}, {1, 1});
    Value* swapped = c.op("ne"_op, {p, c.scalar(0, DType::i64)});
    Value* sign = c.op("where"_op, {swapped, c.scalar(-1, ct), c.scalar(1, ct)});
    det = c.op("mul"_op, {det, c.op("mul"_op, {pivot, sign})});
    if (w == 1) break;
    std::vector<int64_t> rows(static_cast<size_t>(w - 1));
    std::iota(rows.begin(), rows.end(), int64_t{1});
    Value* is_p = c.op("eq"_op, {c.konst(Tensor::from_vector(rows, {1, w - 1, 1})), p});
    Value* rest = c.op("where"_op, {is_p, cut(m, {0, 0}, {1, w}), cut(m, {1, 0}, {w, w})});
    Value* safe = c.op("where"_op, {c.op("eq"_op, {pivot, c.scalar(0, ct)}), c.scalar(1, ct), pivot});
    Value* f = c.op("div"_op, {cut(rest, {0, 0}, {w - 1, 1}), safe});
    m = c.op("sub"_op, {cut(rest, {0, 1}, {w - 1, w}), c.op("mul"_op, {f, cut(prow, {0, 1}, {1, w})})});
  }
  return {c.cast(c.reshape(det, batch), dt)};
}

// TfIdfVectorizer over integer pools. For each n-gram length n in [min_gram_length, max_gram_length] and skip
// distance d in 1..max_skip_count + 1 (unigrams once, d = 1), as ONNX Runtime counts: the windows
// X[b, i + j d] (j < n, i + (n-1) d < L) are compared with the pool's n-grams G_n [g, n], and count[b, g] is the
// number of windows that match all n tokens. Counts (exact small integers in f32) are weighted per pool n-gram
// (IDF: the weight where the count is nonzero; TFIDF: count * weight) and moved to their output columns
// (ngram_indexes) by a 0/1 matmul.
V emit_tfidf_vectorizer(NodeCtx& c) {
  Value* x = c.in(0);
  const DType dt = c.dtype(x);
  if (dt != DType::i64 && dt != DType::i32)
    c.fail(ErrorCode::invalid_argument, "input is {}; spore's TfIdfVectorizer takes int32/int64 (pool_int64s)",
           dtype_name(dt));
  const Shape s = c.static_shape(x, "input");
  if (s.empty() || s.size() > 2)
    c.fail(ErrorCode::invalid_argument, "input is {}; it must be [C] or [N, C]", shape_str(s));
  const int64_t rows = s.size() == 2 ? s[0] : 1, len = s.back();
  const int64_t min_n = c.attr_i("min_gram_length", 1), max_n = c.attr_i("max_gram_length", 1),
                max_skip = c.attr_i("max_skip_count", 0);
  const std::string mode = c.attr_s("mode", "TF");
  const Ints counts = c.attr_ints("ngram_counts"), indexes = c.attr_ints("ngram_indexes"),
             pool = c.attr_ints("pool_int64s");
  const std::vector<double> weights = c.attr_floats("weights");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") c.fail(ErrorCode::invalid_argument, "mode '{}'", mode);
  if (min_n < 1 || max_n < min_n || max_skip < 0)
    c.fail(ErrorCode::invalid_argument, "min_gram_length {}, max_gram_length {}, max_skip_count {}", min_n, max_n,
           max_skip);
  // The pool's n-grams by length: [counts[n-1], counts[n]) of the pool's tokens.
  int64_t n_grams = 0;
  std::vector<std::pair<int64_t, int64_t>> levels;  // (first token, number of n-grams) for n = 1, 2, ...
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t n = static_cast<int64_t>(i) + 1, b = counts[i];
    const int64_t e = i + 1 < counts.size() ? counts[i + 1] : static_cast<int64_t>(pool.size());
    if (b < 0 || e < b || e > static_cast<int64_t>(pool.size()) || (e - b) % n != 0)
      c.fail(ErrorCode::invalid_argument, "ngram_counts {} do not split the pool of {} tokens into {}-grams", i,
             pool.size(), n);
    levels.emplace_back(b, (e - b) / n);
    n_grams += (e - b) / n;
  }
  if (static_cast<int64_t>(indexes.size()) != n_grams)
    c.fail(ErrorCode::invalid_argument, "{} ngram_indexes for {} n-grams in the pool", indexes.size(), n_grams);
  if (!weights.empty() && static_cast<int64_t>(weights.size()) != n_grams)
    c.fail(ErrorCode::invalid_argument, "{} weights for {} n-grams in the pool", weights.size(), n_grams);
  int64_t out_dim = 0;
  for (int64_t i : indexes) {
    if (i < 0) c.fail(ErrorCode::invalid_argument, "ngram_indexes holds {}", i);
    out_dim = std::max(out_dim, i + 1);
  }
  Value* xi = c.reshape(c.cast(x, DType::i64), {rows, len});
  V parts;
  for (size_t li = 0; li < levels.size(); ++li) {
    const int64_t n = static_cast<int64_t>(li) + 1, first = levels[li].first, g = levels[li].second;
    if (g == 0) continue;
    Value* cnt = nullptr;
    const int64_t max_d = n < min_n || n > max_n ? 0 : n == 1 ? 1 : max_skip + 1;
    for (int64_t d = 1; d <= max_d; ++d) {
      const int64_t positions = len - (n - 1) * d;
      if (positions <= 0) break;
      Value* match = nullptr;
      for (int64_t j = 0; j < n; ++j) {
        std::vector<int64_t> col(static_cast<size_t>(g));
        for (int64_t k = 0; k < g; ++k) col[static_cast<size_t>(k)] = pool[static_cast<size_t>(first + k * n + j)];
        Value* win =
            c.op("slice"_op, {xi}, {{"starts", Ints{j * d}}, {"ends", Ints{j * d + positions}}, {"axes", Ints{1}}});
        Value* e = c.op("eq"_op, {c.reshape(win, {rows, positions, 1}), c.konst(Tensor::from_vector(col, {1, 1, g}))});
        match = match ? c.op("logical_and"_op, {match, e}) : e;
      }
      Value* m = c.op("reduce_sum"_op, {c.cast(match, DType::f32)}, {{"axes", Ints{1}}, {"keepdims", false}});
      cnt = cnt ? c.op("add"_op, {cnt, m}) : m;
    }
    parts.push_back(cnt ? cnt : full_value(c, {rows, g}, 0.0, DType::f32));
  }
  Value* y;
  if (parts.empty()) {
    y = full_value(c, {rows, out_dim}, 0.0, DType::f32);
  } else {
    Value* all = parts.size() == 1 ? parts[0] : c.op("concat"_op, parts, {{"axis", int64_t{1}}});
    if (mode != "TF") {
      std::vector<double> w = weights.empty() ? std::vector<double>(static_cast<size_t>(n_grams), 1.0) : weights;
      Value* wv = c.konst(Tensor::from_doubles(w, {n_grams}, DType::f32));
      all = mode == "IDF"
                ? c.op("where"_op, {c.op("gt"_op, {all, c.scalar(0, DType::f32)}), wv, c.scalar(0, DType::f32)})
                : c.op("mul"_op, {all, wv});
    }
    std::vector<double> to_col(static_cast<size_t>(n_grams * out_dim), 0.0);
    for (int64_t k = 0; k < n_grams; ++k)
      to_col[static_cast<size_t>(k * out_dim + indexes[static_cast<size_t>(k)])] = 1.0;
    y = c.op("matmul"_op, {all, c.konst(Tensor::from_doubles(to_col, {n_grams, out_dim}, DType::f32))});
  }
  return {s.size() == 1 ? c.reshape(y, {out_dim}) : y};
}
std::string check_tfidf(const onnx::NodeProto& n, int, const NodeInfo&) {
  if (find_attr(n, "pool_strings"))
    return "string pools (pool_strings): spore has no string tensors; map tokens to ids first and use pool_int64s";
  return "";
}

// Dropout in training mode draws random masks that no other implementation reproduces. A run-time training_mode
// is taken by value (emit_dropout refuses true with a nonzero ratio then).
std::string check_dropout(const onnx::NodeProto& n, int since, const NodeInfo& info) {
  if (since < 12 || n.input_size() < 3 || n.input(2).empty()) return "";
  const auto* t = info.constant(2);
  if (!t) return "";
  const Tensor v = tensor_from_proto(*t, n.input(2));
  if (v.numel() == 1 && v.item_at(0) != 0) {
    const auto* r = info.constant(1);
    if (n.input_size() > 1 && !n.input(1).empty() && r && tensor_from_proto(*r, n.input(1)).item_at(0) == 0) return "";
    return "training_mode=true (random masks)";
  }
  return "";
}

// ------------------------------------------------------------------------------------------- Resize / Upsample

// Separable resampling: each resized axis becomes T index_selects (taps) weighted by constant tensors.
struct AxisPlan {
  int64_t in = 0, out = 0;
  int taps = 1;
  std::vector<int64_t> idx;  // [out * taps]
  std::vector<double> w;     // [out * taps]
  std::vector<uint8_t> outside;  // tf_crop_and_resize: positions that take extrapolation_value
};

V emit_resize(NodeCtx& c) {
  Value* x = c.in(0);
  const Shape s = c.static_shape(x, "input X");
  const int r = static_cast<int>(s.size());
  const bool upsample = c.node.op_type() == "Upsample";
  std::string mode = c.attr_s("mode", "nearest");
  std::string coord = (upsample || c.since < 11) ? "asymmetric" : c.attr_s("coordinate_transformation_mode", "half_pixel");
  std::string nearest_mode = (upsample || c.since < 11) ? "floor" : c.attr_s("nearest_mode", "round_prefer_floor");
  const double cubic_a = c.attr_f("cubic_coeff_a", -0.75);
  const bool exclude_outside = c.attr_i("exclude_outside", 0) != 0;
  const double extrapolation = c.attr_f("extrapolation_value", 0.0);
  if (mode == "bilinear") mode = "linear";
  std::vector<double> scales;
  Ints sizes;
  std::vector<double> roi;
  if (upsample) {
    scales = c.since >= 9 ? c.floats_in(1) : c.attr_floats("scales");
  } else if (c.since < 11) {
    scales = c.floats_in(1);
  } else {
    if (c.has_input(1) && c.const_in(1).numel() > 0) roi = c.floats_in(1);
    if (c.has_input(2) && c.const_in(2).numel() > 0) scales = c.floats_in(2);
    if (c.has_input(3) && c.const_in(3).numel() > 0) sizes = c.ints_in(3);
  }
  if (scales.empty() && sizes.empty()) c.fail(ErrorCode::invalid_argument, "needs scales or sizes");
  if (!scales.empty() && static_cast<int>(scales.size()) != r) c.fail(ErrorCode::invalid_argument, "{} scales for rank {}", scales.size(), r);
  if (!sizes.empty() && static_cast<int>(sizes.size()) != r) c.fail(ErrorCode::invalid_argument, "{} sizes for rank {}", sizes.size(), r);
  Value* y = x;
  std::vector<std::pair<int, AxisPlan>> plans;
  for (int ax = 0; ax < r; ++ax) {
    const int64_t in = s[ax];
    int64_t out;
    double scale;
    if (!sizes.empty()) {
      out = sizes[ax];
      scale = static_cast<double>(out) / static_cast<double>(in);
    } else {
      scale = scales[ax];
      out = static_cast<int64_t>(std::floor(static_cast<double>(in) * scale));
    }
    if (out == in && scale == 1.0 && coord != "tf_crop_and_resize") continue;
    if (out <= 0) c.fail(ErrorCode::invalid_argument, "axis {} resizes to {}", ax, out);
    AxisPlan p;
    p.in = in;
    p.out = out;
    p.taps = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
    p.idx.resize(static_cast<size_t>(out * p.taps));
    p.w.resize(p.idx.size());
    p.outside.assign(static_cast<size_t>(out), 0);
    for (int64_t o = 0; o < out; ++o) {
      const double xr = static_cast<double>(o);
      double xo;
      if (coord == "half_pixel") xo = (xr + 0.5) / scale - 0.5;
      else if (coord == "pytorch_half_pixel") xo = out > 1 ? (xr + 0.5) / scale - 0.5 : 0.0;
      else if (coord == "align_corners") {
        // With scales, ONNX (and its reference) take the unrounded in*scale as the output length here.
        const double len = sizes.empty() ? static_cast<double>(in) * scale : static_cast<double>(out);
        xo = len == 1 ? 0.0 : xr * static_cast<double>(in - 1) / (len - 1);
      }
      else if (coord == "asymmetric") xo = xr / scale;
      else if (coord == "tf_half_pixel_for_nn") xo = (xr + 0.5) / scale;
      else if (coord == "tf_crop_and_resize") {
        if (static_cast<int>(roi.size()) != 2 * r) c.fail(ErrorCode::invalid_argument, "tf_crop_and_resize needs roi of {} values", 2 * r);
        const double st = roi[ax], en = roi[r + ax];
        xo = out > 1 ? st * static_cast<double>(in - 1) + xr * (en - st) * static_cast<double>(in - 1) / static_cast<double>(out - 1)
                     : 0.5 * (st + en) * static_cast<double>(in - 1);
        if (xo < 0 || xo > static_cast<double>(in - 1)) p.outside[o] = 1;
      } else c.fail(ErrorCode::unsupported, "coordinate_transformation_mode '{}'", coord);
      auto clampi = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
      const size_t base = static_cast<size_t>(o * p.taps);
      if (mode == "nearest") {
        double f = std::floor(xo);
        const double frac = xo - f;
        int64_t i;
        if (nearest_mode == "floor") i = static_cast<int64_t>(f);
        else if (nearest_mode == "ceil") i = static_cast<int64_t>(std::ceil(xo));
        else if (nearest_mode == "round_prefer_ceil") i = static_cast<int64_t>(frac >= 0.5 ? f + 1 : f);
        else i = static_cast<int64_t>(frac > 0.5 ? f + 1 : f);  // round_prefer_floor
        p.idx[base] = clampi(i);
        p.w[base] = 1.0;
        continue;
      }
      const int64_t i0 = static_cast<int64_t>(std::floor(xo));
      const double t = xo - static_cast<double>(i0);
      std::vector<double> coef;
      std::vector<int64_t> pos;
      if (mode == "linear") {
        coef = {1 - t, t};
        pos = {i0, i0 + 1};
      } else {
        const double A = cubic_a;
        auto k = [A](double d) {  // Keys cubic kernel at distance d
          d = std::abs(d);
          if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
          if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
          return 0.0;
        };
        coef = {k(t + 1), k(t), k(1 - t), k(2 - t)};
        pos = {i0 - 1, i0, i0 + 1, i0 + 2};
      }
      if (exclude_outside) {
        double sum = 0;
        for (size_t j = 0; j < pos.size(); ++j) {
          if (pos[j] < 0 || pos[j] >= in) coef[j] = 0;
          sum += coef[j];
        }
        if (sum != 0)
          for (double& v : coef) v /= sum;
      }
      for (size_t j = 0; j < pos.size(); ++j) {
        p.idx[base + j] = clampi(pos[j]);
        p.w[base + j] = coef[j];
      }
    }
    plans.emplace_back(ax, std::move(p));
  }
  // Axes apply one at a time, in the order that keeps the early passes small: the largest reduction first, then
  // the smallest growth; on a tie the last axis (whose pass gathers single elements) goes first, while the tensor
  // is smallest.
  std::stable_sort(plans.begin(), plans.end(), [r](const auto& a, const auto& b) {
    const double ga = static_cast<double>(a.second.out) / static_cast<double>(a.second.in);
    const double gb = static_cast<double>(b.second.out) / static_cast<double>(b.second.in);
    if (ga != gb) return ga < gb;
    return (a.first == r - 1) > (b.first == r - 1);
  });
  for (const auto& [ax, p] : plans) {
    const int64_t out = p.out;
    Shape wshape(r, 1);
    wshape[ax] = out;
    if (p.taps > 1 && coord != "tf_crop_and_resize") {
      // One resample op: its taps' indices and weights as [out, taps] constants.
      Tensor ids = Tensor::from_vector<int64_t>(p.idx, {out, p.taps});
      Tensor ws = Tensor::from_doubles(p.w, {out, p.taps}, c.dtype(x));
      y = c.op("resample"_op, {y, c.konst(std::move(ids)), c.konst(std::move(ws))}, {{"axis", int64_t{ax}}});
      continue;
    }
    Value* acc = nullptr;
    for (int t = 0; t < p.taps; ++t) {
      std::vector<int64_t> ids(static_cast<size_t>(out));
      std::vector<double> ws(static_cast<size_t>(out));
      for (int64_t o = 0; o < out; ++o) {
        ids[o] = p.idx[static_cast<size_t>(o * p.taps + t)];
        ws[o] = p.outside[o] ? 0.0 : p.w[static_cast<size_t>(o * p.taps + t)];
      }
      Value* g = c.op("index_select"_op, {y, c.konst(Tensor::from_vector<int64_t>(ids, {out}))}, {{"axis", int64_t{ax}}});
      if (p.taps > 1 || coord == "tf_crop_and_resize") g = c.op("mul"_op, {g, c.konst(Tensor::from_doubles(ws, wshape, c.dtype(x)))});
      acc = acc ? c.op("add"_op, {acc, g}) : g;
    }
    if (coord == "tf_crop_and_resize") {
      std::vector<double> ex(static_cast<size_t>(out));
      for (int64_t o = 0; o < out; ++o) ex[o] = p.outside[o] ? extrapolation : 0.0;
      acc = c.op("add"_op, {acc, c.konst(Tensor::from_doubles(ex, wshape, c.dtype(x)))});
    }
    y = acc;
  }
  if (y == x) y = c.op("identity"_op, {x});
  return {y};
}
std::string check_resize(const onnx::NodeProto& n, int, const NodeInfo&) {
  std::string mode = node_attr_s(n, "mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic" && mode != "bilinear") return "mode '" + mode + "'";
  if (node_attr_i(n, "antialias", 0) != 0) return "antialias";
  if (find_attr(n, "axes")) return "the axes attribute (opset 18)";
  if (node_attr_s(n, "keep_aspect_ratio_policy", "stretch") != "stretch") return "keep_aspect_ratio_policy (opset 18)";
  if (node_attr_s(n, "coordinate_transformation_mode", "half_pixel") == "half_pixel_symmetric")
    return "coordinate_transformation_mode half_pixel_symmetric (opset 19)";
  return "";
}

// ------------------------------------------------------------------------------------------- RNNs

struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
};

std::vector<Activation> read_activations(NodeCtx& c, const std::vector<std::string>& defaults, int dirs) {
  std::vector<std::string> names;
  if (const auto* a = c.attr("activations"))
    for (const auto& s : a->strings()) names.push_back(s);
  if (names.empty())
    for (int d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  const auto alphas = c.attr_floats("activation_alpha", {});
  const auto betas = c.attr_floats("activation_beta", {});
  size_t ai = 0, bi = 0;
  std::vector<Activation> out;
  for (const std::string& raw : names) {
    Activation a;
    // Names are case-insensitive in practice (PyTorch writes "Tanh", some writers "tanh").
    a.name = raw;
    for (const char* canon : {"Sigmoid", "Tanh", "Relu", "LeakyRelu", "HardSigmoid", "Affine", "ScaledTanh", "Elu",
                              "Softsign", "Softplus", "ThresholdedRelu"}) {
      std::string lc = raw, lcan = canon;
      std::transform(lc.begin(), lc.end(), lc.begin(), ::tolower);
      std::transform(lcan.begin(), lcan.end(), lcan.begin(), ::tolower);
      if (lc == lcan) a.name = canon;
    }
    const bool uses_alpha = a.name == "LeakyRelu" || a.name == "HardSigmoid" || a.name == "Affine" ||
                            a.name == "ScaledTanh" || a.name == "Elu" || a.name == "ThresholdedRelu";
    const bool uses_beta = a.name == "HardSigmoid" || a.name == "Affine" || a.name == "ScaledTanh";
    if (uses_alpha) {
      const double def = a.name == "LeakyRelu" ? 0.01 : a.name == "HardSigmoid" ? 0.2 : 1.0;
      a.alpha = ai < alphas.size() ? alphas[ai++] : def;
    }
    if (uses_beta) {
      const double def = a.name == "HardSigmoid" ? 0.5 : a.name == "ScaledTanh" ? 1.0 : 0.0;
      a.beta = bi < betas.size() ? betas[bi++] : def;
    }
    out.push_back(a);
  }
  if (static_cast<int>(out.size()) != static_cast<int>(defaults.size()) * dirs)
    c.fail(ErrorCode::invalid_argument, "{} activations given, expected {}", out.size(), defaults.size() * dirs);
  return out;
}

enum class Cell { rnn, gru, lstm };

// One rnn_sequence node (ops/rnn.h): the input projections of every step and direction by one matmul (W of all
// directions stacked) plus the input bias, then the fused recurrence. Layout 1 is transposed to layout 0 around it.
EmitFn rnn(Cell cell) {
  return [cell](NodeCtx& c) -> V {
    const int64_t G = cell == Cell::lstm ? 4 : cell == Cell::gru ? 3 : 1;
    Value* x = c.in(0);
    const int64_t layout = c.attr_i("layout", 0);
    if (layout != 0 && layout != 1) c.fail(ErrorCode::invalid_argument, "layout must be 0 or 1, got {}", layout);
    if (layout == 1) x = c.op("transpose"_op, {x}, {{"perm", Ints{1, 0, 2}}});
    const Shape xs = c.static_shape(x, "input X");
    if (xs.size() != 3) c.fail(ErrorCode::shape_mismatch, "input X must have rank 3, got {}", shape_str(xs));
    const int64_t S = xs[0], B = xs[1], I = xs[2];
    const std::string direction = c.attr_s("direction", "forward");
    if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
      c.fail(ErrorCode::invalid_argument, "direction '{}' is not forward, reverse or bidirectional", direction);
    const int64_t D = direction == "bidirectional" ? 2 : 1;
    const Shape ws = c.static_shape(c.in(1), "W");
    const Shape rs = c.static_shape(c.in(2), "R");
    const int64_t H = c.attr_i("hidden_size", rs.size() == 3 ? rs[2] : 0);
    const DType dt = c.dtype(x);
    if (ws != Shape{D, G * H, I})
      c.fail(ErrorCode::shape_mismatch, "W must be [{}, {}, {}] (num_directions, {}*hidden_size, input_size), got {}",
             D, G * H, I, G, shape_str(ws));
    if (rs != Shape{D, G * H, H})
      c.fail(ErrorCode::shape_mismatch, "R must be [{}, {}, {}] (num_directions, {}*hidden_size, hidden_size), got {}",
             D, G * H, H, G, shape_str(rs));
    const bool lbr = c.attr_i("linear_before_reset", 0) != 0;
    const bool input_forget = c.attr_i("input_forget", 0) != 0;
    const std::vector<std::string> defaults = cell == Cell::lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                              : cell == Cell::gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                  : std::vector<std::string>{"Tanh"};
    const std::vector<Activation> acts = read_activations(c, defaults, static_cast<int>(D));
    std::string names;
    std::vector<double> alphas, betas;
    for (const Activation& a : acts) {
      rnn::Act kind = rnn::Act::tanh;
      if (!rnn::activation_from_name(a.name, kind)) c.fail(ErrorCode::unsupported, "RNN activation '{}'", a.name);
      if (!names.empty()) names.push_back(',');
      names.append(rnn::activation_name(kind));
      alphas.push_back(a.alpha);
      betas.push_back(a.beta);
    }
    // The input projections: [S, B, I] @ [D*G*H, I]^T (+ W's bias, and R's too where it sits outside r's product).
    Value* xw = c.op("matmul"_op, {x, c.reshape(c.in(1), {D * G * H, I})}, {{"transpose_b", true}});
    Value* rb = nullptr;
    if (c.has_input(3)) {
      Value* bias = c.in(3);
      if (c.static_shape(bias, "B") != Shape{D, 2 * G * H})
        c.fail(ErrorCode::shape_mismatch, "B must be [{}, {}] (num_directions, {}*hidden_size), got {}", D, 2 * G * H,
               2 * G, shape_str(c.static_shape(bias, "B")));
      auto half = [&](int64_t k) {
        return c.op(
            "slice"_op, {bias},
            {{"starts", Ints{k * G * H}}, {"ends", Ints{(k + 1) * G * H}}, {"axes", Ints{1}}, {"steps", Ints{}}});
      };
      Value* wb = half(0);
      rb = half(1);
      if (!(cell == Cell::gru && lbr)) {
        wb = c.op("add"_op, {wb, rb});
        rb = nullptr;
      }
      xw = c.op("add"_op, {xw, c.reshape(wb, {D * G * H})});
    }
    auto state_in = [&](int idx, const char* what) -> Value* {
      if (!c.has_input(idx)) return full_value(c, {D, B, H}, 0.0, dt);
      Value* v = c.in(idx);
      if (layout == 1) v = c.op("transpose"_op, {v}, {{"perm", Ints{1, 0, 2}}});
      if (c.static_shape(v, what) != Shape{D, B, H})
        c.fail(ErrorCode::shape_mismatch, "{} must be [{}, {}, {}] (layout {}), got {}", what, D, B, H, layout,
               shape_str(c.static_shape(c.in(idx), what)));
      return v;
    };
    std::vector<Value*> ins{xw, c.in(2), state_in(5, "initial_h")};
    const bool has_len = c.has_input(4), has_p = cell == Cell::lstm && c.has_input(7);
    const bool lstm = cell == Cell::lstm;
    if (rb || has_len || lstm) ins.push_back(rb ? rb : full_value(c, {D, G * H}, 0.0, dt));
    if (has_len || lstm) {
      Value* len = has_len ? c.in(4) : full_value(c, {B}, static_cast<double>(S), DType::i32);
      if (has_len && c.static_shape(len, "sequence_lens") != Shape{B})
        c.fail(ErrorCode::shape_mismatch, "sequence_lens must be [{}], got {}", B,
               shape_str(c.static_shape(len, "sequence_lens")));
      if (has_len && c.is_const(len))
        for (int64_t l : c.ints_in(4))
          if (l < 0 || l > S) c.fail(ErrorCode::invalid_argument, "sequence_lens has {} outside [0, {}]", l, S);
      ins.push_back(len);
    }
    if (lstm) ins.push_back(state_in(6, "initial_c"));
    if (has_p) ins.push_back(c.in(7));
    Attrs attrs{{"cell", std::string(cell == Cell::lstm  ? "lstm"
                                     : cell == Cell::gru ? "gru"
                                                         : "rnn")},
                {"direction", direction},
                {"activations", names},
                {"activation_alpha", alphas},
                {"activation_beta", betas},
                {"clip", c.attr_f("clip", 0.0)},
                {"linear_before_reset", lbr},
                {"input_forget", input_forget}};
    std::vector<Value*> res = c.op_n("rnn_sequence"_op, ins, attrs);
    V outs;
    Value* y = res[0];  // [S, D, B, H]
    if (layout == 1) y = c.op("transpose"_op, {y}, {{"perm", Ints{2, 0, 1, 3}}});
    outs.push_back(y);
    for (size_t k = 1; k < res.size(); ++k)
      outs.push_back(layout == 1 ? c.op("transpose"_op, {res[k]}, {{"perm", Ints{1, 0, 2}}}) : res[k]);
    return outs;
  };
}

// ------------------------------------------------------------------------------------------- the table

std::map<std::string, OpMapping> build_table() {
  std::map<std::string, OpMapping> t;
  auto add = [&](const std::string& name, int min_since, bool decomposed, const std::string& note, EmitFn emit,
                 CheckFn check = nullptr) {
    t[name] = OpMapping{min_since, decomposed, note, std::move(check), std::move(emit)};
  };
  // elementwise unary
  add("Abs", 6, false, "abs", unary("abs"_op));
  add("Neg", 6, false, "neg", unary("neg"_op));
  add("Exp", 6, false, "exp", unary("exp"_op));
  add("Log", 6, false, "log", unary("log"_op));
  add("Sqrt", 6, false, "sqrt", unary("sqrt"_op));
  add("Reciprocal", 6, false, "reciprocal", unary("reciprocal"_op));
  add("Tanh", 6, false, "tanh", unary("tanh"_op));
  add("Sigmoid", 6, false, "sigmoid", unary("sigmoid"_op));
  add("Relu", 6, false, "relu", unary("relu"_op));
  add("Erf", 9, false, "erf", unary("erf"_op));
  add("Sin", 7, false, "sin", unary("sin"_op));
  add("Cos", 7, false, "cos", unary("cos"_op));
  add("Asin", 7, false, "asin", unary("asin"_op));
  add("Acos", 7, false, "acos", unary("acos"_op));
  add("Atan", 7, false, "atan", unary("atan"_op));
  add("Floor", 6, false, "floor", unary("floor"_op));
  add("Ceil", 6, false, "ceil", unary("ceil"_op));
  add("Round", 11, false, "round (half to even)", unary("round"_op));
  add("Sign", 9, false, "sign", unary("sign"_op));
  add("Not", 1, false, "logical_not", unary("logical_not"_op));
  add("Identity", 1, false, "identity", unary("identity"_op));
  add("Tan", 7, true, "sin / cos", [](NodeCtx& c) -> V {
    return {c.op("div"_op, {c.op("sin"_op, {c.in(0)}), c.op("cos"_op, {c.in(0)})})};
  });
  add("Sinh", 9, true, "(exp(x) - exp(-x)) / 2", [](NodeCtx& c) -> V {
    Value* x = c.in(0);
    return {mulc(c, c.op("sub"_op, {c.op("exp"_op, {x}), c.op("exp"_op, {c.op("neg"_op, {x})})}), 0.5)};
  });
  add("Cosh", 9, true, "(exp(x) + exp(-x)) / 2", [](NodeCtx& c) -> V {
    Value* x = c.in(0);
    return {mulc(c, c.op("add"_op, {c.op("exp"_op, {x}), c.op("exp"_op, {c.op("neg"_op, {x})})}), 0.5)};
  });
  add("Asinh", 9, true, "log(x + sqrt(x^2 + 1))", [](NodeCtx& c) -> V {
    Value* x = c.in(0);
    return {c.op("log"_op, {c.op("add"_op, {x, c.op("sqrt"_op, {addc(c, c.op("mul"_op, {x, x}), 1.0)})})})};
  });
  add("Acosh", 9, true, "log(x + sqrt(x^2 - 1))", [](NodeCtx& c) -> V {
    Value* x = c.in(0);
    return {c.op("log"_op, {c.op("add"_op, {x, c.op("sqrt"_op, {addc(c, c.op("mul"_op, {x, x}), -1.0)})})})};
  });
  add("Atanh", 9, true, "log((1 + x) / (1 - x)) / 2", [](NodeCtx& c) -> V {
    Value* x = c.in(0);
    Value* one = c.scalar(1, c.dtype(x));
    return {mulc(c, c.op("log"_op, {c.op("div"_op, {c.op("add"_op, {one, x}), c.op("sub"_op, {one, x})})}), 0.5)};
  });
  add("IsNaN", 9, true, "ne(x, x)", [](NodeCtx& c) -> V { return {c.op("ne"_op, {c.in(0), c.in(0)})}; });
  add("IsInf", 10, true, "eq(x, +-inf)", [](NodeCtx& c) -> V {
    Value* x = c.in(0);
    const double inf = std::numeric_limits<double>::infinity();
    const bool pos = c.attr_i("detect_positive", 1) != 0, neg = c.attr_i("detect_negative", 1) != 0;
    Value* p = pos ? c.op("eq"_op, {x, c.scalar(inf, c.dtype(x))}) : nullptr;
    Value* n = neg ? c.op("eq"_op, {x, c.scalar(-inf, c.dtype(x))}) : nullptr;
    if (p && n) return {c.op("logical_or"_op, {p, n})};
    if (p || n) return {p ? p : n};
    return {c.op("logical_and"_op, {c.op("ne"_op, {x, x}), c.op("eq"_op, {x, x})})};  // both off: all false
  });
  // activations
  add("LeakyRelu", 6, false, "leaky_relu", [](NodeCtx& c) -> V {
    return {c.op("leaky_relu"_op, {c.in(0)}, {{"alpha", c.attr_f("alpha", 0.01)}})};
  });
  add("Elu", 6, true, "where(x > 0, x, alpha*(exp(x)-1))", [](NodeCtx& c) -> V { return {act_elu(c, c.in(0), c.attr_f("alpha", 1.0))}; });
  add("Selu", 6, true, "gamma * elu(x, alpha)", [](NodeCtx& c) -> V {
    return {mulc(c, act_elu(c, c.in(0), c.attr_f("alpha", 1.67326319217681884765625)), c.attr_f("gamma", 1.05070102214813232421875))};
  });
  add("Celu", 12, true, "max(0,x) + min(0, alpha*(exp(x/alpha)-1))", [](NodeCtx& c) -> V {
    Value* x = c.in(0);
    const double alpha = c.attr_f("alpha", 1.0);
    Value* e = mulc(c, addc(c, c.op("exp"_op, {mulc(c, x, 1.0 / alpha)}), -1.0), alpha);
    return {c.op("add"_op, {c.op("relu"_op, {x}), c.op("minimum"_op, {zero_like(c, x), e})})};
  });
  add("HardSigmoid", 6, false, "hardsigmoid", [](NodeCtx& c) -> V {
    return {act_hard_sigmoid(c, c.in(0), c.attr_f("alpha", 0.2), c.attr_f("beta", 0.5))};
  });
  add("HardSwish", 14, false, "hardswish", unary("hardswish"_op));
  add("Softplus", 1, false, "softplus", [](NodeCtx& c) -> V { return {act_softplus(c, c.in(0))}; });
  add("Mish", 18, false, "mish", unary("mish"_op));
  add("Softsign", 1, true, "x / (1 + |x|)", [](NodeCtx& c) -> V { return {act_softsign(c, c.in(0))}; });
  add("ThresholdedRelu", 10, true, "where(x > alpha, x, 0)", [](NodeCtx& c) -> V {
    Value* x = c.in(0);
    return {c.op("where"_op, {c.op("gt"_op, {x, c.scalar(c.attr_f("alpha", 1.0), c.dtype(x))}), x, zero_like(c, x)})};
  });
  add("Shrink", 9, true, "where(x < -l, x + b, where(x > l, x - b, 0))", [](NodeCtx& c) -> V {
    Value* x = c.in(0);
    const double l = c.attr_f("lambd", 0.5), b = c.attr_f("bias", 0.0);
    const DType dt = c.dtype(x);
    Value* hi = c.op("where"_op, {c.op("gt"_op, {x, c.scalar(l, dt)}), c.op("sub"_op, {x, c.scalar(b, dt)}), zero_like(c, x)});
    return {c.op("where"_op, {c.op("lt"_op, {x, c.scalar(-l, dt)}), c.op("add"_op, {x, c.scalar(b, dt)}), hi})};
  });
  add("PRelu", 6, true, "where(x < 0, slope * x, x)", [](NodeCtx& c) -> V {
    Value* x = c.in(0);
    Value* slope = c.in(1);
    // Opset < 7: a 1-D slope of C values applies per channel (axis 1).
    if (c.since < 7 && c.rank(slope) == 1 && c.rank(x) > 2) {
      Ints shape(static_cast<size_t>(c.rank(x) - 1), 1);
      shape[0] = -1;
      slope = c.reshape(slope, shape);
    }
    return {c.op("where"_op, {c.op("lt"_op, {x, zero_like(c, x)}), c.op("mul"_op, {x, slope}), x})};
  });
  add("Softmax", 1, false, "softmax (opset < 13: on the input coerced to 2-D)", softmax_like("softmax"_op, false));
  add("LogSoftmax", 1, false, "log_softmax (opset < 13: on the input coerced to 2-D)", softmax_like("log_softmax"_op, false));
  add("Hardmax", 1, true, "one_hot(argmax)", softmax_like("argmax"_op, true));
  // binary
  add("Add", 6, false, "add", binary("add"_op));
  add("Sub", 6, false, "sub", binary("sub"_op));
  add("Mul", 6, false, "mul", binary("mul"_op));
  add("Div", 6, false, "div", binary("div"_op));
  add("Pow", 1, false, "pow", emit_pow);
  add("Mod", 10, false, "mod", [](NodeCtx& c) -> V {
    return {c.op("mod"_op, {c.in(0), c.in(1)}, {{"fmod", c.attr_i("fmod", 0) != 0}})};
  });
  add("Equal", 7, false, "eq", binary("eq"_op));
  add("Less", 7, false, "lt", binary("lt"_op));
  add("Greater", 7, false, "gt", binary("gt"_op));
  add("LessOrEqual", 12, false, "le", binary("le"_op));
  add("GreaterOrEqual", 12, false, "ge", binary("ge"_op));
  add("And", 7, false, "logical_and", binary("logical_and"_op));
  add("Or", 7, false, "logical_or", binary("logical_or"_op));
  add("Xor", 7, false, "ne on bools", binary("ne"_op));
  add("Max", 6, false, "maximum", variadic("maximum"_op, false));
  add("Min", 6, false, "minimum", variadic("minimum"_op, false));
  add("Sum", 6, false, "add", variadic("add"_op, false));
  add("Mean", 6, true, "add, div", variadic("add"_op, true));
  add("Where", 9, false, "where", emit_where);
  add("Clip", 6, false, "clip (or maximum/minimum for tensor bounds)", emit_clip);
  add("Cast", 6, false, "cast", emit_cast, check_cast);
  add("CastLike", 15, false, "cast", [](NodeCtx& c) -> V { return {c.op("cast"_op, {c.in(0)}, {{"dtype", c.dtype(c.in(1))}})}; });
  // linear algebra and nn
  add("MatMul", 1, false, "matmul", [](NodeCtx& c) -> V { return {c.op("matmul"_op, {c.in(0), c.in(1)})}; });
  add("Gemm", 6, false, "linear, or matmul + scale + add", emit_gemm);
  add("Conv", 1, false, "conv2d (1-D as 2-D with H = 1), conv3d", emit_conv, check_spatial);
  add("ConvTranspose", 1, false, "conv_transpose2d (1-D as 2-D with H = 1), conv_transpose3d", emit_conv_transpose,
      check_spatial);
  add("MaxPool", 1, false, "max_pool2d (1-D as 2-D with H = 1), max_pool3d", pool(true), check_maxpool);
  add("AveragePool", 1, false, "avg_pool2d (1-D as 2-D with H = 1), avg_pool3d", pool(false), check_spatial);
  add("GlobalAveragePool", 1, false, "global_avg_pool", [](NodeCtx& c) -> V {
    return {c.op("global_avg_pool"_op, {c.in(0)})};
  });
  add("GlobalMaxPool", 1, false, "reduce_max over spatial dims", [](NodeCtx& c) -> V {
    return {c.op("reduce_max"_op, {c.in(0)}, {{"axes", spatial_axes(c.rank(c.in(0)))}, {"keepdims", true}})};
  });
  add("BatchNormalization", 6, false, "batch_norm (inference)", emit_batch_norm, check_batch_norm);
  add("InstanceNormalization", 6, false, "group_norm with one group per channel", emit_instance_norm);
  add("LayerNormalization", 17, false, "layer_norm", emit_layer_norm);
  add("GroupNormalization", 18, false, "group_norm (opset 18's per-group scale/bias gathered per channel)",
      emit_group_norm);
  add("Gelu", 20, false, "gelu", [](NodeCtx& c) -> V {
    return {c.op("gelu"_op, {c.in(0)}, {{"approximate", c.attr_s("approximate", "none")}})};
  });
  add("LRN", 1, true, "avg_pool2d over channels of x^2, pow, div", emit_lrn);
  add("Dropout", 1, false, "identity (inference)", emit_dropout, check_dropout);
  // reductions
  add("ReduceSum", 1, false, "reduce_sum", reduce(Red::sum));
  add("ReduceMean", 1, false, "reduce_mean", reduce(Red::mean));
  add("ReduceMax", 1, false, "reduce_max", reduce(Red::max));
  add("ReduceMin", 1, false, "reduce_min", reduce(Red::min));
  add("ReduceProd", 1, false, "reduce_prod", reduce(Red::prod));
  add("ReduceL1", 1, true, "reduce_sum(abs)", reduce(Red::l1));
  add("ReduceL2", 1, true, "sqrt(reduce_sum(x*x))", reduce(Red::l2));
  add("ReduceLogSum", 1, true, "log(reduce_sum)", reduce(Red::log_sum));
  add("ReduceLogSumExp", 1, true, "max-shifted log(sum(exp))", reduce(Red::log_sum_exp));
  add("ReduceSumSquare", 1, true, "reduce_sum(x*x)", reduce(Red::sum_square));
  add("ArgMax", 1, false, "argmax", arg_reduce("argmax"_op));
  add("ArgMin", 1, false, "argmin", arg_reduce("argmin"_op));
  add("TopK", 1, false, "topk", emit_topk);
  add("CumSum", 11, false, "cumsum", emit_cumsum);
  // shape and data movement
  add("Reshape", 1, false, "reshape", emit_reshape);
  add("Flatten", 1, false, "flatten", emit_flatten);
  add("Squeeze", 1, false, "squeeze", emit_squeeze);
  add("Unsqueeze", 1, false, "unsqueeze", emit_unsqueeze);
  add("Concat", 4, false, "concat", emit_concat);
  add("Split", 2, false, "split", emit_split);
  add("Slice", 1, false, "slice", emit_slice);
  add("Transpose", 1, false, "transpose", emit_transpose);
  add("Gather", 1, false, "gather", emit_gather);
  add("GatherElements", 11, false, "gather_elements", emit_gather_elements);
  add("GatherND", 11, false, "gather_nd", emit_gather_nd);
  add("ScatterND", 11, false, "scatter_nd", emit_scatter_nd, check_scatter);
  add("GridSample", 16, false, "grid_sample (4-D)", emit_grid_sample, check_grid_sample);
  add("RoiAlign", 10, false, "roi_align", emit_roi_align, [](const onnx::NodeProto& n, int, const NodeInfo&) {
    const std::string m = node_attr_s(n, "mode", "avg");
    return m == "avg" || m == "max" ? std::string() : "mode '" + m + "'";
  });
  add("Einsum", 12, true, "einsum: transpose, reshape, matmul, reduce_sum", emit_einsum);
  add("Col2Im", 18, true, "conv_transpose2d with a one-hot depthwise kernel (2-D images)", emit_col2im);
  add("ScatterElements", 11, false, "scatter", emit_scatter_elements, check_scatter);
  add("Scatter", 9, false, "scatter", emit_scatter_elements, check_scatter);
  add("Pad", 2, false, "pad", emit_pad, check_pad);
  add("Expand", 8, false, "expand", emit_expand);
  add("Tile", 6, false, "tile", emit_tile);
  add("Constant", 1, false, "constant", emit_constant, check_constant);
  add("ConstantOfShape", 9, false, "full", emit_constant_of_shape, [](const onnx::NodeProto& n, int, const NodeInfo&) {
    if (const auto* a = find_attr(n, "value"); a && !dtype_from_onnx(a->t().data_type()))
      return "value of type " + onnx_type_name(a->t().data_type());
    return std::string();
  });
  add("Shape", 1, false, "constant (folded from static shapes)", emit_shape);
  add("Size", 1, false, "constant (folded from static shapes)", emit_size);
  add("Range", 11, false, "arange (constant inputs)", emit_range);
  add("OneHot", 9, false, "one_hot", emit_one_hot);
  add("Trilu", 14, true, "where with a constant mask", emit_trilu);
  add("EyeLike", 9, false, "constant", emit_eye_like);
  add("DepthToSpace", 1, true, "reshape, transpose, reshape", emit_depth_to_space);
  add("SpaceToDepth", 1, true, "reshape, transpose, reshape", emit_space_to_depth);
  add("Resize", 10, true, "index_select + weighted sums per axis (nearest, linear, cubic)", emit_resize, check_resize);
  add("Upsample", 7, true, "index_select + weighted sums per axis (nearest, linear)", emit_resize, check_resize);
  add("DequantizeLinear", 10, true, "(cast(x) - zero_point) * scale", emit_dequantize);
  add("QuantizeLinear", 10, true, "clip(round(x / scale) + zero_point), cast", emit_quantize, check_quantize);
  add("MatMulInteger", 10, true, "matmul of zero-point-centred codes in f64 (exact), cast to int32",
      emit_matmul_integer);
  add("ConvInteger", 10, true, "conv of zero-point-centred codes in f64 (exact), cast to int32", emit_conv_integer,
      check_spatial);
  add("QLinearMatMul", 10, true, "exact f64 matmul of centred codes, scaled, round half to even, saturate",
      emit_qlinear_matmul);
  add("QLinearConv", 10, true, "exact f64 conv of centred codes, + bias, scaled, round half to even, saturate",
      emit_qlinear_conv, check_spatial);
  add("BitShift", 11, true, "x * 2^y mod 2^bits or floor(x / 2^y), exact in f64", emit_bit_shift);
  add("ReverseSequence", 10, true, "gather_elements with per-batch reversed time indices", emit_reverse_sequence);
  add("Det", 11, true, "LU with partial pivoting, unrolled (n <= 256)", emit_det);
  add("MaxUnpool", 9, true, "scatter into a zero tensor of the output shape", emit_max_unpool);
  add("TfIdfVectorizer", 9, true, "n-gram matches (slice, eq) summed, weighted, matmul to columns",
      emit_tfidf_vectorizer, check_tfidf);
  add("LSTM", 7, true, "matmul (input projections) + rnn_sequence", rnn(Cell::lstm));
  add("GRU", 7, true, "matmul (input projections) + rnn_sequence", rnn(Cell::gru));
  add("RNN", 7, true, "matmul (input projections) + rnn_sequence", rnn(Cell::rnn));
  add_signal_ops(t);
  add_dynamic_shape_mappings(t);
  return t;
}

}  // namespace

const std::map<std::string, OpMapping>& op_table() {
  static const std::map<std::string, OpMapping> table = build_table();
  return table;
}

}  // namespace spore::io::onnx_import
