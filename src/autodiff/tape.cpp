#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "autodiff/autodiff.h"
#include "ops/ops.h"

namespace spore::autodiff {
namespace {

// What a tape puts in Tensor::autograd_slot(): which tape tracks the tensor and under which id.
// A handle copy shares the mark; views made outside ops:: drop it (Tensor::as_strided resets the slot).
struct Mark {
  uint64_t tape_id;
  int64_t id;
};

thread_local GradientTape* t_active = nullptr;
std::atomic<uint64_t> g_next_tape_id{1};

Tensor ones_like(const Tensor& t) { return ops::full(t.shape(), 1.0, t.dtype()); }
Tensor zeros_like(const Tensor& t) { return ops::zeros(t.shape(), t.dtype()); }

}  // namespace

GradientTape::GradientTape() : tape_id_(g_next_tape_id.fetch_add(1)), prev_(t_active) { t_active = this; }

GradientTape::~GradientTape() {
  // Tapes usually nest like scopes. One destroyed out of order (a pipeline keeps a tape per micro-batch in flight
  // and ends them first in, first out) is unlinked from the chain, so no tape is left pointing at it.
  if (t_active == this) {
    t_active = prev_;
    return;
  }
  for (GradientTape* t = t_active; t != nullptr; t = t->prev_)
    if (t->prev_ == this) {
      t->prev_ = prev_;
      break;
    }
}

GradientTape* GradientTape::active() { return t_active; }

int64_t GradientTape::id_of(const Tensor& t) const {
  const auto* m = static_cast<const Mark*>(t.autograd_slot().get());
  return m && m->tape_id == tape_id_ ? m->id : -1;
}

int64_t GradientTape::mark(Tensor& t) {
  const int64_t id = next_id_++;
  t.autograd_slot() = std::make_shared<Mark>(Mark{tape_id_, id});
  return id;
}

Tensor GradientTape::watch(const Tensor& t) {
  SPORE_CHECK(t.defined(), ErrorCode::invalid_argument, "autodiff: cannot watch an undefined tensor");
  SPORE_CHECK(is_floating(t.dtype()), ErrorCode::dtype_mismatch,
              "autodiff: gradients need a floating tensor, got {}", dtype_name(t.dtype()));
  Tensor w = t;
  mark(w);
  return w;
}

bool GradientTape::is_watched(const Tensor& t) const { return id_of(t) >= 0; }

void GradientTape::record(const OpDef& def, std::span<const Tensor> inputs, const Attrs& attrs,
                          std::vector<Tensor>& outputs) {
  if (!recording_ || def.traits.has(Trait::no_grad)) return;
  std::vector<int64_t> in_ids(inputs.size());
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) any |= (in_ids[i] = id_of(inputs[i])) >= 0;
  if (!any) return;
  if (!def.grad) {
    // A decomposition already recorded the ops that made these outputs: keep that path.
    bool tracked = !outputs.empty();
    for (const Tensor& o : outputs) tracked &= !is_floating(o.dtype()) || id_of(o) >= 0;
    if (tracked) return;
  }
  Node n{&def, attrs, std::vector<Tensor>(inputs.begin(), inputs.end()), {}, std::move(in_ids), {}};
  n.output_ids.resize(outputs.size(), -1);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (is_floating(outputs[i].dtype())) n.output_ids[i] = mark(outputs[i]);
  n.outputs = outputs;
  nodes_.push_back(std::move(n));
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, std::span<const Tensor> sources, const Tensor& seed,
                                           const ReadyFn& ready) {
  SPORE_CHECK(target.defined() && is_floating(target.dtype()), ErrorCode::invalid_argument,
              "autodiff: the differentiated value must be a floating tensor");
  recording_ = false;
  std::unordered_set<int64_t> keep;  // gradients of sources survive the walk
  for (const Tensor& s : sources) keep.insert(id_of(s));
  std::unordered_map<int64_t, Tensor> grads;
  const int64_t tid = id_of(target);
  if (tid >= 0) {
    if (seed.defined()) {
      SPORE_CHECK(seed.shape() == target.shape(), ErrorCode::shape_mismatch,
                  "autodiff: seed shape {} differs from target shape {}", shape_str(seed.shape()),
                  shape_str(target.shape()));
    }
    grads[tid] = seed.defined() ? seed : ones_like(target);
  }
  // With `ready`: the sources whose first use is record r are final once the walk has done r.
  std::vector<std::vector<size_t>> final_after;
  std::vector<uint8_t> handed(sources.size(), 0);
  if (ready && tid >= 0) {
    std::unordered_map<int64_t, size_t> first_use;  // source id -> record
    for (size_t r = 0; r < nodes_.size(); ++r)
      for (int64_t id : nodes_[r].input_ids)
        if (id >= 0 && keep.count(id)) first_use.try_emplace(id, r);
    final_after.resize(nodes_.size());
    for (size_t k = 0; k < sources.size(); ++k)
      if (auto f = first_use.find(id_of(sources[k])); f != first_use.end()) final_after[f->second].push_back(k);
  }
  const auto hand = [&](size_t r) {
    for (size_t k : final_after[r]) {
      if (handed[k]) continue;  // a source listed twice
      handed[k] = 1;
      auto g = grads.find(id_of(sources[k]));
      ready(k, g != grads.end() ? g->second : zeros_like(sources[k]));
    }
  };
  for (auto it = nodes_.rbegin(); it != nodes_.rend() && tid >= 0; ++it) {
    const size_t r = static_cast<size_t>(nodes_.rend() - it) - 1;
    Node& n = *it;
    std::vector<Tensor> out_grads(n.outputs.size());
    bool any = false;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.output_ids[i] < 0) continue;
      auto g = grads.find(n.output_ids[i]);
      if (g == grads.end()) continue;
      out_grads[i] = g->second;
      any = true;
      if (!keep.count(n.output_ids[i])) grads.erase(g);  // consumed: free it early
    }
    if (!any) {
      if (!final_after.empty()) hand(r);
      continue;
    }
    SPORE_CHECK(static_cast<bool>(n.def->grad), ErrorCode::unsupported,
                "[{}] has no gradient rule, but a gradient flows through it", n.def->name);
    // Multi-output rules get zeros for floating outputs that received no gradient.
    if (n.outputs.size() > 1)
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (!out_grads[i].defined() && n.output_ids[i] >= 0) out_grads[i] = zeros_like(n.outputs[i]);
    // Only tracked inputs need a gradient: rules skip the rest (e.g. the input image's gradient of a first conv).
    std::vector<uint8_t> wanted(n.inputs.size());
    for (size_t i = 0; i < wanted.size(); ++i) wanted[i] = n.input_ids[i] >= 0;
    const GradContext ctx{n.inputs, n.outputs, out_grads, n.attrs, wanted};
    std::vector<Tensor> in_grads = n.def->grad(ctx);
    SPORE_CHECK(in_grads.size() <= n.inputs.size(), ErrorCode::internal,
                "[{}] gradient rule returned {} gradients for {} inputs", n.def->name, in_grads.size(),
                n.inputs.size());
    for (size_t i = 0; i < in_grads.size(); ++i) {
      if (n.input_ids[i] < 0 || !in_grads[i].defined()) continue;
      const Tensor& x = n.inputs[i];
      Tensor g = in_grads[i];
      SPORE_CHECK(g.shape() == x.shape(), ErrorCode::internal,
                  "[{}] gradient rule gave input {} a gradient of shape {}, expected {}", n.def->name, i,
                  shape_str(g.shape()), shape_str(x.shape()));
      if (g.dtype() != x.dtype()) g = ops::cast(g, x.dtype());
      auto [slot, fresh] = grads.try_emplace(n.input_ids[i], g);
      if (!fresh) slot->second = ops::add(slot->second, g);
    }
    n = Node{};  // the record is spent; drop its tensors
    if (!final_after.empty()) hand(r);
  }
  std::vector<Tensor> out;
  out.reserve(sources.size());
  for (size_t k = 0; k < sources.size(); ++k) {
    auto g = grads.find(id_of(sources[k]));
    out.push_back(g != grads.end() ? g->second : zeros_like(sources[k]));
    if (ready && !handed[k]) ready(k, out.back());
  }
  nodes_.clear();
  return out;
}

