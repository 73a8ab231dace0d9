// Data-dependent output shapes (issue 41): a model whose downstream shapes depend on the data runs on new data
// with one compile (the nodes after NonZero / TopK with a run-time k run in the plan's dynamic region), the planned
// part keeps its plan, and bad inputs give errors that name the node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <spore/spore.h>

#include "deploy/session.h"
#include "onnx_model_builder.h"
#include "ops/dynamic_shape.h"
#include "runtime/jit.h"
#include "test_util.h"

namespace spore {
namespace {

using testing::error_of;
using testing::ModelBuilder;

std::string save(const ModelBuilder& b, const std::string& name) {
  const std::string path = (testing::temp_dir("dynamic_shape") / name).string();
  b.save(path);
  return path;
}

// Roughly half zeros, the rest in [-2, 2): a different pattern per seed.
Tensor sparse_input(const Shape& s, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t st = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (double& x : v) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(st >> 11) / 9007199254740992.0;
    x = u < 0.5 ? 0.0 : std::floor((u - 0.5) * 16) / 2 - 2;
  }
  return Tensor::from_doubles(v, s, DType::f32);
}

// rows = NonZero(x)[0]; s = ReduceSum(Gather(x, rows, axis 0)); y = Relu(x) (planned: it does not depend on NonZero).
std::string nonzero_gather_model() {
  ModelBuilder b(13);
  b.input("x", onnx::TensorProto::FLOAT, {"8", "5"});
  auto* t = b.g().add_initializer();
  t->set_name("zero");
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_int64_data(0);  // a 0-D index: Gather drops the axis
  b.node("NonZero", {"x"}, {"nz"}, "nonzero");
  ModelBuilder::attr_i(b.node("Gather", {"nz", "zero"}, {"rows"}, "rows"), "axis", 0);
  ModelBuilder::attr_i(b.node("Gather", {"x", "rows"}, {"picked"}, "pick"), "axis", 0);
  ModelBuilder::attr_i(b.node("ReduceSum", {"picked"}, {"s"}, "sum"), "keepdims", 0);
  b.node("Relu", {"x"}, {"y"}, "relu");
  b.output("s");
  b.output("y");
  return save(b, "nonzero_gather.onnx");
}

TEST(DynamicShapes, NonzeroGatherReduceRunsOnNewDataWithOneCompile) {
  deploy::Session s(nonzero_gather_model());
  for (uint64_t seed = 0; seed < 100; ++seed) {
    const Tensor x = sparse_input({8, 5}, seed);
    const std::vector<Tensor> out = s.run(std::vector<Tensor>{x});
    ASSERT_EQ(out.size(), 2u);
    double want = 0;  // each non-zero element (i, j) adds row i once
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 5; ++j)
        if (x.item_at(i * 5 + j) != 0)
          for (int64_t k = 0; k < 5; ++k) want += x.item_at(i * 5 + k);
    ASSERT_EQ(out[0].shape(), Shape{}) << seed;
    EXPECT_NEAR(out[0].item_at(0), want, 1e-4 * (1 + std::fabs(want))) << seed;
    ASSERT_EQ(out[1].shape(), (Shape{8, 5}));
    for (int64_t i = 0; i < 40; ++i) ASSERT_EQ(out[1].item_at(i), std::max(0.0, x.item_at(i)));
  }
  EXPECT_EQ(s.stats().runs, 100);
  EXPECT_EQ(s.stats().compiles, 1) << "new data must not compile a new plan";
  EXPECT_TRUE(s.value_inputs().empty());
  const Plan& plan = s.specialize(std::vector<Tensor>{sparse_input({8, 5}, 7)}).plan;
  EXPECT_EQ(plan.dynamic_nodes(), 4);  // nonzero, both gathers, reduce_sum
  EXPECT_GE(plan.num_kernels(), 1);    // relu stays planned
  EXPECT_NE(plan.describe().find("[dynamic] nonzero"), std::string::npos) << plan.describe();
  EXPECT_EQ(plan.graph().outputs().at(0)->name, "s");
}

