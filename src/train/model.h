#pragma once
// train::Model: MindSpore's high-level training API over a Cell, a loss and an optimizer.
//
//   nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
//   train::Model model(net, train::loss_of(ce), *opt, {"accuracy"}, {.mode = "graph"});
//   model.train(2, ds, {std::make_shared<train::LossMonitor>(100)});
//   std::map<std::string, double> m = model.eval(test_ds);   // {"accuracy", "loss"}
//   Tensor logits = model.predict(x);
//
// PyNative mode runs each step eagerly. Graph mode compiles ONE plan per step whose inputs are
// (x, y, lr, step, counter, params..., buffers..., state...) and outputs (loss, logits, new params..., new
// buffers..., new state...): parameters and buffers (BatchNorm's running stats) are graph inputs, so the cached
// plan sees every update. The eval/predict plan is an inference graph (batch_norm folded, dropout removed, with
// the parameters as constants; recompiled after they change); the step plans are training graphs, so graph
// mode training stays bit-identical to PyNative. Compiles take set_context()'s memory_optimize_level,
// max_device_memory, recompute and save_graphs.
// Both modes run the forward inside an nn::StepScope whose counter is the micro-step
// (step * grad_accumulation + micro-batch index; in graph mode a plan input), so Dropout draws a fresh mask
// each step and BatchNorm updates its running stats in both modes. With grad_accumulation N > 1 graph mode
// runs a "micro" plan per micro-batch ((x, y, counter, params, buffers, accum) -> (loss, logits, buffers',
// accum + grads)) and an "apply" plan every N ((lr, step, params, state, accum) -> (params', state'): mean =
// accum / N, clipping, the optimizer); PyNative does the same arithmetic, so both modes give the same bits.
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "nn/cell.h"
#include "ops/autocast.h"
#include "train/callbacks.h"
#include "train/optimizer.h"

namespace spore {
class CompiledFunction;
class Plan;
}
namespace spore::parallel {
class Communicator;
class CommThread;
}

