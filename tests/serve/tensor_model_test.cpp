// KServe v2 tensors (JSON and binary data, errors that name the tensor) and TensorModel (a Session behind a queue,
// dynamic batching), on small ONNX models built here: an MLP and a conv net, both with a dynamic batch dim.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fmt/format.h>
#include <future>
#include <thread>

#include <spore/spore.h>

#include "serve_test_util.h"
#include "base/error.h"
#include "deploy/session.h"
#include "test_models.h"
#include "serve/errors.h"
#include "serve/kserve.h"
#include "serve/tensor_model.h"
#include "test_util.h"

namespace spore::serve {
namespace {

using testing::error_of;

using nlohmann::json;
using namespace spore::serve::testing;  // NOLINT: the test models

Tensor rows(int64_t n, const Shape& row, int salt) {
  Shape s = row;
  s.insert(s.begin(), n);
  return spore::testing::patterned_tensor(s, DType::f32, salt);
}

std::vector<TensorMeta> x_meta() { return {{"x", TensorType(DType::f32, {Dim::symbol("batch"), Dim(3)})}}; }

TEST(KServe, DatatypeNames) {
  EXPECT_EQ(kserve_datatype(DType::f32), "FP32");
  EXPECT_EQ(kserve_datatype(DType::i64), "INT64");
  EXPECT_EQ(kserve_datatype(DType::boolean), "BOOL");
  EXPECT_EQ(dtype_of_kserve("BF16"), DType::bf16);
  EXPECT_FALSE(dtype_of_kserve("BYTES").has_value());
  const json m = tensor_meta_json(x_meta()[0]);
  EXPECT_EQ(m, json({{"name", "x"}, {"datatype", "FP32"}, {"shape", {-1, 3}}}));
}

TEST(KServe, JsonRequestFlatAndNested) {
  const std::string body = R"({"id": "r1", "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
                                "data": [[1, 2, 3], [4, 5, 6.5]]}], "outputs": [{"name": "y"}]})";
  const InferRequest r = parse_infer_request(body, std::nullopt);
  EXPECT_EQ(r.id, "r1");
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(r.tensors[0].item_at(5), 6.5);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_FALSE(r.outputs[0].binary);
  const std::vector<Tensor> ordered = match_inputs(r, x_meta());
  EXPECT_EQ(ordered[0].item_at(3), 4.0);
}

TEST(KServe, BinaryRequestAndResponse) {
  const std::string head = R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
                                "parameters": {"binary_data_size": 12}}],
                                "outputs": [{"name": "y", "parameters": {"binary_data": true}}]})";
  const float vals[3] = {1.5f, -2.f, 3.25f};
  std::string body = head;
  body.append(reinterpret_cast<const char*>(vals), sizeof vals);
  const InferRequest r = parse_infer_request(body, head.size());
  EXPECT_EQ(r.tensors[0].item_at(2), 3.25);
  ASSERT_TRUE(r.outputs[0].binary);
  const Tensor y = Tensor::from_vector<float>({7.f, 8.f}, {1, 2});
  const InferResponse resp = write_infer_response("m", r, {{"y", TensorType(DType::f32, {Dim::symbol("b"), Dim(2)})}}, {y});
  ASSERT_TRUE(resp.header_length.has_value());
  const json j = json::parse(resp.body.substr(0, *resp.header_length));
  EXPECT_EQ(j["outputs"][0]["parameters"]["binary_data_size"], 8);
  EXPECT_FALSE(j["outputs"][0].contains("data"));
  ASSERT_EQ(resp.body.size(), *resp.header_length + 8);
  float back[2];
  std::memcpy(back, resp.body.data() + *resp.header_length, 8);
  EXPECT_EQ(back[0], 7.f);
  EXPECT_EQ(back[1], 8.f);
  // JSON output: data, the model's name, the request id.
  InferRequest plain = r;
  plain.outputs.clear();
  plain.id = "abc";
  const json pj = json::parse(write_infer_response("m", plain, {{"y", TensorType(DType::f32, {Dim(1), Dim(2)})}}, {y}).body);
  EXPECT_EQ(pj["model_name"], "m");
  EXPECT_EQ(pj["id"], "abc");
  EXPECT_EQ(pj["outputs"][0]["datatype"], "FP32");
  EXPECT_EQ(pj["outputs"][0]["shape"], json({1, 2}));
  EXPECT_EQ(pj["outputs"][0]["data"], json({7.0, 8.0}));
}

