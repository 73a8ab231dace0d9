#include "train/model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "autodiff/autodiff.h"
#include "base/error.h"
#include "nn/layers.h"
#include "ops/autocast.h"
#include "ops/ops.h"
#include "parallel/comm_thread.h"
#include "parallel/communicator.h"
#include "parallel/tree.h"
#include "runtime/jit.h"
#include "runtime/profiler.h"
#include "spore/custom_op.h"
#include "train/checkpoint.h"
#include "train/metrics.h"

namespace spore::train {
namespace {

// The step counter as the i64 scalar nn::StepScope (and, in graph mode, the plan) takes.
Tensor counter_tensor(int64_t c) { return Tensor::from_vector<int64_t>({c}, {}); }

// Binds slots to new values for a trace and puts the originals back even if the trace throws.
class SlotBinding {
 public:
  SlotBinding(const std::vector<nn::Parameter*>& slots, std::span<const Tensor> values) : slots_(slots) {
    saved_.reserve(slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i) {
      saved_.push_back(slots_[i]->value);
      slots_[i]->value = values[i];
    }
  }
  ~SlotBinding() {
    for (size_t i = 0; i < saved_.size(); ++i) slots_[i]->value = saved_[i];
  }
  SlotBinding(const SlotBinding&) = delete;
  SlotBinding& operator=(const SlotBinding&) = delete;

 private:
  const std::vector<nn::Parameter*>& slots_;
  std::vector<Tensor> saved_;
};

std::span<const Tensor> sub(std::span<const Tensor> in, size_t from, size_t n) { return in.subspan(from, n); }

// The step's autocast (none at O0).
class AmpScope {
 public:
  AmpScope(ops::AmpLevel level, DType low) {
    if (level != ops::AmpLevel::O0) scope_.emplace(level, low);
  }

 private:
  std::optional<ops::AutocastScope> scope_;
};

// A bool scalar: every gradient is finite (x * 0 is 0 for a finite x and nan for inf or nan; the sum of those is 0
// exactly when all are finite, and 0 == 0 while nan != nan).
Tensor all_finite(std::span<const Tensor> grads) {
  Tensor total;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    Tensor s = ops::reduce_sum(ops::mul(g.dtype() == DType::f32 ? g : ops::cast(g, DType::f32), 0.0));
    total = total.defined() ? ops::add(total, s) : s;
  }
  if (!total.defined()) return Tensor::from_vector<bool>({true}, {});
  return ops::eq(total, total);
}

// A collective on this rank's profiler timeline (spore train --profile: one trace per rank), with its bytes, the
// bandwidth it achieved (bytes / its wall time) and the time it was blocked on peers.
void record_collective(const parallel::CollectiveEvent& e) {
  Profiler* prof = Profiler::active();
  if (prof == nullptr) return;
  const double s = static_cast<double>(e.end_ns - e.start_ns) / 1e9;
  const double bytes = static_cast<double>(e.bytes);
  prof->record_span({fmt::format("{} {} KiB", e.op, e.bytes / 1024),
                     "comm",
                     e.start_ns,
                     e.end_ns,
                     Profiler::thread_number(),
                     {{"bytes", bytes}, {"gbps", s > 0 ? bytes / s / 1e9 : 0.0}, {"wait_ms", e.wait_seconds * 1e3}}});
}

}  // namespace

void put_collectives_on_timeline() { parallel::Communicator::set_observer(record_collective); }

namespace {

Tensor dp_allreduce_sum(const Tensor& t);

// SyncBatchNorm's collective: the data-parallel step in progress (set by Model::train_step_data_parallel around its
// shards; null otherwise). Its allreduces go through the step's communication thread when there is one, queued
// after the gradient buckets already handed to it, so every rank issues its collectives in one order.
struct StepCollectives {
  parallel::Communicator* comm;
  parallel::CommThread* thread;
};
std::atomic<const StepCollectives*> g_step_collectives{nullptr};

void dp_allreduce_kernel(KernelContext& k) {
  const Tensor in = k.in(0).contiguous();
  Tensor& out = k.out(0);
  std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
  const StepCollectives* s = g_step_collectives.load();
  SPORE_CHECK(
      s != nullptr, ErrorCode::invalid_argument,
      "dp_allreduce_sum (SyncBatchNorm's statistics) ran outside a data-parallel training step of train::Model");
  const auto job = [s, &out] { s->comm->allreduce(out.raw_data(), out.numel(), DType::f32, parallel::ReduceOp::sum); };
  if (s->thread) s->thread->call(job);
  else job();
}

// dp_allreduce_sum(x): x summed over the ranks (f32), as an op so that graph mode traces it into the step's plan and
// autodiff differentiates it: the gradient of a sum over the ranks, whose output every rank uses, is the sum over the
// ranks of the output's gradients. `seq` keeps CSE from merging two of them; Trait::random keeps constant folding and
// rematerialization from running one at compile time or twice.
OpId dp_allreduce_op() {
  static const OpId id =
      CustomOp("dp_allreduce_sum")
          .doc("data parallel: the elementwise sum over the ranks (SyncBatchNorm's statistics)")
          .inputs({"x"})
          .attr("seq", AttrKind::i64)
          .traits(Trait::random)
          .grad([](const GradContext& g) { return std::vector<Tensor>{dp_allreduce_sum(g.output_grads[0])}; })
          .kernel({DType::f32}, dp_allreduce_kernel, "dp_allreduce")
          .add();
  return id;
}

Tensor dp_allreduce_sum(const Tensor& t) {
  static std::atomic<int64_t> seq{0};
  const Tensor f = t.dtype() == DType::f32 ? t : ops::cast(t, DType::f32);
  Attrs a;
  a.set("seq", seq.fetch_add(1) + 1);
  const Tensor r = ops::call1(dp_allreduce_op(), std::vector<Tensor>{f}, a);
  return t.dtype() == DType::f32 ? r : ops::cast(r, t.dtype());
}

}  // namespace

std::vector<std::string> trainable_names(nn::Cell& net) {
  std::vector<std::string> names;
  auto named = net.parameters_and_names();
  auto slots = net.parameter_slots();
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i]->requires_grad) names.push_back(named[i].first);
  return names;
}

LossFn loss_of(nn::Cell& loss_cell) {
  return [&loss_cell](const Tensor& logits, const Tensor& labels) { return loss_cell(logits, labels); };
}

