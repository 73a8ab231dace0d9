// Custom operators: shared-library plugins (tests/plugins, loaded through runtime/plugin.h) in eager and graph
// mode, gradients, .spore save/load, ONNX import, the loader's errors; and the in-process spore::CustomOp API.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <random>

#include "autodiff/autodiff.h"
#include "base/thread_pool.h"
#include "backend/null/null_backend.h"
#include "io/model_file.h"
#include "io/onnx/onnx.h"
#include "io/spore_file.h"
#include "spore/custom_op.h"
#include "spore/spore.h"
#include "test_util.h"

#ifndef SPORE_TEST_PLUGIN
#error "tests/CMakeLists.txt passes the test plugins' paths"
#endif

namespace spore {
namespace {

using testing::error_of;

const PluginInfo& good_plugin() { return load_custom_ops(SPORE_TEST_PLUGIN); }

OpId op(const char* name) {
  good_plugin();
  const auto id = op_from_name(name);
  EXPECT_TRUE(id.has_value()) << name;
  return *id;
}

Tensor call1(OpId id, std::vector<Tensor> ins, const Attrs& attrs = {}) { return ops::call1(id, ins, attrs); }

Tensor random_tensor(Shape shape, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) {
    x = u(rng);
    if (x == 0.0) x = 0.5;
  }
  return Tensor::from_doubles(v, std::move(shape), dtype);
}

Tensor scale2x(const Tensor& x, double offset) { return call1(op("scale2x"), {x}, Attrs{{"offset", offset}}); }
Tensor rowsum(const Tensor& x, int64_t scale) {
  return call1(op("rowsum"), {x}, Attrs{{"scale", scale}});
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), a.nbytes()), 0);
}

TEST(Plugin, LoadsAndDescribesItself) {
  const PluginInfo& info = good_plugin();
  EXPECT_EQ(info.name, "testplugin");
  EXPECT_EQ(info.version, "1.0");
  EXPECT_EQ(info.domain, "test.domain");
  EXPECT_EQ(info.ops, (std::vector<std::string>{"scale2x", "scale2x_grad", "rowsum"}));
  const OpDef* d = op_registry().find(std::string_view("scale2x"));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->plugin, "testplugin");
  EXPECT_EQ(d->onnx_domain, "test.domain");
  EXPECT_TRUE(d->traits.has(Trait::elementwise));
  ASSERT_NE(d->find_attr("offset"), nullptr);
  EXPECT_EQ(d->find_attr("offset")->kind, AttrKind::f64);
  const KernelInfo* k = kernel_registry().find(Backend::cpu, d->id, DType::f64);
  ASSERT_NE(k, nullptr);
  EXPECT_STREQ(k->impl, "scalar");
  EXPECT_EQ(kernel_registry().find(Backend::cpu, d->id, DType::f16), nullptr);
}

TEST(Plugin, LoadingTheSameLibraryAgainIsANoOp) {
  const PluginInfo& first = good_plugin();
  const size_t plugins = loaded_plugins().size();
  const int ops_before = num_ops();
  // Another path to the same file: the loader maps it once, and so do we.
  std::string other = SPORE_TEST_PLUGIN;
  other.insert(other.rfind('/'), "/.");
  const PluginInfo& again = load_custom_ops(other);
  EXPECT_EQ(&again, &first);
  EXPECT_EQ(&load_custom_ops(SPORE_TEST_PLUGIN), &first);
  EXPECT_EQ(loaded_plugins().size(), plugins);
  EXPECT_EQ(num_ops(), ops_before);
}

TEST(Plugin, EagerMatchesReferenceForEachDtype) {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = random_tensor({7, 513}, dt, 1);  // 3591 elements: four parallel_for chunks of 1000, the last short
    const Tensor y = scale2x(x, 0.25);
    ASSERT_EQ(y.dtype(), dt);
    ASSERT_EQ(y.shape(), x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_NEAR(y.item_at(i), 2 * x.item_at(i) + 0.25, 1e-6) << dtype_name(dt);
  }
  const Tensor m = random_tensor({100, 17}, DType::f32, 2);
  const Tensor s = rowsum(m, 3);
  ASSERT_EQ(s.shape(), (Shape{100}));
  for (int64_t r = 0; r < 100; ++r) {
    double want = 0;
    for (int64_t j = 0; j < 17; ++j) want += m.item_at(r * 17 + j);
    EXPECT_NEAR(s.item_at(r), 3 * want, 1e-4) << "row " << r;
  }
}

