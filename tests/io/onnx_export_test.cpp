// ONNX export: the ModelProto it writes (names, types, initializers, opset), errors that name the node, and
// export -> import_onnx -> run giving the same outputs as the spore graph for graphs covering every mappable op.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "io/onnx/onnx.h"
#include "ops/graph_ops.h"
#include "runtime/plan.h"
#include "test_util.h"

namespace spore {
namespace {

using Ints = std::vector<int64_t>;

Value* node(Graph& g, OpId op, std::vector<Value*> ins, Attrs attrs = {}, std::string name = "") {
  return build_node(g, op, std::move(ins), attrs, std::move(name))->output(0);
}

// Random non-zero values in [lo, hi] (integers: [0, hi)).
Tensor random_tensor(const TensorType& t, std::mt19937& rng, double lo, double hi) {
  const Shape s = t.shape();
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& x : v) {
    if (t.dtype == DType::boolean) {
      x = u(rng) > (lo + hi) / 2;
    } else if (!is_floating(t.dtype)) {
      x = std::floor(std::uniform_real_distribution<double>(0, hi)(rng));
    } else {
      do x = u(rng); while (std::abs(x) < 0.05);
    }
  }
  return Tensor::from_doubles(v, s, t.dtype);
}

Tensor weight(Shape s, uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 rng(seed);
  return random_tensor(TensorType::of(DType::f32, s), rng, lo, hi);
}

std::vector<Tensor> run_graph(const Graph& g, const std::vector<Tensor>& inputs) {
  auto c = g.clone();
  std::vector<Shape> shapes;
  for (const Tensor& t : inputs) shapes.push_back(t.shape());
  specialize_inputs(*c, shapes);
  Plan p = compile_plan(std::move(c), {});
  return p.run(inputs);
}

void expect_close(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  // Composite mappings (gelu, rsqrt, rms_norm, group_norm, python mod) may round differently from the fused
  // spore kernels: f32 tolerance; integer and bool results must be exact.
  const double tol = is_floating(a.dtype()) ? (a.dtype() == DType::f32 || a.dtype() == DType::f64 ? 2e-5 : 1e-2) : 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    ASSERT_LE(std::abs(x[i] - y[i]), tol * (1 + std::abs(x[i]))) << what << " element " << i << ": " << x[i]
                                                                 << " vs " << y[i];
  }
}

struct Case {
  std::string name;
  std::function<std::unique_ptr<Graph>()> make;
  double lo = -2, hi = 2;  // input value range
};

std::unique_ptr<Graph> unary_graph() {
  auto g = std::make_unique<Graph>("unary");
  Value* x = g->add_input(TensorType(DType::f32, {2, 5}), "x");
  std::vector<Value*> outs;
  for (OpId op : {"neg"_op,     "abs"_op,   "exp"_op,  "log"_op,   "sqrt"_op, "rsqrt"_op,   "reciprocal"_op, "tanh"_op,
                  "sigmoid"_op, "relu"_op,  "silu"_op, "erf"_op,   "sin"_op,  "cos"_op,     "asin"_op,       "acos"_op,
                  "atan"_op,    "floor"_op, "ceil"_op, "round"_op, "sign"_op, "identity"_op})
    outs.push_back(node(*g, op, {x}));
  outs.push_back(node(*g, "leaky_relu"_op, {x}, {{"alpha", 0.2}}));
  outs.push_back(node(*g, "gelu"_op, {x}));
  outs.push_back(node(*g, "gelu"_op, {x}, {{"approximate", std::string("tanh")}}));
  outs.push_back(node(*g, "clip"_op, {x}, {{"min", 0.7}, {"max", 1.5}}));
  outs.push_back(node(*g, "cast"_op, {x}, {{"dtype", DType::i32}}));
  outs.push_back(node(*g, "cast"_op, {x}, {{"dtype", DType::f16}}));
  g->set_outputs(outs);
  return g;
}

