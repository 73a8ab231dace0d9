#pragma once
// What the model-parallel LM trainers (pipeline, train/pipeline.h; tensor parallel, train/tensor_parallel.h) share:
// train_decoder's loop (batches, progress, evaluation, resumable checkpoints in train::Model's format, state.json)
// over a trainer that knows how its ranks split the model. Internal to src/train.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "train/lm.h"

namespace spore::parallel {
class Communicator;
}

namespace spore::train {

class LmParallelTrainer {
 public:
  virtual ~LmParallelTrainer() = default;
  // One optimizer step over this replica's micro-batches (x, y): their gradients summed from zeros in order, summed
  // over the replicas (sum_replicas), divided by the step's micro-batch count (all replicas'), clipped and stepped as
  // train::Model with grad_accumulation M does. Returns this replica's micro-batch losses, the same on each of its
  // ranks.
  virtual std::vector<double> train_step(const std::vector<std::pair<Tensor, Tensor>>& batches) = 0;
  // An evaluation batch: the mean next-token cross entropy and the target count, the same on every rank.
  virtual std::pair<double, int64_t> eval_batch(const Tensor& x, const Tensor& y) = 0;
  // Collective: rank 0 writes the whole model and optimizer state (train::save_checkpoint) to `path`.
  virtual void save(const std::string& path) = 0;
  // Every rank reads the whole checkpoint and keeps its part.
  virtual void load(const std::string& path) = 0;
  // Collective: rank 0's model gets every rank's parameters (for the GGUF).
  virtual void gather_parameters() = 0;
  virtual int64_t step() const = 0;
  virtual double lr_at(int64_t step) const = 0;

  // Data parallel over model replicas: `replicas` holds this rank and the ranks with the same part of the model in
  // the other replicas (null: one replica).
  void set_replicas(parallel::Communicator* replicas) { replicas_ = replicas; }
  int64_t replica_count() const;

 protected:
  // Replica 0 writes checkpoints (the others skip their gather).
  bool writes() const;
  // The replicas' accumulated gradients summed in replica order (one deterministic allreduce of a flat f32 vector).
  void sum_replicas(std::vector<Tensor>& accum) const;

 private:
  parallel::Communicator* replicas_ = nullptr;
};

// The communicators of a model-parallel run of `ranks_per_replica` ranks per replica (0: all) on `world`: `model`,
// the ranks of this rank's replica (consecutive world ranks, in order), and `replicas`, this rank's counterparts in
// every replica (null with one replica; then model is world itself).
struct ModelParallelGroups {
  parallel::Communicator* model = nullptr;
  parallel::Communicator* replicas = nullptr;
  std::unique_ptr<parallel::Communicator> owned_model, owned_replicas;
};
ModelParallelGroups split_model_parallel(parallel::Communicator& world, int64_t ranks_per_replica,
                                         const LmRunOptions& o, const std::string& what);

// The start-up checks every model-parallel run makes (options, f32, no data parallel, no masks) and that all ranks run
// the same model, run and `what` (check_same_config).
void check_model_parallel_run(parallel::Communicator& comm, nn::LlamaModel& net, const LmTokens& data, int64_t ctx,
                              const LmRunOptions& o, const std::string& key, const std::string& what);

// train_decoder's loop over `trainer`: the same batches (micro-batch m = step * accum + i; replica d of D the
// micro-batches [d M/D, (d+1) M/D)), progress, evaluation, checkpoints and report; the step loss is every micro-batch's
// loss added in micro-batch order / M, as train_decoder has it. Rank 0 writes the files; on return rank 0's `net` holds
// the trained parameters.
LmReport run_model_parallel_lm(LmParallelTrainer& trainer, parallel::Communicator& comm, nn::LlamaModel& net,
                               const LmTokens& data, int64_t ctx, const LmRunOptions& o, const std::string& key,
                               const std::function<void(const LmProgress&)>& on_progress,
                               parallel::Communicator* replicas = nullptr);

// The next-token cross entropy train_decoder trains on: mean over the micro-batch's tokens.
Tensor lm_mean_loss(const Tensor& logits, const Tensor& labels);

// What train_decoder (lm.cpp) and run_model_parallel_lm share, defined in lm.cpp, so both see the same data and write
// checkpoints either may resume:
// The training-window offset of row b of micro-batch m (of B rows) over n_train tokens with windows of T + 1.
int64_t lm_window_offset(uint64_t seed, uint64_t m, int64_t B, int64_t b, int64_t n_train, int64_t T);
// x, y i64 [B, T]: windows of T + 1 tokens at the offsets; a label that `mask` (when not empty) says is no target is
// -1.
std::pair<Tensor, Tensor> lm_windows(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& mask,
                                     const std::vector<int64_t>& offsets, int64_t T);
// The run options a checkpoint directory's state.json must match to be resumed.
std::string lm_run_key(const LmRunOptions& o);
// When <ckpt_dir>/state.json and checkpoint.safetensors exist: checks the state was written for `data_key` and this
// run, calls load(checkpoint path), takes its step losses and validation curve into rep (their count must equal
// step()), reports a "resume" progress; returns whether it resumed.
bool resume_lm_run(const LmRunOptions& o, const std::string& data_key,
                   const std::function<void(const std::string&)>& load, const std::function<int64_t()>& step,
                   LmReport& rep, const std::function<void(const LmProgress&)>& progress);
// Rank 0 after a checkpoint was saved to <ckpt_dir>/checkpoint.safetensors.tmp: moves it in place and writes state.json
// (atomically) for `step`.
void commit_lm_checkpoint(const LmRunOptions& o, const std::string& data_key, int64_t step, const LmReport& rep);
// The steps' bookkeeping of a training loop: after step `step` (0-based) took `seconds` over `tokens` tokens with the
// mean loss `loss`, records it in rep, reports a "step" progress, and every eval_every steps and at the last step
// evaluates (an "eval" progress with the interval's mean training loss) and saves; at `last` (an interrupted run's
// stop) it saves without evaluating. finish() fills the report's totals once the loop is done.
class LmStepLog {
 public:
  LmStepLog(const LmRunOptions& o, LmReport& rep, std::function<void(const LmProgress&)> progress,
            std::function<double()> evaluate, std::function<void()> save)
      : o_(o), rep_(rep), progress_(std::move(progress)), evaluate_(std::move(evaluate)), save_(std::move(save)) {}
  void step_done(int64_t step, int64_t last, double loss, double lr, double seconds, int64_t tokens);
  void finish(int64_t steps, const std::string& checkpoint);

 private:
  const LmRunOptions& o_;
  LmReport& rep_;
  std::function<void(const LmProgress&)> progress_;
  std::function<double()> evaluate_;
  std::function<void()> save_;
  double train_s_ = 0, interval_loss_ = 0;
  int64_t interval_steps_ = 0, tokens_done_ = 0;
};

}  // namespace spore::train
