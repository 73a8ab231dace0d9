#include "train/optimizer.h"

#include <fmt/format.h>

#include "ops/ops.h"

namespace spore::train {

namespace {

// The dtype an update computes in: f64 stays f64; f16/bf16 compute (and keep their state) in f32 so that
// eps, g*g and the bias corrections do not underflow or lose all precision; only the new parameter is rounded.
DType compute_dtype(DType param) { return param == DType::f64 ? DType::f64 : DType::f32; }

Tensor to_dtype(const Tensor& x, DType dt) { return x.dtype() == dt ? x : ops::cast(x, dt); }

Tensor scalar(double v, DType dt) { return Tensor::scalar(v, dt); }

void check_scalar(const Tensor& t, const char* what, const std::string& opt) {
  SPORE_CHECK(t.defined(), ErrorCode::invalid_argument, "[{}] {} is undefined", opt, what);
  SPORE_CHECK(t.rank() == 0 || t.numel() == 1, ErrorCode::shape_mismatch, "[{}] expected a scalar {}, got shape {}",
              opt, what, shape_str(t.shape()));
  SPORE_CHECK(is_floating(t.dtype()), ErrorCode::dtype_mismatch, "[{}] expected a floating {} (f32), got {}", opt,
              what, dtype_name(t.dtype()));
}

Tensor as_scalar(const Tensor& t) { return t.rank() == 0 ? t : ops::reshape(t, {}); }

// Common argument checks of update(); returns nothing, throws with the optimizer's name.
void check_update_args(const std::string& opt, const std::vector<std::string>& names, std::span<const Tensor> params,
                       std::span<const Tensor> grads, const std::vector<Tensor>& state, size_t state_per_param,
                       const Tensor& lr, const Tensor& step) {
  SPORE_CHECK(params.size() == names.size(), ErrorCode::invalid_argument,
              "[{}] expected {} parameters (one per name), got {}", opt, names.size(), params.size());
  SPORE_CHECK(grads.size() == params.size(), ErrorCode::invalid_argument, "[{}] expected {} gradients, got {}", opt,
              params.size(), grads.size());
  SPORE_CHECK(state.size() == params.size() * state_per_param, ErrorCode::invalid_argument,
              "[{}] expected {} state tensors, got {}", opt, params.size() * state_per_param, state.size());
  check_scalar(lr, "lr", opt);
  check_scalar(step, "step", opt);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    SPORE_CHECK(p.defined(), ErrorCode::invalid_argument, "[{}] parameter '{}' is undefined", opt, names[i]);
    SPORE_CHECK(is_floating(p.dtype()), ErrorCode::dtype_mismatch, "[{}] parameter '{}': expected a floating dtype, got {}",
                opt, names[i], dtype_name(p.dtype()));
    const Tensor& g = grads[i];
    if (!g.defined()) continue;  // no gradient: the parameter and its state stay as they are
    SPORE_CHECK(g.shape() == p.shape(), ErrorCode::shape_mismatch, "[{}] gradient of '{}': expected shape {}, got {}",
                opt, names[i], shape_str(p.shape()), shape_str(g.shape()));
    SPORE_CHECK(g.dtype() == p.dtype(), ErrorCode::dtype_mismatch, "[{}] gradient of '{}': expected {}, got {}", opt,
                names[i], dtype_name(p.dtype()), dtype_name(g.dtype()));
    for (size_t k = 0; k < state_per_param; ++k) {
      const Tensor& s = state[k * params.size() + i];
      SPORE_CHECK(s.defined() && s.shape() == p.shape() && s.dtype() == compute_dtype(p.dtype()),
                  ErrorCode::shape_mismatch, "[{}] state {} of '{}': expected {} {}, got {} {}", opt, k, names[i],
                  dtype_name(compute_dtype(p.dtype())), shape_str(p.shape()),
                  s.defined() ? dtype_name(s.dtype()) : "undefined", s.defined() ? shape_str(s.shape()) : "");
    }
  }
}

std::vector<Tensor> zero_state(std::span<const Tensor> params, int copies) {
  std::vector<Tensor> state;
  state.reserve(params.size() * static_cast<size_t>(copies));
  for (int k = 0; k < copies; ++k)
    for (const Tensor& p : params) state.push_back(Tensor::zeros(p.shape(), compute_dtype(p.dtype())));
  return state;
}

std::vector<std::string> prefixed(const std::vector<std::string>& names, std::initializer_list<const char*> prefixes) {
  std::vector<std::string> out;
  for (const char* pre : prefixes)
    for (const std::string& n : names) out.push_back(std::string(pre) + "." + n);
  return out;
}

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<std::string> names, SgdOptions o, std::vector<ParamGroup> groups)
      : Optimizer(std::move(names), o.lr, std::move(groups)), o_(o) {}

  std::vector<Tensor> init_state(std::span<const Tensor>) const override { return {}; }
  std::vector<std::string> state_names() const override { return {}; }
  std::string name() const override { return "sgd"; }

  std::vector<Tensor> update(std::span<const Tensor> params, std::span<const Tensor> grads, std::vector<Tensor>& state,
                             const Tensor& lr, const Tensor& step) const override {
    check_update_args(name(), names_, params, grads, state, 0, lr, step);
    std::vector<Tensor> out(params.begin(), params.end());
    for (size_t i = 0; i < params.size(); ++i) {
      if (!grads[i].defined()) continue;
      const ParamGroup& grp = group_of(i);
      const DType cdt = compute_dtype(params[i].dtype());
      const double wd = grp.weight_decay >= 0 ? grp.weight_decay : o_.weight_decay;
      const Tensor p = to_dtype(params[i], cdt);
      Tensor g = to_dtype(grads[i], cdt);
      if (wd != 0) g = ops::add(g, ops::mul(p, wd));
      Tensor lr_c = to_dtype(as_scalar(lr), cdt);
      if (grp.lr_scale != 1.0) lr_c = ops::mul(lr_c, grp.lr_scale);
      out[i] = to_dtype(ops::sub(p, ops::mul(g, lr_c)), params[i].dtype());
    }
    return out;
  }

 private:
  SgdOptions o_;
};

