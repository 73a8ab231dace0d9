#include "deploy/profile.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autodiff/autodiff.h"
#include "base/error.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "deploy/model_util.h"
#include "deploy/random_input.h"
#include "io/model_file.h"
#include "io/spore_file.h"
#include "ops/dispatch.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "tensor/storage.h"
#include "runtime/trace.h"

namespace spore::deploy {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}


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
    Tensor t = random_input(shapes[i], v->type.dtype, seed, i);
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

ProfileReport profile_model(const ProfileOptions& o) {
  SPORE_CHECK(o.iters >= 1, ErrorCode::invalid_argument, "--iters {}: expected a positive number", o.iters);
  SPORE_CHECK(o.warmup >= 0, ErrorCode::invalid_argument, "--warmup {}: expected a non-negative number", o.warmup);
  SPORE_CHECK(o.batch >= 1, ErrorCode::invalid_argument, "--batch {}: expected a positive number", o.batch);
  SPORE_CHECK(o.top_k >= 1, ErrorCode::invalid_argument, "--top {}: expected a positive number", o.top_k);
  SPORE_CHECK(o.opt_level >= 0 && o.opt_level <= 3, ErrorCode::invalid_argument, "--opt-level {}: expected 0 to 3",
              o.opt_level);
  SPORE_CHECK(o.memory_optimize_level >= 0 && o.memory_optimize_level <= 2, ErrorCode::invalid_argument,
              "--memory-optimize-level {}: expected 0, 1 or 2", o.memory_optimize_level);
  SPORE_CHECK(!o.train || (o.input_files.empty() && o.inputs.empty()), ErrorCode::invalid_argument,
              "--input: a --train step profiles on random inputs and labels; no inputs may be given");

  ProfileReport r;
  r.model = o.model;
  r.mode = o.train ? "train" : "inference";
  r.opt_level = o.opt_level;
  r.memory_optimize_level = o.memory_optimize_level;
  r.iters = o.iters;
  r.warmup = o.warmup;

  auto t0 = clock_type::now();
  const std::vector<InputShapeSpec> specs = parse_input_shapes(o.input_shapes);
  if (is_spore_file(o.model)) {  // its metadata says which precision mode converted it (the precision hint)
    io::SporeFileInfo info;
    io::load_spore(o.model, &info);
    if (auto it = info.metadata.find("precision_mode"); it != info.metadata.end()) r.precision_mode = it->second;
  }
  CompileOptions copts;
  copts.opt_level = o.opt_level;
  copts.fast_conv = o.fast_conv;
  copts.memory_optimize_level = o.memory_optimize_level;
  // Inference runs through a Session (dims bound from the inputs, as `spore run`); training builds a step graph from
  // the model graph.
  std::unique_ptr<Graph> g;
  std::optional<Session> session;
  if (o.train) {
    g = load_model_file(o.model, specs);
    for (const Value* v : g->inputs()) r.inputs.push_back({v->name, v->type});
    r.model_name = g->name();
  } else {
    SessionOptions sopts;
    sopts.compile = copts;
    sopts.input_dims = input_dims_of(specs);
    session.emplace(o.model, sopts);
    r.inputs = session->inputs();
    r.model_name = session->model_name();
  }
  r.load_ms = ms_between(t0, clock_type::now());
  RunInputs given;
  if (o.train) {
    r.shapes = shapes_for_batch(r.inputs, o.batch, o.batch_given, o.model);
  } else {
    given = gather_run_inputs(*session, o.input_files, o.batch, o.batch_given, o.seed, false, o.model, o.inputs);
    for (const Tensor& t : given.tensors) r.shapes.push_back(t.shape());
  }
  r.batch = !r.shapes.empty() && !r.shapes[0].empty() ? r.shapes[0][0] : 1;

  t0 = clock_type::now();
  std::optional<Plan> owned_plan;
  Plan* plan = nullptr;
  std::vector<Tensor> inputs;
  TrainStep step;
  if (o.train) {
    step = build_train_step(*g, r.shapes, o.seed, o.lr);
    plan = &owned_plan.emplace(compile_plan(std::move(step.graph), copts));
    inputs = std::move(step.inputs);
    r.train_params = step.num_params;
    r.train_classes = step.classes;
    r.lr = o.lr;
  } else {
    Specialization& sp = session->specialize(given.tensors);
    plan = &sp.plan;
    inputs = sp.select(given.tensors);
  }
  r.compile_ms = ms_between(t0, clock_type::now());

  for (int64_t i = 0; i < o.warmup; ++i) plan->run(inputs);
  reset_memory_peak();
  Profiler prof;
  std::vector<double> run_ms;
  for (int64_t i = 0; i < o.iters; ++i) plan->run(inputs);
  // Each profiled run records itself as a "run" span (runtime/plan.cpp), ending before its kernels' events are
  // recorded, so the run time is what the run took.
  for (const TraceSpan& s : prof.spans())
    if (s.cat == "run") run_ms.push_back(static_cast<double>(s.end_ns - s.start_ns) / 1e6);
  r.measured_peak_bytes = static_cast<int64_t>(memory_peak());
  r.mean_run_ms = std::accumulate(run_ms.begin(), run_ms.end(), 0.0) / static_cast<double>(run_ms.size());
  if (!o.trace_path.empty()) {
    prof.write_chrome_trace(o.trace_path);
    r.trace = o.trace_path;
  }

  // Memory, as planned at compile time.
  r.memory_plan = plan->memory_plan();
  r.io_bytes = planned_memory(*plan).io;
  // A training step takes its trained weights as inputs: count them as weights, not as inputs.
  r.weights_bytes = plan->weights_bytes() + (o.train ? step.param_bytes : 0);
  if (o.train) r.io_bytes -= step.param_bytes;
  r.arena_bytes = plan->arena_bytes();
  r.planned_peak_bytes = r.arena_bytes + r.weights_bytes + r.io_bytes;
  r.kernels = plan->num_kernels();
  r.events = static_cast<int64_t>(prof.events().size());

  r.top = prof.summarize();
  r.nodes = prof.summarize_nodes();
  for (const OpSummary& s : r.top) r.total_ms += s.ms;
  r.top_table = prof.top_table(o.top_k);
  HintOptions ho;
  ho.precision_mode = r.precision_mode;
  ho.bandwidth_gbps = measure_copy_gbps();
  r.bandwidth_gbps = ho.bandwidth_gbps;
  r.hints = profile_hints(prof, ho);
  for (NodeSummary& n : r.nodes) n.first = nullptr;  // points into the profiler's events, gone with it
  r.threads = num_threads();
  return r;
}