// TopK whose k is a model input: read when the plan runs, not compiled in per value.
TEST(DynamicShapes, TopKWithRunTimeKCompilesOnce) {
  ModelBuilder b(11);
  b.input("x", onnx::TensorProto::FLOAT, {"2", "6"});
  b.input("k", onnx::TensorProto::INT64, {"1"});
  b.node("TopK", {"x", "k"}, {"values", "indices"}, "topk");
  b.output("values");
  b.output("indices", onnx::TensorProto::INT64);
  deploy::Session s(save(b, "topk_k.onnx"));
  const Tensor x = sparse_input({2, 6}, 3);
  for (int64_t k = 0; k <= 6; ++k) {
    const Tensor kt = Tensor::from_vector<int64_t>({k}, {1});
    const std::vector<Tensor> got = s.run(std::vector<Tensor>{x, kt});
    const std::vector<Tensor> want = ops::topk(x, k, -1);
    ASSERT_EQ(got.at(0).shape(), want[0].shape()) << k;
    EXPECT_TRUE(got[0].bit_equal(want[0])) << k;
    EXPECT_TRUE(got[1].bit_equal(want[1])) << k;
  }
  EXPECT_EQ(s.stats().compiles, 1);
  EXPECT_TRUE(s.value_inputs().empty());
  const std::string err = error_of([&] { s.run(std::vector<Tensor>{x, Tensor::from_vector<int64_t>({7}, {1})}); });
  EXPECT_NE(err.find("k = 7"), std::string::npos) << err;
  EXPECT_NE(err.find("topk"), std::string::npos) << err;
}

// Graph mode: a traced function with nonzero inside compiles once for a signature and agrees with eager mode.
TEST(DynamicShapes, CompiledFunctionCompilesOncePerSignature) {
  CompiledFunction f([](std::span<const Tensor> in) {
    const Tensor nz = ops::nonzero(in[0]);
    const Tensor cols = ops::gather(nz, Tensor::scalar(1, DType::i64), 0);
    return std::vector<Tensor>{ops::reduce_sum(ops::gather(ops::relu(in[0]), cols, 1)), nz};
  });
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const Tensor x = sparse_input({4, 7}, seed + 100);
    const std::vector<Tensor> g = f({x});
    const Tensor nz = ops::nonzero(x);
    const Tensor want =
        ops::reduce_sum(ops::gather(ops::relu(x), ops::gather(nz, Tensor::scalar(1, DType::i64), 0), 1));
    EXPECT_TRUE(g.at(0).bit_equal(want)) << seed;
    EXPECT_TRUE(g.at(1).bit_equal(nz)) << seed;
  }
  EXPECT_EQ(f.cache_size(), 1u);
  ASSERT_NE(f.last_plan(), nullptr);
  EXPECT_EQ(f.last_plan()->dynamic_nodes(), 4);  // nonzero, both gathers, reduce_sum (relu stays planned)
}

// The detector pattern: Shape/Size of a data-dependent value read at run time (Reshape / ConstantOfShape of it), and
// an If on that size whose else-branch cannot run on an empty tensor (ReduceMax): only the branch taken runs.
std::string if_on_size_model() {
  ModelBuilder b(13);
  b.input("x", onnx::TensorProto::FLOAT, {"6"});
  b.init_i64("axis0", {0});
  auto* z = b.g().add_initializer();
  z->set_name("zero");
  z->set_data_type(onnx::TensorProto::INT64);
  z->add_int64_data(0);
  b.node("NonZero", {"x"}, {"nz"}, "nonzero");
  b.node("Squeeze", {"nz", "axis0"}, {"idx"}, "squeeze");
  ModelBuilder::attr_i(b.node("Gather", {"x", "idx"}, {"v"}, "gather"), "axis", 0);
  b.node("Shape", {"v"}, {"shp"}, "shape");
  b.node("Reshape", {"v", "shp"}, {"r"}, "reshape");
  b.node("ConstantOfShape", {"shp"}, {"zeros"}, "zeros");
  b.node("Size", {"v"}, {"n"}, "size");
  b.node("Equal", {"n", "zero"}, {"empty"}, "is_empty");
  auto* iff = b.node("If", {"empty"}, {"m"}, "if_empty");
  auto* then_g = ModelBuilder::attr_graph(iff, "then_branch");
  auto* k = ModelBuilder::graph_node(then_g, "Constant", {}, {"minus1"});
  auto* a = k->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->add_dims(1);
  a->mutable_t()->add_float_data(-1.0f);
  ModelBuilder::graph_io(then_g, "minus1", onnx::TensorProto::FLOAT, true);
  auto* else_g = ModelBuilder::attr_graph(iff, "else_branch");
  auto* mx = ModelBuilder::graph_node(else_g, "ReduceMax", {"v"}, {"mx"});
  ModelBuilder::attr_i(mx, "keepdims", 1);
  ModelBuilder::graph_io(else_g, "mx", onnx::TensorProto::FLOAT, true);
  b.output("r");
  b.output("zeros");
  b.output("m");
  return save(b, "if_on_size.onnx");
}

