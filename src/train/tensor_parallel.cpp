// Tensor parallelism for the decoder LM (train/tensor_parallel.h).
#include "train/tensor_parallel.h"

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "autodiff/autodiff.h"
#include "base/error.h"
#include "ops/llm_ops.h"
#include "ops/ops.h"
#include "parallel/communicator.h"
#include "train/checkpoint.h"
#include "train/model.h"
#include "train/model_parallel.h"
#include "train/optimizer.h"

namespace spore::train {
namespace {

enum class Split { replicated, rows, cols };

// How a parameter is split: q/k/v (weights and biases), gate and up by rows; o and down by columns; the rest whole.
Split split_of(const std::string& name) {
  for (const char* cell : {".attn_q.", ".attn_k.", ".attn_v.", ".ffn_gate.", ".ffn_up."})
    if (name.find(cell) != std::string::npos) return Split::rows;
  for (const char* cell : {".attn_output.", ".ffn_down."})
    if (name.find(cell) != std::string::npos) return Split::cols;
  return Split::replicated;
}

class TensorParallel final : public LmParallelTrainer {
 public:
  TensorParallel(nn::LlamaModel& net, parallel::Communicator& comm, const LmRunOptions& o, int64_t T)
      : net_(net), cfg_(net.config()), comm_(comm), o_(o), T_(T), r_(comm.rank()), N_(comm.size()) {
    names_ = trainable_names(net);
    std::map<std::string, nn::Parameter*> by_name;
    {
      std::vector<nn::Parameter*> slots = net.parameter_slots();
      std::vector<std::pair<std::string, Tensor*>> named = net.parameters_and_names();
      for (size_t i = 0; i < slots.size(); ++i) by_name[named[i].first] = slots[i];
    }
    for (size_t i = 0; i < names_.size(); ++i) {
      slots_.push_back(by_name.at(names_[i]));
      splits_.push_back(split_of(names_[i]));
      index_[names_[i]] = i;
      w_.push_back(shard(slots_[i]->value, splits_[i]));
    }
    AdamOptions ao;
    ao.lr = o.lr;
    ao.beta2 = 0.95;
    ao.weight_decay = o.weight_decay;
    opt_ = make_adamw(names_, ao);
    opt_->set_schedule(warmup_lr(o.warmup, cosine_lr(o.lr, o.steps - o.warmup, o.lr * o.min_lr_ratio)));
    state_ = opt_->init_state(w_);
  }

  int64_t step() const override { return step_; }
  double lr_at(int64_t step) const override { return opt_->lr_at(step); }

  std::vector<double> train_step(const std::vector<std::pair<Tensor, Tensor>>& batches) override {
    const auto M = static_cast<int64_t>(batches.size());
    std::vector<Tensor> accum;
    for (const Tensor& w : w_) accum.push_back(Tensor::zeros(w.shape(), w.dtype()));
    std::vector<double> losses;
    for (const auto& [x, y] : batches) {
      std::vector<Tensor> g(w_.size());
      losses.push_back(forward_backward(x, y, g));
      autodiff::NoGradGuard no_grad;
      for (size_t i = 0; i < w_.size(); ++i) accum[i] = ops::add(accum[i], g[i]);
    }
    sum_replicas(accum);
    apply(accum, M * replica_count());
    return losses;
  }

  std::pair<double, int64_t> eval_batch(const Tensor& x, const Tensor& y) override {
    autodiff::NoGradGuard no_grad;
    const int64_t B = x.dim(0);
    Tensor h = embed(x, w_);
    for (int64_t l = 0; l < cfg_.layers; ++l) {
      h = ops::add(h, allreduce(attention(l, h, B, w_)));
      h = ops::add(h, allreduce(mlp(l, h, w_)));
    }
    int64_t n = 0;
    const double mean = lm_cross_entropy(logits(h, B, w_), y, &n);
    return {mean, n};
  }

  void gather_parameters() override {
    for (size_t i = 0; i < w_.size(); ++i) slots_[i]->value = unshard(w_[i], splits_[i]);
  }

  void save(const std::string& path) override {
    if (!writes()) return;  // another replica's ranks write it
    gather_parameters();
    std::vector<Tensor> full_state;
    const size_t P = w_.size();
    for (size_t k = 0; k < state_.size(); ++k) full_state.push_back(unshard(state_[k], splits_[k % P]));
    if (r_ == 0) {
      CheckpointInfo info;
      info.step = step_;
      info.seed = o_.seed;
      train::save_checkpoint(path, net_, opt_.get(), full_state, info);
    }
    comm_.barrier();
  }

