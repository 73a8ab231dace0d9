#pragma once
// `spore plan-parallel` (issue 26; MindSpore's auto-parallel strategy search, as a cost model): for the decoder LM
// that `spore train-lm` trains, on N devices with a memory budget, a collective bandwidth and latency, search
// data x pipeline x tensor parallelism (and the micro-batch count) and predict each strategy's step time and memory.
//
//   train::PlanInput in{.model = cfg, .ctx = 2048, .global_batch = 512};
//   train::ClusterSpec c{.devices = 64, .mem_per_device = 80e9, .bandwidth = 100e9, .latency = 5e-6,
//                        .flops_per_s = 300e12};
//   std::vector<train::Strategy> s = train::plan_parallel(in, c);   // best first; s[0].fits says it fits
//
// The model (docs/PERFORMANCE.md, "Model parallel and plan-parallel"):
// - compute: training FLOPs per token of each block and of the head - 3x the forward (backward = 2 forwards) - from
//   the OpDefs' cost functions summed over the traced forward+backward graph (count_lm_flops; a closed form that
//   matches it for models too large to build here); a stage's micro-batch slot = FLOPs / flops_per_s + ops x
//   op_overhead (a fixed cost per op: eager dispatch on a CPU, a kernel launch on a GPU; it is what makes small
//   micro-batches and split matrices cost more than their FLOPs; the ops of the traced forward + backward and one
//   accumulation add per parameter tensor); a step = M slots of the slowest stage + the other stages' slots once
//   (the GPipe/1F1B bubble: pp - 1 slots when balanced) + the optimizer step, whose ops (mean, clipping, AdamW per
//   parameter tensor, traced) run once per step and not per micro-batch; with shared_cores C (validation on one
//   host), N > C devices share C cores: each of the dp x tp copies of the pipeline gets C / (dp tp) cores, and its
//   1F1B schedule is simulated with the stages that are runnable at once sharing them (so dp and tp ranks, busy at
//   once, run at C / N; a pipeline's stages share cores only while they overlap and idle in its bubble);
// - communication (alpha-beta, spore's own algorithms, nothing overlapped as spore runs them today): TP's 2
//   activation allreduces forward and 2 backward per block and micro-batch (plus the norm gradients'), PP's
//   activation and gradient messages per micro-batch and stage boundary, DP's one gradient allreduce per step;
//   an allreduce of n bytes over p ranks costs 2 (p-1) latency + 2 (p-1)/p n / bandwidth, a message latency + n /
//   bandwidth;
// - memory per device: parameters, gradients, the accumulation buffer and AdamW's two moments (20 bytes per f32
//   parameter of the device's share) plus activations kept for backward (per block and token: the residual, norms,
//   q/k/v, attention output and probabilities, MLP hidden; times the micro-batches in flight: M for GPipe, PP - s for
//   1F1B's stage s, so 1F1B is assumed).
#include <cstdint>
#include <string>
#include <vector>

#include "nn/llama.h"

namespace spore::train {

struct PlanInput {
  nn::LlamaConfig model;
  int64_t ctx = 0;           // tokens per sequence (0: the model's context)
  int64_t global_batch = 0;  // sequences per optimizer step
};

struct ClusterSpec {
  int64_t devices = 1;
  double mem_per_device = 0;  // bytes
  double bandwidth = 0;       // bytes/s a rank sends and receives at (allreduce bus bandwidth)
  double latency = 0;         // seconds per message
  double flops_per_s = 0;     // achieved training FLOP rate of one device
  double op_overhead = 0;     // seconds each op costs beyond its FLOPs (eager dispatch, kernel launch)
  double shared_cores = 0;    // > 0: the devices are processes sharing this many cores (validation on one host)
};

// Training FLOPs (forward + backward) per token.
struct LmFlops {
  double block = 0;    // one decoder block
  double head = 0;     // the final norm, the output matrix and the loss (the embedding is a gather: ~0)
  std::string source;  // "traced" (OpDef costs of the traced step) or "formula"
  // Ops (graph nodes) of one micro-batch's forward + backward: a block's and the head's (with the embedding); counted
  // on the traced graph of a tiny model of the same structure, as the count does not depend on the sizes.
  double block_ops = 0, head_ops = 0;
  // Trainable parameter tensors of a block and of the rest (embedding, final norm, output), from the same tiny models.
  double block_tensors = 0, head_tensors = 0;
  // Ops of one optimizer step as the LM trainers run it (the accumulated gradient divided by M, clipped by the global
  // norm, AdamW): per parameter tensor, and once per step (the bias corrections, the norm). Traced likewise.
  double update_ops_per_tensor = 0, update_ops_shared = 0;
};
// Traces the model's forward + backward on one sequence of ctx tokens and sums the OpDefs' FLOPs when the model has at
// most max_traced_params parameters (it is built to trace); else the closed form.
LmFlops count_lm_flops(const nn::LlamaConfig& c, int64_t ctx, int64_t max_traced_params = 64'000'000);
// The closed form: per token, a block's 2 (2 E Dq + 2 E Dkv + 3 E F) + 4 T Dq multiply-adds and its elementwise work,
// times 3.
LmFlops formula_lm_flops(const nn::LlamaConfig& c, int64_t ctx);

struct Strategy {
  int64_t dp = 1, pp = 1, tp = 1, micro = 1;  // micro: micro-batches per step (pipeline) / accumulation
  int64_t micro_batch = 0;                    // sequences per micro-batch
  double compute_s = 0, bubble_s = 0, update_s = 0, tp_comm_s = 0, pp_comm_s = 0, dp_comm_s = 0, step_s = 0;
  double ops = 0;  // ops on one device's critical path per step: M slots of the slowest stage and its update
  double param_bytes = 0, activation_bytes = 0, memory_bytes = 0;  // per device (the fullest)
  bool fits = true;
  std::string describe() const;  // "dp 2 x pp 1 x tp 2, 4 micro-batches of 2"
};

// Every strategy with dp * pp * tp = devices that the model allows (tp divides heads, kv heads and ffn; pp <= layers;
// dp divides the global batch) with micro-batch counts 1, 2, 4, ... dividing the per-replica batch; the ones that
// fit the memory first, each group by predicted step time.
std::vector<Strategy> plan_parallel(const PlanInput& in, const ClusterSpec& c, const LmFlops& flops);

// The predicted time and memory of one given strategy (plan_parallel's model).
Strategy predict_strategy(const PlanInput& in, const ClusterSpec& c, const LmFlops& flops, int64_t dp, int64_t pp,
                          int64_t tp, int64_t micro);

}  // namespace spore::train
