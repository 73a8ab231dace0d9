// Layout pass (passes/layout.cpp): chains of f32 convolutions keep their activations in the blocked layout
// [N, C/8, H, W, 8]. Checks the rewrite (which convs, where the reorders go), the blocked conv2d_fused kernel
// against the reference backend and against the plain-layout plan, thread-count independence, and the inference
// and f32 guards.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/constant_cache.h"
#include "backend/cpu/winograd.h"
#include "ops/dispatch.h"
#include "ops/fused.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "runtime/runtime.h"

namespace spore {
namespace {

using V = std::vector<int64_t>;

Tensor random_tensor(std::mt19937& rng, const Shape& shape, DType t, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = d(rng);
  return Tensor::from_doubles(v, shape, t);
}

// A residual CNN: stem conv (3 -> 16) + relu, conv + relu, conv + residual + relu, a 1x1 stride-2 skip conv
// (plain conv2d, no epilogue) and a stride-2 conv added to it, then global mean and linear. Plus a lone conv on a
// second input that must stay NCHW.
std::unique_ptr<Graph> resnet_like(DType t, int64_t batch, uint32_t seed) {
  std::mt19937 rng(seed);
  auto g = std::make_unique<Graph>("resnet_like");
  Value* x = g->add_input(TensorType::of(t, {batch, 3, 12, 12}), "x");
  Value* z = g->add_input(TensorType::of(t, {batch, 8, 6, 6}), "z");
  const auto w = [&](const Shape& s, const char* name) { return g->add_constant(random_tensor(rng, s, t, -0.3, 0.3), name); };
  const Attrs pad{{"padding", V{1, 1, 1, 1}}};
  const Attrs pad_s2{{"padding", V{1, 1, 1, 1}}, {"stride", V{2, 2}}};
  const auto conv = [&](Value* in, Value* wt, Value* b, const Attrs& a, const char* name) {
    return build_node(*g, "conv2d"_op, {in, wt, b}, a, name)->output(0);
  };
  const auto relu = [&](Value* v) { return build_node(*g, "relu"_op, {v}, {})->output(0); };
  const auto add = [&](Value* a, Value* b) { return build_node(*g, "add"_op, {a, b}, {})->output(0); };
  Value* s = relu(conv(x, w({16, 3, 3, 3}, "ws"), w({16}, "bs"), pad, "stem"));
  Value* a = relu(conv(s, w({16, 16, 3, 3}, "w1"), w({16}, "b1"), pad, "c1"));
  Value* b = relu(add(conv(a, w({16, 16, 3, 3}, "w2"), w({16}, "b2"), pad, "c2"), s));
  Value* skip = conv(b, w({24, 16, 1, 1}, "wk"), w({24}, "bk"), Attrs{{"stride", V{2, 2}}}, "skip");
  Value* c = relu(add(conv(b, w({24, 16, 3, 3}, "w3"), w({24}, "b3"), pad_s2, "c3"), skip));
  Value* m = build_node(*g, "reduce_mean"_op, {c}, Attrs{{"axes", V{2, 3}}, {"keepdims", false}})->output(0);
  Value* y = build_node(*g, "linear"_op, {m, w({5, 24}, "wf"), w({5}, "bf")}, {}, "fc")->output(0);
  Value* lone = relu(conv(z, w({8, 8, 3, 3}, "wl"), w({8}, "bl"), pad, "lone"));
  g->set_outputs({y, c, lone});
  verify_graph(*g);
  return g;
}

CompileOptions inference(bool layout, Backend backend = Backend::cpu) {
  CompileOptions o;
  o.inference = true;
  o.backend = backend;
  if (!layout) o.disabled_passes = {"layout"};
  return o;
}

int count_op(const Graph& g, OpId op, const char* attr = nullptr, const char* value = nullptr) {
  int n = 0;
  for (const Node* node : g.nodes())
    if (!node->dead && node->op == op && (!attr || node->attrs.s(attr) == value)) ++n;
  return n;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.to_doubles(), y = b.to_doubles();
  double scale = 1e-30, d = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    scale = std::max(scale, std::abs(x[i]));
    d = std::max(d, std::abs(x[i] - y[i]));
  }
  return d / scale;
}

TEST(Layout, ConvChainRunsBlockedWithReordersOnlyAtItsEdges) {
  Plan plan = compile_plan(resnet_like(DType::f32, 2, 1), inference(true));
  const Graph& g = plan.graph();
  // Five convs of the chain take the blocked layout (the 1x1 skip conv2d becomes a conv2d_fused); the lone conv
  // keeps NCHW.
  EXPECT_EQ(count_op(g, "conv2d_fused"_op, "dst_layout", "nchw8c"), 5);
  EXPECT_EQ(count_op(g, "conv2d_fused"_op, "src_layout", "nchw8c"), 4);  // all but the 3-channel stem
  EXPECT_EQ(count_op(g, "conv2d"_op), 0);
  int lone_plain = 0;
  for (const Node* n : g.nodes())
    if (n->op == "conv2d_fused"_op && n->name == "lone") lone_plain += n->attrs.s("dst_layout") == "nchw";
  EXPECT_EQ(lone_plain, 1);
  // One reorder back to NCHW for the chain's exits (the output c, which the reduce_mean also reads); no reorder
  // into the blocked layout (the residual and the skip branch are produced blocked).
  EXPECT_EQ(count_op(g, "transpose"_op), 1);
  // Kernels: that transpose, plus the reshape that writes graph output c (a reshape of an intermediate is an arena
  // alias, but a graph output gets its own buffer).
  Plan plain = compile_plan(resnet_like(DType::f32, 2, 1), inference(false));
  EXPECT_EQ(plan.num_kernels(), plain.num_kernels() + 2);
}

TEST(Layout, BlockedPlanMatchesThePlainPlanTheReferenceAndItselfOnAnyThreadCount) {
  for (int64_t batch : {1, 3}) {
    SCOPED_TRACE(fmt::format("batch {}", batch));
    Plan blocked = compile_plan(resnet_like(DType::f32, batch, 5), inference(true));
    Plan plain = compile_plan(resnet_like(DType::f32, batch, 5), inference(false));
    Plan ref = compile_plan(resnet_like(DType::f32, batch, 5), inference(true, Backend::reference));
    ASSERT_GT(count_op(ref.graph(), "conv2d_fused"_op, "dst_layout", "nchw8c"), 0);
    std::mt19937 rng(9);
    const Tensor in[] = {random_tensor(rng, {batch, 3, 12, 12}, DType::f32), random_tensor(rng, {batch, 8, 6, 6}, DType::f32)};
    set_threads(1);
    const auto got1 = blocked.run(in);
    set_threads(2);
    const auto got2 = blocked.run(in);
    set_threads(4);
    const auto got4 = blocked.run(in);
    set_threads(0);
    const auto want = plain.run(in);
    const auto oracle = ref.run(in);
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE(fmt::format("output {}", i));
      EXPECT_TRUE(bit_equal(got1[i], got2[i]));
      EXPECT_TRUE(bit_equal(got1[i], got4[i]));
      // f32 tolerance: the plain plan may take the direct AVX2 conv, which sums in another order.
      EXPECT_LT(max_rel_diff(got1[i], want[i]), 1e-5);
      EXPECT_LT(max_rel_diff(got1[i], oracle[i]), 1e-5);
    }
  }
}

