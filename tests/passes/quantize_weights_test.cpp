// Weight-only int8 quantization (passes/quantize.h): per-output-channel symmetric scales, int8 bytes stored, outputs
// close to f32, constants ~4x smaller, and fold_constants with fold_keeps_size leaves the dequantize in the file.
#include <cmath>

#include <gtest/gtest.h>

#include "base/rng.h"
#include "ir/test_ops.h"
#include "ops/graph_ops.h"
#include "passes/pass.h"
#include "passes/quantize.h"
#include "runtime/plan.h"

namespace spore {
namespace {

Tensor rnd(const Shape& s, uint64_t stream, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * (2.0 * philox_uniform(91, stream, i) - 1.0);
  return Tensor::from_doubles(v, s, DType::f32);
}

// Scales each slice along `axis` by a different factor so per-channel scales differ (a per-tensor bug shows).
Tensor channel_scaled(Tensor w, int axis) {
  const Shape s = w.shape();
  auto v = w.to_doubles();
  int64_t inner = 1;
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  for (size_t i = 0; i < v.size(); ++i) v[i] *= 1.0 + static_cast<double>((i / inner) % s[axis]);
  return Tensor::from_doubles(v, s, DType::f32);
}

// conv2d (w [8,3,3,3]) -> relu -> flatten -> linear (w [16, 8*6*6]) -> matmul with constant B [16,10].
std::unique_ptr<Graph> make_net() {
  auto g = std::make_unique<Graph>("net");
  Value* x = g->add_input(TensorType(DType::f32, {2, 3, 8, 8}), "x");
  Value* cw = g->add_constant(channel_scaled(rnd({8, 3, 3, 3}, 1, 0.3), 0), "conv.w");
  Value* cb = g->add_constant(rnd({8}, 2, 0.1), "conv.b");
  Value* h = build_node(*g, "conv2d"_op, {x, cw, cb}, {}, "conv")->outputs[0];
  Value* r = build_node(*g, "relu"_op, {h}, {}, "act")->outputs[0];
  Value* f = build_node(*g, "flatten"_op, {r}, Attrs{{"axis", int64_t{1}}}, "flat")->outputs[0];
  Value* lw = g->add_constant(channel_scaled(rnd({16, 288}, 3, 0.05), 0), "fc.w");
  Value* lb = g->add_constant(rnd({16}, 4, 0.1), "fc.b");
  Value* l = build_node(*g, "linear"_op, {f, lw, lb}, {}, "fc")->outputs[0];
  Value* b = g->add_constant(channel_scaled(rnd({16, 10}, 5, 0.2), 1), "head.w");
  Value* y = build_node(*g, "matmul"_op, {l, b}, {}, "head")->outputs[0];
  g->set_outputs({y});
  verify_graph(*g);
  return g;
}

int64_t constant_bytes(const Graph& g) {
  int64_t b = 0;
  for (const Node* n : g.nodes())
    if (n->op == "constant"_op) b += n->payload.numel() * static_cast<int64_t>(dtype_size(n->payload.dtype()));
  return b;
}

const Node* consumer_weight_producer(const Graph& g, const std::string& node, int input) {
  for (const Node* n : g.nodes())
    if (n->name == node) return n->inputs.at(input)->producer;
  return nullptr;
}

Tensor run(const Graph& g, const Tensor& x) {
  Plan p = compile_plan(g.clone(), {});
  return p.run(std::span<const Tensor>(&x, 1)).at(0);
}

TEST(QuantizeWeightsInt8, PerChannelScalesAndInt8Bytes) {
  auto src = make_net();
  auto g = src->clone();
  const QuantReport rep = quantize_weights_int8(*g);
  verify_graph(*g);
  EXPECT_TRUE(test::use_lists_valid(*g));
  EXPECT_EQ(rep.weights_quantized, 3);
  EXPECT_TRUE(rep.skipped.empty());
  EXPECT_EQ(rep.bytes_before, constant_bytes(*src));
  EXPECT_EQ(rep.bytes_after, constant_bytes(*g));

  struct Case {
    const char* node;
    const char* weight;
    int64_t axis;
  };
  for (const Case& c : {Case{"conv", "conv.w", 0}, Case{"fc", "fc.w", 0}, Case{"head", "head.w", 1}}) {
    SCOPED_TRACE(c.node);
    const Node* dq = consumer_weight_producer(*g, c.node, 1);
    ASSERT_NE(dq, nullptr);
    ASSERT_EQ(dq->op, "dequantize_linear"_op);
    EXPECT_EQ(dq->attrs.i("axis"), c.axis);
    const Node* qn = dq->inputs[0]->producer;
    const Node* sn = dq->inputs[1]->producer;
    ASSERT_EQ(qn->op, "constant"_op);
    ASSERT_EQ(sn->op, "constant"_op);
    EXPECT_EQ(dq->inputs.size(), 2u);  // symmetric: no zero point
    const Tensor q = qn->payload, scale = sn->payload;
    EXPECT_EQ(q.dtype(), DType::i8);
    EXPECT_EQ(scale.dtype(), DType::f32);
    const Tensor w = src->find_value(c.weight)->producer->payload;
    ASSERT_EQ(q.shape(), w.shape());
    const Shape s = w.shape();
    ASSERT_EQ(scale.shape(), Shape{s[c.axis]});
    int64_t inner = 1;
    for (size_t d = c.axis + 1; d < s.size(); ++d) inner *= s[d];
    const auto wv = w.to_doubles(), qv = q.to_doubles(), sv = scale.to_doubles();
    std::vector<double> amax(sv.size(), 0.0);
    for (size_t i = 0; i < wv.size(); ++i) {
      const size_t ch = (i / inner) % s[c.axis];
      amax[ch] = std::max(amax[ch], std::abs(wv[i]));
    }
    for (size_t ch = 0; ch < sv.size(); ++ch) EXPECT_NEAR(sv[ch], amax[ch] / 127.0, 1e-7 * amax[ch]) << "channel " << ch;
    EXPECT_NE(sv.front(), sv.back());  // really per channel
    int extremes = 0;
    for (size_t i = 0; i < wv.size(); ++i) {
      const size_t ch = (i / inner) % s[c.axis];
      ASSERT_LE(std::abs(qv[i]), 127.0);
      // round to nearest: within half a step of w / scale
      ASSERT_LE(std::abs(qv[i] - wv[i] / sv[ch]), 0.5 + 1e-4) << i;
      extremes += std::abs(qv[i]) == 127.0;
    }
    EXPECT_GE(extremes, static_cast<int>(sv.size()));  // every channel's max maps to +-127
  }
}

TEST(QuantizeWeightsInt8, OutputsCloseAndFileShrinks) {
  auto src = make_net();
  auto g = src->clone();
  const QuantReport rep = quantize_weights_int8(*g);
  // Weights dominate: int8 + one f32 scale per channel, biases stay f32.
  const double ratio = static_cast<double>(rep.bytes_before) / static_cast<double>(rep.bytes_after);
  EXPECT_GT(ratio, 3.5) << rep.bytes_before << " -> " << rep.bytes_after;
  EXPECT_LT(ratio, 4.0);
  const Tensor x = rnd({2, 3, 8, 8}, 7);
  const auto ref = run(*src, x).to_doubles(), got = run(*g, x).to_doubles();
  double err = 0, mx = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(got[i] - ref[i]));
    mx = std::max(mx, std::abs(ref[i]));
  }
  EXPECT_GT(err, 0.0);
  EXPECT_LE(err, 2e-2 * mx) << "max abs error " << err << " of max " << mx;
}

