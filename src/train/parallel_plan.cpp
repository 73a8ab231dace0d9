// The data x pipeline x tensor parallel cost model and search (train/parallel_plan.h).
#include "train/parallel_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/error.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "ops/ops.h"
#include "ops/registry.h"
#include "runtime/trace.h"
#include "train/optimizer.h"

namespace spore::train {
namespace {

struct StepCount {
  double flops = 0, ops = 0, tensors = 0;  // tensors: the trainable parameter tensors
};

// Sum of the OpDefs' FLOPs over a traced graph, and its op count.
std::pair<double, double> graph_flops(const Graph& g) {
  double total = 0, ops = 0;
  const OpRegistry& reg = op_registry();
  for (const Node* n : g.nodes()) {
    if (n->dead || n->is_input() || n->is_constant()) continue;
    const OpDef* def = reg.find(n->op);
    if (def == nullptr) continue;
    std::vector<TensorType> ins, outs;
    for (const Value* v : n->inputs) ins.push_back(v->type);
    for (const Value* v : n->outputs) outs.push_back(v->type);
    total += def->cost_of(ins, outs, n->attrs).flops;
    ++ops;
  }
  return {total, ops};
}

// FLOPs and ops of one training step (forward + backward, no optimizer) of `c` on one sequence of T tokens.
StepCount traced_step_flops(const nn::LlamaConfig& c, int64_t T) {
  nn::set_seed(0);
  nn::LlamaModel net(c);
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
  double tensors = 0;
  const std::vector<TensorType> types{TensorType::of(DType::i64, {1, T}), TensorType::of(DType::i64, {1, T})};
  const auto g = trace_function(
      [&](std::span<const Tensor> in) {
        nn::LossAndGrads r = nn::value_and_grad(net, [&] {
          const Tensor logits = net(in[0]);
          return ce(ops::reshape(logits, {-1, c.vocab}), ops::reshape(in[1], {-1}));
        });
        std::vector<Tensor> out{r.loss};
        for (auto& [name, g] : r.grads) out.push_back(g);
        tensors = static_cast<double>(r.grads.size());
        return out;
      },
      types);
  const auto [flops, ops] = graph_flops(*g);
  return {flops, ops, tensors};
}

// Ops of one optimizer step over k parameter tensors as the LM trainers run it: the accumulated gradients divided by
// the micro-batch count, clipped by their global norm, and AdamW.
double traced_update_ops(int64_t k) {
  std::vector<std::string> names;
  std::vector<TensorType> types;
  for (int64_t i = 0; i < k; ++i) names.push_back(fmt::format("p{}", i));
  for (int64_t i = 0; i < 4 * k; ++i) types.push_back(TensorType::of(DType::f32, {4}));  // params, grads, m, v
  const auto opt = make_adamw(names, {.lr = 1e-3, .weight_decay = 0.01});
  const auto g = trace_function(
      [&](std::span<const Tensor> in) {
        const auto n = static_cast<size_t>(k);
        std::vector<Tensor> params(in.begin(), in.begin() + k), grads, state(in.begin() + 2 * k, in.end());
        for (size_t i = 0; i < n; ++i) grads.push_back(ops::div(in[n + i], 4.0));
        clip_by_global_norm(grads, 1.0);
        std::vector<Tensor> out =
            opt->update(params, grads, state, Tensor::scalar(1e-3, DType::f32), Tensor::scalar(1.0, DType::f32));
        out.insert(out.end(), state.begin(), state.end());
        return out;
      },
      types);
  return graph_flops(*g).second;
}

double ceil_div(double a, double b) { return std::ceil(a / b); }

// One pipeline's step on `cores` cores shared by its stages (processor sharing: k runnable stages each run at
// min(1, cores / k)). Stage s runs its micro-batch slots in 1F1B order - min(pp - 1 - s, M) forwards, then one
// forward and one backward alternately, then the remaining backwards - and then its optimizer update. A slot is split
// into a forward (1/3) and a backward (2/3: backward = 2 forwards); F(s, m) waits for F(s - 1, m), B(s, m) for
// B(s + 1, m). Returns the time the last stage's update ends. With cores >= pp every task runs at full speed and
// this is the critical path of the schedule.
double simulate_pipeline(const std::vector<double>& slot, const std::vector<double>& update, int64_t micro,
                         double cores) {
  const size_t pp = slot.size();
  struct Task {
    bool backward;
    int64_t m;  // micro-batch; -1: the update
  };
  std::vector<std::vector<Task>> order(pp);
  for (size_t s = 0; s < pp; ++s) {
    const int64_t warm = std::min<int64_t>(static_cast<int64_t>(pp - 1 - s), micro);
    for (int64_t m = 0; m < warm; ++m) order[s].push_back({false, m});
    for (int64_t i = 0; i < micro - warm; ++i) {
      order[s].push_back({false, warm + i});
      order[s].push_back({true, i});
    }
    for (int64_t m = micro - warm; m < micro; ++m) order[s].push_back({true, m});
    order[s].push_back({false, -1});
  }
  std::vector<size_t> next(pp, 0);
  std::vector<int64_t> fwd_done(pp, 0), bwd_done(pp, 0);  // micro-batches finished (in order) per stage
  std::vector<double> left(pp, -1);                        // remaining work of the running task, -1: not started
  double now = 0;
  for (;;) {
    std::vector<size_t> ready;
    for (size_t s = 0; s < pp; ++s) {
      if (next[s] == order[s].size()) continue;
      const Task& t = order[s][next[s]];
      const bool ok = t.m < 0 || (t.backward ? (s + 1 == pp || bwd_done[s + 1] > t.m) : (s == 0 || fwd_done[s - 1] > t.m));
      if (!ok) continue;
      if (left[s] < 0) left[s] = t.m < 0 ? update[s] : (t.backward ? 2.0 : 1.0) / 3.0 * slot[s];
      ready.push_back(s);
    }
    if (ready.empty()) break;
    const double rate = std::min(1.0, cores / static_cast<double>(ready.size()));
    double dt = INFINITY;
    for (size_t s : ready) dt = std::min(dt, left[s] / rate);
    now += dt;
    for (size_t s : ready) {
      left[s] -= dt * rate;
      if (left[s] > 1e-12 * (1 + slot[s])) continue;
      const Task& t = order[s][next[s]];
      if (t.m >= 0) (t.backward ? bwd_done[s] : fwd_done[s]) = t.m + 1;
      left[s] = -1;
      ++next[s];
    }
  }
  return now;
}

}  // namespace

LmFlops formula_lm_flops(const nn::LlamaConfig& c, int64_t T) {
  const double E = static_cast<double>(c.dim), Dq = static_cast<double>(c.heads * c.head_dim()),
               Dkv = static_cast<double>(c.kv_heads * c.head_dim()), F = static_cast<double>(c.ffn),
               V = static_cast<double>(c.vocab), t = static_cast<double>(T);
  // Forward per token: the matrix products, attention over the whole window (the kernel masks, it does not skip),
  // and the elementwise ops (norms, rope, softmax, silu, residuals: ~a few per element).
  const double block =
      2 * (2 * E * Dq + 2 * E * Dkv + 3 * E * F) + 4 * t * Dq + 5 * static_cast<double>(c.heads) * t + 12 * E + 4 * F;
  const double head = 2 * E * V + 5 * V + 4 * E;
  LmFlops f{3 * block, 3 * head, "formula"};
  // The op counts: a tiny model of the same structure (arch, heads, kv heads) traced.
  nn::LlamaConfig tiny = c;
  tiny.dim = c.heads * 4;
  tiny.ffn = 8;
  tiny.vocab = 16;
  tiny.ctx = 4;
  tiny.tie_embeddings = c.tie_embeddings;
  tiny.layers = 1;
  const StepCount s1 = traced_step_flops(tiny, 4);
  tiny.layers = 2;
  const StepCount s2 = traced_step_flops(tiny, 4);
  f.block_ops = s2.ops - s1.ops;
  f.head_ops = 2 * s1.ops - s2.ops;
  f.block_tensors = s2.tensors - s1.tensors;
  f.head_tensors = 2 * s1.tensors - s2.tensors;
  const double u1 = traced_update_ops(1), u2 = traced_update_ops(2);
  f.update_ops_per_tensor = u2 - u1;
  f.update_ops_shared = 2 * u1 - u2;
  return f;
}

LmFlops count_lm_flops(const nn::LlamaConfig& c, int64_t T, int64_t max_traced_params) {
  const LmFlops f = formula_lm_flops(c, T);
  // Parameters of the 2-block model traced below: the embedding and head plus two blocks.
  const double E = static_cast<double>(c.dim), params2 = 2.0 * static_cast<double>(c.vocab) * E +
                                                         2 * (E * static_cast<double>(c.heads * c.head_dim()) * 2 +
                                                              2 * E * static_cast<double>(c.kv_heads * c.head_dim()) +
                                                              3 * E * static_cast<double>(c.ffn));
  if (params2 > static_cast<double>(max_traced_params)) return f;
  // One block's FLOPs are the 2-block model's minus the 1-block model's; the rest is the head (and the embedding).
  nn::LlamaConfig one = c, two = c;
  one.layers = 1;
  two.layers = 2;
  const double f1 = traced_step_flops(one, T).flops, f2 = traced_step_flops(two, T).flops;
  LmFlops t = f;
  t.block = (f2 - f1) / static_cast<double>(T);
  t.head = (2 * f1 - f2) / static_cast<double>(T);
  t.source = "traced";
  return t;
}

std::string Strategy::describe() const {
  return fmt::format("dp {} x pp {} x tp {}, {} micro-batch{} of {}", dp, pp, tp, micro, micro == 1 ? "" : "es",
                     micro_batch);
}

Strategy predict_strategy(const PlanInput& in, const ClusterSpec& c, const LmFlops& flops, int64_t dp, int64_t pp,
                          int64_t tp, int64_t micro) {
  const nn::LlamaConfig& m = in.model;
  const int64_t T = in.ctx > 0 ? in.ctx : m.ctx;
  const int64_t per_replica = in.global_batch / dp, mb = per_replica / micro;
  Strategy s{.dp = dp, .pp = pp, .tp = tp, .micro = micro, .micro_batch = mb};
  const double n = static_cast<double>(dp * pp * tp);
  const double rate = c.flops_per_s, overhead = c.op_overhead;
  const double tokens_mb = static_cast<double>(mb * T);
  const double p_tp = static_cast<double>(tp);
  // Each stage's micro-batch slot on one device: its blocks' FLOPs (tp splits them; the head is replicated) and ops,
  // the last stage also the head's, plus one accumulation add per parameter tensor it holds; and its optimizer step
  // (ops: the mean, the clipping and AdamW per tensor). Ops do not shrink with tp: a split matrix is still one op.
  double t_max = 0, t_sum = 0, update_ops_max = 0, ops_max = 0;
  std::vector<double> slots, updates;
  for (int64_t st = 0; st < pp; ++st) {
    const double blocks = static_cast<double>(m.layers / pp + (st < m.layers % pp ? 1 : 0));
    const bool last = st == pp - 1;
    const double stage_flops = blocks * flops.block / p_tp + (last ? flops.head : 0.0);
    const double tensors = blocks * flops.block_tensors + (last ? flops.head_tensors : 0.0);
    const double stage_ops = blocks * flops.block_ops + (last ? flops.head_ops : 0.0) + tensors;
    const double t = stage_flops * tokens_mb / rate + stage_ops * overhead;
    const double update_ops = flops.update_ops_shared + tensors * flops.update_ops_per_tensor;
    if (t > t_max) {
      t_max = t;
      ops_max = stage_ops;
    }
    t_sum += t;
    update_ops_max = std::max(update_ops_max, update_ops);
    slots.push_back(t);
    updates.push_back(update_ops * overhead);
  }
  // 1F1B and GPipe: the first micro-batch passes every stage forward and back (the sum of the slots), the other M - 1
  // follow at the pace of the slowest stage; so the bubble is the other stages' slots (pp - 1 slots when balanced).
  // Devices sharing C < n cores (validation on one host): the dp x tp copies of the pipeline run at once, so each gets
  // C / (dp tp) cores, shared by its stages as they become runnable: simulated (simulate_pipeline), which slows ranks
  // that are busy at once (dp, tp, overlapping stages) and lets stages idle in the bubble give their core away. The
  // simulated time scales the three terms.
  const double critical = static_cast<double>(micro) * t_max + (t_sum - t_max) + update_ops_max * overhead;
  double slow = 1.0;
  if (c.shared_cores > 0 && n > 1 && n > c.shared_cores && critical > 0) {
    const double cores = c.shared_cores / static_cast<double>(dp * tp);
    slow = std::max(1.0, simulate_pipeline(slots, updates, micro, cores) /
                             simulate_pipeline(slots, updates, micro, static_cast<double>(pp)));
  }
  s.compute_s = static_cast<double>(micro) * t_max * slow;
  s.bubble_s = (t_sum - t_max) * slow;
  s.update_s = update_ops_max * overhead * slow;
  s.ops = static_cast<double>(micro) * ops_max + update_ops_max;
  const auto allreduce = [&](double bytes, double p) {
    return p <= 1 ? 0.0 : 2 * (p - 1) * c.latency + 2 * (p - 1) / p * bytes / c.bandwidth;
  };
  const double act_bytes = tokens_mb * static_cast<double>(m.dim) * 4;
  const double blocks_max = ceil_div(static_cast<double>(m.layers), static_cast<double>(pp));
  const double blocks_last = static_cast<double>(m.layers / pp);
  // TP: per block and micro-batch 2 forward + 2 backward activation allreduces and 2 of the norm gradients.
  s.tp_comm_s = static_cast<double>(micro) * blocks_max *
                (4 * allreduce(act_bytes, p_tp) + 2 * allreduce(static_cast<double>(m.dim) * 4, p_tp));
  // PP: per micro-batch an activation forward and a gradient back per boundary, on the critical path of the
  // (M + pp - 1) slots.
  s.pp_comm_s = pp > 1 ? static_cast<double>(micro + pp - 1) * 2 * (c.latency + act_bytes / c.bandwidth) : 0.0;
  // Parameters of the device's share.
  const double E = static_cast<double>(m.dim), F = static_cast<double>(m.ffn), V = static_cast<double>(m.vocab);
  const double Dq = static_cast<double>(m.heads * m.head_dim()), Dkv = static_cast<double>(m.kv_heads * m.head_dim());
  const double block_params = 2 * E * Dq + 2 * E * Dkv + 3 * E * F + 2 * E;
  const double edge_params = V * E + (m.tie_embeddings ? 0.0 : V * E + E);
  const double dev_params = pp == 1 ? blocks_max * block_params / p_tp + edge_params
                                    : std::max(blocks_max * block_params / p_tp + V * E,
                                               blocks_last * block_params / p_tp + (m.tie_embeddings ? 0 : V * E) + E);
  s.dp_comm_s = allreduce(dev_params * 4, static_cast<double>(dp));
  s.step_s = s.compute_s + s.bubble_s + s.update_s + s.tp_comm_s + s.pp_comm_s + s.dp_comm_s;
  // Memory: f32 parameters, gradients, the accumulation buffer and AdamW's moments; activations of the micro-batches
  // in flight on stage 0 (1F1B: min(pp, M)).
  s.param_bytes = dev_params * 20;
  const double H = static_cast<double>(m.heads) / p_tp, t = static_cast<double>(T);
  const double act_per_token_block = 4 * (6 * E + (2 * Dq + 2 * Dkv) / p_tp + 3 * F / p_tp + 2 * H * t);
  const double in_flight = static_cast<double>(std::min(pp, micro));
  s.activation_bytes = in_flight * tokens_mb * blocks_max * act_per_token_block +
                       tokens_mb * V * 4 * 2;  // the logits and their gradient (the last stage)
  s.memory_bytes = s.param_bytes + s.activation_bytes;
  s.fits = c.mem_per_device <= 0 || s.memory_bytes <= c.mem_per_device;
  return s;
}

std::vector<Strategy> plan_parallel(const PlanInput& in, const ClusterSpec& c, const LmFlops& flops) {
  const nn::LlamaConfig& m = in.model;
  SPORE_CHECK(c.devices > 0 && in.global_batch > 0 && c.bandwidth > 0 && c.latency >= 0 && c.flops_per_s > 0,
              ErrorCode::invalid_argument,
              "plan-parallel needs devices, global batch, bandwidth and a FLOP rate > 0 (devices {}, batch {}, "
              "bandwidth {}, rate {})",
              c.devices, in.global_batch, c.bandwidth, c.flops_per_s);
  std::vector<Strategy> out;
  for (int64_t tp = 1; tp <= c.devices; ++tp) {
    if (c.devices % tp || m.heads % tp || m.kv_heads % tp || m.ffn % tp) continue;
    for (int64_t pp = 1; pp <= c.devices / tp; ++pp) {
      if ((c.devices / tp) % pp || pp > m.layers) continue;
      const int64_t dp = c.devices / tp / pp;
      if (in.global_batch % dp) continue;
      const int64_t per_replica = in.global_batch / dp;
      for (int64_t micro = 1; micro <= per_replica; micro *= 2) {
        if (per_replica % micro) continue;
        out.push_back(predict_strategy(in, c, flops, dp, pp, tp, micro));
      }
    }
  }
  SPORE_CHECK(!out.empty(), ErrorCode::invalid_argument,
              "plan-parallel: no dp x pp x tp of {} devices suits the model (heads {}, kv heads {}, ffn {}, layers {}) "
              "and global batch {}",
              c.devices, m.heads, m.kv_heads, m.ffn, m.layers, in.global_batch);
  std::stable_sort(out.begin(), out.end(), [](const Strategy& a, const Strategy& b) {
    if (a.fits != b.fits) return a.fits;
    return a.step_s < b.step_s;
  });
  return out;
}

}  // namespace spore::train
