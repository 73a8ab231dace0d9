// Epilogue fusion (passes/fuse_epilogue.cpp, ops/fused.h): the rewrite on text IR (what fuses, what must not),
// then numerics: the fused plan gives the unfused plan's bits exactly, for every activation and float dtype,
// with 1 and 4 threads, and runs fewer kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/null/null_backend.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
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

bool fuse(Graph& g) {
  const bool changed = make_fuse_epilogue_pass()->run(g, PassOptions{});
  verify_graph(g);
  return changed;
}

TEST(FuseEpilogue, ConvResidualReluBecomesOneNodeKeepingTheOutputName) {
  auto g = parse(
      "graph @g(%x: f32[1,2,5,5], %w: f32[3,2,3,3], %b: f32[3], %r: f32[1,3,5,5]) {\n"
      "  %c = conv2d(%x, %w, %b) {dilation=[1,1], groups=1, pad_mode=\"pad\", padding=[1,1,1,1], stride=[1,1]}"
      " : f32[1,3,5,5] !name=\"conv1\"\n"
      "  %s = add(%r, %c) : f32[1,3,5,5]\n"
      "  %y = relu(%s) : f32[1,3,5,5] !name=\"relu1\"\n"
      "  return %y\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%x: f32[1,2,5,5], %w: f32[3,2,3,3], %b: f32[3], %r: f32[1,3,5,5]) {\n"
            "  %y = conv2d_fused(%x, %w, %b, %r) {activation=\"relu\", alpha=0.01, approximate=\"none\", beta=0.5, "
            "conv_algo=\"precise\", dilation=[1,1], dst_layout=\"nchw\", groups=1, max=inf, min=-inf, pad_mode=\"pad\", padding=[1,1,1,1], "
            "pool=\"none\", residual=true, src_layout=\"nchw\", stride=[1,1]} : f32[1,3,5,5] !name=\"conv1\"\n"
            "  return %y\n"
            "}\n");
  EXPECT_EQ(print_graph(*parse(print_graph(*g))), print_graph(*g));  // the fused op's IR parses back
  EXPECT_FALSE(fuse(*g));
}

TEST(FuseEpilogue, LinearActivationParametersAndResidualWithoutBias) {
  auto g = parse(
      "graph @g(%x: f32[4,6], %w: f32[5,6], %w2: f32[5,5], %b2: f32[5]) {\n"
      "  %h = linear(%x, %w) : f32[4,5]\n"
      "  %a = leaky_relu(%h) {alpha=0.25} : f32[4,5]\n"
      "  %l2 = linear(%a, %w2, %b2) : f32[4,5]\n"
      "  %s = add(%l2, %a) : f32[4,5]\n"
      "  %y = clip(%s) {max=6.0, min=0.0} : f32[4,5]\n"
      "  return %y\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%x: f32[4,6], %w: f32[5,6], %w2: f32[5,5], %b2: f32[5]) {\n"
            "  %a = linear_fused(%x, %w) {activation=\"leaky_relu\", alpha=0.25, approximate=\"none\", beta=0.5, max=inf, "
            "min=-inf, residual=false} : f32[4,5]\n"
            "  %y = linear_fused(%a, %w2, %b2, %a) {activation=\"clip\", alpha=0.01, approximate=\"none\", beta=0.5, max=6.0, "
            "min=0.0, residual=true} : f32[4,5]\n"
            "  return %y\n"
            "}\n");
}

