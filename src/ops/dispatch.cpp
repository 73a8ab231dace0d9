#include "ops/dispatch.h"

#include <atomic>

#include "base/error.h"
#include "ir/op_id.h"
#include "ops/autocast.h"
#include "ops/ops.h"

namespace spore {
namespace {
std::atomic<Dispatcher*> g_dispatcher{nullptr};
}

void set_dispatcher(Dispatcher* d) { g_dispatcher.store(d); }
Dispatcher* current_dispatcher() { return g_dispatcher.load(); }

namespace ops {
std::vector<Tensor> call(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) {
  Dispatcher* d = g_dispatcher.load();
  SPORE_CHECK(d != nullptr, ErrorCode::internal,
              "[{}] spore's runtime is not initialized: call spore::init() (or include <spore/spore.h>)", op_name(op));
  for (size_t i = 0; i < inputs.size(); ++i)
    SPORE_CHECK(inputs[i].defined(), ErrorCode::invalid_argument, "[{}] input {} is an undefined tensor", op_name(op), i);
  if (const AutocastScope* s = AutocastScope::current(); s != nullptr) [[unlikely]] {
    if (const std::optional<DType> t = autocast_dtype(op, inputs, *s)) {
      std::vector<Tensor> cast_inputs(inputs.begin(), inputs.end());
      for (Tensor& x : cast_inputs)
        if ((x.dtype() == DType::f32 || x.dtype() == DType::f16 || x.dtype() == DType::bf16) && x.dtype() != *t)
          x = cast(x, *t);  // an explicit cast op: traced as a node, differentiated back to x's dtype
      return d->call(op, cast_inputs, attrs);
    }
  }
  return d->call(op, inputs, attrs);
}
Tensor call1(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) {
  auto outs = call(op, inputs, attrs);
  SPORE_ASSERT(outs.size() == 1, "op {} returned {} outputs where 1 was expected", op_name(op), outs.size());
  return std::move(outs[0]);
}
}  // namespace ops

}  // namespace spore
