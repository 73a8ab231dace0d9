// nn::StepScope: Dropout keys its mask on (seed, call index in the scope, step counter); BatchNorm updates its
// running stats under a trace only inside a scope; Dropout's default seed is distinct per cell.
#include <gtest/gtest.h>

#include "nn/init.h"
#include "nn/layers.h"
#include "nn/transformer.h"
#include "nn_util.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

using nn_test::rnd;

Tensor counter(int64_t v) { return Tensor::from_vector<int64_t>({v}, {}); }

TEST(NnStepScope, DropoutMasksFollowTheStepAndTheCallIndex) {
  init();
  const Tensor x = rnd({4, 500}, 1, DType::f32, 0.5, 1.5);
  nn::Dropout d(0.5, 17);
  d.set_train(true);
  Tensor a0, a1, b0, c0;
  {
    nn::StepScope s(counter(3));
    EXPECT_EQ(nn::StepScope::current(), &s);
    a0 = d(x);
    a1 = d(x);  // a second call in the same step: another mask
  }
  EXPECT_EQ(nn::StepScope::current(), nullptr);
  EXPECT_FALSE(a0.bit_equal(a1));
  {
    nn::StepScope s(counter(3));
    b0 = d(x);  // same step, same call index: the same mask
  }
  EXPECT_TRUE(b0.bit_equal(a0));
  {
    nn::StepScope s(counter(4));
    c0 = d(x);  // the next step: a fresh mask
  }
  EXPECT_FALSE(c0.bit_equal(a0));
  EXPECT_EQ(d.calls(), 4);
  // Scopes nest; the inner one's counter wins while it lives.
  {
    nn::StepScope outer(counter(3));
    {
      nn::StepScope inner(counter(4));
      EXPECT_TRUE(d(x).bit_equal(c0));
    }
    EXPECT_EQ(nn::StepScope::current(), &outer);
  }
  // In graph mode the counter is a plan input: one plan, a fresh mask per step, the same bits as eagerly.
  CompiledFunction f([&](std::span<const Tensor> in) {
    nn::StepScope s(in[1]);
    return std::vector<Tensor>{d(in[0])};
  });
  EXPECT_TRUE(f({x, counter(3)})[0].bit_equal(a0));
  EXPECT_TRUE(f({x, counter(4)})[0].bit_equal(c0));
  EXPECT_EQ(f.cache_size(), 1u);
  // Eval mode ignores the scope.
  d.set_train(false);
  nn::StepScope s(counter(3));
  EXPECT_TRUE(d(x).bit_equal(x));
}

TEST(NnStepScope, BadCounters) {
  init();
  EXPECT_NE(testing::error_of([] { nn::StepScope s(Tensor::scalar(1.0, DType::f32)); }).find("i64 or i32"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::StepScope s(Tensor::from_vector<int64_t>({1, 2}, {2})); }).find("scalar"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { nn::StepScope s{Tensor()}; }).find("undefined"), std::string::npos);
  EXPECT_EQ(nn::StepScope::current(), nullptr);
}

TEST(NnStepScope, DropoutDefaultSeedsAreDistinctAndReproducible) {
  init();
  nn::set_seed(5);
  nn::Dropout a(0.5), b(0.5);
  nn::set_seed(5);
  nn::Dropout a2(0.5);
  EXPECT_NE(a.seed(), b.seed());
  EXPECT_EQ(a.seed(), a2.seed());
  const Tensor x = rnd({2, 300}, 2, DType::f32, 0.5, 1.5);
  a.set_train(true);
  b.set_train(true);
  EXPECT_FALSE(a(x).bit_equal(b(x)));
  // Every Dropout of every layer of an encoder stack has its own seed.
  nn::TransformerEncoderLayer l1(8, 2, 16, 0.1), l2(8, 2, 16, 0.1);
  std::vector<uint64_t> seeds;
  for (auto* l : {&l1, &l2})
    for (nn::Dropout* d : {&l->dropout, &l->dropout1, &l->dropout2}) {
      for (uint64_t s : seeds) EXPECT_NE(s, d->seed());
      seeds.push_back(d->seed());
    }
}

TEST(NnStepScope, BatchNormUpdatesRunningStatsUnderATraceOnlyInsideAScope) {
  init();
  nn::BatchNorm1d bn(3);
  bn.set_train(true);
  const Tensor x = rnd({8, 3}, 3, DType::f32, -1, 2);
  const Tensor mean0 = bn.moving_mean().clone();
  // Eagerly: updated with or without a scope, to the same bits.
  nn::BatchNorm1d eager(3);
  eager.set_train(true);
  eager(x);
  // Traced without a scope: the stats are left alone (concrete).
  CompiledFunction plain([&](std::span<const Tensor> in) { return std::vector<Tensor>{bn(in[0])}; });
  plain({x});
  EXPECT_FALSE(bn.moving_mean().is_symbolic());
  EXPECT_TRUE(bn.moving_mean().bit_equal(mean0));
  // Traced inside a scope with the buffers bound to inputs: the new stats are the plan's outputs.
  CompiledFunction scoped([&](std::span<const Tensor> in) {
    const Tensor saved_m = bn.moving_mean(), saved_v = bn.moving_variance();
    bn.moving_mean() = in[1];
    bn.moving_variance() = in[2];
    nn::StepScope s(in[3]);
    std::vector<Tensor> out{bn(in[0]), bn.moving_mean(), bn.moving_variance()};
    EXPECT_TRUE(out[1].is_symbolic());
    bn.moving_mean() = saved_m;
    bn.moving_variance() = saved_v;
    return out;
  });
  const auto out = scoped({x, bn.moving_mean(), bn.moving_variance(), counter(0)});
  EXPECT_TRUE(out[1].bit_equal(eager.moving_mean()));
  EXPECT_TRUE(out[2].bit_equal(eager.moving_variance()));
}

}  // namespace
}  // namespace spore