std::unique_ptr<Graph> binary_graph() {
  auto g = std::make_unique<Graph>("binary");
  Value* a = g->add_input(TensorType(DType::f32, {2, 3, 4}), "a");
  Value* b = g->add_input(TensorType(DType::f32, {3, 1}), "b");
  std::vector<Value*> outs;
  for (OpId op : {"add"_op, "sub"_op, "mul"_op, "div"_op, "maximum"_op, "minimum"_op, "eq"_op, "ne"_op,
                  "lt"_op, "le"_op, "gt"_op, "ge"_op})
    outs.push_back(node(*g, op, {a, b}));
  outs.push_back(node(*g, "pow"_op, {node(*g, "abs"_op, {a}), b}));
  outs.push_back(node(*g, "mod"_op, {a, b}));
  outs.push_back(node(*g, "mod"_op, {a, b}, {{"fmod", true}}));
  Value* lt = node(*g, "lt"_op, {a, b});
  Value* gt0 = node(*g, "gt"_op, {a, g->add_constant(Tensor::scalar(0.0, DType::f32))});
  outs.push_back(node(*g, "logical_and"_op, {lt, gt0}));
  outs.push_back(node(*g, "logical_or"_op, {lt, gt0}));
  outs.push_back(node(*g, "logical_not"_op, {lt}));
  outs.push_back(node(*g, "where"_op, {lt, a, b}));
  Value* ai = node(*g, "cast"_op, {node(*g, "mul"_op, {a, g->add_constant(Tensor::scalar(5.0, DType::f32))})},
                   {{"dtype", DType::i64}});
  Value* bi = g->add_constant(Tensor::from_vector<int64_t>({3, -2, 4}, {3, 1}), "bi");
  outs.push_back(node(*g, "mod"_op, {ai, bi}));
  outs.push_back(node(*g, "mod"_op, {ai, bi}, {{"fmod", true}}));
  outs.push_back(node(*g, "clip"_op, {ai}, {{"min", -3.5}, {"max", 4.0}}));
  g->set_outputs(outs);
  return g;
}

std::unique_ptr<Graph> reduce_graph() {
  auto g = std::make_unique<Graph>("reduce");
  Value* x = g->add_input(TensorType(DType::f32, {2, 3, 4}), "x");
  std::vector<Value*> outs;
  for (OpId op : {"reduce_sum"_op, "reduce_mean"_op, "reduce_max"_op, "reduce_min"_op, "reduce_prod"_op}) {
    outs.push_back(node(*g, op, {x}, {{"axes", Ints{1}}, {"keepdims", true}}));
    outs.push_back(node(*g, op, {x}, {{"axes", Ints{0, -1}}}));
    outs.push_back(node(*g, op, {x}));
  }
  outs.push_back(node(*g, "argmax"_op, {x}, {{"axis", int64_t{2}}}));
  outs.push_back(node(*g, "argmin"_op, {x}, {{"axis", int64_t{1}}, {"keepdims", true}}));
  outs.push_back(node(*g, "softmax"_op, {x}, {{"axis", int64_t{1}}}));
  outs.push_back(node(*g, "log_softmax"_op, {x}));
  outs.push_back(node(*g, "cumsum"_op, {x}, {{"axis", int64_t{2}}}));
  outs.push_back(node(*g, "cumsum"_op, {x}, {{"axis", int64_t{1}}, {"exclusive", true}, {"reverse", true}}));
  Node* tk = build_node(*g, "topk"_op, {x}, {{"k", int64_t{2}}, {"axis", int64_t{2}}});
  outs.push_back(tk->output(0));
  outs.push_back(tk->output(1));
  Node* tk2 = build_node(*g, "topk"_op, {x}, {{"k", int64_t{1}}, {"axis", int64_t{1}}, {"largest", false}});
  outs.push_back(tk2->output(0));
  g->set_outputs(outs);
  return g;
}

std::unique_ptr<Graph> linalg_graph() {
  auto g = std::make_unique<Graph>("linalg");
  Value* x = g->add_input(TensorType(DType::f32, {Dim::symbol("batch"), 6}), "x");
  Value* x3 = g->add_input(TensorType(DType::f32, {2, 3, 6}), "x3");
  Value* w = g->add_constant(weight({4, 6}, 1), "fc.weight");
  Value* bias = g->add_constant(weight({4}, 2), "fc.bias");
  std::vector<Value*> outs;
  outs.push_back(node(*g, "linear"_op, {x, w, bias}, {}, "fc"));
  outs.push_back(node(*g, "linear"_op, {x3, w, bias}));
  outs.push_back(node(*g, "linear"_op, {x3, w}));
  outs.push_back(node(*g, "matmul"_op, {x3, w}, {{"transpose_b", true}}));
  outs.push_back(node(*g, "matmul"_op, {x3, x3}, {{"transpose_a", true}}));
  outs.push_back(node(*g, "matmul"_op, {x, g->add_constant(weight({6}, 3))}));
  g->set_outputs(outs);
  return g;
}

