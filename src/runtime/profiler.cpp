#include "runtime/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

namespace spore {
namespace {
std::atomic<Profiler*> g_active{nullptr};
std::atomic<int> g_next_thread{1};

std::string join_types(std::span<const TensorType> ts, bool dtypes) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) {
    s += i ? "," : "";
    if (dtypes) {
      s += dtype_name(ts[i].dtype);
    } else {
      s += "[";
      for (size_t d = 0; d < ts[i].dims.size(); ++d) {
        if (d) s += ',';
        s += ts[i].dims[d].str();
      }
      s += "]";
    }
  }
  return s;
}

std::vector<Shape> static_shapes(std::span<const TensorType> ts) {
  std::vector<Shape> out;
  for (const TensorType& t : ts) out.push_back(t.is_static() ? t.shape() : Shape{});
  return out;
}

double ms_of(const KernelEvent& e) { return static_cast<double>(e.end_ns - e.start_ns) / 1e6; }

void append_impl(std::string& list, const std::string& impl) {
  if (impl.empty()) return;
  size_t start = 0;
  while (start <= list.size()) {  // already listed?
    const size_t end = std::min(list.find(',', start), list.size());
    if (list.compare(start, end - start, impl) == 0) return;
    start = end + 1;
  }
  list += (list.empty() ? "" : ",") + impl;
}

std::string names_list(const std::vector<std::string>& names, size_t max) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max; ++i) s += fmt::format("{}'{}'", i ? ", " : "", names[i]);
  if (names.size() > max) s += fmt::format(" and {} more", names.size() - max);
  return s;
}

}  // namespace

Profiler::Profiler() : prev_(g_active.exchange(this)), origin_ns_(now_ns()), owner_thread_(thread_number()) {}
Profiler::~Profiler() { g_active.store(prev_); }
Profiler* Profiler::active() { return g_active.load(std::memory_order_relaxed); }

int64_t Profiler::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Profiler::thread_number() {
  thread_local const int n = g_next_thread.fetch_add(1);
  return n;
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
  e.thread = thread_number();
  const OpCost c = def.cost_of(ins, outs, attrs);
  e.bytes = c.bytes;
  e.flops = c.flops;
  e.op_id = def.id;
  e.dtype = def.dispatch_dtype(ins, outs);
  e.in_shapes = static_shapes(ins);
  e.out_shapes = static_shapes(outs);
  record(std::move(e));
}

void Profiler::record(KernelEvent e) {
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
}

void Profiler::record_run(int64_t start_ns, int64_t end_ns) {
  const int thread = thread_number();
  std::lock_guard lock(mu_);
  spans_.push_back({fmt::format("run {}", runs_++), "run", start_ns, end_ns, thread});
}

void Profiler::record_span(TraceSpan s) {
  std::lock_guard lock(mu_);
  spans_.push_back(std::move(s));
}

std::vector<OpSummary> Profiler::summarize() const {
  std::map<std::string, OpSummary> by_op;
  std::map<std::string, std::set<std::string>> nodes;
  double total = 0;
  for (const auto& e : events_) {
    auto& s = by_op[e.op];
    s.op = e.op;
    ++s.calls;
    const double ms = ms_of(e);
    s.ms += ms;
    total += ms;
    s.bytes += e.bytes;
    s.flops += e.flops;
    append_impl(s.impl, e.impl);
    nodes[e.op].insert(e.node);
  }
  std::vector<OpSummary> out;
  for (auto& [name, s] : by_op) {
    s.pct = total > 0 ? 100.0 * s.ms / total : 0;
    const double sec = s.ms / 1e3;
    s.gbps = sec > 0 ? s.bytes / sec / 1e9 : 0;
    s.gflops = sec > 0 ? s.flops / sec / 1e9 : 0;
    s.nodes = static_cast<int64_t>(nodes[name].size());
    out.push_back(s);
  }
  std::stable_sort(out.begin(), out.end(), [](const OpSummary& a, const OpSummary& b) { return a.ms > b.ms; });
  return out;
}

