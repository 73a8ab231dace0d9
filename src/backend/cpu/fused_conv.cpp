// CPU kernels of the fused ops (ops/fused.h): conv2d_fused and linear_fused run the conv2d / linear kernel
// into the output, then the epilogue (residual add, activation) in place. Determinism: the epilogue uses
// the functions the unfused kernels use (unary_f32 / the registered add and activation kernels), which give
// every element the same bits wherever a block starts (Highway's tail goes through a padded vector), so
// fused == unfused bit for bit, for any thread count. f32 does add + activation in one pass (the add of two
// floats is one IEEE operation, whatever code does it): inside the conv kernel on each image's output right
// after it is computed where the kernel path allows (conv_epilogue.h: direct AVX2 conv, im2col), else over
// cache-sized blocks after the base kernel (oneDNN conv, linear). f16/bf16/f64 run the registered add and
// activation kernels in place after the base kernel (still one launch and no intermediate buffers).
#include <algorithm>

#include "backend/cpu/conv_epilogue.h"
#include "backend/cpu/elementwise_simd.h"
#include "backend/cpu/families.h"
#include "base/thread_pool.h"
#include "ops/fused.h"
#include "ops/registry.h"

namespace spore::cpu {
namespace {

constexpr int64_t kBlock = 16384;  // the elementwise kernels' chunk: 64 KB of f32, in L2 while both steps run

// constant: KernelContext::constant_inputs of the call (the fused op's x and w keep their indices 0 and 1).
void run_kernel(OpId op, DType t, std::span<const Tensor> inputs, Tensor& out, const Attrs& attrs,
                uint64_t constant = 0) {
  const KernelInfo* ki = kernel_registry().find(Backend::cpu, op, t);
  SPORE_CHECK(ki != nullptr && ki->fn != nullptr, ErrorCode::unsupported, "[{}] no cpu kernel for {}", op_name(op),
              dtype_name(t));
  KernelContext kc{inputs, std::span<Tensor>(&out, 1), attrs, op, {}};
  kc.constant_inputs = constant;
  ki->fn(kc);
}

// The UnaryOp (and its parameters) of the activation, as unary_lowp_kernel derives them for f32.
UnaryOp unary_of(OpId act, const Attrs& a, UnaryParams& p) {
  const auto op = unary_op_for(act, act == "gelu"_op && a.s("approximate") == "tanh");
  SPORE_CHECK(op.has_value(), ErrorCode::internal, "fused epilogue: {} is not an activation", op_name(act));
  if (*op == UnaryOp::leaky_relu) p.a = static_cast<float>(a.f("alpha"));
  if (*op == UnaryOp::hardsigmoid) {
    p.a = static_cast<float>(a.f("alpha"));
    p.b = static_cast<float>(a.f("beta"));
  }
  if (*op == UnaryOp::clip) {
    p.a = static_cast<float>(a.f("min"));
    p.b = static_cast<float>(a.f("max"));
  }
  return *op;
}

// The f32 epilogue of elements [b, b + m): residual add, then the activation, in place.
struct EpilogueF32 {
  float* y;
  const float* res;
  bool has_act;
  UnaryOp op;
  UnaryParams p;

