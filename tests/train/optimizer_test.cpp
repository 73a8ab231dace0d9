#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "ops/ops.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"
#include "test_util.h"
#include "train/optimizer.h"

namespace spore::train {
namespace {

using Vec = std::vector<double>;

// Deterministic, never-zero parameter and gradient values (the gradient varies with the step).
Vec param_values(size_t n, int salt) {
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.5 * std::cos(0.9 * static_cast<double>(i) + salt) + 0.05;
  return v;
}
Vec grad_values(size_t n, int step, int salt) {
  Vec v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(1.3 * static_cast<double>(i) + 0.7 * step + salt) + 0.1;
  return v;
}
double rounded_f32(double x) { return static_cast<double>(static_cast<float>(x)); }

Tensor lr_tensor(double lr) { return Tensor::scalar(lr, DType::f32); }
Tensor step_tensor(int step) { return Tensor::scalar(step, DType::f32); }

// ---- plain double references (PyTorch's formulas, per element)
struct RefMomentum {
  double lr, momentum, dampening, wd;
  bool nesterov;
  Vec buf;
  void step(Vec& p, const Vec& g0, int t) {
    if (buf.empty()) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = g0[i] + wd * p[i];
      buf[i] = t == 1 ? g : momentum * buf[i] + (1 - dampening) * g;
      p[i] -= lr * (nesterov ? g + momentum * buf[i] : buf[i]);
    }
  }
};
struct RefAdam {
  double lr, b1, b2, eps, wd;
  bool decoupled;
  Vec m, v;
  void step(Vec& p, const Vec& g0, int t) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = g0[i];
      if (decoupled) p[i] *= 1 - lr * wd;
      else g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      p[i] -= (lr / bc1) * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
  }
};

void expect_close(const Tensor& t, const Vec& want, double rel, const std::string& what) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(t.item_at(static_cast<int64_t>(i)), want[i], rel * (std::abs(want[i]) + 1e-3)) << what << "[" << i << "]";
}

// Runs 3 steps of `opt` on two parameters (sizes 7 and 33, so not SIMD multiples) of dtype `dt` and
// checks each step against `ref` (one reference object per parameter).
template <typename Ref>
void check_three_steps(Optimizer& opt, std::vector<Ref> refs, DType dt, double lr, double rel) {
  const std::vector<size_t> sizes{7, 33};
  std::vector<Vec> ref_p{param_values(7, 0), param_values(33, 1)};
  std::vector<Tensor> params;
  for (size_t k = 0; k < 2; ++k) {
    // The reference starts from the values the parameter actually holds (rounded to dt).
    params.push_back(Tensor::from_doubles(ref_p[k], {static_cast<int64_t>(sizes[k])}, dt));
    ref_p[k] = params[k].to_doubles();
  }
  std::vector<Tensor> state = opt.init_state(params);
  ASSERT_EQ(state.size(), opt.state_names().size());
  for (int t = 1; t <= 3; ++t) {
    std::vector<Tensor> grads;
    for (size_t k = 0; k < 2; ++k) {
      grads.push_back(Tensor::from_doubles(grad_values(sizes[k], t, static_cast<int>(k)), {static_cast<int64_t>(sizes[k])}, dt));
      refs[k].step(ref_p[k], grads[k].to_doubles(), t);
    }
    params = opt.update(params, grads, state, lr_tensor(lr), step_tensor(t));
    for (size_t k = 0; k < 2; ++k) {
      ASSERT_EQ(params[k].dtype(), dt);
      expect_close(params[k], ref_p[k], rel, fmt::format("{} {} step {} param {}", opt.name(), dtype_name(dt), t, k));
      ref_p[k] = params[k].to_doubles();  // resync, so each step is checked on its own rounding
    }
  }
}

double tol_for(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-12;
    case DType::f32: return 2e-6;
    case DType::f16: return 2e-3;
    default: return 1.6e-2;
  }
}

const DType kFloatTypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16};

