// spore plan-parallel's cost model (train/parallel_plan.h). Its predictions against measured step times:
// bench/plan_parallel_validate.py (docs/PERFORMANCE.md).
#include <gtest/gtest.h>

#include "base/error.h"
#include "runtime/runtime.h"
#include "train/parallel_plan.h"

namespace spore::train {
namespace {

nn::LlamaConfig small() {
  return {.arch = "llama", .vocab = 512, .dim = 128, .layers = 4, .heads = 4, .kv_heads = 2, .ffn = 352, .ctx = 64};
}

// The closed form (used for models too large to build) agrees with the OpDefs' FLOPs over the traced training graph.
TEST(ParallelPlan, FormulaMatchesTracedFlops) {
  init();
  for (const nn::LlamaConfig& c :
       {small(),
        nn::LlamaConfig{
            .arch = "qwen2", .vocab = 300, .dim = 64, .layers = 2, .heads = 8, .kv_heads = 8, .ffn = 160, .ctx = 32}}) {
    const LmFlops traced = count_lm_flops(c, c.ctx), formula = formula_lm_flops(c, c.ctx);
    EXPECT_EQ(traced.source, "traced");
    EXPECT_NEAR(formula.block / traced.block, 1.0, 0.05) << c.dim;
    EXPECT_NEAR(formula.head / traced.head, 1.0, 0.05) << c.dim;
  }
  EXPECT_EQ(count_lm_flops(small(), 64, /*max_traced_params=*/1000).source, "formula");
}

TEST(ParallelPlan, SearchRespectsTheModelAndTheMemory) {
  const PlanInput in{.model = small(), .ctx = 64, .global_batch = 8};
  const LmFlops f = formula_lm_flops(in.model, in.ctx);
  ClusterSpec c{.devices = 4, .mem_per_device = 0, .bandwidth = 1e9, .latency = 1e-5, .flops_per_s = 1e10};
  const std::vector<Strategy> all = plan_parallel(in, c, f);
  for (const Strategy& s : all) {
    EXPECT_EQ(s.dp * s.pp * s.tp, 4);
    EXPECT_EQ(in.model.heads % s.tp, 0);
    EXPECT_EQ(in.model.kv_heads % s.tp, 0);  // so tp 4 is never offered (2 kv heads)
    EXPECT_EQ(8 % (s.dp * s.micro), 0);
  }
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].step_s, all[i].step_s);
  // A pipeline's bubble is the other stages' slots (here the first stage's, without the head): more micro-batches
  // shrink its share.
  const Strategy p1 = predict_strategy(in, c, f, 1, 2, 2, 1), p4 = predict_strategy(in, c, f, 1, 2, 2, 4);
  EXPECT_GT(p1.bubble_s, 0.5 * p1.compute_s);
  EXPECT_LT(p1.bubble_s, p1.compute_s);
  EXPECT_NEAR(p4.bubble_s / p4.compute_s, p1.bubble_s / p1.compute_s / 4, 1e-12);
  // With too little memory for a replica's parameters and AdamW state, the chosen strategy splits the model.
  const Strategy dp4 = predict_strategy(in, c, f, 4, 1, 1, 1);
  c.mem_per_device = dp4.param_bytes * 0.9;
  const std::vector<Strategy> tight = plan_parallel(in, c, f);
  EXPECT_TRUE(tight.front().fits);
  EXPECT_GT(tight.front().pp * tight.front().tp, 1);
  // 5 devices: 5 stages > 4 blocks, 5 does not divide the batch of 8 nor the heads.
  EXPECT_THROW(plan_parallel(in, ClusterSpec{.devices = 5, .bandwidth = 1e9, .flops_per_s = 1e10}, f), Error);
}

