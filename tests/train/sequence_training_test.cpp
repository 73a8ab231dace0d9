// Sequence models train end to end through train::Model: an LSTM and a GRU on tasks that need memory over
// the sequence, and a small Transformer encoder on a token task that needs attention across positions.
// Each must cut its held-out loss by >= 10x. Graph-mode variants also check that the first steps' losses are
// bit-identical to PyNative's, and skip (naming the reason) while Model refuses the net in graph mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/rng.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/rnn.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "runtime/runtime.h"
#include "train/model.h"

namespace spore {
namespace {

// ---- tasks (all data from Philox, so every run sees the same samples)

// Sum task: x [n, T, 1] uniform in [-1, 1); y [n, 1] = sum over t of x. The answer depends on every step, so
// the recurrent state must accumulate the whole sequence. Var(y) = T / 3: a constant predictor's MSE.
data::Sample sum_task(int64_t n, int64_t steps, uint64_t seed) {
  std::vector<double> x(static_cast<size_t>(n * steps)), y(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < steps; ++t) {
      const double v = 2.0 * philox_uniform(seed, 1, static_cast<uint64_t>(i * steps + t)) - 1.0;
      x[static_cast<size_t>(i * steps + t)] = v;
      y[static_cast<size_t>(i)] += v;
    }
  return {Tensor::from_doubles(x, {n, steps, 1}, DType::f32), Tensor::from_doubles(y, {n, 1}, DType::f32)};
}

// First-token task: x [n, T, V] one-hot tokens drawn uniformly from V; y [n] = the token at t = 0. The label is
// seen only at the first step and must survive T - 1 distractors.
data::Sample first_token_task(int64_t n, int64_t steps, int64_t vocab, uint64_t seed) {
  std::vector<double> x(static_cast<size_t>(n * steps * vocab), 0.0);
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t tok =
          static_cast<int64_t>(philox_uniform(seed, 2, static_cast<uint64_t>(i * steps + t)) * vocab) % vocab;
      x[static_cast<size_t>((i * steps + t) * vocab + tok)] = 1.0;
      if (t == 0) y[static_cast<size_t>(i)] = tok;
    }
  return {Tensor::from_doubles(x, {n, steps, vocab}, DType::f32), Tensor::from_vector<int64_t>(y, {n})};
}

// Reverse task: x [n, L] i64 tokens from V; y [n, L] = x reversed. Output position i needs the token at
// position L - 1 - i: attention plus positional information, no shortcut through the residual path.
data::Sample reverse_task(int64_t n, int64_t len, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> x(static_cast<size_t>(n * len)), y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < len; ++p)
      x[static_cast<size_t>(i * len + p)] =
          static_cast<int64_t>(philox_uniform(seed, 3, static_cast<uint64_t>(i * len + p)) * vocab) % vocab;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < len; ++p)
      y[static_cast<size_t>(i * len + p)] = x[static_cast<size_t>(i * len + len - 1 - p)];
  return {Tensor::from_vector<int64_t>(x, {n, len}), Tensor::from_vector<int64_t>(y, {n, len})};
}

// ---- networks

// A 2-layer batch-first RNN (LSTM or GRU) read out by a Dense head at the last step.
template <typename Rnn>
struct RnnNet : nn::Cell {
  Rnn rnn;
  nn::Dense head;
  RnnNet(int64_t in, int64_t hidden, int64_t out) : rnn(in, hidden, 2, true, true), head(hidden, out) {
    SPORE_REGISTER_CELLS(rnn, head);
  }
  Tensor construct(const Tensor& x) override {
    const Tensor seq = rnn(x);  // [N, T, H]
    const int64_t t = seq.dim(1);
    return head(ops::squeeze(ops::slice(seq, {t - 1}, {t}, {1}), {1}));
  }
};