TEST(FuseEpilogue, IntermediatesUsedElsewhereOrReturnedStay) {
  // %c feeds relu and is returned; %s (conv + residual) is read again (as a training backward would).
  const std::string text =
      "graph @g(%x: f32[2,6], %w: f32[3,6], %r: f32[2,3], %w2: f32[3,6]) {\n"
      "  %c = linear(%x, %w) : f32[2,3]\n"
      "  %y = relu(%c) : f32[2,3]\n"
      "  %d = linear(%x, %w2) : f32[2,3]\n"
      "  %s = add(%d, %r) : f32[2,3]\n"
      "  %t = tanh(%s) : f32[2,3]\n"
      "  %u = mul(%s, %t) : f32[2,3]\n"
      "  return %y, %c, %u\n"
      "}\n";
  auto g = parse(text);
  // %d + %r fuses (the add's input %d has one use); tanh does not (its input %s has two).
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%x: f32[2,6], %w: f32[3,6], %r: f32[2,3], %w2: f32[3,6]) {\n"
            "  %c = linear(%x, %w) : f32[2,3]\n"
            "  %y = relu(%c) : f32[2,3]\n"
            "  %s = linear_fused(%x, %w2, %r) {activation=\"none\", alpha=0.01, approximate=\"none\", beta=0.5, max=inf, "
            "min=-inf, residual=true} : f32[2,3]\n"
            "  %t = tanh(%s) : f32[2,3]\n"
            "  %u = mul(%s, %t) : f32[2,3]\n"
            "  return %y, %c, %u\n"
            "}\n");
}

TEST(FuseEpilogue, ConvReluMaxPoolBecomesOneNode) {
  auto g = parse(
      "graph @g(%x: f32[2,2,7,9], %w: f32[4,2,3,3], %b: f32[4]) {\n"
      "  %c = conv2d(%x, %w, %b) {padding=[1,1,1,1]} : f32[2,4,7,9]\n"
      "  %r = relu(%c) : f32[2,4,7,9]\n"
      "  %p = max_pool2d(%r) {kernel=[2,2], stride=[2,2]} : f32[2,4,3,4]\n"
      "  %q = max_pool2d(%p) {kernel=[2,2], stride=[1,1]} : f32[2,4,2,3]\n"
      "  return %q\n"
      "}\n");
  EXPECT_TRUE(fuse(*g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%x: f32[2,2,7,9], %w: f32[4,2,3,3], %b: f32[4]) {\n"
            "  %p = conv2d_fused(%x, %w, %b) {activation=\"relu\", alpha=0.01, approximate=\"none\", beta=0.5, "
            "conv_algo=\"precise\", dilation=[1,1], dst_layout=\"nchw\", groups=1, max=inf, min=-inf, pad_mode=\"pad\", padding=[1,1,1,1], "
            "pool=\"max2x2\", residual=false, src_layout=\"nchw\", stride=[1,1]} : f32[2,4,3,4]\n"
            "  %q = max_pool2d(%p) {kernel=[2,2], stride=[1,1]} : f32[2,4,2,3]\n"
            "  return %q\n"
            "}\n");
  // A pool whose input is read again (as max_pool2d_grad reads it in training) stays separate.
  auto t = parse(
      "graph @g(%x: f32[1,2,6,6], %w: f32[4,2,3,3]) {\n"
      "  %c = conv2d(%x, %w) : f32[1,4,4,4]\n"
      "  %p = max_pool2d(%c) {kernel=[2,2]} : f32[1,4,2,2]\n"
      "  return %p, %c\n"
      "}\n");
  EXPECT_FALSE(fuse(*t));
}

TEST(FuseEpilogue, BroadcastAddIsNotAResidual) {
  auto g = parse(
      "graph @g(%x: f32[1,2,5,5], %w: f32[3,2,3,3], %b: f32[3,1,1]) {\n"
      "  %c = conv2d(%x, %w) : f32[1,3,3,3]\n"
      "  %s = add(%c, %b) : f32[1,3,3,3]\n"
      "  %y = sigmoid(%s) : f32[1,3,3,3]\n"
      "  return %y\n"
      "}\n");
  const std::string before = print_graph(*g);
  EXPECT_FALSE(fuse(*g));
  EXPECT_EQ(print_graph(*g), before);
}

// ---- numerics

Tensor random_tensor(std::mt19937& rng, const Shape& shape, DType t, double lo = -1.5, double hi = 1.5) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = d(rng);
  return Tensor::from_doubles(v, shape, t);
}

struct Act {
  OpId op;
  Attrs attrs;
};
std::vector<Act> activations() {
  return {{"relu"_op, {}},
          {"leaky_relu"_op, {{"alpha", 0.1}}},
          {"clip"_op, {{"min", -0.75}, {"max", 0.5}}},
          {"sigmoid"_op, {}},
          {"tanh"_op, {}},
          {"gelu"_op, {}},
          {"gelu"_op, {{"approximate", std::string("tanh")}}},
          {"silu"_op, {}}};
}

