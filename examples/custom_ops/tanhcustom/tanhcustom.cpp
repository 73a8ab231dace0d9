// tanhcustom: the custom-op plugin of issue 7 — tanh written three times (see README.md).
//   tanhcustom_v1    scalar, f64 inside, one thread                  f32
//   tanhcustom_v2    Highway, textbook formula, blocks on the pool   f32
//   tanhcustom_v3    Highway, <= 2 ULP, exact specials, blocks       f32 f16 bf16
//   tanhcustom_grad  (x, y, dy) -> dy (1 - y^2), the gradient of all three
// Built against include/spore/custom_op_abi.h (+ the header-only include/spore/kernels/tanh_f32.h) and Highway
// only; it never links spore.
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "spore/custom_op_abi.h"
#include "tanhcustom_kernels.h"

namespace tanhcustom {

float tanh_v1(float x) {
  // expm1 keeps tanh(x) ~ x accurate for small x, f64 leaves room for the final rounding; beyond 20,
  // 1 - tanh is far below an f32 ULP. nan, +-0 and +-inf come out right (copysign keeps -0).
  const double a = std::fabs(static_cast<double>(x));
  if (std::isnan(a)) return x + x;
  double r = 1.0;
  if (a < 20.0) {
    const double e = std::expm1(2.0 * a);
    r = e / (e + 2.0);
  }
  return std::copysign(static_cast<float>(r), x);
}

void tanh_v1_f32(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = tanh_v1(x[i]);
}

namespace {

// Elements per parallel_for chunk: a constant, so chunk boundaries depend only on n (never on the thread
// count). 16 Ki f32 = 64 KiB in + 64 KiB out per task: stays in L2 while being written, and enough work
// (~10 us) per task to hide the pool's dispatch cost.
constexpr int64_t kGrain = 16384;

int fail(char* err, size_t err_len, const char* fmt, ...) {
  if (err && err_len > 0) {
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(err, err_len, fmt, args);
    va_end(args);
  }
  return 1;
}

const char* dtype_name(int32_t dt) {
  switch (dt) {
    case SPORE_F32: return "f32";
    case SPORE_F16: return "f16";
    case SPORE_BF16: return "bf16";
    default: return "non-float";
  }
}

// Element count of a tensor type, -1 if the type is malformed.
int64_t numel(const spore_tensor_type& t) {
  if (t.ndim < 0 || t.ndim > SPORE_MAX_DIMS) return -1;
  int64_t n = 1;
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) return -1;
    n *= t.shape[i];
  }
  return n;
}

// Checks that ctx has `num_inputs` inputs and one output, all of dtype `dt` and with the same element count;
// returns that count, or -1 after writing the reason into err.
int64_t check(const spore_kernel_context* ctx, const char* op, int32_t num_inputs, int32_t dt, char* err,
              size_t err_len) {
  if (!ctx || ctx->num_inputs != num_inputs || ctx->num_outputs != 1 || !ctx->inputs || !ctx->outputs) {
    fail(err, err_len, "%s: expected %d input(s) and 1 output, got %d and %d", op, num_inputs,
         ctx ? ctx->num_inputs : -1, ctx ? ctx->num_outputs : -1);
    return -1;
  }
  const int64_t n = numel(ctx->outputs[0].type);
  if (n < 0) {
    fail(err, err_len, "%s: output has a malformed shape (ndim %d)", op, ctx->outputs[0].type.ndim);
    return -1;
  }
  if (ctx->outputs[0].type.dtype != dt) {
    fail(err, err_len, "%s: output is %s, the kernel computes %s", op, dtype_name(ctx->outputs[0].type.dtype),
         dtype_name(dt));
    return -1;
  }
  for (int32_t i = 0; i < num_inputs; ++i) {
    const spore_tensor& in = ctx->inputs[i];
    if (in.type.dtype != dt) {
      fail(err, err_len, "%s: input %d is %s, expected %s", op, i, dtype_name(in.type.dtype), dtype_name(dt));
      return -1;
    }
    const int64_t m = numel(in.type);
    if (m != n) {
      fail(err, err_len, "%s: input %d has %lld elements, the output %lld", op, i, static_cast<long long>(m),
           static_cast<long long>(n));
      return -1;
    }
    if (n > 0 && !in.data) {
      fail(err, err_len, "%s: input %d has no data", op, i);
      return -1;
    }
  }
  if (n > 0 && !ctx->outputs[0].data) {
    fail(err, err_len, "%s: output has no data", op);
    return -1;
  }
  return n;
}

// One block kernel applied to [begin, end) of every operand.
template <typename T>
struct Unary {
  void (*fn)(const T*, T*, size_t);
  const T* x;
  T* y;
  static void run(void* self, int64_t begin, int64_t end) {
    auto* u = static_cast<Unary*>(self);
    u->fn(u->x + begin, u->y + begin, static_cast<size_t>(end - begin));
  }
};

template <typename T>
struct GradJob {
  void (*fn)(const T*, const T*, T*, size_t);
  const T* y;
  const T* dy;
  T* dx;
  static void run(void* self, int64_t begin, int64_t end) {
    auto* g = static_cast<GradJob*>(self);
    g->fn(g->y + begin, g->dy + begin, g->dx + begin, static_cast<size_t>(end - begin));
  }
};

