#include "parallel/comm_thread.h"

#include "parallel/communicator.h"

namespace spore::parallel {

CommThread::CommThread(Communicator& comm) {
  if (comm.any_thread()) worker_ = std::thread([this] { loop(); });
}

CommThread::~CommThread() {
  if (!worker_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return jobs_.empty() && !busy_; });
    stop_ = true;
  }
  work_.notify_one();
  worker_.join();
}

void CommThread::submit(std::function<void()> job) {
  if (!worker_.joinable()) {
    if (error_) return;
    try {
      job();
    } catch (...) {
      error_ = std::current_exception();
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  work_.notify_one();
}

void CommThread::drain() {
  std::exception_ptr e;
  {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return jobs_.empty() && !busy_; });
    std::swap(e, error_);
  }
  if (e) std::rethrow_exception(e);
}

void CommThread::call(std::function<void()> job) {
  submit(std::move(job));
  drain();
}

void CommThread::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stop_
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    const bool skip = error_ != nullptr;
    lock.unlock();
    std::exception_ptr e;
    if (!skip) {
      try {
        job();
      } catch (...) {
        e = std::current_exception();
      }
    }
    job = nullptr;  // its captures die on this thread, outside the lock
    lock.lock();
    if (e && !error_) error_ = e;
    busy_ = false;
    if (jobs_.empty()) idle_.notify_all();
  }
}

}  // namespace spore::parallel