Model::Model(nn::Cell& net, LossFn loss_fn, Optimizer& opt, std::vector<std::string> metrics, ModelOptions options)
    : net_(net), loss_fn_(std::move(loss_fn)), opt_(opt), metrics_(std::move(metrics)), opts_(std::move(options)) {
  SPORE_CHECK(loss_fn_ != nullptr, ErrorCode::invalid_argument, "train::Model: the loss function is empty");
  SPORE_CHECK(opts_.mode == "pynative" || opts_.mode == "graph", ErrorCode::invalid_argument,
              "train::Model: expected mode 'pynative' or 'graph', got '{}'", opts_.mode);
  SPORE_CHECK(opts_.grad_accumulation >= 1, ErrorCode::invalid_argument,
              "train::Model: expected grad_accumulation >= 1, got {}", opts_.grad_accumulation);
  SPORE_CHECK(opts_.clip_norm >= 0, ErrorCode::invalid_argument, "train::Model: expected clip_norm >= 0, got {}",
              opts_.clip_norm);
  for (const std::string& m : metrics_) make_metric(m);  // an unknown name fails here, with make_metric's message
  amp_level_ = ops::parse_amp_level(opts_.amp_level);  // an unknown level fails here
  SPORE_CHECK(opts_.amp_dtype == DType::f16 || opts_.amp_dtype == DType::bf16, ErrorCode::invalid_argument,
              "train::Model: the amp dtype must be f16 or bf16, got {}", dtype_name(opts_.amp_dtype));
  const LossScale& ls = opts_.loss_scale;
  SPORE_CHECK(ls.kind == "none" || ls.kind == "fixed" || ls.kind == "dynamic", ErrorCode::invalid_argument,
              "train::Model: loss scale '{}': expected none, fixed or dynamic", ls.kind);
  scaling_ = ls.kind != "none";
  if (scaling_) {
    SPORE_CHECK(std::isfinite(ls.scale) && ls.scale > 0, ErrorCode::invalid_argument,
                "train::Model: loss scale {} (expected a finite value > 0)", ls.scale);
    SPORE_CHECK(ls.factor > 1 && std::isfinite(ls.factor) && ls.window >= 1, ErrorCode::invalid_argument,
                "train::Model: dynamic loss scale needs factor > 1 and window >= 1, got {} and {}", ls.factor,
                ls.window);
    // Data parallel checks the accumulated gradient once per step (train_step_data_parallel).
    SPORE_CHECK(opts_.grad_accumulation == 1 || opts_.parallel.parallel_mode == "data_parallel", ErrorCode::unsupported,
                "train::Model: loss scaling with grad_accumulation {} is not supported (use 1, or data parallel)",
                opts_.grad_accumulation);
    scale_ = ls.scale;
  }

  // The optimizer's parameter order is the step's order; every trainable parameter must be in it.
  std::map<std::string, nn::Parameter*> trainable;
  {
    auto named = net_.parameters_and_names();
    auto slots = net_.parameter_slots();
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i]->requires_grad)
        trainable[named[i].first] = slots[i];
      else
        buffers_.push_back(slots[i]);
    }
  }
  for (const std::string& n : opt_.param_names()) {
    auto it = trainable.find(n);
    SPORE_CHECK(it != trainable.end(), ErrorCode::invalid_argument,
                "train::Model: the optimizer names parameter '{}', which the network has not (as trainable)", n);
    names_.push_back(n);
    slots_.push_back(it->second);
    trainable.erase(it);
  }
  SPORE_CHECK(trainable.empty(), ErrorCode::invalid_argument,
              "train::Model: trainable parameter '{}' is not in the optimizer's parameter list",
              trainable.empty() ? "" : trainable.begin()->first);

  state_ = opt_.init_state(param_values());

  const ParallelContext& pc = opts_.parallel;
  SPORE_CHECK(pc.parallel_mode == "stand_alone" || pc.parallel_mode == "data_parallel", ErrorCode::invalid_argument,
              "train::Model: parallel_mode '{}': expected stand_alone or data_parallel", pc.parallel_mode);
  SPORE_CHECK(!pc.sync_bn || pc.parallel_mode == "data_parallel", ErrorCode::invalid_argument,
              "train::Model: sync_bn synchronises BatchNorm across data-parallel ranks: it needs parallel_mode "
              "data_parallel");
  if (pc.parallel_mode == "data_parallel") {
    comm_ = pc.comm ? pc.comm : &parallel::world();
    put_collectives_on_timeline();
    const int64_t n = comm_->size();
    SPORE_CHECK(pc.grad_shards >= 0, ErrorCode::invalid_argument, "data parallel: grad_shards {} < 0", pc.grad_shards);
    shards_ = pc.grad_shards > 0 ? pc.grad_shards : n;
    // One process sums all M shards itself (any M); several ranks each sum a run of M/N, which is a whole subtree
    // of the M-shard tree only for a power of two.
    SPORE_CHECK(n == 1 || (shards_ % n == 0 && parallel::is_subtree_size(shards_ / n)), ErrorCode::invalid_argument,
                "data parallel: grad_shards {} on {} ranks: the rank count must divide it and leave each rank a "
                "power of two of shards (e.g. grad_shards {})",
                shards_, n, n * 2);
    SPORE_CHECK(pc.bucket_mb >= 0 && std::isfinite(pc.bucket_mb), ErrorCode::invalid_argument,
                "data parallel: bucket_mb {} (expected MiB >= 0; 0: one allreduce after backward)", pc.bucket_mb);
    SPORE_CHECK(
        !pc.sync_bn || shards_ == n, ErrorCode::invalid_argument,
        "data parallel: sync_bn needs one shard per rank (grad_shards {} on {} ranks): the statistics of shards "
        "that run one after another cannot be combined before they normalize",
        shards_, n);
    // A thread for the buckets' allreduces only where the communicator may be called from it (MPI: SERIALIZED).
    if (pc.bucket_mb > 0 && comm_->any_thread()) comm_thread_ = std::make_unique<parallel::CommThread>(*comm_);
  }
}

Model::~Model() = default;

struct Model::Traced {
  Tensor loss, logits;
  std::vector<Tensor> grads, buffers;
};

namespace {
uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
}  // namespace

void Model::check_ranks_agree(std::vector<std::pair<std::string, std::string>> extra) const {
  // The model's structure and the parameters' bytes as hashes (the values would make unreadable messages).
  uint64_t shape_hash = 0xcbf29ce484222325ull, value_hash = shape_hash;
  std::string dtypes;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Tensor& v = slots_[i]->value;
    shape_hash = fnv1a(shape_hash, names_[i].data(), names_[i].size() + 1);
    shape_hash = fnv1a(shape_hash, v.shape().data(), v.shape().size() * sizeof(int64_t));
    const Tensor c = v.contiguous();
    value_hash = fnv1a(value_hash, c.raw_data(), c.nbytes());
    if (dtypes.find(dtype_name(v.dtype())) == std::string::npos) dtypes += std::string(dtype_name(v.dtype())) + " ";
  }
  std::vector<std::pair<std::string, std::string>> f{
      {"world size", std::to_string(comm_->size())},
      {"model (parameter names and shapes)", fmt::format("{:016x} ({} parameters)", shape_hash, slots_.size())},
      {"parameter dtype", dtypes},
      {"amp", opts_.amp_level + " " + std::string(dtype_name(opts_.amp_dtype))},
      {"mode", opts_.mode},
      {"optimizer", opt_.name()},
      {"grad_shards", std::to_string(shards_)},
      {"grad_accumulation", std::to_string(opts_.grad_accumulation)},
      {"loss scale",
       fmt::format("{} {} factor {} window {} drop {}", opts_.loss_scale.kind, scale_, opts_.loss_scale.factor,
                   opts_.loss_scale.window, opts_.loss_scale.drop_overflow_update)},
      {"gradients_mean", opts_.parallel.gradients_mean ? "true" : "false"},
      {"bucket_mb", fmt::format("{}", opts_.parallel.bucket_mb)},
      {"sync_bn", opts_.parallel.sync_bn ? "true" : "false"},
      {"clip_norm", fmt::format("{}", opts_.clip_norm)},
      {"seed", std::to_string(opts_.seed)},
      {"step", std::to_string(step_)},
      {"parameter values", fmt::format("{:016x}", value_hash)}};
  f.insert(f.end(), extra.begin(), extra.end());
  parallel::check_same_config(*comm_, f);
}