TEST(Plugin, SameBitsOnOneAndTwoThreadsAndInGraphMode) {
  const Tensor x = random_tensor({301, 40}, DType::f32, 3);
  auto fn = [](std::span<const Tensor> in) {
    Tensor h = ops::relu(scale2x(in[0], -0.5));  // plugin op next to built-in ops
    return std::vector<Tensor>{rowsum(h, 2), h};
  };
  const int threads = num_threads();
  set_threads(1);
  const std::vector<Tensor> one = fn(std::vector<Tensor>{x});
  set_threads(2);
  const std::vector<Tensor> two = fn(std::vector<Tensor>{x});
  CompiledFunction compiled(fn);
  const std::vector<Tensor> graph = compiled({x});
  set_threads(threads);
  ASSERT_EQ(graph.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    expect_bitwise_equal(one[i], two[i]);
    expect_bitwise_equal(one[i], graph[i]);
  }
}

TEST(Plugin, TracesWithSymbolicDims) {
  good_plugin();
  auto g = trace_function(
      [](std::span<const Tensor> in) { return std::vector<Tensor>{rowsum(scale2x(in[0], 1.0), 4)}; },
      {TensorType(DType::f32, {Dim::symbol("batch"), 6})}, {"x"});
  const std::string text = print_graph(*g);
  EXPECT_NE(text.find("scale2x(%x) {offset=1.0} : f32[batch,6]"), std::string::npos) << text;
  EXPECT_NE(text.find("{scale=4} : f32[batch]"), std::string::npos) << text;
  // The printed graph parses back (the plugin's op names are known to the IR).
  EXPECT_EQ(print_graph(*parse_graph(text)), text);
}

TEST(Plugin, ErrorsNameTheOpAndPlugin) {
  good_plugin();
  const Tensor v = Tensor::from_vector<float>({1, 2, 3}, {3});
  std::string msg = error_of([&] { rowsum(v, 1); });
  EXPECT_NE(msg.find("rowsum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rowsum needs a 2-D input, got 1-D"), std::string::npos) << msg;
  msg = error_of([&] { rowsum(random_tensor({2, 2}, DType::f32, 4), 0); });
  EXPECT_NE(msg.find("scale must not be 0"), std::string::npos) << msg;
  const Tensor nan = Tensor::from_vector<float>({1, 2, NAN, 4}, {4});
  msg = error_of([&] { scale2x(nan, 0); });
  EXPECT_NE(msg.find("custom op 'scale2x' (plugin 'testplugin'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input has NaN at index 2"), std::string::npos) << msg;
  msg = error_of([&] { call1(op("scale2x"), {v}, Attrs{{"bogus", int64_t{1}}}); });
  EXPECT_NE(msg.find("bogus"), std::string::npos) << msg;
  msg = error_of([&] { scale2x(Tensor::from_vector<int32_t>({1, 2}, {2}), 0); });
  EXPECT_NE(msg.find("scale2x"), std::string::npos) << msg;
  EXPECT_NE(msg.find("i32"), std::string::npos) << msg;
}

TEST(Plugin, GradientThroughGradOpEagerAndGraph) {
  const Tensor x = random_tensor({5, 8}, DType::f64, 5);
  const Tensor w = random_tensor({5, 8}, DType::f64, 6);
  auto loss = [](std::span<const Tensor> in) { return ops::mul(scale2x(in[0], 3.0), in[1]); };
  const std::vector<Tensor> g = autodiff::grad(loss, std::vector<Tensor>{x, w});
  ASSERT_EQ(g.size(), 2u);
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_NEAR(g[0].item_at(i), 2 * w.item_at(i), 1e-12);
    EXPECT_NEAR(g[1].item_at(i), 2 * x.item_at(i) + 3, 1e-12);
  }
  CompiledFunction traced([&](std::span<const Tensor> in) { return autodiff::grad(loss, in, {0}); });
  expect_bitwise_equal(traced({x, w})[0], g[0]);
  // rowsum names no grad_op: differentiating through it fails, naming it.
  const std::string msg = error_of([&] {
    autodiff::grad([](std::span<const Tensor> in) { return rowsum(in[0], 1); },
                   std::vector<Tensor>{random_tensor({2, 3}, DType::f32, 7)});
  });
  EXPECT_NE(msg.find("rowsum"), std::string::npos) << msg;
}

TEST(Plugin, RunsOnTheNullBackend) {
  good_plugin();
  reset_null_backend_stats();
  {
    BackendScope null(Backend::null);
    scale2x(random_tensor({4}, DType::f32, 8), 0);
  }
  EXPECT_EQ(null_backend_stats().kernels, 1);
}

