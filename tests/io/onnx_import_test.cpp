// ONNX import on small hand-built ModelProtos: names, types, constants, classification, errors, function inlining,
// opset-dependent semantics. The backend node-test conformance run is tests/onnx/node_tests_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <onnx/onnx_pb.h>

#include <spore/spore.h>

#include "io/model_file.h"
#include "io/onnx/onnx.h"
#include "ops/graph_ops.h"
#include "runtime/plan.h"
#include "onnx_model_builder.h"
#include "test_util.h"

namespace spore {
namespace {

using testing::error_of;
using testing::attr_ints;
using testing::attr_s;
using testing::ModelBuilder;

std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs) {
  std::unique_ptr<Graph> copy = g.clone();
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  specialize_inputs(*copy, shapes);
  Plan p = compile_plan(std::move(copy), {});
  return p.run(inputs);
}

void expect_close(const Tensor& got, const Tensor& want, double tol = 1e-5) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.item_at(i), want.item_at(i), tol) << "at " << i;
}

// Gemm (transB, as PyTorch's Linear exports it) + Relu, weights as initializers, symbolic batch.
ModelBuilder linear_relu_model() {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"batch", "3"});
  b.init("fc.weight", {0.5f, -1.f, 2.f, 1.5f, 0.25f, -0.5f}, {2, 3});
  b.init("fc.bias", {0.1f, -0.2f}, {2});
  auto* gemm = b.node("Gemm", {"x", "fc.weight", "fc.bias"}, {"h"}, "fc");
  ModelBuilder::attr_i(gemm, "transB", 1);
  b.node("Relu", {"h"}, {"y:0"}, "act");
  b.output("y:0");
  return b;
}

TEST(OnnxImport, LinearReluKeepsNamesAndRuns) {
  ModelBuilder b = linear_relu_model();
  io::OnnxImportReport rep;
  std::unique_ptr<Graph> g = io::import_onnx_bytes(b.bytes(), "linear", {}, &rep);
  EXPECT_EQ(rep.opset, 13);
  EXPECT_FALSE(rep.has_unsupported());
  ASSERT_EQ(g->inputs().size(), 1u);  // initializers are constants, not inputs
  EXPECT_EQ(g->inputs()[0]->name, "x");
  EXPECT_EQ(g->inputs()[0]->type.str(), "f32[batch,3]");
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->outputs()[0]->name, "y:0");
  EXPECT_EQ(g->outputs()[0]->producer->name, "act");
  EXPECT_NE(g->find_value("fc.weight"), nullptr);
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, -1, 0.5f, 4}, {2, 3});
  const Tensor w = Tensor::from_vector<float>({0.5f, -1.f, 2.f, 1.5f, 0.25f, -0.5f}, {2, 3});
  const Tensor want = ops::relu(ops::add(ops::matmul(x, w, false, true), Tensor::from_vector<float>({0.1f, -0.2f}, {2})));
  expect_close(run(*g, {x})[0], want);
}

TEST(OnnxImport, ReportTableAndUnsupportedError) {
  ModelBuilder b = linear_relu_model();
  b.node("FrobnicateV2", {"y:0"}, {"z"}, "frob_1");
  b.output("z");
  const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "frob.onnx"); });
  EXPECT_NE(msg.find("FrobnicateV2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("frob_1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unsupported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--custom-ops"), std::string::npos) << msg;
  try {
    io::import_onnx_bytes(b.bytes(), "frob.onnx");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
  }
  const auto path = testing::temp_dir("onnx_import") / "frob.onnx";
  {
    std::ofstream f(path, std::ios::binary);
    f << b.bytes();
  }
  const io::OnnxImportReport rep = io::check_onnx_ops(path.string());
  ASSERT_EQ(rep.ops.size(), 3u);  // sorted by op type
  EXPECT_EQ(rep.ops[0].op_type, "FrobnicateV2");
  EXPECT_EQ(rep.ops[0].status, "unsupported");
  EXPECT_EQ(rep.ops[0].nodes, std::vector<std::string>{"frob_1"});
  EXPECT_EQ(rep.ops[1].op_type, "Gemm");
  EXPECT_EQ(rep.ops[1].status, "supported");
  EXPECT_TRUE(rep.has_unsupported());
  EXPECT_NE(rep.format().find("frob_1"), std::string::npos);
}

TEST(OnnxImport, RejectsNewerOpsetAndBadBytes) {
  ModelBuilder b(22);
  b.input("x", onnx::TensorProto::FLOAT, {"2"});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "new.onnx"); });
  EXPECT_NE(msg.find("opset 22"), std::string::npos) << msg;
  EXPECT_NE(error_of([] { io::import_onnx_bytes("definitely not protobuf \xff\xff\xff", "junk.onnx"); }).find("junk.onnx"),
            std::string::npos);
  EXPECT_FALSE(io::looks_like_onnx("SPOREMDL"));
  EXPECT_TRUE(io::looks_like_onnx(linear_relu_model().bytes().substr(0, 16)));
}