// conv(x) + r -> act -> conv2 (+ bias) -> act -> linear -> act, with graph inputs x, r.
std::unique_ptr<Graph> net(const Act& act, DType t, uint32_t seed, int64_t c_in) {
  std::mt19937 rng(seed);
  auto g = std::make_unique<Graph>("net");
  Value* x = g->add_input(TensorType::of(t, {3, c_in, 10, 12}), "x");
  Value* r = g->add_input(TensorType::of(t, {3, 8, 10, 12}), "r");
  Value* w1 = g->add_constant(random_tensor(rng, {8, c_in, 3, 3}, t, -0.5, 0.5), "w1");
  Value* b1 = g->add_constant(random_tensor(rng, {8}, t), "b1");
  Value* w2 = g->add_constant(random_tensor(rng, {6, 8, 3, 3}, t, -0.3, 0.3), "w2");
  Value* b2 = g->add_constant(random_tensor(rng, {6}, t), "b2");
  Value* w3 = g->add_constant(random_tensor(rng, {7, 6 * 5 * 6}, t, -0.1, 0.1), "w3");
  const Attrs pad{{"padding", std::vector<int64_t>{1, 1, 1, 1}}};
  Node* c1 = build_node(*g, "conv2d"_op, {x, w1, b1}, pad, "conv1");
  Node* s1 = build_node(*g, "add"_op, {c1->output(0), r}, {});
  Node* a1 = build_node(*g, act.op, {s1->output(0)}, act.attrs);
  Node* c2 = build_node(*g, "conv2d"_op, {a1->output(0), w2, b2}, {{"stride", std::vector<int64_t>{2, 2}}, {"padding", std::vector<int64_t>{1, 1, 1, 1}}}, "conv2");
  Node* a2 = build_node(*g, act.op, {c2->output(0)}, act.attrs);
  Node* fl = build_node(*g, "flatten"_op, {a2->output(0)}, {});
  Node* l = build_node(*g, "linear"_op, {fl->output(0), w3}, {}, "fc");
  Node* a3 = build_node(*g, act.op, {l->output(0)}, act.attrs);
  g->set_outputs({a3->output(0), a1->output(0)});
  verify_graph(*g);
  return g;
}

CompileOptions options() {
  CompileOptions o;
  o.disabled_passes = {"fuse_elementwise", "fuse_epilogue"};  // the test applies the pass itself: compare with plain ops
  return o;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(FuseEpilogue, FusedPlanGivesTheUnfusedBitsForEveryActivationAndDtype) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (int64_t c_in : {1, 8}) {  // 1: the direct AVX2 conv path; 8: oneDNN
      for (const Act& act : activations()) {
        SCOPED_TRACE(fmt::format("{} c_in={} {} {}", dtype_name(t), c_in, op_name(act.op),
                                 act.attrs.empty() ? "" : act.attrs.items()[0].first));
        auto g = net(act, t, 7, c_in);
        auto fused = g->clone();
        ASSERT_TRUE(fuse(*fused));
        int fused_nodes = 0;
        for (const Node* n : fused->nodes()) fused_nodes += n->op == "conv2d_fused"_op || n->op == "linear_fused"_op;
        EXPECT_EQ(fused_nodes, 3);
        Plan base = compile_plan(std::move(g), options());
        Plan opt = compile_plan(std::move(fused), options());
        EXPECT_EQ(opt.num_kernels(), base.num_kernels() - 4);  // add and three activations absorbed
        std::mt19937 rng(11);
        const Tensor in[] = {random_tensor(rng, {3, c_in, 10, 12}, t), random_tensor(rng, {3, 8, 10, 12}, t)};
        set_threads(1);
        const auto want = base.run(in);
        const auto got1 = opt.run(in);
        set_threads(4);
        const auto got4 = opt.run(in);
        set_threads(0);
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_TRUE(bit_equal(want[i], got1[i])) << "output " << i << " (1 thread)";
          EXPECT_TRUE(bit_equal(want[i], got4[i])) << "output " << i << " (4 threads)";
        }
      }
    }
  }
}

