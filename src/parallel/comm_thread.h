#pragma once
// CommThread: collectives on a thread of their own, so the caller computes while they run (data parallelism's
// gradient buckets are allreduced while backward still produces the next ones, as DDP's reducer does).
//
// Jobs run one at a time in submission order. Every rank submits the same collectives in the same order (the same
// plan reports its gradients in the same order), so they pair up across ranks as collectives on one thread would;
// which thread runs a job never changes the bits it computes. While jobs may be pending the caller must reach the
// communicator only through submit/call (MPI is initialised MPI_THREAD_SERIALIZED: one thread at a time); after
// drain() it may call it directly again.
//
//   CommThread ct(comm);
//   ct.submit([&] { comm.allreduce(bucket0, n0, DType::f32); });   // returns at once
//   ...compute...
//   ct.drain();                                                      // all done; rethrows a job's error
//
// Without a thread-capable communicator (Communicator::any_thread false) submit runs the job at once on the caller.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace spore::parallel {

class Communicator;

class CommThread {
 public:
  explicit CommThread(Communicator& comm);
  ~CommThread();  // drains (dropping a pending error) and joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `job` after every job submitted before it. After a job has thrown, later jobs are skipped until drain()
  // reports the error (the communicator is unusable then anyway).
  void submit(std::function<void()> job);
  // Waits until every submitted job has run; rethrows the first error since the last drain.
  void drain();
  // submit + drain: `job` runs after the pending ones, and this returns when it has.
  void call(std::function<void()> job);
  bool threaded() const { return worker_.joinable(); }

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable work_, idle_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace spore::parallel
