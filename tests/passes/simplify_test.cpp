// The simplify pass (passes/simplify.cpp): each rule as a Before/Expected text-IR pair (simplify then DCE),
// the cases that must not fire (broadcasting constants, lossy casts, float x + (+0), graph inputs as outputs),
// and a numerics check: a graph full of simplifiable patterns gives the same bits optimized and at opt_level 0.
#include <gtest/gtest.h>

#include "base/rng.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "passes/pass.h"
#include "runtime/plan.h"

namespace spore {
namespace {

std::string simplified(const std::string& before) {
  auto g = parse_graph(before);
  verify_graph(*g);
  PassManager pm(PassOptions{.verify_each = true});
  pm.add(make_simplify_pass()).add(make_dce_pass());
  pm.run(*g);
  return print_graph(*g);
}

// A graph the pass leaves alone prints back unchanged.
void expect_unchanged(const std::string& text) { EXPECT_EQ(simplified(text), text); }

const char* ones4 = "hex\"0000803f0000803f0000803f0000803f\"";

TEST(Simplify, MulByOneAndOneMulAndDivByOne) {
  const std::string before = std::string(
      "graph @g(%x: f32[batch,4]) {\n"
      "  %one = constant() : f32[4] = ") + ones4 + "\n"
      "  %a = mul(%x, %one) : f32[batch,4]\n"
      "  %b = mul(%one, %a) : f32[batch,4]\n"
      "  %c = div(%b, %one) : f32[batch,4]\n"
      "  %d = relu(%c) : f32[batch,4] !name=\"act\"\n"
      "  return %d\n"
      "}\n";
  EXPECT_EQ(simplified(before),
            "graph @g(%x: f32[batch,4]) {\n"
            "  %d = relu(%x) : f32[batch,4] !name=\"act\"\n"
            "  return %d\n"
            "}\n");
}

TEST(Simplify, ConstantsCountByValueAndMustNotBroadcast) {
  // 2.0 in the last element: not all ones.
  expect_unchanged(
      "graph @g(%x: f32[4]) {\n"
      "  %c = constant() : f32[4] = hex\"0000803f0000803f0000803f00000040\"\n"
      "  %a = mul(%x, %c) : f32[4]\n"
      "  return %a\n"
      "}\n");
  // All ones, but [2,4]: x*1 broadcasts x [4] to [2,4], so it is not x.
  expect_unchanged(
      "graph @g(%x: f32[4]) {\n"
      "  %c = constant() : f32[2,4] = hex\"0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f\"\n"
      "  %a = mul(%x, %c) : f32[2,4]\n"
      "  return %a\n"
      "}\n");
}

TEST(Simplify, AddSubZeroRespectSignedZero) {
  // x - (+0) and x + (-0) are x for every x; x + (+0) maps -0 to +0, so it stays.
  EXPECT_EQ(simplified(
                "graph @g(%x: f32[2]) {\n"
                "  %pz = constant() : f32[2] = hex\"0000000000000000\"\n"
                "  %nz = constant() : f32[2] = hex\"0000008000000080\"\n"
                "  %a = sub(%x, %pz) : f32[2]\n"
                "  %b = add(%a, %nz) : f32[2]\n"
                "  %c = add(%nz, %b) : f32[2]\n"
                "  %d = add(%c, %pz) : f32[2]\n"
                "  %e = neg(%d) : f32[2]\n"
                "  return %e\n"
                "}\n"),
            "graph @g(%x: f32[2]) {\n"
            "  %pz = constant() : f32[2] = hex\"0000000000000000\"\n"
            "  %d = add(%x, %pz) : f32[2]\n"
            "  %e = neg(%d) : f32[2]\n"
            "  return %e\n"
            "}\n");
  // Integers have one zero.
  EXPECT_EQ(simplified(
                "graph @g(%x: i32[3]) {\n"
                "  %z = constant() : i32[] = hex\"00000000\"\n"
                "  %a = add(%x, %z) : i32[3]\n"
                "  %b = neg(%a) : i32[3]\n"
                "  return %b\n"
                "}\n"),
            "graph @g(%x: i32[3]) {\n"
            "  %b = neg(%x) : i32[3]\n"
            "  return %b\n"
            "}\n");
}

TEST(Simplify, NegNeg) {
  EXPECT_EQ(simplified(
                "graph @g(%x: f32[3]) {\n"
                "  %a = neg(%x) : f32[3]\n"
                "  %b = neg(%a) : f32[3]\n"
                "  %c = exp(%b) : f32[3]\n"
                "  return %c\n"
                "}\n"),
            "graph @g(%x: f32[3]) {\n"
            "  %c = exp(%x) : f32[3]\n"
            "  return %c\n"
            "}\n");
}

TEST(Simplify, DoubleTransposeComposesPerms) {
  // [1,2,0] twice is [2,0,1].
  EXPECT_EQ(simplified(
                "graph @g(%x: f32[2,3,4]) {\n"
                "  %a = transpose(%x) {perm=[1,2,0]} : f32[3,4,2]\n"
                "  %b = transpose(%a) {perm=[1,2,0]} : f32[4,2,3] !name=\"t2\"\n"
                "  %c = relu(%b) : f32[4,2,3]\n"
                "  return %c\n"
                "}\n"),
            "graph @g(%x: f32[2,3,4]) {\n"
            "  %t2 = transpose(%x) {perm=[2,0,1]} : f32[4,2,3] !name=\"t2\"\n"
            "  %c = relu(%t2) : f32[4,2,3]\n"
            "  return %c\n"
            "}\n");
  // Reverse (empty perm) twice, and an identity perm: both vanish.
  EXPECT_EQ(simplified(
                "graph @g(%x: f32[2,3]) {\n"
                "  %a = transpose(%x) : f32[3,2]\n"
                "  %b = transpose(%a) {perm=[-1,0]} : f32[2,3]\n"
                "  %c = transpose(%b) {perm=[0,1]} : f32[2,3]\n"
                "  %d = relu(%c) : f32[2,3]\n"
                "  return %d\n"
                "}\n"),
            "graph @g(%x: f32[2,3]) {\n"
            "  %d = relu(%x) : f32[2,3]\n"
            "  return %d\n"
            "}\n");
}

TEST(Simplify, ReshapeChainsBecomeOneReshape) {
  EXPECT_EQ(simplified(
                "graph @g(%x: f32[2,3,4]) {\n"
                "  %a = reshape(%x) {shape=[6,4]} : f32[6,4]\n"
                "  %b = unsqueeze(%a) {axes=[0]} : f32[1,6,4]\n"
                "  %c = flatten(%b) {axis=2} : f32[6,4]\n"
                "  %d = reshape(%c) {shape=[4,-1]} : f32[4,6]\n"
                "  %e = relu(%d) : f32[4,6]\n"
                "  return %e\n"
                "}\n"),
            "graph @g(%x: f32[2,3,4]) {\n"
            "  %8 = reshape(%x) {shape=[4,6]} : f32[4,6]\n"
            "  %e = relu(%8) : f32[4,6]\n"
            "  return %e\n"
            "}\n");
  // squeeze(unsqueeze x) and a reshape to x's own shape: x.
  EXPECT_EQ(simplified(
                "graph @g(%x: f32[batch,4]) {\n"
                "  %a = unsqueeze(%x) {axes=[1]} : f32[batch,1,4]\n"
                "  %b = squeeze(%a) {axes=[1]} : f32[batch,4]\n"
                "  %c = reshape(%b) {shape=[-1,4]} : f32[batch,4]\n"
                "  %d = relu(%c) : f32[batch,4]\n"
                "  return %d\n"
                "}\n"),
            "graph @g(%x: f32[batch,4]) {\n"
            "  %d = relu(%x) : f32[batch,4]\n"
            "  return %d\n"
            "}\n");
}

TEST(Simplify, CastChainsOnlyWhenLossless) {
  EXPECT_EQ(simplified(
                "graph @g(%x: f32[2]) {\n"
                "  %a = cast(%x) {dtype=f32} : f32[2]\n"
                "  %b = cast(%a) {dtype=f64} : f64[2]\n"
                "  %c = cast(%b) {dtype=f32} : f32[2]\n"
                "  %d = relu(%c) : f32[2]\n"
                "  return %d\n"
                "}\n"),
            "graph @g(%x: f32[2]) {\n"
            "  %d = relu(%x) : f32[2]\n"
            "  return %d\n"
            "}\n");
  // f64 -> f32 -> f64 rounds; i32 -> f32 -> i32 rounds above 2^24: both stay.
  expect_unchanged(
      "graph @g(%x: f64[2], %i: i32[2]) {\n"
      "  %a = cast(%x) {dtype=f32} : f32[2]\n"
      "  %b = cast(%a) {dtype=f64} : f64[2]\n"
      "  %c = cast(%i) {dtype=f32} : f32[2]\n"
      "  %d = cast(%c) {dtype=i32} : i32[2]\n"
      "  return %b, %d\n"
      "}\n");
}

TEST(Simplify, NoOpSliceExpandIdentityDropout) {
  EXPECT_EQ(simplified(
                "graph @g(%x: f32[2,3]) {\n"
                "  %a = slice(%x) {axes=[1], ends=[100], starts=[0]} : f32[2,3]\n"
                "  %b = expand(%a) {shape=[2,3]} : f32[2,3]\n"
                "  %c = identity(%b) : f32[2,3]\n"
                "  %d = dropout(%c) {p=0.5, seed=3, training=false} : f32[2,3]\n"
                "  %e = relu(%d) : f32[2,3]\n"
                "  return %e\n"
                "}\n"),
            "graph @g(%x: f32[2,3]) {\n"
            "  %e = relu(%x) : f32[2,3]\n"
            "  return %e\n"
            "}\n");
  // A reversing slice keeps the shape but not the order; a training dropout is random; expand that broadcasts.
  expect_unchanged(
      "graph @g(%x: f32[2,3]) {\n"
      "  %a = slice(%x) {axes=[1], ends=[-100], starts=[-1], steps=[-1]} : f32[2,3]\n"
      "  %b = dropout(%a) {p=0.5, seed=3, training=true} : f32[2,3]\n"
      "  %c = expand(%b) {shape=[4,2,3]} : f32[4,2,3]\n"
      "  return %c\n"
      "}\n");
}

// A pad of zero on every side copies its input (PyTorch writes one before DenseNet's AveragePool); any nonzero pad,
// or a crop, is work.
TEST(Simplify, AllZeroPadIsANoOp) {
  EXPECT_EQ(simplified("graph @g(%x: f32[1,2,3,3]) {\n"
                       "  %a = pad(%x) {mode=\"constant\", pads=[0,0,0,0,0,0,0,0]} : f32[1,2,3,3]\n"
                       "  %b = relu(%a) : f32[1,2,3,3]\n"
                       "  return %b\n"
                       "}\n"),
            "graph @g(%x: f32[1,2,3,3]) {\n"
            "  %b = relu(%x) : f32[1,2,3,3]\n"
            "  return %b\n"
            "}\n");
  expect_unchanged("graph @g(%x: f32[1,2,3,3]) {\n"
                   "  %a = pad(%x) {mode=\"constant\", pads=[0,0,1,0,0,0,-1,0]} : f32[1,2,3,3]\n"
                   "  return %a\n"
                   "}\n");
}

TEST(Simplify, GraphOutputsKeepTheirNames) {
  // The output %y is rewritten to %h, which takes the name y.
  EXPECT_EQ(simplified(std::string(
                "graph @g(%x: f32[4]) {\n"
                "  %one = constant() : f32[4] = ") + ones4 + "\n"
                "  %h = relu(%x) : f32[4]\n"
                "  %y = mul(%h, %one) : f32[4]\n"
                "  return %y\n"
                "}\n"),
            "graph @g(%x: f32[4]) {\n"
            "  %y = relu(%x) : f32[4]\n"
            "  return %y\n"
            "}\n");
  // An output that would become a graph input (or another output) stays as it is.
  expect_unchanged(
      "graph @g(%x: f32[4]) {\n"
      "  %y = identity(%x) : f32[4]\n"
      "  %z = neg(%x) : f32[4]\n"
      "  %w = neg(%z) : f32[4]\n"
      "  return %y, %z, %w\n"
      "}\n");
}

TEST(Simplify, SkippedAtOptLevelZero) {
  auto g = parse_graph(
      "graph @g(%x: f32[3]) {\n"
      "  %a = neg(%x) : f32[3]\n"
      "  %b = neg(%a) : f32[3]\n"
      "  return %b\n"
      "}\n");
  PassManager pm(PassOptions{.opt_level = 0});
  pm.add(make_simplify_pass());
  pm.run(*g);
  EXPECT_TRUE(pm.records().at(0).skipped);
  EXPECT_EQ(g->num_live_nodes(), 3u);
}

Tensor random_tensor(const Shape& s, uint64_t stream) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 4.0 * philox_uniform(5, stream, i) - 2.0;
  return Tensor::from_doubles(v, s, DType::f32);
}

// Simplifiable patterns around real compute; the simplified plan must give the unoptimized plan's bits.
TEST(Simplify, OptimizedEqualsUnoptimizedBitExact) {
  Graph g("net");
  Value* x = g.add_input(TensorType(DType::f32, {8, 6}), "x");
  Value* w = g.add_input(TensorType(DType::f32, {6, 5}), "w");
  Value* one = g.add_constant(Tensor::from_doubles(std::vector<double>(5, 1.0), {5}, DType::f32), "one");
  Value* nz = g.add_constant(Tensor::from_doubles({-0.0}, {}, DType::f32), "nz");
  auto b = [&](OpId op, std::vector<Value*> in, Attrs a = {}) { return build_node(g, op, std::move(in), a)->output(0); };
  Value* h = b("matmul"_op, {b("mul"_op, {x, b("div"_op, {b("identity"_op, {x}), b("identity"_op, {x})})}), w});
  h = b("mul"_op, {h, one});
  h = b("add"_op, {b("neg"_op, {b("neg"_op, {h})}), nz});
  h = b("transpose"_op, {b("transpose"_op, {h}, {{"perm", std::vector<int64_t>{1, 0}}})},
        {{"perm", std::vector<int64_t>{1, 0}}});
  h = b("reshape"_op, {b("reshape"_op, {h}, {{"shape", std::vector<int64_t>{40}}})},
        {{"shape", std::vector<int64_t>{5, 8}}});
  h = b("cast"_op, {b("cast"_op, {h}, {{"dtype", DType::f64}})}, {{"dtype", DType::f32}});
  Value* y = b("tanh"_op, {h});
  g.set_outputs({y, b("sigmoid"_op, {b("mul"_op, {one, b("reduce_sum"_op, {y}, {{"axes", std::vector<int64_t>{1}}})})})});
  verify_graph(g);

  const std::vector<Tensor> in = {random_tensor({8, 6}, 1), random_tensor({6, 5}, 2)};
  auto unopt = g.clone();
  Plan p0 = compile_plan(std::move(unopt), CompileOptions{.opt_level = 0});
  auto opt = g.clone();
  PassManager pm(PassOptions{.verify_each = true});
  pm.add(make_simplify_pass()).add(make_dce_pass());
  pm.run(*opt);
  const size_t before = g.num_live_nodes(), after = opt->num_live_nodes();
  EXPECT_LT(after + 10, before) << print_graph(*opt);
  Plan p1 = compile_plan(std::move(opt), {});
  const auto r0 = p0.run(in), r1 = p1.run(in);
  ASSERT_EQ(r0.size(), r1.size());
  for (size_t i = 0; i < r0.size(); ++i) EXPECT_TRUE(r0[i].bit_equal(r1[i])) << "output " << i;
}

}  // namespace
}  // namespace spore