std::vector<NodeSummary> Profiler::summarize_nodes() const {
  std::map<std::pair<std::string, std::string>, size_t> index;
  std::vector<NodeSummary> out;
  double total = 0;
  for (const auto& e : events_) {
    auto [it, added] = index.emplace(std::make_pair(e.node, e.op), out.size());
    if (added) {
      NodeSummary s;
      s.node = e.node;
      s.op = e.op;
      s.dtypes = e.dtypes;
      s.shapes = e.shapes;
      s.first = &e;
      out.push_back(std::move(s));
    }
    NodeSummary& s = out[it->second];
    ++s.calls;
    s.ms += ms_of(e);
    s.bytes += e.bytes;
    s.flops += e.flops;
    append_impl(s.impl, e.impl);
    total += ms_of(e);
  }
  for (NodeSummary& s : out) {
    const double sec = s.ms / 1e3;
    s.gbps = sec > 0 ? s.bytes / sec / 1e9 : 0;
    s.gflops = sec > 0 ? s.flops / sec / 1e9 : 0;
    s.pct = total > 0 ? 100.0 * s.ms / total : 0;
    s.bytes /= static_cast<double>(s.calls);
    s.flops /= static_cast<double>(s.calls);
  }
  std::stable_sort(out.begin(), out.end(), [](const NodeSummary& a, const NodeSummary& b) { return a.ms > b.ms; });
  return out;
}

std::string Profiler::chrome_trace_json() const {
  nlohmann::json events = nlohmann::json::array();
  std::set<int> threads{owner_thread_};
  const auto us = [&](int64_t ns) { return static_cast<double>(ns - origin_ns_) / 1e3; };
  for (const auto& s : spans_) {
    threads.insert(s.thread);
    events.push_back({{"name", s.name},
                      {"cat", s.cat},
                      {"ph", "X"},
                      {"ts", us(s.start_ns)},
                      {"dur", static_cast<double>(s.end_ns - s.start_ns) / 1e3},
                      {"pid", pid_},
                      {"tid", s.thread},
                      {"args", [&] {
                         nlohmann::json a = nlohmann::json::object();
                         for (const auto& [k, v] : s.args) a[k] = v;
                         return a;
                       }()}});
  }
  for (const auto& e : events_) {
    threads.insert(e.thread);
    events.push_back({{"name", e.op},
                      {"cat", "kernel"},
                      {"ph", "X"},
                      {"ts", us(e.start_ns)},
                      {"dur", static_cast<double>(e.end_ns - e.start_ns) / 1e3},
                      {"pid", pid_},
                      {"tid", e.thread},
                      {"args",
                       {{"node", e.node},
                        {"impl", e.impl},
                        {"dtypes", e.dtypes},
                        {"shapes", e.shapes},
                        {"bytes", e.bytes},
                        {"flops", e.flops}}}});
  }
  // Metadata: Perfetto names the tracks after these.
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", pid_}, {"tid", 0}, {"args", {{"name", process_name_}}}});
  events.push_back(
      {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid_}, {"tid", 0}, {"args", {{"sort_index", pid_}}}});
  for (int t : threads) {
    const std::string name = t == owner_thread_ ? fmt::format("main (thread {})", t) : fmt::format("thread {}", t);
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid_}, {"tid", t}, {"args", {{"name", name}}}});
    events.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid_}, {"tid", t}, {"args", {{"sort_index", t}}}});
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
  const auto rows = summarize();
  size_t op_w = 2, impl_w = 4;
  for (int i = 0; i < static_cast<int>(rows.size()) && i < k; ++i) {
    op_w = std::max(op_w, rows[i].op.size());
    impl_w = std::max(impl_w, rows[i].impl.size());
  }
  std::string s = fmt::format("{:<{}} {:<{}} {:>7} {:>10} {:>6} {:>10} {:>8} {:>8}\n", "op", op_w, "impl", impl_w, "calls", "ms",
                              "%", "us/call", "GB/s", "GFLOP/s");
  for (int i = 0; i < static_cast<int>(rows.size()) && i < k; ++i) {
    const auto& r = rows[i];
    const double us_per_call = r.calls > 0 ? r.ms * 1e3 / static_cast<double>(r.calls) : 0;
    s += fmt::format("{:<{}} {:<{}} {:>7} {:>10.3f} {:>6.1f} {:>10.2f} {:>8.2f} {:>8.2f}\n", r.op, op_w, r.impl, impl_w, r.calls,
                     r.ms, r.pct, us_per_call, r.gbps, r.gflops);
  }
  if (static_cast<int>(rows.size()) > k) {
    double rest = 0;
    for (size_t i = static_cast<size_t>(k); i < rows.size(); ++i) rest += rows[i].pct;
    s += fmt::format("({} more ops, {:.1f}% of the time)\n", rows.size() - static_cast<size_t>(k), rest);
  }
  return s;
}

