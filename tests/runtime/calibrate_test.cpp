// Calibration (runtime/calibrate.h): which values are observed, exact min/max, percentile and entropy ranges on
// data with outliers, determinism, and errors on bad batches.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "ops/graph_ops.h"
#include "runtime/calibrate.h"

namespace spore {
namespace {

// x [batch, 16] -> linear(16 -> 8) -> relu -> linear(8 -> 4); also x -> matmul with a constant B.
std::unique_ptr<Graph> mlp() {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  const auto rand = [&](Shape s) {
    std::vector<float> v(static_cast<size_t>(shape_numel(s)));
    for (float& x : v) x = d(rng);
    return Tensor::from_vector(v, s);
  };
  auto g = std::make_unique<Graph>("mlp");
  Value* x = g->add_input(TensorType(DType::f32, {Dim::symbol("batch"), Dim(16)}), "x");
  Node* l1 = build_node(*g, "linear"_op, {x, g->add_constant(rand({8, 16}), "w1")}, {}, "l1");
  Node* r = build_node(*g, "relu"_op, {l1->output(0)}, {}, "act");
  Node* l2 = build_node(*g, "linear"_op, {r->output(0), g->add_constant(rand({4, 8}), "w2")}, {}, "l2");
  Node* mm = build_node(*g, "matmul"_op, {x, g->add_constant(rand({16, 3}), "b")}, {}, "mm");
  g->set_outputs({l2->output(0), mm->output(0)});
  g->rename_value(r->output(0), "hidden");
  return g;
}

// Batches of N(0, 1)-ish data; `outliers` entries per batch are set to +-50.
std::vector<std::vector<Tensor>> data(int count, int64_t rows, int outliers, uint32_t seed = 3) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<std::vector<Tensor>> out;
  for (int b = 0; b < count; ++b) {
    std::vector<float> v(static_cast<size_t>(rows * 16));
    for (float& x : v) x = d(rng);
    for (int k = 0; k < outliers; ++k) v[(k * 97 + b * 13) % v.size()] = k % 2 ? -50.0f : 50.0f;
    out.push_back({Tensor::from_vector(v, {rows, 16})});
  }
  return out;
}

TEST(Calibrate, ObservesCandidateInputsWithExactMinMax) {
  const auto g = mlp();
  // Different batch sizes compile one plan per signature.
  auto batches = data(3, 32, 0);
  batches.push_back(data(1, 5, 0, 9)[0]);
  const CalibrationTable t = calibrate(*g, batches);
  ASSERT_EQ(t.size(), 2u);  // x (l1 and mm share it) and the relu output; l2's output feeds nothing
  double lo = 1e30, hi = -1e30;
  for (const auto& b : batches)
    for (double v : b[0].to_doubles()) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  EXPECT_EQ(t.at("x").min, static_cast<float>(lo));
  EXPECT_EQ(t.at("x").max, static_cast<float>(hi));
  EXPECT_GE(t.at("hidden").min, 0.0f);  // a ReLU output
  EXPECT_GT(t.at("hidden").max, 0.0f);
}

TEST(Calibrate, PercentileAndEntropyClipOutliers) {
  const auto g = mlp();
  const auto batches = data(4, 64, 2);  // 8 of 4096 values of x are +-50
  const CalibrationTable mm = calibrate(*g, batches);
  CalibOptions po;
  po.method = CalibMethod::percentile;
  po.percentile = 99.5;
  const CalibrationTable pt = calibrate(*g, batches, po);
  CalibOptions eo;
  eo.method = CalibMethod::entropy;
  const CalibrationTable et = calibrate(*g, batches, eo);
  EXPECT_EQ(mm.at("x").min, -50.0f);
  EXPECT_EQ(mm.at("x").max, 50.0f);
  for (const auto* t : {&pt, &et}) {
    for (const auto& [name, r] : *t) {
      EXPECT_LE(r.max, mm.at(name).max) << name;
      EXPECT_GE(r.min, mm.at(name).min) << name;
    }
    // The bulk of N(0,1) lies within +-4.5; the outliers are clipped away, symmetrically.
    EXPECT_LT(t->at("x").max, 10.0f);
    EXPECT_GT(t->at("x").max, 2.0f);
    EXPECT_EQ(t->at("x").min, -t->at("x").max);
    EXPECT_GE(t->at("hidden").min, 0.0f);  // one-sided data stays one-sided
  }
  std::printf("[calibrate] x range: minmax %.2f, percentile(99.5) %.3f, entropy %.3f\n", mm.at("x").max,
              pt.at("x").max, et.at("x").max);
  // 100th percentile is the maximum.
  po.percentile = 100;
  EXPECT_EQ(calibrate(*g, batches, po).at("x").max, 50.0f);
}

TEST(Calibrate, Deterministic) {
  const auto g = mlp();
  const auto batches = data(3, 32, 1);
  for (const CalibMethod m : {CalibMethod::minmax, CalibMethod::percentile, CalibMethod::entropy}) {
    CalibOptions o;
    o.method = m;
    const auto a = calibrate(*g, batches, o), b = calibrate(*g, batches, o);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [k, v] : a) {
      EXPECT_EQ(v.min, b.at(k).min) << k;
      EXPECT_EQ(v.max, b.at(k).max) << k;
    }
  }
}

TEST(Calibrate, Errors) {
  const auto g = mlp();
  EXPECT_THROW(calibrate(*g, {}), Error);
  EXPECT_THROW(calibrate(*g, {{}}), Error);                                    // no tensor for input x
  EXPECT_THROW(calibrate(*g, {{Tensor::zeros({4, 16}, DType::f64)}}), Error);  // wrong dtype
  EXPECT_THROW(calibrate(*g, {{Tensor::zeros({4, 15}, DType::f32)}}), Error);  // wrong shape
  CalibOptions o;
  o.bins = 10;
  EXPECT_THROW(calibrate(*g, data(1, 4, 0), o), Error);
  EXPECT_EQ(parse_calib_method("entropy"), CalibMethod::entropy);
  try {
    parse_calib_method("kl");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("minmax"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spore
