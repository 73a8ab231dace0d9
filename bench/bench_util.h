#pragma once
// Shared by the bench programs (header only: bench/CMakeLists.txt makes one executable per .cpp).
// - run_triad: the STREAM triad a = b + s*c on spore::parallel_for, the bandwidth baseline that
//   other benches divide by, so every ratio comes from one process and one run.
// - Results + run_benchmarks: the usual output (console, or --benchmark_format=json), plus a capture
//   of each run's counters so a program can print a ratio table after the runs.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <type_traits>
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

// Counters of every finished run, by benchmark name; filled by Capture<> during the run.
class Results {
 public:
  void add(const benchmark::BenchmarkReporter::Run& r) {
    if (r.run_type != benchmark::BenchmarkReporter::Run::RT_Iteration || r.error_occurred) return;
    auto& slot = results_[r.benchmark_name()];
    slot.clear();
    for (const auto& [k, c] : r.counters) slot[k] = c.value;
  }
  // The counter of a run, or -1 when that run was filtered out or failed.
  double get(const std::string& name, const std::string& counter) const {
    auto it = results_.find(name);
    if (it == results_.end()) return -1;
    auto c = it->second.find(counter);
    return c == it->second.end() ? -1 : c->second;
  }
  // Where summary tables go: stdout, or stderr when stdout carries --benchmark_format=json.
  std::FILE* out = stdout;

 private:
  std::map<std::string, std::map<std::string, double>> results_;
};

// Any Google Benchmark reporter, also recording each run's counters into Results.
template <typename Base>
class Capture : public Base {
 public:
  explicit Capture(Results& r) : results_(r) {}
  void ReportRuns(const std::vector<benchmark::BenchmarkReporter::Run>& runs) override {
    for (const auto& r : runs) results_.add(r);
    Base::ReportRuns(runs);
  }
  void set_options(benchmark::ConsoleReporter::OutputOptions o) {
    if constexpr (std::is_same_v<Base, benchmark::ConsoleReporter>) this->output_options_ = o;
  }

 private:
  Results& results_;
};

// Runs the registered benchmarks, honouring --benchmark_format and --benchmark_color (a custom
// display reporter would otherwise ignore them). Returns false on bad flags.
inline bool run_benchmarks(int argc, char** argv, Results& results) {
  std::string format = "console";
  bool color = isatty(STDOUT_FILENO) != 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--benchmark_format=", 0) == 0) format = a.substr(19);
    if (a == "--benchmark_color=false" || a == "--benchmark_color=no") color = false;
    if (a == "--benchmark_color=true" || a == "--benchmark_color=yes") color = true;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return false;
  if (format == "json") {
    results.out = stderr;
    Capture<benchmark::JSONReporter> rep(results);
    benchmark::RunSpecifiedBenchmarks(&rep);
  } else {
    Capture<benchmark::ConsoleReporter> rep(results);
    rep.set_options(color ? benchmark::ConsoleReporter::OO_ColorTabular : benchmark::ConsoleReporter::OO_Tabular);
    benchmark::RunSpecifiedBenchmarks(&rep);
  }
  benchmark::Shutdown();
  return true;
}

inline void print_machine_line(std::FILE* out) {
  std::fprintf(out, "spore %s (%s), pool threads available: %d\n", version().c_str(), build_type().c_str(),
              hardware_threads());
}

}  // namespace spore::bench