// conv_algo: the default (precise) keeps 3x3 convs at Winograd F(2x2) or exact; CompileOptions::fast_conv marks the
// blocked convs fast, which lets 32x32 convs take F(4x4) (fewer multiplies, looser rounding). Against a float64 run
// of the same graph the precise plan is closer than the fast one, and within f32 accumulation error.
TEST(Layout, PreciseConvsByDefaultFastOnlyWhenAsked) {
  const auto chain = [](DType t) {
    std::mt19937 rng(33);
    auto g = std::make_unique<Graph>("chain32");
    Value* x = g->add_input(TensorType::of(t, {1, 32, 32, 32}), "x");
    const Attrs pad{{"padding", V{1, 1, 1, 1}}};
    Value* v = x;
    for (int i = 0; i < 4; ++i) {
      Value* w = g->add_constant(random_tensor(rng, {32, 32, 3, 3}, t, -0.1, 0.1));
      Value* b = g->add_constant(random_tensor(rng, {32}, t));
      v = build_node(*g, "relu"_op, {build_node(*g, "conv2d"_op, {v, w, b}, pad)->output(0)}, {})->output(0);
    }
    g->set_outputs({v});
    verify_graph(*g);
    return g;
  };
  CompileOptions fast_opts = inference(true);
  fast_opts.fast_conv = true;
  Plan precise = compile_plan(chain(DType::f32), inference(true));
  Plan fast = compile_plan(chain(DType::f32), fast_opts);
  Plan f64 = compile_plan(chain(DType::f64), inference(true));
  EXPECT_EQ(count_op(precise.graph(), "conv2d_fused"_op, "conv_algo", "fast"), 0);
  EXPECT_GE(count_op(fast.graph(), "conv2d_fused"_op, "conv_algo", "fast"), 3);
  std::mt19937 rng(34);
  const Tensor x = random_tensor(rng, {1, 32, 32, 32}, DType::f32);
  const Tensor want = f64.run(std::vector<Tensor>{ops::cast(x, DType::f64)}).at(0);
  const double e_precise = max_rel_diff(precise.run(std::vector<Tensor>{x}).at(0), want);
  const double e_fast = max_rel_diff(fast.run(std::vector<Tensor>{x}).at(0), want);
  std::printf("max |y - y64| / max|y64|: precise %.2e, fast %.2e\n", e_precise, e_fast);
  EXPECT_LT(e_precise, 1e-5);
  EXPECT_LT(e_precise, e_fast);  // the fast plan did take F(4x4)
}