TEST(Optimizer, SgdFirstStepsMatchReference) {
  for (DType dt : kFloatTypes) {
    for (double wd : {0.0, 0.1}) {
      auto opt = make_sgd({"a", "b"}, {.lr = 0.05, .weight_decay = wd});
      EXPECT_EQ(opt->name(), "sgd");
      EXPECT_TRUE(opt->state_names().empty());
      const double lr = rounded_f32(0.05);
      // Plain SGD is momentum-free SGD: the momentum reference with momentum 0 has the same update.
      check_three_steps(*opt, std::vector<RefMomentum>(2, {lr, 0.0, 0.0, wd, false}), dt, 0.05, tol_for(dt));
    }
  }
}

TEST(Optimizer, MomentumFirstStepsMatchReference) {
  struct Case {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (DType dt : kFloatTypes) {
    for (Case c : {Case{0.9, 0.0, 0.0, false}, Case{0.9, 0.0, 0.01, true}, Case{0.8, 0.3, 0.05, false}}) {
      auto opt = make_momentum({"a", "b"}, {.lr = 0.1, .momentum = c.momentum, .nesterov = c.nesterov,
                                            .weight_decay = c.wd, .dampening = c.dampening});
      EXPECT_EQ(opt->name(), "momentum");
      const double lr = rounded_f32(0.1);
      check_three_steps(*opt, std::vector<RefMomentum>(2, {lr, c.momentum, c.dampening, c.wd, c.nesterov}), dt, 0.1,
                        tol_for(dt));
    }
  }
}

TEST(Optimizer, AdamAndAdamWFirstStepsMatchReference) {
  for (DType dt : kFloatTypes) {
    for (bool decoupled : {false, true}) {
      for (double wd : {0.0, 0.1}) {
        AdamOptions o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-6, .weight_decay = wd};
        auto opt = decoupled ? make_adamw({"a", "b"}, o) : make_adam({"a", "b"}, o);
        EXPECT_EQ(opt->name(), decoupled ? "adamw" : "adam");
        const double lr = rounded_f32(0.01);
        // beta and eps are constants of the parameter's compute dtype (f32 below f64).
        auto c = [&](double x) { return dt == DType::f64 ? x : rounded_f32(x); };
        check_three_steps(*opt, std::vector<RefAdam>(2, {lr, c(0.9), c(0.99), c(1e-6), c(wd), decoupled}), dt, 0.01,
                          dt == DType::f32 ? 1e-5 : tol_for(dt));
      }
    }
  }
}

