#include "ops/kernel.h"

#include <cstring>

namespace spore {

std::string_view backend_name(Backend b) {
  switch (b) {
    case Backend::reference: return "reference";
    case Backend::cpu: return "cpu";
    case Backend::null: return "null";
  }
  return "?";
}

void* KernelContext::scratch(size_t bytes) {
  scratch_blocks.push_back(Storage::allocate(bytes, "kernel scratch"));
  return scratch_blocks.back()->data();
}

void KernelRegistry::add(Backend b, OpId op, DTypeSet dtypes, KernelFn fn, const char* impl) {
  auto& t = table_[static_cast<int>(b)];
  const int index = op_index(op);
  SPORE_CHECK(index >= 0, ErrorCode::invalid_argument, "kernel for an unregistered op id {}", static_cast<uint32_t>(op));
  const auto i = static_cast<size_t>(index);
  if (t.size() <= i) t.resize(i + 1);
  for (int d = 0; d < num_dtypes; ++d) {
    if (dtypes.has(static_cast<DType>(d))) t[i][d] = KernelInfo{fn, impl};
  }
}

const KernelInfo* KernelRegistry::find(Backend b, OpId op, DType dtype) const {
  const auto& t = table_[static_cast<int>(b)];
  const int index = op_index(op);
  const auto i = static_cast<size_t>(index);
  if (index < 0 || i >= t.size()) return nullptr;
  const KernelInfo& k = t[i][static_cast<int>(dtype)];
  return k.fn ? &k : nullptr;
}

DTypeSet KernelRegistry::dtypes_of(Backend b, OpId op) const {
  DTypeSet s;
  for (int d = 0; d < num_dtypes; ++d)
    if (find(b, op, static_cast<DType>(d))) s = s | DTypeSet{static_cast<DType>(d)};
  return s;
}

KernelRegistry& kernel_registry() {
  static KernelRegistry r;
  return r;
}

}  // namespace spore