// Batch composition never changes a row's bits: a deep conv stack whose layers sit where the kernel choice used to
// depend on the batch (Winograd's rule counted the batch's tiles: 256 channels at 14x14, 512 at 7x7) plus two
// depthwise convs, run on one image and as row 1 of a batch of 3, on 1 and 2 threads, and against the reference.
std::unique_ptr<Graph> deep_convs(int64_t batch) {
  std::mt19937 rng(21);
  auto g = std::make_unique<Graph>("deep_convs");
  Value* x = g->add_input(TensorType::of(DType::f32, {batch, 64, 14, 14}), "x");
  const auto w = [&](const Shape& s) { return g->add_constant(random_tensor(rng, s, DType::f32, -0.05, 0.05)); };
  const Attrs pad{{"padding", V{1, 1, 1, 1}}};
  const Attrs pad_s2{{"padding", V{1, 1, 1, 1}}, {"stride", V{2, 2}}};
  const auto conv_relu = [&](Value* in, int64_t c, int64_t o, const Attrs& a) {
    Value* v = build_node(*g, "conv2d"_op, {in, w({o, c, 3, 3}), w({o})}, a)->output(0);
    return build_node(*g, "relu"_op, {v}, {})->output(0);
  };
  Value* v = conv_relu(x, 64, 256, pad);
  // depthwise 5x5, stride 2 then back up with a stride-1 3x3 one (depthwise_blocked.h, inside the chain)
  Value* d = build_node(*g, "conv2d"_op, {v, w({256, 1, 5, 5}), w({256})},
                        Attrs{{"padding", V{2, 2, 2, 2}}, {"groups", int64_t{256}}})->output(0);
  v = build_node(*g, "conv2d"_op, {d, w({256, 1, 3, 3})}, Attrs{{"padding", V{1, 1, 1, 1}}, {"groups", int64_t{256}}})
          ->output(0);
  v = conv_relu(v, 256, 256, pad);
  v = conv_relu(v, 256, 512, pad_s2);
  v = conv_relu(v, 512, 512, pad);
  Value* m = build_node(*g, "reduce_mean"_op, {v}, Attrs{{"axes", V{2, 3}}, {"keepdims", false}})->output(0);
  Value* y = build_node(*g, "linear"_op, {m, w({10, 512}), w({10})}, {})->output(0);
  g->set_outputs({y, v});
  verify_graph(*g);
  return g;
}

TEST(Layout, ARowOfABatchHasTheBitsOfThatInputRunAlone) {
  Plan one = compile_plan(deep_convs(1), inference(true));
  Plan three = compile_plan(deep_convs(3), inference(true));
  Plan ref = compile_plan(deep_convs(1), inference(true, Backend::reference));
  EXPECT_EQ(count_op(one.graph(), "conv2d_fused"_op, "dst_layout", "nchw8c"), 6);  // the depthwise ones too
  std::mt19937 rng(8);
  const Tensor batch = random_tensor(rng, {3, 64, 14, 14}, DType::f32);
  const int64_t img = 64 * 14 * 14;
  Tensor alone = Tensor::empty({1, 64, 14, 14}, DType::f32);
  std::memcpy(alone.raw_data(), batch.data<float>() + img, img * sizeof(float));
  for (int threads : {1, 2}) {
    SCOPED_TRACE(fmt::format("{} threads", threads));
    set_threads(threads);
    const auto a = one.run({&alone, 1});
    const auto b = three.run({&batch, 1});
    set_threads(0);
    const auto want = ref.run({&alone, 1});
    for (size_t i = 0; i < a.size(); ++i) EXPECT_LT(max_rel_diff(a[i], want[i]), 2e-5) << "output " << i;
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE(fmt::format("output {}", i));
      const size_t row = a[i].nbytes();
      ASSERT_EQ(b[i].nbytes(), 3 * row);
      EXPECT_EQ(std::memcmp(a[i].raw_data(), static_cast<const char*>(b[i].raw_data()) + row, row), 0);
    }
  }
}