TEST(Optimizer, StateLayoutAndNames) {
  auto adam = make_adam({"fc1.weight", "fc1.bias"}, {});
  EXPECT_EQ(adam->state_names(), (std::vector<std::string>{"exp_avg.fc1.weight", "exp_avg.fc1.bias",
                                                           "exp_avg_sq.fc1.weight", "exp_avg_sq.fc1.bias"}));
  const std::vector<Tensor> params{Tensor::zeros({2, 3}, DType::bf16), Tensor::zeros({3}, DType::f64)};
  const auto state = adam->init_state(params);
  ASSERT_EQ(state.size(), 4u);
  // Low-precision parameters keep their state in f32.
  EXPECT_EQ(state[0].dtype(), DType::f32);
  EXPECT_EQ(state[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(state[3].dtype(), DType::f64);
  auto mom = make_momentum({"fc1.weight"}, {.momentum = 0.9});
  EXPECT_EQ(mom->state_names(), (std::vector<std::string>{"momentum.fc1.weight"}));
}

TEST(Optimizer, MakeOptimizerByName) {
  for (const char* kind : {"sgd", "momentum", "adam", "adamw"}) {
    auto opt = make_optimizer(kind, {"w"}, 0.25, 0.01);
    EXPECT_EQ(opt->name(), kind);
    EXPECT_EQ(opt->lr_at(0), 0.25);
  }
  EXPECT_EQ(make_sgd({"w"}, {.momentum = 0.5})->name(), "momentum");
  const std::string m = testing::error_of([] { make_optimizer("rmsprop", {"w"}, 0.1); });
  EXPECT_NE(m.find("unknown optimizer 'rmsprop'"), std::string::npos) << m;
}

TEST(Optimizer, ParamGroupsFirstMatchWins) {
  // fc1.bias matches both "fc1" and "bias": the first group ("fc1") wins. "head.bias" only matches "bias".
  auto opt = make_sgd({"fc1.weight", "fc1.bias", "head.bias", "head.weight"}, {.lr = 1.0, .weight_decay = 0.5},
                      {{.match = "fc1", .lr_scale = 2.0}, {.match = "bias", .lr_scale = 0.0},
                       {.match = "head", .lr_scale = 1.0, .weight_decay = 0.0}});
  std::vector<Tensor> params, grads;
  for (int i = 0; i < 4; ++i) {
    params.push_back(Tensor::from_doubles({1.0, -2.0}, {2}, DType::f64));
    grads.push_back(Tensor::from_doubles({0.25, 0.5}, {2}, DType::f64));
  }
  std::vector<Tensor> state;
  const auto out = opt->update(params, grads, state, lr_tensor(1.0), step_tensor(1));
  // p - lr*scale*(g + wd*p)
  EXPECT_EQ(out[0].to_doubles(), (Vec{1 - 2 * (0.25 + 0.5), -2 - 2 * (0.5 - 1.0)}));
  EXPECT_EQ(out[1].to_doubles(), out[0].to_doubles());
  EXPECT_EQ(out[2].to_doubles(), (Vec{1.0, -2.0}));                  // lr_scale 0
  EXPECT_EQ(out[3].to_doubles(), (Vec{1 - 0.25, -2 - 0.5}));          // weight decay overridden to 0

  // "*" matches everything, so later groups never apply.
  auto all = make_sgd({"a.bias"}, {.lr = 1.0}, {{.match = "*", .lr_scale = 0.5}, {.match = "bias", .lr_scale = 0.0}});
  const auto out2 = all->update(std::span(params).first(1), std::span(grads).first(1), state, lr_tensor(1.0), step_tensor(1));
  EXPECT_EQ(out2[0].to_doubles(), (Vec{1 - 0.125, -2 - 0.25}));
}

TEST(Optimizer, UndefinedGradientLeavesParameterAndState) {
  auto opt = make_adam({"a", "b"}, {.lr = 0.1});
  const std::vector<Tensor> params{Tensor::from_doubles({1, 2}, {2}, DType::f32), Tensor::from_doubles({3}, {1}, DType::f32)};
  auto state = opt->init_state(params);
  const Tensor m_b = state[1];
  const std::vector<Tensor> grads{Tensor::from_doubles({1, -1}, {2}, DType::f32), Tensor()};
  const auto out = opt->update(params, grads, state, lr_tensor(0.1), step_tensor(1));
  EXPECT_NEAR(out[0].item_at(0), 0.9, 1e-6);
  EXPECT_NEAR(out[0].item_at(1), 2.1, 1e-6);
  EXPECT_TRUE(out[1].bit_equal(params[1]));
  EXPECT_TRUE(state[1].bit_equal(m_b));
}

TEST(Optimizer, BadArgumentsAreClearErrors) {
  auto opt = make_momentum({"w"}, {.momentum = 0.9});
  const std::vector<Tensor> p{Tensor::zeros({3}, DType::f32)};
  auto state = opt->init_state(p);
  auto err = [&](std::vector<Tensor> params, std::vector<Tensor> grads, Tensor lr = lr_tensor(0.1)) {
    return testing::error_of([&] { opt->update(params, grads, state, lr, step_tensor(1)); });
  };
  std::string m = err(p, {Tensor::zeros({4}, DType::f32)});
  EXPECT_NE(m.find("[momentum] gradient of 'w': expected shape [3], got [4]"), std::string::npos) << m;
  m = err(p, {Tensor::zeros({3}, DType::f16)});
  EXPECT_NE(m.find("expected f32, got f16"), std::string::npos) << m;
  m = err(p, {});
  EXPECT_NE(m.find("expected 1 gradients, got 0"), std::string::npos) << m;
  m = err(p, p, Tensor::zeros({2}, DType::f32));
  EXPECT_NE(m.find("expected a scalar lr"), std::string::npos) << m;
  m = err({Tensor::zeros({3}, DType::i32)}, {Tensor::zeros({3}, DType::i32)});
  EXPECT_NE(m.find("expected a floating dtype, got i32"), std::string::npos) << m;
  m = testing::error_of([] { make_adam({"w"}, {.beta1 = 1.0}); });
  EXPECT_NE(m.find("expected betas in [0, 1)"), std::string::npos) << m;
}

TEST(LrSchedule, ValuesAtChosenSteps) {
  EXPECT_EQ(constant_lr(0.3)->lr_at(0), 0.3);
  EXPECT_EQ(constant_lr(0.3)->lr_at(1000), 0.3);
  auto st = step_lr(1.0, 10, 0.5);
  EXPECT_EQ(st->lr_at(0), 1.0);
  EXPECT_EQ(st->lr_at(9), 1.0);
  EXPECT_EQ(st->lr_at(10), 0.5);
  EXPECT_EQ(st->lr_at(25), 0.25);
  auto ex = exponential_lr(2.0, 0.5);
  EXPECT_EQ(ex->lr_at(0), 2.0);
  EXPECT_EQ(ex->lr_at(3), 0.25);
  auto cs = cosine_lr(1.0, 100, 0.1);
  EXPECT_DOUBLE_EQ(cs->lr_at(0), 1.0);
  EXPECT_DOUBLE_EQ(cs->lr_at(50), 0.55);
  EXPECT_DOUBLE_EQ(cs->lr_at(25), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4)));
  EXPECT_DOUBLE_EQ(cs->lr_at(100), 0.1);
  EXPECT_DOUBLE_EQ(cs->lr_at(500), 0.1);
  auto wu = warmup_lr(4, cosine_lr(1.0, 10));
  EXPECT_EQ(wu->lr_at(0), 0.0);
  EXPECT_EQ(wu->lr_at(1), 0.25);
  EXPECT_EQ(wu->lr_at(3), 0.75);
  EXPECT_DOUBLE_EQ(wu->lr_at(4), 1.0);
  EXPECT_DOUBLE_EQ(wu->lr_at(9), 0.5);
  EXPECT_EQ(warmup_lr(0, constant_lr(0.2))->lr_at(0), 0.2);
  EXPECT_EQ(wu->describe(), "warmup(steps=4, then cosine(lr=1, total_steps=10, min_lr=0))");

  auto opt = make_sgd({"w"}, {.lr = 0.1});
  opt->set_schedule(step_lr(0.1, 2, 0.1));
  EXPECT_DOUBLE_EQ(opt->lr_at(2), 0.01);

  std::string m = testing::error_of([] { step_lr(0.1, 0, 0.5); });
  EXPECT_NE(m.find("[step_lr] expected step_size > 0, got 0"), std::string::npos) << m;
  m = testing::error_of([] { cosine_lr(0.1, -1); });
  EXPECT_NE(m.find("expected total_steps > 0"), std::string::npos) << m;
  m = testing::error_of([] { warmup_lr(-2, constant_lr(1)); });
  EXPECT_NE(m.find("expected warmup_steps >= 0"), std::string::npos) << m;
  m = testing::error_of([] { constant_lr(1)->lr_at(-1); });
  EXPECT_NE(m.find("expected step >= 0, got -1"), std::string::npos) << m;
}

