// spore bench: latency percentiles, throughput, peak memory and kernel count of a model file, compiled
// once for fixed shapes (a symbolic first dim = --batch) and run on seeded random inputs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <numeric>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "base/thread_pool.h"
#include "tools/spore/commands.h"
#include "tools/spore/model_util.h"
#include "tools/spore/random_input.h"

namespace spore::cli {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double q) {
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app("spore bench: latency (p50/p90/p99/mean), throughput, peak memory and kernels per run of a model "
               "(.spore, .onnx or text-IR .ir) on random inputs",
               "spore bench");
  std::string model;
  std::vector<std::string> shape_specs;
  int64_t batch = 1, warmup = 3, iters = 0;
  double time_s = 0;
  int threads = 0;
  uint64_t seed = 0;
  bool json = false;
  app.add_option("model", model, "model file: .spore, .onnx or text IR")->required();
  auto* batch_opt = app.add_option("--batch", batch, "size of a symbolic first input dim (default 1)")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", warmup, "untimed runs first (default 3)")->check(CLI::NonNegativeNumber);
  auto* iters_opt = app.add_option("--iters", iters, "timed runs")->check(CLI::PositiveNumber);
  app.add_option("--time-s", time_s, "run for this many seconds instead (default 1 s, at least 10 runs)")
      ->check(CLI::PositiveNumber)
      ->excludes(iters_opt);
  app.add_option("--input-shape", shape_specs, "NAME:D0,D1,... fixes input dims (repeatable; ';' joins several)")
      ->allow_extra_args(false);
  app.add_option("--seed", seed, "seed of the random inputs (default 0)");
  app.add_flag("--json", json, "print {\"p50_ms\", \"p90_ms\", \"p99_ms\", \"mean_ms\", \"throughput_per_s\", \"batch\", "
                               "\"threads\", \"peak_bytes\", \"kernels\", ...}");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  set_threads(threads);

  auto t0 = clock_type::now();
  std::unique_ptr<Graph> g = load_model_file(model, parse_input_shapes(shape_specs));
  const double load_ms = ms_between(t0, clock_type::now());
  bool has_batch_dim = false;
  for (const Value* in : g->inputs()) has_batch_dim |= in->type.rank() > 0 && !in->type.dims[0].is_static();
  SPORE_CHECK(has_batch_dim || batch_opt->count() == 0, ErrorCode::invalid_argument,
              "--batch {}: no input of '{}' has a symbolic first dim (its shapes are fixed; see --input-shape)", batch,
              model);
  const std::vector<Shape> shapes = concrete_input_shapes(*g, batch);
  // Samples per run: the first dim of the first input (the batch when it is symbolic).
  const int64_t samples = !shapes.empty() && !shapes[0].empty() ? shapes[0][0] : 1;

  t0 = clock_type::now();
  Plan plan = compile_for_shapes(*g, shapes);
  const double compile_ms = ms_between(t0, clock_type::now());
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < shapes.size(); ++i) inputs.push_back(random_input(shapes[i], g->inputs()[i]->type.dtype, seed, i));

  for (int64_t i = 0; i < warmup; ++i) plan.run(inputs);
  reset_memory_peak();
  std::vector<double> lat;
  const auto start = clock_type::now();
  const double budget_ms = (time_s > 0 ? time_s : 1.0) * 1000;
  for (int64_t i = 0; iters > 0 ? i < iters : (i < 10 || ms_between(start, clock_type::now()) < budget_ms); ++i) {
    const auto a = clock_type::now();
    plan.run(inputs);  // outputs are freed here, as a caller that consumes them would
    lat.push_back(ms_between(a, clock_type::now()));
  }
  const int64_t peak = static_cast<int64_t>(memory_peak());
  std::vector<double> sorted = lat;
  std::sort(sorted.begin(), sorted.end());
  const double mean = std::accumulate(lat.begin(), lat.end(), 0.0) / static_cast<double>(lat.size());
  const double p50 = percentile(sorted, 0.50), p90 = percentile(sorted, 0.90), p99 = percentile(sorted, 0.99);
  const double throughput = static_cast<double>(samples) / (mean / 1000.0);
  const int used_threads = num_threads();

  if (json) {
    std::cout << nlohmann::json{{"p50_ms", p50},
                                {"p90_ms", p90},
                                {"p99_ms", p99},
                                {"mean_ms", mean},
                                {"min_ms", sorted.front()},
                                {"max_ms", sorted.back()},
                                {"throughput_per_s", throughput},
                                {"batch", samples},
                                {"threads", used_threads},
                                {"peak_bytes", peak},
                                {"arena_bytes", plan.arena_bytes()},
                                {"kernels", plan.num_kernels()},
                                {"iters", static_cast<int64_t>(lat.size())},
                                {"warmup", warmup},
                                {"model", model},
                                {"load_ms", load_ms},
                                {"compile_ms", compile_ms}}
                     .dump()
              << std::endl;
    return 0;
  }
  std::string shape_list;
  for (size_t i = 0; i < shapes.size(); ++i)
    shape_list += fmt::format("{}{}: {}{}", i ? ", " : "", g->inputs()[i]->name, dtype_name(inputs[i].dtype()), shape_str(shapes[i]));
  std::cout << fmt::format("{}: {} | inputs {} | {} threads\n", model, g->name(), shape_list, used_threads);
  std::cout << fmt::format("load {:.1f} ms, compile {:.1f} ms, {} kernels per run, arena {:.1f} KiB\n", load_ms, compile_ms,
                           plan.num_kernels(), static_cast<double>(plan.arena_bytes()) / 1024);
  std::cout << fmt::format("{} runs after {} warm-up: p50 {:.3f} ms  p90 {:.3f} ms  p99 {:.3f} ms  mean {:.3f} ms  "
                           "(min {:.3f}, max {:.3f})\n",
                           lat.size(), warmup, p50, p90, p99, mean, sorted.front(), sorted.back());
  std::cout << fmt::format("throughput {:.1f} samples/s (batch {}), peak memory {:.1f} KiB\n", throughput, samples,
                           static_cast<double>(peak) / 1024);
  return 0;
}

}  // namespace spore::cli