// The plan marks its constants (KernelContext::constant_inputs), so the convs keep what they derive from their
// weights across runs (backend/cpu/constant_cache.h): the Winograd convs their transformed weights, the oneDNN
// convs their reordered (blocked) weights - with the bits of deriving them every run.
TEST(Layout, ConvsOfAPlanKeepWhatTheyDeriveFromTheirWeights) {
  if (std::getenv("SPORE_CONV_WINOGRAD") != nullptr || std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr)
    GTEST_SKIP() << "kernel selection changed by the environment";
  Plan plan = compile_plan(resnet_like(DType::f32, 2, 3), inference(true));
  std::mt19937 rng(4);
  const Tensor in[] = {random_tensor(rng, {2, 3, 12, 12}, DType::f32), random_tensor(rng, {2, 8, 6, 6}, DType::f32)};
  const cpu::ConstantCacheStats s0 = cpu::constant_cache_stats();
  const auto first = plan.run(in);
  const cpu::ConstantCacheStats s1 = cpu::constant_cache_stats();
  const auto second = plan.run(in);
  const cpu::ConstantCacheStats s2 = cpu::constant_cache_stats();
  // At least c1 and c2 (16 -> 16, 3x3, stride 1: Winograd); the oneDNN convs add theirs where oneDNN reorders.
  EXPECT_GE(s1.misses - s0.misses, 2);
  EXPECT_LE(s1.misses - s0.misses, count_op(plan.graph(), "conv2d_fused"_op));
  EXPECT_EQ(s1.hits, s0.hits);
  EXPECT_EQ(s2.misses, s1.misses);
  EXPECT_EQ(s2.hits - s1.hits, s1.misses - s0.misses);
  setenv("SPORE_CONSTANT_CACHE", "0", 1);
  const auto uncached = plan.run(in);
  unsetenv("SPORE_CONSTANT_CACHE");
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_TRUE(bit_equal(first[i], second[i])) << "output " << i;
    EXPECT_TRUE(bit_equal(first[i], uncached[i])) << "output " << i;
  }
}

TEST(Layout, BlockedConvKernelWithResidualAndActivationMatchesTheReference) {
  // One conv2d_fused with both layouts blocked, a residual and leaky_relu, on cpu and reference kernels.
  std::mt19937 rng(3);
  auto g = std::make_unique<Graph>("one");
  Value* x = g->add_input(TensorType::of(DType::f32, {2, 2, 7, 9, 8}), "x");  // 16 channels, blocked
  Value* r = g->add_input(TensorType::of(DType::f32, {2, 3, 7, 9, 8}), "r");  // 24 channels, blocked
  Value* w = g->add_constant(random_tensor(rng, {24, 16, 3, 3}, DType::f32, -0.3, 0.3), "w");
  Value* b = g->add_constant(random_tensor(rng, {24}, DType::f32), "b");
  Attrs a{{"padding", V{1, 1, 1, 1}}, {"activation", std::string("leaky_relu")}, {"alpha", 0.2}, {"residual", true},
          {"src_layout", std::string("nchw8c")}, {"dst_layout", std::string("nchw8c")}};
  Node* n = build_node(*g, "conv2d_fused"_op, {x, w, b, r}, a, "conv");
  EXPECT_EQ(n->output(0)->type, TensorType::of(DType::f32, {2, 3, 7, 9, 8}));
  g->set_outputs({n->output(0)});
  auto g2 = g->clone();
  Plan cpu = compile_plan(std::move(g), {});
  CompileOptions ro;
  ro.backend = Backend::reference;
  Plan ref = compile_plan(std::move(g2), ro);
  const Tensor in[] = {random_tensor(rng, {2, 2, 7, 9, 8}, DType::f32), random_tensor(rng, {2, 3, 7, 9, 8}, DType::f32)};
  EXPECT_LT(max_rel_diff(cpu.run(in)[0], ref.run(in)[0]), 1e-5);
  // Through the decomposition (ops:: in eager mode: relayouts around the plain conv) as well.
  const Tensor eager_in[] = {in[0], w->producer->payload, b->producer->payload, in[1]};
  const Tensor eager = ops::call1("conv2d_fused"_op, eager_in, a);
  EXPECT_LT(max_rel_diff(eager, ref.run(in)[0]), 1e-5);
}

