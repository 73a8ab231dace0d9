#pragma once
// Every ops:: call goes through ops::call, which hands it to the installed Dispatcher. The runtime
// installs one that either runs the kernel now (eager) or records a node (while tracing).
#include <span>
#include <vector>

#include "base/attrs.h"
#include "ir/op_id.h"
#include "tensor/tensor.h"

namespace spore {

class Dispatcher {
 public:
  virtual ~Dispatcher() = default;
  virtual std::vector<Tensor> call(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) = 0;
};

void set_dispatcher(Dispatcher* d);
Dispatcher* current_dispatcher();

namespace ops {
// Calls op `op` on `inputs`; returns all outputs.
std::vector<Tensor> call(OpId op, std::span<const Tensor> inputs, const Attrs& attrs = {});
// Same, for single-output ops.
Tensor call1(OpId op, std::span<const Tensor> inputs, const Attrs& attrs = {});
}  // namespace ops

}  // namespace spore