TEST(KServe, BadTensorsAre400NamingTheTensor) {
  auto parse = [](const std::string& b) { return error_of([&] { parse_infer_request(b, std::nullopt); }); };
  auto matched = [](const std::string& b) {
    return error_of([&] { match_inputs(parse_infer_request(b, std::nullopt), x_meta()); });
  };
  HttpError e = parse(R"({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5]}]})");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("input 'x'"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("6 elements, data has 5"), std::string::npos) << e.message;
  e = parse(R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP33", "data": [1, 2, 3]}]})");
  EXPECT_EQ(e.param, "inputs[0].datatype");
  e = parse(R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, "a", 3]}]})");
  EXPECT_NE(e.message.find("element 1"), std::string::npos) << e.message;
  e = parse(R"({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "INT8", "data": [1, 300]}]})");
  EXPECT_NE(e.message.find("does not fit"), std::string::npos) << e.message;
  e = parse(R"({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "INT64", "data": [1, 2.5]}]})");
  EXPECT_NE(e.message.find("expected an integer"), std::string::npos) << e.message;
  e = parse(R"({"inputs": [{"name": "x", "shape": [-1, 3], "datatype": "FP32", "data": []}]})");
  EXPECT_EQ(e.param, "inputs[0].shape[0]");
  e = parse(R"({"inputs": {"name": "x"}})");
  EXPECT_EQ(e.param, "inputs");
  e = parse(R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "parameters": {"binary_data_size": 12}}]})");
  EXPECT_NE(e.message.find("Inference-Header-Content-Length"), std::string::npos) << e.message;
  e = parse("{nope");
  EXPECT_EQ(e.status, 400);

  e = matched(R"({"inputs": [{"name": "z", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]})");
  EXPECT_NE(e.message.find("no input 'z' (inputs: x)"), std::string::npos) << e.message;
  e = matched(R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP64", "data": [1, 2, 3]}]})");
  EXPECT_NE(e.message.find("input 'x': datatype FP64, the model expects FP32"), std::string::npos) << e.message;
  e = matched(R"({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})");
  EXPECT_NE(e.message.find("input 'x': dim 1 is 4, the model expects 3"), std::string::npos) << e.message;
  e = matched(R"({"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]}]})");
  EXPECT_NE(e.message.find("rank 1"), std::string::npos) << e.message;
  e = matched(R"({"inputs": []})");
  EXPECT_NE(e.message.find("input 'x' is missing"), std::string::npos) << e.message;

  // Binary sizes must add up.
  const std::string head = R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
                                "parameters": {"binary_data_size": 8}}]})";
  e = error_of([&] { parse_infer_request(head + std::string(8, '\0'), head.size()); });
  EXPECT_NE(e.message.find("are 12 bytes, binary_data_size is 8"), std::string::npos) << e.message;
  const std::string head12 = R"({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
                                  "parameters": {"binary_data_size": 12}}]})";
  e = error_of([&] { parse_infer_request(head12 + std::string(8, '\0'), head12.size()); });
  EXPECT_NE(e.message.find("8 binary bytes left, 12 needed"), std::string::npos) << e.message;
  e = error_of([&] { parse_infer_request(head12 + std::string(16, '\0'), head12.size()); });
  EXPECT_NE(e.message.find("16 bytes of binary data"), std::string::npos) << e.message;
}

TEST(TensorModel, MetadataAndOutputsEqualADirectRun) {
  Metrics metrics;
  TensorModel::declare_metrics(metrics);
  const std::string path = mlp_model();
  TensorModel m({.name = "mlp", .path = path}, metrics);
  m.wait_ready();
  EXPECT_TRUE(m.ready());
  const json md = m.metadata();
  EXPECT_EQ(md["name"], "mlp");
  EXPECT_EQ(md["inputs"][0], json({{"name", "x"}, {"datatype", "FP32"}, {"shape", {-1, 64}}}));
  EXPECT_EQ(md["outputs"][0]["shape"], json({-1, 10}));
  // auto: the warm-up found the MLP's merged rows bit-identical to single rows, so it merges.
  EXPECT_TRUE(m.batchable()) << m.batching_note();
  EXPECT_NE(m.batching_note().find("bit-identical"), std::string::npos) << m.batching_note();

  deploy::Session direct(path);
  const Tensor x = rows(3, {64}, 7);
  const Tensor want = direct.run(std::vector<Tensor>{x}).at(0);
  const Tensor got = m.infer({x}).at(0);
  EXPECT_TRUE(got.bit_equal(want));
  EXPECT_EQ(metrics.value("spore:infer_requests_total", {{"model", "mlp"}}), 1);
}

TEST(TensorModel, FullQueueIsUnavailable) {
  Metrics metrics;
  TensorModel::declare_metrics(metrics);
  TensorModel m({.name = "mlp", .path = mlp_model(), .max_queue = 0}, metrics);
  m.wait_ready();
  try {
    m.infer({rows(1, {64}, 1)});
    FAIL() << "expected Error(unavailable)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unavailable);
  }
  EXPECT_EQ(metrics.value("spore:infer_requests_refused_total", {{"model", "mlp"}}), 1);
}