// Token + learned position embeddings, two post-norm encoder layers (dropout 0), a per-position vocab head.
struct TinyEncoder : nn::Cell {
  nn::Embedding tok;
  nn::TransformerEncoderLayer enc1, enc2;
  nn::Dense head;
  Tensor* pos;
  TinyEncoder(int64_t vocab, int64_t len, int64_t d_model)
      : tok(vocab, d_model),
        enc1(d_model, 4, 2 * d_model, 0.0),
        enc2(d_model, 4, 2 * d_model, 0.0),
        head(d_model, vocab) {
    pos = &register_parameter("pos", nn::init::normal({len, d_model}, 0.0, 1.0));
    SPORE_REGISTER_CELLS(tok, enc1, enc2, head);
  }
  Tensor construct(const Tensor& ids) override {
    const Tensor h = ops::add(tok(ids), *pos);  // [N, L, E] + [L, E]
    return head(enc2(enc1(h)));                 // [N, L, V]
  }
};

// ---- training harness

enum class LossKind { mse, class_ce, token_ce };

struct Task {
  std::function<std::unique_ptr<nn::Cell>()> make_net;
  LossKind loss;
  data::Dataset train_ds, eval_ds;
  int64_t epochs;
  double lr;
};

// One net + Adam + Model in `mode`, built from nn seed 7 (so both modes start from the same weights).
struct Trainer {
  std::unique_ptr<nn::Cell> net;
  nn::MSELoss mse{"mean"};
  nn::SoftmaxCrossEntropyWithLogits ce{true, "mean"};
  std::unique_ptr<train::Optimizer> opt;
  std::unique_ptr<train::Model> model;
  Trainer(const Task& task, const std::string& mode) {
    nn::set_seed(7);
    net = task.make_net();
    train::AdamOptions ao;
    ao.lr = task.lr;
    opt = train::make_adam(train::trainable_names(*net), ao);
    train::LossFn loss;
    if (task.loss == LossKind::mse) {
      loss = train::loss_of(mse);
    } else if (task.loss == LossKind::class_ce) {
      loss = train::loss_of(ce);
    } else {
      // [N, L, V] logits against [N, L] ids: every position is a sample.
      loss = [this](const Tensor& logits, const Tensor& labels) {
        return ce(ops::reshape(logits, {-1, logits.dim(-1)}), ops::reshape(labels, {-1}));
      };
    }
    train::ModelOptions mo;
    mo.mode = mode;
    model = std::make_unique<train::Model>(*net, std::move(loss), *opt, std::vector<std::string>{}, mo);
  }
};

// The message of an ErrorCode::unsupported thrown by fn ("" if none); other errors propagate.
std::string unsupported_reason(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::unsupported) throw;
    return e.what();
  }
  return "";
}

struct RunResult {
  std::vector<double> step_losses;
  double eval_before = 0, eval_after = 0, seconds = 0;
};

