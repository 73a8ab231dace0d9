// Pipeline schedules and stage splits (train/pipeline.h); the training itself is checked against one process by
// tests/parallel/pp_train_lm_test.py.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"
#include "train/pipeline.h"

namespace spore::train {
namespace {

// Every micro-batch's forward once, then its backward once, backwards in micro-batch order; returns the most
// micro-batches in flight (forward done, backward not yet).
int64_t check_schedule(const std::vector<PipeOp>& ops, int64_t micro) {
  std::vector<int> f(static_cast<size_t>(micro), 0), b(static_cast<size_t>(micro), 0);
  int64_t in_flight = 0, most = 0, next_b = 0;
  for (const PipeOp& op : ops) {
    EXPECT_GE(op.micro, 0);
    EXPECT_LT(op.micro, micro);
    if (op.forward) {
      EXPECT_EQ(f[static_cast<size_t>(op.micro)]++, 0);
      most = std::max(most, ++in_flight);
    } else {
      EXPECT_EQ(f[static_cast<size_t>(op.micro)], 1) << "backward " << op.micro << " before its forward";
      EXPECT_EQ(b[static_cast<size_t>(op.micro)]++, 0);
      EXPECT_EQ(op.micro, next_b++);
      --in_flight;
    }
  }
  EXPECT_EQ(next_b, micro);
  return most;
}

TEST(Pipeline, GpipeRunsAllForwardsThenAllBackwards) {
  const std::vector<PipeOp> ops = pipeline_schedule("gpipe", 2, 0, 4);
  const std::vector<PipeOp> want = {{true, 0},  {true, 1},  {true, 2},  {true, 3},
                                    {false, 0}, {false, 1}, {false, 2}, {false, 3}};
  EXPECT_EQ(ops, want);
  for (int64_t s = 0; s < 4; ++s) EXPECT_EQ(check_schedule(pipeline_schedule("gpipe", 4, s, 6), 6), 6);
}

TEST(Pipeline, OneFOneBKeepsAtMostStagesMinusStageInFlight) {
  // Stage 0 of 2 with 4 micro-batches: one forward of warm-up, then F/B in turn, then the last backward.
  const std::vector<PipeOp> s0 = pipeline_schedule("1f1b", 2, 0, 4);
  const std::vector<PipeOp> want0 = {{true, 0},  {true, 1}, {false, 0}, {true, 2},
                                     {false, 1}, {true, 3}, {false, 2}, {false, 3}};
  EXPECT_EQ(s0, want0);
  const std::vector<PipeOp> s1 = pipeline_schedule("1f1b", 2, 1, 4);
  const std::vector<PipeOp> want1 = {{true, 0}, {false, 0}, {true, 1}, {false, 1},
                                     {true, 2}, {false, 2}, {true, 3}, {false, 3}};
  EXPECT_EQ(s1, want1);
  for (int64_t S : {2, 3, 4, 8})
    for (int64_t M : {1, 2, 4, 7, 16})
      for (int64_t s = 0; s < S; ++s)
        EXPECT_EQ(check_schedule(pipeline_schedule("1f1b", S, s, M), M), std::min(S - s, M))
            << "S " << S << " M " << M << " stage " << s;
}

TEST(Pipeline, StagesSplitTheBlocksContiguously) {
  EXPECT_EQ(pipeline_stage_layers(4, 2, 0), (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(pipeline_stage_layers(4, 2, 1), (std::pair<int64_t, int64_t>{2, 4}));
  // 5 over 3: 2, 2, 1.
  EXPECT_EQ(pipeline_stage_layers(5, 3, 0), (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(pipeline_stage_layers(5, 3, 1), (std::pair<int64_t, int64_t>{2, 4}));
  EXPECT_EQ(pipeline_stage_layers(5, 3, 2), (std::pair<int64_t, int64_t>{4, 5}));
  EXPECT_THROW(pipeline_stage_layers(2, 3, 0), Error);
  EXPECT_THROW(pipeline_schedule("zero-bubble", 2, 0, 4), Error);
}

}  // namespace
}  // namespace spore::train
