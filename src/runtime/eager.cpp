#include "runtime/eager.h"

#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "autodiff/autodiff.h"
#include "runtime/profiler.h"
#include "runtime/runtime.h"
#include "runtime/trace.h"

namespace spore {

std::vector<Tensor> run_op_eager(const OpDef& def, std::span<const Tensor> inputs, const Attrs& attrs,
                                 std::span<const TensorType> in_types, std::span<const TensorType> out_types,
                                 Backend backend, std::string_view node, bool dynamic) {
  if (def.view && def.traits.has(Trait::view) && backend != Backend::null) {
    Tensor v = def.view(inputs, attrs, out_types[0]);
    if (v.defined()) return {v};
  }
  const DType dt = def.dispatch_dtype(in_types, out_types);
  const KernelInfo* k = kernel_registry().find(backend, def.id, dt);
  if (!k) {
    if (def.decompose) return def.decompose(inputs, attrs);
    SPORE_FAIL(ErrorCode::unsupported, "[{}] no {} kernel for dtype {} and no decomposition", def.name,
               backend_name(backend), dtype_name(dt));
  }
  // Kernels get contiguous inputs; copy only when some input is a strided view.
  bool all_contiguous = true;
  for (const Tensor& t : inputs) all_contiguous &= t.is_contiguous();
  std::vector<Tensor> packed;
  if (!all_contiguous) {
    packed.reserve(inputs.size());
    for (const Tensor& t : inputs) packed.push_back(t.is_contiguous() ? t : t.contiguous());
  }
  std::span<const Tensor> ins = all_contiguous ? inputs : std::span<const Tensor>(packed);
  std::vector<Tensor> outs;
  outs.reserve(out_types.size());
  bool sized_by_kernel = false;
  for (const TensorType& t : out_types) {
    const bool known = t.is_static();
    sized_by_kernel = sized_by_kernel || !known;
    outs.push_back(known ? Tensor::empty(t.shape(), t.dtype) : Tensor());
  }
  KernelContext ctx{ins, outs, attrs, def.id, {}};
  if (Profiler* p = Profiler::active()) {
    take_kernel_impl();
    const int64_t t0 = Profiler::now_ns();
    k->fn(ctx);
    const int64_t t1 = Profiler::now_ns();
    const char* noted = take_kernel_impl();
    const char* impl = noted ? noted : k->impl;
    if (dynamic) impl = intern_impl_name(fmt::format("dynamic:{}", impl));
    if (!sized_by_kernel) {
      p->record_kernel(def, node, impl, in_types, out_types, attrs, t0, t1);
    } else {
      std::vector<TensorType> got;
      for (const Tensor& t : outs) got.push_back(t.defined() ? TensorType::of(t.dtype(), t.shape()) : TensorType());
      p->record_kernel(def, node, impl, in_types, got, attrs, t0, t1);
    }
  } else {
    k->fn(ctx);
  }
  if (sized_by_kernel)
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorType& t = out_types[i];
      SPORE_CHECK(outs[i].defined() && outs[i].dtype() == t.dtype && outs[i].rank() == t.rank(), ErrorCode::internal,
                  "[{}] the {} kernel did not size output {} as {} (got {})", def.name, backend_name(backend), i,
                  t.str(),
                  outs[i].defined() ? fmt::format("{}{}", dtype_name(outs[i].dtype()), shape_str(outs[i].shape()))
                                    : std::string("none"));
    }
  return outs;
}

namespace {

// Normalizing copies every attribute (names, lists) on each call, yet a program calls an op with the same
// attributes again and again: the last normalization per op and thread is kept. Shared so that a nested call
// replacing the entry cannot pull the attributes from under a running call.
struct NormalizedEntry {
  const OpDef* def = nullptr;
  Attrs given;
  std::shared_ptr<const Attrs> normalized;
};
thread_local std::vector<NormalizedEntry> t_normalized;

std::shared_ptr<const Attrs> normalized_attrs(const OpDef& def, const Attrs& attrs) {
  const size_t i = static_cast<size_t>(op_index(def.id));  // dense: ids are hashes
  if (i < t_normalized.size()) {
    const NormalizedEntry& e = t_normalized[i];
    if (e.def == &def && e.normalized && e.given == attrs) return e.normalized;
  }
  auto n = std::make_shared<const Attrs>(def.normalize(attrs));
  if (i >= t_normalized.size()) t_normalized.resize(i + 1);
  t_normalized[i] = NormalizedEntry{&def, attrs, n};
  return n;
}

}  // namespace

std::vector<Tensor> EagerDispatcher::call(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) {
  const OpDef& def = op_registry().get(op);
  // Most calls (elementwise ops) have no attributes in schema or call: nothing to normalize or copy.
  std::shared_ptr<const Attrs> normalized;
  if (!attrs.empty() || !def.attrs.empty()) normalized = normalized_attrs(def, attrs);
  const Attrs& a = normalized ? *normalized : attrs;
  if (Tracer* t = Tracer::active()) {
    auto outs = t->record(def, inputs, a);
    autodiff::record_op(def, inputs, a, outs);  // grad rules traced later put the backward into the same graph
    return outs;
  }
  std::vector<TensorType> in_types;
  in_types.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    SPORE_CHECK(!t.is_symbolic(), ErrorCode::invalid_argument,
                "[{}] got a symbolic tensor (made by {}) outside of its trace", def.name, t.symbolic_ref()->producer);
    in_types.push_back(TensorType::of(t.dtype(), t.shape()));
  }
  const auto out_types = def.infer_types(in_types, a);
  if (!autodiff::GradientTape::active()) return run_op_eager(def, inputs, a, in_types, out_types, current_backend());
  std::vector<Tensor> outs;
  {
    // An op with a grad rule is recorded as one node, so a decomposition's inner ops stay off the tape.
    std::optional<autodiff::NoGradGuard> inner;
    if (def.grad) inner.emplace();
    outs = run_op_eager(def, inputs, a, in_types, out_types, current_backend());
  }
  autodiff::record_op(def, inputs, a, outs);
  return outs;
}

}  // namespace spore
