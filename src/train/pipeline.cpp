// Pipeline parallelism for the decoder LM (train/pipeline.h).
#include "train/pipeline.h"

#include "train/model_parallel.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "autodiff/autodiff.h"
#include "base/error.h"
#include "ops/ops.h"
#include "parallel/communicator.h"
#include "train/checkpoint.h"
#include "train/model.h"
#include "train/optimizer.h"

namespace spore::train {

std::vector<PipeOp> pipeline_schedule(const std::string& kind, int64_t stages, int64_t stage, int64_t micro) {
  SPORE_CHECK(kind == "gpipe" || kind == "1f1b", ErrorCode::invalid_argument,
              "pipeline schedule '{}' is not gpipe or 1f1b", kind);
  SPORE_CHECK(stages > 0 && stage >= 0 && stage < stages && micro > 0, ErrorCode::invalid_argument,
              "pipeline schedule: stage {} of {} with {} micro-batches", stage, stages, micro);
  std::vector<PipeOp> ops;
  const int64_t warm = kind == "gpipe" ? micro : std::min(stages - stage - 1, micro);
  for (int64_t m = 0; m < warm; ++m) ops.push_back({true, m});
  for (int64_t m = warm; m < micro; ++m) {
    ops.push_back({true, m});
    ops.push_back({false, m - warm});
  }
  for (int64_t m = micro - warm; m < micro; ++m) ops.push_back({false, m});
  return ops;
}

std::pair<int64_t, int64_t> pipeline_stage_layers(int64_t layers, int64_t stages, int64_t stage) {
  SPORE_CHECK(stages > 0 && layers >= stages && stage >= 0 && stage < stages, ErrorCode::invalid_argument,
              "pipeline: {} blocks do not split into {} stages (each needs one)", layers, stages);
  const int64_t base = layers / stages, extra = layers % stages;
  const int64_t first = stage * base + std::min(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

namespace {
constexpr int kTagForward = 1, kTagBackward = 2, kTagNorm = 3, kTagGather = 4;

// One rank's stage: its blocks, parameters (slots of the whole model), optimizer and the micro-batches in flight.
class Stage final : public LmParallelTrainer {
 public:
  Stage(nn::LlamaModel& net, parallel::Communicator& comm, const LmRunOptions& o, int64_t T, std::string schedule)
      : net_(net), comm_(comm), o_(o), schedule_(std::move(schedule)), T_(T), s_(comm.rank()), S_(comm.size()) {
    std::tie(first_, last_) = pipeline_stage_layers(net.config().layers, S_, s_);
    const std::vector<std::string> all = trainable_names(net);
    std::vector<nn::Parameter*> slots = net.parameter_slots();
    std::vector<std::pair<std::string, Tensor*>> named = net.parameters_and_names();
    std::map<std::string, nn::Parameter*> by_name;
    for (size_t i = 0; i < slots.size(); ++i) by_name[named[i].first] = slots[i];
    std::vector<std::string> mine;
    for (const std::string& n : all) {
      const int64_t owner = owner_of(n);
      owners_.push_back(owner);
      if (owner == s_) {
        mine.push_back(n);
        slots_.push_back(by_name.at(n));
      }
    }
    AdamOptions ao;
    ao.lr = o.lr;
    ao.beta2 = 0.95;
    ao.weight_decay = o.weight_decay;
    auto lr_schedule = warmup_lr(o.warmup, cosine_lr(o.lr, o.steps - o.warmup, o.lr * o.min_lr_ratio));
    opt_ = make_adamw(mine, ao);
    opt_->set_schedule(lr_schedule);
    full_opt_ = make_adamw(all, ao);  // checkpoints: the whole model's names and state layout
    std::vector<Tensor> values;
    for (nn::Parameter* p : slots_) values.push_back(p->value);
    state_ = opt_->init_state(values);
    all_names_ = all;
    for (const std::string& n : all) all_slots_.push_back(by_name.at(n));
    by_name_ = std::move(by_name);
  }

  bool first() const { return s_ == 0; }
  bool last() const { return s_ == S_ - 1; }
  int64_t step() const override { return step_; }
  double lr_at(int64_t step) const override { return opt_->lr_at(step); }

  // One optimizer step over this replica's micro-batches (x, y): returns their losses, the same on every stage.
  std::vector<double> train_step(const std::vector<std::pair<Tensor, Tensor>>& batches) override {
    const auto M = static_cast<int64_t>(batches.size());
    const std::vector<PipeOp> ops = pipeline_schedule(schedule_, S_, s_, M);
    const int64_t rows = batches[0].first.dim(0) * T_, E = net_.config().dim;
    std::map<int64_t, InFlight> live;
    std::map<int64_t, Tensor> acts, grads_in;  // received ahead of use (by a combined send+receive)
    std::vector<Tensor> accum;
    for (nn::Parameter* p : slots_) accum.push_back(Tensor::zeros(p->value.shape(), p->value.dtype()));
    std::vector<double> losses(static_cast<size_t>(M), 0.0);
    int64_t next_backward = 0;
    const auto fresh = [&] { return Tensor::empty({rows, E}, DType::f32); };
    for (size_t i = 0; i < ops.size(); ++i) {
      const PipeOp op = ops[i];
      const PipeOp* next = i + 1 < ops.size() ? &ops[i + 1] : nullptr;
      if (op.forward) {
        Tensor in;
        if (first()) {
          in = batches[static_cast<size_t>(op.micro)].first;
        } else if (auto it = acts.find(op.micro); it != acts.end()) {
          in = it->second;
          acts.erase(it);
        } else {
          in = fresh();
          comm_.recv(in.raw_data(), static_cast<int64_t>(in.nbytes()), s_ - 1, kTagForward);
        }
        InFlight f = forward(in, batches[static_cast<size_t>(op.micro)].second);
        if (last()) {
          losses[static_cast<size_t>(op.micro)] = f.out.item();
        } else {
          const Tensor out = f.out.contiguous();
          if (next && !next->forward) {  // send this output, receive the gradient the next backward needs
            Tensor g = fresh();
            comm_.sendrecv(out.raw_data(), static_cast<int64_t>(out.nbytes()), s_ + 1, g.raw_data(),
                           static_cast<int64_t>(g.nbytes()), s_ + 1, kTagForward, kTagBackward);
            grads_in[next->micro] = g;
          } else {
            comm_.send(out.raw_data(), static_cast<int64_t>(out.nbytes()), s_ + 1, kTagForward);
          }
        }
        live.emplace(op.micro, std::move(f));
        continue;
      }
      SPORE_ASSERT(op.micro == next_backward, "pipeline backwards run in micro-batch order");
      ++next_backward;
      Tensor seed;
      if (!last()) {
        if (auto it = grads_in.find(op.micro); it != grads_in.end()) {
          seed = it->second;
          grads_in.erase(it);
        } else {
          seed = fresh();
          comm_.recv(seed.raw_data(), static_cast<int64_t>(seed.nbytes()), s_ + 1, kTagBackward);
        }
      }
      auto node = live.extract(op.micro);
      SPORE_ASSERT(!node.empty(), "pipeline backward before its forward");
      std::vector<Tensor> g;
      {
        autodiff::NoGradGuard no_grad;
        InFlight& f = node.mapped();
        g = f.tape->gradient(f.out, f.sources, seed);
        // train::Model's accumulation: from zeros, in micro-batch order.
        for (size_t k = 0; k < slots_.size(); ++k) accum[k] = ops::add(accum[k], g[k]);
      }
      node.mapped().tape.reset();
      if (!first()) {
        const Tensor dx = g.back().contiguous();
        if (next && next->forward) {  // send the input's gradient, receive the next forward's input
          Tensor a = fresh();
          comm_.sendrecv(dx.raw_data(), static_cast<int64_t>(dx.nbytes()), s_ - 1, a.raw_data(),
                         static_cast<int64_t>(a.nbytes()), s_ - 1, kTagBackward, kTagForward);
          acts[next->micro] = a;
        } else {
          comm_.send(dx.raw_data(), static_cast<int64_t>(dx.nbytes()), s_ - 1, kTagBackward);
        }
      }
    }
    SPORE_ASSERT(live.empty() && acts.empty() && grads_in.empty(), "pipeline step left work in flight");
    sum_replicas(accum);
    apply(accum, M * replica_count());
    comm_.broadcast(losses.data(), static_cast<int64_t>(losses.size() * sizeof(double)), static_cast<int>(S_ - 1));
    return losses;
  }

  // The pipelined forward of an evaluation batch: the logits' mean cross entropy and target count (last stage), the
  // same on every rank.
  std::pair<double, int64_t> eval_batch(const Tensor& x, const Tensor& y) override {
    autodiff::NoGradGuard no_grad;
    const int64_t rows = x.dim(0) * T_, E = net_.config().dim;
    Tensor in = x;
    if (!first()) {
      in = Tensor::empty({rows, E}, DType::f32);
      comm_.recv(in.raw_data(), static_cast<int64_t>(in.nbytes()), s_ - 1, kTagForward);
    }
    const Tensor out = net_.forward_part(in, T_, first_, last_, first(), last()).contiguous();
    double r[2] = {0, 0};
    if (last()) {
      int64_t n = 0;
      r[0] = lm_cross_entropy(out, y, &n);
      r[1] = static_cast<double>(n);
    } else {
      comm_.send(out.raw_data(), static_cast<int64_t>(out.nbytes()), s_ + 1, kTagForward);
    }
    comm_.broadcast(r, sizeof r, static_cast<int>(S_ - 1));
    return {r[0], static_cast<int64_t>(r[1])};
  }

  // Rank 0's model gets every stage's parameters and, with `full_state` (rank 0; null elsewhere, but `with_state`
  // the same on every rank), the stages' optimizer state in the whole model's layout. The optimizers' state is
  // kind-major (AdamW: exp_avg of every parameter, then exp_avg_sq), so a stage's state restricted from the whole
  // model's keeps its order.
  void gather_parameters() override { gather(false, nullptr); }

  void gather(bool with_state, std::vector<Tensor>* full_state) {
    const size_t P = all_names_.size();
    for (int64_t peer = 1; peer < S_; ++peer) {
      if (s_ != 0 && s_ != peer) continue;
      for (size_t i = 0; i < P; ++i)
        if (owners_[i] == peer) transfer(by_name_.at(all_names_[i])->value, peer);
      if (!with_state) continue;
      if (s_ == peer) {
        for (Tensor& t : state_) transfer(t, peer);
      } else {
        for (size_t j = 0; j < full_state->size(); ++j)
          if (owners_[j % P] == peer) transfer((*full_state)[j], peer);
      }
    }
    if (s_ == 0 && with_state) {  // rank 0's own part
      size_t k = 0;
      for (size_t j = 0; j < full_state->size(); ++j)
        if (owners_[j % P] == 0) (*full_state)[j] = state_[k++];
    }
    comm_.barrier();
  }

  void save(const std::string& path) override {
    if (!writes()) return;  // another replica's stages write it
    std::vector<Tensor> full_state;
    if (s_ == 0) {
      std::vector<Tensor> values;
      for (nn::Parameter* p : all_slots_) values.push_back(p->value);
      full_state = full_opt_->init_state(values);
    }
    gather(true, s_ == 0 ? &full_state : nullptr);
    if (s_ == 0) {
      CheckpointInfo info;
      info.step = step_;
      info.seed = o_.seed;
      train::save_checkpoint(path, net_, full_opt_.get(), full_state, info);
    }
    comm_.barrier();
  }

  void load(const std::string& path) override {
    std::vector<Tensor> values;
    for (nn::Parameter* p : all_slots_) values.push_back(p->value);
    std::vector<Tensor> full_state = full_opt_->init_state(values);
    const CheckpointInfo info = train::load_checkpoint(path, net_, full_opt_.get(), &full_state);
    const size_t P = all_names_.size();
    size_t k = 0;
    for (size_t j = 0; j < full_state.size(); ++j)
      if (owners_[j % P] == s_) state_[k++] = full_state[j];
    step_ = info.step;
  }

 private:
  struct InFlight {
    std::unique_ptr<autodiff::GradientTape> tape;
    std::vector<Tensor> sources;  // the stage's parameters (watched handles), then the input (not on stage 0)
    Tensor out;                   // the output activations, or the loss on the last stage
  };

  // Which stage owns a parameter: token_embd on the first, blk.N on N's stage, output_norm and output on the last.
  int64_t owner_of(const std::string& name) const {
    if (name.rfind("blk.", 0) == 0) {
      const int64_t l = std::stoll(name.substr(4, name.find('.', 4) - 4));
      for (int64_t s = 0; s < S_; ++s) {
        const auto [f, e] = pipeline_stage_layers(net_.config().layers, S_, s);
        if (l >= f && l < e) return s;
      }
    }
    if (name.rfind("token_embd.", 0) == 0) return 0;
    return S_ - 1;
  }
  // Stage `peer` sends t; rank 0 receives it into t (same shape and dtype on both).
  void transfer(Tensor& t, int64_t peer) {
    if (s_ == peer) {
      const Tensor c = t.contiguous();
      comm_.send(c.raw_data(), static_cast<int64_t>(c.nbytes()), 0, kTagGather);
    } else {
      Tensor r = Tensor::empty(t.shape(), t.dtype());
      comm_.recv(r.raw_data(), static_cast<int64_t>(r.nbytes()), static_cast<int>(peer), kTagGather);
      t = r;
    }
  }

  InFlight forward(const Tensor& in, const Tensor& labels) {
    InFlight f;
    f.tape = std::make_unique<autodiff::GradientTape>();
    std::vector<Tensor> saved;
    struct Restore {
      std::vector<nn::Parameter*>& slots;
      std::vector<Tensor>& saved;
      ~Restore() {
        for (size_t i = 0; i < saved.size(); ++i) slots[i]->value = saved[i];
      }
    } restore{slots_, saved};
    for (nn::Parameter* p : slots_) {
      saved.push_back(p->value);
      p->value = f.tape->watch(p->value);
      f.sources.push_back(p->value);
    }
    Tensor x = in;
    if (!first()) {
      x = f.tape->watch(in);
      f.sources.push_back(x);
    }
    const Tensor out = net_.forward_part(x, T_, first_, last_, first(), last());
    f.out = last() ? lm_mean_loss(out, labels) : out;
    return f;
  }

  // train::Model's step with grad_accumulation M: mean = accum / M, clipping by the global norm, AdamW.
  void apply(std::vector<Tensor>& accum, int64_t M) {
    autodiff::NoGradGuard no_grad;
    std::vector<Tensor> grads;
    for (const Tensor& a : accum) grads.push_back(ops::div(a, static_cast<double>(M)));
    if (o_.clip > 0) {
      // clip_by_global_norm's sum of squares, continued from stage to stage in parameter order.
      Tensor sum_sq;
      if (!first()) {
        sum_sq = Tensor::empty({}, DType::f32);
        comm_.recv(sum_sq.raw_data(), 4, s_ - 1, kTagNorm);
      }
      for (const Tensor& g : grads) {
        const Tensor sq = ops::reduce_sum(ops::mul(g, g));
        sum_sq = sum_sq.defined() ? ops::add(sum_sq, sq) : sq;
      }
      Tensor scale = Tensor::empty({}, DType::f32);
      if (!last()) {
        const Tensor c = sum_sq.contiguous();
        comm_.send(c.raw_data(), 4, s_ + 1, kTagNorm);
      } else {
        const Tensor norm = ops::sqrt(sum_sq);
        scale = ops::minimum(Tensor::scalar(1.0, DType::f32), ops::div(Tensor::scalar(o_.clip, DType::f32), norm))
                    .contiguous();
      }
      comm_.broadcast(scale.raw_data(), 4, static_cast<int>(S_ - 1));
      for (Tensor& g : grads) g = ops::mul(g, scale);
    }
    const Tensor lr = Tensor::scalar(opt_->lr_at(step_), DType::f32);
    const Tensor t = Tensor::scalar(static_cast<double>(step_ + 1), DType::f32);
    std::vector<Tensor> params;
    for (nn::Parameter* p : slots_) params.push_back(p->value);
    std::vector<Tensor> fresh = opt_->update(params, grads, state_, lr, t);
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i]->value = fresh[i];
    ++step_;
  }

  nn::LlamaModel& net_;
  parallel::Communicator& comm_;
  const LmRunOptions& o_;
  std::string schedule_;
  int64_t T_, s_, S_, first_ = 0, last_ = 0, step_ = 0;
  std::vector<nn::Parameter*> slots_;      // this stage's trainable parameters, in the model's order
  std::vector<nn::Parameter*> all_slots_;  // every trainable parameter of the model, in order
  std::vector<std::string> all_names_;     // every trainable parameter's name, in order
  std::vector<int64_t> owners_;            // the stage of each of all_names_
  std::map<std::string, nn::Parameter*> by_name_;
  std::unique_ptr<Optimizer> opt_, full_opt_;
  std::vector<Tensor> state_;
};

}  // namespace

LmReport train_decoder_pipeline(nn::LlamaModel& net, const LmTokens& data, int64_t ctx, const LmRunOptions& o,
                                const std::string& schedule, const std::string& key,
                                const std::function<void(const LmProgress&)>& on_progress) {
  parallel::Communicator& world = parallel::world();
  const nn::LlamaConfig& cfg = net.config();
  const int64_t S = o.model_parallel_ranks > 0 ? o.model_parallel_ranks : world.size();
  SPORE_CHECK(S >= 2, ErrorCode::invalid_argument,
              "pipeline parallel needs 2 or more stages (mpirun -np S, or D x S ranks with --stages S), one rank per "
              "stage; this run has {}",
              S);
  SPORE_CHECK(!cfg.tie_embeddings, ErrorCode::unsupported,
              "pipeline parallel: tied embeddings would put one matrix on the first and the last stage");
  pipeline_stage_layers(cfg.layers, S, 0);  // checks layers >= stages
  const std::string what =
      world.size() == S ? "pipeline " + schedule : fmt::format("pipeline {} x {} replicas", schedule, world.size() / S);
  ModelParallelGroups g = split_model_parallel(world, S, o, what);
  check_model_parallel_run(world, net, data, ctx, o, key, what);
  Stage stage(net, *g.model, o, ctx, schedule);
  return run_model_parallel_lm(stage, world, net, data, ctx, o, key, on_progress, g.replicas);
}

}  // namespace spore::train
