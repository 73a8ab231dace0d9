#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "base/rng.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "runtime/runtime.h"
#include "test_util.h"
#include "train/model.h"
#include "train/models.h"

namespace spore {
namespace {

// A learnable synthetic task: 8x8 images whose label is the brightest of 4 quadrants (+ noise).
data::Dataset quadrant_data(int64_t n, uint64_t seed, int64_t batch) {
  std::vector<double> x(static_cast<size_t>(n * 64));
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = static_cast<int64_t>(philox_uniform(seed, 1, static_cast<uint64_t>(i)) * 4) % 4;
    y[static_cast<size_t>(i)] = label;
    for (int64_t p = 0; p < 64; ++p) {
      const int64_t q = (p / 8 >= 4) * 2 + (p % 8 >= 4);
      x[static_cast<size_t>(i * 64 + p)] =
          0.5 * philox_uniform(seed, 2, static_cast<uint64_t>(i * 64 + p)) + (q == label ? 0.5 : 0.0);
    }
  }
  return data::Dataset::from_tensors(Tensor::from_doubles(x, {n, 1, 8, 8}, DType::f32),
                                     Tensor::from_vector<int64_t>(y, {n}))
      .shuffle(seed)
      .batch(batch);
}

struct Trainer {
  std::unique_ptr<nn::Cell> net;
  nn::SoftmaxCrossEntropyWithLogits ce{true, "mean"};
  std::unique_ptr<train::Optimizer> opt;
  std::unique_ptr<train::Model> model;
  Trainer(const std::string& arch, const std::string& mode, const std::string& optimizer = "momentum",
      train::ModelOptions o = {}) {
    nn::set_seed(7);
    net = train::make_model(arch, {1, 8, 8}, 4);
    opt = train::make_optimizer(optimizer, train::trainable_names(*net), optimizer == "adam" ? 0.01 : 0.05);
    o.mode = mode;
    model = std::make_unique<train::Model>(*net, train::loss_of(ce), *opt, std::vector<std::string>{"accuracy"}, o);
  }
};

// Losses of every step of `epochs` epochs.
std::vector<double> step_losses(train::Model& m, const data::Dataset& ds, int64_t epochs) {
  std::vector<double> losses;
  struct Record : train::Callback {
    std::vector<double>* out;
    void on_step_end(train::RunContext& c) override { out->push_back(c.loss); }
  };
  auto rec = std::make_shared<Record>();
  rec->out = &losses;
  m.train(epochs, ds, {rec});
  return losses;
}

void expect_bit_equal(const std::vector<double>& a, const std::vector<double>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
}

TEST(TrainModel, PynativeAndGraphGiveBitIdenticalLosses) {
  init();
  const data::Dataset ds = quadrant_data(70, 3, 16);  // last batch of 6: a second plan signature
  for (const char* arch : {"simplenet", "lenet", "mlp"}) {
    for (const char* opt : {"momentum", "adam"}) {
      Trainer a(arch, "pynative", opt), b(arch, "graph", opt);
      const std::vector<double> la = step_losses(*a.model, ds, 2), lb = step_losses(*b.model, ds, 2);
      SCOPED_TRACE(std::string(arch) + " " + opt);
      expect_bit_equal(la, lb);
      const auto pa = a.net->parameters_and_names(), pb = b.net->parameters_and_names();
      for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(pa[i].second->bit_equal(*pb[i].second)) << pa[i].first;
    }
  }
}

TEST(TrainModel, SameSeedSameLossesAndThreadCountDoesNotMatter) {
  init();
  const data::Dataset ds = quadrant_data(64, 5, 16);
  for (const char* mode : {"pynative", "graph"}) {
    set_threads(1);
    Trainer a("simplenet", mode);
    const std::vector<double> l1 = step_losses(*a.model, ds, 1);
    set_threads(2);
    Trainer b("simplenet", mode), c("simplenet", mode);
    const std::vector<double> l2 = step_losses(*b.model, ds, 1), l3 = step_losses(*c.model, ds, 1);
    set_threads(0);
    expect_bit_equal(l1, l2);
    expect_bit_equal(l2, l3);
  }
}

TEST(TrainModel, LearnsAndEvaluates) {
  init();
  const data::Dataset train_ds = quadrant_data(256, 11, 32), test_ds = quadrant_data(128, 12, 64);
  Trainer r("simplenet", "graph");
  const double before = r.model->eval(test_ds).at("loss");
  std::ostringstream log;
  r.model->train(3, train_ds, {std::make_shared<train::LossMonitor>(4, &log)}, &test_ds);
  const std::map<std::string, double> m = r.model->eval(test_ds);
  EXPECT_LT(m.at("loss"), before);
  EXPECT_GT(m.at("accuracy"), 0.9);
  EXPECT_EQ(m.at("samples"), 128);
  EXPECT_EQ(r.model->global_step(), 24);
  EXPECT_EQ(r.model->epoch(), 3);
  EXPECT_NE(log.str().find("epoch 3 step 24 loss"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("epoch 3 mean loss"), std::string::npos);
  const Tensor logits = r.model->predict(Tensor::zeros({5, 1, 8, 8}, DType::f32));
  EXPECT_EQ(logits.shape(), (Shape{5, 4}));
  // predict agrees between the modes for the same weights.
  Trainer p("simplenet", "pynative");
  const Tensor x = test_ds.make_batch(0, 0).x;
  EXPECT_TRUE(Trainer("simplenet", "graph").model->predict(x).bit_equal(p.model->predict(x)));
}

TEST(TrainModel, GradAccumulationAndClipping) {
  init();
  const data::Dataset ds = quadrant_data(64, 21, 8);
  train::ModelOptions o;
  o.grad_accumulation = 2;
  o.clip_norm = 0.5;
  Trainer r("mlp", "pynative", "sgd", o);
  const std::vector<Tensor> w0{r.net->parameters_and_names()[0].second->clone()};
  r.model->train_step(ds.make_batch(0, 0).x, ds.make_batch(0, 0).y);
  EXPECT_EQ(r.model->global_step(), 0);  // one micro-batch: no step yet
  EXPECT_TRUE(r.net->parameters_and_names()[0].second->bit_equal(w0[0]));
  r.model->train_step(ds.make_batch(0, 1).x, ds.make_batch(0, 1).y);
  EXPECT_EQ(r.model->global_step(), 1);
  EXPECT_FALSE(r.net->parameters_and_names()[0].second->bit_equal(w0[0]));
  EXPECT_NE(testing::error_of([&] { Trainer("mlp", "graph", "sgd", o); }).find("grad_accumulation 2"), std::string::npos);
}

struct BnNet : nn::Cell {
  nn::Flatten flat;
  nn::Dense fc{64, 4};
  nn::BatchNorm1d bn{4};
  BnNet() { SPORE_REGISTER_CELLS(flat, fc, bn); }
  Tensor construct(const Tensor& x) override { return bn(fc(flat(x))); }
};
struct DropNet : nn::Cell {
  nn::Flatten flat;
  nn::Dropout drop{0.2};
  nn::Dense fc{64, 4};
  DropNet() { SPORE_REGISTER_CELLS(flat, drop, fc); }
  Tensor construct(const Tensor& x) override { return fc(drop(flat(x))); }
};

TEST(TrainModel, GraphModeRejectsBatchNormAndDropoutButPynativeTrainsThem) {
  init();
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
  const data::Dataset ds = quadrant_data(32, 2, 16);
  BnNet bn;
  auto opt = train::make_optimizer("sgd", train::trainable_names(bn), 0.1);
  train::ModelOptions g;
  g.mode = "graph";
  EXPECT_NE(testing::error_of([&] { train::Model(bn, train::loss_of(ce), *opt, {}, g); }).find("bn.moving_mean"),
            std::string::npos);
  train::Model mb(bn, train::loss_of(ce), *opt);
  const Tensor mean0 = bn.bn.moving_mean().clone();
  mb.train(1, ds);
  EXPECT_FALSE(bn.bn.moving_mean().bit_equal(mean0));  // running stats updated in pynative mode

  DropNet dn;
  auto opt2 = train::make_optimizer("sgd", train::trainable_names(dn), 0.1);
  EXPECT_NE(testing::error_of([&] { train::Model(dn, train::loss_of(ce), *opt2, {}, g); }).find("Dropout cell 'drop'"),
            std::string::npos);
  train::Model md(dn, train::loss_of(ce), *opt2);
  md.train(1, ds);
  EXPECT_EQ(dn.drop.calls(), 2);
}

TEST(TrainModel, BadArguments) {
  init();
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
  nn::set_seed(1);
  auto net = train::make_model("mlp", {1, 8, 8}, 4);
  auto opt = train::make_optimizer("sgd", train::trainable_names(*net), 0.1);
  train::ModelOptions o;
  o.mode = "eager";
  EXPECT_NE(testing::error_of([&] { train::Model(*net, train::loss_of(ce), *opt, {}, o); }).find("got 'eager'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { train::Model(*net, train::loss_of(ce), *opt, {"f7"}); }).find("'f7'"),
            std::string::npos);
  auto other = train::make_optimizer("sgd", {"fc1.weight"}, 0.1);
  EXPECT_NE(testing::error_of([&] { train::Model(*net, train::loss_of(ce), *other); }).find("fc1.bias"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { train::make_model("resnet", {1, 8, 8}); }).find("unknown model 'resnet'"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { train::make_model("simplenet", {8, 8}); }).find("[C, H, W]"), std::string::npos);
}

TEST(TrainModel, ZooShapes) {
  init();
  nn::set_seed(3);
  for (const char* arch : {"simplenet", "lenet", "mlp"}) {
    for (int64_t hw : {8, 28}) {
      auto net = train::make_model(arch, {1, hw, hw});
      EXPECT_EQ((*net)(Tensor::zeros({2, 1, hw, hw}, DType::f32)).shape(), (Shape{2, 10})) << arch << " " << hw;
    }
  }
  auto sn = train::make_model("simplenet", {1, 28, 28});
  EXPECT_EQ(sn->num_parameters(), 32 * 9 + 32 + 32 * 14 * 14 * 10 + 10);
}

TEST(TrainCallbacks, EarlyStoppingCheckpointsAndProgress) {
  init();
  const data::Dataset ds = quadrant_data(32, 4, 8);
  Trainer r("mlp", "pynative", "sgd");
  // Patience 0 on a metric that cannot improve (max of loss grows rarely): stop after the 2nd epoch at most.
  auto stop = std::make_shared<train::EarlyStopping>("loss", 0, 1e9, "min");
  const std::filesystem::path dir = testing::temp_dir("callbacks") / "ckpt";
  auto ckpt = std::make_shared<train::ModelCheckpoint>(dir.string(), 3, 1, 2);
  std::ostringstream bar, lr;
  auto progress = std::make_shared<train::ProgressBar>(&bar, 2);
  progress->set_tty(false);
  r.model->train(5, ds, {stop, ckpt, progress, std::make_shared<train::LrLogger>(4, &lr)});
  EXPECT_EQ(stop->stopped_epoch(), 1);
  EXPECT_EQ(r.model->epoch(), 2);
  ASSERT_EQ(ckpt->saved().size(), 2u);  // keep_last 2
  for (const auto& p : ckpt->saved()) EXPECT_TRUE(std::filesystem::exists(p)) << p;
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 2);
  EXPECT_NE(ckpt->saved().back().find("ckpt-2_8.safetensors"), std::string::npos) << ckpt->saved().back();
  EXPECT_NE(bar.str().find("epoch 1/5 2/4 "), std::string::npos) << bar.str();
  EXPECT_NE(bar.str().find("items/s ETA"), std::string::npos);
  EXPECT_EQ(bar.str().find('\r'), std::string::npos);
  EXPECT_NE(lr.str().find("step 4 lr 0.05"), std::string::npos) << lr.str();
  std::ostringstream tty;
  auto live = std::make_shared<train::ProgressBar>(&tty);
  live->set_tty(true);
  r.model->train(1, ds, {live});
  EXPECT_NE(tty.str().find("\repoch 3/3 [======"), std::string::npos) << tty.str();
  EXPECT_EQ(tty.str().back(), '\n');
  EXPECT_NE(testing::error_of([&] {
              r.model->train(1, ds, {std::make_shared<train::EarlyStopping>("eval_accuracy")});
            }).find("'eval_accuracy'"),
            std::string::npos);
}

}  // namespace
}  // namespace spore
