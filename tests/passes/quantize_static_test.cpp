// Static int8 quantization: the quantization ops' edge cases (ties, saturation), and quantize_static_int8 on a
// small conv -> relu -> pool -> linear classifier with random weights, calibrated on random batches: the rewrite
// (ops, report, graph validity), accuracy against f32 on 256 samples, and determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "passes/quantize.h"
#include "runtime/calibrate.h"
#include "runtime/plan.h"

namespace spore {
namespace {

Tensor random_tensor(std::mt19937& rng, const Shape& shape, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = d(rng);
  return Tensor::from_vector(v, shape);
}

// x [batch,1,12,12] -> conv 3x3 (8 ch, pad 1) -> relu -> max_pool 2x2 -> flatten -> linear 288 -> 10.
std::unique_ptr<Graph> small_net(uint32_t seed) {
  std::mt19937 rng(seed);
  auto g = std::make_unique<Graph>("small_net");
  Value* x = g->add_input(TensorType(DType::f32, {Dim::symbol("batch"), Dim(1), Dim(12), Dim(12)}), "x");
  Value* w1 = g->add_constant(random_tensor(rng, {8, 1, 3, 3}, -0.6f, 0.6f), "conv1.weight");
  Value* b1 = g->add_constant(random_tensor(rng, {8}, -0.1f, 0.1f), "conv1.bias");
  Value* w2 = g->add_constant(random_tensor(rng, {10, 288}, -0.15f, 0.15f), "fc.weight");
  Value* b2 = g->add_constant(random_tensor(rng, {10}, -0.1f, 0.1f), "fc.bias");
  Node* conv = build_node(*g, "conv2d"_op, {x, w1, b1}, {{"padding", std::vector<int64_t>{1, 1, 1, 1}}}, "conv1");
  Node* relu = build_node(*g, "relu"_op, {conv->output(0)}, {}, "relu1");
  Node* pool = build_node(*g, "max_pool2d"_op, {relu->output(0)}, {}, "pool1");
  Node* flat = build_node(*g, "flatten"_op, {pool->output(0)}, {}, "flatten");
  Node* fc = build_node(*g, "linear"_op, {flat->output(0), w2, b2}, {}, "fc");
  g->set_outputs({fc->output(0)});
  verify_graph(*g);
  return g;
}

// Image-like inputs: mostly in [0, 1] with some negative noise.
std::vector<std::vector<Tensor>> batches(uint32_t seed, int count, int64_t batch) {
  std::mt19937 rng(seed);
  std::vector<std::vector<Tensor>> out;
  for (int i = 0; i < count; ++i) out.push_back({random_tensor(rng, {batch, 1, 12, 12}, -0.2f, 1.0f)});
  return out;
}

// small_net's conv has one input channel, which the default options keep f32; the tests of the rewrite itself
// quantize it anyway.
StaticQuantOptions all_convs(int bits = 8) {
  StaticQuantOptions o;
  o.activation_bits = bits;
  o.few_channel_convs_stay_f32 = false;
  return o;
}

Tensor run_graph(const Graph& g, const Tensor& x) {
  auto c = g.clone();
  specialize_inputs(*c, {x.shape()});
  Plan p = compile_plan(std::move(c), {});
  const Tensor in[] = {x};
  return p.run(in)[0];
}

std::map<OpId, int> op_counts(const Graph& g) {
  std::map<OpId, int> m;
  for (const Node* n : g.nodes()) ++m[n->op];
  return m;
}

TEST(QuantOps, QuantizeRoundsHalfToEvenAndSaturates) {
  const Tensor x = Tensor::from_vector<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 300.0f, -300.0f, 3.2f}, {8});
  const Tensor s = Tensor::scalar(1.0, DType::f32);
  const Tensor u = ops::quantize_linear(x, s, Tensor::scalar(10, DType::u8));
  EXPECT_EQ(u.dtype(), DType::u8);
  EXPECT_EQ(u.to_doubles(), (std::vector<double>{10, 12, 12, 10, 8, 255, 0, 13}));
  const Tensor i = ops::quantize_linear(x, s, Tensor::scalar(0, DType::i8));
  EXPECT_EQ(i.to_doubles(), (std::vector<double>{0, 2, 2, -0.0, -2, 127, -128, 3}));
  EXPECT_EQ(ops::quantize_linear(x, s).dtype(), DType::u8);  // ONNX: no zero point -> uint8
  // Per-axis and back.
  const Tensor w = Tensor::from_vector<float>({1, -2, 3, 0.75f, 0.25f, -1}, {2, 3});
  const Tensor ws = Tensor::from_vector<float>({3.0f / 127, 1.0f / 127}, {2});
  const Tensor q = ops::quantize_linear(w, ws, Tensor::from_vector<int8_t>({0, 0}, {2}), 0);
  EXPECT_EQ(q.to_doubles(), (std::vector<double>{42, -85, 127, 95, 32, -127}));
  const auto back = ops::dequantize_linear(q, ws, std::nullopt, 0).to_doubles();
  const auto orig = w.to_doubles();
  for (size_t k = 0; k < back.size(); ++k) EXPECT_NEAR(back[k], orig[k], 3.0 / 127 / 2 + 1e-6) << k;
}