TEST(Layout, GlobalMeanOfTheChainExitReadsTheBlockedTensor) {
  for (bool gap : {false, true}) {
    SCOPED_TRACE(gap ? "global_avg_pool" : "reduce_mean");
    const auto build = [&] {
      std::mt19937 rng(4);
      auto g = std::make_unique<Graph>("head");
      Value* x = g->add_input(TensorType::of(DType::f32, {2, 3, 9, 9}), "x");
      const auto w = [&](const Shape& sh) { return g->add_constant(random_tensor(rng, sh, DType::f32, -0.3, 0.3)); };
      const Attrs pad{{"padding", V{1, 1, 1, 1}}};
      Value* a = build_node(*g, "relu"_op, {build_node(*g, "conv2d"_op, {x, w({16, 3, 3, 3}), w({16})}, pad)->output(0)}, {})->output(0);
      Value* b = build_node(*g, "relu"_op, {build_node(*g, "conv2d"_op, {a, w({16, 16, 3, 3}), w({16})}, pad)->output(0)}, {})->output(0);
      Value* m = gap ? build_node(*g, "flatten"_op, {build_node(*g, "global_avg_pool"_op, {b}, {})->output(0)}, {})->output(0)
                     : build_node(*g, "reduce_mean"_op, {b}, Attrs{{"axes", V{-1, 2}}, {"keepdims", false}})->output(0);
      Value* y = build_node(*g, "linear"_op, {m, w({4, 16}), w({4})}, {}, "fc")->output(0);
      g->set_outputs({y});
      return g;
    };
    Plan blocked = compile_plan(build(), inference(true));
    Plan plain = compile_plan(build(), inference(false));
    EXPECT_EQ(count_op(blocked.graph(), "transpose"_op), 0);
    EXPECT_EQ(count_op(blocked.graph(), "conv2d_fused"_op, "dst_layout", "nchw8c"), 2);
    EXPECT_EQ(blocked.num_kernels(), plain.num_kernels());
    std::mt19937 rng(8);
    const Tensor in[] = {random_tensor(rng, {2, 3, 9, 9}, DType::f32)};
    EXPECT_LT(max_rel_diff(blocked.run(in)[0], plain.run(in)[0]), 1e-5);
  }
}

// The blocked plan (on 1 and 2 threads) and the reference give the plain plan's values on one random input.
void expect_blocked_plain_and_reference_agree(Plan& blocked, Plan& plain, Plan& ref, const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  const Tensor in[] = {random_tensor(rng, shape, DType::f32)};
  const auto want = plain.run(in);
  EXPECT_LT(max_rel_diff(ref.run(in)[0], want[0]), 1e-5);
  for (int threads : {1, 2}) {
    set_threads(threads);
    EXPECT_LT(max_rel_diff(blocked.run(in)[0], want[0]), 1e-5) << threads << " threads";
  }
  set_threads(0);
}

// Squeeze-excite (mobilenet_v3, efficientnet): x * sigmoid(fc(fc(mean(x)))) between a depthwise conv and the
// projection conv stays blocked - the scale [N, C, 1, 1] is reshaped, not reordered, so the only reorder left is
// the chain's exit - and gives the plain plan's values (and the reference's), on 1 and 2 threads. scale_first:
// sc * d, as torchvision writes it (the FCs' 8 and 16 channels make them a blocked chain of their own, so both
// operands of the mul are chain values; the image is the one of the output's shape).
std::unique_ptr<Graph> squeeze_excite(bool scale_first) {
  std::mt19937 rng(12);
  auto g = std::make_unique<Graph>("se");
  Value* x = g->add_input(TensorType::of(DType::f32, {2, 8, 10, 10}), "x");
  const auto w = [&](const Shape& sh) { return g->add_constant(random_tensor(rng, sh, DType::f32, -0.3, 0.3)); };
  const Attrs pad{{"padding", V{1, 1, 1, 1}}};
  Value* a = build_node(*g, "relu"_op, {build_node(*g, "conv2d"_op, {x, w({16, 8, 3, 3}), w({16})}, pad)->output(0)}, {})->output(0);
  Value* d = build_node(*g, "conv2d"_op, {a, w({16, 1, 3, 3}), w({16})}, Attrs{{"padding", V{1, 1, 1, 1}}, {"groups", int64_t{16}}})
                 ->output(0);
  Value* m = build_node(*g, "reduce_mean"_op, {d}, Attrs{{"axes", V{2, 3}}, {"keepdims", true}})->output(0);
  Value* f = build_node(*g, "relu"_op, {build_node(*g, "conv2d"_op, {m, w({8, 16, 1, 1}), w({8})}, {})->output(0)}, {})->output(0);
  Value* sc = build_node(*g, "sigmoid"_op, {build_node(*g, "conv2d"_op, {f, w({16, 8, 1, 1}), w({16})}, {})->output(0)}, {})->output(0);
  Value* y = build_node(*g, "mul"_op, scale_first ? std::vector<Value*>{sc, d} : std::vector<Value*>{d, sc}, {})->output(0);
  Value* z = build_node(*g, "conv2d"_op, {y, w({16, 16, 1, 1}), w({16})}, {}, "project")->output(0);
  g->set_outputs({z});
  verify_graph(*g);
  return g;
}

