// Fused ops made by the epilogue fusion pass (passes/fuse_epilogue.cpp); see ops/fused.h for the semantics.
// Shape inference and cost reuse the base op's; the decomposition (base op, add, activation) is the
// definition, and the fallback on backends without a fused kernel. Inference only: no gradient.
#include "ops/fused.h"

#include <limits>

#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace fused {
namespace {
struct ActEntry {
  std::string_view name;
  OpId op;
};
constexpr ActEntry kActivations[] = {
    {"relu", "relu"_op},       {"leaky_relu", "leaky_relu"_op}, {"clip", "clip"_op}, {"sigmoid", "sigmoid"_op},
    {"tanh", "tanh"_op},       {"gelu", "gelu"_op},             {"silu", "silu"_op},
    {"hardsigmoid", "hardsigmoid"_op}, {"hardswish", "hardswish"_op},
};
}  // namespace

std::optional<OpId> base_op(OpId f) {
  if (f == "conv2d_fused"_op) return "conv2d"_op;
  if (f == "linear_fused"_op) return "linear"_op;
  return std::nullopt;
}

std::optional<OpId> fused_op_of(OpId base) {
  if (base == "conv2d"_op) return "conv2d_fused"_op;
  if (base == "linear"_op) return "linear_fused"_op;
  return std::nullopt;
}

std::optional<OpId> activation_op(std::string_view activation) {
  if (activation == "none") return std::nullopt;
  for (const ActEntry& e : kActivations)
    if (e.name == activation) return e.op;
  SPORE_FAIL(ErrorCode::invalid_argument,
             "activation must be none, relu, leaky_relu, clip, sigmoid, tanh, gelu, silu, hardsigmoid or hardswish, got "
             "\"{}\"", activation);
}

std::optional<std::string_view> activation_name(OpId op) {
  for (const ActEntry& e : kActivations)
    if (e.op == op) return e.name;
  return std::nullopt;
}

Attrs base_attrs(OpId f, const Attrs& a) {
  Attrs r;
  if (f == "conv2d_fused"_op)
    for (const char* n : {"stride", "padding", "dilation", "groups", "pad_mode"})
      if (const AttrValue* v = a.find(n)) r.set(n, *v);
  return r;
}

Attrs activation_attrs(const Attrs& a) {
  Attrs r;
  const auto op = activation_op(a.s("activation"));
  if (!op) return r;
  const auto copy = [&](const char* n) {
    if (const AttrValue* v = a.find(n)) r.set(n, *v);
  };
  if (*op == "leaky_relu"_op) copy("alpha");
  if (*op == "hardsigmoid"_op) copy("alpha"), copy("beta");
  if (*op == "clip"_op) copy("min"), copy("max");
  if (*op == "gelu"_op) copy("approximate");
  return r;
}

Attrs pool_attrs() {
  using V = std::vector<int64_t>;
  return Attrs{{"kernel", V{2, 2}},         {"stride", V{2, 2}},       {"padding", V{0, 0, 0, 0}},
               {"dilation", V{1, 1}},       {"ceil_mode", false},      {"pad_mode", std::string("pad")},
               {"layout", std::string("nchw")}};
}

Tensor to_blocked(const Tensor& x) {
  const Shape& s = x.shape();
  SPORE_CHECK(s.size() == 4 && s[1] % kChannelBlock == 0, ErrorCode::shape_mismatch,
              "to_blocked needs [N, C, H, W] with C divisible by {}", kChannelBlock);
  const Tensor r = ops::reshape(x, {s[0], s[1] / kChannelBlock, kChannelBlock, s[2], s[3]});
  return ops::transpose(r, {0, 1, 3, 4, 2});
}

Tensor from_blocked(const Tensor& x) {
  const Shape& s = x.shape();
  SPORE_CHECK(s.size() == 5 && s[4] == kChannelBlock, ErrorCode::shape_mismatch, "from_blocked needs [N, C/8, H, W, 8]");
  return ops::reshape(ops::transpose(x, {0, 1, 4, 2, 3}), {s[0], s[1] * kChannelBlock, s[2], s[3]});
}

Operands operands(const Attrs& a, int num_inputs) {
  Operands o;
  const bool res = a.b("residual");
  if (res) o.residual = num_inputs - 1;
  if (num_inputs - (res ? 1 : 0) > 2) o.bias = 2;
  return o;
}
}  // namespace fused