TEST(OnnxImport, ClearErrorsNameTensorsAndNodes) {
  {  // external data
    ModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {"2"});
    auto* t = b.g().add_initializer();
    t->set_name("big_weight");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(2);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    b.node("Add", {"x", "big_weight"}, {"y"});
    b.output("y");
    const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "ext.onnx"); });
    EXPECT_NE(msg.find("big_weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("external"), std::string::npos) << msg;
  }
  {  // unsupported element type of an input
    ModelBuilder b;
    b.input("s", onnx::TensorProto::STRING, {"2"});
    b.node("Identity", {"s"}, {"y"});
    b.output("y", onnx::TensorProto::STRING);
    const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "str.onnx"); });
    EXPECT_NE(msg.find("'s'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("STRING"), std::string::npos) << msg;
  }
  {  // shape mismatch inside a node: the error names the ONNX node
    ModelBuilder b;
    b.input("a", onnx::TensorProto::FLOAT, {"2", "3"});
    b.input("b", onnx::TensorProto::FLOAT, {"4", "5"});
    b.node("MatMul", {"a", "b"}, {"y"}, "mm_bad");
    b.output("y");
    const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "mm.onnx"); });
    EXPECT_NE(msg.find("MatMul 'mm_bad'"), std::string::npos) << msg;
  }
  {  // a Reshape whose shape is a run-time input
    ModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {"2", "3"});
    b.input("shape", onnx::TensorProto::INT64, {"2"});
    b.node("Reshape", {"x", "shape"}, {"y"}, "rs");
    b.output("y");
    const std::string msg = error_of([&] { io::import_onnx_bytes(b.bytes(), "rs.onnx"); });
    EXPECT_NE(msg.find("Reshape 'rs'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'shape'"), std::string::npos) << msg;
  }
}

TEST(OnnxImport, SymbolicDimsAndShapeFolding) {
  ModelBuilder b;
  b.input("img-in", onnx::TensorProto::FLOAT, {"N", "", "4"});
  b.node("Relu", {"img-in"}, {"y"});
  b.output("y");
  std::unique_ptr<Graph> g = io::import_onnx_bytes(b.bytes(), "sym");
  EXPECT_EQ(g->inputs()[0]->type.str(), "f32[N,img_in_d1,4]");

  // Shape -> Gather -> Concat -> Reshape folds to a static reshape when the shapes are static.
  ModelBuilder s;
  s.input("x", onnx::TensorProto::FLOAT, {"2", "3", "4"});
  s.init_i64("idx0", {0});
  s.init_i64("minus1", {-1});
  s.node("Shape", {"x"}, {"shp"});
  auto* gat = s.node("Gather", {"shp", "idx0"}, {"n"});
  ModelBuilder::attr_i(gat, "axis", 0);
  auto* cat = s.node("Concat", {"n", "minus1"}, {"newshape"});
  ModelBuilder::attr_i(cat, "axis", 0);
  s.node("Reshape", {"x", "newshape"}, {"y"});
  s.output("y");
  std::unique_ptr<Graph> g2 = io::import_onnx_bytes(s.bytes(), "fold");
  EXPECT_EQ(g2->outputs()[0]->type.str(), "f32[2,12]");
  int non_const = 0;
  for (const Node* n : g2->nodes()) non_const += n->op != "input"_op && n->op != "constant"_op;
  EXPECT_EQ(non_const, 1);  // just the reshape
}