std::unique_ptr<Graph> conv_graph() {
  auto g = std::make_unique<Graph>("conv");
  Value* x = g->add_input(TensorType(DType::f32, {Dim::symbol("n"), 4, 9, 8}), "x");
  Value* w = g->add_constant(weight({6, 2, 3, 3}, 4), "conv.weight");
  Value* b = g->add_constant(weight({6}, 5), "conv.bias");
  std::vector<Value*> outs;
  Value* c = node(*g, "conv2d"_op, {x, w, b},
                  {{"stride", Ints{2, 1}}, {"padding", Ints{1, 0, 2, 1}}, {"dilation", Ints{1, 2}}, {"groups", int64_t{2}}},
                  "conv1");
  outs.push_back(c);
  outs.push_back(node(*g, "conv2d"_op, {x, g->add_constant(weight({3, 4, 2, 3}, 6))}, {{"pad_mode", std::string("same")}}));
  outs.push_back(node(*g, "conv2d"_op, {x, g->add_constant(weight({3, 4, 3, 3}, 7))}, {{"pad_mode", std::string("valid")}}));
  outs.push_back(node(*g, "conv_transpose2d"_op, {x, g->add_constant(weight({4, 3, 3, 2}, 8)), g->add_constant(weight({3}, 9))},
                      {{"stride", Ints{2, 2}}, {"padding", Ints{1, 0, 0, 1}}, {"output_padding", Ints{1, 0}}}));
  outs.push_back(node(*g, "max_pool2d"_op, {x}, {{"kernel", Ints{3, 2}}, {"padding", Ints{1, 1, 1, 0}}, {"ceil_mode", true}}));
  outs.push_back(node(*g, "max_pool2d"_op, {x}, {{"kernel", Ints{2, 2}}, {"stride", Ints{1, 2}}, {"dilation", Ints{2, 1}}}));
  outs.push_back(node(*g, "avg_pool2d"_op, {x}, {{"kernel", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1, 1, 1}}}));
  outs.push_back(node(*g, "avg_pool2d"_op, {x},
                      {{"kernel", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"padding", Ints{1, 1, 1, 1}}, {"count_include_pad", true}}));
  outs.push_back(node(*g, "global_avg_pool"_op, {c}));
  outs.push_back(node(*g, "batch_norm"_op, {c, g->add_constant(weight({6}, 10, 0.5, 1.5)), g->add_constant(weight({6}, 11)),
                                             g->add_constant(weight({6}, 12)), g->add_constant(weight({6}, 13, 0.5, 2))},
                      {{"epsilon", 1e-3}}, "bn"));
  g->set_outputs(outs);
  return g;
}