TEST(Layout, SqueezeExciteRescaleStaysInTheChain) {
  for (const bool scale_first : {false, true}) {
    SCOPED_TRACE(scale_first ? "sc * x" : "x * sc");
    Plan blocked = compile_plan(squeeze_excite(scale_first), inference(true));
    Plan plain = compile_plan(squeeze_excite(scale_first), inference(false));
    Plan ref = compile_plan(squeeze_excite(scale_first), inference(true, Backend::reference));
    // Reorders of H x W images: only the exit after "project" (the FCs' 1x1 outputs may reorder, at no cost).
    int image_reorders = 0, blocked_muls = 0;
    for (const Node* n : blocked.graph().nodes()) {
      if (n->dead) continue;
      if (n->inputs.empty()) continue;
      const Shape s = n->input(0)->type.shape();
      if (n->op == "transpose"_op && s.size() == 5 && s[2] * s[3] > 1) ++image_reorders;
      if (n->op == "mul"_op && n->output(0)->type.rank() == 5) ++blocked_muls;
    }
    EXPECT_EQ(image_reorders, 1);
    EXPECT_EQ(blocked_muls, 1);
    expect_blocked_plain_and_reference_agree(blocked, plain, ref, {2, 8, 10, 10}, 3);
  }
}

// A RegNet block: 1x1, a grouped 3x3 (8 channels per group, stride 2 and 1), 1x1 with a residual. The grouped convs
// join the chain (each group is whole channel blocks), so the only image reorder is the exit; groups of 4 channels
// (not whole blocks) stay NCHW. Same values as the plain plan and the reference, on 1 and 2 threads.
std::unique_ptr<Graph> grouped_block(int64_t group_width) {
  std::mt19937 rng(23);
  auto g = std::make_unique<Graph>("grouped");
  Value* x = g->add_input(TensorType::of(DType::f32, {2, 16, 12, 12}), "x");
  const auto w = [&](const Shape& sh) { return g->add_constant(random_tensor(rng, sh, DType::f32, -0.3, 0.3)); };
  const auto conv = [&](Value* in, int64_t c, int64_t o, int64_t k, int64_t stride, int64_t groups) {
    const int64_t p = k / 2;
    Value* v = build_node(*g, "conv2d"_op, {in, w({o, c / groups, k, k}), w({o})},
                          Attrs{{"padding", V{p, p, p, p}}, {"stride", V{stride, stride}}, {"groups", groups}})
                   ->output(0);
    return build_node(*g, "relu"_op, {v}, {})->output(0);
  };
  Value* a = conv(x, 16, 32, 1, 1, 1);
  Value* b = conv(a, 32, 32, 3, 2, 32 / group_width);
  Value* c = conv(b, 32, 32, 3, 1, 32 / group_width);
  Value* d = build_node(*g, "conv2d"_op, {c, w({32, 32, 1, 1}), w({32})}, {})->output(0);
  g->set_outputs({build_node(*g, "add"_op, {d, b}, {})->output(0)});
  verify_graph(*g);
  return g;
}

TEST(Layout, GroupedConvsOfWholeChannelBlocksStayInTheChain) {
  for (const int64_t width : {8, 16, 4}) {
    SCOPED_TRACE(fmt::format("{} channels per group", width));
    Plan blocked = compile_plan(grouped_block(width), inference(true));
    Plan plain = compile_plan(grouped_block(width), inference(false));
    Plan ref = compile_plan(grouped_block(width), inference(true, Backend::reference));
    int grouped_blocked = 0;
    for (const Node* n : blocked.graph().nodes())
      if (!n->dead && n->op == "conv2d_fused"_op && n->attrs.i("groups") > 1 && n->attrs.s("dst_layout") == "nchw8c")
        ++grouped_blocked;
    EXPECT_EQ(grouped_blocked, width % 8 == 0 ? 2 : 0);
    if (width % 8 == 0) {
      EXPECT_EQ(count_op(blocked.graph(), "transpose"_op), 1);
    }
    expect_blocked_plain_and_reference_agree(blocked, plain, ref, {2, 16, 12, 12}, 9);
  }
}

