// Tracing, compiled functions (plan cache, replay, input checks, odd outputs) and the profiler.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ir/test_ops.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "runtime/jit.h"
#include "runtime/profiler.h"
#include "runtime/runtime.h"
#include "runtime/trace.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "base/thread_pool.h"

namespace spore {
namespace {

using test::f32_tensor;
using test::test_ops;

Tensor call1(OpId op, std::vector<Tensor> ins, const Attrs& attrs = {}) { return ops::call1(op, ins, attrs); }

// y = scale(neg(x) + w, alpha=0.5), plus the second output of split2(x).
std::vector<Tensor> small_fn(std::span<const Tensor> in) {
  const auto& t = test_ops();
  Tensor n = call1(t.neg, {in[0]});
  Tensor s = call1(t.add, {n, in[1]});
  Tensor y = call1(t.scale, {s}, Attrs{{"alpha", 0.5}});
  std::vector<Tensor> parts = ops::call(t.split2, std::vector<Tensor>{in[0]});
  return {y, parts[1]};
}

TEST(Trace, MakesTheExpectedGraph) {
  test_ops();
  const TensorType ty(DType::f32, {Dim::symbol("batch"), 4});
  auto g = trace_function(small_fn, {ty, ty}, {"x", "w"});
  EXPECT_EQ(print_graph(*g),
            "graph @main(%x: f32[batch,4], %w: f32[batch,4]) {\n"
            "  %2 = t_neg(%x) : f32[batch,4]\n"
            "  %3 = t_add(%2, %w) : f32[batch,4]\n"
            "  %4 = t_scale(%3) {alpha=0.5} : f32[batch,4]\n"
            "  %5, %6 = t_split2(%x) : f32[batch,4], f32[batch,4]\n"
            "  return %4, %6\n"
            "}\n");
  verify_graph(*g);
}

TEST(Trace, CapturedTensorsBecomeDeduplicatedConstants) {
  const auto& t = test_ops();
  Tensor bias = f32_tensor({1, 2, 3}, {3});
  auto g = trace_function(
      [&](std::span<const Tensor> in) {
        Tensor a = call1(t.add, {in[0], bias});
        return std::vector<Tensor>{call1(t.add, {a, bias})};
      },
      {TensorType(DType::f32, {3})});
  int consts = 0;
  for (const Node* n : g->nodes()) consts += n->op == "constant"_op;
  EXPECT_EQ(consts, 1);
}

TEST(Trace, ReadingSymbolicDataNamesTheProducer) {
  const auto& t = test_ops();
  try {
    trace_function(
        [&](std::span<const Tensor> in) {
          Tensor y = call1(t.neg, {in[0]});
          (void)y.to_doubles();  // data-dependent Python-style control flow cannot be traced
          return std::vector<Tensor>{y};
        },
        {TensorType(DType::f32, {2})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("symbolic"), std::string::npos) << m;
    EXPECT_NE(m.find("t_neg"), std::string::npos) << m;
  }
}

TEST(Trace, InferenceErrorsSurfaceWhileTracing) {
  const auto& t = test_ops();
  try {
    trace_function([&](std::span<const Tensor> in) { return std::vector<Tensor>{call1(t.add, {in[0], in[1]})}; },
                   {TensorType(DType::f32, {2}), TensorType(DType::f32, {3})});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[t_add]"), std::string::npos) << e.what();
  }
}

TEST(CompiledFunction, CachesPerSignatureAndReplaysWithNewValues) {
  test_ops();
  CompiledFunction f(small_fn);
  Tensor x = f32_tensor({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  Tensor w = f32_tensor({8, 7, 6, 5, 4, 3, 2, 1}, {2, 4});
  auto y = f({x, w});
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(y[0].to_doubles(), (std::vector<double>{3.5, 2.5, 1.5, 0.5, -0.5, -1.5, -2.5, -3.5}));
  EXPECT_EQ(y[1].to_doubles(), (std::vector<double>{-1, -2, -3, -4, -5, -6, -7, -8}));
  EXPECT_EQ(f.cache_size(), 1u);

  // Same signature, new values: no retrace, fresh results (earlier outputs are not overwritten).
  Tensor x2 = f32_tensor({0, 0, 0, 0, 2, 2, 2, 2}, {2, 4});
  auto y2 = f({x2, w});
  EXPECT_EQ(f.cache_size(), 1u);
  EXPECT_EQ(y2[0].to_doubles(), (std::vector<double>{4, 3.5, 3, 2.5, 1, 0.5, 0, -0.5}));
  EXPECT_EQ(y[0].to_doubles()[0], 3.5);

  // A new shape is a new signature.
  auto y3 = f({f32_tensor({1, 2, 3, 4}, {1, 4}), f32_tensor({1, 1, 1, 1}, {1, 4})});
  EXPECT_EQ(f.cache_size(), 2u);
  EXPECT_EQ(y3[0].to_doubles(), (std::vector<double>{0, -0.5, -1, -1.5}));

  // Graph mode agrees with eager mode bit for bit.
  auto eager = small_fn(std::vector<Tensor>{x, w});
  EXPECT_TRUE(eager[0].bit_equal(y[0]));
  EXPECT_TRUE(eager[1].bit_equal(y[1]));

  // Non-contiguous inputs are accepted.
  Tensor xt = f32_tensor({1, 5, 2, 6, 3, 7, 4, 8}, {4, 2}).permute(std::vector<int64_t>{1, 0});
  EXPECT_TRUE(f({xt, w})[0].bit_equal(y[0]));
}

TEST(CompiledFunction, PlanRejectsWrongInputsClearly) {
  test_ops();
  CompiledFunction f(small_fn);
  Tensor x = f32_tensor({1, 2, 3, 4}, {1, 4});
  Plan& plan = f.plan_for(std::vector<Tensor>{x, x});
  EXPECT_GT(plan.num_kernels(), 0);
  try {
    plan.run(std::vector<Tensor>{x, f32_tensor({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4})});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shape_mismatch);
    const std::string m = e.what();
    EXPECT_NE(m.find("input 1 (%in1): expected f32[1,4], got f32[2,4]"), std::string::npos) << m;
  }
  try {
    plan.run(std::vector<Tensor>{x});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plan takes 2 inputs, got 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan.run(std::vector<Tensor>{x, Tensor::from_doubles({1, 2, 3, 4}, {1, 4}, DType::f64)}), Error);
  // Shapes the traced function cannot handle fail while compiling, naming the op.
  try {
    f({x, f32_tensor({1, 2}, {1, 2})});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t_add"), std::string::npos) << e.what();
  }
}

TEST(CompiledFunction, OutputsThatAreInputsConstantsOrDuplicates) {
  const auto& t = test_ops();
  Tensor k = f32_tensor({10, 20}, {2});
  CompiledFunction f([&](std::span<const Tensor> in) {
    Tensor y = call1(t.neg, {in[0]});
    Tensor z = call1(t.add, {y, in[0]});  // y is both an output and used later
    return std::vector<Tensor>{in[0], k, y, y, z, in[0]};
  });
  for (double base : {1.0, 3.0}) {
    auto out = f({Tensor::from_doubles({base, base + 1}, {2}, DType::f32)});
    ASSERT_EQ(out.size(), 6u);
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{base, base + 1}));
    EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{10, 20}));
    EXPECT_EQ(out[2].to_doubles(), (std::vector<double>{-base, -base - 1}));
    EXPECT_EQ(out[3].to_doubles(), (std::vector<double>{-base, -base - 1}));
    EXPECT_EQ(out[4].to_doubles(), (std::vector<double>{0, 0}));
    EXPECT_EQ(out[5].to_doubles(), (std::vector<double>{base, base + 1}));
  }
}