namespace {

// SIMD lanes of one AVX2 register for a dtype (the machine this targets; AVX-512 doubles them).
int64_t simd_lanes(DType t) { return std::max<int64_t>(1, 32 / static_cast<int64_t>(dtype_size(t))); }

// The dims that set how full the SIMD vectors of a contraction are: the channels of a convolution (an op with a
// `stride` attribute; NC... layout), the reduction dim K and the output's inner dim N of a matmul-like op.
std::vector<std::pair<std::string, int64_t>> contraction_dims(const OpDef& def, const KernelEvent& e) {
  std::vector<std::pair<std::string, int64_t>> dims;
  if (e.in_shapes.empty() || e.out_shapes.empty() || e.in_shapes[0].empty() || e.out_shapes[0].empty()) return dims;
  const Shape& x = e.in_shapes[0];
  const Shape& y = e.out_shapes[0];
  if (def.find_attr("stride") != nullptr && x.size() >= 3 && y.size() >= 3) {
    // A 5-D activation of a conv is the blocked layout [N, C/8, H, W, 8] (passes/layout.cpp): C = dim 1 * dim 4.
    const auto channels = [](const Shape& s) { return s.size() == 5 ? s[1] * s[4] : s[1]; };
    dims.emplace_back("C_in", channels(x));
    dims.emplace_back("C_out", channels(y));
  } else {
    dims.emplace_back("K", x.back());
    dims.emplace_back("N", y.back());
  }
  return dims;
}

}  // namespace

