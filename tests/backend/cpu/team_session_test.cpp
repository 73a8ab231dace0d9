// cpu_run_in_team (cpu.h): parallel_for calls inside the body become jobs of one OpenMP team.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/cpu/cpu.h"
#include "backend/cpu/cpu_test_util.h"
#include "base/thread_pool.h"
#include "ops/ops.h"
#include "runtime/runtime.h"

namespace spore::cpu {
namespace {

using test::set_threads;
using test::ThreadsGuard;

void busy_us(int us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST(TeamSession, EveryTaskOfEveryJobRunsOnceAndTheTeamHelps) {
  init();
  ThreadsGuard guard;
  set_threads(2);
  if (!cpu_team_sessions()) GTEST_SKIP() << "team sessions need 2 CPUs (this process has " << hardware_threads() << ")";
  constexpr int kJobs = 50, kTasks = 37;
  std::vector<std::atomic<int>> runs(kJobs * kTasks);
  std::atomic<int> elsewhere{0};
  const std::thread::id me = std::this_thread::get_id();
  cpu_run_in_team([&] {
    for (int j = 0; j < kJobs; ++j) {
      parallel_for(kTasks, [&](int64_t t) {
        runs[static_cast<size_t>(j * kTasks + t)].fetch_add(1);
        if (std::this_thread::get_id() != me) elsewhere.fetch_add(1);
        // In the first job, task 0 (the caller's: it owns the front of the range) waits until another member took a
        // task: the team is really used (bounded, so a broken team fails instead of hanging).
        if (j == 0 && t == 0)
          for (int i = 0; i < 5000 && elsewhere.load() == 0; ++i) busy_us(1000);
      });
      // The job is over when parallel_for returns: every task of it ran, none of the next started.
      for (int t = 0; t < kTasks; ++t) ASSERT_EQ(runs[static_cast<size_t>(j * kTasks + t)].load(), 1) << j << "/" << t;
    }
  });
  EXPECT_GT(elsewhere.load(), 0);
}

TEST(TeamSession, NestedCallsRunOnTheTaskThread) {
  init();
  ThreadsGuard guard;
  set_threads(2);
  std::atomic<int> mismatched{0}, inner{0};
  cpu_run_in_team([&] {
    parallel_for(8, [&](int64_t) {
      const std::thread::id outer = std::this_thread::get_id();
      parallel_for(16, [&](int64_t) {
        inner.fetch_add(1);
        if (std::this_thread::get_id() != outer) mismatched.fetch_add(1);
      });
    });
  });
  EXPECT_EQ(inner.load(), 8 * 16);
  EXPECT_EQ(mismatched.load(), 0);
}

TEST(TeamSession, ErrorsReachTheCallerAndTheTeamGoesOn) {
  init();
  ThreadsGuard guard;
  set_threads(2);
  std::atomic<int> after{0};
  cpu_run_in_team([&] {
    // A task's error: rethrown by parallel_for on the body's thread, every other task still ran.
    std::atomic<int> ran{0};
    EXPECT_THROW(parallel_for(20,
                              [&](int64_t t) {
                                ran.fetch_add(1);
                                if (t == 13) throw std::runtime_error("task 13");
                              }),
                 std::runtime_error);
    EXPECT_EQ(ran.load(), 20);
    parallel_for(20, [&](int64_t) { after.fetch_add(1); });  // the team still takes jobs
  });
  EXPECT_EQ(after.load(), 20);
  // The body's own error leaves run_in_team (the team released first), and the next session works.
  EXPECT_THROW(cpu_run_in_team([] {
                 parallel_for(4, [](int64_t) {});
                 throw std::logic_error("body");
               }),
               std::logic_error);
  std::atomic<int> again{0};
  cpu_run_in_team([&] { parallel_for(10, [&](int64_t) { again.fetch_add(1); }); });
  EXPECT_EQ(again.load(), 10);
}

// Plan::run keeps steps that run a self-parallelizing oneDNN primitive out of sessions, as this count tells it.
TEST(TeamSession, CountsOneDnnPrimitivesThatUseTheTeam) {
  init();
  ThreadsGuard guard;
  // A grouped (not depthwise) conv with 8 channels per group: none of spore's own conv kernels takes it.
  const std::vector<float> xs = test::random_floats(2 * 16 * 8 * 8, 3), ws = test::random_floats(16 * 8 * 3 * 3, 4);
  const Tensor x = Tensor::from_doubles({xs.begin(), xs.end()}, {2, 16, 8, 8}, DType::f32);
  const Tensor w = Tensor::from_doubles({ws.begin(), ws.end()}, {16, 8, 3, 3}, DType::f32);
  ops::Conv2dOptions grouped;
  grouped.groups = 2;
  set_threads(2);
  int64_t before = cpu_team_primitive_calls();
  ops::relu(x);  // spore's own kernel
  EXPECT_EQ(cpu_team_primitive_calls(), before);
  ops::conv2d(x, w, std::nullopt, grouped);  // oneDNN's convolution_forward, run by the calling thread
  EXPECT_GT(cpu_team_primitive_calls(), before);
  set_threads(1);  // one thread: the primitive runs serially anyway
  before = cpu_team_primitive_calls();
  ops::conv2d(x, w, std::nullopt, grouped);
  EXPECT_EQ(cpu_team_primitive_calls(), before);
}

// Plans run by several threads at once (a server): one gets the session, the others run plainly; all finish with
// every task run once.
TEST(TeamSession, ConcurrentCallersAllFinish) {
  init();
  ThreadsGuard guard;
  set_threads(2);
  constexpr int kCallers = 3, kJobs = 40, kTasks = 9;
  std::atomic<int> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&] {
      cpu_run_in_team([&] {
        for (int j = 0; j < kJobs; ++j) parallel_for(kTasks, [&](int64_t) { total.fetch_add(1); });
      });
    });
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), kCallers * kJobs * kTasks);
}

TEST(TeamSession, OneThreadRunsTheBodyPlainly) {
  init();
  ThreadsGuard guard;
  set_threads(1);
  EXPECT_FALSE(cpu_team_sessions());
  std::atomic<int> elsewhere{0}, ran{0};
  const std::thread::id me = std::this_thread::get_id();
  cpu_run_in_team([&] {
    parallel_for(16, [&](int64_t) {
      ran.fetch_add(1);
      if (std::this_thread::get_id() != me) elsewhere.fetch_add(1);
    });
  });
  EXPECT_EQ(ran.load(), 16);
  EXPECT_EQ(elsewhere.load(), 0);
}

}  // namespace
}  // namespace spore::cpu