// Per-op costs: a micro-batch slot pays its forward + backward ops and one accumulation add per parameter tensor; the
// optimizer step (mean, clipping, AdamW per tensor, traced) is paid once per step, by each stage for its own tensors.
TEST(ParallelPlan, UpdateOpsArePaidOncePerStep) {
  init();
  const PlanInput in{.model = small(), .ctx = 64, .global_batch = 8};
  const LmFlops f = count_lm_flops(in.model, in.ctx);
  EXPECT_EQ(f.block_tensors, 9);  // norms, q, k, v, o, gate, up, down
  EXPECT_EQ(f.head_tensors, 3);   // embedding, final norm, output
  EXPECT_GT(f.update_ops_per_tensor, 10);
  const double o = 1e-6;
  const ClusterSpec c{.devices = 1, .bandwidth = 1e9, .latency = 0, .flops_per_s = 1e30, .op_overhead = o};
  const double L = static_cast<double>(in.model.layers), tensors = L * f.block_tensors + f.head_tensors;
  const double slot = (L * f.block_ops + f.head_ops + tensors) * o;
  const double update = (f.update_ops_shared + tensors * f.update_ops_per_tensor) * o;
  const Strategy m1 = predict_strategy(in, c, f, 1, 1, 1, 1), m4 = predict_strategy(in, c, f, 1, 1, 1, 4);
  EXPECT_NEAR(m1.step_s, slot + update, 1e-12);
  EXPECT_NEAR(m4.step_s, 4 * slot + update, 1e-12);
  EXPECT_NEAR(m4.update_s, update, 1e-15);
  // Two stages of two blocks: the last one (with the head) sets the pace, the first one's slot is the bubble, and each
  // stage's update covers its own tensors (the slower one counts).
  const ClusterSpec c2{.devices = 2, .bandwidth = 1e9, .latency = 0, .flops_per_s = 1e30, .op_overhead = o};
  const Strategy pp = predict_strategy(in, c2, f, 1, 2, 1, 4);
  const double first = (2 * f.block_ops + 2 * f.block_tensors) * o;
  const double last = (2 * f.block_ops + f.head_ops + 2 * f.block_tensors + f.head_tensors) * o;
  EXPECT_NEAR(pp.compute_s, 4 * last, 1e-12);
  EXPECT_NEAR(pp.bubble_s, first, 1e-12);
  EXPECT_NEAR(pp.update_s, (f.update_ops_shared + (2 * f.block_tensors + f.head_tensors) * f.update_ops_per_tensor) * o,
              1e-15);
}

// Devices sharing cores (validation on one host): data-parallel ranks all work at once and slow down by N / C; a
// pipeline's stages share the cores only while they overlap (the simulated 1F1B schedule) and give them away in the
// bubble, so 4 stages on 2 cores cost more than the critical path but less than 2x it.
TEST(ParallelPlan, SharedCoresSpreadTheWork) {
  init();
  const PlanInput in{.model = small(), .ctx = 64, .global_batch = 8};
  const LmFlops f = count_lm_flops(in.model, in.ctx);
  ClusterSpec c{.devices = 4, .bandwidth = 1e12, .latency = 0, .flops_per_s = 1e10, .op_overhead = 1e-6};
  const Strategy dp_alone = predict_strategy(in, c, f, 4, 1, 1, 1), pp_alone = predict_strategy(in, c, f, 1, 4, 1, 8);
  c.shared_cores = 2;
  const Strategy dp = predict_strategy(in, c, f, 4, 1, 1, 1), pp = predict_strategy(in, c, f, 1, 4, 1, 8);
  const auto busy = [](const Strategy& s) { return s.compute_s + s.bubble_s + s.update_s; };
  EXPECT_NEAR(busy(dp), 2 * busy(dp_alone), 1e-12);
  EXPECT_GT(busy(pp), busy(pp_alone));
  EXPECT_LT(busy(pp), 2 * busy(pp_alone));
  // 8 micro-batches of 1: the simulated schedule can beat neither the critical path nor the 4 stages' work over 2
  // cores (M slots and the update of every stage, halved), and with stages overlapping it loses some of both.
  ClusterSpec one{.devices = 1, .bandwidth = 1e12, .latency = 0, .flops_per_s = 1e10, .op_overhead = 1e-6};
  double work = 0;
  for (int64_t s = 0; s < 4; ++s) {
    // One stage alone = a 1-block model without the head, except the last (FLOPs and ops of the model's terms).
    const double blocks = 1, last = s == 3 ? 1 : 0;
    const double tensors = blocks * f.block_tensors + last * f.head_tensors;
    const double slot = (blocks * f.block + last * f.head) * 64 / one.flops_per_s +
                        (blocks * f.block_ops + last * f.head_ops + tensors) * one.op_overhead;
    work += 8 * slot + (f.update_ops_shared + tensors * f.update_ops_per_tensor) * one.op_overhead;
  }
  EXPECT_GT(busy(pp), work / 2);
  EXPECT_LT(busy(pp), work);
  // As many cores as devices: the schedule's critical path, as without sharing.
  c.shared_cores = 4;
  EXPECT_NEAR(busy(predict_strategy(in, c, f, 1, 4, 1, 8)), busy(pp_alone), 1e-12);
}

}  // namespace
}  // namespace spore::train