  void load(const std::string& path) override {
    std::vector<Tensor> values;
    for (nn::Parameter* p : slots_) values.push_back(p->value);
    std::vector<Tensor> full_state = opt_->init_state(values);
    step_ = train::load_checkpoint(path, net_, opt_.get(), &full_state).step;
    const size_t P = w_.size();
    for (size_t i = 0; i < P; ++i) w_[i] = shard(slots_[i]->value, splits_[i]);
    for (size_t k = 0; k < state_.size(); ++k) state_[k] = shard(full_state[k], splits_[k % P]);
  }

 private:
  // A piece of the forward recorded on its own tape: the parameters it uses and its input are watched, so backward
  // (given its output's gradient) returns theirs.
  struct Segment {
    std::unique_ptr<autodiff::GradientTape> tape;
    std::vector<size_t> params;
    std::vector<Tensor> sources;  // watched parameters, then the input when watched
    Tensor out;
  };

  const Tensor& w(const std::vector<Tensor>& ws, const std::string& name) const { return ws[index_.at(name)]; }
  std::optional<Tensor> bias(const std::vector<Tensor>& ws, const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? std::nullopt : std::optional<Tensor>(ws[it->second]);
  }
  std::vector<size_t> block_params(int64_t l, const std::vector<std::string>& cells) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < names_.size(); ++i)
      for (const std::string& c : cells)
        if (names_[i].rfind(fmt::format("blk.{}.{}.", l, c), 0) == 0) out.push_back(i);
    return out;
  }

  Tensor shard(const Tensor& t, Split s) const {
    if (s == Split::replicated) return t;
    const int axis = s == Split::rows ? 0 : 1;
    const int64_t n = t.dim(axis) / N_;
    return t.slice(axis, r_ * n, (r_ + 1) * n).clone();
  }
  // The whole tensor from every rank's slice (every rank gets it).
  Tensor unshard(const Tensor& t, Split s) {
    if (s == Split::replicated) return t;
    const Tensor c = t.contiguous();
    const auto bytes = static_cast<int64_t>(c.nbytes());
    Shape whole = c.shape();
    whole[0] *= N_;
    Tensor all = Tensor::empty(whole, c.dtype());
    comm_.allgather(c.raw_data(), all.raw_data(), bytes);
    if (s == Split::rows) return all;
    autodiff::NoGradGuard no_grad;
    std::vector<Tensor> parts;
    for (int64_t p = 0; p < N_; ++p) parts.push_back(all.slice(0, p * c.dim(0), (p + 1) * c.dim(0)));
    return ops::concat(parts, 1).contiguous();
  }
  // Megatron's g: the ranks' partial outputs summed (spore's deterministic allreduce, the same bits on every rank).
  Tensor allreduce(const Tensor& t) {
    Tensor c = t.clone();
    comm_.allreduce(c.raw_data(), c.numel(), DType::f32);
    return c;
  }

  Tensor embed(const Tensor& tokens, const std::vector<Tensor>& ws) const {
    return ops::embedding(w(ws, "token_embd.weight"), ops::reshape(tokens, {tokens.dim(0) * T_}));
  }
  // This rank's heads of block l's attention, through its slice of the output matrix: a partial [B*T, dim].
  Tensor attention(int64_t l, const Tensor& x, int64_t B, const std::vector<Tensor>& ws) const {
    const int64_t H = cfg_.heads / N_, Hkv = cfg_.kv_heads / N_, G = H / Hkv, D = cfg_.head_dim(), T = T_;
    Tensor pos = Tensor::empty({B * T}, DType::i64);
    for (int64_t i = 0; i < B * T; ++i) pos.data<int64_t>()[i] = i % T;
    Tensor mask = Tensor::empty({G * T, T}, DType::f32);
    for (int64_t r = 0; r < G * T; ++r)
      for (int64_t j = 0; j < T; ++j)
        mask.data<float>()[r * T + j] = j <= r % T ? 0.0f : -std::numeric_limits<float>::infinity();
    const std::string p = fmt::format("blk.{}.", l);
    auto heads_first = [&](const Tensor& t, int64_t h) {
      return ops::transpose(ops::reshape(t, {B, T, h, D}), {0, 2, 1, 3});
    };
    const Tensor h = ops::rms_norm(x, w(ws, p + "attn_norm.weight"), -1, cfg_.rms_eps);
    Tensor q = ops::reshape(ops::linear(h, w(ws, p + "attn_q.weight"), bias(ws, p + "attn_q.bias")), {B * T, H, D});
    Tensor k = ops::reshape(ops::linear(h, w(ws, p + "attn_k.weight"), bias(ws, p + "attn_k.bias")), {B * T, Hkv, D});
    Tensor v = ops::reshape(ops::linear(h, w(ws, p + "attn_v.weight"), bias(ws, p + "attn_v.bias")), {B * T, Hkv, D});
    q = ops::rope(q, pos, cfg_.rope_theta, cfg_.rope_mode());
    k = ops::rope(k, pos, cfg_.rope_theta, cfg_.rope_mode());
    const Tensor in[4] = {ops::reshape(heads_first(q, H), {B, Hkv, G * T, D}), heads_first(k, Hkv), heads_first(v, Hkv),
                          mask};
    Tensor a = ops::call1("attention"_op, in, Attrs{{"scale", 1.0 / std::sqrt(static_cast<double>(D))}});
    a = ops::reshape(ops::transpose(ops::reshape(a, {B, H, T, D}), {0, 2, 1, 3}), {B * T, H * D});
    return ops::linear(a, w(ws, p + "attn_output.weight"));
  }
  // This rank's hidden units of block l's MLP, through its slice of down: a partial [B*T, dim].
  Tensor mlp(int64_t l, const Tensor& x, const std::vector<Tensor>& ws) const {
    const std::string p = fmt::format("blk.{}.", l);
    const Tensor h = ops::rms_norm(x, w(ws, p + "ffn_norm.weight"), -1, cfg_.rms_eps);
    const Tensor ff =
        ops::mul(ops::silu(ops::linear(h, w(ws, p + "ffn_gate.weight"))), ops::linear(h, w(ws, p + "ffn_up.weight")));
    return ops::linear(ff, w(ws, p + "ffn_down.weight"));
  }
  Tensor logits(const Tensor& x, int64_t B, const std::vector<Tensor>& ws) const {
    const Tensor h = ops::rms_norm(x, w(ws, "output_norm.weight"), -1, cfg_.rms_eps);
    return ops::reshape(ops::linear(h, w(ws, "output.weight")), {B, T_, cfg_.vocab});
  }