// The 3-D ops: Conv/ConvTranspose/MaxPool/AveragePool with three spatial dims, every attribute they export.
std::unique_ptr<Graph> conv3d_graph() {
  auto g = std::make_unique<Graph>("conv3d");
  Value* x = g->add_input(TensorType(DType::f32, {Dim::symbol("n"), 4, 5, 7, 6}), "x");
  std::vector<Value*> outs;
  outs.push_back(node(*g, "conv3d"_op,
                      {x, g->add_constant(weight({6, 2, 3, 3, 2}, 30)), g->add_constant(weight({6}, 31))},
                      {{"stride", Ints{1, 2, 1}},
                       {"padding", Ints{1, 1, 0, 0, 2, 1}},
                       {"dilation", Ints{1, 1, 2}},
                       {"groups", int64_t{2}}},
                      "conv3d1"));
  outs.push_back(node(*g, "conv3d"_op, {x, g->add_constant(weight({3, 4, 2, 3, 3}, 32))},
                      {{"stride", Ints{2, 2, 1}}, {"pad_mode", std::string("same")}}));
  outs.push_back(
      node(*g, "conv3d"_op, {x, g->add_constant(weight({3, 4, 3, 3, 3}, 33))}, {{"pad_mode", std::string("valid")}}));
  outs.push_back(node(
      *g, "conv_transpose3d"_op, {x, g->add_constant(weight({4, 3, 2, 3, 2}, 34)), g->add_constant(weight({3}, 35))},
      {{"stride", Ints{2, 2, 1}}, {"padding", Ints{1, 0, 0, 0, 1, 0}}, {"output_padding", Ints{1, 0, 0}}}));
  outs.push_back(node(*g, "max_pool3d"_op, {x},
                      {{"kernel", Ints{2, 3, 2}},
                       {"stride", Ints{2, 2, 2}},
                       {"padding", Ints{0, 1, 1, 0, 1, 0}},
                       {"dilation", Ints{1, 1, 2}},
                       {"ceil_mode", true}}));
  outs.push_back(node(*g, "avg_pool3d"_op, {x},
                      {{"kernel", Ints{3, 3, 3}},
                       {"stride", Ints{2, 2, 2}},
                       {"padding", Ints{1, 1, 1, 1, 1, 1}},
                       {"count_include_pad", true}}));
  outs.push_back(node(*g, "avg_pool3d"_op, {x}, {{"kernel", Ints{2, 2, 2}}, {"pad_mode", std::string("same")}}));
  outs.push_back(node(*g, "global_avg_pool"_op, {x}));
  g->set_outputs(outs);
  return g;
}

std::unique_ptr<Graph> norm_graph() {
  auto g = std::make_unique<Graph>("norm");
  Value* x = g->add_input(TensorType(DType::f32, {Dim::symbol("batch"), 4, 6}), "x");
  Value* x4 = g->add_input(TensorType(DType::f32, {2, 6, 3, 2}), "x4");
  std::vector<Value*> outs;
  outs.push_back(node(*g, "layer_norm"_op, {x, g->add_constant(weight({6}, 20)), g->add_constant(weight({6}, 21))}));
  outs.push_back(node(*g, "layer_norm"_op, {x}, {{"axis", int64_t{1}}, {"epsilon", 1e-3}}));
  outs.push_back(node(*g, "rms_norm"_op, {x, g->add_constant(weight({6}, 22))}));
  outs.push_back(node(*g, "rms_norm"_op, {x}, {{"axis", int64_t{-2}}}));
  outs.push_back(node(*g, "group_norm"_op, {x4, g->add_constant(weight({6}, 23)), g->add_constant(weight({6}, 24))},
                      {{"num_groups", int64_t{3}}}));
  outs.push_back(node(*g, "group_norm"_op, {x4}, {{"num_groups", int64_t{2}}, {"epsilon", 1e-2}}));
  outs.push_back(node(*g, "dropout"_op, {x}, {{"p", 0.5}, {"training", false}}));
  g->set_outputs(outs);
  return g;
}

