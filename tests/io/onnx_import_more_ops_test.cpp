// The ONNX ops that import as decompositions for the node tests' remaining families (issue 41): signal (windows,
// DFT, STFT), integer (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, BitShift), ReverseSequence, Det,
// BatchNormalization's training outputs, MaxPool's Indices, MaxUnpool, TfIdfVectorizer and Dropout with a run-time
// training_mode. Each is run on seeded random inputs (never all zeros) and compared with a direct loop written here
// in double, with the tolerance stated at each check; errors name the node.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <complex>
#include <numbers>
#include <random>

#include <onnx/onnx_pb.h>

#include <spore/spore.h>

#include "io/onnx/onnx.h"
#include "io/onnx/onnx_import_internal.h"
#include "onnx_model_builder.h"
#include "ops/graph_ops.h"
#include "runtime/plan.h"
#include "test_util.h"

namespace spore {
namespace {

using testing::error_of;
using testing::attr_ints;
using testing::attr_s;
using testing::ModelBuilder;
using P = onnx::TensorProto;

void attr_f(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

std::vector<std::string> dims_of(const Shape& s) {
  std::vector<std::string> d;
  for (int64_t x : s) d.push_back(std::to_string(x));
  return d;
}

// Imports with `bound` inputs as constants (as a deployed session binds scalar control inputs), compiles for the
// other inputs' shapes and runs.
std::vector<Tensor> run(const ModelBuilder& b, const std::vector<Tensor>& inputs,
                        const std::map<std::string, Tensor>& bound = {}) {
  io::OnnxImportOptions o;
  o.input_values = bound;
  std::unique_ptr<Graph> g = io::import_onnx_bytes(b.bytes(), "m", o);
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  specialize_inputs(*g, shapes);
  Plan p = compile_plan(std::move(g), {});
  return p.run(inputs);
}

Tensor random(Shape s, DType dt, std::mt19937& rng, double lo = -2, double hi = 2) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& x : v) x = is_floating(dt) ? u(rng) : std::floor(u(rng));
  return Tensor::from_doubles(v, s, dt);
}

// |got - want| <= atol + rtol |want| everywhere.
void expect_close(const Tensor& got, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = want[static_cast<size_t>(i)];
    if (!(std::abs(got.item_at(i) - w) <= atol + rtol * std::abs(w)) && bad++ < 5)
      ADD_FAILURE() << what << " at " << i << ": " << got.item_at(i) << " vs " << w;
  }
}
void expect_exact(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  expect_close(got, want, 0, 0, what);
}

// ---- signal

// DFT along axis 1 of [batch, n, parts] (real: parts 1, complex: 2), against the O(n^2) sum in double.
std::vector<double> direct_dft(const Tensor& x, int64_t len, int64_t bins, bool inverse) {
  const int64_t b = x.dim(0), n = x.dim(1), parts = x.dim(2);
  std::vector<double> y(static_cast<size_t>(b * bins * 2));
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t k = 0; k < bins; ++k) {
      std::complex<double> acc = 0;
      for (int64_t j = 0; j < std::min(n, len); ++j) {
        const std::complex<double> v(x.item_at((bb * n + j) * parts),
                                     parts == 2 ? x.item_at((bb * n + j) * parts + 1) : 0.0);
        const double t = (inverse ? 2 : -2) * std::numbers::pi * static_cast<double>(k * j) / static_cast<double>(len);
        acc += v * std::polar(1.0, t);
      }
      if (inverse) acc /= static_cast<double>(len);
      y[static_cast<size_t>((bb * bins + k) * 2)] = acc.real();
      y[static_cast<size_t>((bb * bins + k) * 2 + 1)] = acc.imag();
    }
  return y;
}

// f64: 1e-12; f32: 1e-5 of the largest output (each bin sums n products rounded to f32); f16: 2e-3 (the input and
// output roundings, computed in f32).
TEST(OnnxImportMoreOps, DftAgainstDirectSum) {
  std::mt19937 rng(41);
  struct Case {
    int64_t n, parts, dft_length;
    bool onesided, inverse;
    DType dt;
  };
  const Case cases[] = {{10, 1, -1, false, false, DType::f32}, {12, 2, -1, false, true, DType::f32},
                        {9, 1, -1, true, false, DType::f64},   {8, 2, 13, false, false, DType::f64},
                        {16, 1, 11, true, false, DType::f32},  {7, 2, -1, false, false, DType::f16}};
  for (const Case& c : cases) {
    const std::string what = fmt::format("n={} parts={} len={} onesided={} inverse={} {}", c.n, c.parts, c.dft_length,
                                         c.onesided, c.inverse, dtype_name(c.dt));
    ModelBuilder b(17);
    const int32_t et = io::onnx_import::onnx_type_of(c.dt);
    b.input("x", et, {"3", std::to_string(c.n), std::to_string(c.parts)});
    std::vector<std::string> ins{"x"};
    if (c.dft_length > 0) {
      b.init_i64("len", {c.dft_length});
      b.g().mutable_initializer(0)->clear_dims();
      ins.push_back("len");
    }
    auto* n = b.node("DFT", ins, {"y"}, "dft_node");
    ModelBuilder::attr_i(n, "onesided", c.onesided);
    ModelBuilder::attr_i(n, "inverse", c.inverse);
    b.output("y", et);
    const Tensor x = random({3, c.n, c.parts}, c.dt, rng);
    const int64_t len = c.dft_length > 0 ? c.dft_length : c.n, bins = c.onesided ? len / 2 + 1 : len;
    const Tensor y = run(b, {x}).at(0);
    EXPECT_EQ(y.shape(), (Shape{3, bins, 2})) << what;
    const std::vector<double> want = direct_dft(x, len, bins, c.inverse);
    double peak = 0;
    for (double v : want) peak = std::max(peak, std::abs(v));
    const double atol = c.dt == DType::f64 ? 1e-12 : c.dt == DType::f32 ? 1e-5 * peak : 2e-3 * peak;
    expect_close(y, want, c.dt == DType::f16 ? 1e-3 : 0, atol, what);
  }
}

