// Reference kernels of the fused ops (ops/fused.h): the reference conv2d / linear kernel, then the reference
// add and activation kernels in place, i.e. exactly the unfused ops' oracle, rounding to the output dtype
// after each step as the unfused graph does.
#include <cstring>

#include "backend/reference/families.h"
#include "ops/fused.h"
#include "ops/registry.h"

namespace spore::reference {
namespace {

void run_kernel(OpId op, DType t, std::span<const Tensor> inputs, Tensor& out, const Attrs& attrs) {
  const KernelInfo* ki = kernel_registry().find(Backend::reference, op, t);
  SPORE_CHECK(ki != nullptr && ki->fn != nullptr, ErrorCode::unsupported, "[{}] no reference kernel for {}",
              op_name(op), dtype_name(t));
  KernelContext kc{inputs, std::span<Tensor>(&out, 1), attrs, op, {}};
  ki->fn(kc);
}

// [N, C/8, H, W, 8] <-> [N, C, H, W] (conv2d_fused's nchw8c layouts), element by element.
Tensor relayout(const Tensor& x, bool to_blocked) {
  const Shape& s = x.shape();
  const int64_t cb = fused::kChannelBlock;
  const Shape out = to_blocked ? Shape{s[0], s[1] / cb, s[2], s[3], cb} : Shape{s[0], s[1] * s[4], s[2], s[3]};
  Tensor y = Tensor::empty(out, x.dtype());
  const int64_t n = out[0], c = to_blocked ? s[1] : out[1], hw = to_blocked ? s[2] * s[3] : s[2] * s[3];
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw_data());
  auto* dst = static_cast<char*>(y.raw_data());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) {
        const int64_t plain = (b * c + ch) * hw + p;
        const int64_t blocked = ((b * (c / cb) + ch / cb) * hw + p) * cb + ch % cb;
        const int64_t from = to_blocked ? plain : blocked, to = to_blocked ? blocked : plain;
        std::memcpy(dst + to * es, src + from * es, es);
      }
  return y;
}

void fused_kernel(KernelContext& k) {
  const bool src_blocked = k.op == "conv2d_fused"_op && k.attrs.s("src_layout") == "nchw8c";
  const bool dst_blocked = k.op == "conv2d_fused"_op && k.attrs.s("dst_layout") == "nchw8c";
  if (src_blocked || dst_blocked) {  // the plain-layout kernel between element-by-element relayouts
    std::vector<Tensor> ins(k.inputs.begin(), k.inputs.end());
    const fused::Operands o = fused::operands(k.attrs, k.num_inputs());
    if (src_blocked) ins[0] = relayout(ins[0], false);
    if (dst_blocked && o.residual >= 0) ins[static_cast<size_t>(o.residual)] = relayout(ins[static_cast<size_t>(o.residual)], false);
    Attrs plain = k.attrs;
    plain.set("src_layout", std::string("nchw"));
    plain.set("dst_layout", std::string("nchw"));
    const Shape& ys = k.out(0).shape();
    Tensor y = dst_blocked ? Tensor::empty(Shape{ys[0], ys[1] * ys[4], ys[2], ys[3]}, k.out(0).dtype()) : k.out(0);
    run_kernel(k.op, y.dtype(), ins, y, plain);
    if (dst_blocked) {
      const Tensor b = relayout(y, true);
      std::memcpy(k.out(0).raw_data(), b.raw_data(), b.nbytes());
    }
    return;
  }
  const fused::Operands o = fused::operands(k.attrs, k.num_inputs());
  const bool pool = k.op == "conv2d_fused"_op && k.attrs.s("pool") == "max2x2";
  const DType t = k.out(0).dtype();
  std::vector<Tensor> ins{k.in(0), k.in(1)};
  if (o.bias >= 0) ins.push_back(k.in(o.bias));
  Tensor y = k.out(0);
  if (pool) {  // the conv output before pooling: conv2d's own shape rule
    const OpDef& def = op_registry().get("conv2d"_op);
    std::vector<TensorType> types;
    for (const Tensor& in : ins) types.push_back(TensorType::of(in.dtype(), in.shape()));
    const Attrs ca = fused::base_attrs(k.op, k.attrs);
    y = Tensor::empty(def.infer(InferContext{def, types, ca, "conv2d_fused"})[0].shape(), t);
  }
  run_kernel(*fused::base_op(k.op), t, ins, y, fused::base_attrs(k.op, k.attrs));
  if (o.residual >= 0) {
    const Tensor sum_in[2] = {y, k.in(o.residual)};
    run_kernel("add"_op, t, sum_in, y, Attrs{});
  }
  if (const auto act = fused::activation_op(k.attrs.s("activation"))) {
    const Tensor act_in[1] = {y};
    run_kernel(*act, t, act_in, y, fused::activation_attrs(k.attrs));
  }
  if (pool) run_kernel("max_pool2d"_op, t, std::span<const Tensor>(&y, 1), k.out(0), fused::pool_attrs());
}

}  // namespace

void register_fused(KernelRegistry& r) {
  r.add(Backend::reference, "conv2d_fused"_op, dtypes::floating, fused_kernel);
  r.add(Backend::reference, "linear_fused"_op, dtypes::floating, fused_kernel);
}

}  // namespace spore::reference
