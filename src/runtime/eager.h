#pragma once
// The dispatcher behind every ops:: call: records a node while a trace is active on this thread,
// otherwise runs the op now (view, kernel, or decomposition, in that order).
#include <string_view>

#include "ops/dispatch.h"
#include "ops/kernel.h"
#include "ops/registry.h"

namespace spore {

class EagerDispatcher final : public Dispatcher {
 public:
  std::vector<Tensor> call(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) override;
};

// Runs one op eagerly on `backend` with already-normalized attrs and inferred output types. An output whose inferred
// type has a symbolic dim (a data-dependent op: nonzero, unique, ...) is passed to the kernel undefined, and the
// kernel allocates it once it knows the size; it must come back with the inferred dtype and rank. `node` names the
// call in the profiler; `dynamic` marks it as a dynamic-region node of a plan (its impl shows as "dynamic:<impl>").
std::vector<Tensor> run_op_eager(const OpDef& def, std::span<const Tensor> inputs, const Attrs& attrs,
                                 std::span<const TensorType> in_types, std::span<const TensorType> out_types,
                                 Backend backend, std::string_view node = {}, bool dynamic = false);

}  // namespace spore
