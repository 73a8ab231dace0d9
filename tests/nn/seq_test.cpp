#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "autodiff/autodiff.h"
#include "nn/loss.h"
#include "nn/rnn.h"
#include "nn/transformer.h"
#include "nn_util.h"
#include "ops/ops.h"
#include "runtime/profiler.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

using nn_test::expect_close;
using nn_test::rnd;
using Vec = std::vector<double>;

double sig(double x) { return 1 / (1 + std::exp(-x)); }

// y[r] = sum_c w[r, c] x[c] + b[r] (b may be empty).
Vec affine(const Tensor& w, const Tensor* b, const Vec& x) {
  const int64_t rows = w.dim(0), cols = w.dim(1);
  Vec y(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    double s = b ? b->item_at(r) : 0;
    for (int64_t c = 0; c < cols; ++c) s += w.item_at(r * cols + c) * x[static_cast<size_t>(c)];
    y[static_cast<size_t>(r)] = s;
  }
  return y;
}

// Scalar-loop reference of a multi-layer LSTM/GRU (PyTorch equations), x as [T][N][in].
struct RefOut {
  std::vector<std::vector<Vec>> out;  // [T][N][H]
  std::vector<std::vector<Vec>> h, c;  // [L][N][H]
};
RefOut reference(nn::Cell& net, bool lstm, int64_t layers, int64_t hs, const std::vector<std::vector<Vec>>& x,
                 std::vector<std::vector<Vec>> h, std::vector<std::vector<Vec>> c) {
  std::vector<std::vector<Vec>> seq = x;
  const size_t H = static_cast<size_t>(hs);
  for (int64_t k = 0; k < layers; ++k) {
    const std::string s = std::to_string(k);
    const Tensor &wi = *net.parameter("weight_ih_l" + s), &wh = *net.parameter("weight_hh_l" + s);
    const Tensor *bi = net.parameter("bias_ih_l" + s), *bh = net.parameter("bias_hh_l" + s);
    for (auto& step : seq)
      for (size_t n = 0; n < step.size(); ++n) {
        auto& hk = h[static_cast<size_t>(k)][n];
        auto& ck = c[static_cast<size_t>(k)][n];
        const Vec gx = affine(wi, bi, step[n]), gh = affine(wh, bh, hk);
        Vec next(H);
        for (size_t j = 0; j < H; ++j) {
          if (lstm) {
            const double i = sig(gx[j] + gh[j]), f = sig(gx[H + j] + gh[H + j]);
            const double g = std::tanh(gx[2 * H + j] + gh[2 * H + j]), o = sig(gx[3 * H + j] + gh[3 * H + j]);
            ck[j] = f * ck[j] + i * g;
            next[j] = o * std::tanh(ck[j]);
          } else {
            const double r = sig(gx[j] + gh[j]), z = sig(gx[H + j] + gh[H + j]);
            const double nn = std::tanh(gx[2 * H + j] + r * gh[2 * H + j]);
            next[j] = (1 - z) * nn + z * hk[j];
          }
        }
        hk = next;
        step[n] = next;
      }
  }
  return {seq, h, c};
}

std::vector<std::vector<Vec>> to3(const Tensor& t) {  // [A, B, C] -> nested
  std::vector<std::vector<Vec>> out(static_cast<size_t>(t.dim(0)), std::vector<Vec>(static_cast<size_t>(t.dim(1))));
  for (int64_t a = 0; a < t.dim(0); ++a)
    for (int64_t b = 0; b < t.dim(1); ++b)
      for (int64_t c = 0; c < t.dim(2); ++c)
        out[static_cast<size_t>(a)][static_cast<size_t>(b)].push_back(t.item_at((a * t.dim(1) + b) * t.dim(2) + c));
  return out;
}

void expect_nested(const Tensor& t, const std::vector<std::vector<Vec>>& ref, double tol) {
  const auto got = to3(t);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t a = 0; a < ref.size(); ++a)
    for (size_t b = 0; b < ref[a].size(); ++b)
      for (size_t c = 0; c < ref[a][b].size(); ++c) ASSERT_NEAR(got[a][b][c], ref[a][b][c], tol) << a << "," << b;
}

