#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"

namespace spore {
namespace {

// Restores the pool size a test changed so later tests see the default.
struct ThreadsGuard {
  int saved = num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

TEST(ThreadPool, EveryTaskRunsExactlyOnce) {
  ThreadsGuard guard;
  for (int threads = 1; threads <= 4; ++threads) {
    set_num_threads(threads);
    EXPECT_EQ(num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 33, 64, 1000, 10007}) {
      std::vector<std::atomic<int>> hits(n);
      for (auto& h : hits) h.store(0);
      parallel_for(n, [&](int64_t t) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, n);
        hits[t].fetch_add(1);
      });
      for (int64_t t = 0; t < n; ++t) ASSERT_EQ(hits[t].load(), 1) << "threads " << threads << " n " << n << " task " << t;
    }
  }
}

TEST(ThreadPool, UsesSeveralThreadsWhenAsked) {
  ThreadsGuard guard;
  set_num_threads(4);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  // Each task waits briefly for the others so a single thread cannot drain the queue alone.
  parallel_for(4, [&](int64_t) {
    arrived.fetch_add(1);
    for (int spin = 0; spin < 2000 && arrived.load() < 4; ++spin) std::this_thread::sleep_for(std::chrono::microseconds(50));
    std::lock_guard<std::mutex> lk(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GT(ids.size(), 1u);
}

TEST(ThreadPool, ExceptionsPropagateAndThePoolSurvives) {
  ThreadsGuard guard;
  for (int threads = 1; threads <= 4; ++threads) {
    set_num_threads(threads);
    std::atomic<int> ran{0};
    try {
      parallel_for(100, [&](int64_t t) {
        ran.fetch_add(1);
        if (t == 37) SPORE_FAIL(ErrorCode::invalid_argument, "task {} failed", t);
      });
      ADD_FAILURE() << "no exception with " << threads << " threads";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_STREQ(e.what(), "task 37 failed");
    }
    EXPECT_GE(ran.load(), 1);
    EXPECT_THROW(parallel_for(8, [](int64_t t) { if (t == 0) throw std::runtime_error("x"); }), std::runtime_error);
    std::atomic<int> after{0};
    parallel_for(50, [&](int64_t) { after.fetch_add(1); });  // still usable
    EXPECT_EQ(after.load(), 50);
  }
}

TEST(ThreadPool, NestedParallelForWorks) {
  ThreadsGuard guard;
  for (int threads = 1; threads <= 4; ++threads) {
    set_num_threads(threads);
    std::vector<std::atomic<int>> hits(16 * 33);
    for (auto& h : hits) h.store(0);
    parallel_for(16, [&](int64_t i) {
      parallel_for(33, [&](int64_t j) { hits[i * 33 + j].fetch_add(1); });
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    // An exception thrown inside a nested region reaches the outer caller.
    EXPECT_THROW(parallel_for(4, [](int64_t) { parallel_for(4, [](int64_t j) { if (j == 3) throw std::logic_error("in"); }); }),
                 std::logic_error);
  }
}

TEST(ThreadPool, CallsFromSeveralThreadsAreSerializedSafely) {
  ThreadsGuard guard;
  set_num_threads(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep) parallel_for(64, [&](int64_t t) { total.fetch_add(t); });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 20 * (63 * 64 / 2));
}

TEST(ThreadPool, SetNumThreadsIsBoundsChecked) {
  ThreadsGuard guard;
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_THROW(set_num_threads(-1), Error);
  EXPECT_THROW(set_num_threads(1025), Error);
  try {
    set_num_threads(0);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("got 0"), std::string::npos) << e.what();
  }
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(2);
  EXPECT_EQ(num_threads(), 2);
  EXPECT_GE(hardware_threads(), 1);
}

// The task member `me` gets next, or -1 when none is left.
int64_t next_of(TaskRanges& r, int me) {
  int64_t t = -1;
  return r.next(me, t) ? t : -1;
}

TEST(TaskRanges, EachMemberRunsItsOwnRangeInOrderThenTakesFromTheBackOfOthers) {
  TaskRanges r(10, 3);  // ranges [0,3) [3,6) [6,10)
  ASSERT_EQ(r.team(), 3);
  EXPECT_EQ(next_of(r, 1), 3);
  EXPECT_EQ(next_of(r, 1), 4);
  EXPECT_EQ(next_of(r, 2), 6);
  EXPECT_EQ(next_of(r, 1), 5);
  // member 1's range is empty: it takes from the back of member 2's, then of member 0's
  for (int64_t want : {9, 8, 7, 2}) EXPECT_EQ(next_of(r, 1), want);
  EXPECT_EQ(next_of(r, 0), 0);
  EXPECT_EQ(next_of(r, 2), 1);  // member 2 takes the last one from member 0's back
  for (int me : {0, 1, 2}) EXPECT_EQ(next_of(r, me), -1);
}

TEST(TaskRanges, TeamIsCappedByTheTaskCountAndEveryTaskIsHandedOutOnceUnderContention) {
  EXPECT_EQ(TaskRanges(2, 8).team(), 2);
  EXPECT_EQ(TaskRanges(0, 4).team(), 1);
  int64_t t = 0;
  EXPECT_FALSE(TaskRanges(0, 4).next(0, t));
  for (int team : {1, 2, 3, 5}) {
    for (int64_t n : {1, 2, 7, 100, 5000}) {
      TaskRanges r(n, team);
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (auto& h : hits) h.store(0);
      std::vector<std::thread> members;
      for (int me = 0; me < team + 1; ++me)  // one more caller than members: it only takes from the backs
        members.emplace_back([&, me] {
          for (int64_t task = 0; r.next(me, task);) hits[static_cast<size_t>(task)].fetch_add(1);
        });
      for (auto& m : members) m.join();
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "team " << team << " n " << n;
    }
  }
  EXPECT_THROW(TaskRanges(10, 0), Error);
}

TEST(ThreadPool, NumChunksDependsOnlyOnSizeAndGrain) {
  EXPECT_EQ(num_chunks(0, 16), 0);
  EXPECT_EQ(num_chunks(-5, 16), 0);
  EXPECT_EQ(num_chunks(1, 16), 1);
  EXPECT_EQ(num_chunks(16, 16), 1);
  EXPECT_EQ(num_chunks(17, 16), 2);
  EXPECT_EQ(num_chunks(1000, 7), 143);
}

}  // namespace
}  // namespace spore
