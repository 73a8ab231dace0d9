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

// Runs fn(0..num_tasks-1) across the pool. Nested calls run serially on the calling thread.
void parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& fn);

// Splits [0, n) into chunks of `grain` elements (the last may be shorter): the task count depends
// only on n and grain, never on the thread count.
inline int64_t num_chunks(int64_t n, int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

}  // namespace spore