// Plan::run's output callback (data parallelism starts a gradient's allreduce there): every output once, with its
// final value, in the order output_ready_steps() gives; inputs and constants before the first step; a duplicate
// with its source; a throwing callback stops the calls and its error comes out of run() after the run.
TEST(CompiledFunction, OutputReadyCallbackReportsEachFinalOutputOnce) {
  const auto& t = test_ops();
  Tensor k = f32_tensor({10, 20}, {2});
  CompiledFunction f([&](std::span<const Tensor> in) {
    Tensor y = call1(t.neg, {in[0]});
    Tensor z = call1(t.add, {y, k});
    Tensor w = call1(t.scale, {z}, Attrs{{"alpha", 0.5}});
    return std::vector<Tensor>{w, in[0], k, y, y, z};
  });
  const std::vector<Tensor> xs{Tensor::from_doubles({0.75, -1.5}, {2}, DType::f32)};
  Plan& plan = f.plan_for(xs);
  const std::vector<int>& steps = plan.output_ready_steps();
  ASSERT_EQ(steps.size(), 6u);
  EXPECT_EQ(steps[1], -1);
  EXPECT_EQ(steps[2], -1);
  EXPECT_EQ(steps[3], steps[4]);
  EXPECT_LT(steps[3], steps[5]);
  EXPECT_LT(steps[5], steps[0]);
  std::vector<int> order;
  std::vector<std::vector<double>> seen(6);
  std::vector<Tensor> out = plan.run(xs, [&](size_t i, const Tensor& v) {
    order.push_back(static_cast<int>(i));
    seen[i] = v.to_doubles();  // a copy now: the value must already be final
  });
  ASSERT_EQ(order.size(), 6u);
  for (size_t j = 1; j < order.size(); ++j) EXPECT_LE(steps[order[j - 1]], steps[order[j]]) << j;
  std::vector<int> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(seen[i], out[i].to_doubles()) << "output " << i;
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{4.625, 10.75}));

  int calls = 0;
  EXPECT_THROW(plan.run(xs,
                        [&](size_t, const Tensor&) {
                          ++calls;
                          SPORE_FAIL(ErrorCode::invalid_argument, "stop");
                        }),
               Error);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(plan.run(xs)[5].to_doubles(), (std::vector<double>{9.25, 21.5}));  // still runs
}

