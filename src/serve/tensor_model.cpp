#include "serve/tensor_model.h"

#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "deploy/random_input.h"
#include "deploy/session.h"
#include "io/model_file.h"

namespace spore::serve {

using Clock = std::chrono::steady_clock;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Rows of `parts` (same dtype, same dims after the first) stacked along dim 0.
Tensor concat_rows(const std::vector<const Tensor*>& parts) {
  Shape shape = parts[0]->shape();
  int64_t rows = 0;
  for (const Tensor* p : parts) rows += p->shape()[0];
  shape[0] = rows;
  Tensor out = Tensor::empty(shape, parts[0]->dtype());
  auto* dst = static_cast<char*>(out.raw_data());
  for (const Tensor* p : parts) {
    const Tensor c = p->contiguous();
    std::memcpy(dst, c.raw_data(), c.nbytes());
    dst += c.nbytes();
  }
  return out;
}

}  // namespace

void TensorModel::declare_metrics(Metrics& m) {
  const auto lat = Metrics::latency_buckets();
  m.declare("spore:infer_requests_total", MetricType::counter, "KServe inference requests run, by model.");
  m.declare("spore:infer_request_latency_seconds", MetricType::histogram,
            "Time from queueing an inference request to its outputs.", lat);
  m.declare("spore:infer_queue_time_seconds", MetricType::histogram, "Time an inference request waited in the queue.",
            lat);
  m.declare("spore:infer_batch_size", MetricType::histogram, "Requests merged into one model run.",
            {1, 2, 3, 4, 6, 8, 12, 16, 32, 64});
  m.declare("spore:infer_queue_length", MetricType::gauge, "Inference requests waiting.");
  m.declare("spore:infer_requests_refused_total", MetricType::counter, "Inference requests answered 503 (queue full).");
}

TensorModel::TensorModel(TensorModelOptions o, Metrics& metrics) : o_(std::move(o)), metrics_(metrics) {
  const auto t0 = Clock::now();
  deploy::SessionOptions so;
  so.max_plans = static_cast<size_t>(std::max<int64_t>(8, o_.max_batch + 2));
  session_ = std::make_unique<deploy::Session>(o_.path, so);
  for (const deploy::SessionInput& in : session_->inputs()) inputs_.push_back({in.name, in.type});
  // Output types with their symbolic dims come from the model's symbolic graph; a model that only imports per input
  // signature has none, and gets its (static) output types from the warm-up's plan instead.
  try {
    std::unique_ptr<Graph> g = io::load_model(o_.path);
    for (const Value* v : g->outputs()) outputs_.push_back({v->name, v->type});
  } catch (const Error&) {
    outputs_.clear();
  }
  // Batchable: every input's first dim is one symbol, every output's first dim is the same symbol.
  std::string sym;
  bool ok = !inputs_.empty() && !outputs_.empty();
  for (const TensorMeta& m : inputs_) {
    if (!ok || m.type.rank() == 0 || m.type.dims[0].is_static()) { ok = false; break; }
    if (sym.empty()) sym = m.type.dims[0].sym;
    ok = m.type.dims[0].sym == sym;
  }
  for (const TensorMeta& m : outputs_)
    ok = ok && m.type.rank() > 0 && !m.type.dims[0].is_static() && m.type.dims[0].sym == sym;
  batchable_ = o_.batching != Batching::off && ok;
  batching_note_ = o_.batching == Batching::off ? "off (--batching off)"
                   : ok ? "on"
                        : "off (the inputs and outputs do not share one dynamic first dim)";
  if (batchable_ && o_.batching == Batching::auto_ && !o_.warm_up) {  // nothing measured: do not merge
    batchable_ = false;
    batching_note_ = "off (auto needs the warm-up to check batch invariance)";
  }
  startup_ms_ = ms_between(t0, Clock::now());
  metrics_.set("spore:infer_queue_length", {{"model", o_.name}}, 0);
  worker_ = std::thread([this] { worker(); });
}

TensorModel::~TensorModel() { stop(); }

bool TensorModel::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_;
}

void TensorModel::wait_ready() {
  std::unique_lock<std::mutex> lock(mu_);
  ready_cv_.wait(lock, [&] { return ready_ || warm_error_ || stopping_; });
  if (warm_error_) std::rethrow_exception(warm_error_);
}

