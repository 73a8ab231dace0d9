// Graph-structure ops: graph inputs, constants and identity.
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

void register_structure_ops(OpRegistry& r) {
  const auto no_infer = [](const InferContext& c) -> std::vector<TensorType> {
    c.fail(ErrorCode::invalid_argument, "is a graph-structure op; its type is set when the graph is built");
  };
  r.def("input"_op).doc("A graph input (bound at run time).").dtypes(dtypes::all).dispatch_on(-1)
      .traits(Trait::graph_structure | Trait::no_grad, FusionKind::opaque, AmpPolicy::follow).infer(no_infer);
  r.def("constant"_op).doc("A constant tensor stored in the graph.").dtypes(dtypes::all).dispatch_on(-1)
      .traits(Trait::graph_structure | Trait::no_grad, FusionKind::opaque, AmpPolicy::follow).infer(no_infer);
  r.def("identity"_op).doc("Returns its input.").inputs({"x"}).dtypes(dtypes::all)
      .traits(Trait::elementwise | Trait::view | Trait::inplace_ok, FusionKind::injective, AmpPolicy::follow)
      .infer(infer::same_as_input)
      .view([](std::span<const Tensor> in, const Attrs&, const TensorType&) { return in[0]; })
      .grad([](const GradContext& g) { return std::vector<Tensor>{g.output_grads[0]}; });
}

}  // namespace spore
