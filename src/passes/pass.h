#pragma once
// Passes and the PassManager.
//
//   PassManager pm(PassOptions{.verify_each = true});
//   pm.add(make_dce_pass()).add(make_cse_pass()).add(make_fold_constants_pass());
//   pm.run(graph);            // names, timing and verify-after-each are the manager's job
//   for (auto& r : pm.records()) fmt::print("{} {:.3f} ms changed={}\n", r.name, r.ms, r.changed);
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace spore {

struct MemoryPlanInfo;

struct PassOptions {
  int opt_level = 1;
  bool verify_each = false;
  std::vector<std::string> disabled;  // pass names to skip
  std::string save_graphs_dir;        // if set, writes NN_<pass>.ir after each pass
  int memory_optimize_level = 1;
  size_t max_memory = 0;  // 0 = unlimited; memory planning fails above it
  // Preparing a model file: fold_constants skips nodes whose folded outputs would take more bytes than their
  // constant inputs, so compressed weights (int8 + dequantize_linear, f16 + cast) stay compressed in the file.
  // Compiling for running leaves it off: there folding them saves the work on every run.
  bool fold_keeps_size = false;
  // The graph only runs inference (a deployed model): the inference-only passes fold batch_norm into the
  // preceding conv2d/linear and remove dropout. Training graphs (graph mode steps) leave it off.
  bool inference = false;
  // The layout pass marks the blocked convs it makes conv_algo=fast (Winograd F(4x4, 3x3) where it needs fewer
  // multiplies than F(2x2); looser f32 error). Off (the default): conv_algo=precise.
  bool fast_conv = false;
  // Rematerialization (set_context recompute): the rematerialize pass recomputes cheap activations at their late
  // uses; off by default.
  bool recompute = false;
  // When set, the memory_plan pass stores its result here (what the plan compiler keeps for reports).
  MemoryPlanInfo* memory_info = nullptr;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  virtual int min_opt_level() const { return 0; }
  // Returns true if the graph changed.
  virtual bool run(Graph& g, const PassOptions& opts) = 0;
};

struct PassRecord {
  std::string name;
  double ms = 0;
  bool changed = false;
  bool skipped = false;
};

class PassManager {
 public:
  explicit PassManager(PassOptions o = {}) : opts_(std::move(o)) {}
  PassManager& add(std::unique_ptr<Pass> p) {
    passes_.push_back(std::move(p));
    return *this;
  }
  void run(Graph& g);
  const std::vector<PassRecord>& records() const { return records_; }
  const PassOptions& options() const { return opts_; }

 private:
  PassOptions opts_;
  std::vector<std::unique_ptr<Pass>> passes_;
  std::vector<PassRecord> records_;
};

std::unique_ptr<Pass> make_dce_pass();
std::unique_ptr<Pass> make_cse_pass();
std::unique_ptr<Pass> make_fold_constants_pass();
// Assigns arena offsets to intermediate values (Value::arena_offset); see memory_plan.cpp.
std::unique_ptr<Pass> make_memory_plan_pass();
// Groups connected f32 elementwise/broadcast nodes (at least 2; values used outside the group become extra
// outputs) into one fused_elementwise node that keeps the values' names; see fuse_elementwise.cpp.
std::unique_ptr<Pass> make_fuse_elementwise_pass();
// Exact algebraic simplification (x*1, x/1, neg(neg x), transpose/reshape/cast chains, no-op shape ops,
// identity, dropout that is off); see simplify.cpp.
std::unique_ptr<Pass> make_simplify_pass();
// Inference-only (PassOptions::inference, else no-ops): batch_norm folded into a preceding conv2d/linear with
// constant weights; dropout removed.
std::unique_ptr<Pass> make_fold_batch_norm_pass();
std::unique_ptr<Pass> make_remove_dropout_pass();
// conv2d/linear -> [add(residual)] -> [activation], intermediates used once, becomes conv2d_fused/linear_fused
// (ops/fused.h), bit-identical to the unfused ops; see fuse_epilogue.cpp.
std::unique_ptr<Pass> make_fuse_epilogue_pass();
// Inference only: chains of f32 conv2d_fused keep their activations in oneDNN's blocked layout [N, C/8, H, W, 8]
// (src_layout / dst_layout "nchw8c"), with explicit reshape + transpose reorders where values enter or leave a
// chain; see layout.cpp.
std::unique_ptr<Pass> make_layout_pass();
// Inference only: normalization/activation patterns written out as primitives (as ONNX exporters and users write
// them) mapped to spore's ops: layer_norm, rms_norm, softmax, gelu (erf and tanh forms), silu; and
// matmul(x, W constant) [+ bias] -> linear (so fuse_epilogue can take its activation); see patterns.cpp.
std::unique_ptr<Pass> make_recognize_patterns_pass();
// matmul(q * scale, k^T) [+ mask] -> softmax(last axis) -> matmul(., v) becomes one `attention` node
// (ops/attention.h); see fuse_attention.cpp.
std::unique_ptr<Pass> make_fuse_attention_pass();
// linear_blockq nodes reading the same x with the same format (Q/K/V, gate/up) become one linear_blockq_multi
// (one activation preparation, one parallel region; bit-identical outputs), and mul(silu(gate), up) over such a
// pair its silu_mul epilogue; see group_linear_blockq.cpp.
std::unique_ptr<Pass> make_group_linear_blockq_pass();
// PassOptions::recompute only (else a no-op): a cheap elementwise value (relu, sigmoid, add of a constant...)
// whose inputs are live anyway at its late uses is recomputed by a clone right before them, so it does not stay
// live from the forward to the backward; same kernel on the same inputs, so the same bits. Runs before
// memory_plan; see remat.cpp.
std::unique_ptr<Pass> make_rematerialize_pass();

// One arena buffer live at the planner's peak step (aliases and in-place outputs share their buffer, which is
// named by the value that defines it).
struct LiveBuffer {
  std::string value;  // the defining value's name (%value)
  std::string node;   // its producer's name, or its op when unnamed
  std::string op;
  std::string type;   // "f32[8,16]"
  int64_t bytes = 0;  // rounded to 64 as planned
};

// Result of memory planning, readable after the pass ran.
struct MemoryPlanInfo {
  int64_t arena_bytes = 0;   // arena size (peak of simultaneously live intermediates, with packing)
  int64_t total_bytes = 0;   // sum of all intermediate sizes (what O0 would use)
  int64_t num_buffers = 0;
  int64_t num_inplace = 0;      // level 2: outputs written over their dying input 0
  int64_t live_peak_bytes = 0;  // most bytes live at one step (a lower bound for any packing)
  int64_t peak_step = -1;       // index in the graph's node order where live_peak_bytes is reached (-1: no buffers)
  std::string peak_node;        // that node's label
  std::vector<LiveBuffer> live_at_peak;  // the buffers live there, largest first
};
MemoryPlanInfo plan_memory(Graph& g, int level, size_t max_memory);
// At level >= 1 a reshape-like node (reshape, flatten, squeeze, unsqueeze) of an intermediate value gets its
// output placed on its input's bytes (the input's live range grows to cover the output's users): the plan
// runs no kernel for it. So does a view op (slice) whose output is a contiguous run of its input's bytes starting on
// a 64-byte boundary (one step of an RNN's input projection): it is placed on those bytes. True for such a node
// after planning.
bool is_arena_alias(const Node& n);
// At level >= 1 a reshape-like node of a graph input (or of such a view), whose output is not a graph output,
// gets no buffer: the plan hands its users the input's bytes with the output's shape and runs no kernel for it.
bool is_input_view(const Graph& g, const Node& n);

// The default pipeline for graph mode: dce, remove_dropout, fold_batch_norm, simplify, cse, fold_constants, dce,
// recognize_patterns, fuse_attention, dce, group_linear_blockq, fuse_epilogue, fuse_elementwise, layout, dce, rematerialize, memory_plan (the optimizing passes need opt_level >= 1).
// (Decomposition of ops without kernels happens before, in the runtime's lowering.)
void add_default_pipeline(PassManager& pm);

}  // namespace spore