  void operator()(int64_t b, int64_t m) const {
    float* __restrict yb = y + b;
    if (res) {
      const float* __restrict rb = res + b;
      for (int64_t i = 0; i < m; ++i) yb[i] = yb[i] + rb[i];
    }
    if (has_act) unary_f32(op, yb, yb, static_cast<size_t>(m), p);
  }
  // Over the whole output, in parallel blocks.
  void all(int64_t n) const {
    parallel_for(
        num_chunks(n, kBlock),
        [&](int64_t blk) {
          const int64_t b = blk * kBlock;
          (*this)(b, std::min(kBlock, n - b));
        });  // the output in order, where the conv's tasks left it
  }
};

// Clears the pending conv epilogue however the conv kernel returns.
struct PendingEpilogue {
  explicit PendingEpilogue(ConvEpilogue* e) { pending_conv_epilogue() = e; }
  ~PendingEpilogue() { pending_conv_epilogue() = nullptr; }
  PendingEpilogue(const PendingEpilogue&) = delete;
  PendingEpilogue& operator=(const PendingEpilogue&) = delete;
};

// pool="max2x2": the conv output goes to a scratch buffer of this thread (kept between calls: a fresh
// multi-megabyte allocation per call would page-fault every run), the pooled result to the kernel's output.
Tensor conv_scratch(const Shape& shape, DType t) {
  thread_local std::shared_ptr<Storage> storage;
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(t);
  if (!storage || storage->size() < bytes) storage = Storage::allocate(bytes, "conv2d_fused pool scratch");
  return Tensor::from_storage(storage, shape, contiguous_strides(shape), 0, t);
}

Shape conv_output_shape(const KernelContext& k, std::span<const Tensor> ins) {
  const Shape& y = k.out(0).shape();
  // The pooled output is floor(conv / 2): recover the conv's own size from its geometry (conv2d's shape rule).
  const OpDef& def = op_registry().get("conv2d"_op);
  std::vector<TensorType> types;
  for (const Tensor& t : ins) types.push_back(TensorType::of(t.dtype(), t.shape()));
  const InferContext c{def, types, k.attrs, "conv2d_fused"};
  const TensorType out = def.infer(c)[0];
  return Shape{y[0], y[1], out.dims[2].size, out.dims[3].size};
}

void fused_kernel(KernelContext& k) {
  const OpId base = *fused::base_op(k.op);
  const fused::Operands o = fused::operands(k.attrs, k.num_inputs());
  const bool pool = base == "conv2d"_op && k.attrs.s("pool") == "max2x2";
  Tensor& out = k.out(0);
  const DType t = out.dtype();
  std::vector<Tensor> ins{k.in(0), k.in(1)};
  if (o.bias >= 0) ins.push_back(k.in(o.bias));
  Tensor y = pool ? conv_scratch(conv_output_shape(k, ins), t) : out;
  const std::optional<OpId> act = fused::activation_op(k.attrs.s("activation"));
  const Tensor* res = o.residual >= 0 ? &k.in(o.residual) : nullptr;
  const bool src_blocked = base == "conv2d"_op && k.attrs.s("src_layout") == "nchw8c";
  const bool dst_blocked = base == "conv2d"_op && k.attrs.s("dst_layout") == "nchw8c";
  if (src_blocked || dst_blocked) {
    // Blocked layouts (passes/layout.cpp): the epilogue is elementwise, so it runs on the blocked output (the
    // residual has the same layout). spore's blocked kernels (Winograd, direct) apply it to each task's output
    // right after computing it, on that thread (ResNet-style batch 1 at 2 threads: a pass afterwards read half of
    // each output from the other core); after oneDNN it runs over cache-sized blocks afterwards.
    SPORE_CHECK(t == DType::f32 && !pool, ErrorCode::unsupported,
                "[conv2d_fused] nchw8c layouts need f32 and pool=none, got {} pool={}", dtype_name(t), k.attrs.s("pool"));
    EpilogueF32 e{out.data<float>(), res ? res->data<float>() : nullptr, act.has_value(), UnaryOp::relu, {}};
    if (act) e.op = unary_of(*act, k.attrs, e.p);
    const std::function<void(int64_t, int64_t)> fn = [&e](int64_t b, int64_t m) { e(b, m); };
    const StoreEpilogue in_registers{e.res, act.has_value()};  // residual and/or relu: fused into the stores
    const bool simple = !act || e.op == UnaryOp::relu;
    const bool applied = conv2d_blocked(ins[0], ins[1], o.bias >= 0 ? &ins[2] : nullptr, out, k.attrs, src_blocked,
                                        dst_blocked, (k.constant_inputs >> 1) & 1, res || act ? &fn : nullptr,
                                        (res || act) && simple ? &in_registers : nullptr);
    if ((res || act) && !applied) e.all(out.numel());
    return;
  }
  if (t == DType::f32) {
    EpilogueF32 e{y.data<float>(), res ? res->data<float>() : nullptr, act.has_value(), UnaryOp::relu, {}};
    if (act) e.op = unary_of(*act, k.attrs, e.p);
    const int64_t c = y.dim(1), h = pool ? y.dim(2) : 0, w = pool ? y.dim(3) : 0;
    const int64_t image = pool ? c * h * w : 0, pooled = pool ? c * (h / 2) * (w / 2) : 0;
    // Only f32 conv2d takes the per-image hook: f16/bf16 convs compute in f32 staging buffers, and the
    // epilogue must see the rounded outputs. With pool, the hook pools each image while it is in cache.
    ConvEpilogue hook{[&](int64_t b, int64_t m) {
                        e(b, m);
                        if (pool)
                          max_pool_2x2_planes(y.data<float>() + b, out.data<float>() + b / image * pooled, m / (h * w), h, w);
                      },
                      false};
    if (pool && !res && (!act || *act == "relu"_op)) {
      hook.pooled = out.data<float>();
      hook.pooled_relu = act.has_value();
    }
    {
      PendingEpilogue guard(base == "conv2d"_op ? &hook : nullptr);
      run_kernel(base, t, ins, y, k.attrs, k.constant_inputs & 3);  // the base kernels read only their own attributes
    }
    if (hook.applied) return;
    e.all(y.numel());
  } else {
    run_kernel(base, t, ins, y, k.attrs, k.constant_inputs & 3);
    if (y.numel() == 0) return;
    if (res) {
      const Tensor sum_in[2] = {y, *res};
      run_kernel("add"_op, t, sum_in, y, Attrs{});
    }
    if (act) {
      const Tensor act_in[1] = {y};
      run_kernel(*act, t, act_in, y, k.attrs);
    }
  }
  if (pool) run_kernel("max_pool2d"_op, t, std::span<const Tensor>(&y, 1), out, fused::pool_attrs());
}

}  // namespace

void register_fused(KernelRegistry& r) {
  r.add(Backend::cpu, "conv2d_fused"_op, dtypes::floating, fused_kernel, "onednn+hwy");
  r.add(Backend::cpu, "linear_fused"_op, dtypes::floating, fused_kernel, "onednn+hwy");
}

}  // namespace spore::cpu