TEST(NnRnn, LstmAndGruMatchScalarReference) {
  init();
  for (bool lstm : {true, false}) {
    const int64_t T = 4, N = 3, in = 5, H = 6, L = 2;
    std::unique_ptr<nn::RnnBase> net;
    if (lstm)
      net = std::make_unique<nn::LSTM>(in, H, L, true, false, DType::f64);
    else
      net = std::make_unique<nn::GRU>(in, H, L, true, false, DType::f64);
    EXPECT_EQ(net->parameters_and_names().size(), 8u);
    EXPECT_EQ(net->parameter("weight_ih_l1")->shape(), (Shape{(lstm ? 4 : 3) * H, H}));
    const Tensor x = rnd({T, N, in}, 20, DType::f64);
    const Tensor h0 = rnd({L, N, H}, 21, DType::f64), c0 = rnd({L, N, H}, 22, DType::f64);
    const nn::RnnOutput r = lstm ? net->forward(x, h0, c0) : net->forward(x, h0);
    const RefOut ref = reference(*net, lstm, L, H, to3(x), to3(h0), to3(c0));
    EXPECT_EQ(r.output.shape(), (Shape{T, N, H}));
    expect_nested(r.output, ref.out, 1e-12);
    expect_nested(r.h_n, ref.h, 1e-12);
    if (lstm) expect_nested(r.c_n, ref.c, 1e-12);
    // Zero initial states by default; construct() returns the output sequence.
    const Tensor z = ops::zeros({L, N, H}, DType::f64);
    EXPECT_TRUE((*net)(x).bit_equal(lstm ? net->forward(x, z, z).output : net->forward(x, z).output));
  }
}

TEST(NnRnn, BatchFirstGradientsAndErrors) {
  init();
  nn::LSTM bf(3, 4, 1, true, true);
  nn::LSTM tf(3, 4, 1, true, false);
  for (auto& [n, p] : tf.parameters_and_names()) *p = *bf.parameter(n);
  const Tensor x = rnd({2, 5, 3}, 23);  // [N, T, in]
  const Tensor y = bf(x);
  EXPECT_EQ(y.shape(), (Shape{2, 5, 4}));
  EXPECT_TRUE(y.bit_equal(ops::transpose(tf(ops::transpose(x, {1, 0, 2})), {1, 0, 2})));
  const auto g = nn::value_and_grad(bf, [&] { return ops::reduce_mean(bf(x)); });
  EXPECT_EQ(g.grads.size(), 4u);
  double norm = 0;
  for (double v : g.grads.at("weight_hh_l0").to_doubles()) norm += std::abs(v);
  EXPECT_GT(norm, 0);
  EXPECT_NE(testing::error_of([&] { bf(rnd({2, 5, 4}, 1)); }).find("expected input [N, T, 3]"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { bf.forward(x, rnd({2, 2, 4}, 1)); }).find("expected h0 [1,2,4]"),
            std::string::npos);
  nn::GRU gru(3, 4);
  EXPECT_NE(testing::error_of([&] { gru.forward(x, Tensor(), rnd({1, 5, 4}, 1)); }).find("no cell state"),
            std::string::npos);
}

// Inference runs each layer as one rnn_sequence (the fused f32 kernel here); while a tape records, the unrolled steps
// (cheaper to differentiate). Both match the scalar reference within f32 rounding.
TEST(NnRnn, InferenceRunsTheFusedOpTrainingTheSteps) {
  init();
  for (bool lstm : {true, false}) {
    const int64_t T = 6, N = 3, in = 5, H = 16, L = 2;
    std::unique_ptr<nn::RnnBase> net;
    if (lstm) net = std::make_unique<nn::LSTM>(in, H, L);
    else net = std::make_unique<nn::GRU>(in, H, L);
    const Tensor x = rnd({T, N, in}, 30), h0 = rnd({L, N, H}, 31), c0 = rnd({L, N, H}, 32);
    const auto ops_run = [](const std::function<nn::RnnOutput()>& f, nn::RnnOutput& out) {
      Profiler prof;
      out = f();
      std::set<std::string> names;
      for (const auto& s : prof.summarize()) names.insert(s.op);
      return names;
    };
    nn::RnnOutput inf, train;
    const auto inf_ops = ops_run([&] { return lstm ? net->forward(x, h0, c0) : net->forward(x, h0); }, inf);
    const auto train_ops = ops_run(
        [&] {
          autodiff::GradientTape tape;
          return lstm ? net->forward(x, h0, c0) : net->forward(x, h0);
        },
        train);
    EXPECT_TRUE(inf_ops.count("rnn_sequence")) << lstm;
    EXPECT_FALSE(train_ops.count("rnn_sequence")) << lstm;
    const RefOut ref = reference(*net, lstm, L, H, to3(x), to3(h0), to3(c0));
    for (const nn::RnnOutput* r : {&inf, &train}) {
      expect_nested(r->output, ref.out, 2e-6);
      expect_nested(r->h_n, ref.h, 2e-6);
      if (lstm) expect_nested(r->c_n, ref.c, 2e-6);
    }
  }
}