TEST(QuantOps, QlinearMatchesDequantizedFloat) {
  // qlinear == linear(dequantize(x), dequantize(w)) + bias up to f32 rounding.
  std::mt19937 rng(7);
  std::vector<uint8_t> xv(4 * 50);
  std::vector<int8_t> wv(6 * 50);
  for (auto& v : xv) v = static_cast<uint8_t>(rng() % 256);
  for (auto& v : wv) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  const Tensor xq = Tensor::from_vector(xv, {4, 50}), wq = Tensor::from_vector(wv, {6, 50});
  const Tensor xs = Tensor::scalar(0.02, DType::f32), xz = Tensor::scalar(131, DType::u8);
  const Tensor wsc = random_tensor(rng, {6}, 0.001f, 0.01f), b = random_tensor(rng, {6}, -1, 1);
  const Tensor y = ops::qlinear(xq, xs, xz, wq, wsc, b);
  const Tensor ref = ops::linear(ops::dequantize_linear(xq, xs, xz), ops::dequantize_linear(wq, wsc, std::nullopt, 0), b);
  const auto a = y.to_doubles(), r = ref.to_doubles();
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], r[k], 1e-5 * (1 + std::fabs(r[k]))) << k;
}

TEST(QuantizeStatic, RewritesConvAndLinearAndReports) {
  auto g = small_net(1);
  const CalibrationTable table = calibrate(*g, batches(2, 4, 16));
  const QuantReport r = quantize_static_int8(*g, table, all_convs());
  EXPECT_EQ(r.ops_quantized, 2);
  EXPECT_EQ(r.weights_quantized, 2);
  EXPECT_TRUE(r.skipped.empty()) << r.skipped.front();
  // f32 weights 72 + 2880 floats -> int8 plus per-channel scales and the activation scale / zero point.
  EXPECT_EQ(r.bytes_before, (72 + 8 + 2880 + 10) * 4);
  EXPECT_EQ(r.bytes_after, 72 + 2880 + (8 + 10) * 4 + (8 + 10) * 4 + 2 * (4 + 1));
  auto ops = op_counts(*g);
  EXPECT_EQ(ops["conv2d"_op], 0);
  EXPECT_EQ(ops["linear"_op], 0);
  EXPECT_EQ(ops["qconv2d"_op], 1);
  EXPECT_EQ(ops["qlinear"_op], 1);
  EXPECT_EQ(ops["quantize_linear"_op], 2);
  // Node names survive (qconv2d 'conv1'); activations are u8 with 7-bit codes.
  for (const Node* n : g->nodes()) {
    if (n->op == "qconv2d"_op) {
      EXPECT_EQ(n->name, "conv1");
    }
    if (n->op == "qlinear"_op) {
      EXPECT_EQ(n->name, "fc");
    }
    if (n->op == "quantize_linear"_op) {
      EXPECT_EQ(n->output(0)->type.dtype, DType::u8);
    }
  }
  // The quantized graph round-trips through the text IR.
  const std::string text = print_graph(*g);
  auto back = parse_graph(text);
  verify_graph(*back);
  EXPECT_EQ(print_graph(*back), text);
}

