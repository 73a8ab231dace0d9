#include "ops/dispatch.h"

#include <atomic>

#include "base/error.h"
#include "ir/op_id.h"

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
  return d->call(op, inputs, attrs);
}
Tensor call1(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) {
  auto outs = call(op, inputs, attrs);
  SPORE_ASSERT(outs.size() == 1, "op {} returned {} outputs where 1 was expected", op_name(op), outs.size());
  return std::move(outs[0]);
}
}  // namespace ops

}  // namespace spore