// Opsets 18-21 (newer than the ONNX library's schemas): the forms that changed import with their new semantics.
TEST(OnnxImport, Opset18To21Forms) {
  const Tensor x = testing::patterned_tensor({2, 6, 2, 2}, DType::f32, 3);
  auto run1 = [&](const ModelBuilder& b) { return run(*io::import_onnx_bytes(b.bytes(), "m"), {x}).at(0); };
  {  // ReduceMean 18: axes as input 1
    ModelBuilder b(18);
    b.input("x", onnx::TensorProto::FLOAT, {"2", "6", "2", "2"});
    b.init_i64("axes", {1, 3});
    ModelBuilder::attr_i(b.node("ReduceMean", {"x", "axes"}, {"y"}), "keepdims", 0);
    b.output("y");
    expect_close(run1(b), ops::reduce_mean(x, {1, 3}, false));
  }
  {  // Split 18: num_outputs chunks of ceil(5 / 3) = 2, the last one smaller
    ModelBuilder b(18);
    b.input("x", onnx::TensorProto::FLOAT, {"5"});
    auto* n = b.node("Split", {"x"}, {"a", "b", "c"});
    ModelBuilder::attr_i(n, "num_outputs", 3);
    b.output("a");
    b.output("b");
    b.output("c");
    const Tensor v = testing::patterned_tensor({5}, DType::f32, 4);
    const std::vector<Tensor> outs = run(*io::import_onnx_bytes(b.bytes(), "split"), {v});
    ASSERT_EQ(outs.size(), 3u);
    EXPECT_EQ(outs[0].shape(), (Shape{2}));
    EXPECT_EQ(outs[1].shape(), (Shape{2}));
    EXPECT_EQ(outs[2].shape(), (Shape{1}));
    EXPECT_EQ(outs[2].item_at(0), v.item_at(4));
  }
  {  // Pad 18: pads for the listed axes only
    ModelBuilder b(18);
    b.input("x", onnx::TensorProto::FLOAT, {"2", "6", "2", "2"});
    b.init_i64("pads", {1, 0, 2, 3});  // axis 3: begin 1, end 2; axis 1: begin 0, end 3
    b.init_i64("axes", {3, 1});
    b.node("Pad", {"x", "pads", "", "axes"}, {"y"});
    b.output("y");
    expect_close(run1(b), ops::pad(x, {0, 0, 0, 1, 0, 3, 0, 2}, "constant", 0.0));
  }
  for (int opset : {18, 21}) {  // GroupNormalization: scale/bias per group (18) or per channel (21)
    ModelBuilder b(opset);
    b.input("x", onnx::TensorProto::FLOAT, {"2", "6", "2", "2"});
    const int64_t n = opset == 18 ? 3 : 6;
    std::vector<float> sc, bi;
    for (int64_t i = 0; i < n; ++i) {
      sc.push_back(0.5f + static_cast<float>(i));
      bi.push_back(-0.25f * static_cast<float>(i));
    }
    b.init("scale", sc, {n});
    b.init("bias", bi, {n});
    auto* gn = b.node("GroupNormalization", {"x", "scale", "bias"}, {"y"});
    ModelBuilder::attr_i(gn, "num_groups", 3);
    b.output("y");
    std::vector<float> wc, bc;
    for (int64_t ch = 0; ch < 6; ++ch) {
      const size_t k = static_cast<size_t>(opset == 18 ? ch / 2 : ch);
      wc.push_back(sc[k]);
      bc.push_back(bi[k]);
    }
    expect_close(run1(b), ops::group_norm(x, 3, Tensor::from_vector(wc, {6}), Tensor::from_vector(bc, {6}), 1e-5), 1e-5);
  }
  {  // Gelu 20
    ModelBuilder b(20);
    b.input("x", onnx::TensorProto::FLOAT, {"2", "6", "2", "2"});
    b.node("Gelu", {"x"}, {"y"});
    b.output("y");
    expect_close(run1(b), ops::gelu(x));
  }
  {  // Resize 18's axes attribute is refused by name, not misread
    ModelBuilder b(18);
    b.input("x", onnx::TensorProto::FLOAT, {"2", "6", "2", "2"});
    b.init("scales", {2.f, 2.f}, {2});
    auto* rz = b.node("Resize", {"x", "", "scales"}, {"y"});
    auto* a = rz->add_attribute();
    a->set_name("axes");
    a->set_type(onnx::AttributeProto::INTS);
    a->add_ints(2);
    a->add_ints(3);
    b.output("y");
    EXPECT_NE(error_of([&] { io::import_onnx_bytes(b.bytes(), "resize"); }).find("axes attribute"), std::string::npos);
  }
}