// PyTorch SGD with momentum: g += wd*p; buf = g on the first step, then momentum*buf + (1-dampening)*g;
// the step is g + momentum*buf with Nesterov, else buf.
class Momentum final : public Optimizer {
 public:
  Momentum(std::vector<std::string> names, SgdOptions o, std::vector<ParamGroup> groups)
      : Optimizer(std::move(names), o.lr, std::move(groups)), o_(o) {
    SPORE_CHECK(o.momentum >= 0, ErrorCode::invalid_argument, "[momentum] expected momentum >= 0, got {}", o.momentum);
    SPORE_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), ErrorCode::invalid_argument,
                "[momentum] Nesterov needs momentum > 0 and dampening 0, got momentum {} dampening {}", o.momentum,
                o.dampening);
  }

  std::vector<Tensor> init_state(std::span<const Tensor> params) const override { return zero_state(params, 1); }
  std::vector<std::string> state_names() const override { return prefixed(names_, {"momentum"}); }
  std::string name() const override { return "momentum"; }

  std::vector<Tensor> update(std::span<const Tensor> params, std::span<const Tensor> grads, std::vector<Tensor>& state,
                             const Tensor& lr, const Tensor& step) const override {
    check_update_args(name(), names_, params, grads, state, 1, lr, step);
    std::vector<Tensor> out(params.begin(), params.end());
    std::vector<Tensor> new_state = state;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!grads[i].defined()) continue;
      const ParamGroup& grp = group_of(i);
      const DType cdt = compute_dtype(params[i].dtype());
      const double wd = grp.weight_decay >= 0 ? grp.weight_decay : o_.weight_decay;
      const Tensor p = to_dtype(params[i], cdt);
      Tensor g = to_dtype(grads[i], cdt);
      if (wd != 0) g = ops::add(g, ops::mul(p, wd));
      Tensor buf = ops::mul(state[i], o_.momentum);
      buf = ops::add(buf, o_.dampening != 0 ? ops::mul(g, 1.0 - o_.dampening) : g);
      // With a zero initial buffer, momentum*0 + g is already g on the first step unless dampening scales it.
      if (o_.dampening != 0) buf = ops::where(ops::eq(to_dtype(as_scalar(step), cdt), scalar(1.0, cdt)), g, buf);
      const Tensor d = o_.nesterov ? ops::add(g, ops::mul(buf, o_.momentum)) : buf;
      Tensor lr_c = to_dtype(as_scalar(lr), cdt);
      if (grp.lr_scale != 1.0) lr_c = ops::mul(lr_c, grp.lr_scale);
      out[i] = to_dtype(ops::sub(p, ops::mul(d, lr_c)), params[i].dtype());
      new_state[i] = buf;
    }
    state = std::move(new_state);
    return out;
  }

 private:
  SgdOptions o_;
};

