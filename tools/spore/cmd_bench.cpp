// spore bench: latency percentiles, throughput, peak memory and kernel count of a model file, compiled
// once for the inputs' shapes and run on them: .npy files (--input NAME=FILE.npy, as `spore run` takes them) and
// seeded random inputs for the rest (a symbolic first dim = --batch). With
// --find-max-batch it only compiles: a search for the largest batch whose planned memory fits --max-memory.
#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <iostream>
#include <numeric>
#include <optional>
#include <regex>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "base/thread_pool.h"
#include "tools/spore/commands.h"
#include "tools/spore/model_util.h"

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

// What a compiled plan holds while it runs, as planned at compile time: the arena of intermediates, the
// constants (weights) and the graph inputs and outputs.
std::string memory_str(const PlannedMemory& m) {
  return fmt::format("{} bytes (arena {} + weights {} + inputs/outputs {})", m.total(), m.arena, m.weights, m.io);
}

// Compiles at `batch` and returns its planned memory, or nullopt when it does not fit `cap` (the arena
// alone is capped at compile time, so a batch far too large fails before allocating anything).
std::optional<PlannedMemory> try_batch(const Graph& g, int64_t batch, CompileOptions o, size_t cap) {
  o.max_memory = cap;
  try {
    const Plan plan = compile_for_shapes(g, concrete_input_shapes(g, batch), o);
    const PlannedMemory m = planned_memory(plan);
    if (static_cast<size_t>(m.total()) > cap) return std::nullopt;
    return m;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::out_of_memory) return std::nullopt;
    throw;
  }
}