// DFT over axis 1 of a rank-4 input (the signal dim is not next to the parts dim): the other axes stay in place.
TEST(OnnxImportMoreOps, DftAlongAnotherAxis) {
  std::mt19937 rng(42);
  const int64_t B = 2, N = 5, C = 3;
  ModelBuilder b(17);
  b.input("x", P::FLOAT, {"2", "5", "3", "1"});
  ModelBuilder::attr_i(b.node("DFT", {"x"}, {"y"}), "axis", 1);
  b.output("y");
  const Tensor x = random({B, N, C, 1}, DType::f32, rng);
  const Tensor y = run(b, {x}).at(0);
  ASSERT_EQ(y.shape(), (Shape{B, N, C, 2}));
  std::vector<double> want;
  for (int64_t bb = 0; bb < B; ++bb)
    for (int64_t k = 0; k < N; ++k)
      for (int64_t c = 0; c < C; ++c) {
        std::complex<double> acc = 0;
        for (int64_t j = 0; j < N; ++j)
          acc +=
              x.item_at((bb * N + j) * C + c) * std::polar(1.0, -2 * std::numbers::pi * static_cast<double>(k * j) / N);
        want.push_back(acc.real());
        want.push_back(acc.imag());
      }
  expect_close(y, want, 0, 1e-5 * N * 2, "axis 1 of rank 4");
}

TEST(OnnxImportMoreOps, StftWithWindowAgainstDirectSum) {
  std::mt19937 rng(43);
  const int64_t len = 50, step = 7, fl = 12, frames = (len - fl) / step + 1, bins = fl / 2 + 1;
  ModelBuilder b(17);
  b.input("s", P::FLOAT, {"2", std::to_string(len), "1"});
  b.input("w", P::FLOAT, {std::to_string(fl)});
  b.init_i64("step", {step});
  b.g().mutable_initializer(0)->clear_dims();
  b.node("STFT", {"s", "step", "w"}, {"y"}, "stft_node");
  b.output("y");
  const Tensor s = random({2, len, 1}, DType::f32, rng), w = random({fl}, DType::f32, rng, 0.1, 1);
  const Tensor y = run(b, {s, w}).at(0);
  ASSERT_EQ(y.shape(), (Shape{2, frames, bins, 2}));
  std::vector<double> want;
  for (int64_t bb = 0; bb < 2; ++bb)
    for (int64_t f = 0; f < frames; ++f)
      for (int64_t k = 0; k < bins; ++k) {
        std::complex<double> acc = 0;
        for (int64_t j = 0; j < fl; ++j)
          acc += s.item_at(bb * len + f * step + j) * w.item_at(j) *
                 std::polar(1.0, -2 * std::numbers::pi * static_cast<double>(k * j) / fl);
        want.push_back(acc.real());
        want.push_back(acc.imag());
      }
  expect_close(y, want, 0, 1e-5 * fl * 2, "stft");
  // A frame longer than the signal is an error naming the node.
  ModelBuilder bad(17);
  bad.input("s", P::FLOAT, {"1", "5", "1"});
  bad.input("w", P::FLOAT, {"8"});
  bad.init_i64("step", {2});
  bad.g().mutable_initializer(0)->clear_dims();
  bad.node("STFT", {"s", "step", "w"}, {"y"}, "stft_bad");
  bad.output("y");
  const std::string msg = error_of([&] { io::import_onnx_bytes(bad.bytes(), "bad"); });
  EXPECT_NE(msg.find("stft_bad"), std::string::npos) << msg;
  EXPECT_NE(msg.find("frame_length 8"), std::string::npos) << msg;
}

// Windows: the symmetric forms against numpy's hanning/hamming/blackman formulas (ONNX Hamming uses 25/46), the
// periodic forms against the same formulas over size + 1 points.
TEST(OnnxImportMoreOps, WindowsMatchTheirFormulas) {
  struct W {
    const char* op;
    double a0, a1, a2;
  };
  for (const W& w : {W{"HannWindow", 0.5, 0.5, 0}, W{"HammingWindow", 25.0 / 46, 21.0 / 46, 0},
                     W{"BlackmanWindow", 0.42, 0.5, 0.08}})
    for (int periodic : {0, 1}) {
      const int64_t size = 9;
      ModelBuilder b(17);
      b.input("n", P::INT64, {});
      ModelBuilder::attr_i(b.node(w.op, {"n"}, {"y"}), "periodic", periodic);
      b.output("y");
      const Tensor y = run(b, {}, {{"n", Tensor::scalar(static_cast<double>(size), DType::i64)}}).at(0);
      std::vector<double> want;
      const double den = static_cast<double>(periodic ? size : size - 1);
      for (int64_t i = 0; i < size; ++i) {
        const double t = 2 * std::numbers::pi * static_cast<double>(i) / den;
        want.push_back(w.a0 - w.a1 * std::cos(t) + w.a2 * std::cos(2 * t));
      }
      expect_close(y, want, 1e-6, 1e-7, fmt::format("{} periodic={}", w.op, periodic));
      if (!periodic) {
        EXPECT_NEAR(y.item_at(4), 1.0, 1e-6) << w.op << " peaks at the centre";
      }
    }
}

