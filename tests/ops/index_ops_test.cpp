// The indexing ops (ops/index.cpp) beyond what the conformance harness derives: known values from the ONNX spec,
// out-of-range indices rejected with an error naming the op (and, in a compiled plan, the node) on both backends,
// roi_align's x gradient against finite differences (the harness skips it: rois get no gradient), and einsum's
// decomposition against the reference kernel's plain sum in f64.
#include <gtest/gtest.h>

#include <cmath>

#include "autodiff/autodiff.h"
#include "base/rng.h"
#include "ops/ops.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

Tensor rnd(Shape shape, uint64_t stream, double lo, double hi, DType dt = DType::f64) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = lo + (hi - lo) * philox_uniform(7, stream, i);
  return Tensor::from_doubles(v, std::move(shape), dt);
}

Tensor i64(std::vector<int64_t> v, Shape s) { return Tensor::from_vector<int64_t>(v, std::move(s)); }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(IndexOps, ScatterNdSpecExample) {
  init();
  // ONNX ScatterND example 1 (and with add: the sums).
  const Tensor x = Tensor::from_doubles({1, 2, 3, 4, 5, 6, 7, 8}, {8}, DType::f32);
  const Tensor idx = i64({4, 3, 1, -1}, {4, 1});
  const Tensor upd = Tensor::from_doubles({9, 10, 11, 12}, {4}, DType::f32);
  for (Backend b : {Backend::reference, Backend::cpu}) {
    BackendScope scope(b);
    EXPECT_EQ(ops::scatter_nd(x, idx, upd).to_doubles(), (std::vector<double>{1, 11, 3, 10, 9, 6, 7, 12}));
    EXPECT_EQ(ops::scatter_nd(x, idx, upd, "add").to_doubles(), (std::vector<double>{1, 13, 3, 14, 14, 6, 7, 20}));
    EXPECT_EQ(ops::scatter_nd(x, idx, upd, "min").to_doubles(), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}));
  }
}

TEST(IndexOps, GatherNdBatchDimsSpecExample) {
  init();
  // ONNX GatherND example 5: batch_dims = 1.
  const Tensor x = Tensor::from_vector<int32_t>({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2});
  const Tensor idx = i64({1, 0}, {2, 1});
  for (Backend b : {Backend::reference, Backend::cpu}) {
    BackendScope scope(b);
    const Tensor y = ops::gather_nd(x, idx, 1);
    EXPECT_EQ(y.shape(), (Shape{2, 2}));
    EXPECT_EQ(y.to_doubles(), (std::vector<double>{2, 3, 4, 5}));
  }
}

TEST(IndexOps, OutOfRangeIndicesNameTheOpAndTheNode) {
  init();
  const Tensor x = rnd({4, 3}, 1, -1, 1, DType::f32);
  for (Backend b : {Backend::reference, Backend::cpu}) {
    BackendScope scope(b);
    const std::string s = error_of([&] { ops::scatter_nd(x, i64({1, 4}, {2, 1}), rnd({2, 3}, 2, -1, 1, DType::f32)); });
    EXPECT_NE(s.find("scatter_nd"), std::string::npos) << s;
    EXPECT_NE(s.find("index 4"), std::string::npos) << s;
    const std::string g = error_of([&] { ops::gather_nd(x, i64({0, -5}, {2, 1})); });
    EXPECT_NE(g.find("gather_nd"), std::string::npos) << g;
    EXPECT_NE(g.find("index -5"), std::string::npos) << g;
    const std::string r = error_of([&] {
      ops::roi_align(rnd({1, 2, 5, 5}, 3, -1, 1, DType::f32), rnd({1, 4}, 4, 0, 4, DType::f32), i64({1}, {1}));
    });
    EXPECT_NE(r.find("roi_align"), std::string::npos) << r;
    EXPECT_NE(r.find("batch index 1"), std::string::npos) << r;
  }
  // In a compiled plan the error also names the node.
  CompiledFunction f([](std::span<const Tensor> in) { return std::vector<Tensor>{ops::gather_nd(in[0], in[1])}; });
  const Tensor bad = i64({7}, {1, 1});
  const std::string p = error_of([&] { f(std::vector<Tensor>{x, bad}); });
  EXPECT_NE(p.find("gather_nd"), std::string::npos) << p;
  EXPECT_NE(p.find("node"), std::string::npos) << p;
}

