// Learning-rate schedules: pure functions of the 0-based step, evaluated on the host each step.
#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "train/optimizer.h"

namespace spore::train {

namespace {

void check_step(int64_t step, const char* schedule) {
  SPORE_CHECK(step >= 0, ErrorCode::invalid_argument, "[{}] expected step >= 0, got {}", schedule, step);
}

class ConstantLr final : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double lr_at(int64_t step) const override {
    check_step(step, "constant_lr");
    return lr_;
  }
  std::string describe() const override { return fmt::format("constant(lr={})", lr_); }

 private:
  double lr_;
};

class StepLr final : public LrSchedule {
 public:
  StepLr(double lr, int64_t size, double gamma) : lr_(lr), size_(size), gamma_(gamma) {}
  double lr_at(int64_t step) const override {
    check_step(step, "step_lr");
    return lr_ * std::pow(gamma_, static_cast<double>(step / size_));
  }
  std::string describe() const override {
    return fmt::format("step(lr={}, step_size={}, gamma={})", lr_, size_, gamma_);
  }

 private:
  double lr_;
  int64_t size_;
  double gamma_;
};

class ExponentialLr final : public LrSchedule {
 public:
  ExponentialLr(double lr, double gamma) : lr_(lr), gamma_(gamma) {}
  double lr_at(int64_t step) const override {
    check_step(step, "exponential_lr");
    return lr_ * std::pow(gamma_, static_cast<double>(step));
  }
  std::string describe() const override { return fmt::format("exponential(lr={}, gamma={})", lr_, gamma_); }

 private:
  double lr_, gamma_;
};

// Cosine annealing from lr to min_lr over total_steps, then min_lr.
class CosineLr final : public LrSchedule {
 public:
  CosineLr(double lr, int64_t total, double min_lr) : lr_(lr), total_(total), min_lr_(min_lr) {}
  double lr_at(int64_t step) const override {
    check_step(step, "cosine_lr");
    const double frac = static_cast<double>(std::min(step, total_)) / static_cast<double>(total_);
    return min_lr_ + (lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * frac));
  }
  std::string describe() const override {
    return fmt::format("cosine(lr={}, total_steps={}, min_lr={})", lr_, total_, min_lr_);
  }

 private:
  double lr_;
  int64_t total_;
  double min_lr_;
};

// step < warmup: after(0) * step / warmup (so step 0 is 0); then after(step - warmup).
class WarmupLr final : public LrSchedule {
 public:
  WarmupLr(int64_t warmup, std::shared_ptr<LrSchedule> after) : warmup_(warmup), after_(std::move(after)) {}
  double lr_at(int64_t step) const override {
    check_step(step, "warmup_lr");
    if (step < warmup_) return after_->lr_at(0) * static_cast<double>(step) / static_cast<double>(warmup_);
    return after_->lr_at(step - warmup_);
  }
  std::string describe() const override { return fmt::format("warmup(steps={}, then {})", warmup_, after_->describe()); }

 private:
  int64_t warmup_;
  std::shared_ptr<LrSchedule> after_;
};

}  // namespace

std::shared_ptr<LrSchedule> constant_lr(double lr) { return std::make_shared<ConstantLr>(lr); }

std::shared_ptr<LrSchedule> step_lr(double lr, int64_t step_size, double gamma) {
  SPORE_CHECK(step_size > 0, ErrorCode::invalid_argument, "[step_lr] expected step_size > 0, got {}", step_size);
  return std::make_shared<StepLr>(lr, step_size, gamma);
}

std::shared_ptr<LrSchedule> exponential_lr(double lr, double gamma) {
  return std::make_shared<ExponentialLr>(lr, gamma);
}

std::shared_ptr<LrSchedule> cosine_lr(double lr, int64_t total_steps, double min_lr) {
  SPORE_CHECK(total_steps > 0, ErrorCode::invalid_argument, "[cosine_lr] expected total_steps > 0, got {}",
              total_steps);
  return std::make_shared<CosineLr>(lr, total_steps, min_lr);
}

std::shared_ptr<LrSchedule> warmup_lr(int64_t warmup_steps, std::shared_ptr<LrSchedule> after) {
  SPORE_CHECK(warmup_steps >= 0, ErrorCode::invalid_argument, "[warmup_lr] expected warmup_steps >= 0, got {}",
              warmup_steps);
  SPORE_CHECK(after != nullptr, ErrorCode::invalid_argument, "[warmup_lr] the schedule after the warm-up is null");
  return std::make_shared<WarmupLr>(warmup_steps, std::move(after));
}

}  // namespace spore::train
