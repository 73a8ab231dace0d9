#include "ops/backend.h"

#include <array>

#include "base/error.h"

namespace spore {
namespace {

std::array<std::unique_ptr<BackendImpl>, num_backends>& table() {
  static std::array<std::unique_ptr<BackendImpl>, num_backends> t;
  return t;
}

class InOrderExecutor final : public StepExecutor {
 public:
  void run(size_t num_steps, const std::function<void(size_t)>& run_step) override {
    for (size_t i = 0; i < num_steps; ++i) run_step(i);
  }
};

class KernelTableBackend final : public BackendImpl {
 public:
  KernelTableBackend(Backend id, void (*reg)(KernelRegistry&)) : id_(id), register_(reg) {}
  Backend id() const override { return id_; }
  void register_kernels(KernelRegistry& r) override { register_(r); }

 private:
  Backend id_;
  void (*register_)(KernelRegistry&);
};

}  // namespace

std::unique_ptr<BackendImpl> make_kernel_table_backend(Backend id, void (*register_kernels)(KernelRegistry&)) {
  SPORE_CHECK(register_kernels != nullptr, ErrorCode::invalid_argument, "make_kernel_table_backend: no kernel registration given");
  return std::make_unique<KernelTableBackend>(id, register_kernels);
}

bool BackendImpl::supports(OpId op, const Attrs&, DType dispatch) const {
  return kernel_registry().find(id(), op, dispatch) != nullptr;
}

std::unique_ptr<StepExecutor> BackendImpl::make_executor(const ExecutorOptions&) const {
  return std::make_unique<InOrderExecutor>();
}

void register_backend(std::unique_ptr<BackendImpl> b) {
  SPORE_CHECK(b != nullptr, ErrorCode::invalid_argument, "register_backend: no implementation given");
  const auto i = static_cast<size_t>(b->id());
  SPORE_CHECK(i < num_backends, ErrorCode::invalid_argument, "register_backend: backend id {} out of range", i);
  table()[i] = std::move(b);
}

BackendImpl& backend_impl(Backend b) {
  const auto i = static_cast<size_t>(b);
  SPORE_CHECK(i < num_backends && table()[i] != nullptr, ErrorCode::not_found, "backend '{}' is not registered",
              backend_name(b));
  return *table()[i];
}

std::vector<BackendImpl*> registered_backends() {
  std::vector<BackendImpl*> out;
  for (auto& b : table())
    if (b) out.push_back(b.get());
  return out;
}

}  // namespace spore
