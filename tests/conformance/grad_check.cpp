// Gradient conformance: for every conformance case of a differentiable op, in f64 on the reference
// backend, the autodiff gradient of L = sum_k sum(out_k * w_k) (random w) must match central finite
// differences, along a random direction per input and at a few single elements.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "autodiff/autodiff.h"
#include "base/rng.h"
#include "conformance/harness.h"
#include "ops/ops.h"
#include "ops/registry.h"
#include "runtime/runtime.h"

namespace spore::conformance {
namespace {

constexpr double kEps = 1e-6;
constexpr double kTol = 1e-6;  // relative to the size of the terms of the directional derivative
constexpr int kElementChecks = 3;

const CaseList& grad_cases() {
  static const CaseList cases = [] {
    CaseList all, keep;
    ErrorList errors;
    add_structure_cases(all, errors);
    add_elementwise_cases(all, errors);
    add_binary_cases(all, errors);
    add_reduce_cases(all, errors);
    add_linalg_cases(all, errors);
    add_conv_cases(all, errors);
    add_norm_cases(all, errors);
    add_shape_cases(all, errors);
    add_attention_cases(all, errors);
    add_rnn_cases(all, errors);
    add_index_cases(all, errors);
    for (auto& c : all) {
      const OpDef& def = op_registry().get(c.op);
      if (def.traits.has(Trait::no_grad) || def.traits.has(Trait::graph_structure)) continue;
      if (!def.grad || !def.dtypes.has(DType::f64)) continue;
      if (c.dtypes && !c.dtypes->has(DType::f64)) continue;  // a case written for integer or low-precision dtypes
      keep.push_back(std::move(c));
    }
    return keep;
  }();
  return cases;
}

std::vector<size_t> grad_params() {
  init();
  std::vector<size_t> p(grad_cases().size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = i;
  return p;
}

// Random loss weights, one tensor per floating output (fixed per case and output index).
std::vector<std::vector<double>> loss_weights(const OpCase& c, const std::vector<Tensor>& outs) {
  std::vector<std::vector<double>> w(outs.size());
  const uint64_t seed = std::hash<std::string>{}(c.name) ^ 0x9e3779b97f4a7c15ull;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!is_floating(outs[k].dtype())) continue;
    w[k].resize(outs[k].numel());
    for (size_t i = 0; i < w[k].size(); ++i) w[k][i] = 2.0 * philox_uniform(seed, 100 + k, i) - 1.0;
  }
  return w;
}

// Central difference of the loss between two evaluations, summed per element so outputs the step did not
// touch cancel exactly; `noise` bounds the rounding error of the affected terms.
struct Diff {
  double value, noise;
};
Diff loss_diff(const std::vector<Tensor>& plus, const std::vector<Tensor>& minus,
               const std::vector<std::vector<double>>& w, double h) {
  double s = 0, mag = 0;
  for (size_t k = 0; k < plus.size(); ++k) {
    if (w[k].empty()) continue;
    const auto p = plus[k].to_doubles(), m = minus[k].to_doubles();
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == m[i]) continue;
      s += (p[i] - m[i]) * w[k][i];
      mag += std::fabs(w[k][i]) * std::max(std::fabs(p[i]), std::fabs(m[i]));
    }
  }
  return {s / (2 * h), 16 * 2.3e-16 * mag / (2 * h)};
}

Tensor with_offset(const Tensor& x, const std::vector<double>& dir, double step) {
  auto v = x.to_doubles();
  for (size_t i = 0; i < v.size(); ++i) v[i] += step * dir[i];
  return Tensor::from_doubles(v, x.shape(), x.dtype());
}

// Cases that are not differentiable by design (ties, discontinuities); listed with the reason.
const std::map<std::string, std::string>& skipped_cases() {
  static const std::map<std::string, std::string> m = {
      {"maximum/ties", "ties: max is not differentiable there"},
      {"minimum/ties", "ties: min is not differentiable there"},
      {"topk/ties", "ties: topk is not differentiable there"},
      {"topk/ties_smallest", "ties: topk is not differentiable there"},
      // roi_align gives the rois no gradient (torchvision's rule); its x gradient is checked against finite
      // differences in tests/ops/index_ops_test.cpp.
      {"roi_align/avg_half_pixel_0", "rois get no gradient"},
      {"roi_align/avg_half_pixel_2", "rois get no gradient"},
      {"roi_align/avg_output_half_pixel_0", "rois get no gradient"},
      {"roi_align/avg_output_half_pixel_2", "rois get no gradient"},
      {"roi_align/max_half_pixel_0", "rois get no gradient"},
      {"roi_align/max_half_pixel_2", "rois get no gradient"},
      {"roi_align/max_output_half_pixel_0", "rois get no gradient"},
      {"roi_align/max_output_half_pixel_2", "rois get no gradient"},
  };
  return m;
}

class GradCheck : public ::testing::TestWithParam<size_t> {};