TEST(CompiledFunction, ConstantOnlyFunctionFoldsToNoKernels) {
  const auto& t = test_ops();
  Tensor k = f32_tensor({1, 2}, {2});
  CompiledFunction f([&](std::span<const Tensor>) { return std::vector<Tensor>{call1(t.neg, {k})}; });
  auto out = f(std::vector<Tensor>{});
  EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{-1, -2}));
  EXPECT_EQ(f.plan_for(std::vector<Tensor>{}).num_kernels(), 0);
}

TEST(CompiledFunction, MemoryCapFailsAtCompileTime) {
  const auto& t = test_ops();
  CompileOptions o;
  o.max_memory = 64;
  CompiledFunction f(
      [&](std::span<const Tensor> in) {
        Tensor a = call1(t.neg, {in[0]});
        Tensor b = call1(t.neg, {a});
        return std::vector<Tensor>{call1(t.neg, {b})};
      },
      o);
  try {
    f({Tensor::zeros({1000}, DType::f32)});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("t_neg"), std::string::npos) << e.what();
  }
}

TEST(Profiler, RecordsOneEventPerKernelAndWritesChromeTrace) {
  test_ops();
  CompiledFunction f(small_fn);
  Tensor x = f32_tensor({1, 2, 3, 4}, {1, 4});
  Plan& plan = f.plan_for(std::vector<Tensor>{x, x});
  Profiler prof;
  EXPECT_EQ(Profiler::active(), &prof);
  f({x, x});
  ASSERT_EQ(static_cast<int64_t>(prof.events().size()), plan.num_kernels());
  for (const KernelEvent& e : prof.events()) {
    EXPECT_GT(e.bytes, 0) << e.op;
    EXPECT_GE(e.end_ns, e.start_ns);
    EXPECT_FALSE(e.node.empty());
    EXPECT_NE(e.dtypes.find("f32"), std::string::npos);
    EXPECT_NE(e.shapes.find("[1,4]"), std::string::npos);
  }
  EXPECT_EQ(prof.events()[0].op, "t_neg");
  EXPECT_EQ(prof.events()[0].bytes, 32);  // 16 in + 16 out
  // The run itself is a span around its kernels (recorded by the plan, before the kernels' events).
  ASSERT_EQ(prof.spans().size(), 1u);
  EXPECT_EQ(prof.spans()[0].cat, "run");
  for (const KernelEvent& e : prof.events()) {
    EXPECT_LE(prof.spans()[0].start_ns, e.start_ns) << e.op;
    EXPECT_GE(prof.spans()[0].end_ns, e.end_ns) << e.op;
  }

  const auto doc = nlohmann::json::parse(prof.chrome_trace_json());
  ASSERT_TRUE(doc.contains("traceEvents"));
  size_t complete = 0;  // one "X" event per kernel and per span; "M" events name the process and threads
  for (const auto& ev : doc["traceEvents"]) {
    if (ev["ph"] == "M") continue;
    ++complete;
    EXPECT_EQ(ev["ph"], "X");
    EXPECT_TRUE(ev.contains("ts") && ev.contains("dur") && ev.contains("name"));
    EXPECT_GE(ev["dur"].get<double>(), 0.0);
  }
  ASSERT_EQ(complete, prof.events().size() + prof.spans().size());

  const std::string table = prof.top_table(10);
  for (const char* op : {"t_neg", "t_add", "t_scale", "t_split2"}) EXPECT_NE(table.find(op), std::string::npos) << table;
  const auto rows = prof.summarize();
  double pct = 0;
  for (const auto& r : rows) {
    EXPECT_EQ(r.calls, 1);
    pct += r.pct;
  }
  if (!rows.empty() && rows[0].ms > 0) {
    EXPECT_NEAR(pct, 100.0, 1e-6);
  }

  // Eager calls are profiled too; nested profilers restore the outer one.
  {
    Profiler inner;
    call1(test_ops().neg, {x});
    EXPECT_EQ(inner.events().size(), 1u);
  }
  EXPECT_EQ(Profiler::active(), &prof);
}