// The indexing ops' later forms: ScatterND / ScatterElements 18 with max and min, GridSample 20's mode names, and
// Col2Im 18 against a loop that adds every column entry onto the image element it covers.
TEST(OnnxImport, IndexingOpsLaterForms) {
  {
    ModelBuilder b(18);
    b.input("x", onnx::TensorProto::FLOAT, {"4", "3"});
    b.input("u", onnx::TensorProto::FLOAT, {"2", "3"});
    b.init_i64("i", {2, 0});
    auto* r = b.g().mutable_initializer(0);
    r->clear_dims();
    r->add_dims(2);
    r->add_dims(1);
    attr_s(b.node("ScatterND", {"x", "i", "u"}, {"y"}), "reduction", "max");
    b.output("y");
    const Tensor x = testing::patterned_tensor({4, 3}, DType::f32, 1),
                 u = testing::patterned_tensor({2, 3}, DType::f32, 2);
    const Tensor y = run(*io::import_onnx_bytes(b.bytes(), "snd"), {x, u}).at(0);
    const Tensor idx = Tensor::from_vector<int64_t>({2, 0}, {2, 1});
    expect_close(y, ops::scatter_nd(x, idx, u, "max"));
    EXPECT_EQ(y.item_at(6), std::max(x.item_at(6), u.item_at(0)));
  }
  {
    ModelBuilder b(18);
    b.input("x", onnx::TensorProto::FLOAT, {"3", "4"});
    b.input("u", onnx::TensorProto::FLOAT, {"3", "2"});
    b.init_i64("i", {0, 3, 1, 1, 2, -1});
    auto* r = b.g().mutable_initializer(0);
    r->clear_dims();
    r->add_dims(3);
    r->add_dims(2);
    auto* n = b.node("ScatterElements", {"x", "i", "u"}, {"y"});
    attr_s(n, "reduction", "min");
    ModelBuilder::attr_i(n, "axis", 1);
    b.output("y");
    const Tensor x = testing::patterned_tensor({3, 4}, DType::f32, 3),
                 u = testing::patterned_tensor({3, 2}, DType::f32, 4);
    const Tensor idx = Tensor::from_vector<int64_t>({0, 3, 1, 1, 2, -1}, {3, 2});
    expect_close(run(*io::import_onnx_bytes(b.bytes(), "se"), {x, u}).at(0), ops::scatter(x, idx, u, 1, "min"));
  }
  for (const char* mode : {"linear", "cubic", "nearest"}) {
    ModelBuilder b(20);
    b.input("x", onnx::TensorProto::FLOAT, {"1", "2", "4", "5"});
    b.input("g", onnx::TensorProto::FLOAT, {"1", "3", "3", "2"});
    auto* n = b.node("GridSample", {"x", "g"}, {"y"});
    attr_s(n, "mode", mode);
    attr_s(n, "padding_mode", "border");
    b.output("y");
    const Tensor x = testing::patterned_tensor({1, 2, 4, 5}, DType::f32, 5);
    const Tensor g = ops::div(testing::patterned_tensor({1, 3, 3, 2}, DType::f32, 6), Tensor::scalar(10.0, DType::f32));
    const std::string m = std::string(mode) == "linear" ? "bilinear" : std::string(mode) == "cubic" ? "bicubic" : mode;
    expect_close(run(*io::import_onnx_bytes(b.bytes(), "gs"), {x, g}).at(0),
                 ops::grid_sample(x, g, m, "border", false));
  }
  {  // Col2Im: image 5 x 6, block 2 x 3, dilation (1, 2), stride (2, 1), pads (1, 0, 0, 1)
    const int64_t H = 5, W = 6, kh = 2, kw = 3, dh = 1, dw = 2, sh = 2, sw = 1, pt = 1, pl = 0, pb = 0, pr = 1;
    const int64_t Lh = (H + pt + pb - (dh * (kh - 1) + 1)) / sh + 1, Lw = (W + pl + pr - (dw * (kw - 1) + 1)) / sw + 1;
    const int64_t N = 2, C = 2, K = kh * kw;
    ModelBuilder b(18);
    b.input("x", onnx::TensorProto::FLOAT, {"2", std::to_string(C * K), std::to_string(Lh * Lw)});
    b.init_i64("image", {H, W});
    b.init_i64("block", {kh, kw});
    auto* n = b.node("Col2Im", {"x", "image", "block"}, {"y"});
    attr_ints(n, "dilations", {dh, dw});
    attr_ints(n, "strides", {sh, sw});
    attr_ints(n, "pads", {pt, pl, pb, pr});
    b.output("y");
    const Tensor x = testing::patterned_tensor({N, C * K, Lh * Lw}, DType::f32, 7);
    std::vector<double> want(static_cast<size_t>(N * C * H * W), 0.0);
    for (int64_t nn = 0; nn < N; ++nn)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j)
            for (int64_t bh = 0; bh < Lh; ++bh)
              for (int64_t bw = 0; bw < Lw; ++bw) {
                const int64_t y = bh * sh - pt + i * dh, xw = bw * sw - pl + j * dw;
                if (y < 0 || y >= H || xw < 0 || xw >= W) continue;
                want[static_cast<size_t>(((nn * C + c) * H + y) * W + xw)] +=
                    x.item_at((nn * C * K + c * K + i * kw + j) * Lh * Lw + bh * Lw + bw);
              }
    expect_close(run(*io::import_onnx_bytes(b.bytes(), "col2im"), {x}).at(0),
                 Tensor::from_doubles(want, {N, C, H, W}, DType::f32));
  }
}

