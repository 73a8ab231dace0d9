#pragma once
// A tensor model (.onnx / .spore / text IR) served over KServe v2: a deploy::Session run by one worker thread that
// takes requests from a bounded queue. With dynamic batching, concurrent requests whose inputs share every dim but
// the first (a dynamic batch dim the outputs share) are merged along dim 0 into one run, at most `max_batch` rows,
// the first waiting at most `batch_delay_ms` for company, and the outputs are split back. It waits only when requests
// have overlapped lately (the last run merged several, or one arrived while it ran): a lone client never pays the
// window, concurrent clients get merged.
//
// A merged request must get the bits it would get alone. That holds only if every kernel of the model is
// batch-invariant (docs/DESIGN.md: oneDNN's GEMV and GEMM paths are not), so `auto` (the default) measures it at
// warm-up: each batch size 2..max_batch is run on rows whose single-row results are known, and batching turns on only
// if every row is bit-identical. `on` merges regardless (faster, outputs may differ in the last bits); `off` never.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "serve/kserve.h"
#include "serve/metrics.h"
#include "tensor/tensor.h"

namespace spore::deploy {
class Session;
}

namespace spore::serve {

enum class Batching { off, on, auto_ };

struct TensorModelOptions {
  std::string name;
  std::string path;
  Batching batching = Batching::auto_;
  int64_t max_batch = 8;        // rows per merged run
  double batch_delay_ms = 2.0;  // how long the first request of a batch waits for others
  int64_t max_queue = 64;       // requests waiting; one more is refused (503)
  bool warm_up = true;          // compile and run batch 1 (and, batching, every size up to max_batch) at start
};

class TensorModel {
 public:
  TensorModel(TensorModelOptions o, Metrics& metrics);  // loads the model and starts the worker (and the warm-up)
  ~TensorModel();                                       // stop(0)
  TensorModel(const TensorModel&) = delete;
  TensorModel& operator=(const TensorModel&) = delete;

  const std::string& name() const { return o_.name; }
  bool ready() const;
  void wait_ready();  // rethrows a warm-up failure
  double startup_ms() const { return startup_ms_; }
  // True when concurrent requests are merged (batching allowed, the model has a shared dynamic batch dim, and, for
  // `auto`, the warm-up found merged rows bit-identical to single runs). `batching_note()` says why or why not.
  bool batchable() const { return batchable_; }
  std::string batching_note() const;

  const std::vector<TensorMeta>& inputs() const { return inputs_; }
  const std::vector<TensorMeta>& outputs() const { return outputs_; }
  nlohmann::json metadata() const;  // KServe model metadata

  // Runs one request's inputs (in model input order, already checked by match_inputs); blocks until done. Throws
  // Error(unavailable) when the queue is full or the model is stopping.
  std::vector<Tensor> infer(std::vector<Tensor> inputs);

  // Stops taking requests; queued ones still run; joins the worker.
  void stop();

  static void declare_metrics(Metrics& m);

 private:
  struct Job {
    std::vector<Tensor> inputs;
    int64_t rows = 1;
    std::promise<std::vector<Tensor>> done;
    std::chrono::steady_clock::time_point queued;
  };
  void worker();
  void run_batch(std::vector<std::unique_ptr<Job>>& jobs);
  bool compatible(const Job& a, const Job& b) const;
  void warm();

  TensorModelOptions o_;
  Metrics& metrics_;
  std::unique_ptr<deploy::Session> session_;
  std::vector<TensorMeta> inputs_, outputs_;
  std::atomic<bool> batchable_{false};
  std::string batching_note_;  // written by the warm-up, read after ready
  double startup_ms_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_, ready_cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stopping_ = false, ready_ = false;
  // Whether requests overlap: a run is in progress, one arrived during it, how many jobs the last run merged.
  bool running_ = false, arrived_while_running_ = false;
  size_t last_jobs_ = 0;
  std::exception_ptr warm_error_;
  std::thread worker_;
};

}  // namespace spore::serve
