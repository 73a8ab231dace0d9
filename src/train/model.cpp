#include "train/model.h"

#include <algorithm>
#include <cmath>

#include "autodiff/autodiff.h"
#include "base/error.h"
#include "nn/layers.h"
#include "ops/ops.h"
#include "runtime/jit.h"
#include "train/checkpoint.h"

namespace spore::train {
namespace {

// Why graph mode would silently diverge from PyNative for this cell, or "" if it cannot.
std::string graph_mode_blocker(nn::Cell& cell, const std::string& prefix) {
  for (auto& [name, child] : cell.cells_and_names()) {
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    // The dropout seed is an attribute chosen on the host per call, so a cached plan would replay one mask.
    if (dynamic_cast<nn::Dropout*>(child)) return fmt::format("Dropout cell '{}' (its mask would be baked in)", full);
    std::string inner = graph_mode_blocker(*child, full);
    if (!inner.empty()) return inner;
  }
  return "";
}

}  // namespace

std::vector<std::string> trainable_names(nn::Cell& net) {
  std::vector<std::string> names;
  auto named = net.parameters_and_names();
  auto slots = net.parameter_slots();
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i]->requires_grad) names.push_back(named[i].first);
  return names;
}

LossFn loss_of(nn::Cell& loss_cell) {
  return [&loss_cell](const Tensor& logits, const Tensor& labels) { return loss_cell(logits, labels); };
}

Model::Model(nn::Cell& net, LossFn loss_fn, Optimizer& opt, std::vector<std::string> metrics, ModelOptions options)
    : net_(net), loss_fn_(std::move(loss_fn)), opt_(opt), metrics_(std::move(metrics)), opts_(std::move(options)) {
  SPORE_CHECK(loss_fn_ != nullptr, ErrorCode::invalid_argument, "train::Model: the loss function is empty");
  SPORE_CHECK(opts_.mode == "pynative" || opts_.mode == "graph", ErrorCode::invalid_argument,
              "train::Model: expected mode 'pynative' or 'graph', got '{}'", opts_.mode);
  SPORE_CHECK(opts_.grad_accumulation >= 1, ErrorCode::invalid_argument,
              "train::Model: expected grad_accumulation >= 1, got {}", opts_.grad_accumulation);
  SPORE_CHECK(opts_.clip_norm >= 0, ErrorCode::invalid_argument, "train::Model: expected clip_norm >= 0, got {}",
              opts_.clip_norm);
  for (const std::string& m : metrics_)
    SPORE_CHECK(m == "accuracy" || m == "loss", ErrorCode::invalid_argument,
                "train::Model: unknown metric '{}' (expected accuracy or loss)", m);

  // The optimizer's parameter order is the step's order; every trainable parameter must be in it.
  std::map<std::string, nn::Parameter*> trainable;
  std::vector<std::string> buffers;
  {
    auto named = net_.parameters_and_names();
    auto slots = net_.parameter_slots();
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i]->requires_grad)
        trainable[named[i].first] = slots[i];
      else
        buffers.push_back(named[i].first);
    }
  }
  for (const std::string& n : opt_.param_names()) {
    auto it = trainable.find(n);
    SPORE_CHECK(it != trainable.end(), ErrorCode::invalid_argument,
                "train::Model: the optimizer names parameter '{}', which the network has not (as trainable)", n);
    names_.push_back(n);
    slots_.push_back(it->second);
    trainable.erase(it);
  }
  SPORE_CHECK(trainable.empty(), ErrorCode::invalid_argument,
              "train::Model: trainable parameter '{}' is not in the optimizer's parameter list",
              trainable.empty() ? "" : trainable.begin()->first);

  if (opts_.mode == "graph") {
    // BatchNorm's running stats update only eagerly (nn/layers.cpp skips them under a trace).
    SPORE_CHECK(buffers.empty(), ErrorCode::unsupported,
                "train::Model: graph mode cannot update buffer '{}' (BatchNorm running stats update only in "
                "pynative mode); use mode 'pynative'",
                buffers.empty() ? "" : buffers.front());
    const std::string blocker = graph_mode_blocker(net_, "");
    SPORE_CHECK(blocker.empty(), ErrorCode::unsupported, "train::Model: graph mode does not support {}; use mode "
                "'pynative'", blocker);
    SPORE_CHECK(opts_.grad_accumulation == 1, ErrorCode::unsupported,
                "train::Model: grad_accumulation {} needs mode 'pynative' (graph mode fuses one whole step)",
                opts_.grad_accumulation);
  }
  state_ = opt_.init_state(param_values());
}

Model::~Model() = default;

std::vector<Tensor> Model::param_values() const {
  std::vector<Tensor> v;
  v.reserve(slots_.size());
  for (nn::Parameter* p : slots_) v.push_back(p->value);
  return v;
}

double Model::train_step(const Tensor& x, const Tensor& y) {
  const bool was_training = net_.training();
  net_.set_train(true);
  struct Back {
    nn::Cell& net;
    bool mode;
    ~Back() { net.set_train(mode); }
  } back{net_, was_training};
  return opts_.mode == "graph" ? train_step_graph(x, y) : train_step_pynative(x, y);
}