// ---- integer ops

// Exact int32 accumulators with per-row a_zero_point and per-column b_zero_point; u8 x i8. K = 37 runs the matmul
// in f32 (every partial sum an integer below 2^24), K = 300 in f64 (37 * 255^2 < 2^24 < 300 * 255^2).
TEST(OnnxImportMoreOps, MatMulIntegerIsExact) {
  std::mt19937 rng(44);
  for (int64_t k : {37, 300}) {
    const int64_t m = 5, n = 6;
    ModelBuilder b(10);
    b.input("a", P::UINT8, {"5", std::to_string(k)});
    b.input("b", P::INT8, {std::to_string(k), "6"});
    b.input("az", P::UINT8, {"5"});
    b.input("bz", P::INT8, {"6"});
    b.node("MatMulInteger", {"a", "b", "az", "bz"}, {"y"});
    b.output("y", P::INT32);
    const Tensor a = random({m, k}, DType::u8, rng, 0, 256), bb = random({k, n}, DType::i8, rng, -128, 128),
                 az = random({m}, DType::u8, rng, 0, 256), bz = random({n}, DType::i8, rng, -128, 128);
    const Tensor y = run(b, {a, bb, az, bz}).at(0);
    EXPECT_EQ(y.dtype(), DType::i32);
    std::vector<double> want;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int64_t t = 0; t < k; ++t)
          acc += (static_cast<int64_t>(a.item_at(i * k + t)) - static_cast<int64_t>(az.item_at(i))) *
                 (static_cast<int64_t>(bb.item_at(t * n + j)) - static_cast<int64_t>(bz.item_at(j)));
        want.push_back(static_cast<double>(acc));
      }
    expect_exact(y, want, fmt::format("MatMulInteger K={}", k));
  }
}

// y[n, m, oh, ow] = sum (x - xz)(w - wz[m]) over c, kh, kw, with padding reading xz (0 after centering).
std::vector<int64_t> direct_conv_int(const Tensor& x, const Tensor& w, int64_t xz, const std::vector<int64_t>& wz,
                                     int64_t pad, int64_t stride, int64_t* oh_out, int64_t* ow_out) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = w.dim(0), KH = w.dim(2), KW = w.dim(3);
  const int64_t OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
  *oh_out = OH;
  *ow_out = OW;
  std::vector<int64_t> y;
  for (int64_t nn = 0; nn < N; ++nn)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t acc = 0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j) {
                const int64_t h = oh * stride - pad + i, ww = ow * stride - pad + j;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                acc += (static_cast<int64_t>(x.item_at(((nn * C + c) * H + h) * W + ww)) - xz) *
                       (static_cast<int64_t>(w.item_at(((m * C + c) * KH + i) * KW + j)) - wz[static_cast<size_t>(m)]);
              }
          y.push_back(acc);
        }
  return y;
}

TEST(OnnxImportMoreOps, ConvIntegerAndQLinearConvAgainstDirectLoops) {
  std::mt19937 rng(45);
  const Shape xs{2, 3, 7, 6}, ws{4, 3, 3, 2};
  const Tensor x = random(xs, DType::u8, rng, 0, 256), w = random(ws, DType::u8, rng, 0, 256);
  const Tensor xz = Tensor::scalar(131, DType::u8), wz = Tensor::from_vector<uint8_t>({120, 3, 250, 128}, {4});
  int64_t oh = 0, ow = 0;
  const std::vector<int64_t> acc = direct_conv_int(x, w, 131, {120, 3, 250, 128}, 1, 2, &oh, &ow);
  {
    ModelBuilder b(10);
    b.input("x", P::UINT8, dims_of(xs));
    b.input("w", P::UINT8, dims_of(ws));
    b.input("xz", P::UINT8, {});
    b.input("wz", P::UINT8, {"4"});
    auto* n = b.node("ConvInteger", {"x", "w", "xz", "wz"}, {"y"});
    attr_ints(n, "pads", {1, 1, 1, 1});
    attr_ints(n, "strides", {2, 2});
    b.output("y", P::INT32);
    const Tensor y = run(b, {x, w, xz, wz}).at(0);
    EXPECT_EQ(y.shape(), (Shape{2, 4, oh, ow}));
    expect_exact(y, std::vector<double>(acc.begin(), acc.end()), "ConvInteger");
  }
  {  // QLinearConv: per-channel w_scale, int32 bias, int8 output; y = sat(rne((acc + B) * xs * ws / ys) + yz)
    ModelBuilder b(10);
    b.input("x", P::UINT8, dims_of(xs));
    b.input("xs", P::FLOAT, {});
    b.input("xz", P::UINT8, {});
    b.input("w", P::UINT8, dims_of(ws));
    b.input("wsc", P::FLOAT, {"4"});
    b.input("wz", P::UINT8, {"4"});
    b.input("ys", P::FLOAT, {});
    b.input("yz", P::INT8, {});
    b.input("bias", P::INT32, {"4"});
    auto* n = b.node("QLinearConv", {"x", "xs", "xz", "w", "wsc", "wz", "ys", "yz", "bias"}, {"y"}, "qconv");
    attr_ints(n, "pads", {1, 1, 1, 1});
    attr_ints(n, "strides", {2, 2});
    b.output("y", P::INT8);
    const Tensor xsc = Tensor::scalar(0.02, DType::f32),
                 wsc = Tensor::from_vector<float>({0.01f, 0.03f, 0.002f, 0.05f}, {4});
    const Tensor ysc = Tensor::scalar(0.5, DType::f32), yz = Tensor::scalar(-7, DType::i8);
    const Tensor bias = Tensor::from_vector<int32_t>({1000, -20000, 5, 300}, {4});
    const Tensor y = run(b, {x, xsc, xz, w, wsc, wz, ysc, yz, bias}).at(0);
    EXPECT_EQ(y.dtype(), DType::i8);
    std::vector<double> want;
    int saturated = 0;
    for (size_t i = 0; i < acc.size(); ++i) {
      const int64_t m = static_cast<int64_t>(i) / (oh * ow) % 4;
      const double scale = static_cast<double>(xsc.item_at(0)) * wsc.item_at(m) / ysc.item_at(0);
      const double v = std::nearbyint(static_cast<double>(acc[i] + static_cast<int64_t>(bias.item_at(m))) * scale) - 7;
      saturated += v < -128 || v > 127;
      want.push_back(std::clamp(v, -128.0, 127.0));
    }
    EXPECT_GT(saturated, 0) << "the case should reach saturation";
    expect_exact(y, want, "QLinearConv");
  }
}

