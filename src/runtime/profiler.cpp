#include "runtime/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

namespace spore {
namespace {
std::atomic<Profiler*> g_active{nullptr};

std::string join_types(std::span<const TensorType> ts, bool dtypes) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) {
    s += i ? "," : "";
    if (dtypes) {
      s += dtype_name(ts[i].dtype);
    } else {
      s += "[";
      for (size_t d = 0; d < ts[i].dims.size(); ++d) s += (d ? "," : "") + ts[i].dims[d].str();
      s += "]";
    }
  }
  return s;
}
}  // namespace

Profiler::Profiler() : prev_(g_active.exchange(this)), origin_ns_(now_ns()) {}
Profiler::~Profiler() { g_active.store(prev_); }
Profiler* Profiler::active() { return g_active.load(std::memory_order_relaxed); }

int64_t Profiler::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Profiler::record_kernel(const OpDef& def, std::string_view node, const char* impl, std::span<const TensorType> ins,
                             std::span<const TensorType> outs, const Attrs& attrs, int64_t start_ns, int64_t end_ns) {
  KernelEvent e;
  e.op = def.name;
  e.node = std::string(node);
  e.impl = impl ? impl : "";
  e.dtypes = join_types(ins, true) + "->" + join_types(outs, true);
  e.shapes = join_types(ins, false) + "->" + join_types(outs, false);
  e.start_ns = start_ns;
  e.end_ns = end_ns;
  e.thread = static_cast<int>(std::hash<std::thread::id>{}(std::this_thread::get_id()) % 1000);
  const OpCost c = def.cost_of(ins, outs, attrs);
  e.bytes = c.bytes;
  e.flops = c.flops;
  record(std::move(e));
}

void Profiler::record(KernelEvent e) { events_.push_back(std::move(e)); }

std::vector<OpSummary> Profiler::summarize() const {
  std::map<std::string, OpSummary> by_op;
  std::map<std::string, std::pair<double, double>> traffic;  // bytes, flops
  double total = 0;
  for (const auto& e : events_) {
    auto& s = by_op[e.op];
    s.op = e.op;
    ++s.calls;
    const double ms = static_cast<double>(e.end_ns - e.start_ns) / 1e6;
    s.ms += ms;
    total += ms;
    traffic[e.op].first += e.bytes;
    traffic[e.op].second += e.flops;
  }
  std::vector<OpSummary> out;
  for (auto& [name, s] : by_op) {
    s.pct = total > 0 ? 100.0 * s.ms / total : 0;
    const double sec = s.ms / 1e3;
    s.gbps = sec > 0 ? traffic[name].first / sec / 1e9 : 0;
    s.gflops = sec > 0 ? traffic[name].second / sec / 1e9 : 0;
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [](const OpSummary& a, const OpSummary& b) { return a.ms > b.ms; });
  return out;
}

std::string Profiler::chrome_trace_json() const {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : events_) {
    events.push_back({{"name", e.op},
                      {"cat", "kernel"},
                      {"ph", "X"},
                      {"ts", static_cast<double>(e.start_ns - origin_ns_) / 1e3},
                      {"dur", static_cast<double>(e.end_ns - e.start_ns) / 1e3},
                      {"pid", 1},
                      {"tid", e.thread},
                      {"args", {{"node", e.node}, {"impl", e.impl}, {"dtypes", e.dtypes}, {"shapes", e.shapes},
                                {"bytes", e.bytes}, {"flops", e.flops}}}});
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

void Profiler::write_chrome_trace(const std::string& path) const {
  std::ofstream f(path);
  SPORE_CHECK(f.good(), ErrorCode::io_error, "cannot write trace file '{}'", path);
  f << chrome_trace_json();
  SPORE_CHECK(f.good(), ErrorCode::io_error, "error writing trace file '{}'", path);
}

std::string Profiler::top_table(int k) const {
  auto rows = summarize();
  std::string s = fmt::format("{:<20} {:>7} {:>10} {:>7} {:>9} {:>9}\n", "op", "calls", "ms", "%", "GB/s", "GFLOP/s");
  for (int i = 0; i < static_cast<int>(rows.size()) && i < k; ++i) {
    const auto& r = rows[i];
    s += fmt::format("{:<20} {:>7} {:>10.3f} {:>7.1f} {:>9.2f} {:>9.2f}\n", r.op, r.calls, r.ms, r.pct, r.gbps, r.gflops);
  }
  return s;
}

}  // namespace spore