TEST(Profiler, WriteChromeTraceToABadPathFails) {
  Profiler prof;
  EXPECT_THROW(prof.write_chrome_trace("/nonexistent-dir/trace.json"), Error);
}

TEST(Plan, DescribeListsKernelsAndPassRecords) {
  test_ops();
  CompiledFunction f(small_fn);
  Tensor x = f32_tensor({1, 2, 3, 4}, {1, 4});
  Plan& plan = f.plan_for(std::vector<Tensor>{x, x});
  const std::string d = plan.describe();
  EXPECT_NE(d.find("t_scale [test]"), std::string::npos) << d;
  EXPECT_FALSE(plan.pass_records().empty());
  EXPECT_GT(plan.arena_bytes(), 0);
  verify_graph(plan.graph());
}

// The plan times its steps on the team and alone during its first runs and keeps the faster mode per step
// (Plan::calibrated): the outputs stay bit-identical to a one-thread run through calibration and after it.
// f32 values uniform in [-1, 1) (never all zeros).
Tensor random_f32(std::mt19937& rng, Shape s) {
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (double& x : v) x = d(rng);
  return Tensor::from_doubles(v, std::move(s), DType::f32);
}

TEST(Plan, ThreadModeCalibrationKeepsEveryBitAndSettles) {
  init();
  const int saved = num_threads();
  std::mt19937 rng(5);
  const auto rnd = [&](Shape s) { return random_f32(rng, std::move(s)); };
  const Tensor x = rnd({96, 256}), w = rnd({256, 256}), b = rnd({96, 256}), small = rnd({4, 8});
  CompiledFunction f([](std::span<const Tensor> in) {
    Tensor h = ops::relu(ops::add(ops::matmul(in[0], in[1]), in[2]));  // a large step and elementwise ones
    return std::vector<Tensor>{ops::softmax(h), ops::relu(ops::add(in[3], 1.0))};  // and a tiny one
  });
  const std::vector<Tensor> ins{x, w, b, small};
  set_threads(1);
  const std::vector<Tensor> ref = f(ins);
  set_threads(2);
  Plan& plan = f.plan_for(ins);
  bool settled = false;
  for (int run = 0; run < 40; ++run) {  // 13 calibration runs, then 20 of the whole-run check
    const std::vector<Tensor> out = plan.run(ins);
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_EQ(std::memcmp(out[i].raw_data(), ref[i].raw_data(), static_cast<size_t>(ref[i].numel()) * 4), 0)
          << "output " << i << ", run " << run << " at 2 threads";
    if (plan.calibrated()) settled = true;
  }
  EXPECT_TRUE(settled);
  EXPECT_LE(plan.serial_steps(), plan.num_kernels());
  set_threads(saved);
}