// roi_align's x gradient (avg and max) against central differences of the reference kernel, in f64.
TEST(IndexOps, RoiAlignInputGradientMatchesFiniteDifferences) {
  init();
  BackendScope scope(Backend::reference);
  const Tensor x = rnd({2, 2, 7, 8}, 5, -1, 1);
  const Tensor rois =
      Tensor::from_doubles({0.5, 1.0, 6.0, 5.5, 2.0, 0.0, 7.5, 6.5, -1.0, 2.0, 3.0, 9.0}, {3, 4}, DType::f64);
  const Tensor bi = i64({0, 1, 1}, {3});
  for (const char* mode : {"avg", "max"}) {
    const Tensor w = rnd({3, 2, 2, 3}, 6, -1, 1);
    const auto loss = [&](std::span<const Tensor> in) {
      return ops::reduce_sum(ops::mul(ops::roi_align(in[0], rois, bi, 2, 3, 2, 1.0, mode), w));
    };
    const Tensor g = autodiff::grad(loss, std::vector<Tensor>{x}, {0})[0];
    const auto gv = g.to_doubles();
    auto xv = x.to_doubles();
    for (size_t i = 0; i < xv.size(); i += 7) {
      const double h = 1e-6, saved = xv[i];
      xv[i] = saved + h;
      const double lp = loss(std::vector<Tensor>{Tensor::from_doubles(xv, x.shape(), DType::f64)}).item();
      xv[i] = saved - h;
      const double lm = loss(std::vector<Tensor>{Tensor::from_doubles(xv, x.shape(), DType::f64)}).item();
      xv[i] = saved;
      EXPECT_NEAR(gv[i], (lp - lm) / (2 * h), 1e-6) << mode << " element " << i;
    }
    // The cpu kernel's gradient agrees with the reference's.
    BackendScope cpu(Backend::cpu);
    const Tensor gc = autodiff::grad(loss, std::vector<Tensor>{x}, {0})[0];
    const auto cv = gc.to_doubles();
    for (size_t i = 0; i < cv.size(); ++i) EXPECT_NEAR(cv[i], gv[i], 1e-12) << mode << " element " << i;
  }
}

// grid_sample on an identity grid with align_corners reproduces the image (every mode and padding).
TEST(IndexOps, GridSampleIdentityGrid) {
  init();
  const int64_t H = 4, W = 5;
  const Tensor x = rnd({1, 2, H, W}, 8, -1, 1, DType::f32);
  std::vector<double> g;
  for (int64_t i = 0; i < H; ++i)
    for (int64_t j = 0; j < W; ++j) {
      g.push_back(-1 + 2.0 * static_cast<double>(j) / static_cast<double>(W - 1));
      g.push_back(-1 + 2.0 * static_cast<double>(i) / static_cast<double>(H - 1));
    }
  const Tensor grid = Tensor::from_doubles(g, {1, H, W, 2}, DType::f32);
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* pad : {"zeros", "border", "reflection"}) {
      const auto y = ops::grid_sample(x, grid, mode, pad, true).to_doubles();
      const auto xv = x.to_doubles();
      for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(y[i], xv[i], 1e-5) << mode << " " << pad << " " << i;
    }
}

TEST(IndexOps, EinsumDecompositionMatchesReference) {
  init();
  struct Case {
    const char* eq;
    std::vector<Shape> shapes;
  };
  const std::vector<Case> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 5}}},
      {"bii->bi", {{2, 3, 3}}},
      {"ii->", {{4, 4}}},
      {"...ij,...jk", {{2, 1, 3, 4}, {5, 4, 2}}},
      {"ijk,ikl,il->jl", {{2, 3, 4}, {2, 4, 5}, {2, 5}}},
      {"iij,jk->ik", {{3, 3, 2}, {2, 4}}},
  };
  for (size_t n = 0; n < cases.size(); ++n) {
    std::vector<Tensor> ins;
    for (size_t i = 0; i < cases[n].shapes.size(); ++i) ins.push_back(rnd(cases[n].shapes[i], 10 * n + i, -1, 1));
    Tensor ref, got;
    {
      BackendScope scope(Backend::reference);
      ref = ops::einsum(cases[n].eq, ins);
    }
    got = ops::einsum(cases[n].eq, ins);
    ASSERT_EQ(got.shape(), ref.shape()) << cases[n].eq;
    const auto a = got.to_doubles(), b = ref.to_doubles();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << cases[n].eq << " element " << i;
  }
}

}  // namespace
}  // namespace spore
