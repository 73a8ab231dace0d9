// Thin wrappers: each builds its attributes and calls the op's OpDef through ops::call.
#include "ops/ops.h"

namespace spore::ops {
namespace {
Tensor c1(OpId op, std::initializer_list<Tensor> ins, const Attrs& a = {}) {
  return call1(op, std::span<const Tensor>(ins.begin(), ins.size()), a);
}
Tensor c_opt(OpId op, std::vector<Tensor> ins, const std::optional<Tensor>& extra, const Attrs& a) {
  if (extra) ins.push_back(*extra);
  return call1(op, ins, a);
}
Tensor scalar_like(const Tensor& a, double v) { return Tensor::scalar(v, a.dtype()); }
}  // namespace

Tensor identity(const Tensor& x) { return c1("identity"_op, {x}); }

Tensor neg(const Tensor& x) { return c1("neg"_op, {x}); }
Tensor abs(const Tensor& x) { return c1("abs"_op, {x}); }
Tensor exp(const Tensor& x) { return c1("exp"_op, {x}); }
Tensor log(const Tensor& x) { return c1("log"_op, {x}); }
Tensor sqrt(const Tensor& x) { return c1("sqrt"_op, {x}); }
Tensor rsqrt(const Tensor& x) { return c1("rsqrt"_op, {x}); }
Tensor reciprocal(const Tensor& x) { return c1("reciprocal"_op, {x}); }
Tensor tanh(const Tensor& x) { return c1("tanh"_op, {x}); }
Tensor sigmoid(const Tensor& x) { return c1("sigmoid"_op, {x}); }
Tensor relu(const Tensor& x) { return c1("relu"_op, {x}); }
Tensor leaky_relu(const Tensor& x, double alpha) { return c1("leaky_relu"_op, {x}, {{"alpha", alpha}}); }
Tensor gelu(const Tensor& x, const std::string& approximate) { return c1("gelu"_op, {x}, {{"approximate", approximate}}); }
Tensor silu(const Tensor& x) { return c1("silu"_op, {x}); }
Tensor erf(const Tensor& x) { return c1("erf"_op, {x}); }
Tensor sin(const Tensor& x) { return c1("sin"_op, {x}); }
Tensor cos(const Tensor& x) { return c1("cos"_op, {x}); }
Tensor floor(const Tensor& x) { return c1("floor"_op, {x}); }
Tensor ceil(const Tensor& x) { return c1("ceil"_op, {x}); }
Tensor round(const Tensor& x) { return c1("round"_op, {x}); }
Tensor sign(const Tensor& x) { return c1("sign"_op, {x}); }
Tensor clip(const Tensor& x, double min, double max) { return c1("clip"_op, {x}, {{"min", min}, {"max", max}}); }
Tensor logical_not(const Tensor& x) { return c1("logical_not"_op, {x}); }
Tensor cast(const Tensor& x, DType dtype) { return c1("cast"_op, {x}, {{"dtype", dtype}}); }

Tensor add(const Tensor& a, const Tensor& b) { return c1("add"_op, {a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return c1("sub"_op, {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return c1("mul"_op, {a, b}); }
Tensor div(const Tensor& a, const Tensor& b) { return c1("div"_op, {a, b}); }
Tensor pow(const Tensor& a, const Tensor& b) { return c1("pow"_op, {a, b}); }
Tensor maximum(const Tensor& a, const Tensor& b) { return c1("maximum"_op, {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return c1("minimum"_op, {a, b}); }
Tensor mod(const Tensor& a, const Tensor& b, bool fmod) { return c1("mod"_op, {a, b}, {{"fmod", fmod}}); }
Tensor eq(const Tensor& a, const Tensor& b) { return c1("eq"_op, {a, b}); }
Tensor ne(const Tensor& a, const Tensor& b) { return c1("ne"_op, {a, b}); }
Tensor lt(const Tensor& a, const Tensor& b) { return c1("lt"_op, {a, b}); }
Tensor le(const Tensor& a, const Tensor& b) { return c1("le"_op, {a, b}); }
Tensor gt(const Tensor& a, const Tensor& b) { return c1("gt"_op, {a, b}); }
Tensor ge(const Tensor& a, const Tensor& b) { return c1("ge"_op, {a, b}); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return c1("logical_and"_op, {a, b}); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return c1("logical_or"_op, {a, b}); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return c1("where"_op, {cond, a, b}); }
Tensor add(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
Tensor sub(const Tensor& a, double b) { return sub(a, scalar_like(a, b)); }
Tensor mul(const Tensor& a, double b) { return mul(a, scalar_like(a, b)); }
Tensor div(const Tensor& a, double b) { return div(a, scalar_like(a, b)); }

namespace {
Attrs reduce_attrs(const Ints& axes, bool keepdims) { return {{"axes", axes}, {"keepdims", keepdims}}; }
}  // namespace
Tensor reduce_sum(const Tensor& x, const Ints& axes, bool k) { return c1("reduce_sum"_op, {x}, reduce_attrs(axes, k)); }
Tensor reduce_mean(const Tensor& x, const Ints& axes, bool k) { return c1("reduce_mean"_op, {x}, reduce_attrs(axes, k)); }
Tensor reduce_max(const Tensor& x, const Ints& axes, bool k) { return c1("reduce_max"_op, {x}, reduce_attrs(axes, k)); }
Tensor reduce_min(const Tensor& x, const Ints& axes, bool k) { return c1("reduce_min"_op, {x}, reduce_attrs(axes, k)); }
Tensor reduce_prod(const Tensor& x, const Ints& axes, bool k) { return c1("reduce_prod"_op, {x}, reduce_attrs(axes, k)); }
Tensor argmax(const Tensor& x, int64_t axis, bool k) { return c1("argmax"_op, {x}, {{"axis", axis}, {"keepdims", k}}); }
Tensor argmin(const Tensor& x, int64_t axis, bool k) { return c1("argmin"_op, {x}, {{"axis", axis}, {"keepdims", k}}); }
Tensor softmax(const Tensor& x, int64_t axis) { return c1("softmax"_op, {x}, {{"axis", axis}}); }
Tensor log_softmax(const Tensor& x, int64_t axis) { return c1("log_softmax"_op, {x}, {{"axis", axis}}); }
Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive, bool reverse) {
  return c1("cumsum"_op, {x}, {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}});
}
std::vector<Tensor> topk(const Tensor& x, int64_t k, int64_t axis, bool largest, bool sorted) {
  Tensor in[] = {x};
  return call("topk"_op, in, {{"k", k}, {"axis", axis}, {"largest", largest}, {"sorted", sorted}});
}

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  return c1("matmul"_op, {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}});
}
Tensor linear(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias) { return c_opt("linear"_op, {x, w}, bias, {}); }

Tensor conv2d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const Conv2dOptions& o) {
  return c_opt("conv2d"_op, {x, w}, bias,
               {{"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups}, {"pad_mode", o.pad_mode}});
}
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const ConvTranspose2dOptions& o) {
  return c_opt("conv_transpose2d"_op, {x, w}, bias,
               {{"stride", o.stride}, {"padding", o.padding}, {"output_padding", o.output_padding},
                {"dilation", o.dilation}, {"groups", o.groups}});
}
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) {
  return c1("max_pool2d"_op, {x}, {{"kernel", o.kernel}, {"stride", o.stride}, {"padding", o.padding},
                                    {"dilation", o.dilation}, {"ceil_mode", o.ceil_mode}, {"pad_mode", o.pad_mode}});
}
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& dy, const Ints& kernel, const Conv2dOptions& o) {
  return c1("conv2d_weight_grad"_op, {x, dy},
            {{"kernel", kernel}, {"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation},
             {"groups", o.groups}});
}
Tensor max_pool2d_grad(const Tensor& x, const Tensor& dy, const Pool2dOptions& o) {
  return c1("max_pool2d_grad"_op, {x, dy}, {{"kernel", o.kernel}, {"stride", o.stride}, {"padding", o.padding},
                                             {"dilation", o.dilation}, {"ceil_mode", o.ceil_mode},
                                             {"pad_mode", o.pad_mode}});
}
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o) {
  return c1("avg_pool2d"_op, {x}, {{"kernel", o.kernel}, {"stride", o.stride}, {"padding", o.padding},
                                    {"ceil_mode", o.ceil_mode}, {"count_include_pad", o.count_include_pad},
                                    {"pad_mode", o.pad_mode}});
}
Tensor global_avg_pool(const Tensor& x) { return c1("global_avg_pool"_op, {x}); }
Tensor batch_norm(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean, const Tensor& var, double eps) {
  return c1("batch_norm"_op, {x, scale, bias, mean, var}, {{"epsilon", eps}});
}
Tensor layer_norm(const Tensor& x, const std::optional<Tensor>& w, const std::optional<Tensor>& b, int64_t axis, double eps) {
  SPORE_CHECK(w || !b, ErrorCode::invalid_argument, "[layer_norm] a bias needs a weight");
  std::vector<Tensor> ins{x};
  if (w) ins.push_back(*w);
  if (b) ins.push_back(*b);
  return call1("layer_norm"_op, ins, {{"axis", axis}, {"epsilon", eps}});
}
Tensor rms_norm(const Tensor& x, const std::optional<Tensor>& w, int64_t axis, double eps) {
  return c_opt("rms_norm"_op, {x}, w, {{"axis", axis}, {"epsilon", eps}});
}
Tensor group_norm(const Tensor& x, int64_t groups, const std::optional<Tensor>& w, const std::optional<Tensor>& b, double eps) {
  SPORE_CHECK(w || !b, ErrorCode::invalid_argument, "[group_norm] a bias needs a weight");
  std::vector<Tensor> ins{x};
  if (w) ins.push_back(*w);
  if (b) ins.push_back(*b);
  return call1("group_norm"_op, ins, {{"num_groups", groups}, {"epsilon", eps}});
}
Tensor dropout(const Tensor& x, double p, bool training, int64_t seed, const Tensor& offset) {
  const Attrs a{{"p", p}, {"training", training}, {"seed", seed}};
  return offset.defined() ? c1("dropout"_op, {x, offset}, a) : c1("dropout"_op, {x}, a);
}

Tensor reshape(const Tensor& x, const Ints& shape) { return c1("reshape"_op, {x}, {{"shape", shape}}); }
Tensor transpose(const Tensor& x, const Ints& perm) { return c1("transpose"_op, {x}, {{"perm", perm}}); }
Tensor concat(const std::vector<Tensor>& xs, int64_t axis) { return call1("concat"_op, xs, {{"axis", axis}}); }
std::vector<Tensor> split(const Tensor& x, const Ints& sizes, int64_t axis) {
  Tensor in[] = {x};
  return call("split"_op, in, {{"sizes", sizes}, {"axis", axis}});
}
Tensor slice(const Tensor& x, const Ints& starts, const Ints& ends, const Ints& axes, const Ints& steps) {
  return c1("slice"_op, {x}, {{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}});
}
Tensor gather(const Tensor& x, const Tensor& idx, int64_t axis) { return c1("gather"_op, {x, idx}, {{"axis", axis}}); }
Tensor gather_elements(const Tensor& x, const Tensor& idx, int64_t axis) {
  return c1("gather_elements"_op, {x, idx}, {{"axis", axis}});
}
Tensor scatter(const Tensor& x, const Tensor& idx, const Tensor& upd, int64_t axis, const std::string& reduction) {
  return c1("scatter"_op, {x, idx, upd}, {{"axis", axis}, {"reduction", reduction}});
}
Tensor index_select(const Tensor& x, const Tensor& idx, int64_t axis) {
  return c1("index_select"_op, {x, idx}, {{"axis", axis}});
}
Tensor resample(const Tensor& x, const Tensor& idx, const Tensor& w, int64_t axis) {
  return c1("resample"_op, {x, idx, w}, {{"axis", axis}});
}
Tensor embedding(const Tensor& table, const Tensor& ids) { return c1("embedding"_op, {table, ids}); }
Tensor pad(const Tensor& x, const Ints& pads, const std::string& mode, double value) {
  return c1("pad"_op, {x}, {{"pads", pads}, {"mode", mode}, {"value", value}});
}
Tensor expand(const Tensor& x, const Ints& shape) { return c1("expand"_op, {x}, {{"shape", shape}}); }
Tensor squeeze(const Tensor& x, const Ints& axes) { return c1("squeeze"_op, {x}, {{"axes", axes}}); }
Tensor unsqueeze(const Tensor& x, const Ints& axes) { return c1("unsqueeze"_op, {x}, {{"axes", axes}}); }
Tensor flatten(const Tensor& x, int64_t axis) { return c1("flatten"_op, {x}, {{"axis", axis}}); }
Tensor tile(const Tensor& x, const Ints& repeats) { return c1("tile"_op, {x}, {{"repeats", repeats}}); }
Tensor one_hot(const Tensor& idx, int64_t depth, DType dtype, int64_t axis, double on, double off) {
  return c1("one_hot"_op, {idx}, {{"depth", depth}, {"dtype", dtype}, {"axis", axis}, {"on_value", on}, {"off_value", off}});
}

Tensor arange(double start, double stop, double step, DType dtype) {
  return call1("arange"_op, {}, {{"start", start}, {"stop", stop}, {"step", step}, {"dtype", dtype}});
}
Tensor full(const Ints& shape, double value, DType dtype) {
  return call1("full"_op, {}, {{"shape", shape}, {"value", value}, {"dtype", dtype}});
}
Tensor zeros(const Ints& shape, DType dtype) { return full(shape, 0.0, dtype); }
Tensor ones(const Ints& shape, DType dtype) { return full(shape, 1.0, dtype); }

}  // namespace spore::ops
