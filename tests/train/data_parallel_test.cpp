// train::Model's data parallelism (ModelOptions::parallel) on the single-process communicator: the M-shard tree sum
// equals gradient accumulation over the same micro-batches (for M = 2 the tree g0 + g1 is the accumulation
// (0 + g0) + g1), both modes agree (with accumulation and loss scaling too), and unsupported settings fail with a
// clear error. Several ranks: ctest
// parallel_dp_train (mpirun).
#include <gtest/gtest.h>

#include "base/rng.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "parallel/comm_thread.h"
#include "parallel/communicator.h"
#include "runtime/runtime.h"
#include "test_util.h"
#include "train/model.h"
#include "train/models.h"

namespace spore {
namespace {

data::Dataset quadrants(int64_t n, int64_t batch, bool drop = false) {
  std::vector<double> x(static_cast<size_t>(n * 64));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    y[static_cast<size_t>(i)] = static_cast<int64_t>(philox_uniform(5, 1, static_cast<uint64_t>(i)) * 4) % 4;
    for (int64_t p = 0; p < 64; ++p)
      x[static_cast<size_t>(i * 64 + p)] = philox_uniform(5, 2, static_cast<uint64_t>(i * 64 + p)) +
                                           (((p / 8 >= 4) * 2 + (p % 8 >= 4)) == y[static_cast<size_t>(i)] ? 0.5 : 0);
  }
  return data::Dataset::from_tensors(Tensor::from_doubles(x, {n, 1, 8, 8}, DType::f32),
                                     Tensor::from_vector<int64_t>(y, {n}))
      .shuffle(3)
      .batch(batch, drop);
}

struct DpRun {
  std::unique_ptr<nn::Cell> net;
  nn::SoftmaxCrossEntropyWithLogits ce{true, "mean"};
  std::unique_ptr<train::Optimizer> opt;
  std::unique_ptr<train::Model> model;
  explicit DpRun(train::ModelOptions o, const std::string& optimizer = "adam") {
    nn::set_seed(11);
    net = train::make_model("lenet", {1, 8, 8}, 4);
    opt = train::make_optimizer(optimizer, train::trainable_names(*net), 0.01);
    model = std::make_unique<train::Model>(*net, train::loss_of(ce), *opt, std::vector<std::string>{}, o);
  }
};

train::ModelOptions dp(const std::string& mode, int64_t shards) {
  train::ModelOptions o;
  o.mode = mode;
  o.clip_norm = 0.5;
  o.parallel = {.parallel_mode = "data_parallel", .grad_shards = shards};
  return o;
}

void expect_same_parameters(nn::Cell& a, nn::Cell& b) {
  const auto pa = a.parameters_and_names(), pb = b.parameters_and_names();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(pa[i].second->bit_equal(*pb[i].second)) << pa[i].first;
}

TEST(DataParallel, TwoShardsEqualAccumulatingTwoMicroBatches) {
  init();
  for (const char* mode : {"pynative", "graph"}) {
    SCOPED_TRACE(mode);
    DpRun a(dp(mode, 2));
    train::ModelOptions acc;
    acc.mode = mode;
    acc.clip_norm = 0.5;
    acc.grad_accumulation = 2;
    DpRun b(acc);
    a.model->train(2, quadrants(64, 8));
    b.model->train(2, quadrants(64, 4));
    EXPECT_EQ(a.model->global_step(), 16);
    EXPECT_EQ(b.model->global_step(), 16);
    expect_same_parameters(*a.net, *b.net);
    EXPECT_EQ(a.model->grad_shards(), 2);
    EXPECT_TRUE(a.model->data_parallel());
  }
}

TEST(DataParallel, ModesAgreeAndTheLossIsTheShardsMean) {
  init();
  DpRun a(dp("pynative", 4)), b(dp("graph", 4));
  const data::Dataset ds = quadrants(64, 16);
  std::vector<double> la, lb;
  for (int64_t s = 0; s < 4; ++s) {
    const data::Batch batch = ds.make_batch(0, s);
    la.push_back(a.model->train_step(batch.x, batch.y));
    lb.push_back(b.model->train_step(batch.x, batch.y));
  }
  EXPECT_EQ(la, lb);
  expect_same_parameters(*a.net, *b.net);
  EXPECT_NE(b.model->compiled_plan("shard"), nullptr);
  EXPECT_LT(la.back(), 2.0);
  EXPECT_GT(la.back(), 0.0);
}

// Accumulation over 2 micro-batches of 2 shards each with f16 dynamic loss scaling from 2^24: the first steps
// overflow and are skipped (the scale falls), and PyNative and graph mode skip the same steps with the same bits.
TEST(DataParallel, AccumulationWithDynamicLossScalingSkipsOverflowsAlikeInBothModes) {
  init();
  std::vector<std::unique_ptr<DpRun>> runs;
  for (const char* mode : {"pynative", "graph"}) {
    train::ModelOptions o = dp(mode, 2);
    o.grad_accumulation = 2;
    o.amp_level = "O2";
    o.amp_dtype = DType::f16;
    o.loss_scale = {.kind = "dynamic", .scale = 16777216.0};
    runs.push_back(std::make_unique<DpRun>(o));
    runs.back()->model->train(2, quadrants(64, 8));
  }
  const train::Model &a = *runs[0]->model, &b = *runs[1]->model;
  EXPECT_GT(a.overflow_steps(), 0);
  EXPECT_LT(a.loss_scale(), 16777216.0);
  EXPECT_EQ(a.overflow_steps(), b.overflow_steps());
  EXPECT_EQ(a.loss_scale(), b.loss_scale());
  EXPECT_EQ(a.global_step() + a.overflow_steps(), 8);  // 16 micro-batches, 2 per step
  EXPECT_EQ(b.global_step(), a.global_step());
  expect_same_parameters(*runs[0]->net, *runs[1]->net);
}

// BatchNorm under data parallelism: each shard normalizes with its own statistics (no --sync-bn yet) and the running
// statistics become the mean of the shards' updates from the step's values, so they do not depend on which rank
// ran which shard; PyNative and graph mode agree, and the running mean moved off its initial zeros.
TEST(DataParallel, BatchNormBuffersAreTheShardsMeanInBothModes) {
  init();
  std::vector<std::unique_ptr<train::Model>> models;
  std::vector<std::unique_ptr<nn::Cell>> nets;
  std::vector<std::unique_ptr<train::Optimizer>> opts;
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
  for (const char* mode : {"pynative", "graph"}) {
    nn::set_seed(11);
    nets.push_back(train::make_model("simplenet_bn", {1, 8, 8}, 4));
    opts.push_back(train::make_optimizer("sgd", train::trainable_names(*nets.back()), 0.05));
    models.push_back(std::make_unique<train::Model>(*nets.back(), train::loss_of(ce), *opts.back(),
                                                    std::vector<std::string>{}, dp(mode, 4)));
    models.back()->train(1, quadrants(64, 16));
  }
  expect_same_parameters(*nets[0], *nets[1]);
  bool moved = false;
  for (const auto& [name, p] : nets[1]->parameters_and_names())
    if (name.find("moving_mean") != std::string::npos)
      for (double v : p->to_doubles()) moved |= v != 0.0;
  EXPECT_TRUE(moved);
}

// Gradient buckets: the flat vector laid out in backward's order and cut into buckets that a communication thread
// reduces while backward runs (graph mode: as each bucket's last gradient is produced) give the same bits as one
// reduction after backward, whatever the bucket size - with 4 shards (a local tree before each bucket's allreduce),
// in both modes, with accumulation and clipping.
TEST(DataParallel, GradientBucketsGiveTheSameBitsAsOneReduction) {
  init();
  for (const char* mode : {"graph", "pynative"}) {
    SCOPED_TRACE(mode);
    std::vector<std::unique_ptr<DpRun>> runs;
    std::vector<std::vector<double>> losses;
    for (double mb : {0.0, 25.0, 0.001, 1e-7}) {  // one bucket after backward; one; several; one per item
      train::ModelOptions o = dp(mode, 4);
      o.grad_accumulation = 2;
      o.parallel.bucket_mb = mb;
      runs.push_back(std::make_unique<DpRun>(o));
      const data::Dataset ds = quadrants(64, 16);
      losses.emplace_back();
      for (int64_t s = 0; s < 4; ++s) {
        const data::Batch batch = ds.make_batch(0, s);
        losses.back().push_back(runs.back()->model->train_step(batch.x, batch.y));
      }
    }
    for (size_t r = 1; r < runs.size(); ++r) {
      EXPECT_EQ(losses[r], losses[0]) << "run " << r;
      expect_same_parameters(*runs[0]->net, *runs[r]->net);
      EXPECT_EQ(runs[r]->model->global_step(), 2);
    }
  }
}

// The communication thread: jobs run one at a time in submission order; a job's error comes out of drain() (later
// jobs skipped), after which the thread runs jobs again.
TEST(DataParallel, CommThreadRunsJobsInOrderAndReportsErrors) {
  std::unique_ptr<parallel::Communicator> comm = parallel::make_single_communicator();
  parallel::CommThread ct(*comm);
  EXPECT_TRUE(ct.threaded());
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) ct.submit([&order, i] { order.push_back(i); });
  ct.drain();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  bool ran_after = false;
  ct.submit([] { SPORE_FAIL(ErrorCode::unavailable, "allreduce: rank 1 timed out"); });
  ct.submit([&ran_after] { ran_after = true; });
  EXPECT_NE(testing::error_of([&] { ct.drain(); }).find("rank 1 timed out"), std::string::npos);
  EXPECT_FALSE(ran_after);
  int x = 0;
  ct.call([&x] { x = 7; });
  EXPECT_EQ(x, 7);
  ct.submit([&x] { x = 8; });  // the destructor waits for it
}

