#include "backend/reference/families.h"
#include "backend/reference/reference.h"
#include "ops/backend.h"

namespace spore {
namespace reference {
// dynamic_shape.cpp: nonzero, compress, unique, non_max_suppression. Declared here rather than in families.h, which
// every reference kernel file includes (one declaration, one caller).
void register_dynamic_shape(KernelRegistry& r);
}  // namespace reference

namespace {
// identity: a plain copy (graph mode runs it as a kernel; eager mode returns a view).
void identity_kernel(KernelContext& k) { copy_strided(k.in(0), k.out(0)); }
}  // namespace

void register_reference_kernels(KernelRegistry& r) {
  r.add(Backend::reference, "identity"_op, dtypes::all, identity_kernel, "copy");
  reference::register_elementwise(r);
  reference::register_binary(r);
  reference::register_reduce(r);
  reference::register_linalg(r);
  reference::register_conv(r);
  reference::register_norm(r);
  reference::register_shape(r);
  reference::register_quant(r);
  reference::register_fused(r);
  reference::register_fused_elementwise(r);
  reference::register_attention(r);
  reference::register_rnn(r);
  reference::register_blockq(r);
  reference::register_llm_attention(r);
  reference::register_index(r);
  reference::register_dynamic_shape(r);
}

void register_reference_backend() {
  register_backend(make_kernel_table_backend(Backend::reference, register_reference_kernels));
}
}  // namespace spore
