#pragma once
// Optimizers, learning-rate schedules and gradient clipping.
//
// Optimizers are functional and written with ops::, so a whole training step (forward, backward,
// update) can be traced into one plan: `update` takes the parameters, their gradients, the optimizer
// state and the learning rate / step count as tensors (so a cached plan does not bake them in), and
// returns new parameter values and new state. The caller (train::Model) writes them back.
//
//   train::Momentum opt(names, {.lr = 0.01, .momentum = 0.9});
//   std::vector<Tensor> state = opt.init_state(params);
//   for (...) {
//     Tensor lr = Tensor::scalar(opt.lr_at(step), DType::f32), t = Tensor::scalar(step + 1, DType::f32);
//     params = opt.update(params, grads, state, lr, t);   // state is replaced by the new state
//   }
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace spore::train {

// Per-group overrides: parameters whose dotted name matches `match` (a substring, or "*" for all) use
// these instead of the optimizer's defaults. The first matching group wins.
struct ParamGroup {
  std::string match = "*";
  double lr_scale = 1.0;
  double weight_decay = -1.0;  // < 0: the optimizer's default
};

// Learning rate as a function of the (0-based) step.
class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double lr_at(int64_t step) const = 0;
  virtual std::string describe() const = 0;
};
std::shared_ptr<LrSchedule> constant_lr(double lr);
std::shared_ptr<LrSchedule> step_lr(double lr, int64_t step_size, double gamma);      // lr * gamma^(step / size)
std::shared_ptr<LrSchedule> exponential_lr(double lr, double gamma);                 // lr * gamma^step
std::shared_ptr<LrSchedule> cosine_lr(double lr, int64_t total_steps, double min_lr = 0.0);
// Linear warm-up from 0 over `warmup_steps`, then `after` (shifted by the warm-up).
std::shared_ptr<LrSchedule> warmup_lr(int64_t warmup_steps, std::shared_ptr<LrSchedule> after);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Flat list of state tensors for `params` (e.g. Adam: m for every parameter, then v for every parameter).
  // State is f64 for f64 parameters, else f32: f16/bf16 parameters update in f32 and round once.
  virtual std::vector<Tensor> init_state(std::span<const Tensor> params) const = 0;
  // Names of the state tensors, for checkpoints ("momentum.fc1.weight"), in init_state's order.
  virtual std::vector<std::string> state_names() const = 0;
  // New parameter values; `state` is replaced by the new state. lr and step are f32 scalars
  // (step counts from 1). Written with ops:: only.
  virtual std::vector<Tensor> update(std::span<const Tensor> params, std::span<const Tensor> grads,
                                     std::vector<Tensor>& state, const Tensor& lr, const Tensor& step) const = 0;
  virtual std::string name() const = 0;

  double lr_at(int64_t step) const { return schedule_->lr_at(step); }
  void set_schedule(std::shared_ptr<LrSchedule> s) { schedule_ = std::move(s); }
  const std::vector<std::string>& param_names() const { return names_; }

 protected:
  Optimizer(std::vector<std::string> param_names, double lr, std::vector<ParamGroup> groups);
  // The group settings of parameter i.
  const ParamGroup& group_of(size_t i) const;
  std::vector<std::string> names_;
  std::vector<ParamGroup> groups_;
  std::vector<size_t> group_index_;
  std::shared_ptr<LrSchedule> schedule_;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;  // 0: plain SGD (no state)
  bool nesterov = false;
  double weight_decay = 0.0;  // L2, added to the gradient
  double dampening = 0.0;
};
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient; AdamW: decoupled, applied to the weights
};

std::unique_ptr<Optimizer> make_sgd(std::vector<std::string> names, SgdOptions o, std::vector<ParamGroup> groups = {});
std::unique_ptr<Optimizer> make_momentum(std::vector<std::string> names, SgdOptions o, std::vector<ParamGroup> groups = {});
std::unique_ptr<Optimizer> make_adam(std::vector<std::string> names, AdamOptions o, std::vector<ParamGroup> groups = {});
std::unique_ptr<Optimizer> make_adamw(std::vector<std::string> names, AdamOptions o, std::vector<ParamGroup> groups = {});
// By name: "sgd", "momentum", "adam", "adamw" (lr and weight decay; momentum 0.9 for "momentum").
std::unique_ptr<Optimizer> make_optimizer(const std::string& kind, std::vector<std::string> names, double lr,
                                          double weight_decay = 0.0);

// Scales all gradients by min(1, max_norm / global_norm) (with ops, traceable); returns the global norm.
Tensor clip_by_global_norm(std::vector<Tensor>& grads, double max_norm);

}  // namespace spore::train
