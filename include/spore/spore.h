#pragma once
// spore's public API: tensors, ops, eager and graph execution, the profiler.
//
//   #include <spore/spore.h>
//   using namespace spore;
//   Tensor x = Tensor::from_vector<float>({1, -2, 3}, {3});
//   Tensor y = ops::relu(x);                                  // eager (PyNative)
//   CompiledFunction f([](std::span<const Tensor> in) { return std::vector{ops::relu(in[0])}; });
//   Tensor z = f({x})[0];                                     // graph mode: traced, compiled, cached
#include "ir/graph.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "runtime/jit.h"
#include "runtime/plan.h"
#include "runtime/profiler.h"
#include "runtime/runtime.h"
#include "runtime/trace.h"
#include "spore/custom_op.h"  // spore::CustomOp, spore::load_custom_ops
#include "tensor/tensor.h"

namespace spore::detail {
// Every translation unit that includes this header initializes the runtime before main(): the
// initializer lives in the user's own object file, so no linker can drop it.
inline const bool runtime_initialized = spore::init();
}  // namespace spore::detail