TEST(QuantizeStatic, SkipsNodesWithoutRangeOrConstantWeight) {
  auto g = small_net(1);
  CalibrationTable table = calibrate(*g, batches(2, 2, 8));
  table.erase("x");  // the conv's input: no range
  const QuantReport r = quantize_static_int8(*g, table, all_convs());
  EXPECT_EQ(r.ops_quantized, 1);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_NE(r.skipped[0].find("conv1"), std::string::npos) << r.skipped[0];
  EXPECT_NE(r.skipped[0].find("no calibration range for %x"), std::string::npos) << r.skipped[0];

  // A weight that is a graph input stays float.
  Graph h("h");
  Value* x = h.add_input(TensorType(DType::f32, {Dim(2), Dim(4)}), "x");
  Value* w = h.add_input(TensorType(DType::f32, {Dim(3), Dim(4)}), "w");
  Node* lin = build_node(h, "linear"_op, {x, w}, {}, "lin");
  h.set_outputs({lin->output(0)});
  const QuantReport r2 = quantize_static_int8(h, {{"x", {-1, 1}}});
  EXPECT_EQ(r2.ops_quantized, 0);
  ASSERT_EQ(r2.skipped.size(), 1u);
  EXPECT_NE(r2.skipped[0].find("not a constant"), std::string::npos) << r2.skipped[0];
}

// conv -> conv with nothing between (MobileNet's projection conv feeding the next expansion conv): the second
// conv's input is the first one's rewritten output, calibrated under the original name, and is quantized too.
TEST(QuantizeStatic, ConvFeedingConvIsQuantized) {
  std::mt19937 rng(9);
  Graph g("cc");
  Value* x = g.add_input(TensorType(DType::f32, {Dim(2), Dim(8), Dim(6), Dim(6)}), "x");
  Value* w1 = g.add_constant(random_tensor(rng, {6, 8, 1, 1}, -0.5f, 0.5f), "w1");
  Value* w2 = g.add_constant(random_tensor(rng, {5, 6, 1, 1}, -0.5f, 0.5f), "w2");
  Node* c1 = build_node(g, "conv2d"_op, {x, w1}, {}, "c1");
  Node* c2 = build_node(g, "conv2d"_op, {c1->output(0), w2}, {}, "c2");
  g.set_outputs({c2->output(0)});
  auto f = g.clone();
  const Tensor in = random_tensor(rng, {2, 8, 6, 6}, -1, 1);
  const QuantReport r = quantize_static_int8(g, calibrate(g, {{in}}));
  EXPECT_EQ(r.ops_quantized, 2);
  EXPECT_TRUE(r.skipped.empty()) << r.skipped.front();
  const auto q = run_graph(g, in).to_doubles(), ref = run_graph(*f, in).to_doubles();
  double max_err = 0, max_ref = 0;
  for (size_t k = 0; k < q.size(); ++k) {
    max_err = std::max(max_err, std::fabs(q[k] - ref[k]));
    max_ref = std::max(max_ref, std::fabs(ref[k]));
  }
  EXPECT_LT(max_err, 0.03 * max_ref);
}

TEST(QuantizeStatic, MatmulWithConstantBBecomesQlinear) {
  std::mt19937 rng(5);
  Graph g("mm");
  Value* a = g.add_input(TensorType(DType::f32, {Dim(3), Dim(2), Dim(16)}), "a");
  Value* b = g.add_constant(random_tensor(rng, {16, 5}, -1, 1), "b");
  Node* mm = build_node(g, "matmul"_op, {a, b}, {}, "mm");
  g.set_outputs({mm->output(0)});
  auto f = g.clone();
  const Tensor x = random_tensor(rng, {3, 2, 16}, -1, 1);
  const CalibrationTable t = calibrate(g, {{x}});
  const QuantReport r = quantize_static_int8(g, t);
  EXPECT_EQ(r.ops_quantized, 1);
  const auto q = run_graph(g, x).to_doubles(), ref = run_graph(*f, x).to_doubles();
  double max_err = 0, max_ref = 0;
  for (size_t k = 0; k < q.size(); ++k) {
    max_err = std::max(max_err, std::fabs(q[k] - ref[k]));
    max_ref = std::max(max_ref, std::fabs(ref[k]));
  }
  EXPECT_LT(max_err, 0.03 * max_ref);
}

