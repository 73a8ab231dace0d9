// Elementwise-chain fusion: Before/Expected IR, fused == unfused bit for bit on random chains and trees
// (with [C,1,1], [C] and scalar broadcasting), 1 thread == 4 threads, and fewer kernels and bytes
// moved (null backend).
#include <random>

#include <gtest/gtest.h>

#include "backend/null/null_backend.h"
#include "base/thread_pool.h"
#include "ops/graph_ops.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "runtime/runtime.h"

namespace spore {
namespace {

std::unique_ptr<Graph> parse(const std::string& text) {
  init();
  auto g = parse_graph(text);
  verify_graph(*g);
  return g;
}

bool fuse(Graph& g) {
  const bool changed = make_fuse_elementwise_pass()->run(g, PassOptions{});
  verify_graph(g);
  return changed;
}

int64_t id(OpId op) { return static_cast<int64_t>(op); }

TEST(FuseElementwise, ChainWithBroadcastBecomesOneNode) {
  auto g = parse(
      "graph @g(%x: f32[2,3,4,4], %s: f32[3,1,1], %b: f32[3,1,1]) {\n"
      "  %c = constant() : f32[] = hex\"0000003f\"\n"
      "  %m = mul(%x, %s) : f32[2,3,4,4]\n"
      "  %a = add(%m, %b) : f32[2,3,4,4]\n"
      "  %h = mul(%a, %c) : f32[2,3,4,4]\n"
      "  %y = leaky_relu(%h) {alpha=0.25} : f32[2,3,4,4] !name=\"act\"\n"
      "  return %y\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            fmt::format("graph @g(%x: f32[2,3,4,4], %s: f32[3,1,1], %b: f32[3,1,1]) {{\n"
                        "  %c = constant() : f32[] = hex\"0000003f\"\n"
                        "  %y = fused_elementwise(%x, %s, %b, %c) {{params=[0.0,0.0,0.0,0.0,0.0,0.0,0.25,0.0], "
                        "program=[{},0,1,-1,{},4,2,-1,{},5,3,-1,{},6,-1,-1], results=[7]}} : f32[2,3,4,4] !name=\"act\"\n"
                        "  return %y\n"
                        "}}\n",
                        id("mul"_op), id("add"_op), id("mul"_op), id("leaky_relu"_op)));
  EXPECT_FALSE(fuse(*g));  // a fused node is not fused again
}

TEST(FuseElementwise, GraphOutputsBecomeExtraOutputsAndCyclesAreAvoided) {
  // %e is used by the matmul, which feeds the chain: as an extra output of the chain's group it would close
  // a cycle, so it ends its own group (neg+exp). %r is a graph output and becomes an extra output of the
  // group that computes q = sqrt(r) from the tree t = sigmoid(p) * tanh(p).
  auto g = parse(
      "graph @g(%x: f32[4,4], %w: f32[4,4]) {\n"
      "  %n = neg(%x) : f32[4,4]\n"
      "  %e = exp(%n) : f32[4,4]\n"
      "  %mm = matmul(%e, %w) : f32[4,4]\n"
      "  %p = add(%mm, %e) : f32[4,4]\n"
      "  %sg = sigmoid(%p) : f32[4,4]\n"
      "  %th = tanh(%p) : f32[4,4]\n"
      "  %t = mul(%sg, %th) : f32[4,4]\n"
      "  %r = relu(%t) : f32[4,4]\n"
      "  %q = sqrt(%r) : f32[4,4]\n"
      "  return %q, %r\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            fmt::format("graph @g(%x: f32[4,4], %w: f32[4,4]) {{\n"
                        "  %e = fused_elementwise(%x) {{params=[0.0,0.0,0.0,0.0], program=[{},0,-1,-1,{},1,-1,-1], "
                        "results=[2]}} : f32[4,4]\n"
                        "  %mm = matmul(%e, %w) : f32[4,4]\n"
                        "  %q, %r = fused_elementwise(%mm, %e) {{params=[0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0], "
                        "program=[{},0,1,-1,{},2,-1,-1,{},2,-1,-1,{},3,4,-1,{},5,-1,-1,{},6,-1,-1], results=[7,6]}} "
                        ": f32[4,4], f32[4,4]\n"
                        "  return %q, %r\n"
                        "}}\n",
                        id("neg"_op), id("exp"_op), id("add"_op), id("sigmoid"_op), id("tanh"_op), id("mul"_op),
                        id("relu"_op), id("sqrt"_op)));
}

TEST(FuseElementwise, ValuesUsedOutsideBecomeExtraOutputsUnlessThatMakesACycle) {
  // Layer norm's tail: %d feeds the variance (outside) and the division. Taking %d into the tail's group
  // would close a cycle (d -> p -> r -> tail), so the tail fuses without it; then d = x - m and p = d * d
  // fuse with %d as an extra output.
  auto g = parse(
      "graph @g(%x: f32[2,8], %m: f32[2,1]) {\n"
      "  %c = constant() : f32[] = hex\"acc52737\"\n"
      "  %d = sub(%x, %m) : f32[2,8]\n"
      "  %p = mul(%d, %d) : f32[2,8]\n"
      "  %r = reduce_mean(%p) {axes=[1], keepdims=true} : f32[2,1]\n"
      "  %e = add(%r, %c) : f32[2,1]\n"
      "  %s = sqrt(%e) : f32[2,1]\n"
      "  %n = div(%d, %s) : f32[2,8]\n"
      "  return %n\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            fmt::format("graph @g(%x: f32[2,8], %m: f32[2,1]) {{\n"
                        "  %c = constant() : f32[] = hex\"acc52737\"\n"
                        "  %p, %d = fused_elementwise(%x, %m) {{params=[0.0,0.0,0.0,0.0], program=[{},0,1,-1,{},2,2,-1], "
                        "results=[3,2]}} : f32[2,8], f32[2,8]\n"
                        "  %r = reduce_mean(%p) {{axes=[1], keepdims=true}} : f32[2,1]\n"
                        "  %n = fused_elementwise(%r, %c, %d) {{params=[0.0,0.0,0.0,0.0,0.0,0.0], "
                        "program=[{},0,1,-1,{},3,-1,-1,{},2,4,-1], results=[5]}} : f32[2,8]\n"
                        "  return %n\n"
                        "}}\n",
                        id("sub"_op), id("mul"_op), id("add"_op), id("sqrt"_op), id("div"_op)));
}

TEST(FuseElementwise, LeavesSingleOpsOtherDtypesAndNonElementwiseOps) {
  const std::string text =
      "graph @g(%x: f32[4], %h: f16[4]) {\n"
      "  %a = relu(%x) : f32[4]\n"
      "  %s = reduce_sum(%a) {axes=[0], keepdims=true} : f32[1]\n"
      "  %b = neg(%s) : f32[1]\n"
      "  %c = exp(%h) : f16[4]\n"
      "  %d = neg(%c) : f16[4]\n"
      "  return %b, %d\n"
      "}\n";
  auto g = parse(text);
  EXPECT_FALSE(fuse(*g));
  EXPECT_EQ(print_graph(*g), print_graph(*parse(text)));
}

// ---- random graphs: fused vs unfused, bit for bit

struct RandomGraph {
  std::unique_ptr<Graph> graph;
  std::vector<Tensor> inputs;
};

RandomGraph random_graph(uint32_t seed, const Shape& full) {
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  RandomGraph r;
  r.graph = std::make_unique<Graph>("rand");
  Graph& g = *r.graph;
  // Input shapes: full, [C,1,1]-style (size 1 everywhere but one dim), trailing dim, scalar.
  std::vector<Value*> pool;
  const int n_inputs = 2 + pick(3);
  for (int i = 0; i < n_inputs; ++i) {
    Shape s = full;
    switch (i == 0 ? 0 : pick(4)) {
      case 0: break;
      case 1: {
        const int keep = pick(static_cast<int>(full.size()));
        for (int d = 0; d < static_cast<int>(s.size()); ++d)
          if (d != keep) s[d] = 1;
        s.erase(s.begin(), s.begin() + pick(keep + 1));  // sometimes drop leading 1s
        break;
      }
      case 2: s = {full.back()}; break;
      default: s = {}; break;
    }
    pool.push_back(g.add_input(TensorType::of(DType::f32, s), fmt::format("in{}", i)));
    std::vector<double> v(static_cast<size_t>(shape_numel(s)));
    std::uniform_real_distribution<double> dist(-2.0, 2.0);
    for (double& x : v) x = dist(rng);
    r.inputs.push_back(Tensor::from_doubles(v, s, DType::f32));
  }
  const OpId unary[] = {"neg"_op, "abs"_op, "exp"_op, "tanh"_op, "sigmoid"_op, "relu"_op, "leaky_relu"_op,
                        "gelu"_op, "silu"_op, "erf"_op, "sin"_op, "cos"_op, "floor"_op, "round"_op,
                        "sign"_op, "clip"_op, "sqrt"_op, "log"_op, "reciprocal"_op, "rsqrt"_op};
  const OpId binary[] = {"add"_op, "sub"_op, "mul"_op, "div"_op, "maximum"_op, "minimum"_op};
  const int n_ops = 2 + pick(9);
  std::vector<Value*> outs;
  for (int i = 0; i < n_ops; ++i) {
    // Prefer recent values (chains), sometimes older ones (trees, shared operands).
    auto operand = [&] { return pool[pool.size() - 1 - static_cast<size_t>(pick(std::min<int>(3, static_cast<int>(pool.size()))))]; };
    Node* n;
    if (pick(2) == 0) {
      const OpId op = unary[pick(std::size(unary))];
      Attrs a;
      if (op == "leaky_relu"_op) a.set("alpha", 0.1 + 0.1 * pick(5));
      if (op == "gelu"_op) a.set("approximate", std::string(pick(2) ? "tanh" : "none"));
      if (op == "clip"_op) a.set("min", -0.5).set("max", 0.75);
      n = build_node(g, op, {operand()}, a);
    } else {
      n = build_node(g, binary[pick(std::size(binary))], {operand(), operand()}, {});
    }
    pool.push_back(n->output());
    if (pick(6) == 0) outs.push_back(n->output());  // an intermediate that is also a graph output
  }
  outs.push_back(pool.back());
  g.set_outputs(outs);
  return r;
}

std::vector<Tensor> run_plan(std::unique_ptr<Graph> g, const std::vector<Tensor>& ins) {
  CompileOptions o;
  o.disabled_passes = {"fuse_elementwise"};  // the tests fuse (or not) themselves
  Plan p = compile_plan(std::move(g), o);
  return p.run(ins);
}

TEST(FuseElementwise, RandomGraphsFusedEqualsUnfusedBitForBit) {
  init();
  const std::vector<Shape> shapes = {{2, 3, 5, 7}, {3, 1000}, {4, 8, 33}, {1}};
  int fused_graphs = 0;
  for (uint32_t seed = 0; seed < 300; ++seed) {
    RandomGraph r = random_graph(seed, shapes[seed % shapes.size()]);
    auto fused_graph = r.graph->clone();
    const size_t before = fused_graph->num_live_nodes();
    if (fuse(*fused_graph)) {
      ++fused_graphs;
      EXPECT_LT(fused_graph->num_live_nodes(), before);
    }
    const auto want = run_plan(std::move(r.graph), r.inputs);
    const auto got = run_plan(std::move(fused_graph), r.inputs);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(want[i].bit_equal(got[i])) << "seed " << seed << " output " << i;
  }
  EXPECT_GT(fused_graphs, 200);
}

TEST(FuseElementwise, ThreadCountDoesNotChangeBits) {
  init();
  const int saved = num_threads();
  for (uint32_t seed = 0; seed < 20; ++seed) {
    RandomGraph r = random_graph(1000 + seed, {3, 64, 37, 11});  // 78K elements: several tasks
    fuse(*r.graph);
    auto g2 = r.graph->clone();
    set_threads(1);
    const auto one = run_plan(std::move(r.graph), r.inputs);
    set_threads(4);
    const auto four = run_plan(std::move(g2), r.inputs);
    for (size_t i = 0; i < one.size(); ++i) ASSERT_TRUE(one[i].bit_equal(four[i])) << "seed " << seed;
  }
  set_threads(saved);
}

TEST(FuseElementwise, FewerKernelsAndBytesOnTheNullBackend) {
  const std::string text =
      "graph @g(%x: f32[8,64,32], %g: f32[32], %b: f32[32]) {\n"
      "  %m = mul(%x, %g) : f32[8,64,32]\n"
      "  %a = add(%m, %b) : f32[8,64,32]\n"
      "  %s = sigmoid(%a) : f32[8,64,32]\n"
      "  %y = mul(%a, %s) : f32[8,64,32]\n"
      "  return %y\n"
      "}\n";
  const auto count = [&](bool fused) {
    auto g = parse(text);
    if (fused) fuse(*g);
    CompileOptions o;
    o.backend = Backend::null;
    o.disabled_passes = {"fuse_elementwise"};  // the test applies the pass itself
    Plan p = compile_plan(std::move(g), o);
    reset_null_backend_stats();
    const std::vector<Tensor> ins = {Tensor::zeros({8, 64, 32}, DType::f32), Tensor::zeros({32}, DType::f32),
                                     Tensor::zeros({32}, DType::f32)};
    p.run(ins);
    return null_backend_stats();
  };
  const NullBackendStats plain = count(false), fused = count(true);
  constexpr int64_t kBig = 8 * 64 * 32 * 4, kSmall = 32 * 4;
  EXPECT_EQ(plain.kernels, 4);
  EXPECT_EQ(fused.kernels, 1);
  EXPECT_EQ(plain.bytes_read, kBig + kSmall + kBig + kSmall + kBig + 2 * kBig);
  EXPECT_EQ(plain.bytes_written, 4 * kBig);
  EXPECT_EQ(fused.bytes_read, kBig + 2 * kSmall);  // each input once
  EXPECT_EQ(fused.bytes_written, kBig);            // the output once
}

}  // namespace
}  // namespace spore