namespace {
using infer::dims_compatible;
using infer::dims_str;

std::vector<TensorType> infer_fused(const InferContext& c, OpId base) {
  const fused::Operands o = fused::operands(c.attrs, c.num_inputs());
  if (!(!c.attrs.b("residual") || c.num_inputs() >= 3)) [[unlikely]]
    c.fail(ErrorCode::invalid_argument,
           fmt::format("residual=true needs a residual input after x and w, got {} inputs", c.num_inputs()));
  std::optional<OpId> act;
  try {
    act = fused::activation_op(c.attrs.s("activation"));
  } catch (const Error& e) {
    c.fail(ErrorCode::invalid_argument, e.what());
  }
  std::vector<TensorType> ins{c.in(0), c.in(1)};
  if (o.bias >= 0) ins.push_back(c.in(o.bias));
  bool src_blocked = false, dst_blocked = false;
  if (base == "conv2d"_op) {
    for (const char* k : {"src_layout", "dst_layout"})
      if (!(c.attrs.s(k) == "nchw" || c.attrs.s(k) == "nchw8c")) [[unlikely]]
        c.fail(ErrorCode::invalid_argument,
               fmt::format("{} must be \"nchw\" or \"nchw8c\", got \"{}\"", k, c.attrs.s(k)));
    src_blocked = c.attrs.s("src_layout") == "nchw8c";
    dst_blocked = c.attrs.s("dst_layout") == "nchw8c";
    if (src_blocked) {
      const auto& x = c.in(0).dims;
      if (!(x.size() == 5 && x[4].is_static() && x[4].size == fused::kChannelBlock && x[1].is_static())) [[unlikely]]
        c.fail(ErrorCode::shape_mismatch,
               fmt::format("src_layout nchw8c needs x as [N, C/8, H, W, 8] with static C/8, got {}", dims_str(x)));
      ins[0].dims = {x[0], Dim(x[1].size * fused::kChannelBlock), x[2], x[3]};
    }
  }
  // Looked up at call time: the registry may still be being built while this family registers.
  const OpDef& def = op_registry().get(base);
  const InferContext bc{def, ins, c.attrs, c.where};
  std::vector<TensorType> out = def.infer(bc);
  if (base == "conv2d"_op && c.attrs.s("pool") != "none") {
    if (!(c.attrs.s("pool") == "max2x2")) [[unlikely]]
      c.fail(ErrorCode::invalid_argument,
             fmt::format("pool must be \"none\" or \"max2x2\", got \"{}\"", c.attrs.s("pool")));
    c.check(!dst_blocked, ErrorCode::invalid_argument, "pool max2x2 needs dst_layout nchw");
  }
  if (dst_blocked) {
    auto& y = out[0].dims;
    if (!(y[1].is_static() && y[1].size % fused::kChannelBlock == 0)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("dst_layout nchw8c needs output channels divisible by 8, got {}", dims_str(y)));
    y = {y[0], Dim(y[1].size / fused::kChannelBlock), y[2], y[3], Dim(fused::kChannelBlock)};
  }
  if (o.residual >= 0) {
    const TensorType& r = c.in(o.residual);
    bool same = r.dtype == out[0].dtype && r.rank() == out[0].rank();
    for (size_t i = 0; same && i < r.dims.size(); ++i) same = dims_compatible(r.dims[i], out[0].dims[i]);
    if (!(same)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("residual must have the output's type {}{}, got {}{}", dtype_name(out[0].dtype),
                         dims_str(out[0].dims), dtype_name(r.dtype), dims_str(r.dims)));
  }
  if (base == "conv2d"_op && c.attrs.s("pool") == "max2x2") {
    for (size_t d : {2u, 3u}) {
      Dim& dim = out[0].dims[d];
      if (!(dim.is_static() && dim.size >= 2)) [[unlikely]]
        c.fail(ErrorCode::shape_mismatch,
               fmt::format("pool max2x2 needs a static conv output height and width of at least 2, got {}",
                           dims_str(out[0].dims)));
      dim = Dim(dim.size / 2);
    }
  }
  return out;
}

std::vector<Tensor> decompose_fused(OpId f, std::span<const Tensor> inputs, const Attrs& a) {
  const fused::Operands o = fused::operands(a, static_cast<int>(inputs.size()));
  const bool conv = f == "conv2d_fused"_op;
  const bool src_blocked = conv && a.s("src_layout") == "nchw8c", dst_blocked = conv && a.s("dst_layout") == "nchw8c";
  std::vector<Tensor> ins{src_blocked ? fused::from_blocked(inputs[0]) : inputs[0], inputs[1]};
  if (o.bias >= 0) ins.push_back(inputs[static_cast<size_t>(o.bias)]);
  Tensor y = ops::call1(*fused::base_op(f), ins, fused::base_attrs(f, a));
  if (o.residual >= 0) {
    const Tensor& r = inputs[static_cast<size_t>(o.residual)];
    y = ops::add(y, dst_blocked ? fused::from_blocked(r) : r);
  }
  if (const auto act = fused::activation_op(a.s("activation"))) y = ops::call1(*act, {&y, 1}, fused::activation_attrs(a));
  if (conv && a.s("pool") == "max2x2") y = ops::call1("max_pool2d"_op, {&y, 1}, fused::pool_attrs());
  return {dst_blocked ? fused::to_blocked(y) : y};
}

OpCost fused_cost(OpId f, std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs& a) {
  const fused::Operands o = fused::operands(a, static_cast<int>(ins.size()));
  const size_t nb = o.bias >= 0 ? 3 : 2;
  const OpDef& def = op_registry().get(*fused::base_op(f));
  OpCost c = def.cost_of(ins.subspan(0, nb), outs, fused::base_attrs(f, a));
  const double n = static_cast<double>(std::max<int64_t>(outs[0].numel(), 0));
  if (o.residual >= 0) c.bytes += n * static_cast<double>(dtype_size(outs[0].dtype));
  c.flops += n * ((o.residual >= 0 ? 1 : 0) + (a.s("activation") == "none" ? 0 : 1));
  return c;
}

void epilogue_attrs(OpDefBuilder& b) {
  const double inf = std::numeric_limits<double>::infinity();
  b.attr("activation", AttrKind::str, std::string("none"))
      .attr("alpha", AttrKind::f64, 0.01)
      .attr("beta", AttrKind::f64, 0.5)
      .attr("min", AttrKind::f64, -inf)
      .attr("max", AttrKind::f64, inf)
      .choice("approximate", {"none", "tanh"})
      .attr("residual", AttrKind::boolean, false);
}
}  // namespace