NoGradGuard::NoGradGuard() : saved_(t_active) { t_active = nullptr; }
NoGradGuard::~NoGradGuard() { t_active = saved_; }

void record_op(const OpDef& def, std::span<const Tensor> inputs, const Attrs& attrs, std::vector<Tensor>& outputs) {
  if (GradientTape* t = t_active) t->record(def, inputs, attrs, outputs);
}

std::pair<Tensor, std::vector<Tensor>> value_and_grad(const ScalarFn& f, std::span<const Tensor> inputs,
                                                      std::vector<int> wrt) {
  if (wrt.empty())
    for (size_t i = 0; i < inputs.size(); ++i) wrt.push_back(static_cast<int>(i));
  GradientTape tape;
  std::vector<Tensor> args(inputs.begin(), inputs.end());
  std::vector<Tensor> sources;
  for (int i : wrt) {
    SPORE_CHECK(i >= 0 && i < static_cast<int>(args.size()), ErrorCode::invalid_argument,
                "autodiff: wrt index {} out of range for {} inputs", i, args.size());
    args[i] = tape.watch(inputs[i]);
    sources.push_back(args[i]);
  }
  Tensor y = f(args);
  SPORE_CHECK(y.defined(), ErrorCode::invalid_argument, "autodiff: the function returned an undefined tensor");
  std::vector<Tensor> g = tape.gradient(y, sources);
  y.autograd_slot().reset();
  return {y, std::move(g)};
}

std::vector<Tensor> grad(const ScalarFn& f, std::span<const Tensor> inputs, std::vector<int> wrt) {
  return value_and_grad(f, inputs, std::move(wrt)).second;
}

}  // namespace spore::autodiff