TEST(OnnxImportMoreOps, QLinearMatMulRoundsHalfToEvenAndSaturates) {
  // a - az = [[1, 3, 5], [190, 0, 0]], b - bz = [[1, 2, 3, 235], [0, 0, 0, 235], [0, 0, 0, 0]], scale 0.5: row 0
  // gives 0.5, 1, 1.5 (ties: 0 and 2) and 470; with y_zero_point 100, 570 saturates at 255, as do row 1's 290, 385.
  ModelBuilder b(10);
  b.input("a", P::UINT8, {"2", "3"});
  b.input("as", P::FLOAT, {});
  b.input("az", P::UINT8, {});
  b.input("b", P::UINT8, {"3", "4"});
  b.input("bs", P::FLOAT, {});
  b.input("bz", P::UINT8, {});
  b.input("ys", P::FLOAT, {});
  b.input("yz", P::UINT8, {});
  b.node("QLinearMatMul", {"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, {"y"});
  b.output("y", P::UINT8);
  const Tensor a = Tensor::from_vector<uint8_t>({11, 13, 15, 200, 10, 10}, {2, 3});
  const Tensor bm = Tensor::from_vector<uint8_t>({21, 22, 23, 255, 20, 20, 20, 255, 20, 20, 20, 20}, {3, 4});
  const Tensor y =
      run(b, {a, Tensor::scalar(1, DType::f32), Tensor::scalar(10, DType::u8), bm, Tensor::scalar(0.5, DType::f32),
              Tensor::scalar(20, DType::u8), Tensor::scalar(1, DType::f32), Tensor::scalar(100, DType::u8)})
          .at(0);
  expect_exact(y, {100, 101, 102, 255, 195, 255, 255, 255}, "QLinearMatMul");
}

TEST(OnnxImportMoreOps, BitShiftBothDirections) {
  std::mt19937 rng(46);
  for (const char* dir : {"LEFT", "RIGHT"}) {
    ModelBuilder b(11);
    b.input("x", P::UINT8, {"64"});
    b.input("s", P::UINT8, {"64"});
    attr_s(b.node("BitShift", {"x", "s"}, {"y"}), "direction", dir);
    b.output("y", P::UINT8);
    const Tensor x = random({64}, DType::u8, rng, 1, 256), s = random({64}, DType::u8, rng, 0, 11);  // shifts >= 8 too
    const Tensor y = run(b, {x, s}).at(0);
    std::vector<double> want;
    for (int64_t i = 0; i < 64; ++i) {
      const auto v = static_cast<unsigned>(x.item_at(i)), sh = static_cast<unsigned>(s.item_at(i));
      want.push_back(sh >= 8 ? 0 : std::string(dir) == "LEFT" ? (v << sh) & 0xFF : v >> sh);
    }
    expect_exact(y, want, dir);
  }
  ModelBuilder b(11);
  b.input("x", P::UINT8, {"4"});
  b.input("s", P::UINT8, {"4"});
  attr_s(b.node("BitShift", {"x", "s"}, {"y"}, "shifty"), "direction", "UP");
  b.output("y", P::UINT8);
  const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "bad"); });
  EXPECT_NE(msg.find("shifty"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'UP'"), std::string::npos) << msg;
}

TEST(OnnxImportMoreOps, ReverseSequenceBothLayouts) {
  std::mt19937 rng(47);
  for (int64_t batch_axis : {0, 1}) {
    const int64_t T = 5, B = 3, F = 2, time_axis = 1 - batch_axis;
    const Shape s = batch_axis == 0 ? Shape{B, T, F} : Shape{T, B, F};
    ModelBuilder b(10);
    b.input("x", P::FLOAT, dims_of(s));
    b.input("l", P::INT64, {"3"});
    auto* n = b.node("ReverseSequence", {"x", "l"}, {"y"});
    ModelBuilder::attr_i(n, "batch_axis", batch_axis);
    ModelBuilder::attr_i(n, "time_axis", time_axis);
    b.output("y");
    const Tensor x = random(s, DType::f32, rng);
    const Tensor l = Tensor::from_vector<int64_t>({5, 1, 3}, {3});
    const Tensor y = run(b, {x, l}).at(0);
    std::vector<double> want(static_cast<size_t>(x.numel()));
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t f = 0; f < F; ++f) {
          const int64_t len = static_cast<int64_t>(l.item_at(bb)), src = t < len ? len - 1 - t : t;
          auto at = [&](int64_t tt) { return batch_axis == 0 ? (bb * T + tt) * F + f : (tt * B + bb) * F + f; };
          want[static_cast<size_t>(at(t))] = x.item_at(at(src));
        }
    expect_exact(y, want, fmt::format("batch_axis {}", batch_axis));
  }
}

