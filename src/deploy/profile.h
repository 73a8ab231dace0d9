#pragma once
// A model file run under the profiler: what `spore profile` and Python's spore.profile report. The model runs (or,
// with `train`, a compiled training step of a classifier model runs) `warmup` times unprofiled, then `iters` times
// under the Profiler:
//  - a Chrome trace JSON (one "X" event per kernel call with op, node, impl, dtypes, shapes, bytes, FLOPs;
//    runs as enclosing slices; one track per thread; opens in Perfetto / chrome://tracing), when `trace_path` is set;
//  - every op by total kernel time with %, calls, achieved GB/s and GFLOP/s (grouped by op name, with the kernel
//    impl, so custom ops and their versions show side by side), and every node;
//  - the memory report: the planner's arena and live peak (the buffers live there, by value and node), weights
//    (constants) vs activations vs inputs/outputs, and the measured peak of the timed runs;
//  - hints (profile_hints in runtime/profiler.h), each naming its nodes.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "deploy/session.h"
#include "passes/pass.h"
#include "runtime/profiler.h"

namespace spore::deploy {

struct ProfileOptions {
  std::string model;                      // .spore, .onnx or text IR
  std::vector<std::string> input_shapes;  // NAME:D0,D1,... as --input-shape
  std::vector<std::string> input_files;   // NAME=FILE.npy as --input (inference only)
  std::map<std::string, Tensor> inputs;   // inputs given as tensors, by name (inference only)
  int64_t batch = 1;                      // size of a symbolic first input dim
  bool batch_given = false;               // the user chose `batch`: some random input must have a symbolic first dim
  int64_t warmup = 2, iters = 10;
  uint64_t seed = 0;                      // of the random inputs and labels
  int opt_level = CompileOptions{}.opt_level;
  int memory_optimize_level = CompileOptions{}.memory_optimize_level;
  bool fast_conv = false;
  std::string trace_path;                 // Chrome trace JSON to write; "" writes none
  int top_k = 10;                         // ops in ProfileReport::top_table
  // A training step instead: forward + softmax cross-entropy on random labels + backward + SGD (input 0 = images,
  // output 0 = logits).
  bool train = false;
  double lr = 0.01;
};

struct ProfileReport {
  std::string model, model_name, mode;  // mode: "inference" | "train"
  std::vector<SessionInput> inputs;     // the model's inputs, with the shapes they were profiled at:
  std::vector<Shape> shapes;
  int64_t batch = 1;                    // first dim of input 0's shape
  int threads = 0;
  int opt_level = 1, memory_optimize_level = 1;
  std::string precision_mode;           // the .spore file's precision_mode metadata, "" when none
  double load_ms = 0, compile_ms = 0, mean_run_ms = 0, total_ms = 0;  // total_ms: kernel time over all iters
  int64_t iters = 0, warmup = 0, kernels = 0, events = 0;
  std::vector<OpSummary> top;           // every op, by total time, descending
  std::vector<NodeSummary> nodes;       // every node, by total time (`first` is null: the events are gone)
  std::string top_table;                // the top_k rows, as a table
  MemoryPlanInfo memory_plan;
  int64_t arena_bytes = 0, weights_bytes = 0, io_bytes = 0, planned_peak_bytes = 0, measured_peak_bytes = 0;
  std::vector<ProfileHint> hints;
  double bandwidth_gbps = 0;            // the measured copy bandwidth the low_bandwidth hint compares with
  std::string trace;                    // the trace written, "" when none
  int64_t train_params = 0, train_classes = 0;  // train mode: parameters and classes of the step
  double lr = 0;

  double kernel_ms_per_run() const { return total_ms / static_cast<double>(iters); }
  // The report as one JSON object (what `spore profile --json` prints).
  std::string to_json() const;
};

// Checks the options, loads and compiles the model, runs it and reports. Sets no thread count (the caller's).
ProfileReport profile_model(const ProfileOptions& opts);

}  // namespace spore::deploy
