// The profiler's reports: Chrome trace schema (kernels and spans as "X" events, "M" events naming every thread),
// the op and node summaries, the hints (each fires on its pattern and names the node, and stays quiet otherwise),
// and what the plan keeps from memory planning (the buffers live at the peak, weights bytes).
#include <algorithm>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "runtime/plan.h"
#include "runtime/profiler.h"
#include "runtime/trace.h"

namespace spore {
namespace {

// A kernel event as the executor would record it, with a chosen duration.
KernelEvent event(OpId op, const std::string& node, std::vector<Shape> ins, std::vector<Shape> outs, double ms,
                  DType dtype = DType::f32, int64_t start_ns = 0) {
  const OpDef& def = op_registry().get(op);
  std::vector<TensorType> in_t, out_t;
  for (const Shape& s : ins) in_t.push_back(TensorType::of(dtype, s));
  for (const Shape& s : outs) out_t.push_back(TensorType::of(dtype, s));
  KernelEvent e;
  e.op = def.name;
  e.node = node;
  e.impl = "test";
  const auto join = [](const std::vector<TensorType>& ts, bool dtypes) {
    std::string s;
    for (size_t i = 0; i < ts.size(); ++i) {
      if (i) s += ',';
      s += dtypes ? std::string(dtype_name(ts[i].dtype)) : shape_str(ts[i].shape());
    }
    return s;
  };
  e.dtypes = join(in_t, true) + "->" + join(out_t, true);
  e.shapes = join(in_t, false) + "->" + join(out_t, false);
  e.op_id = op;
  e.dtype = dtype;
  e.in_shapes = std::move(ins);
  e.out_shapes = std::move(outs);
  e.start_ns = start_ns;
  e.end_ns = start_ns + static_cast<int64_t>(ms * 1e6);
  const OpCost c = def.cost_of(in_t, out_t, def.normalize({}));
  e.bytes = c.bytes;
  e.flops = c.flops;
  e.thread = Profiler::thread_number();
  return e;
}

const ProfileHint* find_hint(const std::vector<ProfileHint>& hints, const std::string& kind, const std::string& node) {
  for (const ProfileHint& h : hints)
    if (h.kind == kind && std::find(h.nodes.begin(), h.nodes.end(), node) != h.nodes.end()) return &h;
  return nullptr;
}

bool has_kind(const std::vector<ProfileHint>& hints, const std::string& kind) {
  return std::any_of(hints.begin(), hints.end(), [&](const ProfileHint& h) { return h.kind == kind; });
}

TEST(ProfilerTrace, ChromeTraceHasCompleteEventsAndNamesEveryThread) {
  Profiler prof;
  const Tensor a = ops::add(Tensor::from_doubles({1, 2, 3, 4}, {2, 2}, DType::f32), 1.0);  // eager: recorded
  ASSERT_TRUE(a.defined());
  std::thread other([] { (void)ops::relu(Tensor::from_doubles({-1, 2}, {2}, DType::f32)); });
  other.join();
  prof.record_span({"run 0", "run", Profiler::now_ns() - 1000, Profiler::now_ns(), Profiler::thread_number()});
  ASSERT_GE(prof.events().size(), 2u);
  std::set<int> threads;
  for (const KernelEvent& e : prof.events()) threads.insert(e.thread);
  EXPECT_EQ(threads.size(), 2u) << "the kernel run on another thread gets its own track";

  const auto doc = nlohmann::json::parse(prof.chrome_trace_json());
  ASSERT_TRUE(doc.contains("traceEvents") && doc["traceEvents"].is_array());
  std::set<int> named, used;
  size_t kernels = 0, spans = 0;
  for (const auto& ev : doc["traceEvents"]) {
    ASSERT_TRUE(ev.contains("ph") && ev.contains("pid") && ev.contains("tid") && ev.contains("name")) << ev.dump();
    if (ev["ph"] == "M") {
      if (ev["name"] == "thread_name") {
        EXPECT_FALSE(ev["args"]["name"].get<std::string>().empty());
        named.insert(ev["tid"].get<int>());
      }
      continue;
    }
    ASSERT_EQ(ev["ph"], "X") << ev.dump();
    for (const char* k : {"cat", "ts", "dur", "args"}) EXPECT_TRUE(ev.contains(k)) << k << " in " << ev.dump();
    EXPECT_GE(ev["dur"].get<double>(), 0.0);
    used.insert(ev["tid"].get<int>());
    if (ev["cat"] == "kernel") {
      ++kernels;
      for (const char* k : {"node", "impl", "dtypes", "shapes", "bytes", "flops"}) EXPECT_TRUE(ev["args"].contains(k)) << k;
    } else {
      EXPECT_EQ(ev["cat"], "run");
      ++spans;
    }
  }
  EXPECT_EQ(kernels, prof.events().size());
  EXPECT_EQ(spans, 1u);
  for (int t : used) EXPECT_TRUE(named.count(t)) << "thread " << t << " has no thread_name";
}

TEST(ProfilerSummary, GroupsByOpWithImplsAndByNode) {
  Profiler prof;
  prof.record(event("relu"_op, "r1", {{64}}, {{64}}, 1.0));
  prof.record(event("relu"_op, "r2", {{64}}, {{64}}, 2.0));
  KernelEvent v2 = event("relu"_op, "r2", {{64}}, {{64}}, 1.0);
  v2.impl = "other";
  prof.record(v2);
  prof.record(event("neg"_op, "n", {{64}}, {{64}}, 4.0));
  const auto ops = prof.summarize();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].op, "neg");
  EXPECT_EQ(ops[1].op, "relu");
  EXPECT_EQ(ops[1].calls, 3);
  EXPECT_EQ(ops[1].nodes, 2);
  EXPECT_EQ(ops[1].impl, "test,other");
  EXPECT_NEAR(ops[0].pct + ops[1].pct, 100.0, 1e-9);
  EXPECT_NEAR(ops[1].pct, 50.0, 1e-6);
  EXPECT_NEAR(ops[1].gbps, ops[1].bytes / (ops[1].ms / 1e3) / 1e9, 1e-9);
  const std::string table = prof.top_table(1);
  EXPECT_NE(table.find("neg"), std::string::npos) << table;
  EXPECT_EQ(table.find("relu "), std::string::npos) << "k = 1 shows one op:\n" << table;
  EXPECT_NE(table.find("1 more ops"), std::string::npos) << table;