TEST(ClipByGlobalNorm, ScalesOnlyAboveTheLimit) {
  std::vector<Tensor> g{Tensor::from_doubles({3.0}, {1}, DType::f32), Tensor::from_doubles({0.0, 4.0}, {2}, DType::f32)};
  Tensor norm = clip_by_global_norm(g, 1.0);
  EXPECT_NEAR(norm.item(), 5.0, 1e-6);
  EXPECT_NEAR(g[0].item_at(0), 0.6, 1e-6);
  EXPECT_NEAR(g[1].item_at(1), 0.8, 1e-6);

  std::vector<Tensor> h{Tensor::from_doubles({3.0}, {1}, DType::f64), Tensor::from_doubles({0.0, 4.0}, {2}, DType::f16), Tensor()};
  norm = clip_by_global_norm(h, 10.0);
  EXPECT_EQ(norm.dtype(), DType::f64);
  EXPECT_EQ(norm.item(), 5.0);
  EXPECT_EQ(h[0].to_doubles(), (Vec{3.0}));
  EXPECT_EQ(h[1].dtype(), DType::f16);
  EXPECT_EQ(h[1].to_doubles(), (Vec{0.0, 4.0}));
  EXPECT_FALSE(h[2].defined());

  // A large bf16 gradient (1000 elements): the norm is accumulated in f32 and the result is rounded once.
  Vec big(1000);
  double ss = 0;
  for (size_t i = 0; i < big.size(); ++i) big[i] = 10 + static_cast<double>(i % 7), ss += big[i] * big[i];
  std::vector<Tensor> b{Tensor::from_doubles(big, {1000}, DType::bf16)};
  norm = clip_by_global_norm(b, 2.0);
  EXPECT_NEAR(norm.item(), std::sqrt(ss), 1e-3 * std::sqrt(ss));
  EXPECT_NEAR(b[0].item_at(5), big[5] * 2.0 / std::sqrt(ss), 1e-2 * big[5] * 2.0 / std::sqrt(ss));

  std::vector<Tensor> zero{Tensor::zeros({3}, DType::f32)};
  EXPECT_EQ(clip_by_global_norm(zero, 1.0).item(), 0.0);
  EXPECT_EQ(zero[0].to_doubles(), (Vec{0, 0, 0}));
  const std::string m = testing::error_of([&] { clip_by_global_norm(g, 0.0); });
  EXPECT_NE(m.find("[clip_by_global_norm] expected max_norm > 0, got 0"), std::string::npos) << m;
}