// conv2d -> relu -> max_pool2d 2x2/2 on each conv path (direct AVX2, im2col, oneDNN), odd and even sizes: the
// fused node (pool in the per-image hook, or after the base kernel) gives the unfused bits on 1 and 4 threads.
TEST(FuseEpilogue, ConvReluMaxPoolGivesTheUnfusedBits) {
  struct Geo {
    int64_t c_in, h, w, stride;
  };
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const Geo& geo : {Geo{1, 11, 13, 1}, Geo{3, 15, 17, 2}, Geo{16, 10, 12, 1}}) {
      SCOPED_TRACE(fmt::format("{} c_in={} {}x{} stride {}", dtype_name(t), geo.c_in, geo.h, geo.w, geo.stride));
      std::mt19937 rng(21);
      auto g = std::make_unique<Graph>("pool");
      Value* x = g->add_input(TensorType::of(t, {3, geo.c_in, geo.h, geo.w}), "x");
      Value* w = g->add_constant(random_tensor(rng, {8, geo.c_in, 3, 3}, t, -0.5, 0.5), "w");
      Value* b = g->add_constant(random_tensor(rng, {8}, t), "b");
      using V = std::vector<int64_t>;
      Node* c = build_node(*g, "conv2d"_op, {x, w, b}, {{"padding", V{1, 1, 1, 1}}, {"stride", V{geo.stride, geo.stride}}});
      Node* r = build_node(*g, "relu"_op, {c->output(0)}, {});
      Node* p = build_node(*g, "max_pool2d"_op, {r->output(0)}, {{"kernel", V{2, 2}}, {"stride", V{2, 2}}});
      g->set_outputs({p->output(0)});
      auto fused = g->clone();
      ASSERT_TRUE(fuse(*fused));
      Plan base = compile_plan(std::move(g), options());
      Plan opt = compile_plan(std::move(fused), options());
      EXPECT_EQ(opt.num_kernels(), 1);
      EXPECT_EQ(base.num_kernels(), 3);
      const Tensor in[] = {random_tensor(rng, {3, geo.c_in, geo.h, geo.w}, t)};
      set_threads(1);
      const auto want = base.run(in);
      const auto got1 = opt.run(in);
      set_threads(4);
      const auto got4 = opt.run(in);
      set_threads(0);
      EXPECT_TRUE(bit_equal(want[0], got1[0])) << "1 thread";
      EXPECT_TRUE(bit_equal(want[0], got4[0])) << "4 threads";
    }
  }
}

TEST(FuseEpilogue, NullBackendCountsFewerKernelsAndBytes) {
  auto g = net(activations()[0], DType::f32, 3, 8);
  auto fused = g->clone();
  ASSERT_TRUE(fuse(*fused));
  CompileOptions o = options();
  o.backend = Backend::null;
  Plan base = compile_plan(std::move(g), o);
  Plan opt = compile_plan(std::move(fused), o);
  std::mt19937 rng(5);
  const Tensor in[] = {random_tensor(rng, {3, 8, 10, 12}, DType::f32), random_tensor(rng, {3, 8, 10, 12}, DType::f32)};
  reset_null_backend_stats();
  base.run(in);
  const NullBackendStats b = null_backend_stats();
  reset_null_backend_stats();
  opt.run(in);
  const NullBackendStats f = null_backend_stats();
  EXPECT_EQ(b.kernels - f.kernels, 4);
  // Saved: writing and reading back conv1's output and the residual sum (3*8*10*12 f32 each), conv2's output
  // (3*6*5*6) and the linear output (3*7).
  const int64_t saved = 4 * 4 * 3 * 8 * 10 * 12 + 2 * 4 * 3 * 6 * 5 * 6 + 2 * 4 * 3 * 7;
  EXPECT_EQ((b.bytes_read + b.bytes_written) - (f.bytes_read + f.bytes_written), saved);
  EXPECT_LT(opt.arena_bytes(), base.arena_bytes());
}

}  // namespace
}  // namespace spore
