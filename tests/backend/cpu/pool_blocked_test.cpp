// max_pool2d / avg_pool2d on NCHW and on the blocked layout [N, C/8, H, W, 8] (layout "nchw8c", backend/cpu/conv.cpp's
// pool_plain and pool_blocked): both give the bits of the documented fold sequence computed one scalar at a time
// (the 2x2 tiling's window order, else column folds then row folds), element for element, with NaN and -0 among the
// inputs, over strides, padding, ceil mode, dilation and count_include_pad; and the reference backend agrees.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "ir/graph.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "runtime/plan.h"
#include "runtime/runtime.h"

namespace spore {
namespace {

using V = std::vector<int64_t>;

Tensor run_pool(OpId op, const Tensor& x, const Attrs& a, Backend backend = Backend::cpu) {
  auto g = std::make_unique<Graph>("pool");
  Value* in = g->add_input(TensorType::of(DType::f32, x.shape()), "x");
  g->set_outputs({build_node(*g, op, {in}, a)->output(0)});
  CompileOptions o;
  o.inference = true;
  o.backend = backend;
  Plan p = compile_plan(std::move(g), o);
  return p.run({&x, 1})[0];
}

// [N, C, H, W] <-> [N, C/8, H, W, 8]
Tensor to_blocked(const Tensor& x) {
  const Shape& s = x.shape();
  Tensor b = Tensor::empty({s[0], s[1] / 8, s[2], s[3], 8}, DType::f32);
  const float* src = x.data<float>();
  float* dst = b.data<float>();
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t c = 0; c < s[1]; ++c)
      for (int64_t i = 0; i < s[2] * s[3]; ++i)
        dst[cpu::test::nchw8c_at(n, c, i / s[3], i % s[3], s[1], s[2], s[3])] = src[(n * s[1] + c) * s[2] * s[3] + i];
  return b;
}

// The sequence every f32 pooling kernel follows, one scalar at a time: max 2x2/2 windows tiling the input fold in
// row-major window order from the first element; any other window folds each column over the window's rows inside
// the image (from the first such row), then those columns inside the image from the identity (-inf / 0), and an
// average divides by the window's size (count_include_pad: clipped to the padded image) or its in-image count.
// take_max: a NaN wins, else a strictly larger value.
Tensor sequence_pool(const Tensor& x, const Shape& ys, bool is_max, const V& k, const V& s, const V& pad, const V& dil,
                     bool include_pad) {
  const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3), oh = ys[2], ow = ys[3];
  Tensor y = Tensor::empty(ys, DType::f32);
  const float* px = x.data<float>();
  float* py = y.data<float>();
  const auto fold = [&](float acc, float v) { return is_max ? ((v != v || v > acc) ? v : acc) : acc + v; };
  const bool tiling =
      is_max && k == V{2, 2} && s == V{2, 2} && pad == V{0, 0, 0, 0} && dil == V{1, 1} && oh == h / 2 && ow == w / 2;
  std::vector<float> c(static_cast<size_t>(w));
  for (int64_t p = 0; p < planes; ++p) {
    const float* in = px + p * h * w;
    for (int64_t yy = 0; yy < oh; ++yy)
      for (int64_t xx = 0; xx < ow; ++xx) {
        float& out = py[(p * oh + yy) * ow + xx];
        if (tiling) {
          const float* a = in + 2 * yy * w + 2 * xx;
          out = fold(fold(fold(a[0], a[1]), a[w]), a[w + 1]);
          continue;
        }
        const int64_t y0 = yy * s[0] - pad[0], x0 = xx * s[1] - pad[1];
        int64_t rows = 0, cols = 0;
        for (int64_t i = 0; i < k[0]; ++i) {
          const int64_t iy = y0 + i * dil[0];
          if (iy < 0 || iy >= h) continue;
          for (int64_t ix = 0; ix < w; ++ix) c[ix] = rows == 0 ? in[iy * w + ix] : fold(c[ix], in[iy * w + ix]);
          ++rows;
        }
        float acc = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
        for (int64_t j = 0; j < k[1] && rows > 0; ++j) {
          const int64_t ix = x0 + j * dil[1];
          if (ix < 0 || ix >= w) continue;
          acc = fold(acc, c[ix]);
          ++cols;
        }
        if (!is_max) {
          const int64_t dh = std::min(y0 + k[0], h + pad[2]) - y0, dw = std::min(x0 + k[1], w + pad[3]) - x0;
          acc /= static_cast<float>(include_pad ? dh * dw : rows * cols);
        }
        out = acc;
      }
  }
  return y;
}