// An Inception block (GoogLeNet): stem conv, 3x3/2 max pool (ceil), branches 1x1 | 1x1 -> 3x3 | 3x3/1 max pool ->
// 1x1, their channel concat, a 2x2 average pool and a conv. The pools and the concat run on the blocked tensors
// (the lone 1x1 branch joins the chain through the concat), so the only image reorder is the exit, and the values
// are the plain plan's and the reference's.
std::unique_ptr<Graph> inception() {
  std::mt19937 rng(31);
  auto g = std::make_unique<Graph>("inception");
  Value* x = g->add_input(TensorType::of(DType::f32, {2, 3, 19, 19}), "x");
  const auto w = [&](const Shape& sh) { return g->add_constant(random_tensor(rng, sh, DType::f32, -0.3, 0.3)); };
  const auto conv = [&](Value* in, int64_t c, int64_t o, int64_t k) {
    const int64_t p = k / 2;
    Value* v = build_node(*g, "conv2d"_op, {in, w({o, c, k, k}), w({o})}, Attrs{{"padding", V{p, p, p, p}}})->output(0);
    return build_node(*g, "relu"_op, {v}, {})->output(0);
  };
  Value* s = conv(x, 3, 16, 3);
  Value* m = build_node(*g, "max_pool2d"_op, {s}, Attrs{{"kernel", V{3, 3}}, {"stride", V{2, 2}}, {"ceil_mode", true}})->output(0);
  Value* b1 = conv(m, 16, 8, 1);
  Value* b2 = conv(conv(m, 16, 8, 1), 8, 16, 3);
  Value* p3 = build_node(*g, "max_pool2d"_op, {m}, Attrs{{"kernel", V{3, 3}}, {"stride", V{1, 1}}, {"padding", V{1, 1, 1, 1}}})
                  ->output(0);
  Value* b3 = conv(p3, 16, 8, 1);
  Value* cat = build_node(*g, "concat"_op, {b1, b2, b3}, Attrs{{"axis", int64_t{1}}})->output(0);
  Value* a = build_node(*g, "avg_pool2d"_op, {cat}, Attrs{{"kernel", V{2, 2}}})->output(0);
  g->set_outputs({conv(a, 32, 16, 3)});
  verify_graph(*g);
  return g;
}

TEST(Layout, PoolsAndChannelConcatsOfTheChainStayBlocked) {
  Plan blocked = compile_plan(inception(), inference(true));
  Plan plain = compile_plan(inception(), inference(false));
  Plan ref = compile_plan(inception(), inference(true, Backend::reference));
  EXPECT_EQ(count_op(blocked.graph(), "transpose"_op), 1);
  EXPECT_EQ(count_op(blocked.graph(), "max_pool2d"_op, "layout", "nchw8c"), 2);
  EXPECT_EQ(count_op(blocked.graph(), "avg_pool2d"_op, "layout", "nchw8c"), 1);
  expect_blocked_plain_and_reference_agree(blocked, plain, ref, {2, 3, 19, 19}, 6);
}

// DenseNet: each layer is concat -> batch norm -> relu -> 1x1 conv -> 3x3 conv, the transition batch norm -> relu -> 1x1
// -> a zero pad (PyTorch's export) -> 2x2 average pool. The batch norms and relus run on the blocked tensors (layout
// nchw8c), the transition joins the chain through them, and the next block's concat stays blocked: the only image
// reorder is the exit. Same values as the plain plan and the reference, on 1 and 2 threads.
std::unique_ptr<Graph> dense_block() {
  std::mt19937 rng(41);
  auto g = std::make_unique<Graph>("dense");
  Value* x = g->add_input(TensorType::of(DType::f32, {2, 3, 12, 12}), "x");
  const auto w = [&](const Shape& sh, double lo = -0.3, double hi = 0.3) {
    return g->add_constant(random_tensor(rng, sh, DType::f32, lo, hi));
  };
  const auto bn_relu = [&](Value* in, int64_t c) {
    Value* b = build_node(*g, "batch_norm"_op, {in, w({c}, 0.5, 1.5), w({c}), w({c}), w({c}, 0.5, 2.0)}, {})->output(0);
    return build_node(*g, "relu"_op, {b}, {})->output(0);
  };
  const auto conv = [&](Value* in, int64_t c, int64_t o, int64_t k) {
    const int64_t p = k / 2;
    return build_node(*g, "conv2d"_op, {in, w({o, c, k, k})}, Attrs{{"padding", V{p, p, p, p}}})->output(0);
  };
  const auto layer = [&](Value* in, int64_t c) { return conv(bn_relu(conv(bn_relu(in, c), c, 16, 1), 16), 16, 8, 3); };
  std::vector<Value*> feats{conv(x, 3, 16, 3)};
  int64_t c = 16;
  for (int i = 0; i < 2; ++i, c += 8) {
    Value* cat = feats.size() == 1 ? feats[0] : build_node(*g, "concat"_op, feats, Attrs{{"axis", int64_t{1}}})->output(0);
    feats.push_back(layer(cat, c));
  }
  Value* cat = build_node(*g, "concat"_op, feats, Attrs{{"axis", int64_t{1}}})->output(0);
  Value* t = conv(bn_relu(cat, c), c, 16, 1);
  Value* padded = build_node(*g, "pad"_op, {t}, Attrs{{"pads", V{0, 0, 0, 0, 0, 0, 0, 0}}})->output(0);
  Value* pooled = build_node(*g, "avg_pool2d"_op, {padded}, Attrs{{"kernel", V{2, 2}}, {"stride", V{2, 2}}})->output(0);
  Value* next = build_node(*g, "concat"_op, {pooled, layer(pooled, 16)}, Attrs{{"axis", int64_t{1}}})->output(0);
  g->set_outputs({bn_relu(next, 24)});
  verify_graph(*g);
  return g;
}

