#include "base/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "base/error.h"

namespace spore {
namespace {

thread_local bool tls_in_parallel = false;

// Spin this many pause instructions (tens of microseconds) before sleeping on a condition variable. An LLM decode step
// runs ~170 short parallel regions back to back; a futex wake-up per region (worker start, caller's wait for the end)
// cost ~20% of decode time. Spinning only bridges the gaps between regions: an idle pool sleeps.
constexpr int spin_iterations = 1 << 12;

class ThreadPool {
 public:
  ~ThreadPool() { resize(1); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      ++generation_;
      published_.store(generation_, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
    stop_ = false;
    const uint64_t g = generation_;
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, g, i] { worker_loop(g, i); });
  }

  void run(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
    if (num_tasks <= 0) return;
    if (workers_.empty() || num_tasks == 1 || tls_in_parallel) {
      bool prev = tls_in_parallel;
      tls_in_parallel = true;
      try {
        for (int64_t t = 0; t < num_tasks; ++t) fn(t);
      } catch (...) {
        tls_in_parallel = prev;
        throw;
      }
      tls_in_parallel = prev;
      return;
    }
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one parallel region at a time
    TaskRanges ranges(num_tasks, size());
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      ranges_ = &ranges;
      pending_workers_.store(static_cast<int>(workers_.size()));
      error_ = nullptr;
      ++generation_;
      published_.store(generation_, std::memory_order_release);
    }
    cv_.notify_all();
    work(0);
    for (int i = 0; i < spin_iterations && pending_workers_.load(std::memory_order_acquire) != 0; ++i) _mm_pause();
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return pending_workers_.load() == 0; });
    fn_ = nullptr;
    ranges_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work(int me) {
    tls_in_parallel = true;
    run_member_tasks(*ranges_, me, *fn_, error_);
    tls_in_parallel = false;
  }

  void worker_loop(uint64_t seen, int me) {
    for (;;) {
      for (int i = 0; i < spin_iterations && published_.load(std::memory_order_acquire) == seen; ++i) _mm_pause();
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
      }
      work(me);
      {
        std::lock_guard<std::mutex> lk(mu_);
        pending_workers_.fetch_sub(1, std::memory_order_release);
      }
      done_cv_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, job_mu_;
  std::condition_variable cv_, done_cv_;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> published_{0};  // generation_, readable without the lock (spinning workers)
  bool stop_ = false;
  const std::function<void(int64_t)>* fn_ = nullptr;
  TaskRanges* ranges_ = nullptr;
  std::atomic<int> pending_workers_{0};
  std::exception_ptr error_;
};

std::atomic<ParallelRunner> g_runner{nullptr};
std::atomic<int> g_threads{0};  // the thread count while a runner is set

ThreadPool& pool() {
  static ThreadPool p;
  static bool init = [] {
    if (g_runner.load() == nullptr) p.resize(hardware_threads());
    return true;
  }();
  (void)init;
  return p;
}

}  // namespace

int hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void set_num_threads(int n) {
  SPORE_CHECK(n >= 1 && n <= 1024, ErrorCode::invalid_argument, "thread count must be in 1..1024, got {}", n);
  if (g_runner.load() != nullptr) {
    g_threads.store(n);
    return;
  }
  if (pool().size() != n) pool().resize(n);
}

int num_threads() {
  if (g_runner.load() != nullptr) return g_threads.load();
  return pool().size();
}

TaskRanges::TaskRanges(int64_t num_tasks, int team) {
  SPORE_CHECK(num_tasks >= 0 && num_tasks < (int64_t{1} << 32) && team >= 1, ErrorCode::invalid_argument,
              "parallel_for: {} tasks for a team of {}", num_tasks, team);
  team_ = static_cast<int>(std::min<int64_t>(team, std::max<int64_t>(num_tasks, 1)));
  ranges_ = team_ <= kInline ? inline_ : new Range[static_cast<size_t>(team_)];
  for (int i = 0; i < team_; ++i) {
    const auto lo = static_cast<uint64_t>(num_tasks * i / team_), hi = static_cast<uint64_t>(num_tasks * (i + 1) / team_);
    ranges_[i].front_back.store(lo | (hi << 32), std::memory_order_relaxed);
  }
}

TaskRanges::~TaskRanges() {
  if (ranges_ != inline_) delete[] ranges_;
}

bool TaskRanges::take(Range& r, bool front, int64_t& task) {
  uint64_t v = r.front_back.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t lo = v & 0xffffffffu, hi = v >> 32;
    if (lo >= hi) return false;
    const uint64_t next = front ? ((lo + 1) | (hi << 32)) : (lo | ((hi - 1) << 32));
    if (r.front_back.compare_exchange_weak(v, next, std::memory_order_acq_rel, std::memory_order_relaxed)) {
      task = static_cast<int64_t>(front ? lo : hi - 1);
      return true;
    }
  }
}

bool TaskRanges::next(int me, int64_t& task) {
  if (me < team_ && take(ranges_[me], true, task)) return true;
  for (int k = 1; k <= team_; ++k)
    if (take(ranges_[(me + k) % team_], false, task)) return true;
  return false;
}

void run_member_tasks(TaskRanges& ranges, int me, const std::function<void(int64_t)>& fn,
                      std::exception_ptr& first_error) {
  static std::mutex error_mu;  // taken only when a task throws
  for (int64_t task = 0; ranges.next(me, task);) {
    try {
      fn(task);
    } catch (...) {
      std::lock_guard<std::mutex> lk(error_mu);
      if (!first_error) first_error = std::current_exception();
    }
  }
}

namespace {
thread_local bool tls_serial_scope = false;
}

SerialScope::SerialScope() : prev_(tls_serial_scope) { tls_serial_scope = true; }
SerialScope::~SerialScope() { tls_serial_scope = prev_; }
bool SerialScope::active() { return tls_serial_scope; }

void parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
  if (tls_serial_scope) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t);
    return;
  }
  if (ParallelRunner r = g_runner.load(); r != nullptr) {
    if (num_tasks <= 0) return;
    if (num_tasks == 1 || g_threads.load() <= 1) {
      for (int64_t t = 0; t < num_tasks; ++t) fn(t);
      return;
    }
    return r(num_tasks, fn);
  }
  pool().run(num_tasks, fn);
}

void set_parallel_runner(ParallelRunner r) {
  const int n = num_threads();
  if (r != nullptr) {
    g_threads.store(n);
    g_runner.store(r);
    pool().resize(1);  // its threads would only compete with the runner's
  } else {
    g_runner.store(nullptr);
    pool().resize(n);
  }
}

}  // namespace spore