// Concurrent requests are merged (the batch-size histogram counts fewer runs than requests) and each gets exactly the
// bits it gets alone: the MLP and conv kernels are batch-invariant, which the auto check found at warm-up.
// Whether four requests overlap depends on thread start-up: on a loaded machine (ctest -j on 2 cores) each could
// arrive after the one before had run alone. So up to 5 rounds of 4, until one round merged; every round's bits are
// checked.
void check_batching(const std::string& name, const std::string& path, const Shape& row) {
  Metrics metrics;
  TensorModel::declare_metrics(metrics);
  TensorModel m({.name = name, .path = path, .max_batch = 4, .batch_delay_ms = 300}, metrics);
  m.wait_ready();
  ASSERT_TRUE(m.batchable()) << m.batching_note();
  constexpr int n = 4;
  deploy::Session direct(path);
  int requests = 0;
  for (int round = 0; round < 5; ++round) {
    std::vector<Tensor> xs;
    for (int i = 0; i < n; ++i) xs.push_back(rows(1, row, 10 + round * n + i));
    std::vector<std::future<std::vector<Tensor>>> fs;
    for (int i = 0; i < n; ++i) fs.push_back(std::async(std::launch::async, [&, i] { return m.infer({xs[i]}); }));
    std::vector<Tensor> merged;
    for (auto& f : fs) merged.push_back(f.get().at(0));
    requests += n;
    for (int i = 0; i < n; ++i)
      EXPECT_TRUE(merged[i].bit_equal(direct.run(std::vector<Tensor>{xs[i]}).at(0))) << round << " " << i;
    if (metrics.value("spore:infer_batch_size", {{"model", name}}) < requests) break;
  }
  EXPECT_LT(metrics.value("spore:infer_batch_size", {{"model", name}}), requests);  // fewer runs than requests
}

TEST(TensorModel, BatchingMergesConcurrentRequestsMlp) { check_batching("mlp", mlp_model(), {64}); }
TEST(TensorModel, BatchingMergesConcurrentRequestsConv) { check_batching("conv", conv_model(), {3, 12, 12}); }
TEST(TensorModel, BatchingMergesConcurrentRequestsWideMlp) { check_batching("mlp_wide", mlp_model(512, 1024), {512}); }
TEST(TensorModel, BatchingMergesConcurrentRequestsWideConv) {
  check_batching("conv_wide", conv_model(32, 64, 32), {32, 32, 32});
}

TEST(TensorModel, AutoBatchingRefusesAModelWhoseRowsMix) {
  Metrics metrics;
  TensorModel::declare_metrics(metrics);
  const std::string path = batch_mixing_model();
  TensorModel a({.name = "mix", .path = path}, metrics);
  a.wait_ready();
  EXPECT_FALSE(a.batchable());
  EXPECT_NE(a.batching_note().find("not batch-invariant"), std::string::npos) << a.batching_note();
  EXPECT_EQ(a.metadata()["parameters"]["dynamic_batching"], false);
  TensorModel forced({.name = "mix2", .path = path, .batching = Batching::on}, metrics);
  forced.wait_ready();
  EXPECT_TRUE(forced.batchable());
  EXPECT_NE(forced.batching_note().find("NOT batch-invariant"), std::string::npos) << forced.batching_note();
  TensorModel off({.name = "mix3", .path = path, .batching = Batching::off}, metrics);
  off.wait_ready();
  EXPECT_FALSE(off.batchable());
}

TEST(TensorModel, WithoutBatchingConcurrentRequestsEqualRunningAlone) {
  Metrics metrics;
  TensorModel::declare_metrics(metrics);
  const std::string path = conv_model();
  TensorModel m({.name = "conv", .path = path, .batching = Batching::off}, metrics);
  m.wait_ready();
  std::vector<Tensor> xs;
  for (int i = 0; i < 6; ++i) xs.push_back(rows(1 + i % 2, {3, 12, 12}, 20 + i));
  std::vector<std::future<std::vector<Tensor>>> fs;
  for (size_t i = 0; i < xs.size(); ++i) fs.push_back(std::async(std::launch::async, [&, i] { return m.infer({xs[i]}); }));
  deploy::Session direct(path);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_TRUE(fs[i].get().at(0).bit_equal(direct.run(std::vector<Tensor>{xs[i]}).at(0))) << i;
  EXPECT_EQ(metrics.value("spore:infer_batch_size", {{"model", "conv"}}), 6);  // six runs of one request each
}

}  // namespace
}  // namespace spore::serve