std::unique_ptr<Graph> shape_graph() {
  auto g = std::make_unique<Graph>("shape");
  Value* x = g->add_input(TensorType(DType::f32, {2, 3, 4}), "x");
  Value* idx = g->add_constant(Tensor::from_vector<int64_t>({2, 0, -1, 1}, {2, 2}), "idx");
  std::vector<Value*> outs;
  outs.push_back(node(*g, "reshape"_op, {x}, {{"shape", Ints{4, -1}}}));
  outs.push_back(node(*g, "transpose"_op, {x}, {{"perm", Ints{2, 0, 1}}}));
  outs.push_back(node(*g, "transpose"_op, {x}));
  outs.push_back(node(*g, "concat"_op, {x, x}, {{"axis", int64_t{-1}}}));
  Node* sp = build_node(*g, "split"_op, {x}, {{"sizes", Ints{1, 3}}, {"axis", int64_t{2}}});
  outs.push_back(sp->output(0));
  outs.push_back(sp->output(1));
  outs.push_back(node(*g, "slice"_op, {x}, {{"starts", Ints{1, -1}}, {"ends", Ints{3, -5}}, {"axes", Ints{1, 2}}, {"steps", Ints{1, -2}}}));
  outs.push_back(node(*g, "slice"_op, {x}, {{"starts", Ints{0, 1}}, {"ends", Ints{1, 100}}}));
  outs.push_back(node(*g, "gather"_op, {x, idx}, {{"axis", int64_t{2}}}));
  Value* ge_idx = g->add_constant(Tensor::from_vector<int64_t>({0, 2, 1, 1, 0, 2}, {2, 1, 3}));
  outs.push_back(node(*g, "gather_elements"_op, {x, ge_idx}, {{"axis", int64_t{1}}}));
  Value* upd = g->add_constant(weight({2, 1, 3}, 30));
  outs.push_back(node(*g, "scatter"_op, {x, ge_idx, upd}, {{"axis", int64_t{1}}}));
  outs.push_back(node(*g, "scatter"_op, {x, ge_idx, upd}, {{"axis", int64_t{1}}, {"reduction", std::string("add")}}));
  outs.push_back(node(*g, "index_select"_op, {x, g->add_constant(Tensor::from_vector<int64_t>({1, 1, 0}, {3}))},
                      {{"axis", int64_t{1}}}));
  outs.push_back(node(*g, "resample"_op,
                      {x, g->add_constant(Tensor::from_vector<int64_t>({0, 1, 1, 3, 2, 2, 3, 0, 1, 1}, {5, 2})),
                       g->add_constant(weight({5, 2}, 32))},
                      {{"axis", int64_t{-1}}}));
  outs.push_back(node(*g, "resample"_op,
                      {x, g->add_constant(Tensor::from_vector<int64_t>({0, 1, 2, 2, 1, 0}, {2, 3})),
                       g->add_constant(weight({2, 3}, 33))},
                      {{"axis", int64_t{1}}}));
  outs.push_back(node(*g, "embedding"_op, {g->add_constant(weight({5, 3}, 31), "emb.table"), idx}));
  outs.push_back(node(*g, "pad"_op, {x}, {{"pads", Ints{0, 1, 2, 1, 0, -1}}, {"value", 1.5}}));
  outs.push_back(node(*g, "pad"_op, {x}, {{"pads", Ints{0, 1, 2, 0, 2, 1}}, {"mode", std::string("reflect")}}));
  outs.push_back(node(*g, "pad"_op, {x}, {{"pads", Ints{0, 2, 0, 0, 1, 3}}, {"mode", std::string("edge")}}));
  Value* r = node(*g, "reduce_sum"_op, {x}, {{"axes", Ints{1}}, {"keepdims", true}});
  outs.push_back(node(*g, "expand"_op, {r}, {{"shape", Ints{3, 2, 5, 4}}}));
  outs.push_back(node(*g, "squeeze"_op, {r}));
  outs.push_back(node(*g, "squeeze"_op, {r}, {{"axes", Ints{-2}}}));
  outs.push_back(node(*g, "unsqueeze"_op, {x}, {{"axes", Ints{0, -1}}}));
  outs.push_back(node(*g, "flatten"_op, {x}, {{"axis", int64_t{2}}}));
  outs.push_back(node(*g, "tile"_op, {x}, {{"repeats", Ints{1, 2, 3}}}));
  outs.push_back(node(*g, "one_hot"_op, {idx}, {{"depth", int64_t{4}}, {"axis", int64_t{0}}, {"on_value", 2.0}, {"off_value", -1.0}}));
  outs.push_back(node(*g, "arange"_op, {}, {{"start", 1.0}, {"stop", 8.5}, {"step", 2.0}, {"dtype", DType::i64}}));
  outs.push_back(node(*g, "arange"_op, {}, {{"start", 0.5}, {"stop", -1.0}, {"step", -0.3}}));
  outs.push_back(node(*g, "full"_op, {}, {{"shape", Ints{2, 3}}, {"value", 7.0}, {"dtype", DType::i32}}));
  outs.push_back(x);  // an input as an output, and one output twice
  outs.push_back(outs[0]);
  g->set_outputs(outs);
  return g;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"unary", unary_graph, 0.3, 2.5},  // positive: log, sqrt, rsqrt stay real
      {"binary", binary_graph},         {"reduce", reduce_graph}, {"linalg", linalg_graph}, {"conv", conv_graph},
      {"conv3d", conv3d_graph},         {"norm", norm_graph},     {"shape", shape_graph},
  };
  return c;
}