std::vector<Tensor> Model::param_values() const {
  std::vector<Tensor> v;
  v.reserve(slots_.size());
  for (nn::Parameter* p : slots_) v.push_back(p->value);
  return v;
}

std::vector<Tensor> Model::buffer_values() const {
  std::vector<Tensor> v;
  v.reserve(buffers_.size());
  for (nn::Parameter* p : buffers_) v.push_back(p->value);
  return v;
}

double Model::train_step(const Tensor& x, const Tensor& y) {
  const bool was_training = net_.training();
  net_.set_train(true);
  struct Back {
    nn::Cell& net;
    bool mode;
    ~Back() { net.set_train(mode); }
  } back{net_, was_training};
  if (comm_) return train_step_data_parallel(x, y);
  return opts_.mode == "graph" ? train_step_graph(x, y) : train_step_pynative(x, y);
}

void Model::dp_make_layout(const std::vector<int>& ready, const void* key) {
  const size_t np = slots_.size(), nb = buffers_.size(), items = np + nb + 1;
  std::vector<int64_t> sizes(items, 1);
  for (size_t i = 0; i < np; ++i) sizes[i] = slots_[i]->value.numel();
  for (size_t i = 0; i < nb; ++i) sizes[np + i] = buffers_[i]->value.numel();
  // In production order (ties in item order), cut into buckets that close once they hold the cap.
  std::vector<size_t> order(items);
  for (size_t i = 0; i < items; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ready[a] < ready[b]; });
  const double cap = opts_.parallel.bucket_mb * 1024 * 1024;
  dp_offset_.assign(items, 0);
  dp_item_bucket_.assign(items, 0);
  dp_bucket_end_.clear();
  int64_t offset = 0, bucket_bytes = 0;
  for (size_t item : order) {
    dp_offset_[item] = offset;
    dp_item_bucket_[item] = static_cast<int>(dp_bucket_end_.size());
    offset += sizes[item];
    bucket_bytes += sizes[item] * static_cast<int64_t>(sizeof(float));
    if (cap > 0 && static_cast<double>(bucket_bytes) >= cap) {
      dp_bucket_end_.push_back(offset);
      bucket_bytes = 0;
    }
  }
  if (dp_bucket_end_.empty() || dp_bucket_end_.back() != offset) dp_bucket_end_.push_back(offset);
  dp_layout_for_ = key;
  // Every rank must cut the same buckets (their allreduces pair up by order): the same plan gives the same order,
  // and this checks it once per layout.
  std::string bounds;
  for (int64_t e : dp_bucket_end_) bounds += std::to_string(e) + " ";
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < items; ++i) h = (h ^ static_cast<uint64_t>(dp_offset_[i])) * 0x100000001b3ull;
  parallel::check_same_config(*comm_,
                              {{"gradient buckets (ends)", bounds}, {"gradient layout", fmt::format("{:016x}", h)}});
}

void Model::shard_forward_backward(const Tensor& x, const Tensor& y, int64_t counter, const ItemFn& on_item) {
  const size_t np = slots_.size(), nb = buffers_.size();
  // SyncBatchNorm: BatchNorm sums its statistics over the ranks (traced into the plan in graph mode).
  std::optional<nn::BatchNormSync> sync_bn;
  if (opts_.parallel.sync_bn) sync_bn.emplace(dp_allreduce_sum, comm_->size());
  // A parameter the loss does not reach has no gradient: zeros, as the accumulation from zeros would give.
  const auto or_zeros = [this](std::vector<Tensor>& grads) {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (!grads[i].defined()) grads[i] = Tensor::zeros(slots_[i]->value.shape(), slots_[i]->value.dtype());
  };
  if (opts_.mode == "graph") {
    if (!shard_fn_) {
      // (x, y, counter, params, buffers[, scale]) -> (loss, buffers', grads): with loss scaling the backward runs on
      // loss * scale and the gradients come back divided by it (inf/nan where they overflowed).
      shard_fn_ = std::make_unique<CompiledFunction>(TensorFn([this, np, nb, or_zeros](std::span<const Tensor> in) {
                                                       Traced t = trace_forward_backward(
                                                           in[0], in[1], in[2], sub(in, 3, np), sub(in, 3 + np, nb),
                                                           scaling_ ? in[3 + np + nb] : Tensor());
                                                       or_zeros(t.grads);
                                                       std::vector<Tensor> out{t.loss};
                                                       out.insert(out.end(), t.buffers.begin(), t.buffers.end());
                                                       out.insert(out.end(), t.grads.begin(), t.grads.end());
                                                       return out;
                                                     }),
                                                     CompileRole{.name = "train_shard"});
    }
    std::vector<Tensor> in{x, y, counter_tensor(counter)};
    for (nn::Parameter* p : slots_) in.push_back(p->value);
    for (nn::Parameter* p : buffers_) in.push_back(p->value);
    if (scaling_) in.push_back(Tensor::scalar(scale_, DType::f32));
    Plan& plan = shard_fn_->plan_for(in);
    // Plan output o: the loss (0), buffer i (1 + i), gradient i (1 + nb + i).
    const auto item_of = [np, nb](size_t o) { return o == 0 ? np + nb : o <= nb ? np + o - 1 : o - 1 - nb; };
    if (dp_layout_for_ != &plan) {
      const std::vector<int>& steps = plan.output_ready_steps();
      SPORE_ASSERT(steps.size() == 1 + nb + np, "shard plan output count");
      std::vector<int> ready(np + nb + 1);
      for (size_t o = 0; o < steps.size(); ++o) ready[item_of(o)] = steps[o];
      dp_make_layout(ready, &plan);
    }
    std::vector<Tensor> out =
        plan.run(std::span<const Tensor>(in), [&](size_t o, const Tensor& v) { on_item(item_of(o), v); });
    SPORE_ASSERT(out.size() == 1 + nb + np, "shard plan output count");
    for (size_t i = 0; i < nb; ++i) buffers_[i]->value = out[1 + i];
    return;
  }
  if (dp_layout_for_ != this) {
    // Backward's order is about the reverse of the parameters'; the buckets follow it, and one goes out once all of
    // its gradients have (the loss and the buffers come first: they are known when backward starts).
    std::vector<int> ready(np + nb + 1, -1);
    for (size_t i = 0; i < np; ++i) ready[i] = static_cast<int>(np - i);
    dp_make_layout(ready, this);
  }
  // Each gradient is handed on as soon as backward has finished it (the tape's first-use rule), so the buckets'
  // allreduces overlap the rest of backward as in graph mode; the values are the ones the whole walk returns.
  std::map<std::string, size_t> item_of;
  for (size_t i = 0; i < np; ++i) item_of.emplace(names_[i], i);
  std::vector<uint8_t> handed(np, 0);
  bool front = false;
  Tensor loss_t;
  const auto hand_front = [&] {  // the loss and the buffers' new values: final once the forward has run
    if (front) return;
    front = true;
    for (size_t i = 0; i < nb; ++i) on_item(np + i, buffers_[i]->value);
    on_item(np + nb, loss_t);
  };
  const auto hand_grad = [&](size_t i, Tensor g) {
    if (scaling_) {  // as graph mode's trace: divided by the scale (a tensor input there, the same f32 value)
      autodiff::NoGradGuard no_grad;
      ops::AutocastScope f32_here(ops::AmpLevel::O0, DType::f16);  // called inside the step's autocast
      g = ops::div(g, Tensor::scalar(scale_, DType::f32));
    }
    handed[i] = 1;
    on_item(i, g);
  };
  {
    nn::StepScope scope(counter_tensor(counter));
    AmpScope amp(amp_level_, opts_.amp_dtype);
    nn::value_and_grad(
        net_,
        [&] {
          loss_t = loss_fn_(net_(x), y);
          return scaling_ ? ops::mul(loss_t, scale_) : loss_t;
        },
        [&](const std::string& name, const Tensor& g) {
          hand_front();
          const auto it = item_of.find(name);
          SPORE_ASSERT(it != item_of.end(), "data parallel: a gradient for an unknown parameter");
          hand_grad(it->second, g);
        });
  }
  hand_front();
  for (size_t i = 0; i < np; ++i)  // a parameter the loss does not reach: zeros
    if (!handed[i]) hand_grad(i, Tensor::zeros(slots_[i]->value.shape(), slots_[i]->value.dtype()));
}