// Det against Gaussian elimination in double with full pivoting on random matrices (f32: rtol 1e-4; f64: 1e-12),
// and a singular matrix is exactly 0.
double det_ref(std::vector<double> a, int64_t n) {
  double d = 1;
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = k;
    for (int64_t i = k; i < n; ++i)
      if (std::abs(a[static_cast<size_t>(i * n + k)]) > std::abs(a[static_cast<size_t>(p * n + k)])) p = i;
    if (a[static_cast<size_t>(p * n + k)] == 0) return 0;
    if (p != k) {
      for (int64_t j = 0; j < n; ++j) std::swap(a[static_cast<size_t>(p * n + j)], a[static_cast<size_t>(k * n + j)]);
      d = -d;
    }
    d *= a[static_cast<size_t>(k * n + k)];
    for (int64_t i = k + 1; i < n; ++i) {
      const double f = a[static_cast<size_t>(i * n + k)] / a[static_cast<size_t>(k * n + k)];
      for (int64_t j = k; j < n; ++j) a[static_cast<size_t>(i * n + j)] -= f * a[static_cast<size_t>(k * n + j)];
    }
  }
  return d;
}

TEST(OnnxImportMoreOps, DetAgainstEliminationInDouble) {
  std::mt19937 rng(48);
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t n : {1, 2, 5, 9}) {
      ModelBuilder b(11);
      const int32_t et = io::onnx_import::onnx_type_of(dt);
      b.input("x", et, {"2", "3", std::to_string(n), std::to_string(n)});
      b.node("Det", {"x"}, {"y"});
      b.output("y", et);
      Tensor x = random({2, 3, n, n}, dt, rng);
      const Tensor y = run(b, {x}).at(0);
      ASSERT_EQ(y.shape(), (Shape{2, 3}));
      std::vector<double> want;
      for (int64_t m = 0; m < 6; ++m) {
        std::vector<double> a(static_cast<size_t>(n * n));
        for (int64_t i = 0; i < n * n; ++i) a[static_cast<size_t>(i)] = x.item_at(m * n * n + i);
        want.push_back(det_ref(a, n));
      }
      expect_close(y, want, dt == DType::f64 ? 1e-12 : 1e-4, dt == DType::f64 ? 1e-12 : 1e-5,
                   fmt::format("{}x{} {}", n, n, dtype_name(dt)));
    }
  ModelBuilder b(11);
  b.input("x", P::FLOAT, {"3", "3"});
  b.node("Det", {"x"}, {"y"});
  b.output("y");
  const Tensor singular = Tensor::from_vector<float>({0, 2, 3, 0, 4, 6, 0, 1, 5}, {3, 3});  // column 0 is zero
  expect_exact(run(b, {singular}).at(0), {0}, "singular");
  const Tensor perm = Tensor::from_vector<float>({0, 1, 0, 0, 0, 2, 3, 0, 0}, {3, 3});  // two swaps: det = 6
  expect_close(run(b, {perm}).at(0), {6}, 1e-6, 0, "permutation");
}

TEST(OnnxImportMoreOps, BatchNormTrainingOutputs) {
  std::mt19937 rng(49);
  const int64_t N = 3, C = 4, H = 2, W = 5;
  ModelBuilder b(15);
  b.input("x", P::FLOAT, {"3", "4", "2", "5"});
  for (const char* p : {"s", "bias", "mean", "var"}) b.input(p, P::FLOAT, {"4"});
  auto* n = b.node("BatchNormalization", {"x", "s", "bias", "mean", "var"}, {"y", "rm", "rv"});
  ModelBuilder::attr_i(n, "training_mode", 1);
  attr_f(n, "momentum", 0.8f);
  attr_f(n, "epsilon", 0.01f);
  b.output("y");
  b.output("rm");
  b.output("rv");
  const Tensor x = random({N, C, H, W}, DType::f32, rng), s = random({C}, DType::f32, rng),
               bias = random({C}, DType::f32, rng), mean = random({C}, DType::f32, rng),
               var = random({C}, DType::f32, rng, 0.5, 2);
  const std::vector<Tensor> out = run(b, {x, s, bias, mean, var});
  ASSERT_EQ(out.size(), 3u);
  std::vector<double> y(static_cast<size_t>(x.numel())), rm, rv;
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    const double cnt = static_cast<double>(N * H * W);
    for (int64_t nn = 0; nn < N; ++nn)
      for (int64_t i = 0; i < H * W; ++i) sum += x.item_at((nn * C + c) * H * W + i);
    const double mu = sum / cnt;
    for (int64_t nn = 0; nn < N; ++nn)
      for (int64_t i = 0; i < H * W; ++i) sq += std::pow(x.item_at((nn * C + c) * H * W + i) - mu, 2);
    const double v = sq / cnt;
    for (int64_t nn = 0; nn < N; ++nn)
      for (int64_t i = 0; i < H * W; ++i) {
        const int64_t at = (nn * C + c) * H * W + i;
        y[static_cast<size_t>(at)] = (x.item_at(at) - mu) / std::sqrt(v + 0.01f) * s.item_at(c) + bias.item_at(c);
      }
    rm.push_back(mean.item_at(c) * 0.8f + mu * (1 - 0.8f));
    rv.push_back(var.item_at(c) * 0.8f + v * (1 - 0.8f));
  }
  expect_close(out[0], y, 1e-4, 1e-5, "y");
  expect_close(out[1], rm, 1e-5, 1e-6, "running mean");
  expect_close(out[2], rv, 1e-5, 1e-6, "running var");
}

