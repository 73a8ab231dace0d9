// spore profile: runs a model (or, with --train, a compiled training step of a classifier model) under the
// profiler and reports where the time and the memory go (deploy::profile_model, src/deploy/profile.h, which Python's
// spore.profile runs too; this file parses the options and prints the report):
//  - a Chrome trace JSON (one "X" event per kernel call with op, node, impl, dtypes, shapes, bytes, FLOPs;
//    runs as enclosing slices; one track per thread; opens in Perfetto / chrome://tracing);
//  - the top-k ops by total kernel time with %, calls, achieved GB/s and GFLOP/s (grouped by op name, with the
//    kernel impl, so custom ops and their versions show side by side);
//  - the memory report: the planner's arena and live peak (the buffers live there, by value and node), weights
//    (constants) vs activations vs inputs/outputs, and the measured peak of the timed runs;
//  - hints (profile_hints in runtime/profiler.h), each naming its nodes.
// --json prints all of it as one object: {"kernels", "total_ms", "peak_bytes", "top": [...], ...}.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <spore/spore.h>

#include "deploy/profile.h"
#include "tools/spore/commands.h"

namespace spore::cli {
namespace {

std::string kib(int64_t bytes) { return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024); }

}  // namespace

int cmd_profile(int argc, char** argv) {
  CLI::App app("spore profile: per-kernel timeline (Chrome trace JSON for Perfetto), top-k ops by time with GB/s and "
               "GFLOP/s, memory report (planner peak, live tensors there, weights vs activations) and hints, for a model "
               "(.spore, .onnx or text IR) on random inputs, or a training step of it (--train)",
               "spore profile");
  std::string model, trace_path = "profile_trace.json";
  std::vector<std::string> shape_specs, input_specs;  // --custom-ops is global (commands.cpp)
  int64_t batch = 1, warmup = 2, iters = 10;
  int threads = 0, top_k = 10;
  uint64_t seed = 0;
  double lr = 0.01;
  bool json = false, train = false, no_trace = false;
  int opt_level = CompileOptions{}.opt_level;
  int memory_level = CompileOptions{}.memory_optimize_level;
  app.add_option("model", model, "model file: .spore, .onnx or text IR")->required();
  auto* batch_opt = app.add_option("--batch", batch, "size of a symbolic first input dim (default 1)")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "thread count (default: all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--iters", iters, "profiled runs (default 10)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "unprofiled runs first (default 2)")->check(CLI::NonNegativeNumber);
  app.add_option("--top", top_k, "ops in the table (default 10)")->check(CLI::PositiveNumber);
  app.add_option("--trace", trace_path, "Chrome trace JSON to write (default profile_trace.json)");
  app.add_flag("--no-trace", no_trace, "write no trace file");
  app.add_option("--input-shape", shape_specs, "NAME:D0,D1,... fixes input dims (repeatable; ';' joins several)")
      ->allow_extra_args(false);
  auto* input_opt = app.add_option("--input", input_specs,
                                   "NAME=FILE.npy (repeatable): profile on this tensor; inputs not given get seeded "
                                   "random values (floats N(0,1), integers in [0, 10), bools a fair coin)")
                        ->allow_extra_args(false);
  app.add_option("--seed", seed, "seed of the random inputs and labels (default 0)");
  bool fast_conv = false;
  app.add_flag("--fast-conv", fast_conv, "3x3 convs may use Winograd F(4x4,3x3): faster, ~3x the f32 error of the default against float64 (docs/PERFORMANCE.md)");
  app.add_option("--opt-level", opt_level, "graph optimization level: 0 no simplification or fusion, 1 the whole pipeline (default)")
      ->check(CLI::Range(0, 3));
  app.add_option("--memory-optimize-level", memory_level, "memory planning level 0, 1 (default) or 2")->check(CLI::Range(0, 2));
  app.add_flag("--train", train,
               "profile a training step instead: forward + softmax cross-entropy on random labels + backward + SGD "
               "(input 0 = images, output 0 = logits)");
  app.add_option("--lr", lr, "SGD learning rate of the --train step (default 0.01)");
  input_opt->excludes("--train");
  app.add_flag("--json", json, "print {\"kernels\", \"total_ms\", \"peak_bytes\", \"top\": [{\"op\", \"calls\", \"ms\", \"pct\", "
                               "\"gbps\", \"gflops\", ...}], \"memory\", \"hints\", ...}");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  set_threads(threads);

  deploy::ProfileOptions o;
  o.model = model;
  o.input_shapes = shape_specs;
  o.input_files = input_specs;
  o.batch = batch;
  o.batch_given = batch_opt->count() > 0;
  o.warmup = warmup;
  o.iters = iters;
  o.seed = seed;
  o.opt_level = opt_level;
  o.memory_optimize_level = memory_level;
  o.fast_conv = fast_conv;
  o.trace_path = no_trace ? "" : trace_path;
  o.top_k = top_k;
  o.train = train;
  o.lr = lr;
  const deploy::ProfileReport r = deploy::profile_model(o);
  if (json) {
    std::cout << r.to_json() << std::endl;
    return 0;
  }

  std::string shape_list;
  for (size_t i = 0; i < r.shapes.size(); ++i)
    shape_list += fmt::format("{}{}: {}{}", i ? ", " : "", r.inputs[i].name, dtype_name(r.inputs[i].type.dtype),
                              shape_str(r.shapes[i]));
  std::cout << fmt::format("{}: {} | inputs {} | {} threads | {}{}\n", model, r.model_name,
                           shape_list, r.threads,
                           train ? fmt::format("training step ({} parameters, {} classes, SGD lr {})", r.train_params,
                                               r.train_classes, r.lr)
                                 : "inference",
                           r.precision_mode.empty() ? "" : " | precision mode " + r.precision_mode);
  std::cout << fmt::format("load {:.1f} ms, compile {:.1f} ms, {} kernels per run; {} profiled runs after {} warm-up: "
                           "mean {:.3f} ms per run, {:.3f} ms of it in kernels\n\n",
                           r.load_ms, r.compile_ms, r.kernels, iters, warmup, r.mean_run_ms, r.kernel_ms_per_run());
  std::cout << fmt::format("top {} ops by total kernel time ({} runs, {:.3f} ms):\n", std::min<size_t>(top_k, r.top.size()), iters,
                           r.total_ms)
            << r.top_table << "\n";
  std::cout << fmt::format("memory: planned peak {} = activations arena {} + weights {} + inputs/outputs {}; measured "
                           "peak of the profiled runs {}\n",
                           kib(r.planned_peak_bytes), kib(r.arena_bytes), kib(r.weights_bytes), kib(r.io_bytes),
                           kib(r.measured_peak_bytes));
  const MemoryPlanInfo& mp = r.memory_plan;
  if (mp.peak_step >= 0) {
    std::cout << fmt::format("  planner's peak: {} of activations live at step {} ({}), {} buffers (memory_optimize_level={}):\n",
                             kib(mp.live_peak_bytes), mp.peak_step, mp.peak_node, mp.live_at_peak.size(), memory_level);
    const size_t shown = std::min<size_t>(mp.live_at_peak.size(), 10);
    for (size_t i = 0; i < shown; ++i) {
      const LiveBuffer& b = mp.live_at_peak[i];
      std::cout << fmt::format("    {:>12} bytes  %{} {} from {} '{}'\n", b.bytes, b.value, b.type, b.op, b.node);
    }
    if (mp.live_at_peak.size() > shown) std::cout << fmt::format("    ... {} more\n", mp.live_at_peak.size() - shown);
  } else {
    std::cout << "  no intermediate buffers (every value is an input, output or constant)\n";
  }
  std::cout << fmt::format("\nhints (copy bandwidth measured: {:.1f} GB/s):\n", r.bandwidth_gbps);
  if (r.hints.empty()) std::cout << "  none\n";
  for (const ProfileHint& h : r.hints) std::cout << fmt::format("  - [{}] {}\n", h.kind, h.message);
  if (r.precision_mode.empty())
    std::cout << "  (no precision mode recorded in the model file: the f32-vs-f16/bf16 check was skipped)\n";
  if (!no_trace)
    std::cout << fmt::format("\ntrace: {} ({} kernel events; open in https://ui.perfetto.dev or chrome://tracing)\n", r.trace,
                             r.events);
  return 0;
}

}  // namespace spore::cli