std::unique_ptr<Graph> plugin_graph() {
  return trace_function(
      [](std::span<const Tensor> in) { return std::vector<Tensor>{rowsum(scale2x(in[0], 0.5), 2)}; },
      {TensorType(DType::f32, {4, 5})}, {"x"});
}

TEST(Plugin, SporeFileRecordsThePluginOfEachOp) {
  const std::string bytes = io::encode_spore(*plugin_graph(), {{"source", "test"}, {"custom_op:stale", "old"}});
  io::SporeFileInfo info;
  std::unique_ptr<Graph> g = io::parse_spore({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "m.spore", &info);
  EXPECT_EQ(info.metadata, (std::map<std::string, std::string>{
                               {"custom_op:rowsum", "testplugin"}, {"custom_op:scale2x", "testplugin"}, {"source", "test"}}));
  const Tensor x = random_tensor({4, 5}, DType::f32, 9);
  Plan plan = compile_plan(std::move(g), {});
  expect_bitwise_equal(plan.run(std::vector<Tensor>{x})[0], rowsum(scale2x(x, 0.5), 2));

  // A file whose op is not registered names the plugin to load (rename the op, fix the checksum).
  std::string patched = bytes;
  for (size_t at = patched.find("rowsum"); at != std::string::npos; at = patched.find("rowsum", at)) patched[at + 5] = 'n';
  const uint64_t sum = io::spore_layout::file_checksum(
      {reinterpret_cast<const uint8_t*>(patched.data()), patched.size()});
  std::memcpy(patched.data() + io::spore_layout::off_checksum, &sum, 8);
  const std::string msg = error_of([&] {
    io::parse_spore({reinterpret_cast<const uint8_t*>(patched.data()), patched.size()}, "m.spore");
  });
  EXPECT_NE(msg.find("op 'rowsun' needs custom-op plugin 'testplugin' (load it with --custom-ops)"), std::string::npos)
      << msg;
}

std::string custom_onnx_model(const std::string& scale2x_domain) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  for (auto [dom, ver] : {std::pair<std::string, int>{"", 13}, {"test.domain", 1}, {"spore.custom", 1}}) {
    auto* o = m.add_opset_import();
    o->set_domain(dom);
    o->set_version(ver);
  }
  onnx::GraphProto& g = *m.mutable_graph();
  g.set_name("g");
  auto* in = g.add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {4, 5}) in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  auto* n1 = g.add_node();
  n1->set_op_type("scale2x");
  n1->set_domain(scale2x_domain);
  n1->set_name("s2x");
  n1->add_input("x");
  n1->add_output("h");
  auto* a1 = n1->add_attribute();
  a1->set_name("offset");
  a1->set_type(onnx::AttributeProto::FLOAT);
  a1->set_f(0.5f);
  auto* n2 = g.add_node();
  n2->set_op_type("rowsum");
  n2->set_domain("spore.custom");
  n2->set_name("rs");
  n2->add_input("h");
  n2->add_output("y");
  auto* a2 = n2->add_attribute();
  a2->set_name("scale");
  a2->set_type(onnx::AttributeProto::INT);
  a2->set_i(2);
  auto* out = g.add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return m.SerializeAsString();
}

