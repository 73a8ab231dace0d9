#pragma once
// A small Prometheus registry (text exposition format 0.0.4): counters, gauges and histograms, each series keyed by
// its labels (the `model` label on every LLM and tensor series). Values live under the registry's own mutex, which
// request threads take for a few adds; the engine's loop never touches it (serve reads llm::EngineStats when
// rendering, through collectors), so scraping /metrics cannot slow decoding.
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace spore::serve {

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { counter, gauge, histogram };

class Metrics {
 public:
  // Declares a family (before its first use; declaring it again is a no-op). Histograms take bucket upper bounds.
  void declare(const std::string& name, MetricType type, const std::string& help, std::vector<double> buckets = {});

  void add(const std::string& name, const Labels& labels, double v = 1);  // counter (or gauge) += v
  void set(const std::string& name, const Labels& labels, double v);      // gauge, or a counter mirrored from a source
  void observe(const std::string& name, const Labels& labels, double v);  // histogram
  // Sets a histogram series from cumulative counts a source already keeps (one per bucket, +Inf last); `sum` < 0
  // leaves _sum out (the source does not know it).
  void set_histogram(const std::string& name, const Labels& labels, const std::vector<int64_t>& cumulative, double sum);

  // Called at the start of every render, outside the registry's lock, to refresh gauges from their sources.
  void add_collector(std::function<void(Metrics&)> fn);

  std::string render();
  double value(const std::string& name, const Labels& labels);  // for tests: counter/gauge value, histogram count

  // Buckets: exponential ladders for latencies (seconds) and sizes.
  static std::vector<double> latency_buckets();  // 1 ms .. 60 s
  static std::vector<double> token_buckets();    // 1 .. 16384

 private:
  struct Series {
    double value = 0;
    std::vector<double> counts;  // histogram: per bucket (not cumulative), +Inf last
    double sum = 0;
    bool has_sum = true;
  };
  struct Family {
    MetricType type = MetricType::counter;
    std::string help;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  // by rendered label set
  };
  Family& family(const std::string& name);  // with mu_ held; a family never declared is an internal error
  static std::string label_text(const Labels& labels);

  std::mutex mu_;
  std::map<std::string, Family> families_;  // sorted by name: the render is stable
  std::vector<std::function<void(Metrics&)>> collectors_;
  std::mutex collect_mu_;  // one render runs the collectors at a time
};

// Escapes a label value for the text format (\\, \", \n).
std::string escape_label_value(const std::string& v);

}  // namespace spore::serve