TEST(QuantizeWeightsInt8, FoldKeepsDequantizeWhenPreparingAFile) {
  auto g = make_net();
  quantize_weights_int8(*g);
  const int64_t bytes = constant_bytes(*g);
  auto fold = make_fold_constants_pass();
  PassOptions file_opts;
  file_opts.fold_keeps_size = true;
  EXPECT_FALSE(fold->run(*g, file_opts));
  EXPECT_EQ(constant_bytes(*g), bytes);
  // Compiling for running folds them into f32 constants (dequantized once, not on every run).
  auto h = g->clone();
  EXPECT_TRUE(fold->run(*h, PassOptions{}));
  verify_graph(*h);
  for (const Node* n : h->nodes()) EXPECT_NE(n->op, "dequantize_linear"_op);
  EXPECT_GT(constant_bytes(*h), 3 * bytes);
}

TEST(QuantizeWeightsInt8, SkipsWhatItCannotQuantize) {
  auto g = std::make_unique<Graph>("g");
  Value* x = g->add_input(TensorType(DType::f32, {4, 8}), "x");
  Value* w_in = g->add_input(TensorType(DType::f32, {8, 8}), "w_in");
  Value* m = build_node(*g, "matmul"_op, {x, w_in}, {}, "dynamic")->outputs[0];  // B is not a constant
  std::vector<double> bad(64, 0.5);
  bad[3] = std::nan("");
  Value* wb = g->add_constant(Tensor::from_doubles(bad, {8, 8}, DType::f32), "bad.w");
  Value* m2 = build_node(*g, "matmul"_op, {m, wb}, {}, "nan_weight")->outputs[0];
  Value* v = g->add_constant(rnd({8}, 8), "vec");
  Value* m3 = build_node(*g, "matmul"_op, {m2, v}, {}, "vector")->outputs[0];
  // A shared weight is quantized once; an all-zero channel gets a harmless scale.
  std::vector<double> zw(64, 0.25);
  for (int i = 0; i < 8; ++i) zw[i * 8 + 2] = 0.0;  // column 2 all zero
  Value* shared = g->add_constant(Tensor::from_doubles(zw, {8, 8}, DType::f32), "shared.w");
  Value* a = build_node(*g, "matmul"_op, {m2, shared}, {}, "s1")->outputs[0];
  Value* b = build_node(*g, "matmul"_op, {a, shared}, {}, "s2")->outputs[0];
  g->set_outputs({m3, b});
  const QuantReport rep = quantize_weights_int8(*g);
  verify_graph(*g);
  EXPECT_EQ(rep.weights_quantized, 1);
  ASSERT_EQ(rep.skipped.size(), 3u);
  EXPECT_NE(rep.skipped[0].find("not a constant"), std::string::npos) << rep.skipped[0];
  EXPECT_NE(rep.skipped[1].find("non-finite"), std::string::npos) << rep.skipped[1];
  EXPECT_NE(rep.skipped[2].find("no output-channel axis"), std::string::npos) << rep.skipped[2];
  int dq = 0;
  for (const Node* n : g->nodes()) dq += n->op == "dequantize_linear"_op;
  EXPECT_EQ(dq, 1);
  EXPECT_EQ(g->find_value("shared.w"), nullptr);  // the f32 original is gone
  const Tensor scale = g->find_value("shared.w_scale")->producer->payload;
  const auto sv = scale.to_doubles();
  EXPECT_EQ(sv[2], 1.0);
  EXPECT_NEAR(sv[0], 0.25 / 127.0, 1e-9);
}

}  // namespace
}  // namespace spore