// Accuracy: on 256 fresh samples the int8 model's logits stay within 5% of the f32 logits' range and its
// argmax agrees on >= 95% of samples, for every calibration method.
TEST(QuantizeStatic, CloseToFloatOn256Samples) {
  const auto f32 = small_net(11);
  const auto calib = batches(12, 8, 32);
  const auto test = batches(13, 8, 32);
  for (const CalibMethod m : {CalibMethod::minmax, CalibMethod::percentile, CalibMethod::entropy}) {
    auto q = f32->clone();
    CalibOptions o;
    o.method = m;
    const QuantReport r = quantize_static_int8(*q, calibrate(*f32, calib, o), all_convs());
    ASSERT_EQ(r.ops_quantized, 2);
    double max_err = 0, lo = 1e30, hi = -1e30;
    int agree = 0, total = 0;
    for (const auto& b : test) {
      const auto yf = run_graph(*f32, b[0]).to_doubles(), yq = run_graph(*q, b[0]).to_doubles();
      for (size_t k = 0; k < yf.size(); ++k) {
        max_err = std::max(max_err, std::fabs(yf[k] - yq[k]));
        lo = std::min(lo, yf[k]);
        hi = std::max(hi, yf[k]);
      }
      for (size_t s = 0; s < yf.size() / 10; ++s) {
        const auto af = std::max_element(yf.begin() + s * 10, yf.begin() + s * 10 + 10) - yf.begin();
        const auto aq = std::max_element(yq.begin() + s * 10, yq.begin() + s * 10 + 10) - yq.begin();
        agree += af == aq;
        ++total;
      }
    }
    EXPECT_EQ(total, 256);
    EXPECT_LT(max_err, 0.05 * (hi - lo)) << "method " << static_cast<int>(m);
    EXPECT_GE(agree, 0.95 * total) << "method " << static_cast<int>(m);
    std::printf("[quantize_static] method %d: max |err| %.4f of range %.3f, argmax agreement %d/%d\n",
                static_cast<int>(m), max_err, hi - lo, agree, total);
  }
}

// Defaults: the 1-input-channel conv stays f32 (with the reason), codes use 8 bits; with 7 bits the clip in front
// of quantize_linear ends at code 127. Both run close to f32 on fresh data.
TEST(QuantizeStatic, DefaultsKeepFewChannelConvsF32AndCodeActivationsIn8Bits) {
  const auto f32 = small_net(21);
  const CalibrationTable t = calibrate(*f32, batches(22, 4, 16));
  const auto test = batches(23, 2, 16);
  for (const int bits : {8, 7}) {
    auto g = f32->clone();
    StaticQuantOptions o;
    o.activation_bits = bits;
    const QuantReport r = quantize_static_int8(*g, t, o);
    EXPECT_EQ(r.ops_quantized, 1);
    ASSERT_EQ(r.skipped.size(), 1u);
    EXPECT_NE(r.skipped[0].find("conv1"), std::string::npos) << r.skipped[0];
    EXPECT_NE(r.skipped[0].find("1 input channel(s) per group"), std::string::npos) << r.skipped[0];
    int clips = 0;
    for (const Node* n : g->nodes()) {
      if (n->op != "quantize_linear"_op) continue;
      const Node* clip = n->input(0)->producer;
      ASSERT_EQ(clip->op, "clip"_op);
      const double scale = n->input(1)->producer->payload.to_doubles()[0];
      const double zp = n->input(2)->producer->payload.to_doubles()[0];
      EXPECT_NEAR(clip->attrs.f("max") / scale + zp, (1 << bits) - 1, 1e-3) << bits;
      EXPECT_NEAR(clip->attrs.f("min") / scale + zp, 0, 1e-3) << bits;
      ++clips;
    }
    EXPECT_EQ(clips, 1);
    for (const auto& b : test) {
      const auto yf = run_graph(*f32, b[0]).to_doubles(), yq = run_graph(*g, b[0]).to_doubles();
      double err = 0, range = 0;
      for (size_t k = 0; k < yf.size(); ++k) {
        err = std::max(err, std::fabs(yf[k] - yq[k]));
        range = std::max(range, std::fabs(yf[k]));
      }
      EXPECT_LT(err, 0.05 * range) << bits;
    }
  }
  StaticQuantOptions bad;
  bad.activation_bits = 6;
  auto g = f32->clone();
  EXPECT_THROW(quantize_static_int8(*g, t, bad), Error);
}

TEST(QuantizeStatic, Deterministic) {
  const auto g = small_net(3);
  const auto data = batches(4, 3, 16);
  for (const CalibMethod m : {CalibMethod::minmax, CalibMethod::percentile, CalibMethod::entropy}) {
    CalibOptions o;
    o.method = m;
    const CalibrationTable t1 = calibrate(*g, data, o), t2 = calibrate(*g, data, o);
    ASSERT_EQ(t1.size(), t2.size());
    for (const auto& [k, v] : t1) {
      EXPECT_EQ(v.min, t2.at(k).min) << k;
      EXPECT_EQ(v.max, t2.at(k).max) << k;
    }
    auto a = g->clone(), b = g->clone();
    quantize_static_int8(*a, t1);
    quantize_static_int8(*b, t2);
    EXPECT_EQ(print_graph(*a), print_graph(*b));
  }
}

}  // namespace
}  // namespace spore