void register_fused_ops(OpRegistry& r) {
  using V = std::vector<int64_t>;
  OpDefBuilder conv = r.def("conv2d_fused"_op);
  conv.doc("[pool](act(conv2d(x, w, bias) [+ residual])): conv2d's attributes; activation none|relu|leaky_relu(alpha)|"
           "clip(min,max)|sigmoid|tanh|gelu(approximate)|silu|hardsigmoid(alpha,beta)|hardswish; residual=true: the last input is added before the "
           "activation and has the conv output's type; pool none|max2x2 (max_pool2d 2x2 windows, stride 2, no "
           "padding, floor) after the activation. Made by fuse_epilogue; inference only.")
      .inputs({"x", "w", "bias?", "residual?"})
      .attr("stride", AttrKind::i64s, V{1, 1})
      .attr("padding", AttrKind::i64s, V{0, 0, 0, 0})
      .attr("dilation", AttrKind::i64s, V{1, 1})
      .attr("groups", AttrKind::i64, int64_t{1})
      .choice("pad_mode", {"pad", "same", "valid"})
      .attr("pool", AttrKind::str, std::string("none"))
      .attr("src_layout", AttrKind::str, std::string("nchw"))
      .attr("dst_layout", AttrKind::str, std::string("nchw"))
      // precise: f32 error at PyTorch's level against float64 (Winograd at most F(2x2, 3x3)); fast: the backend
      // may trade precision for speed (Winograd F(4x4, 3x3)). Set by the layout pass (PassOptions::fast_conv).
      .choice("conv_algo", {"precise", "fast"});
  epilogue_attrs(conv);
  conv.dtypes(dtypes::floating)
      .traits(Trait::no_grad, FusionKind::opaque, AmpPolicy::low)
      .infer([](const InferContext& c) { return infer_fused(c, "conv2d"_op); })
      .decompose([](std::span<const Tensor> in, const Attrs& a) { return decompose_fused("conv2d_fused"_op, in, a); })
      // Explicit parameter types: clang 14 leaves a consteval call (the op-id literal) in a generic lambda unevaluated.
      .cost([](std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs& a) {
        return fused_cost("conv2d_fused"_op, ins, outs, a);
      });
  OpDefBuilder lin = r.def("linear_fused"_op);
  lin.doc("act(x @ w^T + bias [+ residual]): activation and residual as conv2d_fused. Made by fuse_epilogue; "
          "inference only.")
      .inputs({"x", "w", "bias?", "residual?"});
  epilogue_attrs(lin);
  lin.dtypes(dtypes::floating)
      .traits(Trait::no_grad, FusionKind::opaque, AmpPolicy::low)
      .infer([](const InferContext& c) { return infer_fused(c, "linear"_op); })
      .decompose([](std::span<const Tensor> in, const Attrs& a) { return decompose_fused("linear_fused"_op, in, a); })
      // Explicit parameter types: clang 14 leaves a consteval call (the op-id literal) in a generic lambda unevaluated.
      .cost([](std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs& a) {
        return fused_cost("linear_fused"_op, ins, outs, a);
      });
}

}  // namespace spore
