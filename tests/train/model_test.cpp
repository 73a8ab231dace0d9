#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "base/rng.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "ops/autocast.h"
#include "ops/ops.h"
#include "runtime/plan.h"
#include "runtime/runtime.h"
#include "test_util.h"
#include "train/metrics.h"
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
  for (const char* mode : {"pynative", "graph"}) {
    SCOPED_TRACE(mode);
    Trainer r("mlp", mode, "sgd", o);
    const std::vector<Tensor> w0{r.net->parameters_and_names()[0].second->clone()};
    r.model->train_step(ds.make_batch(0, 0).x, ds.make_batch(0, 0).y);
    EXPECT_EQ(r.model->global_step(), 0);  // one micro-batch: no step yet
    EXPECT_TRUE(r.net->parameters_and_names()[0].second->bit_equal(w0[0]));
    r.model->train_step(ds.make_batch(0, 1).x, ds.make_batch(0, 1).y);
    EXPECT_EQ(r.model->global_step(), 1);
    EXPECT_FALSE(r.net->parameters_and_names()[0].second->bit_equal(w0[0]));
  }
  // Both modes: the same losses and weights (accumulate from zeros, mean, clip, update), with Adam state.
  for (int64_t n : {2, 3}) {
    o.grad_accumulation = n;
    Trainer a("lenet", "pynative", "adam", o), b("lenet", "graph", "adam", o);
    SCOPED_TRACE(n);
    expect_bit_equal(step_losses(*a.model, ds, 1), step_losses(*b.model, ds, 1));
    EXPECT_EQ(a.model->global_step(), 8 / n);
    EXPECT_EQ(b.model->global_step(), 8 / n);
    const auto pa = a.net->parameters_and_names(), pb = b.net->parameters_and_names();
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(pa[i].second->bit_equal(*pb[i].second)) << pa[i].first;
  }
}

// Conv2d + BatchNorm2d + ReLU + Dropout + Dense: running stats (buffers) and fresh dropout masks per step.
struct ConvBnDropNet : nn::Cell {
  nn::Conv2d conv{1, 4, 3, {.padding = 1}};
  nn::BatchNorm2d bn{4};
  nn::ReLU relu;
  nn::Flatten flat;
  nn::Dropout drop{0.3};
  nn::Dense fc{4 * 64, 4};
  ConvBnDropNet() { SPORE_REGISTER_CELLS(conv, bn, relu, flat, drop, fc); }
  Tensor construct(const Tensor& x) override { return fc(drop(flat(relu(bn(conv(x)))))); }
};

struct BnDropTrainer {
  std::unique_ptr<ConvBnDropNet> net;
  nn::SoftmaxCrossEntropyWithLogits ce{true, "mean"};
  std::unique_ptr<train::Optimizer> opt;
  std::unique_ptr<train::Model> model;
  BnDropTrainer(const std::string& mode, train::ModelOptions o = {}) {
    nn::set_seed(9);
    net = std::make_unique<ConvBnDropNet>();
    opt = train::make_optimizer("momentum", train::trainable_names(*net), 0.05);
    o.mode = mode;
    model = std::make_unique<train::Model>(*net, train::loss_of(ce), *opt, std::vector<std::string>{"accuracy"}, o);
  }
};

void expect_same_state(nn::Cell& a, nn::Cell& b) {
  const auto pa = a.parameters_and_names(), pb = b.parameters_and_names();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(pa[i].second->bit_equal(*pb[i].second)) << pa[i].first;
}

TEST(TrainModel, BatchNormAndDropoutTrainBitIdenticallyInBothModes) {
  init();
  const data::Dataset ds = quadrant_data(40, 2, 16);  // 16, 16, 8: two plan signatures
  BnDropTrainer a("pynative"), b("graph");
  const Tensor mean0 = a.net->bn.moving_mean().clone();
  const std::vector<double> la = step_losses(*a.model, ds, 1), lb = step_losses(*b.model, ds, 1);
  ASSERT_EQ(la.size(), 3u);
  expect_bit_equal(la, lb);
  EXPECT_FALSE(a.net->bn.moving_mean().bit_equal(mean0));  // running stats updated...
  EXPECT_FALSE(b.net->bn.moving_mean().is_symbolic());     // ...in graph mode too, as concrete tensors
  expect_same_state(*a.net, *b.net);                       // parameters and running stats, bit for bit
  EXPECT_EQ(a.net->drop.calls(), 3);
  // The graph step replays one plan per signature yet draws a fresh mask per step: a second epoch still
  // matches PyNative (whose masks are keyed on the step), and eval (running stats) agrees too - to rounding:
  // graph-mode eval runs the inference graph, where batch_norm is folded into the conv's weights and bias, so
  // its activations differ from PyNative's conv-then-BN in the last bits (measured: ~half of them, by <= 2
  // ulp); the logits and loss follow within float rounding, not bit for bit.
  expect_bit_equal(step_losses(*a.model, ds, 1), step_losses(*b.model, ds, 1));
  expect_same_state(*a.net, *b.net);
  const std::map<std::string, double> ea = a.model->eval(ds), eb = b.model->eval(ds);
  EXPECT_NEAR(ea.at("loss"), eb.at("loss"), 1e-6 * std::abs(ea.at("loss")));
  EXPECT_EQ(ea.at("accuracy"), eb.at("accuracy"));

  // Gradient accumulation with BN and dropout: each micro-batch has its own mask and updates the stats.
  train::ModelOptions o;
  o.grad_accumulation = 2;
  o.clip_norm = 1.0;
  BnDropTrainer c("pynative", o), d("graph", o);
  expect_bit_equal(step_losses(*c.model, ds, 2), step_losses(*d.model, ds, 2));
  expect_same_state(*c.net, *d.net);
  EXPECT_EQ(c.model->global_step(), 3);  // 3 micro-batches per epoch, 2 epochs, 2 per step
}