  // Runs f(input, weights) with `params` (and the input, when watched) on a fresh tape. `ws` is w_ with the watched
  // handles in place of the segment's parameters.
  template <typename F>
  Segment segment(std::vector<size_t> params, const Tensor& in, bool watch_in, F&& f) {
    Segment s;
    s.tape = std::make_unique<autodiff::GradientTape>();
    s.params = std::move(params);
    std::vector<Tensor> ws = w_;
    for (size_t i : s.params) {
      ws[i] = s.tape->watch(w_[i]);
      s.sources.push_back(ws[i]);
    }
    Tensor x = in;
    if (watch_in) {
      x = s.tape->watch(in);
      s.sources.push_back(x);
    }
    s.out = f(x, ws);
    return s;
  }
  // The segment's parameter gradients into g (added to what is there: a norm's partial gradients are allreduced by
  // the caller); returns its input's gradient when watched.
  Tensor backward(Segment& s, const Tensor& seed, std::vector<Tensor>& g) {
    std::vector<Tensor> grads;
    {
      autodiff::NoGradGuard no_grad;
      grads = s.tape->gradient(s.out, s.sources, seed);
    }
    s.tape.reset();
    for (size_t k = 0; k < s.params.size(); ++k) g[s.params[k]] = grads[k];
    return grads.size() > s.params.size() ? grads.back() : Tensor();
  }

  // One micro-batch: its loss and every parameter's gradient (this rank's slices; replicated ones whole).
  double forward_backward(const Tensor& x, const Tensor& y, std::vector<Tensor>& g) {
    const int64_t B = x.dim(0), L = cfg_.layers;
    const std::vector<std::string> attn_cells = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output"};
    const std::vector<std::string> mlp_cells = {"ffn_norm", "ffn_gate", "ffn_up", "ffn_down"};
    std::vector<Segment> segs;  // embed, (attention, mlp) per block, head
    segs.push_back(segment({index_.at("token_embd.weight")}, x, false,
                           [&](const Tensor& in, const std::vector<Tensor>& ws) { return embed(in, ws); }));
    Tensor h;
    {
      autodiff::NoGradGuard no_grad;
      h = segs.back().out.clone();
    }
    for (int64_t l = 0; l < L; ++l) {
      segs.push_back(segment(block_params(l, attn_cells), h, true,
                             [&](const Tensor& in, const std::vector<Tensor>& ws) { return attention(l, in, B, ws); }));
      {
        autodiff::NoGradGuard no_grad;
        h = ops::add(h, allreduce(segs.back().out));
      }
      segs.push_back(segment(block_params(l, mlp_cells), h, true,
                             [&](const Tensor& in, const std::vector<Tensor>& ws) { return mlp(l, in, ws); }));
      {
        autodiff::NoGradGuard no_grad;
        h = ops::add(h, allreduce(segs.back().out));
      }
    }
    segs.push_back(
        segment({index_.at("output_norm.weight"), index_.at("output.weight")}, h, true,
                [&](const Tensor& in, const std::vector<Tensor>& ws) { return lm_mean_loss(logits(in, B, ws), y); }));
    const double loss = segs.back().out.item();
    // Backward, last segment first (the tapes end in the reverse of their start).
    Tensor dh = backward(segs.back(), Tensor(), g);
    for (int64_t l = L - 1; l >= 0; --l)
      for (int half = 1; half >= 0; --half) {
        Segment& s = segs[static_cast<size_t>(1 + 2 * l + half)];
        // Megatron's f: the ranks' gradients of the replicated input summed; the residual's own gradient added.
        const Tensor d_in = backward(s, dh, g);
        autodiff::NoGradGuard no_grad;
        dh = ops::add(dh, allreduce(d_in));
        // The norm in front of the split matrices saw only this rank's heads / units: its gradient is a partial sum.
        const size_t norm = s.params.front();
        g[norm] = allreduce(g[norm]);
      }
    backward(segs.front(), dh, g);
    return loss;
  }

