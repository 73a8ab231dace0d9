#pragma once
// Reverse-mode autodiff over the ops:: API (docs/ARCHITECTURE.md, "one rule, two modes").
//
// A GradientTape, while alive, records every op whose inputs it watches (the runtime's dispatcher calls
// record_op after each ops:: call). gradient() walks the records in reverse and calls each OpDef's grad
// rule, which is itself written with ops::. Executed eagerly that computes gradients now; under a Tracer
// the same calls record the backward graph next to the forward one, so forward + backward compile into one
// plan.
//
//   auto [loss, grads] = autodiff::value_and_grad(
//       [](std::span<const Tensor> in) { return ops::reduce_sum(ops::mul(in[0], in[1])); }, {x, w});
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "base/attrs.h"
#include "ops/op_def.h"
#include "tensor/tensor.h"

namespace spore::autodiff {

class GradientTape {
 public:
  GradientTape();  // becomes the recording tape of this thread until destroyed
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  // A handle to `t` (same data) whose descendants this tape records; gradients are asked for by it.
  Tensor watch(const Tensor& t);
  bool is_watched(const Tensor& t) const;
  // d(sum(target * seed)) / d(source) for each source (seed defaults to ones). Sources that do not
  // influence the target get zeros. Recording stops first: a tape computes gradients once.
  // `ready`, if given, is called once per source with its final gradient as soon as the walk has passed the
  // source's first use (so later layers' gradients come out while earlier layers' backward still runs: data
  // parallelism allreduces them meanwhile); sources the target does not reach come last, as zeros.
  using ReadyFn = std::function<void(size_t source, const Tensor& grad)>;
  std::vector<Tensor> gradient(const Tensor& target, std::span<const Tensor> sources, const Tensor& seed = Tensor(),
                               const ReadyFn& ready = nullptr);

  // Called by the dispatcher after an op ran (or was traced); `outputs` are marked when recorded.
  void record(const OpDef& def, std::span<const Tensor> inputs, const Attrs& attrs, std::vector<Tensor>& outputs);
  size_t num_records() const { return nodes_.size(); }

  static GradientTape* active();

 private:
  struct Node {
    const OpDef* def;
    Attrs attrs;
    std::vector<Tensor> inputs, outputs;
    std::vector<int64_t> input_ids, output_ids;  // -1: not tracked
  };
  int64_t id_of(const Tensor& t) const;
  int64_t mark(Tensor& t);

  uint64_t tape_id_;
  int64_t next_id_ = 0;
  bool recording_ = true;
  GradientTape* prev_;
  std::vector<Node> nodes_;
};

// Suspends recording on this thread (nested scopes fine), e.g. for optimizer updates.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  GradientTape* saved_;
};

// Hook for the dispatcher: records onto the active tape, if any (cheap when none is active).
void record_op(const OpDef& def, std::span<const Tensor> inputs, const Attrs& attrs, std::vector<Tensor>& outputs);

using ScalarFn = std::function<Tensor(std::span<const Tensor>)>;
// Gradients of f(inputs) (which must return a floating tensor; non-scalars are summed) with respect to
// inputs[wrt[k]]; wrt empty = every input.
std::vector<Tensor> grad(const ScalarFn& f, std::span<const Tensor> inputs, std::vector<int> wrt = {});
std::pair<Tensor, std::vector<Tensor>> value_and_grad(const ScalarFn& f, std::span<const Tensor> inputs,
                                                      std::vector<int> wrt = {});

}  // namespace spore::autodiff
