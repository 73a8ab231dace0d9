#pragma once
// Shared by the bench programs (header only: bench/CMakeLists.txt makes one executable per .cpp).
// - run_triad: the STREAM triad a = b + s*c on spore::parallel_for, the bandwidth baseline that
//   other benches divide by, so every ratio comes from one process and one run.
// - SummaryReporter: the usual console output, plus a capture of each run's counters so a program
//   can print a ratio table after RunSpecifiedBenchmarks().
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "runtime/runtime.h"

namespace spore::bench {

// Chunk size for the triad: large enough to amortize a task, small enough for both threads to share.
inline constexpr int64_t triad_grain = 1 << 16;

template <typename T>
void triad(T* a, const T* b, const T* c, T s, int64_t n) {
  parallel_for(num_chunks(n, triad_grain), [&](int64_t chunk) {
    const int64_t lo = chunk * triad_grain, hi = std::min(n, lo + triad_grain);
    T* __restrict pa = a;
    const T* __restrict pb = b;
    const T* __restrict pc = c;
    for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
  });
}

// Fills with a non-zero pattern in parallel (first touch: pages land where the threads run).
template <typename T>
void fill(T* p, int64_t n, T v) {
  parallel_for(num_chunks(n, triad_grain), [&](int64_t chunk) {
    const int64_t lo = chunk * triad_grain, hi = std::min(n, lo + triad_grain);
    for (int64_t i = lo; i < hi; ++i) p[i] = v + static_cast<T>(i & 7);
  });
}

// GB/s (1e9 bytes per second, as STREAM reports) from bytes moved per iteration.
inline benchmark::Counter gbps(double bytes_per_iter) {
  return benchmark::Counter(bytes_per_iter / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      auto& slot = results_[r.benchmark_name()];
      slot.clear();
      for (const auto& [k, c] : r.counters) slot[k] = c.value;
      slot["real_time_ns"] = r.GetAdjustedRealTime();  // in the benchmark's time unit; we use ns
    }
    ConsoleReporter::ReportRuns(runs);
  }
  // The counter of a run, or -1 when that run was filtered out or failed.
  double get(const std::string& name, const std::string& counter) const {
    auto it = results_.find(name);
    if (it == results_.end()) return -1;
    auto c = it->second.find(counter);
    return c == it->second.end() ? -1 : c->second;
  }

 private:
  std::map<std::string, std::map<std::string, double>> results_;
};

// Runs the registered benchmarks with the summary reporter; returns false on bad flags.
inline bool run_benchmarks(int argc, char** argv, SummaryReporter& rep) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return false;
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::Shutdown();
  return true;
}

inline void print_machine_line() {
  std::printf("spore %s (%s), pool threads available: %d\n", version().c_str(), build_type().c_str(),
              hardware_threads());
}

}  // namespace spore::bench