double Model::train_step_data_parallel(const Tensor& x, const Tensor& y) {
  if (!ranks_checked_) {
    check_ranks_agree({});
    ranks_checked_ = true;
  }
  const int64_t n = comm_->size(), per_rank = shards_ / n, rows = x.dim(0);
  SPORE_CHECK(rows % per_rank == 0 && rows > 0, ErrorCode::invalid_argument,
              "data parallel: rank {} got {} rows, not a positive multiple of its {} shards (grad_shards {} / {} "
              "ranks)",
              comm_->rank(), rows, per_rank, shards_, n);
  const int64_t shard_rows = rows / per_rank;
  const size_t np = slots_.size(), nb = buffers_.size();
  // This rank's shards' gradients, buffers and loss flattened (dp_offset_); parameters f32 (master weights).
  int64_t total = 0;
  for (nn::Parameter* p : slots_) {
    SPORE_CHECK(p->value.dtype() == DType::f32, ErrorCode::unsupported,
                "data parallel: parameters must be f32 (master weights), got {}", dtype_name(p->value.dtype()));
    total += p->value.numel();
  }
  // Buffers (BatchNorm's running statistics): every shard starts from the step's buffers, and the new ones are the
  // mean over the M shards of each shard's update, reduced with the gradients - so N does not change them.
  int64_t nbuf = 0;
  for (nn::Parameter* p : buffers_) {
    SPORE_CHECK(p->value.dtype() == DType::f32, ErrorCode::unsupported, "data parallel: buffers must be f32, got {}",
                dtype_name(p->value.dtype()));
    nbuf += p->value.numel();
  }
  const std::vector<Tensor> step_buffers = buffer_values();
  std::vector<std::vector<float>>& flat = dp_flat_;  // every element is written below
  flat.resize(static_cast<size_t>(per_rank));
  for (std::vector<float>& f : flat) f.resize(static_cast<size_t>(total + nbuf + 1));
  // Bucket b: this rank's run of shards summed (a whole subtree of the M-shard tree), then allreduced, which sums the
  // runs in the same tree - on the communication thread once the last shard has produced all of the bucket.
  std::vector<int64_t> pending;
  size_t next_bucket = 0;
  std::vector<size_t> ready_buckets;  // without a communication thread: run after the last shard
  const auto reduce_bucket = [this, &flat](size_t b) {
    const int64_t lo = b == 0 ? 0 : dp_bucket_end_[b - 1], count = dp_bucket_end_[b] - lo;
    std::vector<float*> parts;
    for (auto& f : flat) parts.push_back(f.data() + lo);
    parallel::tree_sum<float>(parts, count);
    comm_->allreduce(flat[0].data() + lo, count, DType::f32, parallel::ReduceOp::sum);  // on the timeline
  };
  struct Drain {  // a step that throws leaves no job running on its vectors
    parallel::CommThread* t;
    ~Drain() {
      if (t == nullptr) return;
      try {
        t->drain();
      } catch (...) {  // the error that ended the step is the one to report
      }
    }
  } drain_on_throw{comm_thread_.get()};
  // SyncBatchNorm's allreduces inside the shard's forward and backward find the communicator (and thread) here.
  const StepCollectives collectives{comm_, comm_thread_.get()};
  g_step_collectives = &collectives;
  struct Unset {
    ~Unset() { g_step_collectives = nullptr; }
  } unset;
  for (int64_t k = 0; k < per_rank; ++k) {
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i]->value = step_buffers[i];
    // Each shard in fresh storage, so a kernel sees the same alignment whichever rank and offset it came from.
    const Tensor xs = x.slice(0, k * shard_rows, (k + 1) * shard_rows).clone();
    const Tensor ys = y.slice(0, k * shard_rows, (k + 1) * shard_rows).clone();
    const int64_t shard = comm_->rank() * per_rank + k;
    const bool last = k + 1 == per_rank;
    float* dst = flat[static_cast<size_t>(k)].data();
    shard_forward_backward(xs, ys, micro_step() * shards_ + shard, [&](size_t item, const Tensor& v) {
      if (item < np)
        SPORE_CHECK(v.dtype() == DType::f32, ErrorCode::unsupported, "data parallel: a {} gradient (expected f32)",
                    dtype_name(v.dtype()));
      if (item == np + nb) {
        dst[dp_offset_[item]] = static_cast<float>(v.item());
      } else {
        SPORE_CHECK(v.dtype() == DType::f32, ErrorCode::unsupported, "data parallel: a {} buffer (expected f32)",
                    dtype_name(v.dtype()));
        const Tensor c = v.contiguous();
        std::memcpy(dst + dp_offset_[item], c.raw_data(), c.nbytes());
      }
      if (!last) return;
      if (pending.empty()) {  // the layout is known once the first shard has begun
        pending.assign(dp_bucket_end_.size(), 0);
        for (int b : dp_item_bucket_) ++pending[static_cast<size_t>(b)];
      }
      if (--pending[static_cast<size_t>(dp_item_bucket_[item])] != 0) return;
      // Buckets start in order (every rank's allreduces pair up by order), each once all before it are complete.
      while (next_bucket < pending.size() && pending[next_bucket] == 0) {
        const size_t b = next_bucket++;
        if (!comm_thread_) {
          ready_buckets.push_back(b);
          continue;
        }
        if (Profiler* prof = Profiler::active()) {  // when backward handed the bucket over (an instant)
          const int64_t now = Profiler::now_ns();
          const int64_t count = dp_bucket_end_[b] - (b == 0 ? 0 : dp_bucket_end_[b - 1]);
          prof->record_span({fmt::format("bucket {} ready", b),
                             "bucket",
                             now,
                             now,
                             Profiler::thread_number(),
                             {{"bytes", static_cast<double>(count * static_cast<int64_t>(sizeof(float)))}}});
        }
        comm_thread_->submit([reduce_bucket, b] { reduce_bucket(b); });
      }
    });
  }
  SPORE_ASSERT(next_bucket == dp_bucket_end_.size(), "data parallel: every bucket reduced");
  if (comm_thread_) {
    drain_on_throw.t = nullptr;
    comm_thread_->drain();
  }
  for (size_t b : ready_buckets) reduce_bucket(b);
  float* sum = flat[0].data();
  const float m = static_cast<float>(shards_);
  if (opts_.parallel.gradients_mean)
    for (size_t i = 0; i < np; ++i) {
      float* g = sum + dp_offset_[i];
      for (int64_t e = 0, ne = slots_[i]->value.numel(); e < ne; ++e) g[e] = g[e] / m;
    }
  const double loss = static_cast<double>(sum[dp_offset_[np + nb]] / m);
  if (!opts_.parallel.sync_bn)
    for (size_t i = 0; i < nb; ++i) {
      nn::Parameter* b = buffers_[i];
      const float* src = sum + dp_offset_[np + i];
      Tensor t = Tensor::empty(b->value.shape(), DType::f32);
      float* d = static_cast<float*>(t.raw_data());
      for (int64_t e = 0; e < t.numel(); ++e) d[e] = src[e] / m;
      b->value = std::move(t);
    }
  // Gradient accumulation: the micro-batches' reduced gradients summed in order from zeros and divided by their
  // count, as one process's accumulation does; every rank holds the same sums, so N does not change a bit.
  if (opts_.grad_accumulation > 1) {
    if (dp_accum_.empty()) dp_accum_.assign(flat[0].size(), 0.0f);
    for (size_t i = 0; i < np; ++i) {
      const int64_t o = dp_offset_[i];
      for (int64_t e = o, end = o + slots_[i]->value.numel(); e < end; ++e) dp_accum_[static_cast<size_t>(e)] += sum[e];
    }
    if (++micro_ < opts_.grad_accumulation) return loss;
    const float a = static_cast<float>(opts_.grad_accumulation);
    for (size_t i = 0; i < np; ++i) {
      const int64_t o = dp_offset_[i];
      for (int64_t e = o, end = o + slots_[i]->value.numel(); e < end; ++e)
        sum[e] = dp_accum_[static_cast<size_t>(e)] / a;
    }
    dp_accum_.clear();
    micro_ = 0;
  }
  // Loss scaling: an overflow in any rank's shard makes the reduced sum inf or nan on every rank (inf + x = inf, nan
  // stays nan, inf - inf = nan), so the allreduce itself is the agreement - every rank skips the same steps and
  // moves its scale alike, with no extra collective.
  if (scaling_) {
    bool finite = true;
    for (size_t i = 0; i < np && finite; ++i) {
      const float* g = sum + dp_offset_[i];
      for (int64_t e = 0, ne = slots_[i]->value.numel(); e < ne && finite; ++e) finite = std::isfinite(g[e]);
    }
    if (note_overflow(!finite) && skip_on_overflow()) return loss;
  }
  std::vector<Tensor> grads;
  for (size_t i = 0; i < np; ++i) {
    Tensor g = Tensor::empty(slots_[i]->value.shape(), DType::f32);
    std::memcpy(g.raw_data(), sum + dp_offset_[i], g.nbytes());
    grads.push_back(std::move(g));
  }
  apply_update(grads);
  return loss;
}