// Steps of spore's kernels share one team session per run, a oneDNN-primitive step (batch_norm) runs between
// sessions with the whole team (Plan::run): the bits are those of one thread, from the first run (which records
// which steps are which) on.
TEST(Plan, TeamSessionsKeepEveryBit) {
  init();
  const int saved = num_threads();
  std::mt19937 rng(9);
  const auto rnd = [&](Shape s) { return random_f32(rng, std::move(s)); };
  const Tensor x = rnd({4, 16, 24, 24}), w = rnd({96, 384}), p = rnd({16}), b = rnd({4, 16, 24, 24});
  CompiledFunction f([](std::span<const Tensor> in) {
    Tensor h = ops::relu(ops::add(in[0], in[3]));
    Tensor var = ops::add(ops::mul(in[2], in[2]), 0.5);
    Tensor n = ops::batch_norm(h, in[2], in[2], in[2], var);  // oneDNN, between two runs of session steps
    Tensor m = ops::matmul(ops::reshape(ops::tanh(n), {96, 384}), ops::reshape(in[1], {384, 96}));
    return std::vector<Tensor>{ops::softmax(ops::add(m, 1.0)), ops::sigmoid(h)};
  });
  const std::vector<Tensor> ins{x, w, p, b};
  set_threads(1);
  const std::vector<Tensor> ref = f(ins);
  set_threads(2);
  Plan& plan = f.plan_for(ins);
  for (int run = 0; run < 14; ++run) {
    const std::vector<Tensor> out = plan.run(ins);
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_EQ(std::memcmp(out[i].raw_data(), ref[i].raw_data(), static_cast<size_t>(ref[i].numel()) * 4), 0)
          << "output " << i << ", run " << run << " at 2 threads";
  }
  set_threads(saved);
}

TEST(SerialScope, ParallelForRunsItsTasksOnTheCallingThread) {
  init();
  const int saved = num_threads();
  set_threads(2);
  const std::thread::id me = std::this_thread::get_id();
  std::atomic<int> elsewhere{0}, ran{0};
  {
    SerialScope scope;
    EXPECT_TRUE(SerialScope::active());
    parallel_for(64, [&](int64_t) {
      ran.fetch_add(1);
      if (std::this_thread::get_id() != me) elsewhere.fetch_add(1);
    });
  }
  EXPECT_FALSE(SerialScope::active());
  EXPECT_EQ(ran.load(), 64);
  EXPECT_EQ(elsewhere.load(), 0);
  set_threads(saved);
}

}  // namespace
}  // namespace spore
