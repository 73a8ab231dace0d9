#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "autodiff/autodiff.h"
#include "ops/ops.h"
#include "ops/kernel.h"
#include "ops/registry.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"

namespace spore {
namespace {

Tensor vec(std::vector<double> v, Shape s, DType t = DType::f64) { return Tensor::from_doubles(v, std::move(s), t); }

TEST(Autodiff, MulSumGradients) {
  init();
  const Tensor x = vec({1, 2, 3}, {3}), w = vec({4, 5, 6}, {3});
  auto [y, g] = autodiff::value_and_grad(
      [](std::span<const Tensor> in) { return ops::reduce_sum(ops::mul(in[0], in[1])); }, std::vector{x, w});
  EXPECT_DOUBLE_EQ(y.item(), 32);
  EXPECT_EQ(g[0].to_doubles(), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(g[1].to_doubles(), (std::vector<double>{1, 2, 3}));
}

// A pipeline keeps one tape per micro-batch in flight and ends them first in, first out: each still computes its own
// gradients, and once all are gone no tape is active (none left pointing at a destroyed one).
TEST(Autodiff, TapesDestroyedOutOfOrder) {
  init();
  auto t0 = std::make_unique<autodiff::GradientTape>();
  const Tensor x0 = t0->watch(vec({1, 2}, {2}));
  const Tensor y0 = ops::reduce_sum(ops::mul(x0, x0));
  auto t1 = std::make_unique<autodiff::GradientTape>();
  const Tensor x1 = t1->watch(vec({3, 4}, {2}));
  const Tensor y1 = ops::reduce_sum(ops::mul(x1, x1));
  std::vector<Tensor> g0;
  {
    autodiff::NoGradGuard no_grad;
    g0 = t0->gradient(y0, std::vector<Tensor>{x0});
  }
  t0.reset();  // not the active tape: unlinked from t1's chain
  EXPECT_EQ(autodiff::GradientTape::active(), t1.get());
  auto t2 = std::make_unique<autodiff::GradientTape>();
  const Tensor x2 = t2->watch(vec({5}, {1}));
  const Tensor y2 = ops::mul(x2, x2);
  const std::vector<Tensor> g1 = t1->gradient(y1, std::vector<Tensor>{x1});
  t1.reset();
  const std::vector<Tensor> g2 = t2->gradient(y2, std::vector<Tensor>{x2});
  t2.reset();
  EXPECT_EQ(autodiff::GradientTape::active(), nullptr);
  EXPECT_EQ(g0[0].to_doubles(), (std::vector<double>{2, 4}));
  EXPECT_EQ(g1[0].to_doubles(), (std::vector<double>{6, 8}));
  EXPECT_EQ(g2[0].to_doubles(), (std::vector<double>{10}));
}

TEST(Autodiff, BroadcastReducesToInputShape) {
  init();
  const Tensor x = vec({1, 2, 3, 4, 5, 6}, {2, 3}), b = vec({1, 1, 1}, {3});
  auto g = autodiff::grad([](std::span<const Tensor> in) { return ops::reduce_sum(ops::add(in[0], in[1])); },
                          std::vector{x, b});
  EXPECT_EQ(g[1].shape(), (Shape{3}));
  EXPECT_EQ(g[1].to_doubles(), (std::vector<double>{2, 2, 2}));
}

TEST(Autodiff, ReusedTensorAccumulatesAndWrtSelects) {
  init();
  const Tensor x = vec({3}, {}), c = vec({2}, {});
  // f = x*x + x*c: df/dx = 2x + c = 8
  auto g = autodiff::grad(
      [](std::span<const Tensor> in) { return ops::add(ops::mul(in[0], in[0]), ops::mul(in[0], in[1])); },
      std::vector{x, c}, {0});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_DOUBLE_EQ(g[0].item(), 8);
}

TEST(Autodiff, UnusedInputGetsZerosAndNoGradOpsStopFlow) {
  init();
  const Tensor x = vec({1, -2}, {2}), y = vec({5, 5}, {2});
  auto g = autodiff::grad(
      [](std::span<const Tensor> in) {
        // sign() is no_grad: only the identity path contributes.
        return ops::reduce_sum(ops::add(ops::sign(in[0]), in[0]));
      },
      std::vector{x, y});
  EXPECT_EQ(g[0].to_doubles(), (std::vector<double>{1, 1}));
  EXPECT_EQ(g[1].to_doubles(), (std::vector<double>{0, 0}));
}

// `ready` hands each source's gradient on once backward has passed the source's first use: the last layer's weight
// before the first layer's (so data parallelism can reduce it while the rest of backward runs), a weight used by
// two layers only after the earlier one, an unreached source last as zeros - each once, equal to what gradient()
// returns.
TEST(Autodiff, ReadyHandsGradientsAsBackwardFinishesThem) {
  init();
  const Tensor x = vec({0.5, -1.5, 2.0, 0.25}, {1, 4});
  const Tensor w1 = vec({0.3, -0.2, 0.7, 0.1, -0.4, 0.9, 0.6, -0.8}, {4, 2});
  const Tensor w2 = vec({1.3, -0.7, 0.2, 0.5}, {2, 2});
  const Tensor shared = vec({0.9, -1.1}, {2}), unused = vec({2, 3}, {2});
  autodiff::GradientTape tape;
  const Tensor a = tape.watch(w1), b = tape.watch(w2), c = tape.watch(shared), d = tape.watch(unused);
  const Tensor h = ops::relu(ops::add(ops::matmul(x, a), c));  // layer 1 uses the shared bias
  const Tensor loss = ops::reduce_sum(ops::mul(ops::add(ops::matmul(h, b), c), 2.0));  // layer 2 uses it again
  std::vector<size_t> order;
  std::vector<Tensor> handed(4);
  const std::vector<Tensor> sources{a, b, c, d};
  const std::vector<Tensor> g =
      tape.gradient(loss, sources, Tensor(), [&](size_t k, const Tensor& grad) {
        order.push_back(k);
        handed[k] = grad;
      });
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order.back(), 3u);  // unreached: last
  const auto pos = [&](size_t k) { return std::find(order.begin(), order.end(), k) - order.begin(); };
  EXPECT_LT(pos(1), pos(0));  // w2 (layer 2) before w1 (layer 1)
  EXPECT_LT(pos(1), pos(2));  // the shared bias waits for its use in layer 1
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(handed[k].to_doubles(), g[k].to_doubles()) << k;
  EXPECT_EQ(g[3].to_doubles(), (std::vector<double>{0, 0}));
}

TEST(Autodiff, MultiOutputUndefinedGradsAreZeros) {
  init();
  const Tensor x = vec({1, 2, 3, 4}, {4});
  auto g = autodiff::grad(
      [](std::span<const Tensor> in) {
        auto parts = ops::split(in[0], {1, 3}, 0);
        return ops::reduce_sum(ops::mul(parts[1], 2.0));  // parts[0] gets no gradient
      },
      std::vector{x});
  EXPECT_EQ(g[0].to_doubles(), (std::vector<double>{0, 2, 2, 2}));
}

TEST(Autodiff, TapeRecordsOnlyWatchedAndNoGradGuardPauses) {
  init();
  autodiff::GradientTape tape;
  const Tensor a = vec({1, 2}, {2});
  const Tensor x = tape.watch(a);
  ops::exp(a);  // not watched: no record
  EXPECT_EQ(tape.num_records(), 0u);
  Tensor y = ops::exp(x);
  EXPECT_EQ(tape.num_records(), 1u);
  {
    autodiff::NoGradGuard ng;
    ops::exp(x);
  }
  EXPECT_EQ(tape.num_records(), 1u);
  auto g = tape.gradient(y, std::vector{x});
  EXPECT_TRUE(g[0].bit_equal(y));
}

// Custom ops without a gradient rule: a decomposed one is differentiated through its decomposition; one
// with a kernel is an error, but only when a gradient actually has to flow through it.
OpId custom_op(const std::string& name, bool decomposed) {
  if (const OpDef* d = op_registry().find(name)) return d->id;
  OpDef d;
  d.name = name;
  d.input_names = {"x"};
  d.min_inputs = d.max_inputs = 1;
  d.dtypes = DTypeSet{DType::f64};
  d.infer = [](const InferContext& c) { return std::vector<TensorType>{c.in(0)}; };
  if (decomposed)
    d.decompose = [](std::span<const Tensor> in, const Attrs&) { return std::vector{ops::mul(in[0], in[0])}; };
  const OpId id = op_registry().add_custom(std::move(d)).id;
  if (!decomposed)
    kernel_registry().add(Backend::cpu, id, DTypeSet{DType::f64}, [](KernelContext& k) {
      copy_strided(k.in(0), k.out(0));
    }, "test");
  return id;
}

TEST(Autodiff, DecomposedOpWithoutRuleIsDifferentiatedThroughItsDecomposition) {
  init();
  const OpId sq = custom_op("ad_test_square", true);
  const Tensor x = vec({1, -2, 3}, {3});
  auto g = autodiff::grad([&](std::span<const Tensor> in) { return ops::reduce_sum(ops::call1(sq, in)); },
                          std::vector{x});
  EXPECT_EQ(g[0].to_doubles(), (std::vector<double>{2, -4, 6}));
}

TEST(Autodiff, OpWithoutRuleFailsOnlyWhenGradientFlows) {
  init();
  const OpId id = custom_op("ad_test_opaque", false);
  const Tensor x = vec({1, 2}, {2});
  // Used but not on the path to the result: fine.
  auto g = autodiff::grad(
      [&](std::span<const Tensor> in) {
        ops::call1(id, in);
        return ops::reduce_sum(in[0]);
      },
      std::vector{x});
  EXPECT_EQ(g[0].to_doubles(), (std::vector<double>{1, 1}));
  try {
    autodiff::grad([&](std::span<const Tensor> in) { return ops::reduce_sum(ops::call1(id, in)); }, std::vector{x});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("ad_test_opaque"), std::string::npos) << e.what();
  }
}

TEST(Autodiff, MaxPoolSendsGradientToTheWinner) {
  init();
  // Windows: 9, tie 4/4 (first wins), 7, 8.
  const Tensor x = vec({1, 5, 3, 2, 9, 0, 4, 4, 1, 7, 8, 6, 2, 3, 5, 1}, {1, 1, 4, 4});
  auto g = autodiff::grad([](std::span<const Tensor> in) { return ops::reduce_sum(ops::max_pool2d(in[0])); },
                          std::vector{x});
  EXPECT_EQ(g[0].to_doubles(), (std::vector<double>{0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0}))
      << g[0].to_string(16);
}

// The same rules traced: forward + backward compile into one plan and give eager's bits.
TEST(Autodiff, GraphModeValueAndGradIsOnePlanAndMatchesEager) {
  init();
  const Tensor x = Tensor::from_doubles({0.5, -1, 2, 0.25, 1.5, -0.75}, {2, 3}, DType::f32);
  const Tensor w = Tensor::from_doubles({0.1, 0.2, -0.3, 0.4, 0.5, -0.6}, {2, 3}, DType::f32);
  const Tensor b = Tensor::from_doubles({0.1, -0.2}, {2}, DType::f32);
  auto loss = [](std::span<const Tensor> in) {
    return ops::reduce_mean(ops::tanh(ops::linear(in[0], in[1], in[2])));
  };
  auto body = [&](std::span<const Tensor> in) {
    auto [y, g] = autodiff::value_and_grad(loss, in, {1, 2});
    return std::vector<Tensor>{y, g[0], g[1]};
  };
  const std::vector<Tensor> ins{x, w, b};
  const auto eager = body(ins);
  CompiledFunction f(body);
  const auto graph = f(std::span<const Tensor>(ins));
  EXPECT_EQ(f.cache_size(), 1u);
  ASSERT_EQ(graph.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(eager[i].bit_equal(graph[i])) << "output " << i;
}

TEST(Autodiff, GraphModeConvNetGradientsMatchEager) {
  init();
  auto rnd = [](Shape s, uint64_t seed) {
    std::vector<double> v(static_cast<size_t>(shape_numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i * 7 + seed * 13)) * 0.5;
    return Tensor::from_doubles(v, s, DType::f32);
  };
  const std::vector<Tensor> ins{rnd({2, 3, 9, 9}, 1), rnd({4, 3, 3, 3}, 2), rnd({4}, 3), rnd({4}, 4)};
  auto body = [](std::span<const Tensor> in) {
    auto [y, g] = autodiff::value_and_grad(
        [](std::span<const Tensor> a) {
          ops::Conv2dOptions o;
          o.pad_mode = "same";
          o.stride = {2, 2};
          Tensor h = ops::relu(ops::conv2d(a[0], a[1], a[2], o));
          h = ops::group_norm(h, 2, a[3]);
          return ops::reduce_mean(ops::max_pool2d(h));
        },
        in);
    std::vector<Tensor> out{y};
    out.insert(out.end(), g.begin(), g.end());
    return out;
  };
  const auto eager = body(ins);
  CompiledFunction f(body);
  const auto graph = f(std::span<const Tensor>(ins));
  ASSERT_EQ(graph.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(eager[i].bit_equal(graph[i])) << "output " << i;
}

}  // namespace
}  // namespace spore
