// The ONNX model zoo MNIST CNN (mnist-8, opset 8, CNTK) on the MNIST t10k images. It was trained on raw pixels
// 0..255 (the data README: 98.91% that way, checked with an independent NumPy evaluator), so the [0,1] images
// spore's loader gives are scaled by 255 — what `spore eval mnist-8.onnx --input-scale 255` does.
#include <gtest/gtest.h>

#include <filesystem>

#include <spore/spore.h>

#include "data/sources.h"
#include "io/onnx/onnx.h"
#include "ops/graph_ops.h"
#include "runtime/plan.h"
#include "test_util.h"

namespace spore {
namespace {

TEST(OnnxModels, Mnist8ScoresOnT10k) {
  SPORE_SHARED_DATA_DIR(models, "onnx-models");
  SPORE_SHARED_DATA_DIR(mnist, "mnist");
  io::OnnxImportReport rep;
  std::unique_ptr<Graph> g = io::import_onnx(models + "/mnist-8.onnx", {}, &rep);
  EXPECT_EQ(rep.opset, 8);
  EXPECT_FALSE(rep.has_unsupported());
  ASSERT_EQ(g->inputs().size(), 1u);
  EXPECT_EQ(g->inputs()[0]->name, "Input3");
  EXPECT_EQ(g->outputs()[0]->name, "Plus214_Output_0");
  const data::LabeledData d = data::load_mnist(mnist, "t10k");
  const int64_t n = d.x.dim(0);
  ASSERT_EQ(n, 10000);
  specialize_inputs(*g, {Shape{1, 1, 28, 28}});
  Plan plan = compile_plan(std::move(g), {});
  const Tensor scaled = ops::mul(d.x, 255.0);
  const int64_t* labels = d.y.contiguous().data<int64_t>();
  int64_t correct = 0;
  std::vector<int64_t> first20;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor x = scaled.slice(0, i, i + 1).contiguous();
    const Tensor logits = plan.run(std::span<const Tensor>(&x, 1)).at(0);
    const int64_t pred = ops::argmax(logits.contiguous().view({1, 10}), 1).item_at(0);
    correct += pred == labels[i];
    if (i < 20) first20.push_back(pred);
  }
  // The data README's first 20 predictions (they equal the labels).
  EXPECT_EQ(first20, (std::vector<int64_t>{7, 2, 1, 0, 4, 1, 4, 9, 5, 9, 0, 6, 9, 0, 1, 5, 9, 7, 3, 4}));
  const double acc = static_cast<double>(correct) / static_cast<double>(n);
  std::printf("mnist-8 on t10k (pixels 0..255): %lld/%lld = %.4f\n", static_cast<long long>(correct),
              static_cast<long long>(n), acc);
  EXPECT_GE(acc, 0.985);
}

}  // namespace
}  // namespace spore