// MaxPool's Indices (and values) against a direct window scan (first maximum), with padding, strides, dilation and
// ceil_mode, in both storage orders; MaxUnpool of the result puts each maximum back at its index.
TEST(OnnxImportMoreOps, MaxPoolIndicesAndMaxUnpool) {
  std::mt19937 rng(50);
  const int64_t N = 2, C = 3, H = 7, W = 6, kh = 3, kw = 2, sh = 2, sw = 2, dh = 1, dw = 2, pt = 1, pl = 1, pb = 1,
                pr = 0;
  for (int order : {0, 1}) {
    ModelBuilder b(12);
    b.input("x", P::FLOAT, {"2", "3", "7", "6"});
    auto* n = b.node("MaxPool", {"x"}, {"y", "i"}, "pool");
    attr_ints(n, "kernel_shape", {kh, kw});
    attr_ints(n, "strides", {sh, sw});
    attr_ints(n, "dilations", {dh, dw});
    attr_ints(n, "pads", {pt, pl, pb, pr});
    ModelBuilder::attr_i(n, "ceil_mode", 1);
    ModelBuilder::attr_i(n, "storage_order", order);
    b.output("y");
    b.output("i", P::INT64);
    const Tensor x = random({N, C, H, W}, DType::f32, rng);
    const std::vector<Tensor> out = run(b, {x});
    auto out_dim = [](int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
      const int64_t span = in + p0 + p1 - ((k - 1) * d + 1);
      int64_t o = (span + s - 1) / s + 1;
      if ((o - 1) * s >= in + p0) --o;
      return o;
    };
    const int64_t OH = out_dim(H, kh, sh, dh, pt, pb), OW = out_dim(W, kw, sw, dw, pl, pr);
    ASSERT_EQ(out[0].shape(), (Shape{N, C, OH, OW}));
    std::vector<double> vals, idx;
    for (int64_t nc = 0; nc < N * C; ++nc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double best = -INFINITY;
          int64_t at = -1;
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t h = oh * sh - pt + i * dh, w = ow * sw - pl + j * dw;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              const double v = x.item_at(nc * H * W + h * W + w);
              if (v > best) {
                best = v;
                at = nc * H * W + (order ? w * H + h : h * W + w);
              }
            }
          vals.push_back(best);
          idx.push_back(static_cast<double>(at));
        }
    expect_exact(out[0], vals, "values");
    expect_exact(out[1], idx, fmt::format("indices, storage_order {}", order));
  }
  // MaxUnpool of a 2x2/2 pooling of 3x3 windows: indices address the inferred 6x6 plane; an output_shape of 7x7
  // adds the extra row and column after it.
  ModelBuilder b(11);
  b.input("x", P::FLOAT, {"2", "3", "3", "3"});
  b.input("i", P::INT64, {"2", "3", "3", "3"});
  b.input("shape", P::INT64, {"4"});
  auto* n = b.node("MaxUnpool", {"x", "i", "shape"}, {"y"});
  attr_ints(n, "kernel_shape", {2, 2});
  attr_ints(n, "strides", {2, 2});
  b.output("y");
  const Tensor x = random({2, 3, 3, 3}, DType::f32, rng);
  std::vector<int64_t> iv;
  for (int64_t nc = 0; nc < 6; ++nc)
    for (int64_t oh = 0; oh < 3; ++oh)
      for (int64_t ow = 0; ow < 3; ++ow) iv.push_back(nc * 36 + (2 * oh + (ow % 2)) * 6 + 2 * ow + (oh % 2));
  const Tensor i = Tensor::from_vector(iv, {2, 3, 3, 3});
  const Tensor y = run(b, {x, i}, {{"shape", Tensor::from_vector<int64_t>({2, 3, 7, 7}, {4})}}).at(0);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 7, 7}));
  std::vector<double> want(static_cast<size_t>(2 * 3 * 49), 0.0);
  for (size_t k = 0; k < iv.size(); ++k) {
    const int64_t nc = iv[k] / 36, r = iv[k] % 36 / 6, col = iv[k] % 6;
    want[static_cast<size_t>(nc * 49 + r * 7 + col)] = x.item_at(static_cast<int64_t>(k));
  }
  expect_exact(y, want, "MaxUnpool");
  // A smaller output_shape than the unpooled one is an error.
  const std::string msg = error_of([&] {
    run(b, {x, i}, {{"shape", Tensor::from_vector<int64_t>({2, 3, 5, 7}, {4})}});
  });
  EXPECT_NE(msg.find("smaller than the unpooled shape"), std::string::npos) << msg;
}

