// Attention fusion (passes/fuse_attention.cpp, ops/attention.h): the rewrite on text IR (what fuses, what must
// not), then numerics: the fused plan matches the unfused plan within per-dtype tolerances, gives the same bits
// for 1 and 4 threads, and runs fewer kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

#include "ops/dispatch.h"
#include "ops/graph_ops.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "runtime/runtime.h"

namespace spore {
namespace {

std::unique_ptr<Graph> parse(const std::string& text) {
  auto g = parse_graph(text);
  verify_graph(*g);
  return g;
}

// Runs the pass (then dce, to drop the absorbed constant / transpose) with the given inference flag.
bool fuse(Graph& g, bool inference = true) {
  PassOptions o;
  o.inference = inference;
  const bool changed = make_fuse_attention_pass()->run(g, o);
  verify_graph(g);
  if (changed) make_dce_pass()->run(g, o);
  verify_graph(g);
  return changed;
}

TEST(FuseAttention, ScaledQueryAndTransposedKeyBecomeOneNode) {
  // The torch export's form: div(q, sqrt(d)) @ transpose(k) -> softmax(axis=2) -> @ v.
  auto g = parse(
      "graph @g(%q: f32[6,5,8], %k: f32[6,7,8], %v: f32[6,7,4]) {\n"
      "  %c = constant() : f32[] = hex\"00008040\"\n"
      "  %qs = div(%q, %c) : f32[6,5,8]\n"
      "  %kt = transpose(%k) {perm=[0,2,1]} : f32[6,8,7]\n"
      "  %s = matmul(%qs, %kt) {transpose_a=false, transpose_b=false} : f32[6,5,7]\n"
      "  %p = softmax(%s) {axis=2} : f32[6,5,7]\n"
      "  %o = matmul(%p, %v) {transpose_a=false, transpose_b=false} : f32[6,5,4] !name=\"attn\"\n"
      "  return %o\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%q: f32[6,5,8], %k: f32[6,7,8], %v: f32[6,7,4]) {\n"
            "  %o = attention(%q, %k, %v) {k_transposed=false, scale=0.25} : f32[6,5,4] !name=\"attn\"\n"
            "  return %o\n"
            "}\n");
  EXPECT_EQ(print_graph(*parse(print_graph(*g))), print_graph(*g));  // the fused op's IR parses back
  EXPECT_FALSE(fuse(*g));
}

TEST(FuseAttention, MaskScalarOnTheLeftAndPreTransposedKey) {
  // mul(c, q); k^T is a value of its own (k_transposed=true); mask added on the left, broadcast over batch.
  auto g = parse(
      "graph @g(%q: f32[2,3,5,8], %kt: f32[2,3,8,7], %v: f32[2,3,7,4], %m: f32[1,1,5,7]) {\n"
      "  %c = constant() : f32[] = hex\"0000003f\"\n"
      "  %qs = mul(%c, %q) : f32[2,3,5,8]\n"
      "  %s = matmul(%qs, %kt) {transpose_a=false, transpose_b=false} : f32[2,3,5,7]\n"
      "  %sm = add(%m, %s) : f32[2,3,5,7]\n"
      "  %p = softmax(%sm) {axis=-1} : f32[2,3,5,7]\n"
      "  %o = matmul(%p, %v) {transpose_a=false, transpose_b=false} : f32[2,3,5,4]\n"
      "  return %o\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%q: f32[2,3,5,8], %kt: f32[2,3,8,7], %v: f32[2,3,7,4], %m: f32[1,1,5,7]) {\n"
            "  %o = attention(%q, %kt, %v, %m) {k_transposed=true, scale=0.5} : f32[2,3,5,4]\n"
            "  return %o\n"
            "}\n");
}

TEST(FuseAttention, TransposeBAttributeIsTheKey) {
  auto g = parse(
      "graph @g(%q: f64[4,5,8], %k: f64[4,9,8], %v: f64[4,9,3]) {\n"
      "  %s = matmul(%q, %k) {transpose_a=false, transpose_b=true} : f64[4,5,9]\n"
      "  %p = softmax(%s) {axis=2} : f64[4,5,9]\n"
      "  %o = matmul(%p, %v) {transpose_a=false, transpose_b=false} : f64[4,5,3]\n"
      "  return %o\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%q: f64[4,5,8], %k: f64[4,9,8], %v: f64[4,9,3]) {\n"
            "  %o = attention(%q, %k, %v) {k_transposed=false, scale=1.0} : f64[4,5,3]\n"
            "  return %o\n"
            "}\n");
}

TEST(FuseAttention, ScaledScoresWithMaskAsSporesMultiHeadAttentionWritesThem) {
  // matmul(q, k, transpose_b) * c + mask -> softmax -> @ v: the scale on the scores joins the node's scale.
  auto g = parse(
      "graph @g(%q: f32[2,4,6,8], %k: f32[2,4,6,8], %v: f32[2,4,6,8], %m: f32[6,6]) {\n"
      "  %c = constant() : f32[] = hex\"0000803e\"\n"
      "  %s = matmul(%q, %k) {transpose_a=false, transpose_b=true} : f32[2,4,6,6]\n"
      "  %ss = mul(%s, %c) : f32[2,4,6,6]\n"
      "  %sm = add(%ss, %m) : f32[2,4,6,6]\n"
      "  %p = softmax(%sm) {axis=-1} : f32[2,4,6,6]\n"
      "  %o = matmul(%p, %v) {transpose_a=false, transpose_b=false} : f32[2,4,6,8]\n"
      "  return %o\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%q: f32[2,4,6,8], %k: f32[2,4,6,8], %v: f32[2,4,6,8], %m: f32[6,6]) {\n"
            "  %o = attention(%q, %k, %v, %m) {k_transposed=false, scale=0.25} : f32[2,4,6,8]\n"
            "  return %o\n"
            "}\n");
  // Without the mask, too; a scale that is used elsewhere stays.
  auto h = parse(
      "graph @g(%q: f32[3,6,8], %k: f32[3,6,8], %v: f32[3,6,8]) {\n"
      "  %c = constant() : f32[] = hex\"0000803e\"\n"
      "  %s = matmul(%q, %k) {transpose_a=false, transpose_b=true} : f32[3,6,6]\n"
      "  %ss = div(%s, %c) : f32[3,6,6]\n"
      "  %p = softmax(%ss) {axis=-1} : f32[3,6,6]\n"
      "  %o = matmul(%p, %v) {transpose_a=false, transpose_b=false} : f32[3,6,8]\n"
      "  return %o, %ss\n"
      "}\n");
  EXPECT_FALSE(fuse(*h));
}

TEST(FuseAttention, NonScalarScaleStaysOutsideTheNode) {
  // A per-feature multiplier is not a scale: q * w is q.
  auto g = parse(
      "graph @g(%q: f32[2,5,8], %w: f32[8], %k: f32[2,7,8], %v: f32[2,7,4]) {\n"
      "  %qs = mul(%q, %w) : f32[2,5,8]\n"
      "  %s = matmul(%qs, %k) {transpose_a=false, transpose_b=true} : f32[2,5,7]\n"
      "  %p = softmax(%s) {axis=2} : f32[2,5,7]\n"
      "  %o = matmul(%p, %v) {transpose_a=false, transpose_b=false} : f32[2,5,4]\n"
      "  return %o\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%q: f32[2,5,8], %w: f32[8], %k: f32[2,7,8], %v: f32[2,7,4]) {\n"
            "  %qs = mul(%q, %w) : f32[2,5,8]\n"
            "  %o = attention(%qs, %k, %v) {k_transposed=false, scale=1.0} : f32[2,5,4]\n"
            "  return %o\n"
            "}\n");
}

void expect_unchanged(const std::string& text, bool inference = true) {
  auto g = parse(text);
  const std::string before = print_graph(*g);
  EXPECT_FALSE(fuse(*g, inference));
  EXPECT_EQ(print_graph(*g), before);
}

TEST(FuseAttention, SoftmaxOnAnotherAxisIsNotAttention) {
  expect_unchanged(
      "graph @g(%q: f32[2,5,8], %k: f32[2,7,8], %v: f32[2,5,4]) {\n"
      "  %s = matmul(%q, %k) {transpose_a=false, transpose_b=true} : f32[2,5,7]\n"
      "  %p = softmax(%s) {axis=1} : f32[2,5,7]\n"
      "  %pt = transpose(%p) {perm=[0,2,1]} : f32[2,7,5]\n"
      "  %o = matmul(%pt, %v) {transpose_a=false, transpose_b=false} : f32[2,7,4]\n"
      "  return %o\n"
      "}\n");
}

TEST(FuseAttention, IntermediatesUsedTwiceOrReturnedStay) {
  // The probabilities are returned too (as attention weights often are).
  expect_unchanged(
      "graph @g(%q: f32[2,5,8], %k: f32[2,7,8], %v: f32[2,7,4]) {\n"
      "  %s = matmul(%q, %k) {transpose_a=false, transpose_b=true} : f32[2,5,7]\n"
      "  %p = softmax(%s) {axis=2} : f32[2,5,7]\n"
      "  %o = matmul(%p, %v) {transpose_a=false, transpose_b=false} : f32[2,5,4]\n"
      "  return %o, %p\n"
      "}\n");
  // The scores feed something else as well (a training backward would read them).
  expect_unchanged(
      "graph @g(%q: f32[2,5,8], %k: f32[2,7,8], %v: f32[2,7,4]) {\n"
      "  %s = matmul(%q, %k) {transpose_a=false, transpose_b=true} : f32[2,5,7]\n"
      "  %p = softmax(%s) {axis=2} : f32[2,5,7]\n"
      "  %o = matmul(%p, %v) {transpose_a=false, transpose_b=false} : f32[2,5,4]\n"
      "  %r = relu(%s) : f32[2,5,7]\n"
      "  return %o, %r\n"
      "}\n");
  // The softmax is the right operand of the second matmul, not P @ V.
  expect_unchanged(
      "graph @g(%q: f32[2,5,8], %k: f32[2,5,8], %v: f32[2,3,5]) {\n"
      "  %s = matmul(%q, %k) {transpose_a=false, transpose_b=true} : f32[2,5,5]\n"
      "  %p = softmax(%s) {axis=2} : f32[2,5,5]\n"
      "  %o = matmul(%v, %p) {transpose_a=false, transpose_b=false} : f32[2,3,5]\n"
      "  return %o\n"
      "}\n");
  // v broadcast over the batch: the op does not broadcast batches.
  expect_unchanged(
      "graph @g(%q: f32[2,5,8], %k: f32[2,7,8], %v: f32[7,4]) {\n"
      "  %s = matmul(%q, %k) {transpose_a=false, transpose_b=true} : f32[2,5,7]\n"
      "  %p = softmax(%s) {axis=2} : f32[2,5,7]\n"
      "  %o = matmul(%p, %v) {transpose_a=false, transpose_b=false} : f32[2,5,4]\n"
      "  return %o\n"
      "}\n");
}

TEST(FuseAttention, TrainingGraphsAreLeftAlone) {
  expect_unchanged(
      "graph @g(%q: f32[2,5,8], %k: f32[2,7,8], %v: f32[2,7,4]) {\n"
      "  %s = matmul(%q, %k) {transpose_a=false, transpose_b=true} : f32[2,5,7]\n"
      "  %p = softmax(%s) {axis=2} : f32[2,5,7]\n"
      "  %o = matmul(%p, %v) {transpose_a=false, transpose_b=false} : f32[2,5,4]\n"
      "  return %o\n"
      "}\n",
      /*inference=*/false);
}

// ---- numerics

Tensor random_tensor(std::mt19937& rng, const Shape& shape, DType t, double lo = -1.5, double hi = 1.5) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = d(rng);
  return Tensor::from_doubles(v, shape, t);
}

// Multi-head self-attention as the torch export writes it, with a causal-style additive mask: x [B*H, L, D]
// projected to q, k, v, then (q / sqrt(D)) @ transpose(k) + mask -> softmax -> @ v -> relu.
std::unique_ptr<Graph> net(DType t, int64_t bh, int64_t l, int64_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  auto g = std::make_unique<Graph>("attn");
  Value* x = g->add_input(TensorType::of(t, {bh, l, d}), "x");
  Value* mask = g->add_input(TensorType::of(t, {l, l}), "mask");
  Value* wq = g->add_constant(random_tensor(rng, {d, d}, t, -0.4, 0.4), "wq");
  Value* wk = g->add_constant(random_tensor(rng, {d, d}, t, -0.4, 0.4), "wk");
  Value* wv = g->add_constant(random_tensor(rng, {d, d}, t, -0.4, 0.4), "wv");
  Value* c = g->add_constant(Tensor::from_doubles({std::sqrt(static_cast<double>(d))}, {}, t), "sqrt_d");
  Value* q = build_node(*g, "matmul"_op, {x, wq}, {})->output(0);
  Value* k = build_node(*g, "matmul"_op, {x, wk}, {})->output(0);
  Value* v = build_node(*g, "matmul"_op, {x, wv}, {})->output(0);
  Value* qs = build_node(*g, "div"_op, {q, c}, {})->output(0);
  Value* kt = build_node(*g, "transpose"_op, {k}, {{"perm", std::vector<int64_t>{0, 2, 1}}})->output(0);
  Value* s = build_node(*g, "matmul"_op, {qs, kt}, {})->output(0);
  Value* sm = build_node(*g, "add"_op, {s, mask}, {})->output(0);
  Value* p = build_node(*g, "softmax"_op, {sm}, {{"axis", int64_t{-1}}})->output(0);
  Value* o = build_node(*g, "matmul"_op, {p, v}, {}, "attn")->output(0);
  Value* y = build_node(*g, "relu"_op, {o}, {})->output(0);
  g->set_outputs({y});
  verify_graph(*g);
  return g;
}

double max_rel_error(const Tensor& got, const Tensor& want) {
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.item_at(i), gv = got.item_at(i);
    worst = std::max(worst, std::abs(gv - w) / (1.0 + std::abs(w)));
  }
  return worst;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(FuseAttention, DecompositionMatchesTheKernel) {
  // The decomposition (the op's definition and the fallback without a kernel) against the cpu kernel, with a
  // broadcast mask and a pre-transposed key.
  std::mt19937 rng(9);
  const Tensor q = random_tensor(rng, {2, 3, 6, 8}, DType::f64);
  const Tensor kt = random_tensor(rng, {2, 3, 8, 5}, DType::f64);
  const Tensor v = random_tensor(rng, {2, 3, 5, 4}, DType::f64);
  const Tensor m = random_tensor(rng, {6, 1}, DType::f64);
  const Attrs a = op_registry().get("attention"_op).normalize({{"scale", 0.3}, {"k_transposed", true}});
  const Tensor ins[] = {q, kt, v, m};
  const Tensor got = ops::call1("attention"_op, ins, a);
  const std::vector<Tensor> want = op_registry().get("attention"_op).decompose(ins, a);
  ASSERT_EQ(want.size(), 1u);
  ASSERT_EQ(got.shape(), (Shape{2, 3, 6, 4}));
  EXPECT_LE(max_rel_error(got, want[0]), 1e-12);
}

TEST(FuseAttention, FusedPlanMatchesUnfusedWithinToleranceAndIsThreadCountIndependent) {
  struct Tol {
    DType t;
    double tol;
  };
  // Inputs are rounded to the dtype, so both plans see the same values; the fused kernel sums in another order
  // (and f16/bf16 compute in f32 where the unfused ops round every intermediate).
  for (const Tol& tc : {Tol{DType::f32, 2e-5}, Tol{DType::f64, 1e-12}, Tol{DType::f16, 1e-2}, Tol{DType::bf16, 6e-2}}) {
    for (const auto& [bh, l, d] : {std::tuple<int64_t, int64_t, int64_t>{8, 32, 32}, {3, 70, 12}, {2, 5, 3}}) {
      SCOPED_TRACE(fmt::format("{} bh={} l={} d={}", dtype_name(tc.t), bh, l, d));
      CompileOptions fused_opts;
      fused_opts.inference = true;
      CompileOptions plain_opts = fused_opts;
      plain_opts.disabled_passes = {"fuse_attention"};
      Plan plain = compile_plan(net(tc.t, bh, l, d, 5), plain_opts);
      Plan fused = compile_plan(net(tc.t, bh, l, d, 5), fused_opts);
      int attention_nodes = 0;
      for (const Node* n : fused.graph().nodes()) attention_nodes += n->op == "attention"_op;
      EXPECT_EQ(attention_nodes, 1);
      // div, transpose, matmul, add, softmax, matmul -> attention.
      EXPECT_LE(fused.num_kernels(), plain.num_kernels() - 3);
      std::mt19937 rng(3);
      std::vector<double> mv(static_cast<size_t>(l * l));
      for (int64_t i = 0; i < l; ++i)
        for (int64_t j = 0; j < l; ++j) mv[static_cast<size_t>(i * l + j)] = j > i ? -30.0 : 0.0;
      const Tensor in[] = {random_tensor(rng, {bh, l, d}, tc.t), Tensor::from_doubles(mv, {l, l}, tc.t)};
      set_threads(1);
      const auto want = plain.run(in);
      const auto got1 = fused.run(in);
      set_threads(4);
      const auto got4 = fused.run(in);
      set_threads(0);
      EXPECT_LE(max_rel_error(got1[0], want[0]), tc.tol);
      EXPECT_TRUE(bit_equal(got1[0], got4[0])) << "1 thread != 4 threads";
    }
  }
}


// A tiny benchmark, not part of the suite (run with --gtest_also_run_disabled_tests): the transformer's attention
// core (128 batch-heads x 32 x 32, D = 32, as the torch export writes it) fused vs unfused, median of runs.
TEST(FuseAttention, DISABLED_BenchTransformerShape) {
  for (const int64_t bh : {128, 4}) {  // batch 32 and batch 1 of the 4-head transformer
  const int64_t l = 32, d = 32;
  const auto make = [&] {
    auto g = std::make_unique<Graph>("core");
    const TensorType t = TensorType::of(DType::f32, {bh, l, d});
    Value* q = g->add_input(t, "q");
    Value* k = g->add_input(t, "k");
    Value* v = g->add_input(t, "v");
    Value* c = g->add_constant(Tensor::from_doubles({std::sqrt(static_cast<double>(d))}, {}, DType::f32), "c");
    Value* qs = build_node(*g, "div"_op, {q, c}, {})->output(0);
    Value* kt = build_node(*g, "transpose"_op, {k}, {{"perm", std::vector<int64_t>{0, 2, 1}}})->output(0);
    Value* s = build_node(*g, "matmul"_op, {qs, kt}, {})->output(0);
    Value* p = build_node(*g, "softmax"_op, {s}, {{"axis", int64_t{-1}}})->output(0);
    g->set_outputs({build_node(*g, "matmul"_op, {p, v}, {})->output(0)});
    return g;
  };
  CompileOptions fo;
  fo.inference = true;
  CompileOptions po = fo;
  po.disabled_passes = {"fuse_attention"};
  Plan plain = compile_plan(make(), po), fused = compile_plan(make(), fo);
  std::mt19937 rng(1);
  const Tensor in[] = {random_tensor(rng, {bh, l, d}, DType::f32), random_tensor(rng, {bh, l, d}, DType::f32),
                       random_tensor(rng, {bh, l, d}, DType::f32)};
  const auto median_us = [&](Plan& pl) {
    std::vector<double> t;
    for (int i = 0; i < 300; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      pl.run(in);
      t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  for (int threads : {1, 2}) {
    set_threads(threads);
    const double up = median_us(plain), uf = median_us(fused);
    fmt::print("bh={} threads={} unfused {} kernels {:.1f} us, fused {} kernels {:.1f} us ({:.2f}x)\n", bh,
               threads, plain.num_kernels(), up, fused.num_kernels(), uf, up / uf);
  }
  set_threads(0);
  }
}

}  // namespace
}  // namespace spore
