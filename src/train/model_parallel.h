#pragma once
// What the model-parallel LM trainers (pipeline, train/pipeline.h; tensor parallel, train/tensor_parallel.h) share:
// train_decoder's loop (batches, progress, evaluation, resumable checkpoints in train::Model's format, state.json)
// over a trainer that knows how its ranks split the model. Internal to src/train.
#include <cstdint>
#include <functional>
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
  // One optimizer step over micro-batches (x, y) (their gradients' mean, as train::Model with grad_accumulation M):
  // the step's loss, the mean of the micro-batch losses, the same on every rank.
  virtual double train_step(const std::vector<std::pair<Tensor, Tensor>>& batches) = 0;
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
};

// The start-up checks every model-parallel run makes (options, f32, no data parallel, no masks) and that all ranks run
// the same model, run and `what` (check_same_config).
void check_model_parallel_run(parallel::Communicator& comm, nn::LlamaModel& net, const LmTokens& data, int64_t ctx,
                              const LmRunOptions& o, const std::string& key, const std::string& what);

// train_decoder's loop over `trainer`: the same batches (micro-batch m = step * accum + i), progress, evaluation,
// checkpoints and report. Rank 0 writes the files; on return rank 0's `net` holds the trained parameters.
LmReport run_model_parallel_lm(LmParallelTrainer& trainer, parallel::Communicator& comm, nn::LlamaModel& net,
                               const LmTokens& data, int64_t ctx, const LmRunOptions& o, const std::string& key,
                               const std::function<void(const LmProgress&)>& on_progress);

// The next-token cross entropy train_decoder trains on: mean over the micro-batch's tokens.
Tensor lm_mean_loss(const Tensor& logits, const Tensor& labels);

}  // namespace spore::train