// TfIdfVectorizer against a direct count of (start, skip) windows: uni- and bigrams, skips up to 2, TF and TFIDF
// with weights, output columns permuted.
TEST(OnnxImportMoreOps, TfIdfVectorizerCountsWindows) {
  std::mt19937 rng(51);
  const std::vector<int64_t> pool{2, 3, 5, 4, 5, 6, 7, 8, 6, 7}, counts{0, 4}, indexes{6, 0, 1, 2, 3, 4, 5};
  const std::vector<float> weights{1.5f, 2, 0.5f, 1, 3, 0.25f, 4};
  for (const char* mode : {"TF", "TFIDF", "IDF"}) {
    ModelBuilder b(9);
    b.input("x", P::INT32, {"3", "12"});
    auto* n = b.node("TfIdfVectorizer", {"x"}, {"y"});
    ModelBuilder::attr_i(n, "min_gram_length", 1);
    ModelBuilder::attr_i(n, "max_gram_length", 2);
    ModelBuilder::attr_i(n, "max_skip_count", 2);
    attr_s(n, "mode", mode);
    attr_ints(n, "ngram_counts", counts);
    attr_ints(n, "ngram_indexes", indexes);
    attr_ints(n, "pool_int64s", pool);
    auto* a = n->add_attribute();
    a->set_name("weights");
    a->set_type(onnx::AttributeProto::FLOATS);
    for (float w : weights) a->add_floats(w);
    b.output("y");
    const Tensor x = random({3, 12}, DType::i32, rng, 2, 9);
    const Tensor y = run(b, {x}).at(0);
    ASSERT_EQ(y.shape(), (Shape{3, 7}));
    std::vector<double> want(21, 0.0);
    for (int64_t r = 0; r < 3; ++r) {
      auto tok = [&](int64_t i) { return static_cast<int64_t>(x.item_at(r * 12 + i)); };
      std::vector<double> cnt(7, 0.0);
      for (int64_t g = 0; g < 4; ++g)  // unigrams: once
        for (int64_t i = 0; i < 12; ++i) cnt[static_cast<size_t>(g)] += tok(i) == pool[static_cast<size_t>(g)];
      for (int64_t g = 0; g < 3; ++g)  // bigrams: every skip distance 1..3
        for (int64_t d = 1; d <= 3; ++d)
          for (int64_t i = 0; i + d < 12; ++i)
            cnt[static_cast<size_t>(4 + g)] +=
                tok(i) == pool[static_cast<size_t>(4 + 2 * g)] && tok(i + d) == pool[static_cast<size_t>(5 + 2 * g)];
      for (int64_t g = 0; g < 7; ++g) {
        const double c = cnt[static_cast<size_t>(g)], w = weights[static_cast<size_t>(g)];
        const double v = std::string(mode) == "TF" ? c : std::string(mode) == "IDF" ? (c > 0 ? w : 0) : c * w;
        want[static_cast<size_t>(r * 7 + indexes[static_cast<size_t>(g)])] = v;
      }
    }
    expect_exact(y, want, mode);
  }
}

// Dropout-12+ with training_mode as a graph input: bound false, or true with ratio 0, it is the identity (mask all
// true); true with a nonzero ratio is refused naming the node (random masks).
TEST(OnnxImportMoreOps, DropoutWithRunTimeTrainingMode) {
  std::mt19937 rng(52);
  ModelBuilder b(13);
  b.input("x", P::FLOAT, {"3", "4"});
  b.input("r", P::FLOAT, {});
  b.input("t", P::BOOL, {});
  b.node("Dropout", {"x", "r", "t"}, {"y", "mask"}, "drop");
  b.output("y");
  b.output("mask", P::BOOL);
  const Tensor x = random({3, 4}, DType::f32, rng);
  std::vector<double> xv, ones(12, 1.0);
  for (int64_t i = 0; i < 12; ++i) xv.push_back(x.item_at(i));
  {
    const std::vector<Tensor> out =
        run(b, {x, Tensor::scalar(0.5, DType::f32)}, {{"t", Tensor::scalar(0, DType::boolean)}});
    expect_exact(out[0], xv, "training false");
    expect_exact(out[1], ones, "mask");
  }
  {
    const std::vector<Tensor> out =
        run(b, {x}, {{"t", Tensor::scalar(1, DType::boolean)}, {"r", Tensor::scalar(0, DType::f32)}});
    expect_exact(out[0], xv, "ratio 0");
  }
  io::OnnxImportOptions o;
  o.input_values = {{"t", Tensor::scalar(1, DType::boolean)}, {"r", Tensor::scalar(0.5, DType::f32)}};
  const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "m", o); });
  EXPECT_NE(msg.find("drop"), std::string::npos) << msg;
  EXPECT_NE(msg.find("random masks"), std::string::npos) << msg;
  o.input_values["r"] = Tensor::scalar(1.5, DType::f32);
  EXPECT_NE(error_of([&] { io::import_onnx_bytes(b.bytes(), "m", o); }).find("outside [0, 1)"), std::string::npos);
  // check-ops: a run-time training_mode is no longer refused up front.
  const std::string path = (testing::temp_dir("more_ops") / "dropout.onnx").string();
  b.save(path);
  EXPECT_FALSE(io::check_onnx_ops(path).has_unsupported());
}