// One traced training update: inputs are params, grads, state, lr, step; outputs are new params and state.
std::vector<Tensor> traced_update(const Optimizer& opt, size_t n_params, std::span<const Tensor> in, bool clip) {
  const size_t n_state = in.size() - 2 * n_params - 2;
  std::vector<Tensor> params(in.begin(), in.begin() + n_params);
  std::vector<Tensor> grads(in.begin() + n_params, in.begin() + 2 * n_params);
  std::vector<Tensor> state(in.begin() + 2 * n_params, in.begin() + 2 * n_params + n_state);
  if (clip) clip_by_global_norm(grads, 0.5);
  std::vector<Tensor> out = opt.update(params, grads, state, in[in.size() - 2], in[in.size() - 1]);
  out.insert(out.end(), state.begin(), state.end());
  return out;
}

TEST(Optimizer, TracedUpdateIsBitIdenticalToEager) {
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    std::vector<std::unique_ptr<Optimizer>> opts;
    opts.push_back(make_sgd({"a", "b"}, {.lr = 0.1, .weight_decay = 0.01}));
    opts.push_back(make_momentum({"a", "b"}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .dampening = 0.2}));
    opts.push_back(make_momentum({"a", "b"}, {.lr = 0.1, .momentum = 0.9, .nesterov = true}));
    opts.push_back(make_adam({"a", "b"}, {.lr = 0.01, .weight_decay = 0.01}, {{.match = "b", .lr_scale = 0.5}}));
    opts.push_back(make_adamw({"a", "b"}, {.lr = 0.01, .weight_decay = 0.1}));
    for (const auto& opt : opts) {
      for (bool clip : {false, true}) {
        const size_t n = 2;
        CompiledFunction f([&](std::span<const Tensor> in) { return traced_update(*opt, n, in, clip); });
        std::vector<Tensor> params{Tensor::from_doubles(param_values(7, 0), {7}, dt),
                                   Tensor::from_doubles(param_values(1000, 1), {10, 100}, dt)};
        std::vector<Tensor> state_e = opt->init_state(params), state_j = state_e;
        std::vector<Tensor> params_e = params, params_j = params;
        for (int t = 1; t <= 3; ++t) {
          const std::vector<Tensor> grads{Tensor::from_doubles(grad_values(7, t, 0), {7}, dt),
                                          Tensor::from_doubles(grad_values(1000, t, 1), {10, 100}, dt)};
          const Tensor lr = lr_tensor(opt->lr_at(t - 1)), step = step_tensor(t);
          // Eager.
          std::vector<Tensor> in_e = params_e;
          in_e.insert(in_e.end(), grads.begin(), grads.end());
          in_e.insert(in_e.end(), state_e.begin(), state_e.end());
          in_e.push_back(lr);
          in_e.push_back(step);
          std::vector<Tensor> out_e = traced_update(*opt, n, in_e, clip);
          // Compiled.
          std::vector<Tensor> in_j = params_j;
          in_j.insert(in_j.end(), grads.begin(), grads.end());
          in_j.insert(in_j.end(), state_j.begin(), state_j.end());
          in_j.push_back(lr);
          in_j.push_back(step);
          std::vector<Tensor> out_j = f(in_j);
          ASSERT_EQ(out_e.size(), out_j.size());
          for (size_t k = 0; k < out_e.size(); ++k)
            EXPECT_TRUE(out_e[k].bit_equal(out_j[k]))
                << opt->name() << " " << dtype_name(dt) << " clip " << clip << " step " << t << " output " << k;
          params_e.assign(out_e.begin(), out_e.begin() + n);
          state_e.assign(out_e.begin() + n, out_e.end());
          params_j.assign(out_j.begin(), out_j.begin() + n);
          state_j.assign(out_j.begin() + n, out_j.end());
        }
        EXPECT_EQ(f.cache_size(), 1u) << opt->name();  // lr and step are inputs, so no retrace per step
      }
    }
  }
}