TEST(TrainModel, BatchNormAndDropoutThreadCountDoesNotMatter) {
  init();
  const data::Dataset ds = quadrant_data(32, 6, 16);
  for (const char* mode : {"pynative", "graph"}) {
    SCOPED_TRACE(mode);
    set_threads(1);
    BnDropTrainer a(mode);
    const std::vector<double> l1 = step_losses(*a.model, ds, 2);
    set_threads(2);
    BnDropTrainer b(mode);
    const std::vector<double> l2 = step_losses(*b.model, ds, 2);
    set_threads(0);
    expect_bit_equal(l1, l2);
    expect_same_state(*a.net, *b.net);
  }
}

TEST(TrainModel, EvalReportsTheRequestedMetrics) {
  init();
  const data::Dataset train_ds = quadrant_data(64, 13, 16), test_ds = quadrant_data(48, 14, 16);
  nn::set_seed(7);
  auto net = train::make_model("mlp", {1, 8, 8}, 4);
  auto opt = train::make_optimizer("sgd", train::trainable_names(*net), 0.1);
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
  const std::vector<std::string> names{"accuracy", "top2_accuracy", "precision", "recall", "f1", "loss"};
  train::ModelOptions g;
  g.mode = "graph";
  train::Model model(*net, train::loss_of(ce), *opt, names, g);
  model.train(1, train_ds);
  const std::map<std::string, double> m = model.eval(test_ds);
  EXPECT_EQ(m.size(), names.size() + 1);  // + samples ("loss" is one of the names)
  for (const std::string& n : names) {
    ASSERT_TRUE(m.count(n)) << n;
    EXPECT_GE(m.at(n), 0.0) << n;
  }
  EXPECT_EQ(m.at("samples"), 48);
  EXPECT_GE(m.at("top2_accuracy"), m.at("accuracy"));
  // The metrics agree with make_metric over the same logits.
  auto acc = train::make_metric("accuracy"), f1 = train::make_metric("f1");
  for (int64_t b = 0; b < test_ds.batches_per_epoch(); ++b) {
    const data::Batch batch = test_ds.make_batch(0, b, test_ds.epoch_order(0));
    const Tensor logits = model.predict(batch.x);
    acc->update(logits, batch.y);
    f1->update(logits, batch.y);
  }
  EXPECT_EQ(m.at("accuracy"), acc->value());
  EXPECT_EQ(m.at("f1"), f1->value());
  EXPECT_NE(testing::error_of([&] { train::Model(*net, train::loss_of(ce), *opt, {"top0_accuracy"}); })
                .find("unknown metric 'top0_accuracy'"),
            std::string::npos);
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
  EXPECT_EQ(sn->num_parameters(), 64 * 9 + 64 + 64 * 14 * 14 * 10 + 10);
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

namespace spore {
namespace {

// ---- mixed precision (ops/autocast.h) and loss scaling (train::LossScale)

TEST(Autocast, LevelsCastByTheListsThroughExplicitCastNodes) {
  init();
  const Tensor x = Tensor::from_doubles({0.5, -1.0, 2.0, 0.25, 1.5, -0.75}, {2, 3}, DType::f32);
  const Tensor w = Tensor::from_doubles({0.1, 0.2, -0.3, 0.4, 0.5, -0.6}, {2, 3}, DType::f32);
  EXPECT_EQ(ops::linear(x, w).dtype(), DType::f32);  // no scope
  {
    ops::AutocastScope s(ops::AmpLevel::O1, DType::bf16);
    EXPECT_EQ(ops::linear(x, w).dtype(), DType::bf16);                      // whitelist
    EXPECT_EQ(ops::relu(x).dtype(), DType::f32);                             // not listed, one dtype: as it is
    EXPECT_EQ(ops::add(x, ops::cast(x, DType::bf16)).dtype(), DType::f32);  // mixed: f32
  }
  {
    ops::AutocastScope s(ops::AmpLevel::O2, DType::f16);
    EXPECT_EQ(ops::relu(x).dtype(), DType::f16);
    EXPECT_EQ(ops::softmax(ops::cast(x, DType::f16), -1).dtype(), DType::f32);  // blacklist: f32
    EXPECT_EQ(ops::reduce_sum(x).dtype(), DType::f32);
    EXPECT_EQ(ops::cast(x, DType::f64).dtype(), DType::f64);  // casts and f64 are left alone
  }
  {
    ops::AutocastScope s(ops::AmpLevel::O3, DType::bf16);
    EXPECT_EQ(ops::softmax(x, -1).dtype(), DType::bf16);
  }
  EXPECT_THROW(ops::parse_amp_level("O4"), Error);
  EXPECT_THROW(ops::AutocastScope(ops::AmpLevel::O2, DType::f32), Error);
}

Trainer amp_trainer(const std::string& mode, const std::string& level, DType low, train::LossScale ls) {
  train::ModelOptions o;
  o.amp_level = level;
  o.amp_dtype = low;
  o.loss_scale = ls;
  return Trainer("simplenet", mode, "momentum", o);
}

TEST(TrainModel, MixedPrecisionLearnsKeepsF32MasterWeightsAndModesAgree) {
  init();
  const data::Dataset ds = quadrant_data(96, 11, 16);
  train::LossScale dyn;
  dyn.kind = "dynamic";
  dyn.scale = 1024;
  for (DType low : {DType::bf16, DType::f16}) {
    Trainer g = amp_trainer("graph", "O2", low, dyn), p = amp_trainer("pynative", "O2", low, dyn);
    const std::vector<double> lg = step_losses(*g.model, ds, 3), lp = step_losses(*p.model, ds, 3);
    SCOPED_TRACE(dtype_name(low));
    expect_bit_equal(lg, lp);
    EXPECT_LT(lg.back(), 0.7 * lg.front());  // it learns
    for (auto& [name, t] : g.net->parameters_and_names()) EXPECT_EQ(t->dtype(), DType::f32) << name;
    // the step plan computes in the low dtype: casts are nodes of it
    int64_t low_ops = 0;
    for (const Node* n : g.model->compiled_plan("step")->graph().nodes())
      if (!n->outputs.empty() && n->outputs[0]->type.dtype == low) ++low_ops;
    EXPECT_GT(low_ops, 10);
  }
}

TEST(TrainModel, LossScalingSkipsOverflowedStepsAndAdjustsTheScale) {
  init();
  const data::Dataset ds = quadrant_data(64, 13, 16);  // 4 steps per epoch
  for (const char* mode : {"graph", "pynative"}) {
    SCOPED_TRACE(mode);
    // f16 gradients of a 2^24-scaled loss overflow: the step is skipped (parameters and step count unchanged) and
    // the dynamic scale halves, until it fits.
    train::LossScale dyn;
    dyn.kind = "dynamic";
    dyn.scale = 16777216.0;
    dyn.window = 2;
    Trainer t = amp_trainer(mode, "O2", DType::f16, dyn);
    std::vector<Tensor> before;
    for (auto& [n, p] : t.net->parameters_and_names()) before.push_back(p->clone());
    const data::Batch b = ds.make_batch(0, 0);
    t.model->train_step(b.x, b.y);
    EXPECT_TRUE(t.model->last_step_overflowed());
    EXPECT_EQ(t.model->global_step(), 0);
    EXPECT_EQ(t.model->loss_scale(), 8388608.0);
    size_t i = 0;
    for (auto& [n, p] : t.net->parameters_and_names()) EXPECT_TRUE(p->bit_equal(before[i++])) << n;
    while (t.model->last_step_overflowed()) t.model->train_step(b.x, b.y);
    const double fitted = t.model->loss_scale();
    EXPECT_EQ(t.model->global_step(), 1);
    t.model->train_step(b.x, b.y);  // the second good step in a row: window 2 doubles the scale
    EXPECT_EQ(t.model->loss_scale(), 2 * fitted);

    // fixed: the scale never moves; with drop_overflow_update the overflowed step is skipped
    train::LossScale fixed;
    fixed.kind = "fixed";
    fixed.scale = 16777216.0;
    Trainer f = amp_trainer(mode, "O2", DType::f16, fixed);
    f.model->train_step(b.x, b.y);
    EXPECT_TRUE(f.model->last_step_overflowed());
    EXPECT_EQ(f.model->global_step(), 0);
    EXPECT_EQ(f.model->loss_scale(), 16777216.0);
    EXPECT_EQ(f.model->overflow_steps(), 1);
  }
  train::LossScale bad;
  bad.kind = "sometimes";
  EXPECT_THROW(amp_trainer("graph", "O2", DType::bf16, bad), Error);
  EXPECT_THROW(amp_trainer("graph", "O5", DType::bf16, {}), Error);
}

}  // namespace
}  // namespace spore