// An int8 initializer (constant weights: what the int8-kernel path of the integer ops needs).
void init_i8(ModelBuilder& b, const std::string& name, const Tensor& t) {
  auto* p = b.g().add_initializer();
  p->set_name(name);
  p->set_data_type(P::INT8);
  for (int64_t d : t.shape()) p->add_dims(d);
  std::string raw(static_cast<size_t>(t.numel()), '\0');
  for (int64_t i = 0; i < t.numel(); ++i)
    raw[static_cast<size_t>(i)] = static_cast<char>(static_cast<int8_t>(t.item_at(i)));
  p->set_raw_data(raw);
}

// Constant symmetric int8 weights take spore's int8 kernels (qconv2d / qlinear with unit scales), the reduction split
// in chunks whose sums stay exact in f32 (130 input channels of 3x3 at |x - zp| <= 252, |w| <= 127: 3 chunks;
// K = 1500 at |a - zp| <= 200: 3 chunks). The int32 results equal the direct integer loops exactly.
TEST(OnnxImportMoreOps, IntegerOpsOnInt8KernelsAreExact) {
  std::mt19937 rng(54);
  {
    const Shape xs{2, 130, 6, 5}, ws{5, 130, 3, 3};
    const Tensor x = random(xs, DType::u8, rng, 0, 256), w = random(ws, DType::i8, rng, -127, 128);
    ModelBuilder b(10);
    b.input("x", P::UINT8, dims_of(xs));
    init_i8(b, "w", w);
    b.init_i64("xz", {3});
    auto* xz = b.g().mutable_initializer(1);
    xz->clear_dims();
    xz->set_data_type(P::UINT8);
    xz->set_raw_data(std::string(1, '\3'));
    attr_ints(b.node("ConvInteger", {"x", "w", "xz"}, {"y"}), "pads", {1, 1, 1, 1});
    b.output("y", P::INT32);
    int64_t oh = 0, ow = 0;
    const std::vector<int64_t> want = direct_conv_int(x, w, 3, std::vector<int64_t>(5, 0), 1, 1, &oh, &ow);
    const Tensor y = run(b, {x}).at(0);
    EXPECT_EQ(y.shape(), (Shape{2, 5, oh, ow}));
    expect_exact(y, std::vector<double>(want.begin(), want.end()), "ConvInteger on qconv2d");
  }
  {
    const int64_t m = 4, k = 1500, n = 3;
    const Tensor a = random({m, k}, DType::u8, rng, 0, 256), bm = random({k, n}, DType::i8, rng, -127, 128);
    ModelBuilder b(10);
    b.input("a", P::UINT8, {"4", "1500"});
    init_i8(b, "b", bm);
    b.input("az", P::UINT8, {});
    b.node("MatMulInteger", {"a", "b", "az"}, {"y"});
    b.output("y", P::INT32);
    const Tensor y = run(b, {a}, {{"az", Tensor::scalar(200, DType::u8)}}).at(0);
    std::vector<double> want;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int64_t t = 0; t < k; ++t)
          acc += (static_cast<int64_t>(a.item_at(i * k + t)) - 200) * static_cast<int64_t>(bm.item_at(t * n + j));
        want.push_back(static_cast<double>(acc));
      }
    expect_exact(y, want, "MatMulInteger on qlinear");
  }
}

// Scan-8 (batch axis 0, scan axis 1) with two batch rows and a reversed scan input: the running sum per row.
TEST(OnnxImportMoreOps, Scan8BatchedAndReversed) {
  std::mt19937 rng(53);
  using B = ModelBuilder;
  B b(8);
  b.input("init", P::FLOAT, {"2", "2"});
  b.input("x", P::FLOAT, {"2", "3", "2"});
  auto* scan = b.node("Scan", {"", "init", "x"}, {"final", "hist"}, "scan8");
  B::attr_i(scan, "num_scan_inputs", 1);
  attr_ints(scan, "directions", {1});
  onnx::GraphProto* g = B::attr_graph(scan, "body");
  B::graph_io(g, "acc", P::FLOAT, false);
  B::graph_io(g, "step", P::FLOAT, false);
  B::graph_node(g, "Add", {"acc", "step"}, {"acc_out"});
  B::graph_node(g, "Identity", {"acc_out"}, {"seen"});
  B::graph_io(g, "acc_out", P::FLOAT, true);
  B::graph_io(g, "seen", P::FLOAT, true);
  b.output("final");
  b.output("hist");
  const Tensor init = random({2, 2}, DType::f32, rng), x = random({2, 3, 2}, DType::f32, rng);
  const std::vector<Tensor> out = run(b, {init, x});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[1].shape(), (Shape{2, 3, 2}));
  std::vector<double> fin, hist;
  for (int64_t r = 0; r < 2; ++r) {
    double acc[2] = {init.item_at(r * 2), init.item_at(r * 2 + 1)};
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t j = 0; j < 2; ++j) {
        acc[j] += x.item_at((r * 3 + (2 - t)) * 2 + j);  // reversed: the last step first
        hist.push_back(acc[j]);
      }
    fin.push_back(acc[0]);
    fin.push_back(acc[1]);
  }
  expect_close(out[0], fin, 1e-6, 1e-6, "final state");
  expect_close(out[1], hist, 1e-6, 1e-6, "scan output");
}

}  // namespace
}  // namespace spore