// Runs job over [0, n) in kGrain chunks on the host's pool (serially when the host offers none).
template <class Job>
void run_blocks(const spore_kernel_context* ctx, int64_t n, Job& job) {
  if (n == 0) return;
  if (ctx->parallel_for) {
    ctx->parallel_for(ctx->host, n, kGrain, &Job::run, &job);
  } else {
    for (int64_t b = 0; b < n; b += kGrain) Job::run(&job, b, b + kGrain < n ? b + kGrain : n);
  }
}

template <typename T, int32_t kDType, void (*kFn)(const T*, T*, size_t), bool kParallel>
int unary_kernel(const spore_kernel_context* ctx, char* err, size_t err_len, const char* op) {
  const int64_t n = check(ctx, op, 1, kDType, err, err_len);
  if (n < 0) return 1;
  Unary<T> job{kFn, static_cast<const T*>(ctx->inputs[0].data), static_cast<T*>(ctx->outputs[0].data)};
  if (kParallel) {
    run_blocks(ctx, n, job);
  } else if (n > 0) {
    Unary<T>::run(&job, 0, n);
  }
  return 0;
}

int v1_f32(const spore_kernel_context* c, char* e, size_t l) {
  return unary_kernel<float, SPORE_F32, tanh_v1_f32, false>(c, e, l, "tanhcustom_v1");
}
int v2_f32(const spore_kernel_context* c, char* e, size_t l) {
  return unary_kernel<float, SPORE_F32, tanh_v2_f32, true>(c, e, l, "tanhcustom_v2");
}
int v3_f32(const spore_kernel_context* c, char* e, size_t l) {
  return unary_kernel<float, SPORE_F32, tanh_v3_f32, true>(c, e, l, "tanhcustom_v3");
}
int v3_f16(const spore_kernel_context* c, char* e, size_t l) {
  return unary_kernel<uint16_t, SPORE_F16, tanh_v3_f16, true>(c, e, l, "tanhcustom_v3");
}
int v3_bf16(const spore_kernel_context* c, char* e, size_t l) {
  return unary_kernel<uint16_t, SPORE_BF16, tanh_v3_bf16, true>(c, e, l, "tanhcustom_v3");
}

// Inputs (x, y, dy): x is only checked, the derivative needs y alone.
template <typename T, int32_t kDType, void (*kFn)(const T*, const T*, T*, size_t)>
int grad_kernel(const spore_kernel_context* ctx, char* err, size_t err_len) {
  const int64_t n = check(ctx, "tanhcustom_grad", 3, kDType, err, err_len);
  if (n < 0) return 1;
  GradJob<T> job{kFn, static_cast<const T*>(ctx->inputs[1].data), static_cast<const T*>(ctx->inputs[2].data),
                 static_cast<T*>(ctx->outputs[0].data)};
  run_blocks(ctx, n, job);
  return 0;
}

const spore_kernel_def kV1Kernels[] = {{SPORE_F32, v1_f32, "scalar"}};
const spore_kernel_def kV2Kernels[] = {{SPORE_F32, v2_f32, "hwy"}};
const spore_kernel_def kV3Kernels[] = {
    {SPORE_F32, v3_f32, "hwy"}, {SPORE_F16, v3_f16, "hwy"}, {SPORE_BF16, v3_bf16, "hwy"}};
const spore_kernel_def kGradKernels[] = {{SPORE_F32, grad_kernel<float, SPORE_F32, tanh_grad_f32>, "hwy"},
                                         {SPORE_F16, grad_kernel<uint16_t, SPORE_F16, tanh_grad_f16>, "hwy"},
                                         {SPORE_BF16, grad_kernel<uint16_t, SPORE_BF16, tanh_grad_bf16>, "hwy"}};

constexpr uint32_t kUnaryTraits = SPORE_TRAIT_ELEMENTWISE | SPORE_TRAIT_INPLACE_OK;

const spore_custom_op kOps[] = {
    {"tanhcustom_v1", "tanh, scalar reference (f64 expm1 inside), single-threaded", 1, 1, kUnaryTraits, 0, nullptr,
     nullptr, 1, kV1Kernels, "tanhcustom_grad"},
    {"tanhcustom_v2", "tanh, Highway, (1 - e^-2|x|) / (1 + e^-2|x|): fast, absolute error ~1e-7, poor near 0", 1,
     1, kUnaryTraits, 0, nullptr, nullptr, 1, kV2Kernels, "tanhcustom_grad"},
    {"tanhcustom_v3", "tanh, Highway, <= 2 ULP over all f32, exact at +-0/+-inf/nan, deterministic", 1, 1,
     kUnaryTraits, 0, nullptr, nullptr, 3, kV3Kernels, "tanhcustom_grad"},
    {"tanhcustom_grad", "gradient of tanhcustom_*: (x, y, dy) -> dy * (1 - y^2)", 3, 1,
     SPORE_TRAIT_ELEMENTWISE | SPORE_TRAIT_INPLACE_OK | SPORE_TRAIT_NO_GRAD, 0, nullptr, nullptr, 3, kGradKernels,
     nullptr},
};

const spore_plugin kPlugin = {SPORE_CUSTOM_OP_ABI_VERSION, sizeof(spore_plugin), "tanhcustom", "1.0.0", nullptr,
                              static_cast<int32_t>(sizeof(kOps) / sizeof(kOps[0])), kOps};

}  // namespace
}  // namespace tanhcustom

extern "C" SPORE_PLUGIN_EXPORT const spore_plugin* spore_plugin_entry(void) { return &tanhcustom::kPlugin; }