// SyncBatchNorm on one process (the single communicator, one shard): the statistics summed "over the ranks" and
// divided by the global count give stand-alone BatchNorm's training within f32 rounding (reduce_sum / n against
// reduce_mean), in both modes; with more shards than ranks, or outside data parallelism, it is refused.
TEST(DataParallel, SyncBatchNormOnOneRankMatchesStandAloneBatchNorm) {
  init();
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
  for (const char* mode : {"pynative", "graph"}) {
    SCOPED_TRACE(mode);
    std::vector<std::unique_ptr<nn::Cell>> nets;
    std::vector<std::unique_ptr<train::Optimizer>> opts;
    std::vector<std::unique_ptr<train::Model>> models;
    for (bool sync : {false, true}) {
      nn::set_seed(11);
      nets.push_back(train::make_model("simplenet_bn", {1, 8, 8}, 4));
      opts.push_back(train::make_optimizer("sgd", train::trainable_names(*nets.back()), 0.05));
      train::ModelOptions o;
      o.mode = mode;
      if (sync) {
        o = dp(mode, 1);
        o.clip_norm = 0;
        o.parallel.sync_bn = true;
      }
      models.push_back(std::make_unique<train::Model>(*nets.back(), train::loss_of(ce), *opts.back(),
                                                      std::vector<std::string>{}, o));
    }
    const data::Dataset ds = quadrants(64, 16);
    for (int64_t s = 0; s < 4; ++s) {
      const data::Batch batch = ds.make_batch(0, s);
      const double a = models[0]->train_step(batch.x, batch.y), b = models[1]->train_step(batch.x, batch.y);
      EXPECT_NEAR(a, b, 1e-5 * std::abs(a)) << "step " << s;
    }
    const auto pa = nets[0]->parameters_and_names(), pb = nets[1]->parameters_and_names();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      const std::vector<double> va = pa[i].second->to_doubles(), vb = pb[i].second->to_doubles();
      for (size_t e = 0; e < va.size(); ++e)
        ASSERT_NEAR(va[e], vb[e], 1e-4 + 1e-4 * std::abs(va[e])) << pa[i].first << "[" << e << "]";
    }
  }
  EXPECT_NE(testing::error_of([] {
              train::ModelOptions o = dp("graph", 2);
              o.parallel.sync_bn = true;
              DpRun r(o);
            }).find("sync_bn needs one shard per rank"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] {
              train::ModelOptions o;
              o.parallel.sync_bn = true;
              DpRun r(o);
            }).find("needs parallel_mode data_parallel"),
            std::string::npos);
}

TEST(DataParallel, UnsupportedSettingsFailClearly) {
  init();
  DpRun three(dp("graph", 3));  // one process sums any number of shards itself
  EXPECT_EQ(three.model->grad_shards(), 3);
  EXPECT_NE(testing::error_of([] {
              train::ModelOptions o = dp("graph", 2);
              o.parallel.parallel_mode = "pipeline";
              DpRun r(o);
            }).find("stand_alone or data_parallel"),
            std::string::npos);
  // A batch the shards cannot split (10 rows, 4 shards), found before the first step.
  EXPECT_NE(testing::error_of([] {
              DpRun r(dp("graph", 4));
              r.model->train(1, quadrants(40, 10));
            }).find("do not split into grad_shards 4"),
            std::string::npos);
}

}  // namespace
}  // namespace spore