TEST(NnAttention, MultiHeadAttentionMatchesScalarReference) {
  init();
  const int64_t N = 2, L = 3, S = 5, E = 8, heads = 2, d = 4;
  nn::MultiHeadAttention mha(E, heads, true, DType::f64);
  EXPECT_EQ(mha.num_parameters(), 4 * (E * E + E));
  const Tensor q = rnd({N, L, E}, 30, DType::f64), kv = rnd({N, S, E}, 31, DType::f64);
  Tensor mask = rnd({L, S}, 32, DType::f64);
  const Tensor y = mha.forward(q, kv, kv, mask);
  ASSERT_EQ(y.shape(), (Shape{N, L, E}));
  auto proj = [&](nn::Dense& p, const Tensor& x, int64_t n, int64_t i) {
    Vec row;
    for (int64_t e = 0; e < E; ++e) row.push_back(x.item_at((n * x.dim(1) + i) * E + e));
    return affine(p.weight(), p.bias(), row);
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < L; ++i) {
      const Vec qi = proj(mha.q_proj, q, n, i);
      Vec ctx(static_cast<size_t>(E), 0);
      for (int64_t h = 0; h < heads; ++h) {
        Vec s(static_cast<size_t>(S));
        double mx = -1e300, tot = 0;
        for (int64_t j = 0; j < S; ++j) {
          const Vec kj = proj(mha.k_proj, kv, n, j);
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += qi[static_cast<size_t>(h * d + c)] * kj[static_cast<size_t>(h * d + c)];
          s[static_cast<size_t>(j)] = dot / 2.0 + mask.item_at(i * S + j);
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        for (double& v : s) tot += (v = std::exp(v - mx));
        for (int64_t j = 0; j < S; ++j) {
          const Vec vj = proj(mha.v_proj, kv, n, j);
          for (int64_t c = 0; c < d; ++c)
            ctx[static_cast<size_t>(h * d + c)] += s[static_cast<size_t>(j)] / tot * vj[static_cast<size_t>(h * d + c)];
        }
      }
      const Vec out = affine(mha.out_proj.weight(), mha.out_proj.bias(), ctx);
      for (int64_t e = 0; e < E; ++e) ASSERT_NEAR(y.item_at((n * L + i) * E + e), out[static_cast<size_t>(e)], 1e-12);
    }
  const Tensor self = rnd({N, L, E}, 33, DType::f64);
  EXPECT_TRUE(mha(self).bit_equal(mha.forward(self, self, self)));
  const Tensor qkv[3] = {q, kv, kv};
  EXPECT_TRUE(mha(std::span<const Tensor>(qkv)).bit_equal(mha.forward(q, kv, kv)));
  EXPECT_NE(testing::error_of([] { nn::MultiHeadAttention(6, 4); }).find("not divisible by num_heads"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { mha(rnd({2, 3, 6}, 1, DType::f64)); }).find("expected [N, L, 8]"),
            std::string::npos);
}

TEST(NnAttention, TransformerEncoderLayerComposesItsCells) {
  init();
  for (bool pre : {false, true}) {
    nn::TransformerEncoderLayer layer(8, 2, 16, 0.1, "gelu", pre);
    EXPECT_EQ(layer.num_parameters(), 4 * 72 + (8 * 16 + 16) + (16 * 8 + 8) + 2 * 16);
    const Tensor x = rnd({2, 7, 8}, 34);
    // Eval mode: dropout is the identity.
    Tensor ref;
    auto ff = [&](const Tensor& h) { return layer.linear2(ops::gelu(layer.linear1(h))); };
    if (pre) {
      const Tensor a = layer.norm1(x);
      ref = ops::add(x, layer.self_attn(a));
      ref = ops::add(ref, ff(layer.norm2(ref)));
    } else {
      ref = layer.norm1(ops::add(x, layer.self_attn(x)));
      ref = layer.norm2(ops::add(ref, ff(ref)));
    }
    EXPECT_TRUE(layer(x).bit_equal(ref));
    // Train mode drops activations; a causal mask changes the result.
    layer.set_train(true);
    EXPECT_FALSE(layer(x).bit_equal(ref));
    layer.set_train(false);
    Vec m(49);
    for (int i = 0; i < 7; ++i)
      for (int j = 0; j < 7; ++j) m[static_cast<size_t>(i * 7 + j)] = j > i ? -1e9 : 0;
    const Tensor causal = Tensor::from_doubles(m, {7, 7}, DType::f32);
    EXPECT_FALSE(layer.forward(x, causal).bit_equal(ref));
    // With a causal mask, position 0 only sees itself: changing later positions leaves it unchanged.
    const Tensor x2 = ops::concat({ops::slice(x, {0}, {1}, {1}), rnd({2, 6, 8}, 35)}, 1);
    expect_close(ops::slice(layer.forward(x2, causal), {0}, {1}, {1}), ops::slice(layer.forward(x, causal), {0}, {1}, {1}),
                 1e-6);
  }
  EXPECT_NE(testing::error_of([] { nn::TransformerEncoderLayer(8, 2, 16, 0.1, "tanh"); }).find("relu|gelu"),
            std::string::npos);
}

}  // namespace
}  // namespace spore