// Loop with a constant trip count and Scan over a static sequence unroll; their results match the definitions.
TEST(OnnxImport, LoopAndScanUnroll) {
  using B = ModelBuilder;
  const Tensor x = testing::patterned_tensor({4, 3}, DType::f32, 5);
  {  // Loop M=3: acc = acc * 2 + x each iteration, scan output: acc after each iteration
    B b(13);
    b.input("x", onnx::TensorProto::FLOAT, {"4", "3"});
    b.init_i64("M", {3});
    auto* loop = b.node("Loop", {"M", "", "x"}, {"acc", "hist"}, "loop");
    onnx::GraphProto* g = B::attr_graph(loop, "body");
    B::graph_io(g, "i", onnx::TensorProto::INT64, false);
    B::graph_io(g, "cond_in", onnx::TensorProto::BOOL, false);
    B::graph_io(g, "a", onnx::TensorProto::FLOAT, false);
    B::graph_node(g, "Add", {"a", "a"}, {"a2"});
    B::graph_node(g, "Add", {"a2", "x"}, {"a_next"});  // x from the enclosing graph
    B::graph_node(g, "Identity", {"cond_in"}, {"cond_out"});
    B::graph_node(g, "Identity", {"a_next"}, {"scan"});
    B::graph_io(g, "cond_out", onnx::TensorProto::BOOL, true);
    B::graph_io(g, "a_next", onnx::TensorProto::FLOAT, true);
    B::graph_io(g, "scan", onnx::TensorProto::FLOAT, true);
    b.output("acc");
    b.output("hist");
    const std::vector<Tensor> outs = run(*io::import_onnx_bytes(b.bytes(), "loop"), {x});
    ASSERT_EQ(outs.size(), 2u);
    EXPECT_EQ(outs[1].shape(), (Shape{3, 4, 3}));
    for (int64_t e = 0; e < x.numel(); ++e) {
      double a = x.item_at(e);
      for (int it = 0; it < 3; ++it) {
        a = 2 * a + x.item_at(e);
        EXPECT_NEAR(outs[1].item_at(it * 12 + e), a, 1e-4);
      }
      EXPECT_NEAR(outs[0].item_at(e), a, 1e-4);
    }
  }
  {  // Scan: running sum over axis 0 (forward) and each step's row reversed in time (scan_output_directions 1)
    B b(16);
    b.input("x", onnx::TensorProto::FLOAT, {"4", "3"});
    b.init("zero", {0.f, 0.f, 0.f}, {3});
    auto* scan = b.node("Scan", {"zero", "x"}, {"total", "partial"}, "scan");
    B::attr_i(scan, "num_scan_inputs", 1);
    onnx::GraphProto* g = B::attr_graph(scan, "body");
    B::graph_io(g, "s", onnx::TensorProto::FLOAT, false);
    B::graph_io(g, "row", onnx::TensorProto::FLOAT, false);
    B::graph_node(g, "Add", {"s", "row"}, {"s_next"});
    B::graph_node(g, "Identity", {"s_next"}, {"out"});
    B::graph_io(g, "s_next", onnx::TensorProto::FLOAT, true);
    B::graph_io(g, "out", onnx::TensorProto::FLOAT, true);
    b.output("total");
    b.output("partial");
    const std::vector<Tensor> outs = run(*io::import_onnx_bytes(b.bytes(), "scan"), {x});
    ASSERT_EQ(outs.size(), 2u);
    EXPECT_EQ(outs[1].shape(), (Shape{4, 3}));
    for (int64_t col = 0; col < 3; ++col) {
      double sum = 0;
      for (int64_t r = 0; r < 4; ++r) {
        sum += x.item_at(r * 3 + col);
        EXPECT_NEAR(outs[1].item_at(r * 3 + col), sum, 1e-5);
      }
      EXPECT_NEAR(outs[0].item_at(col), sum, 1e-5);
    }
  }
  {  // A loop whose condition is computed from data cannot unroll: a clear error naming the node
    B b(13);
    b.input("x", onnx::TensorProto::FLOAT, {"3"});
    b.init("zero", {0.f}, {});
    auto* loop = b.node("Loop", {"", "", "x"}, {"y"}, "while_loop");
    onnx::GraphProto* g = B::attr_graph(loop, "body");
    B::graph_io(g, "i", onnx::TensorProto::INT64, false);
    B::graph_io(g, "c", onnx::TensorProto::BOOL, false);
    B::graph_io(g, "a", onnx::TensorProto::FLOAT, false);
    B::attr_i(B::graph_node(g, "ReduceSum", {"a"}, {"s"}), "keepdims", 0);
    B::graph_node(g, "Greater", {"s", "zero"}, {"c_out"});
    B::graph_io(g, "c_out", onnx::TensorProto::BOOL, true);
    B::graph_io(g, "a", onnx::TensorProto::FLOAT, true);
    b.output("y");
    const std::string e = error_of([&] { io::import_onnx_bytes(b.bytes(), "while"); });
    EXPECT_NE(e.find("while_loop"), std::string::npos) << e;
    EXPECT_NE(e.find("condition depends on data"), std::string::npos) << e;
  }
}

