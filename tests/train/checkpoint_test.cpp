#include <gtest/gtest.h>

#include "base/rng.h"
#include "io/safetensors.h"
#include "nn/init.h"
#include "nn/loss.h"
#include "runtime/runtime.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/model.h"
#include "train/models.h"

namespace spore {
namespace {

data::Dataset random_data(int64_t n, uint64_t seed) {
  std::vector<double> x(static_cast<size_t>(n * 64));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = philox_uniform(seed, 1, i);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int64_t>(philox_uniform(seed, 2, i) * 10) % 10;
  return data::Dataset::from_tensors(Tensor::from_doubles(x, {n, 1, 8, 8}, DType::f32),
                                     Tensor::from_vector<int64_t>(y, {n}))
      .shuffle(seed)
      .batch(12);
}

struct Trainer {
  std::unique_ptr<nn::Cell> net;
  nn::SoftmaxCrossEntropyWithLogits ce{true, "mean"};
  std::unique_ptr<train::Optimizer> opt;
  std::unique_ptr<train::Model> model;
  Trainer(const std::string& mode, const std::string& optimizer, uint64_t seed) {
    nn::set_seed(seed);
    net = train::make_model("simplenet", {1, 8, 8});
    opt = train::make_optimizer(optimizer, train::trainable_names(*net), 0.02);
    train::ModelOptions o;
    o.mode = mode;
    o.seed = seed;
    model = std::make_unique<train::Model>(*net, train::loss_of(ce), *opt, std::vector<std::string>{"accuracy"}, o);
  }
};

TEST(TrainCheckpoint, ResumeIsBitIdentical) {
  init();
  const data::Dataset ds = random_data(50, 9);
  const std::string path = (testing::temp_dir("ckpt") / "resume.safetensors").string();
  for (const char* mode : {"pynative", "graph"}) {
    for (const char* optimizer : {"momentum", "adamw"}) {
      SCOPED_TRACE(std::string(mode) + " " + optimizer);
      Trainer straight(mode, optimizer, 4);
      straight.model->train(2, ds);
      Trainer first(mode, optimizer, 4);
      first.model->train(1, ds);
      first.model->save_checkpoint(path);
      Trainer resumed(mode, optimizer, 99);  // different initial weights: all must come from the file
      resumed.model->load_checkpoint(path);
      EXPECT_EQ(resumed.model->epoch(), 1);
      EXPECT_EQ(resumed.model->global_step(), 5);
      resumed.model->train(1, ds);
      const auto a = straight.net->parameters_and_names(), b = resumed.net->parameters_and_names();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].second->bit_equal(*b[i].second)) << a[i].first;
      const auto& sa = straight.model->optimizer_state();
      const auto& sb = resumed.model->optimizer_state();
      ASSERT_EQ(sa.size(), sb.size());
      for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(sa[i].bit_equal(sb[i])) << i;
    }
  }
}

TEST(TrainCheckpoint, MetadataAndLayout) {
  init();
  const std::string path = (testing::temp_dir("ckpt") / "meta.safetensors").string();
  Trainer s("pynative", "adam", 5);
  s.model->train(1, random_data(24, 1));
  s.model->save_checkpoint(path);
  const io::SafetensorsFile f = io::read_safetensors(path);
  EXPECT_EQ(f.metadata.at("step"), "2");
  EXPECT_EQ(f.metadata.at("epoch"), "1");
  EXPECT_EQ(f.metadata.at("seed"), "5");
  EXPECT_EQ(f.metadata.at("optimizer"), s.opt->name());
  EXPECT_TRUE(f.tensors.count("conv.weight"));
  EXPECT_TRUE(f.tensors.count("fc.bias"));
  for (const std::string& n : s.opt->state_names()) EXPECT_TRUE(f.tensors.count("optimizer." + n)) << n;
  // Weights only (what eval does): the optimizer state in the file is ignored.
  nn::set_seed(77);
  auto net = train::make_model("simplenet", {1, 8, 8});
  const train::CheckpointInfo info = train::load_checkpoint(path, *net);
  EXPECT_EQ(info.step, 2);
  EXPECT_EQ(info.seed, 5u);
  EXPECT_TRUE(net->parameter("fc.weight")->bit_equal(*s.net->parameter("fc.weight")));
}

TEST(TrainCheckpoint, MismatchesAreAllNamed) {
  init();
  const std::string path = (testing::temp_dir("ckpt") / "bad.safetensors").string();
  Trainer s("pynative", "momentum", 1);
  std::map<std::string, Tensor> t;
  for (auto& [name, p] : s.net->parameters_and_names()) t[name] = *p;
  t.erase("conv.bias");
  t["fc.weight"] = Tensor::zeros({3, 3}, DType::f32);
  t["fc.bias"] = Tensor::zeros({10}, DType::f64);
  t["stray"] = Tensor::zeros({1}, DType::f32);
  io::write_safetensors(path, t);
  const Tensor before = s.net->parameter("conv.weight")->clone();
  const std::string err = testing::error_of([&] { train::load_checkpoint(path, *s.net); });
  EXPECT_NE(err.find("missing 'conv.bias'"), std::string::npos) << err;
  EXPECT_NE(err.find("'fc.weight' expected f32 [10,1024], got f32 [3,3]"), std::string::npos) << err;
  EXPECT_NE(err.find("'fc.bias' expected f32 [10], got f64 [10]"), std::string::npos) << err;
  EXPECT_NE(err.find("unexpected 'stray'"), std::string::npos) << err;
  EXPECT_TRUE(s.net->parameter("conv.weight")->bit_equal(before));  // nothing modified
  // With the optimizer the state must be there too.
  const std::string err2 = testing::error_of([&] { s.model->load_checkpoint(path); });
  EXPECT_NE(err2.find("missing 'optimizer."), std::string::npos) << err2;
  // A checkpoint from another optimizer is refused by name.
  s.model->save_checkpoint(path);
  Trainer other("pynative", "sgd", 1);
  const std::string err3 = testing::error_of([&] { other.model->load_checkpoint(path); });
  EXPECT_NE(err3.find("unexpected 'optimizer."), std::string::npos) << err3;
  EXPECT_NE(testing::error_of([&] { train::load_checkpoint("/nonexistent/x.safetensors", *s.net); }), "");
}

}  // namespace
}  // namespace spore
