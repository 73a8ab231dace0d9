// spore demo: a small MLP run eagerly and in graph mode (traced, compiled, cached), checked to agree
// bit for bit, with the traced IR, the plan, latencies and a profiler table.
#include <algorithm>
#include <chrono>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "base/rng.h"
#include "base/thread_pool.h"
#include "tools/spore/commands.h"

namespace spore::cli {
namespace {

// Fixed-seed normal weights scaled like a fan-in initializer, so every run sees the same model.
Tensor random_tensor(Shape shape, uint64_t stream, double scale) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * philox_normal(1234, stream, i);
  return Tensor::from_doubles(v, std::move(shape), DType::f32);
}

double median_ms(const std::function<void()>& fn, int runs) {
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int cmd_demo(int argc, char** argv) {
  CLI::App app("spore demo: a small MLP (matmul, add, relu, softmax) run eagerly and in graph mode", "spore demo");
  int threads = 0, runs = 50, batch = 32;
  std::string trace;
  bool json = false;
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--runs", runs, "timed runs per mode (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "batch size")->check(CLI::PositiveNumber);
  app.add_option("--trace", trace, "write a Chrome trace (Perfetto) of one graph-mode run to this file");
  app.add_flag("--json", json, "print the figures as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  set_threads(threads);

  const int64_t in_dim = 256, hidden = 512, classes = 10;
  const Tensor w1 = random_tensor({in_dim, hidden}, 1, 1.0 / std::sqrt(double(in_dim)));
  const Tensor b1 = random_tensor({hidden}, 2, 0.1);
  const Tensor w2 = random_tensor({hidden, classes}, 3, 1.0 / std::sqrt(double(hidden)));
  const Tensor b2 = random_tensor({classes}, 4, 0.1);
  const Tensor x = random_tensor({batch, in_dim}, 5, 1.0);
  const TensorFn mlp = [&](std::span<const Tensor> in) {
    Tensor h = ops::relu(ops::add(ops::matmul(in[0], w1), b1));
    return std::vector<Tensor>{ops::softmax(ops::add(ops::matmul(h, w2), b2), -1)};
  };

  const std::vector<Tensor> inputs{x};
  const Tensor eager = mlp(inputs)[0];
  CompiledFunction compiled(mlp);
  Plan& plan = compiled.plan_for(inputs);
  const Tensor graph = compiled(inputs)[0];
  const bool agree = eager.bit_equal(graph);

  const double eager_ms = median_ms([&] { (void)mlp(inputs); }, runs);
  const double graph_ms = median_ms([&] { (void)compiled(inputs); }, runs);
  Profiler prof;
  for (int i = 0; i < std::max(1, runs / 5); ++i) (void)compiled(inputs);
  Profiler single;  // one run for the trace file, so the timeline is readable
  (void)compiled(inputs);
  if (!trace.empty()) single.write_chrome_trace(trace);
  const auto top = prof.summarize();
  const std::string traced_ir = print_graph(*trace_function(mlp, {TensorType::of(DType::f32, x.shape())}, {"x"}), {.max_constant_bytes = 64});

  if (json) {
    nlohmann::json passes = nlohmann::json::array(), top_j = nlohmann::json::array();
    for (const PassRecord& r : plan.pass_records())
      passes.push_back({{"name", r.name}, {"ms", r.ms}, {"changed", r.changed}, {"skipped", r.skipped}});
    for (const OpSummary& s : top)
      top_j.push_back({{"op", s.op}, {"calls", s.calls}, {"ms", s.ms}, {"pct", s.pct}, {"gbps", s.gbps}, {"gflops", s.gflops}});
    const nlohmann::json j = {{"batch", batch},          {"threads", num_threads()},   {"bit_equal", agree},
                              {"eager_ms", eager_ms},    {"graph_ms", graph_ms},       {"kernels", plan.num_kernels()},
                              {"arena_bytes", plan.arena_bytes()}, {"passes", passes}, {"top", top_j},
                              {"trace", trace}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("== traced graph (batch %d, %d threads)\n%s\n", batch, num_threads(), traced_ir.c_str());
    std::printf("== compiled %s", plan.describe().c_str());
    std::printf("== passes\n");
    for (const PassRecord& r : plan.pass_records())
      std::printf("  %-16s %8.3f ms%s\n", r.name.c_str(), r.ms, r.skipped ? " (skipped)" : r.changed ? " (changed)" : "");
    std::printf("\n== eager vs graph: %s\n", agree ? "bit-for-bit equal" : "DIFFERENT");
    std::printf("  eager  %9.3f ms (median of %d)\n  graph  %9.3f ms (median of %d)\n\n", eager_ms, runs, graph_ms, runs);
    std::printf("== profile (graph mode, %d runs)\n%s", std::max(1, runs / 5), prof.top_table(10).c_str());
    if (!trace.empty()) std::printf("\nChrome trace written to %s (open in https://ui.perfetto.dev)\n", trace.c_str());
  }
  SPORE_CHECK(agree, ErrorCode::internal, "eager and graph mode results differ");
  return 0;
}

}  // namespace spore::cli