namespace spore::train {

using LossFn = std::function<Tensor(const Tensor& logits, const Tensor& labels)>;
// Adapts a loss cell (which must reduce to a scalar) to a LossFn; the cell must outlive the function.
LossFn loss_of(nn::Cell& loss_cell);

// Dotted names of the cell's trainable parameters, in registration order (what an optimizer is built on).
std::vector<std::string> trainable_names(nn::Cell& net);

// Loss scaling (MindSpore's FixedLossScaleManager / DynamicLossScaleManager): the loss is multiplied by the scale
// before backward and the gradients divided by it after. An overflow (inf or nan in any gradient) skips the optimizer
// step (dynamic, or fixed with drop_overflow_update) and, dynamic, divides the scale by `factor`; `window` steps in a
// row without one multiply it by `factor`.
struct LossScale {
  std::string kind = "none";  // "none" | "fixed" | "dynamic"
  double scale = 1.0;         // fixed: the scale; dynamic: the initial scale (MindSpore's default: 2^24)
  double factor = 2.0;
  int64_t window = 2000;
  bool drop_overflow_update = true;  // fixed only (dynamic always skips)
};

// Data parallelism (MindSpore's set_auto_parallel_context(parallel_mode="data_parallel", gradients_mean=True)): each
// global batch (the dataset's batch) is cut into `grad_shards` M fixed micro-shards of batch / M rows; rank r of N
// computes shards [r M/N, (r+1) M/N) from its own rows of the batch (Model::train loads only those) and the shards'
// gradients and losses are summed by parallel::tree_sum in shard order - locally over its run of M/N shards, then
// across ranks by the communicator's allreduce, which continues the same tree. The step's gradient is that sum / M
// (gradients_mean, DistributedGradReducer's mean) or the sum; its loss is the losses' sum / M. As nothing depends on
// N, N = 1, 2, 4 ... give the same bits, given M: N must divide M and (N > 1) M / N be a power of two (a whole
// subtree; e.g. M = 6 runs on 1, 3 or 6 ranks).
// Dropout's counter is (step * grad_accumulation + micro-batch) * M + shard. grad_accumulation A > 1: each
// train_step is a micro-batch (reduced as above), the reduced gradients are summed in order and divided by A before
// the update. Loss scaling: the shards' backward runs on loss * scale, the gradients are divided by it, and a step
// whose reduced (accumulated) gradient is not finite is skipped on every rank - the allreduce carries any rank's
// overflow to all. Buffers (BatchNorm's running statistics): each shard normalizes with its own batch statistics (unless
// sync_bn, below) and updates the running statistics from the step's values; the new values are the mean
// of the M shards' (reduced with the gradients), so they do not depend on N either.
// Overlap (bucket_mb > 0): the flat vector is laid out in the order backward produces the gradients and cut into
// buckets of about bucket_mb MiB (PyTorch DDP's bucket_cap_mb); a bucket's local shard sum and allreduce run on a
// communication thread (parallel::CommThread) as soon as the last shard's plan has produced its last gradient
// (Plan::run's output callback), while backward computes the rest. Each element is still the same tree over the same
// shards, so the bits do not change with the bucket size. PyNative mode has no per-gradient callback: its buckets
// start after backward. bucket_mb 0: one allreduce of the whole vector after backward, on the calling thread.
// sync_bn (SyncBatchNorm): BatchNorm's batch mean and variance are those of the global batch - each rank's sums
// are allreduced inside the forward (and their gradients inside the backward), so N ranks match one process with
// the whole batch and ordinary BatchNorm within f32 rounding (the sums associate differently). It needs one shard
// per rank (grad_shards = the world size): shards that run one after another cannot share statistics.
// Puts every collective of this process's communicators (world and its groups) on the active profiler's timeline
// (`--profile`: one Chrome trace per rank) with its bytes, achieved bandwidth and time blocked on peers. The
// data-parallel Model and the model-parallel trainers call it before their first collective.
void put_collectives_on_timeline();

struct ParallelContext {
  std::string parallel_mode = "stand_alone";  // "stand_alone" | "data_parallel"
  int64_t grad_shards = 0;                    // M; 0: the world size
  bool gradients_mean = true;
  parallel::Communicator* comm = nullptr;  // null: parallel::world()
  double bucket_mb = 25;                   // gradient bucket size in MiB; 0: one allreduce after backward
  bool sync_bn = false;                    // BatchNorm statistics over the global batch
};

struct ModelOptions {
  std::string mode = "pynative";  // "pynative" | "graph"
  int64_t grad_accumulation = 1;  // micro-batches whose mean gradient makes one optimizer step
  double clip_norm = 0.0;         // > 0: clip gradients to this global norm
  uint64_t seed = 0;              // recorded in checkpoints
  // Mixed precision (ops/autocast.h): the forward and backward of each step run under an AutocastScope of this level
  // and low dtype; parameters, gradients given to the optimizer and its state stay f32 (master weights). Eval and
  // predict run on the f32 parameters without autocast.
  std::string amp_level = "O0";  // "O0" | "O1" | "O2" | "O3"
  DType amp_dtype = DType::bf16;  // f16 | bf16
  LossScale loss_scale;
  ParallelContext parallel;
};

class Model {
 public:
  // metrics: names for train::make_metric ("accuracy", "top<k>_accuracy", "loss", "precision", "recall",
  // "f1"); eval reports each by name, plus "loss" and "samples" always.
  Model(nn::Cell& net, LossFn loss_fn, Optimizer& opt, std::vector<std::string> metrics = {},
        ModelOptions options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Runs `epochs` more epochs over ds's batches (ds.repeat is ignored: the model drives epochs, from its
  // current epoch, so a resumed run sees the same shuffles). eval_ds, if given, is evaluated after each
  // epoch and its results are added to the callbacks' metrics as "eval_<name>".
  void train(int64_t epochs, const data::Dataset& ds, std::vector<std::shared_ptr<Callback>> callbacks = {},
             const data::Dataset* eval_ds = nullptr);
  // One micro-batch: forward, backward and (every grad_accumulation micro-batches) an optimizer step.
  // Returns the loss. Data parallel: one global step; x and y are this rank's rows of the global batch (rows
  // [rank * B/N, (rank+1) * B/N)), and the loss returned is the global batch's, the same on every rank.
  double train_step(const Tensor& x, const Tensor& y);

  std::map<std::string, double> eval(const data::Dataset& ds);
  Tensor predict(const Tensor& x);

  // Checkpoints: parameters (and buffers) under their dotted names, optimizer state under
  // "optimizer.<state name>", and step/epoch/seed/optimizer in the metadata. Data parallel: rank 0 writes, and every
  // rank returns once the file is complete (a barrier), so any rank may load it.
  // A checkpoint saved between steps of an epoch (a callback's on_step_end: spore train --ckpt-every) also records
  // the batches done in that epoch and the epoch's loss sum so far (metadata "batch", "epoch_loss_sum",
  // "epoch_samples"; loss scaling's state too), and train() resumed from it continues with the next batch, so the
  // run gives the uninterrupted run's bits. It must fall on an optimizer step (no pending accumulation).
  void save_checkpoint(const std::string& path) const;
  void load_checkpoint(const std::string& path);

  int64_t global_step() const { return step_; }
  // Loss scaling: the scale the next step uses, the steps skipped for overflow so far, whether the last one was.
  double loss_scale() const { return scale_; }
  int64_t overflow_steps() const { return overflow_steps_; }
  bool last_step_overflowed() const { return last_overflow_; }
  int64_t epoch() const { return epoch_; }
  const std::vector<Tensor>& optimizer_state() const { return state_; }
  nn::Cell& network() { return net_; }
  // The plan a graph-mode function last ran: "step" (forward + backward + update), "micro"/"apply"
  // (grad_accumulation > 1), "shard" (data parallel: one shard's forward + backward), "eval" (eval/predict: an
  // inference graph), "update" (PyNative's optimizer plan, and data parallel's);
  // null before its first run.
  const Plan* compiled_plan(const std::string& which) const;
  Optimizer& optimizer() { return opt_; }
  const ModelOptions& options() const { return opts_; }
  bool data_parallel() const { return comm_ != nullptr; }
  // Data parallel: the communicator and M (1 and the world size when stand-alone).
  parallel::Communicator* communicator() const { return comm_; }
  int64_t grad_shards() const { return shards_; }

 private:
  struct Traced;
  std::vector<Tensor> param_values() const;
  std::vector<Tensor> buffer_values() const;
  int64_t micro_step() const { return step_ * opts_.grad_accumulation + micro_; }
  void apply_update(std::vector<Tensor>& grads);
  double train_step_pynative(const Tensor& x, const Tensor& y);
  double train_step_graph(const Tensor& x, const Tensor& y);
  double train_micro_graph(const Tensor& x, const Tensor& y);
  double train_step_data_parallel(const Tensor& x, const Tensor& y);
  // One shard's forward and backward (graph: a cached plan; PyNative: eager), buffers updated. on_item gets each
  // item of the flat layout (gradient i, buffer np + i, the loss np + nb) once, as soon as it is final: in graph mode
  // while the plan runs, in PyNative mode after backward, in layout order. Makes the layout (dp_make_layout) first.
  using ItemFn = std::function<void(size_t item, const Tensor& value)>;
  void shard_forward_backward(const Tensor& x, const Tensor& y, int64_t counter, const ItemFn& on_item);
  // Data parallel: the start-up check that every rank runs the same model and settings (+ extra fields).
  void check_ranks_agree(std::vector<std::pair<std::string, std::string>> extra) const;
  // Under a trace: the forward and backward with parameters and buffers bound to the symbolic inputs.
  // `scale` (undefined: no loss scaling) multiplies the loss for backward; the gradients come back divided by it.
  Traced trace_forward_backward(const Tensor& x, const Tensor& y, const Tensor& counter,
                                std::span<const Tensor> params, std::span<const Tensor> buffers,
                                const Tensor& scale = Tensor());
  Tensor forward_eval(const Tensor& x);

  nn::Cell& net_;
  LossFn loss_fn_;
  Optimizer& opt_;
  std::vector<std::string> metrics_;
  ModelOptions opts_;
  std::vector<nn::Parameter*> slots_;    // trainable, in the optimizer's order
  std::vector<nn::Parameter*> buffers_;  // non-trainable (running stats), in the cell's order
  std::vector<std::string> names_;
  std::vector<Tensor> state_;
  std::vector<Tensor> accum_;  // summed gradients of the pending micro-batches (from zeros)
  std::vector<float> dp_accum_;  // data parallel: the same, over the reduced flat gradient vector
  // Data parallel: each of this rank's shards' flat gradients (+ buffers, + the loss), kept between steps - a fresh
  // zeroed vector per shard and step page-faulted its megabytes in every step (glibc trims the freed heap top).
  std::vector<std::vector<float>> dp_flat_;
  // Its layout: items are the gradients (optimizer order), the buffers, then the loss; dp_offset_[item] is where an
  // item starts in the flat vector, in the order backward produces them; bucket b is [dp_bucket_end_[b-1],
  // dp_bucket_end_[b]). Made for the plan in dp_layout_for_ (PyNative: this Model).
  std::vector<int64_t> dp_offset_, dp_bucket_end_;
  std::vector<int> dp_item_bucket_;
  const void* dp_layout_for_ = nullptr;
  void dp_make_layout(const std::vector<int>& ready, const void* key);
  std::unique_ptr<parallel::CommThread> comm_thread_;  // data parallel with bucket_mb > 0
  int64_t micro_ = 0;
  int64_t step_ = 0, epoch_ = 0;
  // Within the epoch in progress: batches done, and their loss sum and samples (for the epoch's mean loss); all 0
  // between epochs. train() starts an epoch at batch_ (non-zero after load_checkpoint of a mid-epoch checkpoint).
  int64_t batch_ = 0, epoch_samples_ = 0;
  double epoch_loss_sum_ = 0;
  double last_lr_ = 0.0;
  ops::AmpLevel amp_level_ = ops::AmpLevel::O0;  // opts_.amp_level, parsed once
  bool scaling_ = false;                         // loss scaling on
  double scale_ = 1.0;
  int64_t good_steps_ = 0, overflow_steps_ = 0;
  bool last_overflow_ = false;
  // Loss scaling after a step's gradients are known: true when they overflowed (the step is then skipped, when the
  // scaling says so); updates the dynamic scale.
  bool note_overflow(bool overflowed);
  bool skip_on_overflow() const { return opts_.loss_scale.kind == "dynamic" || opts_.loss_scale.drop_overflow_update; }
  // Graph mode: the fused step (grad_accumulation 1), or the micro and apply plans; the eval forward.
  std::unique_ptr<CompiledFunction> step_fn_, micro_fn_, apply_fn_, eval_fn_, shard_fn_;
  parallel::Communicator* comm_ = nullptr;  // data parallel only
  int64_t shards_ = 1;
  bool ranks_checked_ = false;       // check_ranks_agree ran
  std::vector<Tensor> eval_params_;  // the parameter tensors eval_fn_'s plans have baked in
  // PyNative mode: the optimizer update (clip + opt_.update) as one cached plan.
  std::unique_ptr<CompiledFunction> update_fn_;
};

}  // namespace spore::train
