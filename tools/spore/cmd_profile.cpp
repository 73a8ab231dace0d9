// spore profile: runs a model (or, with --train, a compiled training step of a classifier model) under the
// profiler and reports where the time and the memory go:
//  - a Chrome trace JSON (one "X" event per kernel call with op, node, impl, dtypes, shapes, bytes, FLOPs;
//    runs as enclosing slices; one track per thread; opens in Perfetto / chrome://tracing);
//  - the top-k ops by total kernel time with %, calls, achieved GB/s and GFLOP/s (grouped by op name, with the
//    kernel impl, so custom ops and their versions show side by side);
//  - the memory report: the planner's arena and live peak (the buffers live there, by value and node), weights
//    (constants) vs activations vs inputs/outputs, and the measured peak of the timed runs;
//  - hints (profile_hints in runtime/profiler.h), each naming its nodes.
// --json prints all of it as one object: {"kernels", "total_ms", "peak_bytes", "top": [...], ...}.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "autodiff/autodiff.h"
#include "base/thread_pool.h"
#include "io/model_file.h"
#include "io/spore_file.h"
#include "ops/dispatch.h"
#include "ops/graph_ops.h"
#include "runtime/profiler.h"
#include "runtime/trace.h"
#include "tools/spore/commands.h"
#include "deploy/session.h"
#include "tools/spore/model_util.h"
#include "deploy/random_input.h"

namespace spore::cli {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}


std::string kib(int64_t bytes) { return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / 1024); }

bool is_spore_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char head[sizeof(io::spore_layout::magic)] = {};
  f.read(head, sizeof(head));
  return f.gcount() == static_cast<std::streamsize>(sizeof(head)) && std::memcmp(head, io::spore_layout::magic, sizeof(head)) == 0;
}

