// deploy::Session: symbolic dims bound from the given inputs, one plan per signature in a bounded LRU cache,
// ONNX shape chains re-imported per signature, inputs taken as attributes compiled in by value, clear errors.
#include <gtest/gtest.h>

#include <spore/spore.h>

#include "deploy/session.h"
#include "onnx_model_builder.h"
#include "test_util.h"

namespace spore {
namespace {

using testing::error_of;
using testing::ModelBuilder;

std::string save(const ModelBuilder& b, const std::string& name) {
  const std::string path = (testing::temp_dir("deploy") / name).string();
  b.save(path);
  return path;
}

Tensor random(const Shape& s, int seed) { return testing::patterned_tensor(s, DType::f32, seed); }

// y = reshape(relu(x), [x.shape[0], -1]): the exporter's Shape -> Gather -> Concat -> Reshape chain, which only
// folds once the dims are known.
std::string flatten_model() {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", "3", "h", "w"});
  b.init_i64("idx0", {0});
  b.init_i64("minus1", {-1});
  b.node("Relu", {"x"}, {"r"});
  b.node("Shape", {"r"}, {"shp"});
  ModelBuilder::attr_i(b.node("Gather", {"shp", "idx0"}, {"n"}), "axis", 0);
  ModelBuilder::attr_i(b.node("Concat", {"n", "minus1"}, {"newshape"}), "axis", 0);
  b.node("Reshape", {"r", "newshape"}, {"y"}, "flatten");
  b.output("y");
  return save(b, "flatten.onnx");
}

void expect_flattened(const Tensor& y, const Tensor& x) {
  const Tensor want = ops::relu(x).contiguous().view({x.dim(0), -1});
  ASSERT_EQ(y.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(y.item_at(i), want.item_at(i)) << i;
}

TEST(Session, ShapeChainsBindPerSignatureAndPlansAreCached) {
  deploy::Session s(flatten_model());
  ASSERT_EQ(s.inputs().size(), 1u);
  EXPECT_EQ(s.inputs()[0].type.str(), "f32[batch,3,h,w]");
  EXPECT_NE(s.per_signature_reason().find("Shape"), std::string::npos) << s.per_signature_reason();

  const Tensor a = random({2, 3, 4, 4}, 1), b = random({5, 3, 2, 6}, 2);
  expect_flattened(s.run(std::vector<Tensor>{a}).at(0), a);
  expect_flattened(s.run(std::vector<Tensor>{b}).at(0), b);
  expect_flattened(s.run(std::vector<Tensor>{a}).at(0), a);  // cached
  EXPECT_EQ(s.stats().compiles, 2);
  EXPECT_EQ(s.stats().imports, 2);
  EXPECT_EQ(s.stats().runs, 3);
  EXPECT_EQ(s.cached_plans(), 2u);
  EXPECT_EQ(s.specialize(std::vector<Tensor>{a}).how, "imported for these shapes");
}

TEST(Session, LeastRecentlyUsedPlanIsDropped) {
  deploy::SessionOptions o;
  o.max_plans = 2;
  deploy::Session s(flatten_model(), o);
  const Tensor a = random({1, 3, 2, 2}, 3), b = random({2, 3, 2, 2}, 4), c = random({3, 3, 2, 2}, 5);
  s.run(std::vector<Tensor>{a});
  s.run(std::vector<Tensor>{b});
  s.run(std::vector<Tensor>{a});  // a is now the most recent: c evicts b
  expect_flattened(s.run(std::vector<Tensor>{c}).at(0), c);
  EXPECT_EQ(s.stats().evictions, 1);
  EXPECT_EQ(s.cached_plans(), 2u);
  s.run(std::vector<Tensor>{a});
  EXPECT_EQ(s.stats().compiles, 3);  // a was still cached
  s.run(std::vector<Tensor>{b});
  EXPECT_EQ(s.stats().compiles, 4);  // b was not
}

TEST(Session, SymbolicGraphServesEverySignature) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", "3"});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  deploy::Session s(save(b, "relu.onnx"));
  EXPECT_EQ(s.per_signature_reason(), "");
  const Tensor a = random({4, 3}, 6);
  const Tensor y = s.run(std::vector<Tensor>{a}).at(0);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(y.item_at(i), std::max(0.0, a.item_at(i)));
  EXPECT_EQ(s.specialize(std::vector<Tensor>{a}).how, "symbolic graph");
  EXPECT_EQ(s.stats().imports, 0);
}

TEST(Session, InputsTakenAsAttributesAreCompiledInByValue) {
  // Reshape's target shape and TopK's k given as model inputs (as the ONNX node tests and some exporters do). The shape
  // is compiled in by value; k is read when the plan runs (topk_dynamic in the plan's dynamic region, issue 41).
  ModelBuilder b(13);
  b.input("x", onnx::TensorProto::FLOAT, {"12"});
  b.input("shape", onnx::TensorProto::INT64, {"2"});
  b.input("k", onnx::TensorProto::INT64, {"1"});
  b.node("Reshape", {"x", "shape"}, {"y"}, "reshape");
  b.node("TopK", {"y", "k"}, {"values", "indices"}, "topk");
  b.output("y");
  b.output("values");
  deploy::Session s(save(b, "reshape_topk.onnx"));
  const Tensor x = random({12}, 7);
  auto ints = [](std::vector<int64_t> v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); };
  std::vector<Tensor> in{x, ints({3, 4}), ints({2})};
  std::vector<Tensor> out = s.run(in);
  EXPECT_EQ(out.at(0).shape(), (Shape{3, 4}));
  EXPECT_EQ(out.at(1).shape(), (Shape{3, 2}));
  const deploy::Specialization& sp = s.specialize(in);
  EXPECT_EQ(sp.bound_values, (std::vector<std::string>{"shape"}));
  EXPECT_EQ(sp.plan_inputs, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(sp.plan.dynamic_nodes(), 1);
  EXPECT_EQ(s.stats().compiles, 1);

  in[1] = ints({2, 6});
  in[2] = ints({6});
  out = s.run(in);
  EXPECT_EQ(out.at(0).shape(), (Shape{2, 6}));
  EXPECT_EQ(out.at(1).shape(), (Shape{2, 6}));
  for (int64_t r = 0; r < 2; ++r)  // top 6 of a row of 6 is the row sorted descending
    for (int64_t c = 1; c < 6; ++c) EXPECT_GE(out[1].item_at(r * 6 + c - 1), out[1].item_at(r * 6 + c));
  EXPECT_EQ(s.stats().compiles, 2);

  in[1] = ints({5, 5});  // 25 != 12 elements: the importer's reshape error, naming the node
  const std::string e = error_of([&] { s.run(in); });
  EXPECT_NE(e.find("reshape"), std::string::npos) << e;
}

// If on a boolean model input (as streaming models branch on a flag): one plan per value, each the branch taken.
TEST(Session, IfOnAModelInputCompilesOnePlanPerBranch) {
  ModelBuilder b(13);
  b.input("x", onnx::TensorProto::FLOAT, {"n"});
  b.input("flag", onnx::TensorProto::BOOL, {});
  auto* iff = b.node("If", {"flag"}, {"y"}, "branch");
  onnx::GraphProto* then_g = ModelBuilder::attr_graph(iff, "then_branch");
  ModelBuilder::graph_node(then_g, "Relu", {"x"}, {"t"});
  ModelBuilder::graph_io(then_g, "t", onnx::TensorProto::FLOAT, true);
  onnx::GraphProto* else_g = ModelBuilder::attr_graph(iff, "else_branch");
  ModelBuilder::graph_node(else_g, "Neg", {"x"}, {"e"});
  ModelBuilder::graph_io(else_g, "e", onnx::TensorProto::FLOAT, true);
  b.output("y");
  deploy::Session s(save(b, "if.onnx"));
  const Tensor x = random({6}, 8);
  auto flag = [](bool v) { return Tensor::scalar(v ? 1.0 : 0.0, DType::boolean); };
  const Tensor yt = s.run(std::vector<Tensor>{x, flag(true)}).at(0);
  const Tensor ye = s.run(std::vector<Tensor>{x, flag(false)}).at(0);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(yt.item_at(i), std::max(0.0, x.item_at(i)));
    EXPECT_EQ(ye.item_at(i), -x.item_at(i));
  }
  EXPECT_EQ(s.stats().compiles, 2);
  EXPECT_EQ(s.value_inputs(), (std::set<std::string>{"flag"}));
  s.run(std::vector<Tensor>{x, flag(true)});
  EXPECT_EQ(s.stats().compiles, 2);
}

// If on a condition computed from float data (ReduceSum(x) > 0): binding x by value would compile a plan per input,
// so the model is refused when the session loads, naming the If node and the input; Loop's trip count likewise.
TEST(Session, ControlFlowOnFloatDataIsRefusedAtLoad) {
  ModelBuilder b(13);
  b.input("x", onnx::TensorProto::FLOAT, {"n"});
  b.node("ReduceSum", {"x"}, {"s"}, "sum");
  b.init("zero", {0.0f}, {});
  b.node("Greater", {"s", "zero"}, {"cond"}, "gt");
  auto* iff = b.node("If", {"cond"}, {"y"}, "data_branch");
  onnx::GraphProto* then_g = ModelBuilder::attr_graph(iff, "then_branch");
  ModelBuilder::graph_node(then_g, "Relu", {"x"}, {"t"});
  ModelBuilder::graph_io(then_g, "t", onnx::TensorProto::FLOAT, true);
  onnx::GraphProto* else_g = ModelBuilder::attr_graph(iff, "else_branch");
  ModelBuilder::graph_node(else_g, "Neg", {"x"}, {"e"});
  ModelBuilder::graph_io(else_g, "e", onnx::TensorProto::FLOAT, true);
  b.output("y");
  const std::string path = save(b, "if_on_data.onnx");
  const std::string e = error_of([&] { deploy::Session s(path); });
  EXPECT_NE(e.find("data_branch"), std::string::npos) << e;
  EXPECT_NE(e.find("floating-point model input 'x'"), std::string::npos) << e;
}

TEST(Session, BadInputsGetClearErrors) {
  deploy::Session s(flatten_model());
  EXPECT_NE(error_of([&] { s.run(std::vector<Tensor>{random({2, 3, 4}, 1)}); }).find("input 'x' has shape [2,3,4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.run(std::vector<Tensor>{random({2, 4, 4, 4}, 1)}); }).find("dim 1 differs"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.run(std::vector<Tensor>{}); }).find("takes 1 input(s), 0 given"), std::string::npos);
  EXPECT_NE(error_of([&] { s.run(std::vector<Tensor>{ops::cast(random({1, 3, 2, 2}, 1), DType::f64)}); })
                .find("the model wants f32"),
            std::string::npos);

  ModelBuilder two;
  two.input("a", onnx::TensorProto::FLOAT, {"n", "2"});
  two.input("b", onnx::TensorProto::FLOAT, {"n", "2"});
  two.node("Add", {"a", "b"}, {"y"});
  two.output("y");
  deploy::Session t(save(two, "add.onnx"));
  EXPECT_NE(error_of([&] { t.run(std::vector<Tensor>{random({3, 2}, 1), random({4, 2}, 2)}); })
                .find("dim 'n' is 3 in another input"),
            std::string::npos);
}

TEST(Session, UnsupportedOpsFailWhenOpened) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"2"});
  b.node("NoSuchOp", {"x"}, {"y"}, "mystery");
  b.output("y");
  const std::string e = error_of([&] { deploy::Session s(save(b, "unsupported.onnx")); });
  EXPECT_NE(e.find("mystery"), std::string::npos) << e;
}

}  // namespace
}  // namespace spore
