#include "ops/backend.h"

#include <array>
#include <cstring>

#include "base/error.h"
#include "base/half.h"
#include "ops/llm_kv_quant.h"

namespace spore {
namespace {

std::array<std::unique_ptr<BackendImpl>, max_backends>& table() {
  static std::array<std::unique_ptr<BackendImpl>, max_backends> t;
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

void BackendImpl::write_kv_rows(Tensor& cache, Tensor* scales, const Tensor& rows, int64_t p0, int64_t n) const {
  const Shape& s = rows.shape();
  const Shape& c = cache.shape();
  SPORE_CHECK(rows.dtype() == DType::f32 && rows.is_contiguous() && s.size() == 3 && c.size() == 3 && s[1] == c[0] &&
                  s[2] == c[2] && n >= 0 && n <= s[0],
              ErrorCode::shape_mismatch, "write_kv_rows: rows {} {} do not fit cache {}", dtype_name(rows.dtype()),
              shape_str(s), shape_str(c));
  const int64_t heads = c[0], ctx = c[1], d = c[2];
  SPORE_CHECK(p0 >= 0 && p0 + n <= ctx, ErrorCode::invalid_argument, "KV cache write at positions [{}, {}) beyond ctx {}",
              p0, p0 + n, ctx);
  const DType dt = cache.dtype();
  SPORE_CHECK(dt != DType::i8 || (scales != nullptr && scales->dtype() == DType::f32 && scales->numel() == heads * ctx),
              ErrorCode::invalid_argument, "write_kv_rows: an i8 cache needs f32 scales [{}, {}]", heads, ctx);
  SPORE_CHECK(dt == DType::f32 || dt == DType::f16 || dt == DType::bf16 || dt == DType::i8, ErrorCode::unsupported,
              "write_kv_rows: a {} KV cache is not supported", dtype_name(dt));
  const float* x = rows.data<float>();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const float* row = x + (t * heads + h) * d;
      const int64_t at = (h * ctx + p0 + t) * d;
      switch (dt) {
        case DType::f32: std::memcpy(cache.data<float>() + at, row, static_cast<size_t>(d) * 4); break;
        case DType::i8:
          scales->data<float>()[h * ctx + p0 + t] =
              llm_ops::kv_quantize_row(row, d, static_cast<int8_t*>(cache.raw_data()) + at);
          break;
        case DType::f16: {
          uint16_t* o = static_cast<uint16_t*>(cache.raw_data()) + at;
          for (int64_t i = 0; i < d; ++i) o[i] = float_to_half_bits(row[i]);
          break;
        }
        default: {
          uint16_t* o = static_cast<uint16_t*>(cache.raw_data()) + at;
          for (int64_t i = 0; i < d; ++i) o[i] = float_to_bf16_bits(row[i]);
          break;
        }
      }
    }
}

std::unique_ptr<StepExecutor> BackendImpl::make_executor(const ExecutorOptions&) const {
  return std::make_unique<InOrderExecutor>();
}

void register_backend(std::unique_ptr<BackendImpl> b) {
  SPORE_CHECK(b != nullptr, ErrorCode::invalid_argument, "register_backend: no implementation given");
  const auto i = static_cast<size_t>(b->id());
  SPORE_CHECK(i < static_cast<size_t>(num_backends()), ErrorCode::invalid_argument, "register_backend: backend id {} out of range", i);
  table()[i] = std::move(b);
}

BackendImpl& backend_impl(Backend b) {
  const auto i = static_cast<size_t>(b);
  SPORE_CHECK(i < static_cast<size_t>(num_backends()) && table()[i] != nullptr, ErrorCode::not_found, "backend '{}' is not registered",
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
