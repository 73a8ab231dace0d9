#include "ops/kernel.h"

#include <array>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>

namespace spore {
namespace {
struct BackendNames {
  std::mutex mu;
  std::array<std::string, max_backends> names{"reference", "cpu", "null"};
  int count = 3;
};
BackendNames& backend_names() {
  static BackendNames n;
  return n;
}
}  // namespace

int num_backends() { return backend_names().count; }

namespace {
thread_local const char* tls_kernel_impl = nullptr;
}  // namespace

void note_kernel_impl(const char* impl) { tls_kernel_impl = impl; }

const char* take_kernel_impl() {
  const char* s = tls_kernel_impl;
  tls_kernel_impl = nullptr;
  return s;
}

const char* intern_impl_name(std::string_view name) {
  static std::mutex mu;
  static std::unordered_set<std::string> names;  // node-based: c_str() stays valid as the set grows
  const std::lock_guard<std::mutex> lk(mu);
  return names.emplace(name).first->c_str();
}

Backend register_backend_id(std::string_view name) {
  BackendNames& n = backend_names();
  std::lock_guard<std::mutex> lk(n.mu);
  for (int i = 0; i < n.count; ++i)
    SPORE_CHECK(n.names[i] != name, ErrorCode::invalid_argument, "register_backend_id: backend '{}' exists", name);
  SPORE_CHECK(n.count < max_backends, ErrorCode::invalid_argument,
              "register_backend_id '{}': all {} backend ids are used", name, max_backends);
  n.names[n.count] = std::string(name);
  return static_cast<Backend>(n.count++);
}

std::string_view backend_name(Backend b) {
  const auto i = static_cast<int>(b);
  return i < num_backends() ? std::string_view(backend_names().names[i]) : std::string_view("?");
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
