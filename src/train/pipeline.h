#pragma once
// Pipeline parallelism for the decoder LM (`spore train-lm --parallel pipeline`, issue 26): the blocks of an
// nn::LlamaModel split into S contiguous stages, one per rank of parallel::world() (the token embedding on the first,
// the final norm, the output matrix and the loss on the last). Each optimizer step runs M micro-batches (the LM's
// `accum`): a stage receives its input activations from the previous rank, sends its output to the next, and in
// backward receives the gradient of its output and sends the gradient of its input back, in the order of a GPipe
// (all forwards, then all backwards) or 1F1B (PipeDream-flush: S - s - 1 forwards of warm-up, then one forward and one
// backward in turn) schedule.
//
// Equal to one process: a stage runs the same ops as LlamaModel::construct on the same inputs (forward_part), the
// gradient a stage receives is the one the whole model's backward gives at that point, and each stage sums its
// micro-batches' gradients from zeros in micro-batch order, divides by M, clips by the global norm (the squared norms
// added in parameter order, handed from stage to stage) and steps AdamW as train::Model does with
// grad_accumulation M. So losses, parameters, checkpoints and the GGUF are the bits of `spore train-lm --accum M`
// (tests/parallel/pp_train_lm_test.py). Checkpoints have train::Model's format: rank 0 gathers every stage's
// parameters and AdamW state and writes them; every rank loads the whole file and keeps its stage's part, so a
// pipeline run resumes from a one-process checkpoint of the same run and the other way round.
//
// Data x pipeline: with W = D x S ranks (o.model_parallel_ranks = S), D replicas of the pipeline each run M / D of the
// micro-batches, and each stage's accumulated gradients are summed over its counterparts in the other replicas before
// the step (LmParallelTrainer::sum_replicas; model_parallel.h).
//
// Limits: every rank builds the whole model (and keeps optimizer state for its stage only); f32 (amp O0) only; no
// tied embeddings (the matrix would live on two stages).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "train/lm.h"

namespace spore::train {

// One entry of a stage's schedule: the forward or the backward of micro-batch `micro`.
struct PipeOp {
  bool forward = true;
  int64_t micro = 0;
  bool operator==(const PipeOp&) const = default;
};

// The order in which stage `stage` of `stages` runs the forwards and backwards of `micro` micro-batches:
// "gpipe" (F0..F(M-1), B0..B(M-1)) or "1f1b" (min(S - s - 1, M) forwards, then F and B in turn, then the remaining
// backwards). Backwards always run in micro-batch order, which is the order the gradients are summed in.
std::vector<PipeOp> pipeline_schedule(const std::string& kind, int64_t stages, int64_t stage, int64_t micro);

// The blocks [first, last) of stage `stage` when `layers` blocks split into `stages` contiguous stages (the first
// layers % stages stages take one more).
std::pair<int64_t, int64_t> pipeline_stage_layers(int64_t layers, int64_t stages, int64_t stage);

// train_decoder (train/lm.h) over the pipeline: every rank of parallel::world() calls it with the same model (same
// seed), data and options; o.accum is the micro-batch count M; schedule "gpipe" | "1f1b". Rank 0 writes the
// checkpoints, and on return rank 0's `net` holds every stage's trained parameters (for the GGUF); every rank's report
// has the step losses and validation losses.
LmReport train_decoder_pipeline(nn::LlamaModel& net, const LmTokens& data, int64_t ctx, const LmRunOptions& o,
                                const std::string& schedule, const std::string& key,
                                const std::function<void(const LmProgress&)>& on_progress);

}  // namespace spore::train