TEST(OnnxImport, SoftmaxOpset11CoercesTo2D) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, -1, 0.5f, 2, 1, 0, 3, 1, -2}, {2, 2, 3});
  for (int64_t opset : {11, 13}) {
    ModelBuilder b(opset);
    b.input("x", onnx::TensorProto::FLOAT, {"2", "2", "3"});
    auto* n = b.node("Softmax", {"x"}, {"y"});
    ModelBuilder::attr_i(n, "axis", 1);
    b.output("y");
    std::unique_ptr<Graph> g = io::import_onnx_bytes(b.bytes(), "sm");
    const Tensor got = run(*g, {x})[0];
    // opset 11: softmax over the flattened dims 1.. (6 values per row); opset 13: over axis 1 only.
    const Tensor want = opset == 11 ? ops::reshape(ops::softmax(ops::reshape(x, {2, 6}), 1), {2, 2, 3}) : ops::softmax(x, 1);
    expect_close(got, want);
  }
}

TEST(OnnxImport, ModelLocalFunctionIsInlined) {
  ModelBuilder b;
  auto* imp = b.m.add_opset_import();
  imp->set_domain("my.fns");
  imp->set_version(1);
  auto* f = b.m.add_functions();
  f->set_name("AddRelu");
  f->set_domain("my.fns");
  f->add_input("a");
  f->add_input("b");
  f->add_output("out");
  auto* fo = f->add_opset_import();
  fo->set_domain("");
  fo->set_version(13);
  auto* n1 = f->add_node();
  n1->set_op_type("Add");
  n1->add_input("a");
  n1->add_input("b");
  n1->add_output("s");
  auto* n2 = f->add_node();
  n2->set_op_type("Relu");
  n2->add_input("s");
  n2->add_output("out");
  b.input("x", onnx::TensorProto::FLOAT, {"4"});
  b.input("y", onnx::TensorProto::FLOAT, {"4"});
  auto* call = b.node("AddRelu", {"x", "y"}, {"z"}, "fused");
  call->set_domain("my.fns");
  b.output("z");
  io::OnnxImportReport rep;
  std::unique_ptr<Graph> g = io::import_onnx_bytes(b.bytes(), "fn", {}, &rep);
  ASSERT_EQ(rep.ops.size(), 1u);
  EXPECT_EQ(rep.ops[0].status, "decomposed");
  const Tensor x = Tensor::from_vector<float>({1, -2, 3, -4}, {4}), y = Tensor::from_vector<float>({-2, 1, 1, 1}, {4});
  expect_close(run(*g, {x, y})[0], ops::relu(ops::add(x, y)));
  EXPECT_EQ(g->outputs()[0]->name, "z");
}

TEST(OnnxImport, SchemaFunctionBodyIsInlined) {
  // MeanVarianceNormalization has no direct mapping: its ONNX function body is inlined (default axes [0,2,3]).
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {"2", "2", "1", "3"});
  b.node("MeanVarianceNormalization", {"x"}, {"y"}, "mvn");
  b.output("y");
  io::OnnxImportReport rep;
  std::unique_ptr<Graph> g = io::import_onnx_bytes(b.bytes(), "mvn", {}, &rep);
  EXPECT_EQ(rep.ops.at(0).status, "decomposed");
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12.5f}, {2, 2, 1, 3});
  const Tensor mean = ops::reduce_mean(x, {0, 2, 3}, true);
  const Tensor d = ops::sub(x, mean);
  const Tensor want = ops::div(d, ops::add(ops::sqrt(ops::reduce_mean(ops::mul(d, d), {0, 2, 3}, true)), 1e-9));
  expect_close(run(*g, {x})[0], want, 1e-4);
}

// A GRU with a run-time sequence_lens input (ONNX's int32), hidden 4, input 3, seq 5, batch 2; W's input size given.
std::string gru_with_lengths(int64_t w_input) {
  ModelBuilder b(17);
  const int64_t H = 4;
  b.input("x", onnx::TensorProto::FLOAT, {"5", "2", "3"});
  b.input("lens", onnx::TensorProto::INT32, {"2"});
  std::vector<float> w(static_cast<size_t>(3 * H * w_input)), r(3 * H * H);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>((i * 7) % 11) - 0.5f;
  for (size_t i = 0; i < r.size(); ++i) r[i] = 0.05f * static_cast<float>((i * 5) % 13) - 0.3f;
  b.init("W", w, {1, 3 * H, w_input});
  b.init("R", r, {1, 3 * H, H});
  auto* n = b.node("GRU", {"x", "W", "R", "", "lens"}, {"Y", "Y_h"}, "my_gru");
  ModelBuilder::attr_i(n, "hidden_size", H);
  b.output("Y");
  return b.bytes();
}