std::vector<ProfileHint> profile_hints(const Profiler& prof, const HintOptions& o) {
  std::vector<ProfileHint> hints;
  const std::vector<NodeSummary> nodes = prof.summarize_nodes();
  const bool low_allowed = o.precision_mode == "allow_fp32_to_fp16" || o.precision_mode == "allow_fp32_to_bf16" ||
                           o.precision_mode == "allow_mix_precision";
  ProfileHint precision{"precision", "", {}, 0};
  std::map<std::string, ProfileHint> layout_groups;  // op + shapes -> nodes
  ProfileHint layout_time{"layout_time", "", {}, 0};

  for (const NodeSummary& n : nodes) {
    const KernelEvent& e = *n.first;
    if (e.in_shapes.empty() && e.out_shapes.empty()) continue;  // recorded without structure (record())
    const OpDef& def = op_registry().get(e.op_id);
    const bool contraction = def.amp == AmpPolicy::low;
    if (contraction && n.pct >= o.min_pct && is_floating(e.dtype)) {
      const int64_t lanes = simd_lanes(e.dtype);
      std::string bad;
      double worst = 1;
      for (const auto& [dim_name, d] : contraction_dims(def, e)) {
        if (d <= 1 || d % lanes == 0) continue;
        const double used = static_cast<double>(d) / static_cast<double>((d + lanes - 1) / lanes * lanes);
        if (used >= 0.9) continue;  // a large dim with a small remainder loses little
        worst = std::min(worst, used);
        bad += fmt::format("{}{}={} ({:.0f}% of the {}-lane vectors used)", bad.empty() ? "" : ", ", dim_name, d, 100 * used, lanes);
      }
      if (!bad.empty())
        hints.push_back({"simd_remainder",
                         fmt::format("{} '{}' ({}, {:.1f}% of the time): {} not a multiple of {} ({} lanes of {} per AVX2 "
                                     "register); padding it to a multiple of {} (or {} for blocked kernels) fills the vectors",
                                     n.op, n.node, n.shapes, n.pct, bad, lanes, lanes, dtype_name(e.dtype), lanes, 2 * lanes),
                         {n.node},
                         n.pct});
    }
    if (contraction && low_allowed && e.dtype == DType::f32) {
      precision.nodes.push_back(n.node + " (" + n.op + ")");
      precision.pct += n.pct;
    }
    if (def.traits.has(Trait::injective) && !def.traits.has(Trait::graph_structure)) {
      ProfileHint& g = layout_groups[n.op + " " + n.shapes];
      g.kind = n.op;  // filled in below
      g.message = n.shapes;
      g.nodes.push_back(n.node);
      g.pct += n.pct;
      layout_time.nodes.push_back(n.node + " (" + n.op + ")");
      layout_time.pct += n.pct;
    }
    if (o.bandwidth_gbps > 0 && n.pct >= o.min_pct && n.bytes > 0 && n.flops / n.bytes < 1.0 &&
        n.gbps < 0.1 * o.bandwidth_gbps) {
      const double us_per_call = n.ms * 1e3 / static_cast<double>(n.calls);
      hints.push_back({"low_bandwidth",
                       fmt::format("{} '{}' ({}, {:.1f}% of the time) is memory-bound ({:.2f} flop/byte) but moves {:.0f} "
                                   "bytes in {:.1f} us per call: {:.2f} GB/s, {:.1f}% of the measured {:.1f} GB/s{}",
                                   n.op, n.node, n.shapes, n.pct, n.flops / n.bytes, n.bytes, us_per_call, n.gbps,
                                   100 * n.gbps / o.bandwidth_gbps, o.bandwidth_gbps,
                                   n.bytes < 256 * 1024 ? "; the kernel is small, so per-call overhead dominates: fusing it "
                                                          "with its neighbours would help"
                                                        : "; check its kernel for a strided or scalar loop"),
                       {n.node},
                       n.pct});
    }
  }
  for (auto& [key, g] : layout_groups) {
    if (g.nodes.size() < 2 || g.pct < o.min_pct) continue;
    const std::string op = g.kind, shapes = g.message;
    g.kind = "layout_repeated";
    g.message = fmt::format("{} with the same shapes {} runs at {} nodes ({:.1f}% of the time): {}; a layout change "
                            "repeated in every block of the model, which keeping one layout throughout would remove",
                            op, shapes, g.nodes.size(), g.pct, names_list(g.nodes, o.max_nodes));
    hints.push_back(std::move(g));
  }
  if (layout_time.pct >= o.layout_pct) {
    layout_time.message = fmt::format("data-movement kernels (transpose, slice, concat, copies...) take {:.1f}% of the "
                                      "kernel time: {}",
                                      layout_time.pct, names_list(layout_time.nodes, o.max_nodes));
    hints.push_back(std::move(layout_time));
  }
  if (!precision.nodes.empty()) {
    precision.message = fmt::format("the model's precision mode {} allows f16/bf16, but {} matmul/conv node(s) run in f32 "
                                    "({:.1f}% of the time): {}; they had no low-precision kernel when converted, or the "
                                    "conversion kept them",
                                    o.precision_mode, precision.nodes.size(), precision.pct,
                                    names_list(precision.nodes, o.max_nodes));
    hints.push_back(std::move(precision));
  }
  std::stable_sort(hints.begin(), hints.end(), [](const ProfileHint& a, const ProfileHint& b) { return a.pct > b.pct; });
  return hints;
}

}  // namespace spore