  // train::Model's step with grad_accumulation M: mean = accum / M, clipping by the global norm, AdamW.
  void apply(std::vector<Tensor>& accum, int64_t M) {
    autodiff::NoGradGuard no_grad;
    std::vector<Tensor> grads;
    for (const Tensor& a : accum) grads.push_back(ops::div(a, static_cast<double>(M)));
    if (o_.clip > 0) {
      // Replicated gradients count once; the split ones' squares are summed over the ranks.
      Tensor rep = Tensor::scalar(0.0, DType::f32), split = Tensor::scalar(0.0, DType::f32);
      for (size_t i = 0; i < grads.size(); ++i) {
        const Tensor sq = ops::reduce_sum(ops::mul(grads[i], grads[i]));
        if (splits_[i] == Split::replicated) rep = ops::add(rep, sq);
        else split = ops::add(split, sq);
      }
      split = allreduce(split);
      const Tensor norm = ops::sqrt(ops::add(rep, split));
      const Tensor scale =
          ops::minimum(Tensor::scalar(1.0, DType::f32), ops::div(Tensor::scalar(o_.clip, DType::f32), norm));
      for (Tensor& g : grads) g = ops::mul(g, scale);
    }
    const Tensor lr = Tensor::scalar(opt_->lr_at(step_), DType::f32);
    const Tensor t = Tensor::scalar(static_cast<double>(step_ + 1), DType::f32);
    w_ = opt_->update(w_, grads, state_, lr, t);
    ++step_;
  }

  nn::LlamaModel& net_;
  const nn::LlamaConfig& cfg_;
  parallel::Communicator& comm_;
  const LmRunOptions& o_;
  int64_t T_, r_, N_, step_ = 0;
  std::vector<std::string> names_;     // the trainable parameters, in the model's order
  std::vector<nn::Parameter*> slots_;  // their slots in the whole model (rank 0's hold the whole values when saved)
  std::vector<Split> splits_;
  std::map<std::string, size_t> index_;
  std::vector<Tensor> w_;  // this rank's values: slices of the split parameters, the replicated ones whole
  std::unique_ptr<Optimizer> opt_;
  std::vector<Tensor> state_;  // AdamW state of w_ (slices likewise)
};

}  // namespace

LmReport train_decoder_tensor_parallel(nn::LlamaModel& net, const LmTokens& data, int64_t ctx, const LmRunOptions& o,
                                       const std::string& key,
                                       const std::function<void(const LmProgress&)>& on_progress) {
  parallel::Communicator& world = parallel::world();
  const nn::LlamaConfig& c = net.config();
  const int64_t n = o.model_parallel_ranks > 0 ? o.model_parallel_ranks : world.size();
  SPORE_CHECK(n >= 2, ErrorCode::invalid_argument,
              "tensor parallel needs 2 or more ranks per replica (mpirun -np N, or D x N ranks with --tp N); this run "
              "has {}",
              n);
  SPORE_CHECK(!c.tie_embeddings, ErrorCode::unsupported, "tensor parallel: tied embeddings are not supported");
  SPORE_CHECK(c.heads % n == 0 && c.kv_heads % n == 0 && c.ffn % n == 0, ErrorCode::invalid_argument,
              "tensor parallel over {} ranks needs heads ({}), kv heads ({}) and ffn ({}) divisible by {}", n, c.heads,
              c.kv_heads, c.ffn, n);
  const std::string what = world.size() == n ? "tensor" : fmt::format("tensor x {} replicas", world.size() / n);
  ModelParallelGroups g = split_model_parallel(world, n, o, what);
  check_model_parallel_run(world, net, data, ctx, o, key, what);
  TensorParallel tp(net, *g.model, o, ctx);
  return run_model_parallel_lm(tp, world, net, data, ctx, o, key, on_progress, g.replicas);
}

}  // namespace spore::train