void Model::apply_update(std::vector<Tensor>& grads) {
  autodiff::NoGradGuard no_grad;
  last_lr_ = opt_.lr_at(step_);
  const Tensor lr = Tensor::scalar(last_lr_, DType::f32);
  const Tensor t = Tensor::scalar(static_cast<double>(step_ + 1), DType::f32);
  bool all_defined = true;
  for (const Tensor& g : grads) all_defined &= g.defined();
  if (!all_defined) {
    if (opts_.clip_norm > 0) clip_by_global_norm(grads, opts_.clip_norm);
    std::vector<Tensor> fresh = opt_.update(param_values(), grads, state_, lr, t);
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i]->value = fresh[i];
    ++step_;
    return;
  }
  // The update runs as one cached plan (MindSpore compiles the optimizer in PyNative mode too): a few
  // elementwise ops per parameter, each of which eagerly cost a dispatch and a fresh output. The plan runs the
  // same ops with the same kernels as the eager code and as graph mode's step plan, so the bits are the same.
  const size_t np = slots_.size(), ns = state_.size();
  if (!update_fn_) {
    // (lr, t, params, grads, state) -> (params', state')
    update_fn_ = std::make_unique<CompiledFunction>(TensorFn([this, np, ns](std::span<const Tensor> in) {
      autodiff::NoGradGuard no_grad;
      const std::span<const Tensor> g_in = sub(in, 2 + np, np), state_in = sub(in, 2 + 2 * np, ns);
      std::vector<Tensor> g(g_in.begin(), g_in.end()), state(state_in.begin(), state_in.end());
      if (opts_.clip_norm > 0) clip_by_global_norm(g, opts_.clip_norm);
      std::vector<Tensor> out = opt_.update(sub(in, 2, np), g, state, in[0], in[1]);
      out.insert(out.end(), state.begin(), state.end());
      return out;
    }), CompileRole{.name = "optimizer_update"});
  }
  std::vector<Tensor> in{lr, t};
  in.reserve(2 + 2 * np + ns);
  for (nn::Parameter* p : slots_) in.push_back(p->value);
  in.insert(in.end(), grads.begin(), grads.end());
  in.insert(in.end(), state_.begin(), state_.end());
  std::vector<Tensor> out = (*update_fn_)(std::span<const Tensor>(in));
  SPORE_ASSERT(out.size() == np + ns, "update plan output count");
  for (size_t i = 0; i < np; ++i) slots_[i]->value = out[i];
  for (size_t i = 0; i < ns; ++i) state_[i] = out[np + i];
  ++step_;
}