// Adam / AdamW: m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g^2, p -= lr * m_hat / (sqrt(v_hat) + eps) with
// m_hat = m/(1-b1^t), v_hat = v/(1-b2^t). Adam adds wd*p to g; AdamW first scales p by (1 - lr*wd).
class Adam final : public Optimizer {
 public:
  Adam(std::vector<std::string> names, AdamOptions o, std::vector<ParamGroup> groups, bool decoupled)
      : Optimizer(std::move(names), o.lr, std::move(groups)), o_(o), decoupled_(decoupled) {
    SPORE_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, ErrorCode::invalid_argument,
                "[{}] expected betas in [0, 1), got ({}, {})", name(), o.beta1, o.beta2);
    SPORE_CHECK(o.eps >= 0, ErrorCode::invalid_argument, "[{}] expected eps >= 0, got {}", name(), o.eps);
  }

  // m for every parameter, then v for every parameter.
  std::vector<Tensor> init_state(std::span<const Tensor> params) const override { return zero_state(params, 2); }
  std::vector<std::string> state_names() const override { return prefixed(names_, {"exp_avg", "exp_avg_sq"}); }
  std::string name() const override { return decoupled_ ? "adamw" : "adam"; }

  std::vector<Tensor> update(std::span<const Tensor> params, std::span<const Tensor> grads, std::vector<Tensor>& state,
                             const Tensor& lr, const Tensor& step) const override {
    check_update_args(name(), names_, params, grads, state, 2, lr, step);
    const size_t n = params.size();
    std::vector<Tensor> out(params.begin(), params.end());
    std::vector<Tensor> new_state = state;
    // The scalar factors, per compute dtype (at most two), shared by all parameters of that dtype.
    struct Factors {
      bool made = false;
      Tensor lr, inv_bc1, inv_bc2;
    } factors[2];
    auto factors_for = [&](DType cdt) -> const Factors& {
      Factors& f = factors[cdt == DType::f64 ? 1 : 0];
      if (!f.made) {
        const Tensor t = to_dtype(as_scalar(step), cdt);
        f.lr = to_dtype(as_scalar(lr), cdt);
        f.inv_bc1 = ops::reciprocal(ops::sub(scalar(1.0, cdt), ops::pow(scalar(o_.beta1, cdt), t)));
        f.inv_bc2 = ops::reciprocal(ops::sub(scalar(1.0, cdt), ops::pow(scalar(o_.beta2, cdt), t)));
        f.made = true;
      }
      return f;
    };
    for (size_t i = 0; i < n; ++i) {
      if (!grads[i].defined()) continue;
      const ParamGroup& grp = group_of(i);
      const DType cdt = compute_dtype(params[i].dtype());
      const Factors& f = factors_for(cdt);
      const double wd = grp.weight_decay >= 0 ? grp.weight_decay : o_.weight_decay;
      Tensor p = to_dtype(params[i], cdt);
      Tensor g = to_dtype(grads[i], cdt);
      Tensor lr_c = grp.lr_scale != 1.0 ? ops::mul(f.lr, grp.lr_scale) : f.lr;
      if (wd != 0 && decoupled_) p = ops::mul(p, ops::sub(scalar(1.0, cdt), ops::mul(lr_c, wd)));
      if (wd != 0 && !decoupled_) g = ops::add(g, ops::mul(p, wd));
      const Tensor m = ops::add(ops::mul(state[i], o_.beta1), ops::mul(g, 1.0 - o_.beta1));
      const Tensor v = ops::add(ops::mul(state[n + i], o_.beta2), ops::mul(ops::mul(g, g), 1.0 - o_.beta2));
      const Tensor m_hat = ops::mul(m, f.inv_bc1);
      const Tensor v_hat = ops::mul(v, f.inv_bc2);
      const Tensor d = ops::div(m_hat, ops::add(ops::sqrt(v_hat), o_.eps));
      out[i] = to_dtype(ops::sub(p, ops::mul(d, lr_c)), params[i].dtype());
      new_state[i] = m;
      new_state[n + i] = v;
    }
    state = std::move(new_state);
    return out;
  }

 private:
  AdamOptions o_;
  bool decoupled_;
};

}  // namespace

