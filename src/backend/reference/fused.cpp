// Reference kernels of the fused ops (ops/fused.h): the reference conv2d / linear kernel, then the reference
// add and activation kernels in place, i.e. exactly the unfused ops' oracle, rounding to the output dtype
// after each step as the unfused graph does.
#include "backend/reference/families.h"
#include "ops/fused.h"

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
  Tensor& y = k.out(0);
  const DType t = y.dtype();
  std::vector<Tensor> ins{k.in(0), k.in(1)};
  if (o.bias >= 0) ins.push_back(k.in(o.bias));
  run_kernel(*fused::base_op(k.op), t, ins, y, fused::base_attrs(k.op, k.attrs));
  if (o.residual >= 0) {
    const Tensor sum_in[2] = {y, k.in(o.residual)};
    run_kernel(OpId::add, t, sum_in, y, Attrs{});
  }
  if (const auto act = fused::activation_op(k.attrs.s("activation"))) {
    const Tensor act_in[1] = {y};
    run_kernel(*act, t, act_in, y, fused::activation_attrs(k.attrs));
  }
}

}  // namespace

void register_fused(KernelRegistry& r) {
  r.add(Backend::reference, OpId::conv2d_fused, dtypes::floating, fused_kernel);
  r.add(Backend::reference, OpId::linear_fused, dtypes::floating, fused_kernel);
}

}  // namespace spore::reference