TEST(OnnxImport, RnnBadWeightShapeNamesTheNode) {
  try {
    io::import_onnx_bytes(gru_with_lengths(4), "gru");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shape_mismatch);
    EXPECT_NE(std::string(e.what()).find("my_gru"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("W must be [1, 12, 3]"), std::string::npos) << e.what();
  }
}

TEST(OnnxImport, RnnSequenceLengthBeyondTheSequenceNamesTheNode) {
  std::unique_ptr<Graph> g = io::import_onnx_bytes(gru_with_lengths(3), "gru");
  std::vector<float> xv(5 * 2 * 3);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.3f * static_cast<float>(i % 5) - 0.6f;
  const Tensor x = Tensor::from_vector<float>(xv, {5, 2, 3});
  // Lengths within the sequence run; a row whose steps stop early gets zeros after them.
  const std::vector<Tensor> ok = run(*g, {x, Tensor::from_vector<int32_t>({5, 2}, {2})});
  ASSERT_EQ(ok[0].shape(), (Shape{5, 1, 2, 4}));
  for (int64_t t = 2; t < 5; ++t)
    for (int64_t q = 0; q < 4; ++q) EXPECT_EQ(ok[0].item_at(((t * 1 + 0) * 2 + 1) * 4 + q), 0.0) << t;
  EXPECT_NE(ok[0].item_at(((1 * 1 + 0) * 2 + 1) * 4), 0.0);
  try {
    run(*g, {x, Tensor::from_vector<int32_t>({5, 9}, {2})});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("seq_lens[1] = 9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("my_gru"), std::string::npos) << e.what();
  }
}

// layout=1 (batch first) is layout 0 with X, initial_h/c, Y, Y_h and Y_c transposed: a bidirectional LSTM with every
// optional input (bias, run-time sequence lengths, initial states, peepholes) and clip, both ways, same outputs.
TEST(OnnxImport, RnnLayout1IsLayout0Transposed) {
  const int64_t S = 4, B = 3, I = 3, H = 5, D = 2;
  auto vals = [](size_t n, int mul, int mod, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * mul) % mod) - scale * mod / 2;
    return v;
  };
  auto model = [&](int64_t layout) {
    ModelBuilder b(17);
    const auto sd = [](int64_t v) { return std::to_string(v); };
    b.input("x", onnx::TensorProto::FLOAT,
            layout ? std::vector<std::string>{sd(B), sd(S), sd(I)} : std::vector<std::string>{sd(S), sd(B), sd(I)});
    b.input("lens", onnx::TensorProto::INT32, {sd(B)});
    b.input("h0", onnx::TensorProto::FLOAT,
            layout ? std::vector<std::string>{sd(B), sd(D), sd(H)} : std::vector<std::string>{sd(D), sd(B), sd(H)});
    b.input("c0", onnx::TensorProto::FLOAT,
            layout ? std::vector<std::string>{sd(B), sd(D), sd(H)} : std::vector<std::string>{sd(D), sd(B), sd(H)});
    b.init("W", vals(static_cast<size_t>(D * 4 * H * I), 7, 11, 0.08f), {D, 4 * H, I});
    b.init("R", vals(static_cast<size_t>(D * 4 * H * H), 5, 13, 0.05f), {D, 4 * H, H});
    b.init("B", vals(static_cast<size_t>(D * 8 * H), 3, 7, 0.04f), {D, 8 * H});
    b.init("P", vals(static_cast<size_t>(D * 3 * H), 2, 9, 0.06f), {D, 3 * H});
    auto* n = b.node("LSTM", {"x", "W", "R", "B", "lens", "h0", "c0", "P"}, {"Y", "Y_h", "Y_c"}, "lstm");
    ModelBuilder::attr_i(n, "hidden_size", H);
    ModelBuilder::attr_i(n, "layout", layout);
    auto* dir = n->add_attribute();
    dir->set_name("direction");
    dir->set_type(onnx::AttributeProto::STRING);
    dir->set_s("bidirectional");
    auto* clip = n->add_attribute();
    clip->set_name("clip");
    clip->set_type(onnx::AttributeProto::FLOAT);
    clip->set_f(1.5f);
    b.output("Y");
    b.output("Y_h");
    b.output("Y_c");
    return io::import_onnx_bytes(b.bytes(), "lstm");
  };
  const Tensor x = Tensor::from_vector<float>(vals(static_cast<size_t>(S * B * I), 3, 10, 0.2f), {S, B, I});
  const Tensor h0 = Tensor::from_vector<float>(vals(static_cast<size_t>(D * B * H), 7, 9, 0.1f), {D, B, H});
  const Tensor c0 = Tensor::from_vector<float>(vals(static_cast<size_t>(D * B * H), 4, 9, 0.1f), {D, B, H});
  const Tensor lens = Tensor::from_vector<int32_t>({4, 1, 3}, {B});
  const std::vector<Tensor> a = run(*model(0), {x, lens, h0, c0});
  const std::vector<Tensor> b = run(
      *model(1), {ops::transpose(x, {1, 0, 2}), lens, ops::transpose(h0, {1, 0, 2}), ops::transpose(c0, {1, 0, 2})});
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].shape(), (Shape{B, S, D, H}));
  expect_close(ops::transpose(b[0], {1, 2, 0, 3}).contiguous(), a[0], 0);
  expect_close(ops::transpose(b[1], {1, 0, 2}).contiguous(), a[1], 0);
  expect_close(ops::transpose(b[2], {1, 0, 2}).contiguous(), a[2], 0);
  // Row 1 runs one step: zeros after it in both directions.
  for (int64_t t = 1; t < S; ++t)
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(a[0].item_at(((t * D + d) * B + 1) * H), 0.0);
}