nlohmann::json TensorModel::metadata() const {
  nlohmann::json ins = nlohmann::json::array(), outs = nlohmann::json::array();
  for (const TensorMeta& m : inputs_) ins.push_back(tensor_meta_json(m));
  for (const TensorMeta& m : outputs_) outs.push_back(tensor_meta_json(m));
  return {{"name", o_.name}, {"versions", {"1"}}, {"platform", "spore"}, {"inputs", ins}, {"outputs", outs},
          {"parameters", {{"dynamic_batching", batchable_.load()}, {"max_batch_size", batchable_ ? o_.max_batch : 0}}}};
}

std::string TensorModel::batching_note() const {
  std::lock_guard<std::mutex> lock(mu_);
  return batching_note_;
}

// Runs on the worker before it takes requests: compiles (and runs once) the plans the first requests will need - batch
// 1 and, when merging is possible, every size up to max_batch. For `auto` the same runs check batch invariance: rows
// 0..b-1 of one fixed random batch, run merged, must equal each row run alone.
void TensorModel::warm() {
  const auto t0 = Clock::now();
  const int64_t top = batchable_ ? o_.max_batch : 1;
  std::vector<Tensor> full;  // per input: `top` rows
  for (size_t i = 0; i < inputs_.size(); ++i) {
    Shape s;
    for (size_t d = 0; d < inputs_[i].type.dims.size(); ++d) {
      const Dim& dim = inputs_[i].type.dims[d];
      if (dim.is_static()) s.push_back(dim.size);
      else if (d == 0) s.push_back(top);
      else SPORE_FAIL(ErrorCode::invalid_argument,
                      "model '{}': input '{}' dim {} ({}) is dynamic: the server cannot warm it up; fix it with "
                      "--input-shape when converting (spore convert)", o_.name, inputs_[i].name, d, dim.sym);
    }
    full.push_back(deploy::random_input(s, inputs_[i].type.dtype, 0, i));
  }
  auto first_rows = [&](int64_t b) {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < full.size(); ++i)
      xs.push_back(inputs_[i].type.dims[0].is_static() ? full[i] : full[i].slice(0, 0, b).contiguous());
    return xs;
  };
  auto row = [&](int64_t r) {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < full.size(); ++i)
      xs.push_back(inputs_[i].type.dims[0].is_static() ? full[i] : full[i].slice(0, r, r + 1).contiguous());
    return xs;
  };
  std::vector<std::vector<Tensor>> singles;
  for (int64_t r = 0; r < top; ++r) {
    std::vector<Tensor> xs = row(r);
    singles.push_back(session_->run(xs));
    if (outputs_.empty()) {  // no symbolic graph: the plan's output types
      const deploy::Specialization& sp = session_->specialize(xs);
      for (size_t k = 0; k < singles.back().size(); ++k)
        outputs_.push_back({sp.plan.graph().outputs()[k]->name,
                            TensorType::of(singles.back()[k].dtype(), singles.back()[k].shape())});
    }
  }
  std::string differs;
  for (int64_t b = 2; b <= top; ++b) {
    const std::vector<Tensor> ys = session_->run(first_rows(b));
    for (int64_t r = 0; r < b && differs.empty(); ++r)
      for (size_t k = 0; k < ys.size() && differs.empty(); ++k)
        if (!ys[k].slice(0, r, r + 1).contiguous().bit_equal(singles[static_cast<size_t>(r)][k]))
          differs = fmt::format("output '{}' of row {} differs between a batch of {} and a run alone", outputs_[k].name,
                                r, b);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!session_->value_inputs().empty()) {  // inputs compiled in by value: one plan per value, no merging
    batchable_ = false;
    batching_note_ = "off (the model takes some inputs as compile-time values)";
  } else if (batchable_ && !differs.empty()) {
    if (o_.batching == Batching::auto_) {
      batchable_ = false;
      batching_note_ = "off: the model is not batch-invariant (" + differs + "); --batching on merges anyway";
    } else {
      batching_note_ = "on (forced; NOT batch-invariant: " + differs + ")";
    }
  } else if (batchable_) {
    batching_note_ = fmt::format("on (max {} rows, {} ms; merged rows checked bit-identical to single runs)",
                                 o_.max_batch, o_.batch_delay_ms);
  }
  startup_ms_ += ms_between(t0, Clock::now());
}

std::vector<Tensor> TensorModel::infer(std::vector<Tensor> inputs) {
  auto job = std::make_unique<Job>();
  job->inputs = std::move(inputs);
  job->rows = job->inputs.empty() || job->inputs[0].rank() == 0 ? 1 : job->inputs[0].shape()[0];
  job->queued = Clock::now();
  std::future<std::vector<Tensor>> f = job->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) SPORE_FAIL(ErrorCode::unavailable, "model '{}' is shutting down", o_.name);
    if (static_cast<int64_t>(queue_.size()) >= o_.max_queue) {
      metrics_.add("spore:infer_requests_refused_total", {{"model", o_.name}});
      SPORE_FAIL(ErrorCode::unavailable, "model '{}': {} requests are queued (--max-queue {})", o_.name, queue_.size(),
                 o_.max_queue);
    }
    queue_.push_back(std::move(job));
    if (running_) arrived_while_running_ = true;
    metrics_.set("spore:infer_queue_length", {{"model", o_.name}}, static_cast<double>(queue_.size()));
  }
  cv_.notify_one();
  return f.get();
}

