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

Tensor identity(const Tensor& x) { return c1(OpId::identity, {x}); }

Tensor neg(const Tensor& x) { return c1(OpId::neg, {x}); }
Tensor abs(const Tensor& x) { return c1(OpId::abs, {x}); }
Tensor exp(const Tensor& x) { return c1(OpId::exp, {x}); }
Tensor log(const Tensor& x) { return c1(OpId::log, {x}); }
Tensor sqrt(const Tensor& x) { return c1(OpId::sqrt, {x}); }
Tensor rsqrt(const Tensor& x) { return c1(OpId::rsqrt, {x}); }
Tensor reciprocal(const Tensor& x) { return c1(OpId::reciprocal, {x}); }
Tensor tanh(const Tensor& x) { return c1(OpId::tanh, {x}); }
Tensor sigmoid(const Tensor& x) { return c1(OpId::sigmoid, {x}); }
Tensor relu(const Tensor& x) { return c1(OpId::relu, {x}); }
Tensor leaky_relu(const Tensor& x, double alpha) { return c1(OpId::leaky_relu, {x}, {{"alpha", alpha}}); }
Tensor gelu(const Tensor& x, const std::string& approximate) { return c1(OpId::gelu, {x}, {{"approximate", approximate}}); }
Tensor silu(const Tensor& x) { return c1(OpId::silu, {x}); }
Tensor erf(const Tensor& x) { return c1(OpId::erf, {x}); }
Tensor sin(const Tensor& x) { return c1(OpId::sin, {x}); }
Tensor cos(const Tensor& x) { return c1(OpId::cos, {x}); }
Tensor floor(const Tensor& x) { return c1(OpId::floor, {x}); }
Tensor ceil(const Tensor& x) { return c1(OpId::ceil, {x}); }
Tensor round(const Tensor& x) { return c1(OpId::round, {x}); }
Tensor sign(const Tensor& x) { return c1(OpId::sign, {x}); }
Tensor clip(const Tensor& x, double min, double max) { return c1(OpId::clip, {x}, {{"min", min}, {"max", max}}); }
Tensor logical_not(const Tensor& x) { return c1(OpId::logical_not, {x}); }
Tensor cast(const Tensor& x, DType dtype) { return c1(OpId::cast, {x}, {{"dtype", dtype}}); }