class OnnxExportRoundTrip : public ::testing::TestWithParam<size_t> {};

TEST_P(OnnxExportRoundTrip, ImportRunsTheSame) {
  const Case& c = cases()[GetParam()];
  auto g = c.make();
  verify_graph(*g);
  const std::string bytes = io::export_onnx_bytes(*g);
  // tests/integration/export_test.py --checker sets this and runs onnx.checker (full_check) on every file.
  if (const char* dump = std::getenv("SPORE_ONNX_EXPORT_DUMP_DIR"))
    std::ofstream(std::filesystem::path(dump) / (c.name + ".onnx"), std::ios::binary) << bytes;
  auto back = io::import_onnx_bytes(bytes, c.name + ".onnx");
  ASSERT_EQ(back->inputs().size(), g->inputs().size());
  ASSERT_EQ(back->outputs().size(), g->outputs().size());
  for (size_t i = 0; i < g->inputs().size(); ++i) EXPECT_EQ(back->inputs()[i]->name, g->inputs()[i]->name);
  std::mt19937 rng(7);
  std::vector<Tensor> inputs;
  for (const Value* v : g->inputs()) {
    TensorType t = v->type;
    for (Dim& d : t.dims)
      if (!d.is_static()) d = Dim(3);
    inputs.push_back(random_tensor(t, rng, c.lo, c.hi));
  }
  const std::vector<Tensor> want = run_graph(*g, inputs), got = run_graph(*back, inputs);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const Node* p = g->outputs()[i]->producer;
    expect_close(want[i], got[i], fmt::format("{} output {} ({})", c.name, i, p ? p->label() : "?"));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OnnxExportRoundTrip, ::testing::Range<size_t>(0, 8),
                         [](const auto& info) { return cases()[info.param].name; });

onnx::ModelProto parse(const std::string& bytes) {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

TEST(OnnxExport, ModelProtoKeepsNamesTypesAndWeights) {
  auto g = conv_graph();
  const onnx::ModelProto m = parse(io::export_onnx_bytes(*g, {.opset = 17, .producer = "spore-test"}));
  EXPECT_EQ(m.ir_version(), 8);
  EXPECT_EQ(m.producer_name(), "spore-test");
  ASSERT_EQ(m.opset_import_size(), 1);
  EXPECT_EQ(m.opset_import(0).domain(), "");
  EXPECT_EQ(m.opset_import(0).version(), 17);
  const onnx::GraphProto& gp = m.graph();
  ASSERT_EQ(gp.input_size(), 1);
  EXPECT_EQ(gp.input(0).name(), "x");
  const auto& dims = gp.input(0).type().tensor_type().shape().dim();
  ASSERT_EQ(dims.size(), 4);
  EXPECT_EQ(dims[0].dim_param(), "n");
  EXPECT_EQ(dims[1].dim_value(), 4);
  EXPECT_EQ(gp.input(0).type().tensor_type().elem_type(), onnx::TensorProto::FLOAT);
  // Weights are initializers named after their values, with the exact bytes.
  const Value* w = g->find_value("conv.weight");
  ASSERT_NE(w, nullptr);
  bool found = false;
  for (const auto& t : gp.initializer()) {
    if (t.name() != "conv.weight") continue;
    found = true;
    EXPECT_EQ(std::vector<int64_t>(t.dims().begin(), t.dims().end()), (Ints{6, 2, 3, 3}));
    const Tensor& payload = w->producer->payload;
    EXPECT_EQ(t.raw_data(), std::string(static_cast<const char*>(payload.raw_data()), payload.nbytes()));
  }
  EXPECT_TRUE(found);
  // Node names come from !name; the conv's attributes are translated exactly.
  const onnx::NodeProto* conv = nullptr;
  for (const auto& n : gp.node())
    if (n.name() == "conv1") conv = &n;
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->op_type(), "Conv");
  EXPECT_EQ(conv->output(0), g->outputs()[0]->name);
  std::map<std::string, Ints> ints;
  for (const auto& a : conv->attribute())
    if (a.type() == onnx::AttributeProto::INTS) ints[a.name()] = Ints(a.ints().begin(), a.ints().end());
    else if (a.type() == onnx::AttributeProto::INT) ints[a.name()] = {a.i()};
  EXPECT_EQ(ints["pads"], (Ints{1, 0, 2, 1}));
  EXPECT_EQ(ints["strides"], (Ints{2, 1}));
  EXPECT_EQ(ints["dilations"], (Ints{1, 2}));
  EXPECT_EQ(ints["group"], (Ints{2}));
  EXPECT_EQ(ints["kernel_shape"], (Ints{3, 3}));
  // Graph outputs keep spore names and types (symbolic dims stay symbolic).
  ASSERT_EQ(gp.output_size(), static_cast<int>(g->outputs().size()));
  EXPECT_EQ(gp.output(0).name(), g->outputs()[0]->name);
  EXPECT_FALSE(gp.output(0).type().tensor_type().shape().dim(0).dim_param().empty());
}