bool TensorModel::compatible(const Job& a, const Job& b) const {
  if (a.inputs.size() != b.inputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const Tensor& x = a.inputs[i];
    const Tensor& y = b.inputs[i];
    if (x.dtype() != y.dtype() || x.rank() != y.rank() || x.rank() == 0) return false;
    for (int d = 1; d < x.rank(); ++d)
      if (x.shape()[static_cast<size_t>(d)] != y.shape()[static_cast<size_t>(d)]) return false;
  }
  return true;
}

void TensorModel::worker() {
  if (o_.warm_up) {
    try {
      warm();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      warm_error_ = std::current_exception();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = warm_error_ == nullptr;
  }
  ready_cv_.notify_all();
  for (;;) {
    std::vector<std::unique_ptr<Job>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
      int64_t rows = batch[0]->rows;
      if (batchable_ && rows < o_.max_batch) {
        // Take queued compatible jobs, in arrival order, while the rows fit; wait (briefly) for more only when
        // requests have overlapped lately - with one client nothing would come, and the window would be pure delay.
        const bool overlap = last_jobs_ > 1 || arrived_while_running_ || !queue_.empty();
        const auto deadline = overlap ? batch[0]->queued + std::chrono::microseconds(
                                                               static_cast<int64_t>(o_.batch_delay_ms * 1000))
                                      : Clock::now();
        for (;;) {
          for (auto it = queue_.begin(); it != queue_.end() && rows < o_.max_batch;) {
            if (compatible(*batch[0], **it) && rows + (*it)->rows <= o_.max_batch) {
              rows += (*it)->rows;
              batch.push_back(std::move(*it));
              it = queue_.erase(it);
            } else {
              ++it;
            }
          }
          if (rows >= o_.max_batch || stopping_ ||
              !cv_.wait_until(lock, deadline, [&] { return stopping_ || !queue_.empty(); }))
            break;
        }
      }
      metrics_.set("spore:infer_queue_length", {{"model", o_.name}}, static_cast<double>(queue_.size()));
      running_ = true;
      arrived_while_running_ = false;
      last_jobs_ = batch.size();
    }
    run_batch(batch);
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
}

void TensorModel::run_batch(std::vector<std::unique_ptr<Job>>& jobs) {
  const auto start = Clock::now();
  const Labels l = {{"model", o_.name}};
  for (const auto& j : jobs) metrics_.observe("spore:infer_queue_time_seconds", l, ms_between(j->queued, start) / 1000.0);
  metrics_.observe("spore:infer_batch_size", l, static_cast<double>(jobs.size()));
  // Outputs first, metrics next, answers last: a caller that reads /metrics after its answer sees its request.
  std::vector<std::vector<Tensor>> outs(jobs.size());
  std::exception_ptr failure;
  try {
    if (jobs.size() == 1) {
      outs[0] = session_->run(jobs[0]->inputs);
    } else {
      std::vector<Tensor> merged;
      for (size_t i = 0; i < jobs[0]->inputs.size(); ++i) {
        std::vector<const Tensor*> parts;
        for (const auto& j : jobs) parts.push_back(&j->inputs[i]);
        merged.push_back(concat_rows(parts));
      }
      const std::vector<Tensor> ys = session_->run(merged);
      int64_t row = 0;
      for (size_t k = 0; k < jobs.size(); ++k) {
        for (const Tensor& y : ys) outs[k].push_back(y.slice(0, row, row + jobs[k]->rows).clone());
        row += jobs[k]->rows;
      }
    }
  } catch (...) {
    failure = std::current_exception();
  }
  const auto end = Clock::now();
  for (const auto& j : jobs) {
    metrics_.add("spore:infer_requests_total", l);
    metrics_.observe("spore:infer_request_latency_seconds", l, ms_between(j->queued, end) / 1000.0);
  }
  for (size_t k = 0; k < jobs.size(); ++k) {
    if (failure) jobs[k]->done.set_exception(failure);
    else jobs[k]->done.set_value(std::move(outs[k]));
  }
}

void TensorModel::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  ready_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

}  // namespace spore::serve