  const auto nodes = prof.summarize_nodes();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].node, "n");
  EXPECT_EQ(nodes[1].node, "r2");
  EXPECT_EQ(nodes[1].calls, 2);
  EXPECT_NEAR(nodes[1].ms, 3.0, 1e-6);
  EXPECT_EQ(nodes[1].bytes, ops[1].bytes / 3);  // per call
}

TEST(ProfilerHints, SimdRemainderNamesTheNodeOnlyForPartlyEmptyVectors) {
  Profiler prof;
  prof.record(event("matmul"_op, "fc_odd", {{32, 100}, {100, 10}}, {{32, 10}}, 5.0));  // N = 10: 10 of 16 lanes
  prof.record(event("matmul"_op, "fc_even", {{32, 64}, {64, 32}}, {{32, 32}}, 5.0));
  prof.record(event("conv2d"_op, "conv_rgb", {{1, 3, 16, 16}, {16, 3, 3, 3}}, {{1, 16, 14, 14}}, 5.0));
  prof.record(event("relu"_op, "act", {{32, 10}}, {{32, 10}}, 5.0));
  prof.record(event("matmul"_op, "bmm", {{2, 16, 24}, {2, 24, 10}}, {{2, 16, 10}}, 5.0));  // batched: K, N, not channels
  // Blocked conv activations [N, C/8, H, W, 8] have 32 channels, not 4 (the layout pass's tensors).
  prof.record(event("conv2d"_op, "conv_blocked", {{1, 4, 16, 16, 8}, {32, 32, 3, 3}}, {{1, 4, 14, 14, 8}}, 5.0));
  const auto hints = profile_hints(prof);
  EXPECT_EQ(find_hint(hints, "simd_remainder", "conv_blocked"), nullptr);
  const ProfileHint* bmm = find_hint(hints, "simd_remainder", "bmm");
  ASSERT_NE(bmm, nullptr);
  EXPECT_NE(bmm->message.find("N=10"), std::string::npos) << bmm->message;
  EXPECT_EQ(bmm->message.find("C_in"), std::string::npos) << bmm->message;
  const ProfileHint* odd = find_hint(hints, "simd_remainder", "fc_odd");
  ASSERT_NE(odd, nullptr);
  EXPECT_NE(odd->message.find("N=10"), std::string::npos) << odd->message;
  EXPECT_EQ(odd->message.find("K=100"), std::string::npos) << "K=100 uses 96% of its vectors: " << odd->message;
  const ProfileHint* rgb = find_hint(hints, "simd_remainder", "conv_rgb");
  ASSERT_NE(rgb, nullptr);
  EXPECT_NE(rgb->message.find("C_in=3"), std::string::npos) << rgb->message;
  EXPECT_EQ(find_hint(hints, "simd_remainder", "fc_even"), nullptr);
  EXPECT_EQ(find_hint(hints, "simd_remainder", "act"), nullptr);
  // Nodes below min_pct are not worth a hint.
  EXPECT_FALSE(has_kind(profile_hints(prof, {.min_pct = 30.0}), "simd_remainder"));
}