TEST(OnnxExport, RepeatedAndInputOutputsGetUniqueNames) {
  auto g = shape_graph();
  const onnx::ModelProto m = parse(io::export_onnx_bytes(*g));
  std::set<std::string> names;
  for (const auto& o : m.graph().output()) EXPECT_TRUE(names.insert(o.name()).second) << o.name();
  std::set<std::string> produced;
  for (const auto& n : m.graph().node())
    for (const auto& o : n.output()) EXPECT_TRUE(produced.insert(o).second) << "produced twice: " << o;
  for (const auto& o : m.graph().output()) EXPECT_TRUE(produced.count(o.name())) << o.name();
}

TEST(OnnxExport, ReductionAxesFollowTheOpset) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input(TensorType(DType::f32, {2, 3}), "x");
  g->set_outputs({node(*g, "reduce_mean"_op, {x}, {{"axes", Ints{1}}}), node(*g, "reduce_sum"_op, {x}, {{"axes", Ints{1}}})});
  for (int64_t opset : {17, 18}) {
    const onnx::ModelProto m = parse(io::export_onnx_bytes(*g, {.opset = opset}));
    for (const auto& n : m.graph().node()) {
      const bool axes_input = n.input_size() == 2;
      const bool axes_attr = std::any_of(n.attribute().begin(), n.attribute().end(),
                                         [](const auto& a) { return a.name() == "axes"; });
      if (n.op_type() == "ReduceSum" || opset >= 18)
        EXPECT_TRUE(axes_input && !axes_attr) << n.op_type() << " opset " << opset;
      else
        EXPECT_TRUE(!axes_input && axes_attr) << n.op_type() << " opset " << opset;
    }
  }
}

TEST(OnnxExport, UnmappableNodesFailNamingTheNode) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input(TensorType(DType::f32, {1, 2, 5, 5}), "x");
  Value* dy = g->add_input(TensorType(DType::f32, {1, 3, 3, 3}), "dy");
  g->set_outputs({node(*g, "conv2d_weight_grad"_op, {x, dy}, {{"kernel", Ints{3, 3}}}, "wgrad")});
  try {
    io::export_onnx_bytes(*g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("wgrad"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("conv2d_weight_grad"), std::string::npos) << e.what();
  }
  auto d = std::make_unique<Graph>();
  Value* x2 = d->add_input(TensorType(DType::f32, {4}), "x");
  d->set_outputs({node(*d, "dropout"_op, {x2}, {{"p", 0.5}, {"training", true}}, "drop1")});
  try {
    io::export_onnx_bytes(*d);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("drop1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("eval mode"), std::string::npos) << e.what();
  }
  EXPECT_THROW(io::export_onnx_bytes(*d, {.opset = 12}), Error);
}

TEST(OnnxExport, WritesTheFileAtomically) {
  auto g = unary_graph();
  const std::string path = (testing::temp_dir("onnx_export") / "unary.onnx").string();
  io::export_onnx(*g, path);
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, io::export_onnx_bytes(*g));
  EXPECT_THROW(io::export_onnx(*g, "/nonexistent-dir/x.onnx"), Error);
}

}  // namespace
}  // namespace spore