// Copy bandwidth of this machine with the pool's threads (read + write bytes per second), the yardstick of
// the low_bandwidth hint. 64 MiB buffers: well beyond the caches.
double measure_copy_gbps() {
  constexpr int64_t bytes = int64_t{64} << 20, chunk = int64_t{1} << 20;
  Tensor a = Tensor::zeros({bytes}, DType::u8), b = Tensor::zeros({bytes}, DType::u8);
  const uint8_t* src = a.data<uint8_t>();
  uint8_t* dst = b.data<uint8_t>();
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = clock_type::now();
    parallel_for(bytes / chunk, [&](int64_t i) { std::memcpy(dst + i * chunk, src + i * chunk, chunk); });
    const double s = ms_between(t0, clock_type::now()) / 1e3;
    if (s > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

// A training step of a classifier model (input 0: the images, output 0: the logits): forward (the model's
// nodes replayed with ops::call under a trace), softmax cross-entropy against one-hot labels, backward and an
// SGD update, compiled into one plan like a graph-mode train::Model step. Step inputs: the model's data
// inputs, the one-hot labels, then the parameters; outputs: the loss and the updated parameters. Parameters
// are the model's floating constants with more than one element and its floating inputs after the first.
struct TrainStep {
  std::unique_ptr<Graph> graph;
  std::vector<Tensor> inputs;
  int64_t num_params = 0;
  int64_t param_bytes = 0;
  int64_t classes = 0;
};

TrainStep build_train_step(const Graph& model, const std::vector<Shape>& shapes, uint64_t seed, double lr) {
  SPORE_CHECK(!model.inputs().empty() && !model.outputs().empty(), ErrorCode::invalid_argument,
              "--train: model '{}' needs an input (the images) and an output (the logits)", model.name());
  std::unique_ptr<Graph> g = model.clone();
  specialize_inputs(*g, shapes);
  const TensorType& out_t = g->outputs()[0]->type;
  SPORE_CHECK(is_floating(out_t.dtype) && out_t.rank() >= 2, ErrorCode::invalid_argument,
              "--train: output 0 of '{}' (%{}) is {}; a classifier's logits are a floating [batch, classes] tensor",
              model.name(), g->outputs()[0]->name, out_t.str());
  const int64_t batch = out_t.dims[0].size;
  const int64_t classes = out_t.numel() / std::max<int64_t>(batch, 1);

  std::vector<const Value*> data_inputs, params;
  std::vector<Tensor> data_values, param_values;
  for (size_t i = 0; i < g->inputs().size(); ++i) {
    const Value* v = g->inputs()[i];
    Tensor t = deploy::random_input(shapes[i], v->type.dtype, seed, i);
    if (i > 0 && is_floating(v->type.dtype)) {
      params.push_back(v);
      param_values.push_back(std::move(t));
    } else {
      data_inputs.push_back(v);
      data_values.push_back(std::move(t));
    }
  }
  for (const Node* n : g->nodes())
    if (n->op == "constant"_op && !n->dead && is_floating(n->payload.dtype()) && n->payload.numel() > 1 &&
        !n->outputs[0]->uses.empty()) {
      params.push_back(n->outputs[0]);
      param_values.push_back(n->payload.contiguous());
    }
  SPORE_CHECK(!params.empty(), ErrorCode::invalid_argument,
              "--train: model '{}' has no floating weights (constants or inputs after the first) to train", model.name());

  std::vector<double> onehot(static_cast<size_t>(batch * classes), 0.0);
  for (int64_t r = 0; r < batch; ++r) {
    const auto label = static_cast<int64_t>(philox_uniform(seed, 1000, static_cast<uint64_t>(r)) * static_cast<float>(classes));
    onehot[static_cast<size_t>(r * classes + std::min(label, classes - 1))] = 1.0;
  }
  const Tensor labels = Tensor::from_doubles(onehot, {batch, classes}, out_t.dtype);

  std::vector<TensorType> types;
  std::vector<std::string> names;
  for (const Value* v : data_inputs) {
    types.push_back(v->type);
    names.push_back(v->name);
  }
  types.push_back(TensorType::of(out_t.dtype, {batch, classes}));
  names.push_back("labels");
  for (const Value* v : params) {
    types.push_back(v->type);
    names.push_back(v->name);
  }
  const Graph& fwd = *g;
  const size_t nd = data_inputs.size();
  auto step = [&](std::span<const Tensor> in) {
    const Tensor y = in[nd];
    auto [loss, grads] = autodiff::value_and_grad(
        [&](std::span<const Tensor> p) {
          std::map<const Value*, Tensor> env;
          for (size_t i = 0; i < nd; ++i) env[data_inputs[i]] = in[i];
          for (size_t i = 0; i < params.size(); ++i) env[params[i]] = p[i];
          for (const Node* n : fwd.nodes()) {
            if (n->dead) continue;
            if (n->op == "constant"_op) {
              env.emplace(n->outputs[0], n->payload);  // parameters are bound already
              continue;
            }
            if (n->op == "input"_op) continue;
            std::vector<Tensor> ins;
            for (const Value* v : n->inputs) ins.push_back(env.at(v));
            std::vector<Tensor> outs = ops::call(n->op, ins, n->attrs);
            for (size_t i = 0; i < outs.size() && i < n->outputs.size(); ++i) env[n->outputs[i]] = outs[i];
          }
          const Tensor logits = ops::reshape(env.at(fwd.outputs()[0]), {batch, classes});
          return ops::neg(ops::reduce_mean(ops::reduce_sum(ops::mul(y, ops::log_softmax(logits, -1)), {1})));
        },
        in.subspan(nd + 1));
    std::vector<Tensor> out{loss};
    for (size_t i = 0; i < grads.size(); ++i) out.push_back(ops::sub(in[nd + 1 + i], ops::mul(grads[i], lr)));
    return out;
  };
  TrainStep ts;
  ts.graph = trace_function(step, types, names);
  ts.inputs = std::move(data_values);
  ts.inputs.push_back(labels);
  for (Tensor& p : param_values) {
    ts.param_bytes += static_cast<int64_t>(p.nbytes());
    ts.inputs.push_back(std::move(p));
  }
  ts.num_params = static_cast<int64_t>(params.size());
  ts.classes = classes;
  return ts;
}

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

  auto t0 = clock_type::now();
  const std::vector<InputShapeSpec> specs = parse_input_shapes(shape_specs);
  std::string precision_mode;
  if (is_spore_file(model)) {  // its metadata says which precision mode converted it (the precision hint)
    io::SporeFileInfo info;
    io::load_spore(model, &info);
    if (auto it = info.metadata.find("precision_mode"); it != info.metadata.end()) precision_mode = it->second;
  }
  CompileOptions copts;
  copts.opt_level = opt_level;
  copts.fast_conv = fast_conv;
  copts.memory_optimize_level = memory_level;
  // Inference runs through a deploy::Session (dims bound from the inputs, as `spore run`); training builds a step
  // graph from the model graph.
  std::unique_ptr<Graph> g;
  std::optional<deploy::Session> session;
  std::vector<deploy::SessionInput> model_inputs;
  if (train) {
    g = load_model_file(model, specs);
    for (const Value* v : g->inputs()) model_inputs.push_back({v->name, v->type});
  } else {
    deploy::SessionOptions sopts;
    sopts.compile = copts;
    sopts.input_dims = input_dims_of(specs);
    session.emplace(model, sopts);
    model_inputs = session->inputs();
  }
  const double load_ms = ms_between(t0, clock_type::now());
  RunInputs given;
  std::vector<Shape> shapes;
  if (train) {
    shapes = shapes_for_batch(model_inputs, batch, batch_opt->count() > 0, model);
  } else {
    given = gather_run_inputs(*session, input_specs, batch, batch_opt->count() > 0, seed, false, model);
    for (const Tensor& t : given.tensors) shapes.push_back(t.shape());
  }
  const int64_t samples = !shapes.empty() && !shapes[0].empty() ? shapes[0][0] : 1;

  t0 = clock_type::now();
  std::optional<Plan> owned_plan;
  Plan* plan = nullptr;
  std::vector<Tensor> inputs;
  TrainStep step;
  if (train) {
    step = build_train_step(*g, shapes, seed, lr);
    plan = &owned_plan.emplace(compile_plan(std::move(step.graph), copts));
    inputs = std::move(step.inputs);
  } else {
    deploy::Specialization& sp = session->specialize(given.tensors);
    plan = &sp.plan;
    inputs = sp.select(given.tensors);
  }
  const double compile_ms = ms_between(t0, clock_type::now());

  for (int64_t i = 0; i < warmup; ++i) plan->run(inputs);
  reset_memory_peak();
  Profiler prof;
  std::vector<double> run_ms;
  for (int64_t i = 0; i < iters; ++i) plan->run(inputs);
  // Each profiled run records itself as a "run" span (runtime/plan.cpp), ending before its kernels' events are
  // recorded, so the run time is what the run took.
  for (const TraceSpan& s : prof.spans())
    if (s.cat == "run") run_ms.push_back(static_cast<double>(s.end_ns - s.start_ns) / 1e6);
  const int64_t peak = static_cast<int64_t>(memory_peak());
  const double mean_run_ms = std::accumulate(run_ms.begin(), run_ms.end(), 0.0) / static_cast<double>(run_ms.size());
  if (!no_trace) prof.write_chrome_trace(trace_path);

  // Memory, as planned at compile time.
  const MemoryPlanInfo& mp = plan->memory_plan();
  int64_t io_bytes = planned_memory(*plan).io;
  // A training step takes its trained weights as inputs: count them as weights, not as inputs.
  const int64_t weights = plan->weights_bytes() + (train ? step.param_bytes : 0);
  if (train) io_bytes -= step.param_bytes;
  const int64_t planned_peak = plan->arena_bytes() + weights + io_bytes;

  const std::vector<OpSummary> top = prof.summarize();
  const std::vector<NodeSummary> nodes = prof.summarize_nodes();
  double total_ms = 0;
  for (const OpSummary& s : top) total_ms += s.ms;
  HintOptions ho;
  ho.precision_mode = precision_mode;
  ho.bandwidth_gbps = measure_copy_gbps();
  const std::vector<ProfileHint> hints = profile_hints(prof, ho);
  const int used_threads = num_threads();
  const std::string mode = train ? "train" : "inference";

  if (json) {
    nlohmann::json top_j = nlohmann::json::array(), nodes_j = nlohmann::json::array(), live_j = nlohmann::json::array(),
                   hints_j = nlohmann::json::array();
    for (const OpSummary& s : top)
      top_j.push_back({{"op", s.op},
                       {"calls", s.calls},
                       {"ms", s.ms},
                       {"pct", s.pct},
                       {"gbps", s.gbps},
                       {"gflops", s.gflops},
                       {"impl", s.impl},
                       {"nodes", s.nodes},
                       {"us_per_call", s.calls ? s.ms * 1e3 / static_cast<double>(s.calls) : 0.0},
                       {"bytes", s.bytes},
                       {"flops", s.flops}});
    for (const NodeSummary& n : nodes)
      nodes_j.push_back({{"node", n.node},   {"op", n.op},     {"impl", n.impl},   {"dtypes", n.dtypes},
                         {"shapes", n.shapes}, {"calls", n.calls}, {"ms", n.ms},     {"pct", n.pct},
                         {"gbps", n.gbps},   {"gflops", n.gflops}, {"bytes", n.bytes}, {"flops", n.flops}});
    for (const LiveBuffer& b : mp.live_at_peak)
      live_j.push_back({{"value", b.value}, {"node", b.node}, {"op", b.op}, {"type", b.type}, {"bytes", b.bytes}});
    for (const ProfileHint& h : hints) hints_j.push_back({{"kind", h.kind}, {"message", h.message}, {"nodes", h.nodes}, {"pct", h.pct}});
    const nlohmann::json memory = {{"arena_bytes", plan->arena_bytes()},
                                   {"planned_arena_bytes", mp.arena_bytes},  // sizes rounded to 64 bytes
                                   {"live_peak_bytes", mp.live_peak_bytes},
                                   {"peak_step", mp.peak_step},
                                   {"peak_node", mp.peak_node},
                                   {"live_at_peak", live_j},
                                   {"weights_bytes", weights},
                                   {"activations_bytes", plan->arena_bytes()},
                                   {"io_bytes", io_bytes},
                                   {"planned_peak_bytes", planned_peak},
                                   {"measured_peak_bytes", peak},
                                   {"num_buffers", mp.num_buffers},
                                   {"memory_optimize_level", memory_level}};
    std::cout << nlohmann::json{{"kernels", plan->num_kernels()},
                                {"total_ms", total_ms},
                                {"peak_bytes", peak},
                                {"top", top_j},
                                {"nodes", nodes_j},
                                {"memory", memory},
                                {"hints", hints_j},
                                {"arena_bytes", plan->arena_bytes()},
                                {"planned_peak_bytes", planned_peak},
                                {"weights_bytes", weights},
                                {"iters", iters},
                                {"warmup", warmup},
                                {"events", static_cast<int64_t>(prof.events().size())},
                                {"kernel_ms_per_run", total_ms / static_cast<double>(iters)},
                                {"mean_run_ms", mean_run_ms},
                                {"batch", samples},
                                {"threads", used_threads},
                                {"mode", mode},
                                {"opt_level", opt_level},
                                {"precision_mode", precision_mode},
                                {"bandwidth_gbps", ho.bandwidth_gbps},
                                {"trace", no_trace ? "" : trace_path},
                                {"model", model},
                                {"load_ms", load_ms},
                                {"compile_ms", compile_ms}}
                     .dump()
              << std::endl;
    return 0;
  }

  std::string shape_list;
  for (size_t i = 0; i < shapes.size(); ++i)
    shape_list += fmt::format("{}{}: {}{}", i ? ", " : "", model_inputs[i].name, dtype_name(model_inputs[i].type.dtype),
                              shape_str(shapes[i]));
  std::cout << fmt::format("{}: {} | inputs {} | {} threads | {}{}\n", model, train ? g->name() : session->model_name(),
                           shape_list, used_threads,
                           train ? fmt::format("training step ({} parameters, {} classes, SGD lr {})", step.num_params,
                                               step.classes, lr)
                                 : "inference",
                           precision_mode.empty() ? "" : " | precision mode " + precision_mode);
  std::cout << fmt::format("load {:.1f} ms, compile {:.1f} ms, {} kernels per run; {} profiled runs after {} warm-up: "
                           "mean {:.3f} ms per run, {:.3f} ms of it in kernels\n\n",
                           load_ms, compile_ms, plan->num_kernels(), iters, warmup, mean_run_ms,
                           total_ms / static_cast<double>(iters));
  std::cout << fmt::format("top {} ops by total kernel time ({} runs, {:.3f} ms):\n", std::min<size_t>(top_k, top.size()), iters,
                           total_ms)
            << prof.top_table(top_k) << "\n";
  std::cout << fmt::format("memory: planned peak {} = activations arena {} + weights {} + inputs/outputs {}; measured "
                           "peak of the profiled runs {}\n",
                           kib(planned_peak), kib(plan->arena_bytes()), kib(weights), kib(io_bytes), kib(peak));
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
  std::cout << fmt::format("\nhints (copy bandwidth measured: {:.1f} GB/s):\n", ho.bandwidth_gbps);
  if (hints.empty()) std::cout << "  none\n";
  for (const ProfileHint& h : hints) std::cout << fmt::format("  - [{}] {}\n", h.kind, h.message);
  if (precision_mode.empty())
    std::cout << "  (no precision mode recorded in the model file: the f32-vs-f16/bf16 check was skipped)\n";
  if (!no_trace)
    std::cout << fmt::format("\ntrace: {} ({} kernel events; open in https://ui.perfetto.dev or chrome://tracing)\n", trace_path,
                             prof.events().size());
  return 0;
}

}  // namespace spore::cli