Optimizer::Optimizer(std::vector<std::string> param_names, double lr, std::vector<ParamGroup> groups)
    : names_(std::move(param_names)), groups_(std::move(groups)), schedule_(constant_lr(lr)) {
  for (const ParamGroup& g : groups_) {
    SPORE_CHECK(!g.match.empty(), ErrorCode::invalid_argument, "[optimizer] param group match must not be empty");
    SPORE_CHECK(g.lr_scale >= 0, ErrorCode::invalid_argument, "[optimizer] group '{}': expected lr_scale >= 0, got {}",
                g.match, g.lr_scale);
  }
  // Parameters no group matches use the defaults: an implicit last "*" group.
  groups_.push_back(ParamGroup{});
  group_index_.reserve(names_.size());
  for (const std::string& n : names_) {
    size_t k = 0;
    while (!(groups_[k].match == "*" || n.find(groups_[k].match) != std::string::npos)) ++k;
    group_index_.push_back(k);
  }
}

const ParamGroup& Optimizer::group_of(size_t i) const {
  SPORE_ASSERT(i < group_index_.size(), "parameter index {} of {}", i, group_index_.size());
  return groups_[group_index_[i]];
}

std::unique_ptr<Optimizer> make_sgd(std::vector<std::string> names, SgdOptions o, std::vector<ParamGroup> groups) {
  // Like torch.optim.SGD: a non-zero momentum makes it the momentum optimizer.
  if (o.momentum != 0 || o.nesterov) return make_momentum(std::move(names), o, std::move(groups));
  return std::make_unique<Sgd>(std::move(names), o, std::move(groups));
}
std::unique_ptr<Optimizer> make_momentum(std::vector<std::string> names, SgdOptions o, std::vector<ParamGroup> groups) {
  return std::make_unique<Momentum>(std::move(names), o, std::move(groups));
}
std::unique_ptr<Optimizer> make_adam(std::vector<std::string> names, AdamOptions o, std::vector<ParamGroup> groups) {
  return std::make_unique<Adam>(std::move(names), o, std::move(groups), false);
}
std::unique_ptr<Optimizer> make_adamw(std::vector<std::string> names, AdamOptions o, std::vector<ParamGroup> groups) {
  return std::make_unique<Adam>(std::move(names), o, std::move(groups), true);
}

std::unique_ptr<Optimizer> make_optimizer(const std::string& kind, std::vector<std::string> names, double lr,
                                          double weight_decay) {
  if (kind == "sgd") return make_sgd(std::move(names), {.lr = lr, .weight_decay = weight_decay});
  if (kind == "momentum")
    return make_momentum(std::move(names), {.lr = lr, .momentum = 0.9, .weight_decay = weight_decay});
  if (kind == "adam") return make_adam(std::move(names), {.lr = lr, .weight_decay = weight_decay});
  if (kind == "adamw") return make_adamw(std::move(names), {.lr = lr, .weight_decay = weight_decay});
  SPORE_FAIL(ErrorCode::invalid_argument, "[make_optimizer] unknown optimizer '{}' (expected sgd, momentum, adam, adamw)",
             kind);
}

Tensor clip_by_global_norm(std::vector<Tensor>& grads, double max_norm) {
  SPORE_CHECK(max_norm > 0, ErrorCode::invalid_argument, "[clip_by_global_norm] expected max_norm > 0, got {}",
              max_norm);
  // Accumulate in f32 (f64 if any gradient is f64) so f16 squares neither overflow nor lose the small terms.
  DType acc = DType::f32;
  for (const Tensor& g : grads)
    if (g.defined() && g.dtype() == DType::f64) acc = DType::f64;
  Tensor sum_sq;
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    SPORE_CHECK(is_floating(g.dtype()), ErrorCode::dtype_mismatch,
                "[clip_by_global_norm] gradient {}: expected a floating dtype, got {}", i, dtype_name(g.dtype()));
    const Tensor ga = to_dtype(g, acc);
    const Tensor s = ops::reduce_sum(ops::mul(ga, ga));
    sum_sq = sum_sq.defined() ? ops::add(sum_sq, s) : s;
  }
  if (!sum_sq.defined()) return Tensor::scalar(0.0, acc);
  const Tensor norm = ops::sqrt(sum_sq);
  // min(1, max_norm / norm); a zero norm gives inf, so the scale is 1.
  const Tensor scale = ops::minimum(scalar(1.0, acc), ops::div(scalar(max_norm, acc), norm));
  for (Tensor& g : grads) {
    if (!g.defined()) continue;
    g = g.dtype() == acc ? ops::mul(g, scale) : to_dtype(ops::mul(to_dtype(g, acc), scale), g.dtype());
  }
  return norm;
}

}  // namespace spore::train
