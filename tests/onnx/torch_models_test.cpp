// PyTorch-exported models (tests/data/torch_models, made by gen.py there): a CNN, an MLP, a 2-layer LSTM and a
// 2-layer transformer encoder. Each must import, run and match PyTorch's own output; then export_onnx of the
// imported graph, re-imported, must give the same bits (the same ops run on the same data).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "io/npy.h"
#include "io/onnx/onnx.h"
#include "ops/graph_ops.h"
#include "runtime/plan.h"
#include "test_util.h"

namespace spore {
namespace {

// The data is in the repository, so these tests never skip. SPORE_SOURCE_DIR overrides the location (for a
// binary run away from its source tree).
std::filesystem::path models_dir() {
  if (const char* src = std::getenv("SPORE_SOURCE_DIR")) return std::filesystem::path(src) / "tests/data/torch_models";
  return std::filesystem::path(testing::repo_root()) / "tests/data/torch_models";
}

std::vector<Tensor> run(const Graph& g, const Tensor& x) {
  auto c = g.clone();
  specialize_inputs(*c, {x.shape()});
  Plan p = compile_plan(std::move(c), {});
  return p.run(std::vector<Tensor>{x});
}

class TorchModel : public ::testing::TestWithParam<const char*> {};

TEST_P(TorchModel, MatchesPyTorchAndRoundTripsThroughExport) {
  const std::string name = GetParam();
  const std::filesystem::path dir = models_dir();
  const Tensor x = io::read_npy((dir / (name + ".input.npy")).string());
  const Tensor want = io::read_npy((dir / (name + ".output.npy")).string());

  io::OnnxImportReport report;
  std::unique_ptr<Graph> g = io::import_onnx((dir / (name + ".onnx")).string(), {}, &report);
  ASSERT_FALSE(report.has_unsupported()) << report.format();
  ASSERT_EQ(g->inputs().size(), 1u);
  ASSERT_EQ(g->outputs().size(), 1u);
  const std::vector<Tensor> got = run(*g, x);
  ASSERT_EQ(got[0].shape(), want.shape()) << name;

  // f32 against PyTorch's own kernels: max abs error within 1e-4 of the output's scale (max |y|, at least 1).
  const std::vector<double> a = got[0].to_doubles(), b = want.to_doubles();
  double scale = 1, err = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::abs(a[i] - b[i]));
  std::printf("%s: max abs error vs PyTorch %.3g (output scale %.3g)\n", name.c_str(), err, scale);
  EXPECT_LE(err, 1e-4 * scale) << name << ": max abs error " << err << " (output scale " << scale << ")";

  // Export the imported graph and import it again: bit-identical outputs.
  const std::string bytes = io::export_onnx_bytes(*g);
  std::unique_ptr<Graph> back = io::import_onnx_bytes(bytes, name + ".reexported.onnx");
  ASSERT_EQ(back->inputs().size(), 1u);
  EXPECT_EQ(back->inputs()[0]->name, g->inputs()[0]->name);
  const std::vector<Tensor> again = run(*back, x);
  ASSERT_EQ(again[0].shape(), got[0].shape());
  const std::vector<double> c = again[0].to_doubles();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(c[i], a[i]) << name << " element " << i << " after re-export";
}

INSTANTIATE_TEST_SUITE_P(Onnx, TorchModel, ::testing::Values("cnn", "mlp", "lstm", "transformer"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace spore
