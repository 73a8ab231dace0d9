#pragma once
// The dynamic region of a plan (issue 41, "data-dependent output shapes"). An op whose output size is known only
// once it has run (nonzero, unique, compress, non_max_suppression, topk_dynamic) infers a fresh symbolic dim for it.
// Once the graph inputs are bound, a symbolic dim can come only from such an op, so compile_plan splits the graph:
//   - the planned part: every node that does not read (directly or through other nodes) a data-dependent output.
//     It compiles as any plan does (passes, memory plan, fast kernels), with the values the region reads as extra
//     outputs;
//   - the region: the data-dependent nodes and everything downstream of them. After the planned steps, the region
//     runs its nodes in order, each one as eager mode runs an op: types inferred from the actual input shapes,
//     outputs allocated, the kernel (or the op's view or decomposition) called through the registry. Tensors are
//     released after their last use. The profiler shows these calls with the impl "dynamic:<kernel impl>".
// An if_select (ONNX If whose condition is computed at run time, both branches inlined) makes the region run on demand
// from its outputs: the condition first, then only the nodes the chosen branch needs.
// Shapes downstream are symbolic in the plan, so new data never recompiles. Whether every region node can run is
// checked at compile time (a kernel on the backend, a view or a decomposition), as for planned nodes.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/kernel.h"

namespace spore {

struct DynamicRegion {
  Backend backend = Backend::cpu;
  std::unique_ptr<Graph> graph;          // inputs: the planned part's outputs (in order); outputs: the region's
  std::unique_ptr<Graph> planned_graph;  // the planned part (the plan's steps point at its attributes)
  // For each output of the whole graph: >= 0 the planned part's output of that index; < 0: region output -1 - k.
  std::vector<int> output_source;
  // Per region node (in graph order), the values whose last use it is (released after it runs).
  std::vector<std::vector<const Value*>> release_after;
  int64_t num_nodes = 0;
  // The region has if_select nodes (ONNX If on a run-time condition): it then runs on demand from its outputs, the
  // condition before either branch, so the branch not taken never runs (its tensors are kept until the run ends).
  bool lazy = false;

  // Runs the region on the planned part's outputs; returns the region's outputs.
  std::vector<Tensor> run(std::span<const Tensor> planned_outputs) const;
};

// Splits `g` (inputs bound, types inferred) when some node has an output with a symbolic dim: the region's nodes
// move into DynamicRegion::graph, `g` keeps the planned part with new outputs (the whole graph's outputs computed
// there, then the values the region reads), and `whole` receives a copy of the graph as it was. Returns null (and
// leaves g alone) when every type is static. Fails, listing them, when region nodes have no kernel on `backend`,
// no view and no decomposition.
std::shared_ptr<DynamicRegion> split_dynamic_region(Graph& g, Backend backend, std::unique_ptr<Graph>& whole);

}  // namespace spore
