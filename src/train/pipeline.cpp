// Pipeline parallelism for the decoder LM (train/pipeline.h).
#include "train/pipeline.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autodiff/autodiff.h"
#include "base/error.h"
#include "io/file_util.h"
#include "nn/loss.h"
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
namespace fs = std::filesystem;
using nlohmann::json;

// The batches and the checkpoint key exactly as train_decoder (lm.cpp) makes them: a pipeline run sees the same data
// and may resume a one-process run's checkpoint (pp_train_lm_test checks both give the same bits).
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
std::pair<Tensor, Tensor> windows(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& mask,
                                  const std::vector<int64_t>& offsets, int64_t T) {
  const auto B = static_cast<int64_t>(offsets.size());
  Tensor x = Tensor::empty({B, T}, DType::i64), y = Tensor::empty({B, T}, DType::i64);
  int64_t* xp = x.data<int64_t>();
  int64_t* yp = y.data<int64_t>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const size_t at = static_cast<size_t>(offsets[static_cast<size_t>(b)] + t);
      xp[b * T + t] = tokens[at];
      yp[b * T + t] = mask.empty() || mask[at + 1] ? tokens[at + 1] : -1;
    }
  return {x, y};
}
std::string run_key(const LmRunOptions& o) {
  return fmt::format("batch {} steps {} warmup {} accum {} lr {} min_lr_ratio {} clip {} weight_decay {} seed {}",
                     o.batch, o.steps, o.warmup, o.accum, o.lr, o.min_lr_ratio, o.clip, o.weight_decay, o.seed);
}

constexpr int kTagForward = 1, kTagBackward = 2, kTagNorm = 3, kTagGather = 4;