TEST(OnnxImport, LstmMatchesStepByStepReference) {
  // One forward LSTM layer (gate order i, o, f, c), seq 3, batch 2, input 2, hidden 2.
  ModelBuilder b(14);
  const int64_t S = 3, B = 2, I = 2, H = 2;
  b.input("x", onnx::TensorProto::FLOAT, {"3", "2", "2"});
  std::vector<float> w(4 * H * I), r(4 * H * H), bias(8 * H);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>((i * 7) % 11) - 0.5f;
  for (size_t i = 0; i < r.size(); ++i) r[i] = 0.05f * static_cast<float>((i * 5) % 13) - 0.3f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.02f * static_cast<float>(i) - 0.1f;
  b.init("W", w, {1, 4 * H, I});
  b.init("R", r, {1, 4 * H, H});
  b.init("B", bias, {1, 8 * H});
  auto* n = b.node("LSTM", {"x", "W", "R", "B"}, {"Y", "Y_h", "Y_c"}, "lstm");
  ModelBuilder::attr_i(n, "hidden_size", H);
  b.output("Y");
  b.output("Y_h");
  b.output("Y_c");
  std::unique_ptr<Graph> g = io::import_onnx_bytes(b.bytes(), "lstm");
  std::vector<float> xv(static_cast<size_t>(S * B * I));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.3f * static_cast<float>(i % 5) - 0.6f;
  const Tensor x = Tensor::from_vector<float>(xv, {S, B, I});
  const std::vector<Tensor> outs = run(*g, {x});
  // Reference in plain loops.
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  std::vector<double> h(B * H, 0), c(B * H, 0), ys;
  for (int64_t t = 0; t < S; ++t) {
    std::vector<double> nh(B * H), nc(B * H);
    for (int64_t bi = 0; bi < B; ++bi) {
      std::vector<double> gates(4 * H);
      for (int64_t gi = 0; gi < 4 * H; ++gi) {
        double acc = bias[gi] + bias[4 * H + gi];
        for (int64_t k = 0; k < I; ++k) acc += xv[(t * B + bi) * I + k] * w[gi * I + k];
        for (int64_t k = 0; k < H; ++k) acc += h[bi * H + k] * r[gi * H + k];
        gates[gi] = acc;
      }
      for (int64_t j = 0; j < H; ++j) {
        const double ig = sig(gates[j]), og = sig(gates[H + j]), fg = sig(gates[2 * H + j]), cg = std::tanh(gates[3 * H + j]);
        nc[bi * H + j] = fg * c[bi * H + j] + ig * cg;
        nh[bi * H + j] = og * std::tanh(nc[bi * H + j]);
      }
    }
    h = nh;
    c = nc;
    ys.insert(ys.end(), h.begin(), h.end());
  }
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0].shape(), (Shape{S, 1, B, H}));
  for (int64_t i = 0; i < S * B * H; ++i) EXPECT_NEAR(outs[0].item_at(i), ys[i], 1e-5);
  for (int64_t i = 0; i < B * H; ++i) {
    EXPECT_NEAR(outs[1].item_at(i), h[i], 1e-5);
    EXPECT_NEAR(outs[2].item_at(i), c[i], 1e-5);
  }
}

TEST(OnnxImport, LoadModelPicksOnnxByContent) {
  const auto path = testing::temp_dir("onnx_import") / "model.bin";
  {
    std::ofstream f(path, std::ios::binary);
    f << linear_relu_model().bytes();
  }
  std::unique_ptr<Graph> g = io::load_model(path.string());
  EXPECT_EQ(g->outputs()[0]->name, "y:0");
}

}  // namespace
}  // namespace spore