TEST(DynamicShapes, IfOnADataDependentSizeRunsOnlyTheBranchTaken) {
  deploy::Session s(if_on_size_model());
  for (uint64_t seed = 0; seed < 30; ++seed) {
    Tensor x = sparse_input({6}, seed);
    if (seed % 3 == 0) x = Tensor::zeros({6}, DType::f32);  // nothing selected: the then-branch
    const std::vector<Tensor> out = s.run(std::vector<Tensor>{x});
    std::vector<double> nz;
    for (int64_t i = 0; i < 6; ++i)
      if (x.item_at(i) != 0) nz.push_back(x.item_at(i));
    const int64_t n = static_cast<int64_t>(nz.size());
    ASSERT_EQ(out.at(0).shape(), Shape{n}) << seed;
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[0].item_at(i), nz[static_cast<size_t>(i)]);
    ASSERT_EQ(out.at(1).shape(), Shape{n}) << seed;
    EXPECT_EQ(out[1].dtype(), DType::f32);
    ASSERT_EQ(out.at(2).shape(), Shape{1}) << seed;
    EXPECT_EQ(out[2].item_at(0), n == 0 ? -1.0 : *std::max_element(nz.begin(), nz.end())) << seed;
  }
  EXPECT_EQ(s.stats().compiles, 1);
}

TEST(DynamicShapes, NmsErrorsNameTheNode) {
  ModelBuilder b(11);
  b.input("boxes", onnx::TensorProto::FLOAT, {"5", "4"});
  b.input("scores", onnx::TensorProto::FLOAT, {"1", "1", "5"});
  b.node("NonMaxSuppression", {"boxes", "scores"}, {"sel"}, "my_nms");
  b.output("sel", onnx::TensorProto::INT64);
  const std::string path = save(b, "nms_rank.onnx");
  const std::string err = error_of([&] {
    deploy::Session s(path);
    s.run(std::vector<Tensor>{Tensor::zeros({5, 4}, DType::f32), Tensor::zeros({1, 1, 5}, DType::f32)});
  });
  EXPECT_NE(err.find("my_nms"), std::string::npos) << err;
  EXPECT_NE(err.find("boxes must be"), std::string::npos) << err;

  // A threshold outside [0, 1] is a run-time value: the error names the node too.
  ModelBuilder c(11);
  c.input("boxes", onnx::TensorProto::FLOAT, {"1", "3", "4"});
  c.input("scores", onnx::TensorProto::FLOAT, {"1", "1", "3"});
  c.input("max", onnx::TensorProto::INT64, {"1"});
  c.input("iou", onnx::TensorProto::FLOAT, {"1"});
  c.node("NonMaxSuppression", {"boxes", "scores", "max", "iou"}, {"sel"}, "nms_iou");
  c.output("sel", onnx::TensorProto::INT64);
  deploy::Session s(save(c, "nms_iou.onnx"));
  const Tensor boxes = Tensor::from_vector<float>({0, 0, 1, 1, 0, 0, 1, 1.1f, 5, 5, 6, 6}, {1, 3, 4});
  const Tensor scores = Tensor::from_vector<float>({0.9f, 0.8f, 0.7f}, {1, 1, 3});
  const Tensor max = Tensor::from_vector<int64_t>({10}, {1});
  const std::vector<Tensor> ok =
      s.run(std::vector<Tensor>{boxes, scores, max, Tensor::from_vector<float>({0.5f}, {1})});
  ASSERT_EQ(ok.at(0).shape(), (Shape{2, 3}));  // box 1 overlaps box 0 (IoU 0.91)
  EXPECT_EQ(ok[0].item_at(2), 0);
  EXPECT_EQ(ok[0].item_at(5), 2);
  const std::string bad = error_of([&] {
    s.run(std::vector<Tensor>{boxes, scores, max, Tensor::from_vector<float>({1.5f}, {1})});
  });
  EXPECT_NE(bad.find("nms_iou"), std::string::npos) << bad;
  EXPECT_NE(bad.find("iou_threshold must be in [0, 1]"), std::string::npos) << bad;
  EXPECT_EQ(s.stats().compiles, 1);
}

}  // namespace
}  // namespace spore
