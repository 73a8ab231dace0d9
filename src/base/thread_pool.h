#pragma once
// One process-wide pool. Determinism comes from the kernels, not the pool: a kernel splits its work
// into tasks whose boundaries do not depend on the thread count, each task writes its own outputs,
// and partial results are combined in task order. The pool only decides which thread runs a task.
//
//   parallel_for(num_tasks, [&](int64_t task) { ... });   // blocks until all tasks ran
#include <cstdint>
#include <functional>

namespace spore {

// Sets the number of threads (>= 1) the pool uses, including the caller. Not on hot paths.
void set_num_threads(int n);
int num_threads();
// Hardware concurrency as seen by the process (affinity mask).
int hardware_threads();

// How a runner hands out tasks. dynamic: to whichever thread is free (balances uneven tasks). contiguous: each
// thread one contiguous range, the same split for the same task count - for kernels whose task t of one call reads
// what task t of the previous call wrote (a conv chain split by rows or images): the data stays in that thread's
// cache instead of crossing to another core (ResNet-style CNN at batch 32 on 2 threads: 12.3 -> 10.7 ms). The
// schedule never changes results: tasks write their own outputs.
enum class Schedule : uint8_t { dynamic, contiguous };

// Runs fn(0..num_tasks-1) across the pool. Nested calls run serially on the calling thread.
void parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& fn, Schedule schedule = Schedule::dynamic);

// Another runtime for parallel_for: the cpu backend installs OpenMP's (backend/cpu/register.cpp), the one oneDNN
// runs on, so spore's kernels and oneDNN's share one team of threads instead of two sets of threads competing for
// the cores. With a runner set the pool keeps no threads of its own; set_num_threads only records the count (the
// backend passes it on to its runtime). The runner must run every task exactly once, run nested calls serially and
// rethrow a task's exception on the caller's thread.
using ParallelRunner = void (*)(int64_t num_tasks, const std::function<void(int64_t)>& fn, Schedule schedule);
void set_parallel_runner(ParallelRunner r);

// Splits [0, n) into chunks of `grain` elements (the last may be shorter): the task count depends
// only on n and grain, never on the thread count.
inline int64_t num_chunks(int64_t n, int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

}  // namespace spore