double Model::train_step_pynative(const Tensor& x, const Tensor& y) {
  nn::LossAndGrads r;
  Tensor loss_t;
  {
    nn::StepScope scope(counter_tensor(micro_step()));
    AmpScope amp(amp_level_, opts_.amp_dtype);
    r = nn::value_and_grad(net_, [&] {
      loss_t = loss_fn_(net_(x), y);
      return scaling_ ? ops::mul(loss_t, scale_) : loss_t;
    });
  }
  std::vector<Tensor> grads;
  grads.reserve(names_.size());
  for (const std::string& n : names_) grads.push_back(r.grads.at(n));
  const double loss = loss_t.item();
  if (scaling_) {
    bool finite = true;
    {
      autodiff::NoGradGuard no_grad;
      for (Tensor& g : grads)
        if (g.defined()) g = ops::div(g, scale_);
      finite = all_finite(grads).item() != 0;
    }
    if (note_overflow(!finite) && skip_on_overflow()) return loss;
  }
  if (opts_.grad_accumulation == 1) {
    apply_update(grads);
    return loss;
  }
  // The graph mode's arithmetic: accumulate from zeros, then divide by N (so -0 grads and rounding agree).
  autodiff::NoGradGuard no_grad;
  if (accum_.empty())
    for (nn::Parameter* p : slots_) accum_.push_back(Tensor::zeros(p->value.shape(), p->value.dtype()));
  for (size_t i = 0; i < grads.size(); ++i) accum_[i] = ops::add(accum_[i], grads[i]);
  if (++micro_ == opts_.grad_accumulation) {
    std::vector<Tensor> mean;
    for (const Tensor& g : accum_) mean.push_back(ops::div(g, static_cast<double>(opts_.grad_accumulation)));
    accum_.clear();
    micro_ = 0;
    apply_update(mean);
  }
  return loss;
}

Model::Traced Model::trace_forward_backward(const Tensor& x, const Tensor& y, const Tensor& counter,
                                            std::span<const Tensor> params, std::span<const Tensor> buffers,
                                            const Tensor& scale) {
  // Parameters and buffers are graph inputs: the cells read the symbolic inputs through their slots while
  // tracing; BatchNorm assigns its new running stats to the buffer slots (inside the StepScope), which we read
  // back as outputs before the bindings restore the concrete values.
  SlotBinding bind_params(slots_, params), bind_buffers(buffers_, buffers);
  Traced t;
  nn::LossAndGrads r;
  {
    nn::StepScope scope(counter);
    AmpScope amp(amp_level_, opts_.amp_dtype);
    r = nn::value_and_grad(net_, [&] {
      t.logits = net_(x);
      t.loss = loss_fn_(t.logits, y);
      return scale.defined() ? ops::mul(t.loss, scale) : t.loss;
    });
  }
  for (const std::string& n : names_) t.grads.push_back(r.grads.at(n));
  if (scale.defined()) {
    autodiff::NoGradGuard no_grad;
    for (Tensor& g : t.grads)
      if (g.defined()) g = ops::div(g, scale);
  }
  t.buffers = buffer_values();
  return t;
}

double Model::train_step_graph(const Tensor& x, const Tensor& y) {
  if (opts_.grad_accumulation > 1) return train_micro_graph(x, y);
  const size_t np = slots_.size(), nb = buffers_.size();
  if (!step_fn_) {
    // (x, y, lr, t, counter, params, buffers, state) -> (loss, logits, params', buffers', state')
    // With loss scaling the scale is the last input and a bool "all gradients finite" the last output; skipping an
    // overflowed step keeps the old parameters and state (where(finite, new, old)) inside the plan.
    const size_t ns0 = state_.size();
    step_fn_ = std::make_unique<CompiledFunction>(TensorFn([this, np, nb, ns0](std::span<const Tensor> in) {
      const Tensor scale = scaling_ ? in[5 + np + nb + ns0] : Tensor();
      Traced t = trace_forward_backward(in[0], in[1], in[4], sub(in, 5, np), sub(in, 5 + np, nb), scale);
      autodiff::NoGradGuard no_grad;
      const Tensor finite = scaling_ ? all_finite(t.grads) : Tensor();
      if (opts_.clip_norm > 0) clip_by_global_norm(t.grads, opts_.clip_norm);
      const std::span<const Tensor> params = sub(in, 5, np);
      const std::span<const Tensor> state_in = sub(in, 5 + np + nb, ns0);
      std::vector<Tensor> state(state_in.begin(), state_in.end());
      std::vector<Tensor> fresh = opt_.update(params, t.grads, state, in[2], in[3]);
      if (scaling_ && skip_on_overflow()) {
        for (size_t i = 0; i < np; ++i) fresh[i] = ops::where(finite, fresh[i], params[i]);
        for (size_t i = 0; i < ns0; ++i) state[i] = ops::where(finite, state[i], state_in[i]);
      }
      std::vector<Tensor> out{t.loss, t.logits};
      out.insert(out.end(), fresh.begin(), fresh.end());
      out.insert(out.end(), t.buffers.begin(), t.buffers.end());
      out.insert(out.end(), state.begin(), state.end());
      if (scaling_) out.push_back(finite);
      return out;
    }), CompileRole{.name = "train_step"});
  }
  last_lr_ = opt_.lr_at(step_);
  std::vector<Tensor> in{x, y, Tensor::scalar(last_lr_, DType::f32),
                         Tensor::scalar(static_cast<double>(step_ + 1), DType::f32), counter_tensor(micro_step())};
  for (nn::Parameter* p : slots_) in.push_back(p->value);
  for (nn::Parameter* p : buffers_) in.push_back(p->value);
  in.insert(in.end(), state_.begin(), state_.end());
  if (scaling_) in.push_back(Tensor::scalar(scale_, DType::f32));
  std::vector<Tensor> out = (*step_fn_)(std::span<const Tensor>(in));
  SPORE_ASSERT(out.size() == 2 + np + nb + state_.size() + (scaling_ ? 1 : 0), "step plan output count");
  for (size_t i = 0; i < np; ++i) slots_[i]->value = out[2 + i];
  for (size_t i = 0; i < nb; ++i) buffers_[i]->value = out[2 + np + i];
  for (size_t i = 0; i < state_.size(); ++i) state_[i] = out[2 + np + nb + i];
  const bool skipped = scaling_ && note_overflow(out.back().item() == 0) && skip_on_overflow();
  if (!skipped) ++step_;
  return out[0].item();
}