// Largest batch (symbolic first dim) whose plan fits `cap`: doubling, then bisection. Planned memory grows
// with the batch, so the search is exact for the plans it compiles.
int find_max_batch(const Graph& g, const std::string& model, const CompileOptions& o, size_t cap, const std::string& cap_text,
                   bool json) {
  int64_t compiles = 0;
  auto fits = [&](int64_t b) {
    ++compiles;
    return try_batch(g, b, o, cap);
  };
  std::optional<PlannedMemory> best = fits(1);
  if (!best) {
    CompileOptions uncapped = o;
    const PlannedMemory need = planned_memory(compile_for_shapes(g, concrete_input_shapes(g, 1), uncapped));
    SPORE_FAIL(ErrorCode::out_of_memory, "--max-memory {} ({} bytes): even batch 1 of '{}' needs {} at memory_optimize_level={}{}",
               cap_text, cap, model, memory_str(need), o.memory_optimize_level,
               o.memory_optimize_level < 2 ? "; try --memory-optimize-level 2" : "");
  }
  constexpr int64_t kLimit = int64_t{1} << 24;
  int64_t lo = 1, hi = 0;  // lo fits; hi (when > 0) does not
  while (hi == 0 && lo < kLimit) {
    const int64_t b = lo * 2;
    if (auto m = fits(b)) {
      lo = b;
      best = m;
    } else {
      hi = b;
    }
  }
  while (hi > 0 && hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (auto m = fits(mid)) {
      lo = mid;
      best = m;
    } else {
      hi = mid;
    }
  }
  if (json) {
    std::cout << nlohmann::json{{"max_batch", lo},
                                {"max_memory", cap},
                                {"planned_peak_bytes", best->total()},
                                {"arena_bytes", best->arena},
                                {"weights_bytes", best->weights},
                                {"io_bytes", best->io},
                                {"memory_optimize_level", o.memory_optimize_level},
                                {"limit_reached", hi == 0},
                                {"compiles", compiles},
                                {"model", model}}
                     .dump()
              << std::endl;
    return 0;
  }
  std::cout << fmt::format("{}: largest batch within --max-memory {} ({} bytes) at memory_optimize_level={}: {}{}\n", model,
                           cap_text, cap, o.memory_optimize_level, lo, hi == 0 ? " (the search limit)" : "");
  std::cout << fmt::format("planned peak {}; batch {} does not fit ({} plans compiled)\n", memory_str(*best), hi == 0 ? lo * 2 : hi,
                           compiles);
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app("spore bench: latency (p50/p90/p99/mean), throughput, peak memory and kernels per run of a model "
               "(.spore, .onnx or text-IR .ir) on random inputs",
               "spore bench");
  std::string model;
  std::vector<std::string> shape_specs, input_specs;
  int64_t batch = 1, warmup = 3, iters = 0;
  double time_s = 0;
  int threads = 0;
  uint64_t seed = 0;
  bool json = false, find_batch = false, no_random = false;
  int memory_level = CompileOptions{}.memory_optimize_level;
  int opt_level = CompileOptions{}.opt_level;
  std::vector<std::string> disabled_passes;
  std::string max_memory_text;
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
  auto* input_opt = app.add_option("--input", input_specs,
                                   "NAME=FILE.npy (repeatable): run on this tensor; inputs not given get seeded random "
                                   "values (floats N(0,1), integers in [0, 10), bools a fair coin)")
                        ->allow_extra_args(false);
  app.add_flag("--no-random", no_random, "every input must be given with --input (no random inputs)");
  bool fast_conv = false;
  app.add_flag("--fast-conv", fast_conv, "3x3 convs may use Winograd F(4x4,3x3): faster, ~3x the f32 error of the default against float64 (docs/PERFORMANCE.md)");
  app.add_option("--seed", seed, "seed of the random inputs (default 0)");
  app.add_option("--memory-optimize-level", memory_level,
                 "0: every intermediate its own buffer, 1: liveness-based reuse (default), 2: also in place and "
                 "tighter packing")
      ->check(CLI::Range(0, 2));
  app.add_option("--opt-level", opt_level,
                 "graph optimization level: 0 runs only dce, constant folding and memory planning (no simplification "
                 "or fusion), 1 the whole pipeline (default)")
      ->check(CLI::Range(0, 3));
  app.add_option("--disable-pass", disabled_passes, "skip this pass of the pipeline, e.g. fuse_elementwise (repeatable)")
      ->allow_extra_args(false);
  auto* max_mem_opt = app.add_option("--max-memory", max_memory_text,
                                     "cap on planned memory (arena + weights + inputs/outputs), e.g. 2GB, 512MiB; "
                                     "a plan needing more fails at compile time");
  app.add_flag("--find-max-batch", find_batch,
               "only compile: find the largest --batch whose planned memory fits --max-memory")
      ->needs(max_mem_opt)
      ->excludes(batch_opt)
      ->excludes(input_opt);
  app.add_flag("--json", json, "print {\"p50_ms\", \"p90_ms\", \"p99_ms\", \"mean_ms\", \"throughput_per_s\", \"batch\", "
                               "\"threads\", \"peak_bytes\", \"kernels\", ...}");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  set_threads(threads);

  CompileOptions copts;
  copts.memory_optimize_level = memory_level;
  copts.opt_level = opt_level;
  copts.fast_conv = fast_conv;
  copts.disabled_passes = disabled_passes;
  const size_t cap = max_mem_opt->count() ? parse_bytes(max_memory_text) : 0;
  auto t0 = clock_type::now();
  if (find_batch) {
    std::unique_ptr<Graph> g = load_model_file(model, parse_input_shapes(shape_specs));
    bool has_batch_dim = false;
    for (const Value* in : g->inputs()) has_batch_dim |= in->type.rank() > 0 && !in->type.dims[0].is_static();
    SPORE_CHECK(has_batch_dim, ErrorCode::invalid_argument,
                "--find-max-batch: no input of '{}' has a symbolic first dim to vary (its shapes are fixed)", model);
    return find_max_batch(*g, model, copts, cap, max_memory_text, json);
  }
  copts.max_memory = cap;  // the arena alone; the whole plan is checked below
  deploy::SessionOptions sopts;
  sopts.compile = copts;
  sopts.input_dims = input_dims_of(parse_input_shapes(shape_specs));
  deploy::Session session(model, sopts);
  const double load_ms = ms_between(t0, clock_type::now());
  const RunInputs given = gather_run_inputs(session, input_specs, batch, batch_opt->count() > 0, seed, no_random, model);
  const std::vector<Tensor>& all_inputs = given.tensors;
  // Samples per run: the first dim of the first input (the batch when it is symbolic).
  const int64_t samples = !all_inputs.empty() && all_inputs[0].rank() > 0 ? all_inputs[0].dim(0) : 1;

  t0 = clock_type::now();
  deploy::Specialization& spec = session.specialize(all_inputs);
  Plan& plan = spec.plan;
  const std::vector<Tensor> inputs = spec.select(all_inputs);
  const double compile_ms = ms_between(t0, clock_type::now());
  const PlannedMemory planned = planned_memory(plan);
  SPORE_CHECK(cap == 0 || static_cast<size_t>(planned.total()) <= cap, ErrorCode::out_of_memory,
              "--max-memory {} ({} bytes): the plan of '{}' at batch {} needs {}; try {}a smaller --batch "
              "(--find-max-batch finds the largest that fits)",
              max_memory_text, cap, model, samples, memory_str(planned),
              memory_level < 2 ? "--memory-optimize-level 2 or " : "");

  for (int64_t i = 0; i < warmup; ++i) plan.run(inputs);
  // The plan times its steps on the team and alone during its first runs (runtime/plan.h calibrated): not timed.
  int64_t calibration_runs = 0;
  for (; !plan.calibrated() && calibration_runs < 48; ++calibration_runs) plan.run(inputs);
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
    nlohmann::json in_rows = nlohmann::json::array();
    for (size_t i = 0; i < all_inputs.size(); ++i)
      in_rows.push_back({{"name", session.inputs()[i].name},
                         {"dtype", dtype_name(all_inputs[i].dtype())},
                         {"shape", all_inputs[i].shape()},
                         {"file", given.files[i].empty() ? nlohmann::json(nullptr) : nlohmann::json(given.files[i])}});
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
                                {"planned_peak_bytes", planned.total()},
                                {"live_peak_bytes", plan.memory_plan().live_peak_bytes},
                                {"weights_bytes", planned.weights},
                                {"io_bytes", planned.io},
                                {"memory_optimize_level", memory_level},
                                {"opt_level", opt_level},
                                {"fast_conv", fast_conv},
                                {"kernels", plan.num_kernels()},
                                {"iters", static_cast<int64_t>(lat.size())},
                                {"warmup", warmup},
                                {"calibration_runs", calibration_runs},
                                {"serial_steps", plan.serial_steps()},
                                {"model", model},
                                {"load_ms", load_ms},
                                {"compile_ms", compile_ms},
                                {"inputs", in_rows},
                                {"specialization", spec.how}}
                     .dump()
              << std::endl;
    return 0;
  }
  std::string shape_list;
  for (size_t i = 0; i < all_inputs.size(); ++i)
    shape_list += fmt::format("{}{}: {}{}{}", i ? ", " : "", session.inputs()[i].name, dtype_name(all_inputs[i].dtype()),
                              shape_str(all_inputs[i].shape()), given.files[i].empty() ? " random" : " from " + given.files[i]);
  std::cout << fmt::format("{}: {} | inputs {} | {} threads\n", model, session.model_name(), shape_list, used_threads);
  std::cout << fmt::format("load {:.1f} ms, compile {:.1f} ms, {} kernels per run ({} on the calling thread alone, "
                           "measured faster there), arena {:.1f} KiB\n",
                           load_ms, compile_ms, plan.num_kernels(), plan.serial_steps(),
                           static_cast<double>(plan.arena_bytes()) / 1024);
  std::cout << fmt::format("planned peak {:.1f} KiB at memory_optimize_level={}: {}; activations live at the planner's peak "
                           "{:.1f} KiB\n",
                           static_cast<double>(planned.total()) / 1024, memory_level, memory_str(planned),
                           static_cast<double>(plan.memory_plan().live_peak_bytes) / 1024);
  std::cout << fmt::format("{} runs after {} warm-up: p50 {:.3f} ms  p90 {:.3f} ms  p99 {:.3f} ms  mean {:.3f} ms  "
                           "(min {:.3f}, max {:.3f})\n",
                           lat.size(), warmup, p50, p90, p99, mean, sorted.front(), sorted.back());
  std::cout << fmt::format("throughput {:.1f} samples/s (batch {}), peak memory {:.1f} KiB\n", throughput, samples,
                           static_cast<double>(peak) / 1024);
  return 0;
}

}  // namespace spore::cli