// One rank's stage: its blocks, parameters (slots of the whole model), optimizer and the micro-batches in flight.
class Stage {
 public:
  Stage(nn::LlamaModel& net, parallel::Communicator& comm, const LmRunOptions& o, int64_t T)
      : net_(net), comm_(comm), o_(o), T_(T), s_(comm.rank()), S_(comm.size()) {
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
    auto schedule = warmup_lr(o.warmup, cosine_lr(o.lr, o.steps - o.warmup, o.lr * o.min_lr_ratio));
    opt_ = make_adamw(mine, ao);
    opt_->set_schedule(schedule);
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
  int64_t step() const { return step_; }
  double lr_at(int64_t step) const { return opt_->lr_at(step); }

  // One optimizer step over the micro-batches (x, y): returns the step's loss (mean of the micro-batch losses), the
  // same on every rank.
  double train_step(const std::vector<std::pair<Tensor, Tensor>>& batches, const std::string& schedule) {
    const auto M = static_cast<int64_t>(batches.size());
    const std::vector<PipeOp> ops = pipeline_schedule(schedule, S_, s_, M);
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
    apply(accum, M);
    // train_decoder's step loss: the micro-batch losses (f32 items) added in double, divided by M.
    double loss = 0;
    for (double l : losses) loss += l;
    loss /= static_cast<double>(M);
    comm_.broadcast(&loss, sizeof loss, static_cast<int>(S_ - 1));
    return loss;
  }

  // The pipelined forward of an evaluation batch: the logits' mean cross entropy and target count (last stage), the
  // same on every rank.
  std::pair<double, int64_t> eval_batch(const Tensor& x, const Tensor& y) {
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

  void save(const std::string& path) {
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

  void load(const std::string& path) {
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
    if (last()) {
      // train_decoder's loss: mean next-token cross entropy over the micro-batch.
      nn::SoftmaxCrossEntropyWithLogits ce(true, "mean");
      const int64_t V = out.shape()[2];
      f.out = ce(ops::reshape(out, {-1, V}), ops::reshape(labels, {-1}));
    } else {
      f.out = out;
    }
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
  auto progress = [&](const LmProgress& p) {
    if (on_progress) on_progress(p);
  };
  parallel::Communicator& comm = parallel::world();
  const nn::LlamaConfig& cfg = net.config();
  SPORE_CHECK(!o.ckpt_dir.empty(), ErrorCode::invalid_argument, "training needs a checkpoint directory");
  SPORE_CHECK(o.batch > 0 && o.steps > 0 && o.accum > 0 && o.warmup >= 0 && o.warmup < o.steps && o.eval_every >= 0 &&
                  o.eval_batches > 0,
              ErrorCode::invalid_argument,
              "training needs batch, steps, micro-batches, eval batches > 0 and 0 <= warmup < steps");
  SPORE_CHECK(std::isfinite(o.lr) && o.lr > 0 && o.clip >= 0 && o.weight_decay >= 0 && o.min_lr_ratio >= 0 &&
                  o.min_lr_ratio <= 1,
              ErrorCode::invalid_argument,
              "training needs lr > 0, clip >= 0, weight decay >= 0, min lr ratio in [0, 1]");
  SPORE_CHECK(comm.size() >= 2, ErrorCode::invalid_argument,
              "pipeline parallel needs 2 or more ranks (mpirun -np S), one per stage; this run has {}", comm.size());
  SPORE_CHECK(!cfg.tie_embeddings, ErrorCode::unsupported,
              "pipeline parallel: tied embeddings would put one matrix on the first and the last stage");
  SPORE_CHECK(o.amp_level == "O0", ErrorCode::unsupported, "pipeline parallel trains in f32 only (amp level {})",
              o.amp_level);
  SPORE_CHECK(!o.data_parallel, ErrorCode::unsupported, "pipeline parallel does not combine with data parallel yet");
  SPORE_CHECK(data.train_mask.empty() && data.val_mask.empty(), ErrorCode::unsupported,
              "pipeline parallel: masked targets (fine-tuning) are not supported");
  SPORE_CHECK(ctx > 0 && ctx <= cfg.ctx, ErrorCode::invalid_argument,
              "the training window {} must be in [1, the model's context {}]", ctx, cfg.ctx);
  pipeline_stage_layers(cfg.layers, comm.size(), comm.rank());  // checks layers >= stages
  parallel::check_same_config(
      comm, {{"model", key}, {"run", run_key(o)}, {"schedule", schedule}, {"world", std::to_string(comm.size())}});
  const bool writer = comm.rank() == 0;
  const int64_t T = ctx, B = o.batch;
  const auto n_train = static_cast<int64_t>(data.train.size()), n_val = static_cast<int64_t>(data.val.size());
  SPORE_CHECK(n_train > T + 1 && n_val > T + 1, ErrorCode::invalid_argument,
              "the training ({}) or validation ({}) text has too few tokens for windows of ctx {} + 1", n_train, n_val,
              T);
  fs::create_directories(o.ckpt_dir);
  const fs::path dir(o.ckpt_dir);
  const fs::path ckpt = dir / "checkpoint.safetensors", state_path = dir / "state.json";
  Stage stage(net, comm, o, T);

  LmReport rep;
  rep.vocab = cfg.vocab;
  rep.params = net.num_parameters();
  rep.train_tokens = n_train;
  rep.val_tokens = n_val;
  const std::string data_key = fmt::format("{}; data {} + {} tokens", key, n_train, n_val);
  if (fs::exists(state_path) && fs::exists(ckpt)) {
    json st;
    try {
      st = json::parse(read_text_file(state_path.string(), "checkpoint state"));
    } catch (const json::exception& e) {
      SPORE_FAIL(ErrorCode::parse_error, "checkpoint state '{}' is not valid JSON: {}", state_path.string(), e.what());
    }
    SPORE_CHECK(st.value("model", "") == data_key && st.value("run", "") == run_key(o), ErrorCode::invalid_argument,
                "checkpoint '{}' was written by another run ({}; {}), not this one ({}; {}): use another --ckpt-dir",
                o.ckpt_dir, st.value("model", ""), st.value("run", ""), data_key, run_key(o));
    stage.load(ckpt.string());
    rep.step_losses = st.at("losses").get<std::vector<double>>();
    rep.val_curve = st.at("val").get<std::vector<std::pair<int64_t, double>>>();
    SPORE_CHECK(static_cast<int64_t>(rep.step_losses.size()) == stage.step(), ErrorCode::parse_error,
                "checkpoint state '{}' has {} losses for step {}", state_path.string(), rep.step_losses.size(),
                stage.step());
    LmProgress p;
    p.kind = "resume";
    p.step = stage.step();
    p.steps = o.steps;
    progress(p);
  }
  rep.start_step = stage.step();

  auto save = [&] {
    stage.save(ckpt.string() + ".tmp");
    if (writer) {
      fs::rename(ckpt.string() + ".tmp", ckpt);
      json st{{"model", data_key},
              {"run", run_key(o)},
              {"step", stage.step()},
              {"losses", rep.step_losses},
              {"val", rep.val_curve}};
      io::write_file_atomic(state_path.string(), st.dump());
    }
    comm.barrier();
  };
  const int64_t n_windows = std::min<int64_t>(o.eval_batches * B, (n_val - 1) / T);
  auto evaluate = [&] {
    double total = 0;
    int64_t targets = 0;
    for (int64_t w0 = 0; w0 < n_windows; w0 += B) {
      std::vector<int64_t> offs;
      for (int64_t w = w0; w < std::min(n_windows, w0 + B); ++w) offs.push_back(w * T);
      auto [x, y] = windows(data.val, data.val_mask, offs, T);
      const auto [mean, n] = stage.eval_batch(x, y);
      total += mean * static_cast<double>(n);
      targets += n;
    }
    return targets > 0 ? total / static_cast<double>(targets) : 0.0;
  };

  double train_s = 0, interval_loss = 0;
  int64_t interval_steps = 0, tokens_done = 0;
  const int64_t last = o.stop_after > 0 ? std::min(o.steps, o.stop_after) : o.steps;
  for (int64_t step = stage.step(); step < last; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::pair<Tensor, Tensor>> batches;
    for (int64_t i = 0; i < o.accum; ++i) {
      const uint64_t m = static_cast<uint64_t>(step * o.accum + i);
      std::vector<int64_t> offs(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b)
        offs[static_cast<size_t>(b)] = static_cast<int64_t>(
            splitmix64(splitmix64(o.seed) ^ (m * static_cast<uint64_t>(B) + static_cast<uint64_t>(b))) %
            static_cast<uint64_t>(n_train - T - 1));
      batches.push_back(windows(data.train, data.train_mask, offs, T));
    }
    const double loss = stage.train_step(batches, schedule);
    train_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    tokens_done += B * T * o.accum;
    rep.step_losses.push_back(loss);
    interval_loss += loss;
    ++interval_steps;
    LmProgress p;
    p.kind = "step";
    p.step = step + 1;
    p.steps = o.steps;
    p.loss = loss;
    p.lr = stage.lr_at(step);
    p.tokens_per_s = static_cast<double>(tokens_done) / train_s;
    p.elapsed_s = train_s;
    progress(p);
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || step + 1 == o.steps) {
      LmProgress e = p;
      e.kind = "eval";
      e.train_loss = interval_loss / static_cast<double>(interval_steps);
      e.train_ppl = std::exp(e.train_loss);
      e.val_loss = evaluate();
      e.val_ppl = std::exp(e.val_loss);
      rep.val_curve.emplace_back(step + 1, e.val_loss);
      rep.val_loss = e.val_loss;
      rep.val_ppl = e.val_ppl;
      interval_loss = 0;
      interval_steps = 0;
      save();
      progress(e);
    } else if (step + 1 == last) {
      save();
    }
  }
  if (stage.step() == rep.start_step && stage.step() > 0) stage.gather(false, nullptr);  // resumed a finished run
  rep.steps = stage.step();
  rep.last_loss = rep.step_losses.empty() ? 0.0 : rep.step_losses.back();
  rep.train_seconds = train_s;
  rep.tokens_per_s = train_s > 0 ? static_cast<double>(tokens_done) / train_s : 0.0;
  rep.checkpoint = ckpt.string();
  if (rep.steps == o.steps && !rep.val_curve.empty() && rep.val_curve.back().first == o.steps) {
    rep.val_loss = rep.val_curve.back().second;
    rep.val_ppl = std::exp(rep.val_loss);
  }
  return rep;
}

}  // namespace spore::train