double Model::train_micro_graph(const Tensor& x, const Tensor& y) {
  const size_t np = slots_.size(), nb = buffers_.size(), ns = state_.size();
  const int64_t n_micro = opts_.grad_accumulation;
  if (!micro_fn_) {
    // (x, y, counter, params, buffers, accum) -> (loss, logits, buffers', accum + grads)
    micro_fn_ = std::make_unique<CompiledFunction>(TensorFn([this, np, nb](std::span<const Tensor> in) {
      Traced t = trace_forward_backward(in[0], in[1], in[2], sub(in, 3, np), sub(in, 3 + np, nb));
      autodiff::NoGradGuard no_grad;
      std::vector<Tensor> out{t.loss, t.logits};
      out.insert(out.end(), t.buffers.begin(), t.buffers.end());
      for (size_t i = 0; i < np; ++i) out.push_back(ops::add(in[3 + np + nb + i], t.grads[i]));
      return out;
    }), CompileRole{.name = "train_micro"});
    // (lr, t, params, state, accum) -> (params', state')
    apply_fn_ = std::make_unique<CompiledFunction>(TensorFn([this, np, ns, n_micro](std::span<const Tensor> in) {
      autodiff::NoGradGuard no_grad;
      std::vector<Tensor> grads;
      for (const Tensor& a : sub(in, 2 + np + ns, np)) grads.push_back(ops::div(a, static_cast<double>(n_micro)));
      if (opts_.clip_norm > 0) clip_by_global_norm(grads, opts_.clip_norm);
      const std::span<const Tensor> state_in = sub(in, 2 + np, ns);
      std::vector<Tensor> state(state_in.begin(), state_in.end());
      std::vector<Tensor> out = opt_.update(sub(in, 2, np), grads, state, in[0], in[1]);
      out.insert(out.end(), state.begin(), state.end());
      return out;
    }), CompileRole{.name = "train_apply"});
  }
  if (accum_.empty())
    for (nn::Parameter* p : slots_) accum_.push_back(Tensor::zeros(p->value.shape(), p->value.dtype()));
  std::vector<Tensor> in{x, y, counter_tensor(micro_step())};
  for (nn::Parameter* p : slots_) in.push_back(p->value);
  for (nn::Parameter* p : buffers_) in.push_back(p->value);
  in.insert(in.end(), accum_.begin(), accum_.end());
  std::vector<Tensor> out = (*micro_fn_)(std::span<const Tensor>(in));
  SPORE_ASSERT(out.size() == 2 + nb + np, "micro plan output count");
  for (size_t i = 0; i < nb; ++i) buffers_[i]->value = out[2 + i];
  for (size_t i = 0; i < np; ++i) accum_[i] = out[2 + nb + i];
  const double loss = out[0].item();
  if (++micro_ < n_micro) return loss;

  last_lr_ = opt_.lr_at(step_);
  std::vector<Tensor> ain{Tensor::scalar(last_lr_, DType::f32),
                          Tensor::scalar(static_cast<double>(step_ + 1), DType::f32)};
  for (nn::Parameter* p : slots_) ain.push_back(p->value);
  ain.insert(ain.end(), state_.begin(), state_.end());
  ain.insert(ain.end(), accum_.begin(), accum_.end());
  std::vector<Tensor> aout = (*apply_fn_)(std::span<const Tensor>(ain));
  SPORE_ASSERT(aout.size() == np + ns, "apply plan output count");
  for (size_t i = 0; i < np; ++i) slots_[i]->value = aout[i];
  for (size_t i = 0; i < ns; ++i) state_[i] = aout[np + i];
  accum_.clear();
  micro_ = 0;
  ++step_;
  return loss;
}

bool Model::note_overflow(bool overflowed) {
  last_overflow_ = overflowed;
  const LossScale& ls = opts_.loss_scale;
  if (overflowed) {
    ++overflow_steps_;
    if (ls.kind == "dynamic") scale_ = std::max(1.0, scale_ / ls.factor);
    good_steps_ = 0;
  } else if (ls.kind == "dynamic" && ++good_steps_ >= ls.window) {
    scale_ *= ls.factor;
    good_steps_ = 0;
  }
  return overflowed;
}

Tensor Model::forward_eval(const Tensor& x) {
  autodiff::NoGradGuard no_grad;
  if (opts_.mode != "graph") return net_(x);
  // The eval graph is an inference graph (CompileOptions::inference: batch_norm folded into the conv/linear
  // before it, dropout removed, fusion): the parameters and running stats are baked in as constants, which the
  // folding needs, so the plans are rebuilt when a parameter holds another tensor than at their compile (every
  // optimizer step, a checkpoint load). Holding the compiled-in tensors keeps their bytes from being reused, so
  // a new tensor never looks like an old one. The train step stays a training graph (inference=false).
  std::vector<nn::Parameter*> all = net_.parameter_slots();
  bool same = eval_fn_ != nullptr && eval_params_.size() == all.size();
  for (size_t i = 0; same && i < all.size(); ++i)
    same = all[i]->value.storage() == eval_params_[i].storage() && all[i]->value.raw_data() == eval_params_[i].raw_data();
  if (!same) {
    eval_params_.clear();
    for (nn::Parameter* p : all) eval_params_.push_back(p->value);
    eval_fn_ = std::make_unique<CompiledFunction>(
        TensorFn([this](std::span<const Tensor> in) { return std::vector<Tensor>{net_(in[0])}; }),
        CompileRole{.name = "eval", .inference = true});
  }
  return (*eval_fn_)({x})[0];
}

const Plan* Model::compiled_plan(const std::string& which) const {
  const std::map<std::string, const CompiledFunction*> fns{{"step", step_fn_.get()},   {"micro", micro_fn_.get()},
                                                           {"shard", shard_fn_.get()}, {"apply", apply_fn_.get()},
                                                           {"eval", eval_fn_.get()},   {"update", update_fn_.get()}};
  auto it = fns.find(which);
  SPORE_CHECK(it != fns.end(), ErrorCode::invalid_argument,
              "train::Model::compiled_plan: expected 'step', 'micro', 'shard', 'apply', 'eval' or 'update', got '{}'",
              which);
  return it->second ? it->second->last_plan() : nullptr;
}

Tensor Model::predict(const Tensor& x) {
  const bool was_training = net_.training();
  net_.set_train(false);
  Tensor y;
  try {
    y = forward_eval(x);
  } catch (...) {
    net_.set_train(was_training);
    throw;
  }
  net_.set_train(was_training);
  return y;
}

std::map<std::string, double> Model::eval(const data::Dataset& ds) {
  const bool was_training = net_.training();
  net_.set_train(false);
  struct Back {
    nn::Cell& net;
    bool mode;
    ~Back() { net.set_train(mode); }
  } back{net_, was_training};
  std::vector<std::unique_ptr<Metric>> metrics;
  for (const std::string& m : metrics_) metrics.push_back(make_metric(m));
  double loss_sum = 0;
  int64_t n = 0;
  const std::vector<int64_t> order = ds.epoch_order(0);
  for (int64_t b = 0; b < ds.batches_per_epoch(); ++b) {
    data::Batch batch = ds.make_batch(0, b, order);
    SPORE_CHECK(batch.y.defined(), ErrorCode::invalid_argument, "train::Model::eval: the dataset has no labels");
    const Tensor logits = forward_eval(batch.x);
    const int64_t count = batch.x.dim(0);
    {
      autodiff::NoGradGuard no_grad;
      const Tensor loss = loss_fn_(logits, batch.y);
      loss_sum += loss.item() * static_cast<double>(count);
      for (auto& m : metrics) m->update(logits, batch.y, loss);
    }
    n += count;
  }
  SPORE_CHECK(n > 0, ErrorCode::invalid_argument, "train::Model::eval: the dataset yields no batches");
  std::map<std::string, double> r;
  for (size_t i = 0; i < metrics.size(); ++i) r[metrics_[i]] = metrics[i]->value();
  r["loss"] = loss_sum / static_cast<double>(n);
  r["samples"] = static_cast<double>(n);
  return r;
}