Tensor add(const Tensor& a, const Tensor& b) { return c1(OpId::add, {a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return c1(OpId::sub, {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return c1(OpId::mul, {a, b}); }
Tensor div(const Tensor& a, const Tensor& b) { return c1(OpId::div, {a, b}); }
Tensor pow(const Tensor& a, const Tensor& b) { return c1(OpId::pow, {a, b}); }
Tensor maximum(const Tensor& a, const Tensor& b) { return c1(OpId::maximum, {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return c1(OpId::minimum, {a, b}); }
Tensor mod(const Tensor& a, const Tensor& b, bool fmod) { return c1(OpId::mod, {a, b}, {{"fmod", fmod}}); }
Tensor eq(const Tensor& a, const Tensor& b) { return c1(OpId::eq, {a, b}); }
Tensor ne(const Tensor& a, const Tensor& b) { return c1(OpId::ne, {a, b}); }
Tensor lt(const Tensor& a, const Tensor& b) { return c1(OpId::lt, {a, b}); }
Tensor le(const Tensor& a, const Tensor& b) { return c1(OpId::le, {a, b}); }
Tensor gt(const Tensor& a, const Tensor& b) { return c1(OpId::gt, {a, b}); }
Tensor ge(const Tensor& a, const Tensor& b) { return c1(OpId::ge, {a, b}); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return c1(OpId::logical_and, {a, b}); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return c1(OpId::logical_or, {a, b}); }
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return c1(OpId::where, {cond, a, b}); }
Tensor add(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
Tensor sub(const Tensor& a, double b) { return sub(a, scalar_like(a, b)); }
Tensor mul(const Tensor& a, double b) { return mul(a, scalar_like(a, b)); }
Tensor div(const Tensor& a, double b) { return div(a, scalar_like(a, b)); }

namespace {
Attrs reduce_attrs(const Ints& axes, bool keepdims) { return {{"axes", axes}, {"keepdims", keepdims}}; }
}  // namespace
Tensor reduce_sum(const Tensor& x, const Ints& axes, bool k) { return c1(OpId::reduce_sum, {x}, reduce_attrs(axes, k)); }
Tensor reduce_mean(const Tensor& x, const Ints& axes, bool k) { return c1(OpId::reduce_mean, {x}, reduce_attrs(axes, k)); }
Tensor reduce_max(const Tensor& x, const Ints& axes, bool k) { return c1(OpId::reduce_max, {x}, reduce_attrs(axes, k)); }
Tensor reduce_min(const Tensor& x, const Ints& axes, bool k) { return c1(OpId::reduce_min, {x}, reduce_attrs(axes, k)); }
Tensor reduce_prod(const Tensor& x, const Ints& axes, bool k) { return c1(OpId::reduce_prod, {x}, reduce_attrs(axes, k)); }
Tensor argmax(const Tensor& x, int64_t axis, bool k) { return c1(OpId::argmax, {x}, {{"axis", axis}, {"keepdims", k}}); }
Tensor argmin(const Tensor& x, int64_t axis, bool k) { return c1(OpId::argmin, {x}, {{"axis", axis}, {"keepdims", k}}); }
Tensor softmax(const Tensor& x, int64_t axis) { return c1(OpId::softmax, {x}, {{"axis", axis}}); }
Tensor log_softmax(const Tensor& x, int64_t axis) { return c1(OpId::log_softmax, {x}, {{"axis", axis}}); }
Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive, bool reverse) {
  return c1(OpId::cumsum, {x}, {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}});
}
std::vector<Tensor> topk(const Tensor& x, int64_t k, int64_t axis, bool largest, bool sorted) {
  Tensor in[] = {x};
  return call(OpId::topk, in, {{"k", k}, {"axis", axis}, {"largest", largest}, {"sorted", sorted}});
}

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  return c1(OpId::matmul, {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}});
}
Tensor linear(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias) { return c_opt(OpId::linear, {x, w}, bias, {}); }

Tensor conv2d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const Conv2dOptions& o) {
  return c_opt(OpId::conv2d, {x, w}, bias,
               {{"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups}, {"pad_mode", o.pad_mode}});
}
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const ConvTranspose2dOptions& o) {
  return c_opt(OpId::conv_transpose2d, {x, w}, bias,
               {{"stride", o.stride}, {"padding", o.padding}, {"output_padding", o.output_padding},
                {"dilation", o.dilation}, {"groups", o.groups}});
}
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) {
  return c1(OpId::max_pool2d, {x}, {{"kernel", o.kernel}, {"stride", o.stride}, {"padding", o.padding},
                                    {"dilation", o.dilation}, {"ceil_mode", o.ceil_mode}, {"pad_mode", o.pad_mode}});
}
Tensor conv2d_weight_grad(const Tensor& x, const Tensor& dy, const Ints& kernel, const Conv2dOptions& o) {
  return c1(OpId::conv2d_weight_grad, {x, dy},
            {{"kernel", kernel}, {"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation},
             {"groups", o.groups}});
}
Tensor max_pool2d_grad(const Tensor& x, const Tensor& dy, const Pool2dOptions& o) {
  return c1(OpId::max_pool2d_grad, {x, dy}, {{"kernel", o.kernel}, {"stride", o.stride}, {"padding", o.padding},
                                             {"dilation", o.dilation}, {"ceil_mode", o.ceil_mode},
                                             {"pad_mode", o.pad_mode}});
}
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o) {
  return c1(OpId::avg_pool2d, {x}, {{"kernel", o.kernel}, {"stride", o.stride}, {"padding", o.padding},
                                    {"ceil_mode", o.ceil_mode}, {"count_include_pad", o.count_include_pad},
                                    {"pad_mode", o.pad_mode}});
}
Tensor global_avg_pool(const Tensor& x) { return c1(OpId::global_avg_pool, {x}); }
Tensor batch_norm(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean, const Tensor& var, double eps) {
  return c1(OpId::batch_norm, {x, scale, bias, mean, var}, {{"epsilon", eps}});
}
Tensor layer_norm(const Tensor& x, const std::optional<Tensor>& w, const std::optional<Tensor>& b, int64_t axis, double eps) {
  SPORE_CHECK(w || !b, ErrorCode::invalid_argument, "[layer_norm] a bias needs a weight");
  std::vector<Tensor> ins{x};
  if (w) ins.push_back(*w);
  if (b) ins.push_back(*b);
  return call1(OpId::layer_norm, ins, {{"axis", axis}, {"epsilon", eps}});
}
Tensor rms_norm(const Tensor& x, const std::optional<Tensor>& w, int64_t axis, double eps) {
  return c_opt(OpId::rms_norm, {x}, w, {{"axis", axis}, {"epsilon", eps}});
}
Tensor group_norm(const Tensor& x, int64_t groups, const std::optional<Tensor>& w, const std::optional<Tensor>& b, double eps) {
  SPORE_CHECK(w || !b, ErrorCode::invalid_argument, "[group_norm] a bias needs a weight");
  std::vector<Tensor> ins{x};
  if (w) ins.push_back(*w);
  if (b) ins.push_back(*b);
  return call1(OpId::group_norm, ins, {{"num_groups", groups}, {"epsilon", eps}});
}
Tensor dropout(const Tensor& x, double p, bool training, int64_t seed, const Tensor& offset) {
  const Attrs a{{"p", p}, {"training", training}, {"seed", seed}};
  return offset.defined() ? c1(OpId::dropout, {x, offset}, a) : c1(OpId::dropout, {x}, a);
}

Tensor reshape(const Tensor& x, const Ints& shape) { return c1(OpId::reshape, {x}, {{"shape", shape}}); }
Tensor transpose(const Tensor& x, const Ints& perm) { return c1(OpId::transpose, {x}, {{"perm", perm}}); }
Tensor concat(const std::vector<Tensor>& xs, int64_t axis) { return call1(OpId::concat, xs, {{"axis", axis}}); }
std::vector<Tensor> split(const Tensor& x, const Ints& sizes, int64_t axis) {
  Tensor in[] = {x};
  return call(OpId::split, in, {{"sizes", sizes}, {"axis", axis}});
}
Tensor slice(const Tensor& x, const Ints& starts, const Ints& ends, const Ints& axes, const Ints& steps) {
  return c1(OpId::slice, {x}, {{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}});
}
Tensor gather(const Tensor& x, const Tensor& idx, int64_t axis) { return c1(OpId::gather, {x, idx}, {{"axis", axis}}); }
Tensor gather_elements(const Tensor& x, const Tensor& idx, int64_t axis) {
  return c1(OpId::gather_elements, {x, idx}, {{"axis", axis}});
}
Tensor scatter(const Tensor& x, const Tensor& idx, const Tensor& upd, int64_t axis, const std::string& reduction) {
  return c1(OpId::scatter, {x, idx, upd}, {{"axis", axis}, {"reduction", reduction}});
}
Tensor index_select(const Tensor& x, const Tensor& idx, int64_t axis) {
  return c1(OpId::index_select, {x, idx}, {{"axis", axis}});
}
Tensor embedding(const Tensor& table, const Tensor& ids) { return c1(OpId::embedding, {table, ids}); }
Tensor pad(const Tensor& x, const Ints& pads, const std::string& mode, double value) {
  return c1(OpId::pad, {x}, {{"pads", pads}, {"mode", mode}, {"value", value}});
}
Tensor expand(const Tensor& x, const Ints& shape) { return c1(OpId::expand, {x}, {{"shape", shape}}); }
Tensor squeeze(const Tensor& x, const Ints& axes) { return c1(OpId::squeeze, {x}, {{"axes", axes}}); }
Tensor unsqueeze(const Tensor& x, const Ints& axes) { return c1(OpId::unsqueeze, {x}, {{"axes", axes}}); }
Tensor flatten(const Tensor& x, int64_t axis) { return c1(OpId::flatten, {x}, {{"axis", axis}}); }
Tensor tile(const Tensor& x, const Ints& repeats) { return c1(OpId::tile, {x}, {{"repeats", repeats}}); }
Tensor one_hot(const Tensor& idx, int64_t depth, DType dtype, int64_t axis, double on, double off) {
  return c1(OpId::one_hot, {idx}, {{"depth", depth}, {"dtype", dtype}, {"axis", axis}, {"on_value", on}, {"off_value", off}});
}

Tensor arange(double start, double stop, double step, DType dtype) {
  return call1(OpId::arange, {}, {{"start", start}, {"stop", stop}, {"step", step}, {"dtype", dtype}});
}
Tensor full(const Ints& shape, double value, DType dtype) {
  return call1(OpId::full, {}, {{"shape", shape}, {"value", value}, {"dtype", dtype}});
}
Tensor zeros(const Ints& shape, DType dtype) { return full(shape, 0.0, dtype); }
Tensor ones(const Ints& shape, DType dtype) { return full(shape, 1.0, dtype); }

}  // namespace spore::ops