void Model::apply_update(std::vector<Tensor>& grads) {
  autodiff::NoGradGuard no_grad;
  if (opts_.clip_norm > 0) clip_by_global_norm(grads, opts_.clip_norm);
  last_lr_ = opt_.lr_at(step_);
  const Tensor lr = Tensor::scalar(last_lr_, DType::f32);
  const Tensor t = Tensor::scalar(static_cast<double>(step_ + 1), DType::f32);
  std::vector<Tensor> fresh = opt_.update(param_values(), grads, state_, lr, t);
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i]->value = fresh[i];
  ++step_;
}

double Model::train_step_pynative(const Tensor& x, const Tensor& y) {
  nn::LossAndGrads r = nn::value_and_grad(net_, [&] { return loss_fn_(net_(x), y); });
  std::vector<Tensor> grads;
  grads.reserve(names_.size());
  for (const std::string& n : names_) grads.push_back(r.grads.at(n));
  const double loss = r.loss.item();
  if (opts_.grad_accumulation == 1) {
    apply_update(grads);
    return loss;
  }
  autodiff::NoGradGuard no_grad;
  if (micro_ == 0) {
    accum_ = grads;
  } else {
    for (size_t i = 0; i < grads.size(); ++i) accum_[i] = ops::add(accum_[i], grads[i]);
  }
  if (++micro_ == opts_.grad_accumulation) {
    for (Tensor& g : accum_) g = ops::div(g, static_cast<double>(opts_.grad_accumulation));
    apply_update(accum_);
    accum_.clear();
    micro_ = 0;
  }
  return loss;
}

double Model::train_step_graph(const Tensor& x, const Tensor& y) {
  const size_t np = slots_.size();
  if (!step_fn_) {
    step_fn_ = std::make_unique<CompiledFunction>([this, np](std::span<const Tensor> in) {
      // Parameters are graph inputs: the cell reads the symbolic inputs through its slots while tracing.
      std::vector<Tensor> saved = param_values();
      struct Restore {
        Model* m;
        std::vector<Tensor>& saved;
        ~Restore() {
          for (size_t i = 0; i < saved.size(); ++i) m->slots_[i]->value = saved[i];
        }
      } restore{this, saved};
      for (size_t i = 0; i < np; ++i) slots_[i]->value = in[4 + i];
      Tensor logits;
      nn::LossAndGrads r = nn::value_and_grad(net_, [&] {
        logits = net_(in[0]);
        return loss_fn_(logits, in[1]);
      });
      std::vector<Tensor> grads;
      for (const std::string& n : names_) grads.push_back(r.grads.at(n));
      autodiff::NoGradGuard no_grad;
      if (opts_.clip_norm > 0) clip_by_global_norm(grads, opts_.clip_norm);
      std::vector<Tensor> params(in.begin() + 4, in.begin() + 4 + static_cast<ptrdiff_t>(np));
      std::vector<Tensor> state(in.begin() + 4 + static_cast<ptrdiff_t>(np), in.end());
      std::vector<Tensor> fresh = opt_.update(params, grads, state, in[2], in[3]);
      std::vector<Tensor> out{r.loss, logits};
      out.insert(out.end(), fresh.begin(), fresh.end());
      out.insert(out.end(), state.begin(), state.end());
      return out;
    });
  }
  last_lr_ = opt_.lr_at(step_);
  std::vector<Tensor> in{x, y, Tensor::scalar(last_lr_, DType::f32),
                         Tensor::scalar(static_cast<double>(step_ + 1), DType::f32)};
  for (nn::Parameter* p : slots_) in.push_back(p->value);
  in.insert(in.end(), state_.begin(), state_.end());
  std::vector<Tensor> out = (*step_fn_)(std::span<const Tensor>(in));
  SPORE_ASSERT(out.size() == 2 + np + state_.size(), "step plan output count");
  for (size_t i = 0; i < np; ++i) slots_[i]->value = out[2 + i];
  for (size_t i = 0; i < state_.size(); ++i) state_[i] = out[2 + np + i];
  ++step_;
  return out[0].item();
}

Tensor Model::forward_eval(const Tensor& x) {
  autodiff::NoGradGuard no_grad;
  if (opts_.mode != "graph") return net_(x);
  std::vector<nn::Parameter*> all = net_.parameter_slots();
  if (!eval_fn_) {
    eval_fn_ = std::make_unique<CompiledFunction>([this](std::span<const Tensor> in) {
      std::vector<nn::Parameter*> slots = net_.parameter_slots();
      std::vector<Tensor> saved;
      for (nn::Parameter* p : slots) saved.push_back(p->value);
      struct Restore {
        std::vector<nn::Parameter*>& slots;
        std::vector<Tensor>& saved;
        ~Restore() {
          for (size_t i = 0; i < saved.size(); ++i) slots[i]->value = saved[i];
        }
      } restore{slots, saved};
      for (size_t i = 0; i < slots.size(); ++i) slots[i]->value = in[1 + i];
      return std::vector<Tensor>{net_(in[0])};
    });
  }
  std::vector<Tensor> in{x};
  for (nn::Parameter* p : all) in.push_back(p->value);
  return (*eval_fn_)(std::span<const Tensor>(in))[0];
}

