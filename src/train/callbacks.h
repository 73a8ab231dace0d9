#pragma once
// Training callbacks (MindSpore's Callback): hooks Model::train calls around epochs and steps.
//
//   model.train(2, ds, {std::make_shared<LossMonitor>(50), std::make_shared<ModelCheckpoint>("ckpt", 0, 1, 3)});
#include <chrono>
#include <cstdint>
#include <deque>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>

namespace spore::train {

class Model;

// What a callback sees. `step` counts optimizer steps taken so far (1 after the first step).
struct RunContext {
  Model* model = nullptr;
  int64_t epoch = 0;   // 0-based epoch being run
  int64_t epochs = 0;  // the epoch index train() stops before
  int64_t batch = 0;   // 0-based batch index within the epoch
  int64_t batches_per_epoch = 0;
  int64_t step = 0;
  int64_t batch_size = 0;  // samples in the last batch
  double loss = 0.0;       // the last batch's loss
  double lr = 0.0;         // the learning rate the last step used
  double loss_scale = 1.0;  // loss scaling: the scale the next step uses
  bool overflow = false;    // loss scaling: the last batch's gradients overflowed (its step was skipped)
  // At epoch end: "loss" (mean training loss of the epoch), with loss scaling "loss_scale" and "overflow_steps"
  // (skipped so far), plus whatever eval results train() was given.
  std::map<std::string, double> metrics;
  bool stop = false;  // set by a callback to end training after the current step
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(RunContext&) {}
  virtual void on_epoch_begin(RunContext&) {}
  virtual void on_step_end(RunContext&) {}
  virtual void on_epoch_end(RunContext&) {}
  virtual void on_train_end(RunContext&) {}
};

// Prints "epoch E step S loss L" every `every` steps (and at each epoch end the epoch's mean loss).
class LossMonitor : public Callback {
 public:
  explicit LossMonitor(int64_t every = 1, std::ostream* out = nullptr);
  void on_step_end(RunContext& c) override;
  void on_epoch_end(RunContext& c) override;

 private:
  int64_t every_;
  std::ostream* out_;
};

// Prints each epoch's wall time and the mean time per step.
class TimeMonitor : public Callback {
 public:
  explicit TimeMonitor(std::ostream* out = nullptr);
  void on_epoch_begin(RunContext& c) override;
  void on_epoch_end(RunContext& c) override;

 private:
  std::ostream* out_;
  std::chrono::steady_clock::time_point start_;
};

// Prints the learning rate every `every` steps.
class LrLogger : public Callback {
 public:
  explicit LrLogger(int64_t every = 1, std::ostream* out = nullptr);
  void on_step_end(RunContext& c) override;

 private:
  int64_t every_;
  std::ostream* out_;
};

// Saves `<dir>/<prefix>-<epoch>_<step>.safetensors` every `every_steps` steps and/or every
// `every_epochs` epochs (0 disables either), keeping only the newest `keep_last` files (0: all).
class ModelCheckpoint : public Callback {
 public:
  ModelCheckpoint(std::string dir, int64_t every_steps = 0, int64_t every_epochs = 1, int64_t keep_last = 0,
                  std::string prefix = "ckpt");
  void on_step_end(RunContext& c) override;
  void on_epoch_end(RunContext& c) override;
  const std::deque<std::string>& saved() const { return saved_; }  // oldest first

 private:
  void save(const RunContext& c);
  std::string dir_, prefix_;
  int64_t every_steps_, every_epochs_, keep_last_;
  std::deque<std::string> saved_;
};

// Stops training when metrics[monitor] (at epoch end) has not improved by more than min_delta for
// `patience` epochs. mode "min" (losses) or "max" (accuracy).
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(std::string monitor = "loss", int64_t patience = 3, double min_delta = 0.0,
                         std::string mode = "min");
  void on_train_begin(RunContext& c) override;
  void on_epoch_end(RunContext& c) override;
  int64_t stopped_epoch() const { return stopped_epoch_; }  // -1 if it never stopped training

 private:
  std::string monitor_, mode_;
  int64_t patience_;
  double min_delta_;
  double best_ = 0;
  bool has_best_ = false;
  int64_t wait_ = 0, stopped_epoch_ = -1;
};

// A progress bar with items/s, ETA and the loss: redrawn in place on a terminal; on a pipe or file
// (isatty false) it prints a plain line every `plain_every` steps and at each epoch end instead.
class ProgressBar : public Callback {
 public:
  explicit ProgressBar(std::ostream* out = nullptr, int64_t plain_every = 50);
  // Forces the plain or terminal format (tests; the default asks isatty on stdout).
  void set_tty(bool tty) { tty_ = tty; }
  void on_epoch_begin(RunContext& c) override;
  void on_step_end(RunContext& c) override;
  void on_epoch_end(RunContext& c) override;

 private:
  std::string line(const RunContext& c) const;
  std::ostream* out_;
  int64_t plain_every_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  int64_t items_ = 0;
};

}  // namespace spore::train
