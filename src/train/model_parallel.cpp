// The shared loop of the model-parallel LM trainers (train/model_parallel.h).
#include "train/model_parallel.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "base/error.h"
#include "nn/loss.h"
#include "ops/ops.h"
#include "parallel/communicator.h"
#include "train/model.h"

namespace spore::train {
namespace {
namespace fs = std::filesystem;
}  // namespace

int64_t LmParallelTrainer::replica_count() const { return replicas_ == nullptr ? 1 : replicas_->size(); }

bool LmParallelTrainer::writes() const { return replicas_ == nullptr || replicas_->rank() == 0; }

void LmParallelTrainer::sum_replicas(std::vector<Tensor>& accum) const {
  if (replica_count() == 1) return;
  int64_t total = 0;
  for (const Tensor& a : accum) {
    SPORE_ASSERT(a.dtype() == DType::f32, "accumulated gradients are f32");
    total += a.numel();
  }
  std::vector<float> flat(static_cast<size_t>(total));
  int64_t at = 0;
  for (const Tensor& a : accum) {
    const Tensor c = a.contiguous();
    std::memcpy(flat.data() + at, c.raw_data(), c.nbytes());
    at += c.numel();
  }
  replicas_->allreduce(flat.data(), total, DType::f32);
  at = 0;
  for (Tensor& a : accum) {
    Tensor r = Tensor::empty(a.shape(), DType::f32);
    std::memcpy(r.raw_data(), flat.data() + at, r.nbytes());
    at += r.numel();
    a = r;
  }
}

ModelParallelGroups split_model_parallel(parallel::Communicator& world, int64_t ranks_per_replica,
                                         const LmRunOptions& o, const std::string& what) {
  put_collectives_on_timeline();
  const int64_t W = world.size(), S = ranks_per_replica > 0 ? ranks_per_replica : W;
  SPORE_CHECK(S <= W && W % S == 0, ErrorCode::invalid_argument,
              "{} parallel: {} ranks per model replica do not divide the {} ranks (mpirun -np must be a multiple)",
              what, S, W);
  const int64_t D = W / S;
  SPORE_CHECK(o.accum % D == 0, ErrorCode::invalid_argument,
              "{} parallel over {} replicas: the {} micro-batches per step (--accum / --micro-batches) must divide "
              "among them",
              what, D, o.accum);
  ModelParallelGroups g;
  if (D == 1) {
    g.model = &world;
    return g;
  }
  const auto r = static_cast<int>(world.rank()), s = static_cast<int>(S);
  g.owned_model = world.split(r / s, r % s);
  g.owned_replicas = world.split(r % s, r / s);
  g.model = g.owned_model.get();
  g.replicas = g.owned_replicas.get();
  return g;
}

Tensor lm_mean_loss(const Tensor& logits, const Tensor& labels) {
  nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
  const int64_t V = logits.shape()[2];
  return ce(ops::reshape(logits, {-1, V}), ops::reshape(labels, {-1}));
}

void check_model_parallel_run(parallel::Communicator& comm, nn::LlamaModel& net, const LmTokens& data, int64_t ctx,
                              const LmRunOptions& o, const std::string& key, const std::string& what) {
  SPORE_CHECK(!o.ckpt_dir.empty(), ErrorCode::invalid_argument, "training needs a checkpoint directory");
  SPORE_CHECK(o.batch > 0 && o.steps > 0 && o.accum > 0 && o.warmup >= 0 && o.warmup < o.steps && o.eval_every >= 0 &&
                  o.eval_batches > 0,
              ErrorCode::invalid_argument,
              "training needs batch, steps, micro-batches, eval batches > 0 and 0 <= warmup < steps");
  SPORE_CHECK(std::isfinite(o.lr) && o.lr > 0 && o.clip >= 0 && o.weight_decay >= 0 && o.min_lr_ratio >= 0 &&
                  o.min_lr_ratio <= 1,
              ErrorCode::invalid_argument,
              "training needs lr > 0, clip >= 0, weight decay >= 0, min lr ratio in [0, 1]");
  SPORE_CHECK(o.amp_level == "O0", ErrorCode::unsupported, "{} parallel trains in f32 only (amp level {})", what,
              o.amp_level);
  SPORE_CHECK(!o.data_parallel, ErrorCode::unsupported,
              "{} parallel takes its data parallelism from the rank count (W ranks of --stages/--tp S: W / S "
              "replicas), not --parallel data",
              what);
  SPORE_CHECK(data.train_mask.empty() && data.val_mask.empty(), ErrorCode::unsupported,
              "{} parallel: masked targets (fine-tuning) are not supported", what);
  SPORE_CHECK(ctx > 0 && ctx <= net.config().ctx, ErrorCode::invalid_argument,
              "the training window {} must be in [1, the model's context {}]", ctx, net.config().ctx);
  parallel::check_same_config(
      comm, {{"model", key}, {"run", lm_run_key(o)}, {"parallel", what}, {"world", std::to_string(comm.size())}});
}

LmReport run_model_parallel_lm(LmParallelTrainer& trainer, parallel::Communicator& comm, nn::LlamaModel& net,
                               const LmTokens& data, int64_t ctx, const LmRunOptions& o, const std::string& key,
                               const std::function<void(const LmProgress&)>& on_progress,
                               parallel::Communicator* replicas) {
  trainer.set_replicas(replicas);
  const int64_t D = replicas == nullptr ? 1 : replicas->size(), d = replicas == nullptr ? 0 : replicas->rank();
  SPORE_CHECK(o.accum % D == 0, ErrorCode::invalid_argument,
              "{} micro-batches per step do not divide among {} replicas", o.accum, D);
  const int64_t own = o.accum / D;
  auto progress = [&](const LmProgress& p) {
    if (on_progress) on_progress(p);
  };
  const bool writer = comm.rank() == 0;
  const int64_t T = ctx, B = o.batch;
  const auto n_train = static_cast<int64_t>(data.train.size()), n_val = static_cast<int64_t>(data.val.size());
  SPORE_CHECK(n_train > T + 1 && n_val > T + 1, ErrorCode::invalid_argument,
              "the training ({}) or validation ({}) text has too few tokens for windows of ctx {} + 1", n_train, n_val,
              T);
  fs::create_directories(o.ckpt_dir);
  const fs::path dir(o.ckpt_dir);
  const fs::path ckpt = dir / "checkpoint.safetensors";

  LmReport rep;
  rep.vocab = net.config().vocab;
  rep.params = net.num_parameters();
  rep.train_tokens = n_train;
  rep.val_tokens = n_val;
  const std::string data_key = fmt::format("{}; data {} + {} tokens", key, n_train, n_val);
  resume_lm_run(
      o, data_key, [&](const std::string& path) { trainer.load(path); }, [&] { return trainer.step(); }, rep, progress);
  rep.start_step = trainer.step();

  auto save = [&] {
    trainer.save(ckpt.string() + ".tmp");
    if (writer) commit_lm_checkpoint(o, data_key, trainer.step(), rep);
    comm.barrier();
  };
  const int64_t n_windows = std::min<int64_t>(o.eval_batches * B, (n_val - 1) / T);
  auto evaluate = [&] {
    double total = 0;
    int64_t targets = 0;
    for (int64_t w0 = 0; w0 < n_windows; w0 += B) {
      std::vector<int64_t> offs;
      for (int64_t w = w0; w < std::min(n_windows, w0 + B); ++w) offs.push_back(w * T);
      auto [x, y] = lm_windows(data.val, {}, offs, T);
      const auto [mean, n] = trainer.eval_batch(x, y);
      total += mean * static_cast<double>(n);
      targets += n;
    }
    return targets > 0 ? total / static_cast<double>(targets) : 0.0;
  };

  LmStepLog log(o, rep, progress, evaluate, save);
  const int64_t last = o.stop_after > 0 ? std::min(o.steps, o.stop_after) : o.steps;
  for (int64_t step = trainer.step(); step < last; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::pair<Tensor, Tensor>> batches;
    for (int64_t i = d * own; i < (d + 1) * own; ++i) {
      const uint64_t m = static_cast<uint64_t>(step * o.accum + i);
      std::vector<int64_t> offs(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) offs[static_cast<size_t>(b)] = lm_window_offset(o.seed, m, B, b, n_train, T);
      batches.push_back(lm_windows(data.train, {}, offs, T));
    }
    std::vector<double> losses = trainer.train_step(batches);
    SPORE_ASSERT(static_cast<int64_t>(losses.size()) == own, "a replica's step returns its micro-batches' losses");
    if (D > 1) {
      std::vector<double> all(static_cast<size_t>(o.accum));
      replicas->allgather(losses.data(), all.data(), static_cast<int64_t>(sizeof(double)) * own);
      losses = std::move(all);
    }
    // train_decoder's step loss: the micro-batch losses (f32 items) added in double in micro-batch order, / M.
    double loss = 0;
    for (double l : losses) loss += l;
    loss /= static_cast<double>(o.accum);
    log.step_done(step, last, loss, trainer.lr_at(step),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), B * T * o.accum);
  }
  if (trainer.step() == rep.start_step && trainer.step() > 0) trainer.gather_parameters();  // resumed a finished run
  log.finish(trainer.step(), ckpt.string());
  return rep;
}

}  // namespace spore::train