TEST(ProfilerHints, F32MatmulIsFlaggedOnlyWhenThePrecisionModeAllowedLower) {
  Profiler prof;
  prof.record(event("matmul"_op, "fc_f32", {{32, 64}, {64, 32}}, {{32, 32}}, 5.0));
  prof.record(event("matmul"_op, "fc_f16", {{32, 64}, {64, 32}}, {{32, 32}}, 5.0, DType::f16));
  for (const char* mode : {"allow_fp32_to_fp16", "allow_fp32_to_bf16", "allow_mix_precision"}) {
    const auto hints = profile_hints(prof, {.precision_mode = mode});
    const ProfileHint* h = find_hint(hints, "precision", "fc_f32 (matmul)");
    ASSERT_NE(h, nullptr) << mode;
    EXPECT_EQ(h->nodes.size(), 1u) << "the f16 matmul is fine";
    EXPECT_NE(h->message.find(mode), std::string::npos);
  }
  EXPECT_FALSE(has_kind(profile_hints(prof, {.precision_mode = "force_fp32"}), "precision"));
  EXPECT_FALSE(has_kind(profile_hints(prof, {}), "precision"));
}

TEST(ProfilerHints, RepeatedAndCostlyLayoutKernels) {
  Profiler prof;
  prof.record(event("matmul"_op, "mm", {{64, 64}, {64, 64}}, {{64, 64}}, 10.0));
  for (const char* n : {"block0/transpose", "block1/transpose", "block2/transpose"})
    prof.record(event("transpose"_op, n, {{64, 32}}, {{32, 64}}, 1.0));
  prof.record(event("transpose"_op, "odd_one", {{16, 8}}, {{8, 16}}, 0.5));
  const auto hints = profile_hints(prof);
  const ProfileHint* rep = find_hint(hints, "layout_repeated", "block1/transpose");
  ASSERT_NE(rep, nullptr);
  EXPECT_EQ(rep->nodes.size(), 3u);
  EXPECT_EQ(find_hint(hints, "layout_repeated", "odd_one"), nullptr) << "its shapes differ";
  const ProfileHint* time = find_hint(hints, "layout_time", "odd_one (transpose)");
  ASSERT_NE(time, nullptr) << "3.5 of 13.5 ms in transposes";
  EXPECT_NEAR(time->pct, 100.0 * 3.5 / 13.5, 1e-3);
  EXPECT_FALSE(has_kind(profile_hints(prof, {.layout_pct = 50.0}), "layout_time"));
}

