#pragma once
// A Plan is a compiled graph: a linear schedule of kernel calls whose intermediate buffers all live
// in one arena at offsets chosen by the memory-planning pass. For a backend whose device is not the host the
// arena and constants live on that device, and the schedule begins with a copy step per graph input and ends
// with one per output (describe() lists them), so a kernel only ever sees its own device's memory. Compile once per input signature,
// then replay: run() binds inputs, allocates outputs and calls each kernel, nothing else.
//
//   auto g = trace_function(fn, {TensorType::of(DType::f32, {8, 4})});
//   Plan plan = compile_plan(std::move(g), {});
//   std::vector<Tensor> y = plan.run({x});
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/backend.h"
#include "ops/kernel.h"
#include "ops/registry.h"
#include "passes/pass.h"

namespace spore {

struct DynamicRegion;  // runtime/dynamic_region.h

struct CompileOptions {
  Backend backend = Backend::cpu;
  int opt_level = 1;
  int memory_optimize_level = 1;
  size_t max_memory = 0;
  bool verify_each = false;
  std::vector<std::string> disabled_passes;
  std::string save_graphs_dir;
  bool inference = false;  // PassOptions::inference: a deployed model (batch_norm folding, dropout removal)
  bool recompute = false;  // PassOptions::recompute: rematerialize cheap activations (set_context recompute)
  // The CPU executor times small steps on the team and alone during the first runs and keeps the faster.
  // Off for plans whose steps' work changes from run to run with state the graph does not show (LLM decode: the
  // attention over a growing KV cache - a mode picked at 10 cached tokens is wrong at 500).
  bool calibrate_threads = true;
  // PassOptions::fast_conv: 3x3 convs may use Winograd F(4x4, 3x3) (fewer multiplies, ~3x the f32 error of the
  // default against float64: docs/PERFORMANCE.md). Off: the default is as accurate as PyTorch's f32 convs.
  bool fast_conv = false;
};

class Plan {
 public:
  // Runs the plan. Inputs must match the compiled signature (dtype, shape).
  std::vector<Tensor> run(std::span<const Tensor> inputs);
  // Called on the calling thread as soon as output `index`'s value is final, each output once per run: right after
  // the last step that writes it, or before the first step for one no step computes (an input passed through, a
  // constant). Data parallelism starts a gradient's allreduce here while backward goes on. It runs between kernels
  // (inside the executor's parallel region on some backends): keep it short; an exception it throws stops further
  // calls and is rethrown once the run ends.
  using OutputReady = std::function<void(size_t index, const Tensor& value)>;
  std::vector<Tensor> run(std::span<const Tensor> inputs, const OutputReady& on_ready);
  // For each output, the step after which it is final (-1: before the first step): the order run() reports them.
  const std::vector<int>& output_ready_steps() const { return output_ready_step_; }

  const Graph& graph() const { return *graph_; }
  int64_t arena_bytes() const { return arena_bytes_; }
  int64_t num_kernels() const { return static_cast<int64_t>(steps_.size()); }
  const std::vector<PassRecord>& pass_records() const { return pass_records_; }
  // The memory planner's result at compile time (arena, live peak and the buffers live there).
  const MemoryPlanInfo& memory_plan() const { return memory_plan_; }
  int64_t weights_bytes() const { return weights_bytes_; }  // bytes of the constants the plan reads
  std::string describe() const;  // the schedule, one kernel per line
  // Whether the backend's executor has learned how to run the steps (the CPU's: every step's thread mode decided
  // and checked on whole runs, backend/cpu/executor.cpp; at once with one thread or SPORE_PLAN_CALIBRATE=0). False
  // before the first run. spore bench keeps warming up until it is.
  bool calibrated() const;
  int64_t serial_steps() const;  // steps that run on the calling thread alone (after calibration)
  // Nodes downstream of a data-dependent output shape (nonzero, unique, ...: runtime/dynamic_region.h). They run
  // after the planned steps, one by one on the shapes the data gives, into memory allocated per run; 0 when the whole
  // graph is planned. graph() is then the whole graph (its outputs are the plan's), num_kernels() the planned steps.
  int64_t dynamic_nodes() const;

 private:
  friend Plan compile_plan(std::unique_ptr<Graph> g, const CompileOptions& o);
  std::vector<Tensor> run_planned(std::span<const Tensor> inputs, const OutputReady& on_ready);
  struct Step {
    KernelFn fn;
    const OpDef* def;
    const Attrs* attrs;  // the node's (the plan owns the graph)
    const char* impl;
    std::string label;
    std::vector<Tensor> ins;
    std::vector<Tensor> outs;
    std::vector<TensorType> in_types, out_types;
    uint64_t constant_inputs = 0;  // KernelContext::constant_inputs: which inputs are constants of the graph
    bool copy = false;  // a copy of a graph input onto the backend's device, or of an output off it
  };
  Backend backend_ = Backend::cpu;
  Device device_;  // the backend's: where the arena, the constants and the steps' tensors live
  bool calibrate_threads_ = true;  // CompileOptions::calibrate_threads
  // How the steps run (ops/backend.h): made by the plan's backend on the first run, kept across runs.
  std::shared_ptr<StepExecutor> executor_;
  struct Patch {  // where run() writes graph inputs/outputs into the prebuilt step tensors
    int step;
    bool is_output;
    int index;
    int slot;  // graph input or output index
    Shape view;      // a graph input read through a reshape-like node (is_input_view): this shape
    bool is_view = false;
  };
  std::unique_ptr<Graph> graph_;
  std::vector<Step> steps_;
  std::vector<Patch> patches_;
  std::vector<TensorType> input_types_, output_types_;
  // Graph outputs that are not computed by a step: input passthrough (>=0 input index) or constants.
  std::vector<int> output_from_input_;  // -2: computed, -1: constant, -3-j: same value as output j
  std::vector<int> output_ready_step_;  // output_ready_steps()
  std::vector<std::vector<int>> ready_after_step_;  // per step, the outputs final after it (in index order)
  std::vector<Tensor> output_constants_;
  std::shared_ptr<Storage> arena_;
  int64_t arena_bytes_ = 0;
  int64_t weights_bytes_ = 0;
  MemoryPlanInfo memory_plan_;
  std::vector<PassRecord> pass_records_;
  std::shared_ptr<DynamicRegion> dynamic_;  // null: every node is planned
};

// Lowers a graph: binds nothing (input types must be static), decomposes ops without a kernel on
// the backend, runs the pass pipeline and builds the schedule. Fails at compile time (never at run
// time) when an op has neither a kernel nor a decomposition, listing every such node. Nodes downstream of a
// data-dependent output shape go to the plan's dynamic region (dynamic_nodes()) instead of the schedule.
Plan compile_plan(std::unique_ptr<Graph> g, const CompileOptions& o);

// Replaces nodes without a kernel on `backend` by their decomposition (repeatedly); returns the
// nodes that have neither, as "op 'name' (dtype)" strings.
std::vector<std::string> decompose_unsupported(Graph& g, Backend backend);

}  // namespace spore