Tensor Model::predict(const Tensor& x) {
  const bool was_training = net_.training();
  net_.set_train(false);
  Tensor y;
  try {
    y = forward_eval(x);
  } catch (...) {
    net_.set_train(was_training);
    throw;
  }
  net_.set_train(was_training);
  return y;
}

std::map<std::string, double> Model::eval(const data::Dataset& ds) {
  const bool was_training = net_.training();
  net_.set_train(false);
  struct Back {
    nn::Cell& net;
    bool mode;
    ~Back() { net.set_train(mode); }
  } back{net_, was_training};
  double loss_sum = 0;
  int64_t correct = 0, n = 0;
  const std::vector<int64_t> order = ds.epoch_order(0);
  for (int64_t b = 0; b < ds.batches_per_epoch(); ++b) {
    data::Batch batch = ds.make_batch(0, b, order);
    SPORE_CHECK(batch.y.defined(), ErrorCode::invalid_argument, "train::Model::eval: the dataset has no labels");
    const Tensor logits = forward_eval(batch.x);
    const int64_t count = batch.x.dim(0);
    {
      autodiff::NoGradGuard no_grad;
      loss_sum += loss_fn_(logits, batch.y).item() * static_cast<double>(count);
      if (logits.rank() == 2 && batch.y.rank() == 1) {
        const std::vector<double> pred = ops::argmax(logits, 1).to_doubles(), truth = batch.y.to_doubles();
        for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == truth[i];
      }
    }
    n += count;
  }
  SPORE_CHECK(n > 0, ErrorCode::invalid_argument, "train::Model::eval: the dataset yields no batches");
  std::map<std::string, double> r;
  r["loss"] = loss_sum / static_cast<double>(n);
  if (std::find(metrics_.begin(), metrics_.end(), "accuracy") != metrics_.end())
    r["accuracy"] = static_cast<double>(correct) / static_cast<double>(n);
  r["samples"] = static_cast<double>(n);
  return r;
}

void Model::train(int64_t epochs, const data::Dataset& ds, std::vector<std::shared_ptr<Callback>> callbacks,
                  const data::Dataset* eval_ds) {
  SPORE_CHECK(epochs >= 0, ErrorCode::invalid_argument, "train::Model::train: expected epochs >= 0, got {}", epochs);
  SPORE_CHECK(ds.batches_per_epoch() > 0, ErrorCode::invalid_argument,
              "train::Model::train: the dataset yields no batches ({} samples)", ds.size());
  RunContext c;
  c.model = this;
  c.epochs = epoch_ + epochs;
  c.batches_per_epoch = ds.batches_per_epoch();
  c.step = step_;
  for (auto& cb : callbacks) cb->on_train_begin(c);
  while (epoch_ < c.epochs && !c.stop) {
    c.epoch = epoch_;
    c.metrics.clear();
    for (auto& cb : callbacks) cb->on_epoch_begin(c);
    const std::vector<int64_t> order = ds.epoch_order(epoch_);
    double loss_sum = 0;
    int64_t seen = 0;
    for (int64_t b = 0; b < c.batches_per_epoch && !c.stop; ++b) {
      data::Batch batch = ds.make_batch(epoch_, b, order);
      SPORE_CHECK(batch.y.defined(), ErrorCode::invalid_argument, "train::Model::train: the dataset has no labels");
      c.loss = train_step(batch.x, batch.y);
      c.batch = b;
      c.batch_size = batch.x.dim(0);
      c.step = step_;
      c.lr = last_lr_;
      loss_sum += c.loss * static_cast<double>(c.batch_size);
      seen += c.batch_size;
      for (auto& cb : callbacks) cb->on_step_end(c);
      if (c.stop && b + 1 < c.batches_per_epoch) seen = -1;  // stopped mid-epoch
    }
    if (seen < 0) break;
    ++epoch_;
    c.metrics["loss"] = loss_sum / static_cast<double>(seen);
    if (eval_ds)
      for (auto& [k, v] : eval(*eval_ds)) c.metrics["eval_" + k] = v;
    for (auto& cb : callbacks) cb->on_epoch_end(c);
  }
  for (auto& cb : callbacks) cb->on_train_end(c);
}

void Model::save_checkpoint(const std::string& path) const {
  CheckpointInfo info;
  info.step = step_;
  info.epoch = epoch_;
  info.seed = opts_.seed;
  train::save_checkpoint(path, net_, &opt_, state_, info);
}

void Model::load_checkpoint(const std::string& path) {
  CheckpointInfo info = train::load_checkpoint(path, net_, &opt_, &state_);
  step_ = info.step;
  epoch_ = info.epoch;
  accum_.clear();
  micro_ = 0;
}

}  // namespace spore::train
