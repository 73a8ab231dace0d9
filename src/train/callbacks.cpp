#include "train/callbacks.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "base/error.h"
#include "train/model.h"

namespace spore::train {
namespace {

std::ostream& out_or_cout(std::ostream* out) { return out ? *out : std::cout; }

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02}", t / 60, t % 60);
}

}  // namespace

LossMonitor::LossMonitor(int64_t every, std::ostream* out) : every_(every), out_(out) {
  SPORE_CHECK(every > 0, ErrorCode::invalid_argument, "train::LossMonitor: expected every > 0, got {}", every);
}

void LossMonitor::on_step_end(RunContext& c) {
  if (c.step % every_ == 0)
    out_or_cout(out_) << fmt::format("epoch {} step {} loss {:.6f}\n", c.epoch + 1, c.step, c.loss) << std::flush;
}

void LossMonitor::on_epoch_end(RunContext& c) {
  out_or_cout(out_) << fmt::format("epoch {} mean loss {:.6f}\n", c.epoch + 1, c.metrics["loss"]) << std::flush;
}

TimeMonitor::TimeMonitor(std::ostream* out) : out_(out) {}

void TimeMonitor::on_epoch_begin(RunContext&) { start_ = std::chrono::steady_clock::now(); }

void TimeMonitor::on_epoch_end(RunContext& c) {
  const double s = seconds_since(start_);
  out_or_cout(out_) << fmt::format("epoch {} time {:.3f} s, {:.3f} ms/step\n", c.epoch + 1, s,
                                   1e3 * s / static_cast<double>(std::max<int64_t>(c.batches_per_epoch, 1)))
                    << std::flush;
}

LrLogger::LrLogger(int64_t every, std::ostream* out) : every_(every), out_(out) {
  SPORE_CHECK(every > 0, ErrorCode::invalid_argument, "train::LrLogger: expected every > 0, got {}", every);
}

void LrLogger::on_step_end(RunContext& c) {
  if (c.step % every_ == 0) out_or_cout(out_) << fmt::format("step {} lr {:.6g}\n", c.step, c.lr) << std::flush;
}

ModelCheckpoint::ModelCheckpoint(std::string dir, int64_t every_steps, int64_t every_epochs, int64_t keep_last,
                                 std::string prefix)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), every_steps_(every_steps), every_epochs_(every_epochs),
      keep_last_(keep_last) {
  SPORE_CHECK(every_steps >= 0 && every_epochs >= 0 && keep_last >= 0, ErrorCode::invalid_argument,
              "train::ModelCheckpoint: expected every_steps, every_epochs, keep_last >= 0, got {}, {}, {}",
              every_steps, every_epochs, keep_last);
  SPORE_CHECK(!dir_.empty(), ErrorCode::invalid_argument, "train::ModelCheckpoint: the directory is empty");
}

void ModelCheckpoint::save(const RunContext& c) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  SPORE_CHECK(!ec, ErrorCode::io_error, "train::ModelCheckpoint: cannot create '{}': {}", dir_, ec.message());
  const std::string path =
      (std::filesystem::path(dir_) / fmt::format("{}-{}_{}.safetensors", prefix_, c.model->epoch(), c.step)).string();
  if (!saved_.empty() && saved_.back() == path) return;  // step and epoch triggers on the same step
  c.model->save_checkpoint(path);
  saved_.push_back(path);
  while (keep_last_ > 0 && static_cast<int64_t>(saved_.size()) > keep_last_) {
    std::filesystem::remove(saved_.front(), ec);
    saved_.pop_front();
  }
}

void ModelCheckpoint::on_step_end(RunContext& c) {
  if (every_steps_ > 0 && c.step % every_steps_ == 0) save(c);
}

void ModelCheckpoint::on_epoch_end(RunContext& c) {
  if (every_epochs_ > 0 && c.model->epoch() % every_epochs_ == 0) save(c);
}

EarlyStopping::EarlyStopping(std::string monitor, int64_t patience, double min_delta, std::string mode)
    : monitor_(std::move(monitor)), mode_(std::move(mode)), patience_(patience), min_delta_(min_delta) {
  SPORE_CHECK(mode_ == "min" || mode_ == "max", ErrorCode::invalid_argument,
              "train::EarlyStopping: expected mode 'min' or 'max', got '{}'", mode_);
  SPORE_CHECK(patience >= 0, ErrorCode::invalid_argument, "train::EarlyStopping: expected patience >= 0, got {}",
              patience);
}

void EarlyStopping::on_train_begin(RunContext&) {
  has_best_ = false;
  wait_ = 0;
  stopped_epoch_ = -1;
}

void EarlyStopping::on_epoch_end(RunContext& c) {
  auto it = c.metrics.find(monitor_);
  SPORE_CHECK(it != c.metrics.end(), ErrorCode::invalid_argument,
              "train::EarlyStopping: metric '{}' is not reported at epoch end (pass an eval dataset for eval_*)",
              monitor_);
  const double v = it->second;
  const bool better = !has_best_ || (mode_ == "min" ? v < best_ - min_delta_ : v > best_ + min_delta_);
  if (better) {
    best_ = v;
    has_best_ = true;
    wait_ = 0;
  } else if (++wait_ > patience_) {
    c.stop = true;
    stopped_epoch_ = c.epoch;
  }
}

ProgressBar::ProgressBar(std::ostream* out, int64_t plain_every)
    : out_(out), plain_every_(plain_every), tty_(out == nullptr && ::isatty(STDOUT_FILENO) != 0) {
  SPORE_CHECK(plain_every > 0, ErrorCode::invalid_argument, "train::ProgressBar: expected plain_every > 0, got {}",
              plain_every);
}

void ProgressBar::on_epoch_begin(RunContext&) {
  start_ = std::chrono::steady_clock::now();
  items_ = 0;
}

std::string ProgressBar::line(const RunContext& c) const {
  const double s = seconds_since(start_);
  const double rate = s > 0 ? static_cast<double>(items_) / s : 0.0;
  const int64_t done = c.batch + 1, total = std::max<int64_t>(c.batches_per_epoch, 1);
  const double eta = done > 0 ? s * static_cast<double>(total - done) / static_cast<double>(done) : 0.0;
  std::string bar;
  if (tty_) {
    const int width = 24, fill = static_cast<int>(width * done / total);
    bar.reserve(width + 3);
    bar.push_back('[');
    bar.append(static_cast<size_t>(fill), '=');
    bar.append(static_cast<size_t>(width - fill), ' ');
    bar.append("] ");
  }
  return fmt::format("epoch {}/{} {}{}/{} {:.1f} items/s ETA {} loss {:.4f}", c.epoch + 1, c.epochs, bar, done,
                     total, rate, format_duration(eta), c.loss);
}

void ProgressBar::on_step_end(RunContext& c) {
  items_ += c.batch_size;
  std::ostream& o = out_or_cout(out_);
  if (tty_)
    o << "\r" << line(c) << "\x1b[K" << std::flush;
  else if ((c.batch + 1) % plain_every_ == 0)
    o << line(c) << "\n" << std::flush;
}

void ProgressBar::on_epoch_end(RunContext& c) {
  std::ostream& o = out_or_cout(out_);
  if (tty_) o << "\r" << line(c) << "\x1b[K\n";
  else if ((c.batch + 1) % plain_every_ != 0) o << line(c) << "\n";
  o << std::flush;
}

}  // namespace spore::train