TEST(PoolBlocked, SameBitsAsTheNchwKernels) {
  struct Case {
    OpId op;
    V kernel, stride, padding, dilation;
    bool ceil, include_pad;
    int64_t h, w;
  };
  const std::vector<Case> cases = {
      {"max_pool2d"_op, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, false, false, 10, 12},  // the 2x2 tiling
      {"max_pool2d"_op, {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, true, false, 13, 13},   // SqueezeNet / GoogLeNet
      {"max_pool2d"_op, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false, 14, 14},  // Inception's branch pool
      {"max_pool2d"_op, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, false, 17, 20},  // ResNet's stem pool
      {"max_pool2d"_op, {2, 3}, {1, 2}, {1, 0, 0, 1}, {2, 1}, false, false, 9, 11},   // dilation, asymmetric
      {"avg_pool2d"_op, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, false, false, 12, 12},  // DenseNet's transition
      {"avg_pool2d"_op, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, true, 14, 14},
      {"avg_pool2d"_op, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, false, 14, 14},
      {"avg_pool2d"_op, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, true, true, 11, 15},
      {"max_pool2d"_op, {6, 3}, {1, 1}, {2, 1, 3, 1}, {1, 1}, false, false, 12, 9},  // rows folded 4, then 2
      {"avg_pool2d"_op, {5, 5}, {2, 1}, {2, 2, 2, 2}, {1, 1}, false, false, 13, 10},
      // Long rows: many AVX-512 pixel pairs, an odd one left over, an odd row width in the column folds.
      {"max_pool2d"_op, {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, true, false, 9, 37},
      {"avg_pool2d"_op, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, false, 7, 29},
      {"max_pool2d"_op, {2, 3}, {1, 3}, {0, 1, 0, 1}, {1, 2}, false, false, 5, 33},  // stride 3, dilation 2
  };
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} k{}x{} s{}x{} ceil={} include_pad={}", op_name(c.op), c.kernel[0], c.kernel[1],
                             c.stride[0], c.stride[1], c.ceil, c.include_pad));
    Tensor x = Tensor::empty({2, 16, c.h, c.w}, DType::f32);
    float* px = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) px[i] = d(rng);
    px[5] = std::nanf("");
    px[40] = -0.0f;
    px[41] = 0.0f;
    px[x.numel() - 3] = std::nanf("");
    Attrs a{{"kernel", c.kernel}, {"stride", c.stride}, {"padding", c.padding}, {"ceil_mode", c.ceil}};
    if (c.op == "max_pool2d"_op) a.set("dilation", c.dilation);
    else a.set("count_include_pad", c.include_pad);
    const Tensor plain = run_pool(c.op, x, a);
    const Tensor seq = sequence_pool(x, plain.shape(), c.op == "max_pool2d"_op, c.kernel, c.stride, c.padding,
                                     c.dilation, c.include_pad);
    EXPECT_EQ(std::memcmp(plain.raw_data(), seq.raw_data(), seq.nbytes()), 0) << "NCHW kernel against the sequence";
    Attrs ab = a;
    ab.set("layout", std::string("nchw8c"));
    const Tensor xb = to_blocked(x);
    for (int threads : {1, 3}) {
      set_threads(threads);
      const Tensor blocked = run_pool(c.op, xb, ab);
      const Tensor want = to_blocked(plain);
      ASSERT_EQ(blocked.shape(), want.shape());
      EXPECT_EQ(std::memcmp(blocked.raw_data(), want.raw_data(), want.nbytes()), 0) << threads << " threads";
    }
    set_threads(0);
    const Tensor ref = run_pool(c.op, xb, ab, Backend::reference);
    const auto r = ref.to_doubles();
    const auto w = to_blocked(plain).to_doubles();
    for (size_t i = 0; i < r.size(); ++i)
      if (!(std::isnan(r[i]) && std::isnan(w[i]))) {
        ASSERT_NEAR(r[i], w[i], 1e-6 * (1 + std::abs(w[i]))) << i;
      }
  }
}

// The global average pool of a blocked chain (passes/layout.cpp turns it into reduce_mean over H, W of [N, C/8, H,
// W, 8]): each channel's f32 values sum in double, so the mean is the float64 mean rounded twice (the sum to f32,
// then the division) - within 1 ulp. A running f32 sum over 56 x 56 positive values drifted by ~20 ulp (more than
// the conv before it: squeezenet's and the resnets' output error against float64 was twice ORT's from it). Also
// reduce_sum, which takes the same fold: within half an ulp of the double sum.
TEST(PoolBlocked, GlobalMeanOfABlockedTensorSumsInDouble) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(0.0f, 1.0f);
  const int64_t n = 2, cb = 3, h = 56, w = 56;
  Tensor x = Tensor::empty({n, cb, h, w, 8}, DType::f32);
  float* px = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) px[i] = d(rng);
  for (OpId op : {"reduce_mean"_op, "reduce_sum"_op}) {
    SCOPED_TRACE(op_name(op));
    auto g = std::make_unique<Graph>("gap");
    Value* in = g->add_input(TensorType::of(DType::f32, x.shape()), "x");
    g->set_outputs({build_node(*g, op, {in}, Attrs{{"axes", V{2, 3}}, {"keepdims", false}})->output(0)});
    CompileOptions o;
    o.inference = true;
    Plan p = compile_plan(std::move(g), o);
    const Tensor y = p.run({&x, 1})[0];
    ASSERT_EQ(y.shape(), (Shape{n, cb, 8}));
    const float* py = y.data<float>();
    int64_t worst_ulps = 0;
    for (int64_t i = 0; i < n * cb; ++i)
      for (int64_t c = 0; c < 8; ++c) {
        double sum = 0;
        for (int64_t q = 0; q < h * w; ++q) sum += px[(i * h * w + q) * 8 + c];
        const float want = op == "reduce_mean"_op ? static_cast<float>(sum / static_cast<double>(h * w))
                                                  : static_cast<float>(sum);
        const float got = py[i * 8 + c];
        const int64_t ulps = std::abs(static_cast<int64_t>(std::bit_cast<int32_t>(got)) - std::bit_cast<int32_t>(want));
        worst_ulps = std::max(worst_ulps, ulps);
      }
    EXPECT_LE(worst_ulps, op == "reduce_mean"_op ? 1 : 0);
  }
}

TEST(PoolBlocked, BadLayoutsAreClearErrors) {
  const Tensor x = Tensor::empty({1, 8, 4, 4}, DType::f32);
  EXPECT_THROW(run_pool("max_pool2d"_op, x, Attrs{{"layout", std::string("nchw8c")}}), Error);  // rank 4
  EXPECT_THROW(run_pool("max_pool2d"_op, x, Attrs{{"layout", std::string("nhwc")}}), Error);
}

}  // namespace
}  // namespace spore
