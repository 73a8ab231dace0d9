// Reference kernels of the fused ops (ops/fused.h): the reference conv2d / linear kernel, then the reference
// add and activation kernels in place, i.e. exactly the unfused ops' oracle, rounding to the output dtype
// after each step as the unfused graph does.
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

void fused_kernel(KernelContext& k) {
  const fused::Operands o = fused::operands(k.attrs, k.num_inputs());
  const bool pool = k.op == OpId::conv2d_fused && k.attrs.s("pool") == "max2x2";
  const DType t = k.out(0).dtype();
  std::vector<Tensor> ins{k.in(0), k.in(1)};
  if (o.bias >= 0) ins.push_back(k.in(o.bias));
  Tensor y = k.out(0);
  if (pool) {  // the conv output before pooling: conv2d's own shape rule
    const OpDef& def = op_registry().get(OpId::conv2d);
    std::vector<TensorType> types;
    for (const Tensor& in : ins) types.push_back(TensorType::of(in.dtype(), in.shape()));
    const Attrs ca = fused::base_attrs(k.op, k.attrs);
    y = Tensor::empty(def.infer(InferContext{def, types, ca, "conv2d_fused"})[0].shape(), t);
  }
  run_kernel(*fused::base_op(k.op), t, ins, y, fused::base_attrs(k.op, k.attrs));
  if (o.residual >= 0) {
    const Tensor sum_in[2] = {y, k.in(o.residual)};
    run_kernel(OpId::add, t, sum_in, y, Attrs{});
  }
  if (const auto act = fused::activation_op(k.attrs.s("activation"))) {
    const Tensor act_in[1] = {y};
    run_kernel(*act, t, act_in, y, fused::activation_attrs(k.attrs));
  }
  if (pool) run_kernel(OpId::max_pool2d, t, std::span<const Tensor>(&y, 1), k.out(0), fused::pool_attrs());
}

}  // namespace

void register_fused(KernelRegistry& r) {
  r.add(Backend::reference, OpId::conv2d_fused, dtypes::floating, fused_kernel);
  r.add(Backend::reference, OpId::linear_fused, dtypes::floating, fused_kernel);
}

}  // namespace spore::reference