RunResult run(Trainer& t, const Task& task) {
  RunResult r;
  struct Record : train::Callback {
    std::vector<double>* out = nullptr;
    void on_step_end(train::RunContext& c) override { out->push_back(c.loss); }
  };
  auto rec = std::make_shared<Record>();
  rec->out = &r.step_losses;
  const auto start = std::chrono::steady_clock::now();
  r.eval_before = t.model->eval(task.eval_ds).at("loss");
  t.model->train(task.epochs, task.train_ds, {rec});
  r.eval_after = t.model->eval(task.eval_ds).at("loss");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// The acceptance criterion, plus a one-line record of the run (steps, losses, wall time) for the logs.
void expect_learns(const RunResult& r, const std::string& what) {
  ASSERT_FALSE(r.step_losses.empty());
  std::printf("[ seqtrain ] %s: %zu steps, held-out loss %.4g -> %.4g (x%.1f), train loss %.4g -> %.4g, %.2f s\n",
              what.c_str(), r.step_losses.size(), r.eval_before, r.eval_after, r.eval_before / r.eval_after,
              r.step_losses.front(), r.step_losses.back(), r.seconds);
  EXPECT_LE(r.eval_after, r.eval_before / 10) << what;
  EXPECT_LE(r.step_losses.back(), r.step_losses.front() / 10) << what;
}

// Graph mode: learns too, and its first steps are bit-identical to PyNative's from the same weights.
void check_graph_mode(const Task& task, Trainer& graph, const std::string& what) {
  const RunResult g = run(graph, task);
  expect_learns(g, what + " (graph)");
  Trainer eager(task, "pynative");
  const std::vector<int64_t> order = task.train_ds.epoch_order(0);
  const int64_t k = std::min<int64_t>(5, task.train_ds.batches_per_epoch());
  for (int64_t b = 0; b < k; ++b) {
    const data::Batch batch = task.train_ds.make_batch(0, b, order);
    EXPECT_EQ(eager.model->train_step(batch.x, batch.y), g.step_losses[static_cast<size_t>(b)])
        << what << " step " << b;
  }
}

Task sum_lstm_task() {
  const int64_t steps = 10;
  const data::Sample tr = sum_task(512, steps, 11), ev = sum_task(256, steps, 12);
  return {[=] { return std::make_unique<RnnNet<nn::LSTM>>(1, 32, 1); },
          LossKind::mse,
          data::Dataset::from_tensors(tr.x, tr.y).shuffle(1).batch(32, true),
          data::Dataset::from_tensors(ev.x, ev.y).batch(128),
          /*epochs=*/5,
          /*lr=*/1e-2};
}

Task first_token_gru_task() {
  const int64_t steps = 8, vocab = 4;
  const data::Sample tr = first_token_task(512, steps, vocab, 21), ev = first_token_task(256, steps, vocab, 22);
  return {[=] { return std::make_unique<RnnNet<nn::GRU>>(vocab, 32, vocab); },
          LossKind::class_ce,
          data::Dataset::from_tensors(tr.x, tr.y).shuffle(2).batch(32, true),
          data::Dataset::from_tensors(ev.x, ev.y).batch(128),
          /*epochs=*/6,
          /*lr=*/1e-2};
}

Task reverse_transformer_task() {
  const int64_t len = 8, vocab = 8;
  const data::Sample tr = reverse_task(1024, len, vocab, 31), ev = reverse_task(256, len, vocab, 32);
  return {[=] { return std::make_unique<TinyEncoder>(vocab, len, 32); },
          LossKind::token_ce,
          data::Dataset::from_tensors(tr.x, tr.y).shuffle(3).batch(32, true),
          data::Dataset::from_tensors(ev.x, ev.y).batch(128),
          /*epochs=*/2,
          /*lr=*/5e-3};
}

TEST(SeqTrain, LstmLearnsRunningSumPynative) {
  init();
  const Task task = sum_lstm_task();
  Trainer t(task, "pynative");
  expect_learns(run(t, task), "LSTM sum (pynative)");
}

TEST(SeqTrain, LstmLearnsRunningSumGraph) {
  init();
  const Task task = sum_lstm_task();
  std::unique_ptr<Trainer> t;
  const std::string why = unsupported_reason([&] { t = std::make_unique<Trainer>(task, "graph"); });
  ASSERT_TRUE(why.empty()) << "graph mode refuses the LSTM net: " << why;
  check_graph_mode(task, *t, "LSTM sum");
}

TEST(SeqTrain, GruLearnsFirstTokenPynative) {
  init();
  const Task task = first_token_gru_task();
  Trainer t(task, "pynative");
  expect_learns(run(t, task), "GRU first token (pynative)");
}

TEST(SeqTrain, GruLearnsFirstTokenGraph) {
  init();
  const Task task = first_token_gru_task();
  std::unique_ptr<Trainer> t;
  const std::string why = unsupported_reason([&] { t = std::make_unique<Trainer>(task, "graph"); });
  ASSERT_TRUE(why.empty()) << "graph mode refuses the GRU net: " << why;
  check_graph_mode(task, *t, "GRU first token");
}

TEST(SeqTrain, TransformerLearnsReversePynative) {
  init();
  const Task task = reverse_transformer_task();
  Trainer t(task, "pynative");
  expect_learns(run(t, task), "Transformer reverse (pynative)");
}

TEST(SeqTrain, TransformerLearnsReverseGraph) {
  init();
  const Task task = reverse_transformer_task();
  std::unique_ptr<Trainer> t;
  const std::string why = unsupported_reason([&] { t = std::make_unique<Trainer>(task, "graph"); });
  ASSERT_TRUE(why.empty()) << "graph mode refuses the encoder (it holds Dropout cells, p = 0): " << why;
  check_graph_mode(task, *t, "Transformer reverse");
}

}  // namespace
}  // namespace spore