TEST_P(GradCheck, MatchesFiniteDifferences) {
  const OpCase& c = grad_cases()[GetParam()];
  if (auto it = skipped_cases().find(c.name); it != skipped_cases().end()) GTEST_SKIP() << it->second;
  BackendScope scope(Backend::reference);
  const auto ins = make_inputs(c, DType::f64);
  const auto outs0 = ops::call(c.op, ins, c.attrs);
  bool any_f64_out = false;
  for (const Tensor& o : outs0) any_f64_out |= o.dtype() == DType::f64;
  if (!any_f64_out) GTEST_SKIP() << "no f64 output to differentiate";
  const auto w = loss_weights(c, outs0);
  std::vector<int> wrt;
  for (size_t i = 0; i < ins.size(); ++i)
    if (ins[i].dtype() == DType::f64) wrt.push_back(static_cast<int>(i));
  if (wrt.empty()) GTEST_SKIP() << "no f64 input";

  const auto loss_fn = [&](std::span<const Tensor> in) {
    const auto outs = ops::call(c.op, in, c.attrs);
    Tensor total;
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!is_floating(outs[k].dtype())) continue;
      const Tensor term = ops::reduce_sum(ops::mul(outs[k], Tensor::from_doubles(w[k], outs[k].shape(), DType::f64)));
      total = total.defined() ? ops::add(total, term) : term;
    }
    return total;
  };
  const auto grads = autodiff::grad(loss_fn, ins, wrt);
  const auto fd = [&](size_t input, const std::vector<double>& dir, double h) {
    std::vector<Tensor> plus = ins, minus = ins;
    plus[input] = with_offset(ins[input], dir, h);
    minus[input] = with_offset(ins[input], dir, -h);
    return loss_diff(ops::call(c.op, plus, c.attrs), ops::call(c.op, minus, c.attrs), w, h);
  };

  for (size_t k = 0; k < wrt.size(); ++k) {
    const size_t in = static_cast<size_t>(wrt[k]);
    ASSERT_EQ(grads[k].shape(), ins[in].shape()) << "input " << in;
    const auto g = grads[k].to_doubles();
    const int64_t n = ins[in].numel();
    if (n == 0) continue;
    // Directions: one random (every element at once), then a few single elements.
    std::vector<std::vector<double>> dirs;
    std::vector<double> rnd(n);
    for (int64_t i = 0; i < n; ++i) rnd[i] = 2.0 * philox_uniform(GetParam(), 7 + in, i) - 1.0;
    dirs.push_back(rnd);
    // Large cases: the random direction alone (each extra direction costs four reference evaluations).
    const int element_checks = n <= 20000 ? kElementChecks : 0;
    for (int e = 0; e < element_checks && e < n; ++e) {
      std::vector<double> one(n, 0.0);
      one[static_cast<int64_t>(philox_uniform(GetParam(), 50 + in, e) * n) % n] = 1.0;
      dirs.push_back(std::move(one));
    }
    for (size_t d = 0; d < dirs.size(); ++d) {
      // Richardson extrapolation of steps h and h/2; their disagreement bounds the truncation error
      // (large only near a kink or a pole, where finite differences say little).
      const Diff d1 = fd(in, dirs[d], kEps), d2 = fd(in, dirs[d], kEps / 2);
      const double est = (4 * d2.value - d1.value) / 3;
      const double slack = std::fabs(d1.value - d2.value) + d1.noise + d2.noise;
      // x + h rounds: the step taken differs from h by about ulp(x), which matters for large |x|.
      const auto xv = ins[in].to_doubles();
      double ad = 0, scale = 1, step_noise = 0;
      for (int64_t i = 0; i < n; ++i) {
        ad += g[i] * dirs[d][i];
        scale += std::fabs(g[i] * dirs[d][i]);
        step_noise += std::fabs(g[i] * dirs[d][i]) * std::fabs(xv[i]) * 4.6e-16 / kEps;
      }
      if (!std::isfinite(est)) continue;  // outside the op's domain (nan/inf): nothing to compare
      EXPECT_NEAR(ad, est, kTol * std::max(scale, std::fabs(est)) + slack + step_noise)
          << c.name << ": input " << in << (d == 0 ? " (random direction)" : " (single element)");
    }
  }
}

std::string grad_param_name(const ::testing::TestParamInfo<size_t>& info) {
  std::string n = grad_cases()[info.param].name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n + "_" + std::to_string(info.param);
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, ::testing::ValuesIn(grad_params()), grad_param_name);

// Which ops are checked, and which floating ops have no rule (listed, so gaps are visible in the log).
TEST(GradCoverage, NoGradOpsHaveNoRuleAndMissingRulesAreListed) {
  init();
  std::map<std::string, int> checked;
  for (const auto& c : grad_cases()) ++checked[op_registry().get(c.op).name];
  // Rules checked elsewhere because the op has no f64 form, with where.
  const std::map<std::string, std::string> checked_elsewhere = {
      {"rope", "f32 only; its rule is checked against a float64 rotation in tests/lm/lm_grad_test.cpp"},
  };
  std::vector<std::string> missing, unchecked;
  for (int op = 0; op < num_builtin_ops(); ++op) {
    const OpDef* def = op_registry().find(op_at(op));
    if (!def || def->traits.has(Trait::graph_structure)) continue;
    if (def->traits.has(Trait::no_grad)) {
      EXPECT_FALSE(static_cast<bool>(def->grad)) << def->name << " is no_grad but has a gradient rule";
      continue;
    }
    if (!(def->dtypes.bits & dtypes::floating.bits)) continue;  // integer-only ops have nothing to differentiate
    if (!def->grad)
      missing.push_back(def->name);
    else if (!checked.count(def->name) && !checked_elsewhere.count(def->name)) unchecked.push_back(def->name);
  }
  std::printf("[grad coverage] %zu ops checked against finite differences (%zu cases)\n", checked.size(),
              grad_cases().size());
  std::printf("[grad coverage] no gradient rule: %s\n", fmt::format("{}", fmt::join(missing, ", ")).c_str());
  EXPECT_TRUE(unchecked.empty()) << "ops with a rule but no f64 case: "
                                 << fmt::format("{}", fmt::join(unchecked, ", "));
}

}  // namespace
}  // namespace spore::conformance