std::string ProfileReport::to_json() const {
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
    nodes_j.push_back({{"node", n.node},     {"op", n.op},         {"impl", n.impl},   {"dtypes", n.dtypes},
                       {"shapes", n.shapes}, {"calls", n.calls},   {"ms", n.ms},       {"pct", n.pct},
                       {"gbps", n.gbps},     {"gflops", n.gflops}, {"bytes", n.bytes}, {"flops", n.flops}});
  const MemoryPlanInfo& mp = memory_plan;
  for (const LiveBuffer& b : mp.live_at_peak)
    live_j.push_back({{"value", b.value}, {"node", b.node}, {"op", b.op}, {"type", b.type}, {"bytes", b.bytes}});
  for (const ProfileHint& h : hints)
    hints_j.push_back({{"kind", h.kind}, {"message", h.message}, {"nodes", h.nodes}, {"pct", h.pct}});
  const nlohmann::json memory = {{"arena_bytes", arena_bytes},
                                 {"planned_arena_bytes", mp.arena_bytes},  // sizes rounded to 64 bytes
                                 {"live_peak_bytes", mp.live_peak_bytes},
                                 {"peak_step", mp.peak_step},
                                 {"peak_node", mp.peak_node},
                                 {"live_at_peak", live_j},
                                 {"weights_bytes", weights_bytes},
                                 {"activations_bytes", arena_bytes},
                                 {"io_bytes", io_bytes},
                                 {"planned_peak_bytes", planned_peak_bytes},
                                 {"measured_peak_bytes", measured_peak_bytes},
                                 {"num_buffers", mp.num_buffers},
                                 {"memory_optimize_level", memory_optimize_level}};
  return nlohmann::json{{"kernels", kernels},
                        {"total_ms", total_ms},
                        {"peak_bytes", measured_peak_bytes},
                        {"top", top_j},
                        {"nodes", nodes_j},
                        {"memory", memory},
                        {"hints", hints_j},
                        {"arena_bytes", arena_bytes},
                        {"planned_peak_bytes", planned_peak_bytes},
                        {"weights_bytes", weights_bytes},
                        {"iters", iters},
                        {"warmup", warmup},
                        {"events", events},
                        {"kernel_ms_per_run", kernel_ms_per_run()},
                        {"mean_run_ms", mean_run_ms},
                        {"batch", batch},
                        {"threads", threads},
                        {"mode", mode},
                        {"opt_level", opt_level},
                        {"precision_mode", precision_mode},
                        {"bandwidth_gbps", bandwidth_gbps},
                        {"trace", trace},
                        {"model", model},
                        {"load_ms", load_ms},
                        {"compile_ms", compile_ms}}
      .dump();
}

}  // namespace spore::deploy