void Model::train(int64_t epochs, const data::Dataset& ds, std::vector<std::shared_ptr<Callback>> callbacks,
                  const data::Dataset* eval_ds) {
  SPORE_CHECK(epochs >= 0, ErrorCode::invalid_argument, "train::Model::train: expected epochs >= 0, got {}", epochs);
  SPORE_CHECK(ds.batches_per_epoch() > 0, ErrorCode::invalid_argument,
              "train::Model::train: the dataset yields no batches ({} samples)", ds.size());
  if (comm_) {
    const int64_t first = ds.batch_size(0), last = ds.batch_size(ds.batches_per_epoch() - 1);
    SPORE_CHECK(first % shards_ == 0 && last % shards_ == 0, ErrorCode::invalid_argument,
                "data parallel: batches of {} rows (the last {}) do not split into grad_shards {} equal shards: use a "
                "batch size that {} divides, and drop_remainder",
                first, last, shards_, shards_);
    check_ranks_agree({{"global batch", std::to_string(first)},
                       {"dataset", fmt::format("{} samples, {} batches", ds.size(), ds.batches_per_epoch())},
                       {"epoch", std::to_string(epoch_)}});
    ranks_checked_ = true;
  }
  RunContext c;
  c.model = this;
  c.epochs = epoch_ + epochs;
  c.batches_per_epoch = ds.batches_per_epoch();
  c.step = step_;
  for (auto& cb : callbacks) cb->on_train_begin(c);
  while (epoch_ < c.epochs && !c.stop) {
    c.epoch = epoch_;
    c.metrics.clear();
    for (auto& cb : callbacks) cb->on_epoch_begin(c);
    const std::vector<int64_t> order = ds.epoch_order(epoch_);
    // A run resumed from a mid-epoch checkpoint continues after its last batch, with its loss sum.
    SPORE_CHECK(batch_ <= c.batches_per_epoch, ErrorCode::invalid_argument,
                "train::Model::train: the checkpoint is at batch {} of epoch {}, but the dataset has {} batches per "
                "epoch",
                batch_, epoch_ + 1, c.batches_per_epoch);
    double loss_sum = epoch_loss_sum_;
    int64_t seen = epoch_samples_;
    for (int64_t b = batch_; b < c.batches_per_epoch && !c.stop; ++b) {
      // Data parallel: this rank's rows of the global batch only (the distributed sampler).
      const int64_t global_rows = ds.batch_size(b), rows = comm_ ? global_rows / comm_->size() : global_rows;
      data::Batch batch =
          comm_ ? ds.make_batch(epoch_, b, order, comm_->rank() * rows, rows) : ds.make_batch(epoch_, b, order);
      SPORE_CHECK(batch.y.defined(), ErrorCode::invalid_argument, "train::Model::train: the dataset has no labels");
      c.loss = train_step(batch.x, batch.y);
      c.batch = b;
      c.batch_size = global_rows;
      c.step = step_;
      c.lr = last_lr_;
      c.loss_scale = scale_;
      c.overflow = last_overflow_;
      loss_sum += c.loss * static_cast<double>(c.batch_size);
      seen += c.batch_size;
      batch_ = b + 1;  // what a checkpoint saved by a callback now records
      epoch_loss_sum_ = loss_sum;
      epoch_samples_ = seen;
      for (auto& cb : callbacks) cb->on_step_end(c);
      if (c.stop && b + 1 < c.batches_per_epoch) seen = -1;  // stopped mid-epoch
    }
    batch_ = epoch_samples_ = 0;  // a stopped epoch starts again from its first batch, as before
    epoch_loss_sum_ = 0;
    if (seen < 0) break;
    ++epoch_;
    c.metrics["loss"] = loss_sum / static_cast<double>(seen);
    if (scaling_) {
      c.metrics["loss_scale"] = scale_;
      c.metrics["overflow_steps"] = static_cast<double>(overflow_steps_);
    }
    if (eval_ds)
      for (auto& [k, v] : eval(*eval_ds)) c.metrics["eval_" + k] = v;
    for (auto& cb : callbacks) cb->on_epoch_end(c);
  }
  for (auto& cb : callbacks) cb->on_train_end(c);
}

void Model::save_checkpoint(const std::string& path) const {
  CheckpointInfo info;
  info.step = step_;
  info.epoch = epoch_;
  info.seed = opts_.seed;
  if (batch_ > 0) {  // mid-epoch (exact: hex floats)
    SPORE_CHECK(micro_ == 0, ErrorCode::invalid_argument,
                "train::Model::save_checkpoint: {} of {} micro-batches of the step are pending (save after a step)",
                micro_, opts_.grad_accumulation);
    info.extra["batch"] = std::to_string(batch_);
    info.extra["epoch_loss_sum"] = fmt::format("{:a}", epoch_loss_sum_);
    info.extra["epoch_samples"] = std::to_string(epoch_samples_);
  }
  if (scaling_) {
    info.extra["loss_scale"] = fmt::format("{:a}", scale_);
    info.extra["loss_scale_good_steps"] = std::to_string(good_steps_);
    info.extra["overflow_steps"] = std::to_string(overflow_steps_);
  }
  if (!comm_ || comm_->rank() == 0) train::save_checkpoint(path, net_, &opt_, state_, info);
  if (comm_) comm_->barrier();  // the file is complete before any rank goes on (and may load it)
}

void Model::load_checkpoint(const std::string& path) {
  CheckpointInfo info = train::load_checkpoint(path, net_, &opt_, &state_);
  step_ = info.step;
  epoch_ = info.epoch;
  const auto meta = [&](const char* key) -> const std::string* {
    auto it = info.extra.find(key);
    return it == info.extra.end() ? nullptr : &it->second;
  };
  const auto number = [&](const char* key, const std::string& v) {
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    SPORE_CHECK(!v.empty() && end && *end == '\0', ErrorCode::parse_error,
                "train::Model::load_checkpoint: {}: metadata '{}' is not a number: '{}'", path, key, v);
    return d;
  };
  batch_ = epoch_samples_ = 0;
  epoch_loss_sum_ = 0;
  if (const std::string* b = meta("batch")) {
    batch_ = static_cast<int64_t>(number("batch", *b));
    epoch_samples_ = meta("epoch_samples") ? static_cast<int64_t>(number("epoch_samples", *meta("epoch_samples"))) : 0;
    epoch_loss_sum_ = meta("epoch_loss_sum") ? number("epoch_loss_sum", *meta("epoch_loss_sum")) : 0;
  }
  if (scaling_ && meta("loss_scale")) {
    scale_ = number("loss_scale", *meta("loss_scale"));
    good_steps_ = meta("loss_scale_good_steps")
                      ? static_cast<int64_t>(number("loss_scale_good_steps", *meta("loss_scale_good_steps")))
                      : 0;
    overflow_steps_ =
        meta("overflow_steps") ? static_cast<int64_t>(number("overflow_steps", *meta("overflow_steps"))) : 0;
  }
  accum_.clear();
  dp_accum_.clear();
  micro_ = 0;
  eval_fn_.reset();  // its plans have the old weights compiled in
  eval_params_.clear();
}

}  // namespace spore::train