TEST(Plugin, OnnxNodesOfThePluginDomainImport) {
  good_plugin();
  std::unique_ptr<Graph> g = io::import_onnx_bytes(custom_onnx_model("test.domain"), "custom.onnx");
  const Tensor x = random_tensor({4, 5}, DType::f32, 10);
  Plan plan = compile_plan(std::move(g), {});
  expect_bitwise_equal(plan.run(std::vector<Tensor>{x})[0], rowsum(scale2x(x, 0.5), 2));
  const std::string msg = error_of([&] { io::import_onnx_bytes(custom_onnx_model("other.domain"), "other.onnx"); });
  EXPECT_NE(msg.find("s2x"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test.domain"), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------- bad plugins

void expect_load_fails(const char* path, std::vector<std::string> fragments) {
  good_plugin();  // the clash test needs its ops
  const int ops_before = num_ops();
  const size_t plugins = loaded_plugins().size();
  const std::string msg = error_of([&] { load_custom_ops(path); });
  ASSERT_FALSE(msg.empty()) << path << " loaded";
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
  // Nothing was registered, not even the plugin's valid first op.
  EXPECT_EQ(num_ops(), ops_before);
  EXPECT_FALSE(op_from_name("bad_plugin_first_op").has_value());
  EXPECT_EQ(loaded_plugins().size(), plugins);
  // Still failing the same way the second time (a failed load is not remembered as loaded).
  EXPECT_EQ(error_of([&] { load_custom_ops(path); }), msg);
}

TEST(PluginErrors, OtherAbiVersion) {
  expect_load_fails(SPORE_BAD_PLUGIN_ABI, {"ABI version 99", "version 1"});
}
TEST(PluginErrors, MissingEntrySymbol) {
  expect_load_fails(SPORE_BAD_PLUGIN_NO_ENTRY, {"does not export 'spore_plugin_entry'"});
}
TEST(PluginErrors, NameClashWithBuiltIn) {
  expect_load_fails(SPORE_BAD_PLUGIN_CLASH_BUILTIN, {"op 'relu'", "clashes with a built-in op"});
}
TEST(PluginErrors, NameClashWithAnotherPlugin) {
  expect_load_fails(SPORE_BAD_PLUGIN_CLASH_PLUGIN, {"'badplugin'", "op 'scale2x'", "plugin 'testplugin'"});
}
TEST(PluginErrors, NullOpName) { expect_load_fails(SPORE_BAD_PLUGIN_NULL_NAME, {"op #1 has a NULL name"}); }
TEST(PluginErrors, NoKernels) {
  expect_load_fails(SPORE_BAD_PLUGIN_NO_KERNELS, {"op 'bad_op_ok_name' has no kernels"});
}
TEST(PluginErrors, BadDtype) {
  expect_load_fails(SPORE_BAD_PLUGIN_BAD_DTYPE, {"op 'bad_op_ok_name'", "invalid dtype code 42"});
}
TEST(PluginErrors, MissingFile) {
  const std::string msg = error_of([] { load_custom_ops("/nonexistent/libnothing.so"); });
  EXPECT_NE(msg.find("cannot load custom-op plugin '/nonexistent/libnothing.so'"), std::string::npos) << msg;
}

// --------------------------------------------------------------------------------- in-process API

void cube_f32(KernelContext& k) {
  const float* x = k.in(0).data<float>();
  float* y = k.out(0).data<float>();
  for (int64_t i = 0; i < k.in(0).numel(); ++i) y[i] = x[i] * x[i] * x[i];
}

OpId cube_op() {
  static const OpId id = CustomOp("inproc_cube")
                             .doc("x^3")
                             .inputs({"x"})
                             .traits(Trait::elementwise, FusionKind::elementwise)
                             .grad([](const GradContext& g) {
                               return std::vector<Tensor>{
                                   ops::mul(g.output_grads[0], ops::mul(ops::mul(g.inputs[0], g.inputs[0]), 3.0))};
                             })
                             .kernel({DType::f32}, cube_f32)
                             .add();
  return id;
}

TEST(CustomOpApi, InProcessOpRunsEagerGraphAndGrad) {
  const OpId cube = cube_op();
  EXPECT_EQ(op_registry().get(cube).plugin, "");
  const Tensor x = random_tensor({3, 4}, DType::f32, 11);
  const Tensor y = call1(cube, {x});
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_FLOAT_EQ(static_cast<float>(y.item_at(i)), std::pow(static_cast<float>(x.item_at(i)), 3.0f));
  CompiledFunction f([cube](std::span<const Tensor> in) { return std::vector<Tensor>{ops::call1(cube, in)}; });
  expect_bitwise_equal(f({x})[0], y);
  const Tensor g = autodiff::grad([cube](std::span<const Tensor> in) { return ops::call1(cube, in); },
                                  std::vector<Tensor>{x})[0];
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(g.item_at(i), 3 * x.item_at(i) * x.item_at(i), 1e-5);
  // No f64 kernel: a clear error naming the op and dtype.
  const std::string msg = error_of([&] { call1(cube, {random_tensor({2}, DType::f64, 12)}); });
  EXPECT_NE(msg.find("inproc_cube"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f64"), std::string::npos) << msg;
}

TEST(CustomOpApi, RejectsClashesAndBadDefinitions) {
  cube_op();
  good_plugin();
  for (const char* taken : {"relu", "scale2x", "inproc_cube"}) {
    const std::string msg = error_of([&] { CustomOp(taken).inputs({"x"}).kernel({DType::f32}, cube_f32).add(); });
    EXPECT_NE(msg.find(std::string("'") + taken + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("already exists"), std::string::npos) << msg;
  }
  EXPECT_NE(error_of([] { CustomOp("has space").inputs({"x"}).kernel({DType::f32}, cube_f32).add(); }), "");
  EXPECT_NE(error_of([] { CustomOp("no_kernel_op").inputs({"x"}).add(); }).find("neither a kernel nor a decomposition"),
            std::string::npos);
  EXPECT_FALSE(op_from_name("no_kernel_op").has_value());
}

}  // namespace
}  // namespace spore
