// Reference kernel of fused_elementwise: the program interpreted op by op with the reference kernels
// themselves (each intermediate a tensor of its operands' broadcast shape), so the fused op's oracle
// is by construction the unfused ops' oracle.
#include "backend/reference/families.h"
#include "backend/reference/util.h"
#include "ops/fused_elementwise.h"

namespace spore::reference {
namespace {

Shape broadcast_shape(const Shape& a, const Shape& b) {
  Shape r(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < a.size(); ++i) r[r.size() - a.size() + i] = a[i];
  for (size_t i = 0; i < b.size(); ++i) {
    int64_t& d = r[r.size() - b.size() + i];
    if (d == 1) d = b[i];
  }
  return r;
}

void fused_kernel(KernelContext& k) {
  const fused::Program prog = fused::decode(k.attrs, k.num_inputs());
  const DType t = k.out(0).dtype();
  std::vector<Tensor> slots(k.inputs.begin(), k.inputs.end());
  for (const fused::Instr& ins : prog.instrs) {
    std::vector<Tensor> args;
    Shape shape;
    for (int a = 0; a < ins.arity; ++a) {
      args.push_back(slots[ins.args[a]]);
      shape = a == 0 ? args.back().shape() : broadcast_shape(shape, args.back().shape());
    }
    const KernelInfo* kern = kernel_registry().find(Backend::reference, ins.op, t);
    SPORE_CHECK(kern != nullptr, ErrorCode::unsupported, "[fused_elementwise] no reference kernel for {} on {}",
                op_name(ins.op), dtype_name(t));
    std::vector<Tensor> outs{Tensor::empty(shape, t)};
    const Attrs attrs = fused::op_attrs(ins);
    KernelContext kc{args, outs, attrs, ins.op};
    kern->fn(kc);
    slots.push_back(outs[0]);
  }
  for (size_t o = 0; o < prog.results.size(); ++o) {
    const Tensor& src = slots[prog.results[o]];
    const Tensor& dst = k.out(static_cast<int>(o));
    for (int64_t i = 0; i < dst.numel(); ++i)
      put(dst, i, get(src, broadcast_index(unravel(i, dst.shape()), src.shape())));
  }
}

}  // namespace

void register_fused_elementwise(KernelRegistry& r) {
  r.add(Backend::reference, "fused_elementwise"_op, dtypes::floating, fused_kernel);
}

}  // namespace spore::reference
