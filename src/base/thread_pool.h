#pragma once
// One process-wide pool. Determinism comes from the kernels, not the pool: a kernel splits its work
// into tasks whose boundaries do not depend on the thread count, each task writes its own outputs,
// and partial results are combined in task order. The pool only decides which thread runs a task.
//
//   parallel_for(num_tasks, [&](int64_t task) { ... });   // blocks until all tasks ran
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>

namespace spore {

// Sets the number of threads (>= 1) the pool uses, including the caller. Not on hot paths.
void set_num_threads(int n);
int num_threads();
// Hardware concurrency as seen by the process (affinity mask).
int hardware_threads();

// Runs fn(0..num_tasks-1) across the pool and blocks until all ran. Nested calls run serially on the calling
// thread. How tasks reach threads (TaskRanges below): thread i owns the i-th contiguous range of the tasks and runs
// it in order; a thread that finishes early takes tasks from the back of the others' ranges.
void parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& fn);

// While one lives on a thread, parallel_for calls made by that thread run their tasks inline on it (the same
// tasks, so the same results): for work too small to pay for the team (runtime/plan.cpp picks such steps).
class SerialScope {
 public:
  SerialScope();
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;
  static bool active();

 private:
  bool prev_;
};

// Another runtime for parallel_for: the cpu backend installs OpenMP's (backend/cpu/register.cpp), the one oneDNN
// runs on, so spore's kernels and oneDNN's share one team of threads instead of two sets of threads competing for
// the cores. With a runner set the pool keeps no threads of its own; set_num_threads only records the count (the
// backend passes it on to its runtime). The runner must run every task exactly once, run nested calls serially and
// rethrow a task's exception on the caller's thread.
using ParallelRunner = void (*)(int64_t num_tasks, const std::function<void(int64_t)>& fn);
void set_parallel_runner(ParallelRunner r);

// Splits [0, n) into chunks of `grain` elements (the last may be shorter): the task count depends
// only on n and grain, never on the thread count.
inline int64_t num_chunks(int64_t n, int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

// The task hand-out of every runner: member i of a team owns tasks [n*i/team, n*(i+1)/team), takes them from the
// front, then takes what is left of the other ranges from their back. Why not a shared counter (whichever thread is
// free takes the next task): kernels of a chain split their work alike (rows, images, tile blocks), so task t of one
// call reads what task t of the previous call wrote; with owned ranges that data stays in the core that wrote it
// (docs/PERFORMANCE.md has the figures). Why not a fixed split: a core slowed by another tenant on its host core
// would hold up the team; the back-stealing evens that out. Which thread runs a task never changes results.
class TaskRanges {
 public:
  TaskRanges(int64_t num_tasks, int team);
  TaskRanges(const TaskRanges&) = delete;
  TaskRanges& operator=(const TaskRanges&) = delete;
  ~TaskRanges();
  int team() const { return team_; }
  // The next task for team member `me` (0 <= me < team): false when no task is left anywhere.
  bool next(int me, int64_t& task);

 private:
  struct Range {
    alignas(64) std::atomic<uint64_t> front_back;  // front in the low 32 bits, end (exclusive) in the high 32
  };
  bool take(Range& r, bool front, int64_t& task);
  static constexpr int kInline = 4;  // teams up to this size need no allocation (one per parallel region)
  Range inline_[kInline];
  Range* ranges_;
  int team_;
};

// A team member's share of a parallel region, as every runner runs it: fn(task) for each task `ranges` hands member
// `me`; a task that throws does not stop the others, and the region's first exception is kept in `first_error` (set
// under a lock, so members may share it) for the caller to rethrow once all members are done.
void run_member_tasks(TaskRanges& ranges, int me, const std::function<void(int64_t)>& fn,
                      std::exception_ptr& first_error);

}  // namespace spore
