#pragma once
// Profiler hooks: the executor (not the kernels) records one event per kernel call with op, node
// name, dtypes, shapes, bytes and FLOPs. Output: Chrome trace JSON (loads in Perfetto) and a top-k
// op table.
//
//   Profiler prof;                    // becomes active on this process until destroyed
//   plan.run(inputs);
//   prof.write_chrome_trace("trace.json");  std::cout << prof.top_table(10);
#include <cstdint>
#include <span>
#include <string>
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
  int thread = 0;
  double bytes = 0;
  double flops = 0;
};

struct OpSummary {
  std::string op;
  int64_t calls = 0;
  double ms = 0;
  double pct = 0;
  double gbps = 0;
  double gflops = 0;
};

class Profiler {
 public:
  Profiler();
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  static Profiler* active();
  static int64_t now_ns();

  void record_kernel(const OpDef& def, std::string_view node, const char* impl, std::span<const TensorType> ins,
                     std::span<const TensorType> outs, const Attrs& attrs, int64_t start_ns, int64_t end_ns);
  void record(KernelEvent e);

  const std::vector<KernelEvent>& events() const { return events_; }
  void clear() { events_.clear(); }
  std::vector<OpSummary> summarize() const;  // sorted by total time, descending
  std::string chrome_trace_json() const;
  void write_chrome_trace(const std::string& path) const;
  std::string top_table(int k = 10) const;

 private:
  std::vector<KernelEvent> events_;
  Profiler* prev_;
  int64_t origin_ns_;
};

}  // namespace spore
