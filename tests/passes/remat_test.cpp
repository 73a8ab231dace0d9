// The rematerialize pass (passes/remat.cpp): Before/Expected text IR, the cases it must leave alone, and a
// 20-layer MLP training step whose planned arena shrinks with recompute on while every output and gradient
// keeps its bits.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "autodiff/autodiff.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "runtime/trace.h"
#include "train_step_graph.h"

namespace spore {
namespace {

std::string rematerialized(const std::string& before, bool recompute = true) {
  auto g = parse_graph(before);
  verify_graph(*g);
  PassManager pm(PassOptions{.verify_each = true, .recompute = recompute});
  pm.add(make_rematerialize_pass());
  pm.run(*g);
  return print_graph(*g);
}

// %h = relu(%a) is used right away and again 5 nodes later, where %a (its input) is still live: the late use
// reads a clone computed right before it.
constexpr const char* kBefore =
    "graph @g(%x: f32[16,16], %w: f32[16,16]) {\n"
    "  %a = matmul(%x, %w) : f32[16,16]\n"
    "  %h = relu(%a) : f32[16,16]\n"
    "  %m = matmul(%h, %w) : f32[16,16]\n"
    "  %t1 = tanh(%m) : f32[16,16]\n"
    "  %t2 = exp(%t1) : f32[16,16]\n"
    "  %t3 = neg(%t2) : f32[16,16]\n"
    "  %t4 = sigmoid(%t3) : f32[16,16]\n"
    "  %g = mul(%t4, %h) : f32[16,16]\n"
    "  %r = add(%g, %a) : f32[16,16]\n"
    "  return %r\n"
    "}\n";

TEST(Rematerialize, CloneGoesRightBeforeTheLateUse) {
  const std::string expected =
      "graph @g(%x: f32[16,16], %w: f32[16,16]) {\n"
      "  %a = matmul(%x, %w) : f32[16,16]\n"
      "  %h = relu(%a) : f32[16,16]\n"
      "  %m = matmul(%h, %w) : f32[16,16]\n"
      "  %t1 = tanh(%m) : f32[16,16]\n"
      "  %t2 = exp(%t1) : f32[16,16]\n"
      "  %t3 = neg(%t2) : f32[16,16]\n"
      "  %t4 = sigmoid(%t3) : f32[16,16]\n"
      "  %h.remat = relu(%a) : f32[16,16]\n"
      "  %g = mul(%t4, %h.remat) : f32[16,16]\n"
      "  %r = add(%g, %a) : f32[16,16]\n"
      "  return %r\n"
      "}\n";
  EXPECT_EQ(rematerialized(kBefore), expected);
}

TEST(Rematerialize, OffByDefault) { EXPECT_EQ(rematerialized(kBefore, /*recompute=*/false), kBefore); }

TEST(Rematerialize, LeavesAloneWhatWouldExtendALiveRangeOrIsNotCheap) {
  // %a dies at %h: recomputing %h late would keep %a live instead (no gain).
  const std::string input_dead =
      "graph @g(%x: f32[16,16], %w: f32[16,16]) {\n"
      "  %a = matmul(%x, %w) : f32[16,16]\n"
      "  %h = relu(%a) : f32[16,16]\n"
      "  %m = matmul(%h, %w) : f32[16,16]\n"
      "  %t1 = tanh(%m) : f32[16,16]\n"
      "  %t2 = exp(%t1) : f32[16,16]\n"
      "  %t3 = neg(%t2) : f32[16,16]\n"
      "  %t4 = sigmoid(%t3) : f32[16,16]\n"
      "  %g = mul(%t4, %h) : f32[16,16]\n"
      "  return %g\n"
      "}\n";
  EXPECT_EQ(rematerialized(input_dead), input_dead);
  // A matmul is not cheap to recompute.
  const std::string matmul_late =
      "graph @g(%x: f32[16,16], %w: f32[16,16]) {\n"
      "  %a = matmul(%x, %w) : f32[16,16]\n"
      "  %m = tanh(%a) : f32[16,16]\n"
      "  %t1 = tanh(%m) : f32[16,16]\n"
      "  %t2 = exp(%t1) : f32[16,16]\n"
      "  %t3 = neg(%t2) : f32[16,16]\n"
      "  %t4 = sigmoid(%t3) : f32[16,16]\n"
      "  %g = mul(%t4, %a) : f32[16,16]\n"
      "  %r = add(%g, %x) : f32[16,16]\n"
      "  return %r\n"
      "}\n";
  EXPECT_EQ(rematerialized(matmul_late), matmul_late);
  // Uses close together, a graph output, and a tiny value: nothing to gain.
  const std::string close_uses =
      "graph @g(%x: f32[16,16]) {\n"
      "  %h = relu(%x) : f32[16,16]\n"
      "  %t = tanh(%h) : f32[16,16]\n"
      "  %g = mul(%t, %h) : f32[16,16]\n"
      "  return %g\n"
      "}\n";
  EXPECT_EQ(rematerialized(close_uses), close_uses);
  const std::string small =
      "graph @g(%x: f32[4,4]) {\n"
      "  %h = relu(%x) : f32[4,4]\n"
      "  %t1 = tanh(%h) : f32[4,4]\n"
      "  %t2 = exp(%t1) : f32[4,4]\n"
      "  %t3 = neg(%t2) : f32[4,4]\n"
      "  %t4 = sigmoid(%t3) : f32[4,4]\n"
      "  %g = mul(%t4, %h) : f32[4,4]\n"
      "  return %g\n"
      "}\n";
  EXPECT_EQ(rematerialized(small), small);
}

std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<Tensor> ins;
  for (const Value* v : g.inputs()) {
    std::vector<float> data(static_cast<size_t>(v->type.numel()));
    for (float& f : data) f = nd(rng);
    ins.push_back(Tensor::from_vector<float>(data, v->type.shape()));
  }
  return ins;
}

TEST(Rematerialize, MlpTrainingStepPlansASmallerArenaWithTheSameBits) {
  auto base = mlp_training_step(20, 32, 64, /*grads_out=*/true);
  // Both graphs get the same cleanup; only one is rematerialized. Compiling at opt_level 0 without cse then
  // plans them as they are (cse would merge each clone back into its original).
  PassManager clean(PassOptions{});
  clean.add(make_dce_pass()).add(make_cse_pass()).add(make_dce_pass());
  clean.run(*base);
  auto remat = base->clone();
  PassManager pm(PassOptions{.verify_each = true, .recompute = true});
  pm.add(make_rematerialize_pass());
  pm.run(*remat);
  ASSERT_TRUE(pm.records()[0].changed);
  int relus_before = 0, relus_after = 0;
  for (const Node* n : base->nodes()) relus_before += n->op == "relu"_op;
  for (const Node* n : remat->nodes()) relus_after += n->op == "relu"_op;
  EXPECT_GT(relus_after, relus_before);           // forward activations recomputed in the backward
  EXPECT_LE(relus_after, relus_before * 2);       // at most once each

  const std::vector<Tensor> ins = random_inputs(*base, 3);
  for (int level : {1, 2}) {
    SCOPED_TRACE(level);
    CompileOptions o;
    o.opt_level = 0;
    o.memory_optimize_level = level;
    o.disabled_passes = {"cse"};
    Plan p0 = compile_plan(base->clone(), o);
    Plan p1 = compile_plan(remat->clone(), o);
    std::printf("20-layer MLP training step, memory_optimize_level=%d: arena %lld bytes, with recompute %lld (%.3f), "
                "kernels %lld -> %lld\n",
                level, static_cast<long long>(p0.arena_bytes()), static_cast<long long>(p1.arena_bytes()),
                static_cast<double>(p1.arena_bytes()) / static_cast<double>(p0.arena_bytes()),
                static_cast<long long>(p0.num_kernels()), static_cast<long long>(p1.num_kernels()));
    EXPECT_LT(p1.arena_bytes(), p0.arena_bytes());
    const std::vector<Tensor> y0 = p0.run(ins), y1 = p1.run(ins);
    ASSERT_EQ(y0.size(), y1.size());
    for (size_t i = 0; i < y0.size(); ++i) {
      ASSERT_EQ(y0[i].nbytes(), y1[i].nbytes()) << "output " << i;
      EXPECT_EQ(std::memcmp(y0[i].contiguous().raw_data(), y1[i].contiguous().raw_data(), y0[i].nbytes()), 0)
          << "output " << i << " (loss, grads, new params) differs with recompute";
    }
  }
}

// Random DAGs of elementwise, broadcast, reshape, reduce and matmul ops: the pass keeps the graph valid and the
// bits the same wherever it fires.
TEST(Rematerialize, RandomGraphsKeepTheirBits) {
  int fired = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE(seed);
    auto g = trace_function(
        [seed](std::span<const Tensor> in) {
          std::mt19937_64 rng(seed);
          auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
          std::vector<Tensor> pool(in.begin(), in.end());
          const int steps = 8 + static_cast<int>(rng() % 24);
          for (int s = 0; s < steps; ++s) {
            const Tensor a = pool[pool.size() - 1 - pick(std::min<size_t>(pool.size(), 3))];
            const Tensor b = pool[pick(pool.size())];  // often an old value: a late use
            switch (rng() % 9) {
              case 0: pool.push_back(ops::relu(a)); break;
              case 1: pool.push_back(ops::tanh(a)); break;
              case 2: pool.push_back(ops::sigmoid(ops::add(a, 0.5))); break;
              case 3: pool.push_back(ops::add(a, b)); break;
              case 4: pool.push_back(ops::mul(a, b)); break;
              case 5: pool.push_back(ops::sub(b, a)); break;
              case 6: pool.push_back(ops::reshape(ops::relu(ops::reshape(a, {32, 16})), {16, 32})); break;
              case 7: pool.push_back(ops::add(ops::reduce_sum(a, {1}, true), b)); break;
              default: pool.push_back(ops::matmul(ops::matmul(a, b, false, true), a)); break;
            }
          }
          std::vector<Tensor> out{pool.back()};
          if (rng() % 2) out.push_back(pool[pool.size() / 2]);
          return out;
        },
        {TensorType::of(DType::f32, {16, 32}), TensorType::of(DType::f32, {16, 32})});
    auto remat = g->clone();
    PassManager pm(PassOptions{.verify_each = true, .recompute = true});
    pm.add(make_rematerialize_pass());
    pm.run(*remat);
    if (!pm.records()[0].changed) continue;
    ++fired;
    CompileOptions o;
    o.opt_level = 0;
    o.disabled_passes = {"cse"};
    const std::vector<Tensor> ins = random_inputs(*g, seed);
    const std::vector<Tensor> y0 = compile_plan(g->clone(), o).run(ins), y1 = compile_plan(remat->clone(), o).run(ins);
    ASSERT_EQ(y0.size(), y1.size());
    for (size_t i = 0; i < y0.size(); ++i) {
      ASSERT_EQ(y0[i].nbytes(), y1[i].nbytes());
      EXPECT_EQ(std::memcmp(y0[i].contiguous().raw_data(), y1[i].contiguous().raw_data(), y0[i].nbytes()), 0) << "output " << i;
    }
  }
  std::printf("rematerialize fired on %d of 200 random graphs\n", fired);
  EXPECT_GT(fired, 20);
}

}  // namespace
}  // namespace spore
