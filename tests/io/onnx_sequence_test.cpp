// ONNX sequences and optionals (io/onnx/onnx_import_sequence.cpp): the importer keeps a sequence as a list of tensor
// values, a sequence/optional graph input is fed as its tensors (OnnxImportOptions::input_counts, deploy::Layout) and
// a sequence/optional output comes back as its tensors. Checked against element-wise references on patterned (never
// all-zero) inputs in f32 and i64, exactly (these ops only move data); bad input fails naming the node or input.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <spore/spore.h>

#include "deploy/session.h"
#include "io/onnx/onnx.h"
#include "onnx_model_builder.h"
#include "runtime/plan.h"
#include "test_util.h"

namespace spore {
namespace {

using testing::error_of;
using testing::ModelBuilder;

std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs) {
  std::unique_ptr<Graph> copy = g.clone();
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  specialize_inputs(*copy, shapes);
  Plan p = compile_plan(std::move(copy), {});
  return p.run(inputs);
}

void expect_equal(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  const Tensor g = got.contiguous(), w = want.contiguous();
  for (int64_t i = 0; i < w.numel(); ++i) ASSERT_EQ(g.item_at(i), w.item_at(i)) << "at " << i;
}

// Rows [r0, r1) of a 2-D tensor, by element copies (the reference for SplitToSequence along axis 0).
Tensor rows(const Tensor& x, int64_t r0, int64_t r1) {
  const Tensor c = x.contiguous();
  const int64_t cols = c.dim(1);
  std::vector<double> v;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t k = 0; k < cols; ++k) v.push_back(c.item_at(r * cols + k));
  return Tensor::from_doubles(v, {r1 - r0, cols}, x.dtype());
}

Tensor transposed(const Tensor& x) {
  const Tensor c = x.contiguous();
  std::vector<double> v;
  for (int64_t k = 0; k < c.dim(1); ++k)
    for (int64_t r = 0; r < c.dim(0); ++r) v.push_back(c.item_at(r * c.dim(1) + k));
  return Tensor::from_doubles(v, {c.dim(1), c.dim(0)}, x.dtype());
}