TEST(Optimizer, LowersAQuadraticLoss) {
  // loss(p) = sum(a * (p - c)^2), gradient 2a(p - c); a varies per element so the problem is ill-conditioned.
  const int64_t n = 33;
  Vec a(n), c(n);
  for (int64_t i = 0; i < n; ++i) a[i] = 0.5 + static_cast<double>(i % 5) * 0.25, c[i] = std::sin(0.3 * i) + 0.2;
  const Tensor ta = Tensor::from_doubles(a, {n}, DType::f32), tc = Tensor::from_doubles(c, {n}, DType::f32);
  auto loss_of = [&](const Tensor& p) { return ops::reduce_sum(ops::mul(ta, ops::mul(ops::sub(p, tc), ops::sub(p, tc)))).item(); };
  std::vector<std::unique_ptr<Optimizer>> opts;
  opts.push_back(make_sgd({"p"}, {.lr = 0.1}));
  opts.push_back(make_momentum({"p"}, {.lr = 0.05, .momentum = 0.9}));
  opts.push_back(make_adam({"p"}, {.lr = 0.05}));
  opts.push_back(make_adamw({"p"}, {.lr = 0.05, .weight_decay = 1e-4}));
  for (const auto& opt : opts) {
    std::vector<Tensor> params{Tensor::zeros({n}, DType::f32)};
    auto state = opt->init_state(params);
    const double initial = loss_of(params[0]);
    for (int t = 1; t <= 100; ++t) {
      const std::vector<Tensor> grads{ops::mul(ops::mul(ta, ops::sub(params[0], tc)), 2.0)};
      params = opt->update(params, grads, state, lr_tensor(opt->lr_at(t - 1)), step_tensor(t));
    }
    const double final_loss = loss_of(params[0]);
    EXPECT_LT(final_loss, 0.01 * initial) << opt->name() << ": " << initial << " -> " << final_loss;
  }
}

}  // namespace
}  // namespace spore::train
