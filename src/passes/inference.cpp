// Inference-only passes (they run only when PassOptions::inference is set, i.e. for a deployed model):
//  - fold_batch_norm: batch_norm(conv2d(x, w, b)) -> conv2d(x, w * s, (b - mean) * s + bias) with
//    s = scale / sqrt(var + epsilon) per output channel, and the same for linear (output [N, features]);
//    the new weights are computed once here (in f64, stored in w's dtype). It needs w, b and the batch_norm
//    parameters constant and the conv/linear output used by nothing else. The result differs from the unfolded
//    graph by rounding only (about 1e-6 relative in f32), which is why training graphs never get it.
//    The same pass folds a following add of a per-channel constant into the bias: conv2d(x, w[, b]) + c with c
//    of shape [C,1,1] / [1,C,1,1] (older ONNX exports, e.g. the model zoo's mnist-8, add the bias this way), and
//    linear(x, w[, b]) + c with c of shape [F] / [1,F] and a rank-2 output; then fuse_epilogue can take the
//    activation after it.
//  - remove_dropout: every dropout becomes its input (inference means dropout is off, whatever its attrs say).
#include <cmath>

#include "ir/rewrite/rewrite.h"
#include "ops/graph_ops.h"
#include "passes/pass.h"

namespace spore {
namespace {
using namespace rewrite;

bool is_const(const Value* v) { return v->producer && v->producer->is_constant() && v->producer->payload.defined(); }

// Routes `from`'s uses (and graph-output slots, keeping the output's value name) to `to`, a fresh value.
void forward_fresh(Graph& g, Value* from, Value* to) {
  if (g.is_output(from)) {
    const std::string name = from->name;
    for (int k = 0;; ++k) {  // a free name (erased values keep theirs)
      const std::string fresh = name + ".folded" + (k ? std::to_string(k) : "");
      if (!g.name_taken(fresh)) {
        g.rename_value(from, fresh);
        break;
      }
    }
    g.replace_all_uses(from, to);
    g.rename_value(to, name);
    return;
  }
  g.replace_all_uses(from, to);
}

// y = p(x, w, bias?) where output channel c is row c of a weight laid out [channels, ...] plus bias[c], and the
// channels are axis 1 of y (the axis batch_norm and a per-channel add broadcast over): conv2d, and linear with a
// [N, features] output. A per-channel affine map of y then folds into w's rows and the bias (OpDef::weight).
bool per_channel_affine(const Node* p, const Value* y) {
  if (!p) return false;
  const WeightOperand& wo = op_registry().get(p->op).weight;
  if (!wo.defined() || wo.input != 1 || wo.bias_input != 2 || wo.channel_axis != 0 || !wo.transpose_attr.empty())
    return false;
  const int64_t out_axis = wo.output_channel_axis < 0 ? wo.output_channel_axis + y->type.rank() : wo.output_channel_axis;
  return out_axis == 1;
}

bool fold_bn(Match& mt, Rewriter& rw) {
  Graph& g = rw.graph();
  Node* bn = mt.root;
  Value* y = bn->inputs[0];
  Node* p = y->producer;
  if (!per_channel_affine(p, y)) return false;
  if (y->uses.size() != 1 || g.is_output(y)) return false;
  for (int i = 1; i < 5; ++i)
    if (!is_const(bn->inputs[i])) return false;
  Value* w = p->inputs.at(1);
  Value* b = p->inputs.size() > 2 ? p->inputs[2] : nullptr;
  if (!is_const(w) || (b && !is_const(b))) return false;
  if (!w->type.is_static() || !is_floating(w->type.dtype)) return false;
  const int64_t channels = w->type.dims[0].size;
  for (int i = 1; i < 5; ++i)
    if (bn->inputs[i]->type.numel() != channels) return false;

  const double eps = op_registry().get("batch_norm"_op).normalize(bn->attrs, bn->label()).f("epsilon");
  const std::vector<double> scale = bn->inputs[1]->producer->payload.to_doubles();
  const std::vector<double> shift = bn->inputs[2]->producer->payload.to_doubles();
  const std::vector<double> mean = bn->inputs[3]->producer->payload.to_doubles();
  const std::vector<double> var = bn->inputs[4]->producer->payload.to_doubles();
  std::vector<double> wv = w->producer->payload.to_doubles();
  std::vector<double> bv = b ? b->producer->payload.to_doubles() : std::vector<double>(channels, 0.0);
  const size_t per_channel = wv.size() / static_cast<size_t>(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double s = scale[c] / std::sqrt(var[c] + eps);
    for (size_t k = 0; k < per_channel; ++k) wv[c * per_channel + k] *= s;
    bv[c] = (bv[c] - mean[c]) * s + shift[c];
  }
  const DType bias_dtype = b ? b->type.dtype : w->type.dtype;
  Value* new_w = g.add_constant(Tensor::from_doubles(wv, w->type.shape(), w->type.dtype), w->name + ".bn_folded");
  Value* new_b = g.add_constant(Tensor::from_doubles(bv, {channels}, bias_dtype),
                                (b ? b->name : bn->inputs[2]->name) + ".bn_folded");
  Node* fused = rw.add(p->op, {p->inputs[0], new_w, new_b}, p->attrs, {bn->output(0)->type},
                       p->name.empty() ? bn->name : p->name);
  forward_fresh(g, bn->output(0), fused->output(0));
  return true;
}

// c broadcasts as one value per channel of `y` (axis 1): [C,1,1], [1,C,1,1] for a conv output [N,C,H,W];
// [C], [1,C] for a linear output [N,C].
bool per_channel(const TensorType& c, const TensorType& y, int64_t channels) {
  if (c.numel() != channels || c.rank() > y.rank()) return false;
  const int lead = y.rank() - c.rank();  // c's dims align with y's last dims
  for (int i = 0; i < c.rank(); ++i) {
    const int yi = lead + i;
    if (yi == 1 ? c.dims[i].size != channels : c.dims[i].size != 1) return false;
  }
  return lead <= 1;
}

bool fold_bias_add(Match& mt, Rewriter& rw) {
  Graph& g = rw.graph();
  Node* add = mt.root;
  for (int i = 0; i < 2; ++i) {
    Value* y = add->inputs[i];
    Value* c = add->inputs[1 - i];
    Node* p = y->producer;
    if (!per_channel_affine(p, y) || !is_const(c)) continue;
    if (y->uses.size() != 1 || g.is_output(y) || add->output(0)->type != y->type) continue;
    Value* w = p->inputs.at(1);
    Value* b = p->inputs.size() > 2 ? p->inputs[2] : nullptr;
    if (!is_const(w) || (b && !is_const(b)) || !w->type.is_static() || !is_floating(w->type.dtype)) continue;
    const int64_t channels = w->type.dims[0].size;
    if (c->type.dtype != y->type.dtype || !per_channel(c->type, y->type, channels)) continue;
    std::vector<double> bv = b ? b->producer->payload.to_doubles() : std::vector<double>(channels, 0.0);
    const std::vector<double> cv = c->producer->payload.to_doubles();
    for (int64_t k = 0; k < channels; ++k) bv[k] += cv[k];
    const DType bias_dtype = b ? b->type.dtype : w->type.dtype;
    Value* new_b = g.add_constant(Tensor::from_doubles(bv, {channels}, bias_dtype), c->name + ".bias_folded");
    Node* fused = rw.add(p->op, {p->inputs[0], w, new_b}, p->attrs, {add->output(0)->type},
                         p->name.empty() ? add->name : p->name);
    forward_fresh(g, add->output(0), fused->output(0));
    return true;
  }
  return false;
}

RewriteSet make_bn_rules() {
  RewriteSet rules("fold_batch_norm");
  rules.add({"batch_norm_into_producer",
             m::op("batch_norm"_op, {m::any(), m::constant(), m::constant(), m::constant(), m::constant()}), fold_bn});
  rules.add({"bias_add_into_producer", m::op("add"_op, {m::any(), m::any()}), fold_bias_add});
  return rules;
}

bool drop(Match& mt, Rewriter& rw) {
  Graph& g = rw.graph();
  Value* out = mt.root->output(0);
  Value* x = mt["x"];
  if (g.is_output(out) && (g.is_output(x) || (x->producer && x->producer->is_input()))) return false;
  forward_fresh(g, out, x);
  return true;
}

RewriteSet make_dropout_rules() {
  RewriteSet rules("remove_dropout");
  rules.add({"dropout", m::op("dropout"_op, {m::any("x")}), drop});
  rules.add({"dropout_with_offset", m::op("dropout"_op, {m::any("x"), m::any()}), drop});
  return rules;
}

class FoldBatchNormPass final : public Pass {
 public:
  std::string name() const override { return "fold_batch_norm"; }
  int min_opt_level() const override { return 1; }
  bool run(Graph& g, const PassOptions& opts) override {
    if (!opts.inference) return false;
    static const RewriteSet rules = make_bn_rules();
    return apply_greedy(g, rules).applied > 0;
  }
};

class RemoveDropoutPass final : public Pass {
 public:
  std::string name() const override { return "remove_dropout"; }
  bool run(Graph& g, const PassOptions& opts) override {
    if (!opts.inference) return false;
    static const RewriteSet rules = make_dropout_rules();
    return apply_greedy(g, rules).applied > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fold_batch_norm_pass() { return std::make_unique<FoldBatchNormPass>(); }
std::unique_ptr<Pass> make_remove_dropout_pass() { return std::make_unique<RemoveDropoutPass>(); }

}  // namespace spore