void seq_io(onnx::ValueInfoProto* vi, const std::string& name, int32_t et, const std::vector<std::string>& dims,
            bool optional = false) {
  vi->set_name(name);
  onnx::TypeProto* t = vi->mutable_type();
  if (optional) t = t->mutable_optional_type()->mutable_elem_type();
  auto* tt = t->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type();
  tt->set_elem_type(et);
  auto* sh = tt->mutable_shape();
  for (const std::string& d : dims) {
    auto* dim = sh->add_dim();
    if (std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

// x [4, 3] -> SplitToSequence(split=[1, 3]) -> SequenceAt 1 (rows 1..3); SplitToSequence(axis=1, keepdims=0) ->
// ConcatFromSequence(new_axis=1, axis=0) (x transposed); ConcatFromSequence of the first split (x again); the
// SequenceLength of a split into chunks of 3 (a scalar split: 4 rows -> 3 + 1, 2 pieces).
ModelBuilder split_concat_model(int32_t et) {
  ModelBuilder b(13);
  b.input("x", et, {"4", "3"});
  b.init_i64("sizes", {1, 3});
  b.init_i64("one", {1});
  b.g().mutable_initializer(1)->clear_dims();  // a scalar index
  b.node("SplitToSequence", {"x", "sizes"}, {"parts"}, "split");
  b.node("SequenceAt", {"parts", "one"}, {"tail"}, "at");
  auto* cols = b.node("SplitToSequence", {"x"}, {"cols"}, "split_cols");
  ModelBuilder::attr_i(cols, "axis", 1);
  ModelBuilder::attr_i(cols, "keepdims", 0);
  auto* st = b.node("ConcatFromSequence", {"cols"}, {"xt"}, "stack");
  ModelBuilder::attr_i(st, "axis", 0);
  ModelBuilder::attr_i(st, "new_axis", 1);
  auto* cat = b.node("ConcatFromSequence", {"parts"}, {"again"}, "cat");
  ModelBuilder::attr_i(cat, "axis", 0);
  b.init_i64("three", {3});
  b.g().mutable_initializer(2)->clear_dims();
  b.node("SplitToSequence", {"x", "three"}, {"chunks"}, "chunk");
  b.node("SequenceLength", {"chunks"}, {"n"}, "len");
  b.output("tail", et);
  b.output("xt", et);
  b.output("again", et);
  b.output("n", onnx::TensorProto::INT64);
  return b;
}

TEST(OnnxSequence, SplitAtConcatStackMatchReference) {
  for (const auto& [et, dt] :
       {std::pair{onnx::TensorProto::FLOAT, DType::f32}, std::pair{onnx::TensorProto::INT64, DType::i64}}) {
    SCOPED_TRACE(dtype_name(dt));
    const ModelBuilder b = split_concat_model(et);
    std::unique_ptr<Graph> g = io::import_onnx_bytes(b.bytes(), "split.onnx");
    const Tensor x = testing::patterned_tensor({4, 3}, dt, 7);
    const std::vector<Tensor> y = run(*g, {x});
    ASSERT_EQ(y.size(), 4u);
    expect_equal(y[0], rows(x, 1, 4));
    expect_equal(y[1], transposed(x));
    expect_equal(y[2], x);
    expect_equal(y[3], Tensor::scalar(2, DType::i64));
  }
}

// s: a sequence input of f32[N] (each element its own N); y = SequenceInsert(s, x, 0) with SequenceErase of its
// last element, returned as a sequence; n = SequenceLength(y); first = SequenceAt(y, -1).
ModelBuilder insert_model() {
  ModelBuilder b(13);
  seq_io(b.g().add_input(), "s", onnx::TensorProto::FLOAT, {"N"});
  b.input("x", onnx::TensorProto::FLOAT, {"M"});
  b.init_i64("zero", {0});
  b.g().mutable_initializer(0)->clear_dims();
  b.init_i64("minus1", {-1});
  b.g().mutable_initializer(1)->clear_dims();
  b.node("SequenceInsert", {"s", "x", "zero"}, {"t"}, "insert");
  b.node("SequenceErase", {"t"}, {"y"}, "erase");
  b.node("SequenceLength", {"y"}, {"n"}, "len");
  b.node("SequenceAt", {"y", "minus1"}, {"last"}, "at");
  seq_io(b.g().add_output(), "y", onnx::TensorProto::FLOAT, {"N"});
  b.output("n", onnx::TensorProto::INT64);
  b.output("last");
  return b;
}

TEST(OnnxSequence, SequenceInputIsFedAsItsTensors) {
  const ModelBuilder b = insert_model();
  io::OnnxImportOptions o;
  o.input_counts["s"] = 3;
  io::OnnxImportReport rep;
  std::unique_ptr<Graph> g = io::import_onnx_bytes(b.bytes(), "insert.onnx", o, &rep);
  ASSERT_EQ(g->inputs().size(), 4u);
  EXPECT_EQ(g->inputs()[0]->name, "s.0");
  EXPECT_EQ(g->inputs()[2]->name, "s.2");
  EXPECT_EQ(g->inputs()[3]->name, "x");
  ASSERT_EQ(rep.outputs.size(), 3u);
  EXPECT_EQ(rep.outputs[0].kind, io::OnnxValueKind::sequence);
  EXPECT_EQ(rep.outputs[0].count, 3);  // x, s.0, s.1 (s.2 erased)
  EXPECT_EQ(rep.outputs[1].count, 1);
  ASSERT_EQ(g->outputs().size(), 5u);
  EXPECT_EQ(g->outputs()[0]->name, "y.0");
  EXPECT_EQ(g->outputs()[2]->name, "y.2");

  const Tensor s0 = testing::patterned_tensor({2}, DType::f32, 1), s1 = testing::patterned_tensor({5}, DType::f32, 2),
               s2 = testing::patterned_tensor({1}, DType::f32, 3), x = testing::patterned_tensor({4}, DType::f32, 4);
  const std::vector<Tensor> y = run(*g, {s0, s1, s2, x});
  expect_equal(y[0], x);
  expect_equal(y[1], s0);
  expect_equal(y[2], s1);
  expect_equal(y[3], Tensor::scalar(3, DType::i64));
  expect_equal(y[4], s1);
}

TEST(OnnxSequence, SessionTakesALayoutAndCompilesPerLength) {
  const std::string path = (testing::temp_dir("onnx_sequence") / "insert.onnx").string();
  insert_model().save(path);
  deploy::Session s(path);
  ASSERT_EQ(s.inputs().size(), 2u);
  EXPECT_EQ(s.inputs()[0].kind, io::OnnxValueKind::sequence);
  const Tensor a = testing::patterned_tensor({3}, DType::f32, 5), b = testing::patterned_tensor({6}, DType::f32, 6),
               x = testing::patterned_tensor({2}, DType::f32, 7);
  std::vector<Tensor> y = s.run(std::vector<Tensor>{a, b, x}, {2, 1});
  deploy::Specialization& sp = s.specialize(std::vector<Tensor>{a, b, x}, {2, 1});
  ASSERT_EQ(sp.outputs.size(), 3u);
  EXPECT_EQ(sp.outputs[0].count, 2);
  ASSERT_EQ(y.size(), 4u);  // y.0, y.1, n, last
  expect_equal(y[0], x);
  expect_equal(y[1], a);
  expect_equal(y[2], Tensor::scalar(2, DType::i64));
  y = s.run(std::vector<Tensor>{b, x}, {1, 1});  // a new length: one more compile; y = [x]
  EXPECT_EQ(s.stats().compiles, 2);
  ASSERT_EQ(y.size(), 3u);  // y.0, n, last
  expect_equal(y[0], x);
  expect_equal(y[1], Tensor::scalar(1, DType::i64));
  expect_equal(y[2], x);
  // The layout must fit the inputs' kinds and the tensors given; errors name the input.
  std::string msg = error_of([&] { s.run(std::vector<Tensor>{a, x}); });
  EXPECT_NE(msg.find("'s' is sequence"), std::string::npos) << msg;
  msg = error_of([&] { s.run(std::vector<Tensor>{a, x, x}, {1, 2}); });
  EXPECT_NE(msg.find("input 'x' is tensor"), std::string::npos) << msg;
  msg = error_of([&] { s.run(std::vector<Tensor>{a, x}, {2, 1}); });
  EXPECT_NE(msg.find("holds 3 tensor(s), 2 given"), std::string::npos) << msg;
  msg = error_of([&] { s.run(std::vector<Tensor>{Tensor::scalar(1, DType::i64), x}, {1, 1}); });
  EXPECT_NE(msg.find("input 's.0' is i64"), std::string::npos) << msg;
}

TEST(OnnxSequence, BadIndexEmptySequenceAndMisuseNameTheNode) {
  {  // SequenceAt past the end names the node and the valid range
    ModelBuilder b(13);
    b.input("x", onnx::TensorProto::FLOAT, {"2"});
    b.init_i64("five", {5});
    b.g().mutable_initializer(0)->clear_dims();
    b.node("SequenceConstruct", {"x", "x"}, {"s"}, "make");
    b.node("SequenceAt", {"s", "five"}, {"y"}, "pick");
    b.output("y");
    const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "at.onnx"); });
    EXPECT_NE(msg.find("SequenceAt 'pick'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("position 5 is out of range for a sequence of 2 (valid: -2 to 1)"), std::string::npos) << msg;
  }
  {  // SequenceAt on an empty sequence
    ModelBuilder b(13);
    b.input("x", onnx::TensorProto::FLOAT, {"2"});
    b.init_i64("zero", {0});
    b.g().mutable_initializer(0)->clear_dims();
    b.node("SequenceEmpty", {}, {"s"}, "empty");
    b.node("SequenceAt", {"s", "zero"}, {"y"}, "pick");
    b.node("Add", {"y", "x"}, {"z"}, "add");
    b.output("z");
    const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "empty.onnx"); });
    EXPECT_NE(msg.find("SequenceAt 'pick'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("position 0 in an empty sequence"), std::string::npos) << msg;
  }
  {  // an index computed from a float input cannot be known at import: the error names the node and the input
    ModelBuilder b(13);
    b.input("x", onnx::TensorProto::FLOAT, {"2"});
    b.input("f", onnx::TensorProto::FLOAT, {});
    b.node("Cast", {"f"}, {"i"}, "to_int");
    ModelBuilder::attr_i(b.g().mutable_node(0), "to", onnx::TensorProto::INT64);
    b.node("SequenceConstruct", {"x", "x"}, {"s"}, "make");
    b.node("SequenceAt", {"s", "i"}, {"y"}, "pick");
    b.output("y");
    io::OnnxImportReport rep;
    const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "dyn.onnx", {}, &rep); });
    EXPECT_NE(msg.find("SequenceAt 'pick'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("must be known at import time"), std::string::npos) << msg;
    EXPECT_EQ(rep.needs_values, std::vector<std::string>{"f"});
  }
  {  // a sequence reaching a tensor op; a dtype that does not match the sequence's; concat of an empty sequence
    ModelBuilder b(13);
    b.input("x", onnx::TensorProto::FLOAT, {"2"});
    b.node("SequenceConstruct", {"x"}, {"s"}, "make");
    b.node("Relu", {"s"}, {"y"}, "act");
    b.output("y");
    std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "relu.onnx"); });
    EXPECT_NE(msg.find("Relu 'act'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("input 0 ('s') is a sequence of 1 f32 tensor(s); this op takes tensors"), std::string::npos)
        << msg;

    ModelBuilder c(13);
    c.input("x", onnx::TensorProto::FLOAT, {"2"});
    c.input("k", onnx::TensorProto::INT64, {"2"});
    c.node("SequenceConstruct", {"x"}, {"s"}, "make");
    c.node("SequenceInsert", {"s", "k"}, {"t"}, "insert");
    c.node("ConcatFromSequence", {"t"}, {"y"}, "cat");
    c.output("y");
    msg = error_of([&] { io::import_onnx_bytes(c.bytes(), "mixed.onnx"); });
    EXPECT_NE(msg.find("SequenceInsert 'insert'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is i64, the sequence holds f32"), std::string::npos) << msg;

    ModelBuilder d(13);
    d.input("x", onnx::TensorProto::FLOAT, {"2"});
    d.node("SequenceEmpty", {}, {"s"}, "empty");
    d.node("ConcatFromSequence", {"s"}, {"y"}, "cat");
    d.output("y");
    msg = error_of([&] { io::import_onnx_bytes(d.bytes(), "cat.onnx"); });
    EXPECT_NE(msg.find("ConcatFromSequence 'cat': concatenates an empty sequence"), std::string::npos) << msg;
  }
  {  // a sequence as a Loop's scan output (the loop stacks its per-iteration tensors): refused naming the loop
    ModelBuilder b(13);
    b.input("x", onnx::TensorProto::FLOAT, {"2"});
    b.init_i64("m", {2});
    b.g().mutable_initializer(0)->clear_dims();
    auto* loop = b.node("Loop", {"m", ""}, {"ys"}, "loop");
    onnx::GraphProto* body = ModelBuilder::attr_graph(loop, "body");
    ModelBuilder::graph_io(body, "i", onnx::TensorProto::INT64, false);
    ModelBuilder::graph_io(body, "c", onnx::TensorProto::BOOL, false);
    ModelBuilder::graph_node(body, "Identity", {"c"}, {"c_out"});
    ModelBuilder::graph_node(body, "SequenceConstruct", {"x"}, {"s"});
    ModelBuilder::graph_io(body, "c_out", onnx::TensorProto::BOOL, true);
    ModelBuilder::graph_io(body, "s", onnx::TensorProto::FLOAT, true);
    b.output("ys");
    const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "loop.onnx"); });
    EXPECT_NE(msg.find("Loop 'loop'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("a sequence of 1 f32 tensor(s) reaches spore op unsqueeze, which takes tensors"),
              std::string::npos)
        << msg;
  }
  {  // a sequence input without its length; an optional input that holds nothing, read
    const ModelBuilder b = insert_model();
    std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "insert.onnx"); });
    EXPECT_NE(msg.find("input 's' is a sequence of f32[N]"), std::string::npos) << msg;

    ModelBuilder o(15);
    auto* vi = o.g().add_input();
    vi->set_name("maybe");
    auto* tt = vi->mutable_type()->mutable_optional_type()->mutable_elem_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(3);
    o.node("OptionalHasElement", {"maybe"}, {"has"}, "has");
    o.node("OptionalGetElement", {"maybe"}, {"y"}, "get");
    o.output("has", onnx::TensorProto::BOOL);
    o.output("y");
    io::OnnxImportOptions opts;
    opts.input_counts["maybe"] = io::kOnnxAbsent;
    msg = error_of([&] { io::import_onnx_bytes(o.bytes(), "opt.onnx", opts); });
    EXPECT_NE(msg.find("OptionalGetElement 'get': input 'maybe' is an optional that holds nothing"), std::string::npos)
        << msg;
    opts.input_counts["maybe"] = 1;  // present: has = true, y = the tensor
    std::unique_ptr<Graph> g = io::import_onnx_bytes(o.bytes(), "opt.onnx", opts);
    const Tensor x = testing::patterned_tensor({3}, DType::f32, 9);
    const std::vector<Tensor> y = run(*g, {x});
    expect_equal(y[0], Tensor::scalar(1, DType::boolean));
    expect_equal(y[1], x);
  }
}

}  // namespace
}  // namespace spore