TEST(Layout, DenseBlocksBatchNormsAndActivationsStayBlocked) {
  Plan blocked = compile_plan(dense_block(), inference(true));
  Plan plain = compile_plan(dense_block(), inference(false));
  Plan ref = compile_plan(dense_block(), inference(true, Backend::reference));
  EXPECT_EQ(count_op(blocked.graph(), "transpose"_op), 1);
  EXPECT_EQ(count_op(blocked.graph(), "batch_norm"_op, "layout", "nchw8c"), count_op(blocked.graph(), "batch_norm"_op));
  EXPECT_EQ(count_op(blocked.graph(), "avg_pool2d"_op, "layout", "nchw8c"), 1);
  EXPECT_EQ(count_op(blocked.graph(), "pad"_op), 0);
  expect_blocked_plain_and_reference_agree(blocked, plain, ref, {2, 3, 12, 12}, 12);
}

// A stem conv over 3 channels with no other conv to chain to (an int8 model keeps its RGB stem f32, the convs after it
// are int8): it runs blocked anyway (the direct kernel, row tasks, instead of one im2col sgemm per image), its max
// pool pools the blocked tensor, and one reorder leaves after the pool. Same values as the plain plan.
std::unique_ptr<Graph> lone_stem() {
  std::mt19937 rng(41);
  auto g = std::make_unique<Graph>("lone_stem");
  Value* x = g->add_input(TensorType::of(DType::f32, {2, 3, 19, 19}), "x");
  const auto w = [&](const Shape& sh) { return g->add_constant(random_tensor(rng, sh, DType::f32, -0.3, 0.3)); };
  Value* c = build_node(*g, "conv2d"_op, {x, w({16, 3, 3, 3}), w({16})}, Attrs{{"padding", V{1, 1, 1, 1}}})->output(0);
  Value* r = build_node(*g, "relu"_op, {c}, {})->output(0);
  Value* m = build_node(*g, "max_pool2d"_op, {r}, Attrs{{"kernel", V{3, 3}}, {"stride", V{2, 2}}, {"ceil_mode", true}})->output(0);
  g->set_outputs({build_node(*g, "sigmoid"_op, {m}, {})->output(0)});
  verify_graph(*g);
  return g;
}

TEST(Layout, ALoneStemConvAndItsPoolRunBlocked) {
  Plan blocked = compile_plan(lone_stem(), inference(true));
  Plan plain = compile_plan(lone_stem(), inference(false));
  Plan ref = compile_plan(lone_stem(), inference(true, Backend::reference));
  EXPECT_EQ(count_op(blocked.graph(), "conv2d_fused"_op, "dst_layout", "nchw8c"), 1);
  EXPECT_EQ(count_op(blocked.graph(), "max_pool2d"_op, "layout", "nchw8c"), 1);
  EXPECT_EQ(count_op(blocked.graph(), "transpose"_op), 1);
  expect_blocked_plain_and_reference_agree(blocked, plain, ref, {2, 3, 19, 19}, 7);
}

TEST(Layout, TrainingGraphsAndLowPrecisionAreLeftAlone) {
  {
    CompileOptions o;  // not inference: a training step's convs keep NCHW (and their bits)
    Plan p = compile_plan(resnet_like(DType::f32, 2, 1), o);
    EXPECT_EQ(count_op(p.graph(), "transpose"_op), 0);
  }
  for (DType t : {DType::f16, DType::bf16, DType::f64}) {
    Plan p = compile_plan(resnet_like(t, 2, 1), inference(true));
    EXPECT_EQ(count_op(p.graph(), "conv2d_fused"_op, "dst_layout", "nchw8c"), 0) << dtype_name(t);
  }
}

TEST(Layout, BadLayoutAttributesAreClearErrors) {
  auto g = std::make_unique<Graph>("bad");
  Value* x = g->add_input(TensorType::of(DType::f32, {1, 12, 5, 5}), "x");
  Value* w = g->add_input(TensorType::of(DType::f32, {12, 12, 3, 3}), "w");
  const auto err = [&](const Attrs& a) {
    try {
      build_node(*g, "conv2d_fused"_op, {x, w}, a, "conv");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err({{"dst_layout", std::string("nhwc")}}).find("dst_layout must be"), std::string::npos);
  EXPECT_NE(err({{"dst_layout", std::string("nchw8c")}}).find("divisible by 8"), std::string::npos);
  EXPECT_NE(err({{"src_layout", std::string("nchw8c")}}).find("[N, C/8, H, W, 8]"), std::string::npos);
}

}  // namespace
}  // namespace spore
