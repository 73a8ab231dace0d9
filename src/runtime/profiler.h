#pragma once
// Profiler hooks: the executor (not the kernels) records one event per kernel call with op, node
// name, kernel impl, dtypes, shapes, bytes and FLOPs, and the thread that made the call. Output:
// Chrome trace JSON (loads in Perfetto: one track per thread, runs as enclosing slices), a top-k
// op table, per-node summaries and hints (profile_hints) on where experience says time is lost.
//
//   Profiler prof;                    // becomes active on this process until destroyed
//   plan.run(inputs);
//   prof.write_chrome_trace("trace.json");  std::cout << prof.top_table(10);
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ops/registry.h"

namespace spore {

struct KernelEvent {
  std::string op;
  std::string node;
  std::string impl;
  std::string dtypes;  // "f32,f32->f32"
  std::string shapes;  // "[2,3],[3]->[2,3]"
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int thread = 0;  // small per-process thread number (the trace's tid)
  double bytes = 0;
  double flops = 0;
  // Structured copies of the above for analysis (profile_hints); empty for events recorded by record().
  OpId op_id{};
  DType dtype = DType::f32;  // the dispatch dtype (what picked the kernel)
  std::vector<Shape> in_shapes, out_shapes;
};

// A named interval that is not a kernel (e.g. one run of a plan); shown in the trace around the kernels.
struct TraceSpan {
  std::string name;
  std::string cat;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int thread = 0;
  std::vector<std::pair<std::string, double>> args;  // the event's "args" in the Chrome trace
};

struct OpSummary {
  std::string op;
  int64_t calls = 0;
  double ms = 0;
  double pct = 0;
  double gbps = 0;
  double gflops = 0;
  std::string impl;  // kernel impl(s) seen, comma-separated in first-seen order
  double bytes = 0;  // totals over all calls
  double flops = 0;
  int64_t nodes = 0;  // distinct node names
};

// One node (op + node name) over all its calls.
struct NodeSummary {
  std::string node;
  std::string op;
  std::string impl;
  std::string dtypes;
  std::string shapes;
  int64_t calls = 0;
  double ms = 0;
  double pct = 0;
  double gbps = 0;
  double gflops = 0;
  double bytes = 0;  // per call
  double flops = 0;  // per call
  const KernelEvent* first = nullptr;  // a representative event (structured shapes), valid while the profiler is
};

class Profiler {
 public:
  Profiler();
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  static Profiler* active();
  static int64_t now_ns();
  // This thread's number in traces: 1 for the first thread that asks, then 2, 3...
  static int thread_number();

  void record_kernel(const OpDef& def, std::string_view node, const char* impl, std::span<const TensorType> ins,
                     std::span<const TensorType> outs, const Attrs& attrs, int64_t start_ns, int64_t end_ns);
  void record(KernelEvent e);
  void record_span(TraceSpan s);
  // Trace identity, for traces merged from several processes (data parallel: one per rank): the Chrome trace's pid
  // and process name (default 1, "spore"), and the time its timestamps count from (default: the profiler's creation;
  // ranks that set it to one instant of a common clock - spore train maps each rank's clock onto rank 0's - merge).
  void set_process(int pid, std::string name) {
    pid_ = pid;
    process_name_ = std::move(name);
  }
  void set_origin_ns(int64_t ns) { origin_ns_ = ns; }
  // A span "run N" (cat "run") on this thread, N counting the runs recorded so far (a compiled plan's runs).
  void record_run(int64_t start_ns, int64_t end_ns);

  const std::vector<KernelEvent>& events() const { return events_; }
  const std::vector<TraceSpan>& spans() const { return spans_; }
  void clear() {
    events_.clear();
    spans_.clear();
    runs_ = 0;
  }
  std::vector<OpSummary> summarize() const;  // by op name, sorted by total time, descending
  std::vector<NodeSummary> summarize_nodes() const;  // by (node, op), sorted by total time, descending
  // {"traceEvents": [...]}: "X" events (kernels: cat "kernel", args node/impl/dtypes/shapes/bytes/flops; spans),
  // "M" events naming the process and each thread.
  std::string chrome_trace_json() const;
  void write_chrome_trace(const std::string& path) const;
  // op | impl | calls | ms | % | us/call | GB/s | GFLOP/s, the k ops with the most total time.
  std::string top_table(int k = 10) const;

 private:
  std::mutex mu_;  // eager dispatch may record from several threads
  std::vector<KernelEvent> events_;
  std::vector<TraceSpan> spans_;
  int64_t runs_ = 0;  // record_run's count
  Profiler* prev_;
  int64_t origin_ns_;
  int owner_thread_;  // the thread that created the profiler (named "main" in traces)
  int pid_ = 1;
  std::string process_name_ = "spore";
};

// Where experience says time is lost, computed from the recorded events (each hint names its nodes):
//  - simd_remainder: matmul/conv-like nodes (AmpPolicy::low) with a channel / inner dim that leaves SIMD vectors
//    partly empty (AVX2: 8 f32, 16 f16/bf16 lanes);
//  - layout_repeated / layout_time: data-movement (injective) kernels repeated with the same shapes at several
//    nodes (inside a repeated block) or taking a large share of the time;
//  - precision: matmul/conv-like nodes running in f32 although the model's precision mode allowed f16/bf16;
//  - low_bandwidth: memory-bound nodes far below the machine's copy bandwidth.
struct HintOptions {
  std::string precision_mode;  // the model file's precision_mode metadata ("" when unknown)
  double bandwidth_gbps = 0;   // measured copy bandwidth (0: skip the bandwidth hint)
  double min_pct = 1.0;        // nodes below this share of the time are not worth a hint
  double layout_pct = 5.0;     // layout ops above this share get a hint
  size_t max_nodes = 8;        // nodes named per hint (the rest are counted)
};
struct ProfileHint {
  std::string kind;
  std::string message;
  std::vector<std::string> nodes;
  double pct = 0;  // share of the kernel time of the nodes concerned
};
std::vector<ProfileHint> profile_hints(const Profiler& prof, const HintOptions& o = {});

}  // namespace spore