TEST(ProfilerHints, LowBandwidthNeedsAMeasuredBandwidthAndAMemoryBoundNode) {
  Profiler prof;
  // relu of 1 Mi floats: 8 MiB moved in 10 ms = 0.84 GB/s.
  prof.record(event("relu"_op, "slow_relu", {{1 << 20}}, {{1 << 20}}, 10.0));
  // a matmul at the same speed is compute-bound: not this hint.
  prof.record(event("matmul"_op, "mm", {{256, 256}, {256, 256}}, {{256, 256}}, 10.0));
  EXPECT_FALSE(has_kind(profile_hints(prof), "low_bandwidth"));
  const auto hints = profile_hints(prof, {.bandwidth_gbps = 20.0});
  const ProfileHint* h = find_hint(hints, "low_bandwidth", "slow_relu");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(find_hint(hints, "low_bandwidth", "mm"), nullptr);
  EXPECT_FALSE(has_kind(profile_hints(prof, {.bandwidth_gbps = 1.0}), "low_bandwidth")) << "0.84 of 1 GB/s is fine";
}

TEST(PlanMemoryReport, KeepsTheBuffersLiveAtThePeakAndTheWeightBytes) {
  auto g = parse_graph(R"(graph @m(%x: f32[16,16]) {
  %a = relu(%x) : f32[16,16] !name="A"
  %b = neg(%a) : f32[16,16] !name="B"
  %c = add(%a, %b) : f32[16,16] !name="C"
  %d = relu(%c) : f32[16,16] !name="D"
  return %d
})");
  verify_graph(*g);
  CompileOptions o;
  o.disabled_passes = {"fuse_elementwise"};
  Plan plan = compile_plan(std::move(g), o);
  const MemoryPlanInfo& mp = plan.memory_plan();
  EXPECT_EQ(mp.arena_bytes, plan.arena_bytes());
  EXPECT_EQ(mp.live_peak_bytes, 3 * 16 * 16 * 4);  // a, b and c live at C
  EXPECT_NE(mp.peak_node.find("'C'"), std::string::npos) << mp.peak_node;
  ASSERT_EQ(mp.live_at_peak.size(), 3u);
  std::set<std::string> values, nodes;
  int64_t sum = 0;
  for (const LiveBuffer& b : mp.live_at_peak) {
    values.insert(b.value);
    nodes.insert(b.node);
    sum += b.bytes;
    EXPECT_EQ(b.type, "f32[16,16]");
  }
  EXPECT_EQ(sum, mp.live_peak_bytes);
  EXPECT_EQ(values, (std::set<std::string>{"a", "b", "c"}));
  EXPECT_EQ(nodes, (std::set<std::string>{"A", "B", "C"}));
  EXPECT_EQ(plan.weights_bytes(), 0);

  const Tensor w = Tensor::from_doubles(std::vector<double>(8 * 4, 0.5), {8, 4}, DType::f32);
  auto traced = trace_function([&](std::span<const Tensor> in) { return std::vector<Tensor>{ops::relu(ops::matmul(in[0], w))}; },
                               {TensorType::of(DType::f32, {2, 8})});
  Plan p2 = compile_plan(std::move(traced), {});
  EXPECT_EQ(p2.weights_bytes(), 8 * 4 * 4);
}

TEST(PlanMemoryReport, NoIntermediatesMeansNoPeakStep) {
  auto g = parse_graph("graph @m(%x: f32[4]) {\n  %y = relu(%x) : f32[4]\n  return %y\n}");
  Plan plan = compile_plan(std::move(g), {});
  EXPECT_EQ(plan.memory_plan().peak_step, -1);
  EXPECT_TRUE(plan.memory_plan().live_at_peak.empty());
}

}  // namespace
}  // namespace spore
