// recognize_patterns (inference only): normalizations, activations and projections written out as primitives
// (the way ONNX exporters and hand-written models spell them) become spore's own ops, which run as one kernel:
//   layer norm  m = mean(x, trailing axes a..r-1, keepdims); d = x - m; v = mean(d*d | pow(d,2), same axes);
//               y = d / sqrt(v + eps) | d * rsqrt(v + eps) | d * reciprocal(sqrt(v + eps))
//               [* gamma] [+ beta]                                   -> layer_norm(x, gamma, beta){axis=a, epsilon}
//   rms norm    x * rsqrt(mean(x*x | pow(x,2)) + eps) (and the / sqrt, * reciprocal(sqrt) forms) [* w]
//                                                                    -> rms_norm(x, w){axis=a, epsilon}
//   softmax     e = exp(x - max(x, axis, keepdims)) | exp(x); e / sum(e, axis, keepdims)   -> softmax(x){axis}
//   gelu        0.5 * x * (1 + erf(x / sqrt2 | x * (1/sqrt2)))        -> gelu(x)
//               0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))  -> gelu(x){approximate="tanh"}
//               (the products in any order and association)
//   silu        x * sigmoid(x)                                        -> silu(x)
//   linear      matmul(x, W) with W a constant [K,N] (or transpose_b and [N,K]), x rank >= 2, [+ constant
//               bias [N]]                                            -> linear(x, W^T, bias)
//               (so fuse_epilogue can then take the relu / residual add)
// Every intermediate value of a match must be used only inside the match (and not be a graph output), every
// value has x's floating dtype, gamma/beta/w/bias are constants that broadcast over exactly the normalized
// (output-feature) dims, and eps is a scalar constant; otherwise the graph is left alone. The new node's output
// keeps the name of the value it replaces.
//
// The fused kernels sum and round in another order than the written-out ops (a layer_norm kernel does not
// round d / sqrt(v + eps) the same way), so the result differs by rounding: the pass runs only when
// PassOptions::inference is set, never on training graphs, where graph mode must give PyNative's bits.
//
// Each form is a rule on the rewrite engine (ir/rewrite/rewrite.h): the pattern text says which ops feed which,
// the check says what a pattern cannot (reduction axes, constant values and shapes, types), and the match is
// replaced by one node. The optional * gamma / + beta / + bias are rules of their own that extend a norm or a
// linear node by the constant that follows it (so they also extend such nodes written directly).
#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>

#include "passes/pass.h"
#include "passes/rules.h"

namespace spore {
namespace {

using rewrite::Match;
using rewrite::RewriteSet;
using rewrite::Rewriter;

// The reduction's axes if it keeps dims and reduces exactly the trailing axes a..r-1: returns a (else nullopt).
std::optional<int64_t> trailing_reduce(const Node* n) {
  const Attrs a = normalized(n);
  if (!a.b("keepdims")) return std::nullopt;
  const int rank = n->inputs[0]->type.rank();
  std::vector<int64_t> axes = a.ints("axes");
  if (axes.empty())
    for (int d = 0; d < rank; ++d) axes.push_back(d);  // all axes: the trailing range from 0
  for (int64_t& x : axes)
    if (x < 0) x += rank;
  std::sort(axes.begin(), axes.end());
  if (rank == 0 || axes.empty() || axes.back() != rank - 1) return std::nullopt;
  for (size_t i = 1; i < axes.size(); ++i)
    if (axes[i] != axes[i - 1] + 1) return std::nullopt;
  return axes.front();
}

// The axis of a keepdims reduction over exactly one axis.
std::optional<int64_t> single_axis_reduce(const Node* n) {
  const Attrs a = normalized(n);
  const auto& axes = a.ints("axes");
  const int rank = n->inputs[0]->type.rank();
  if (!a.b("keepdims") || axes.size() != 1 || rank == 0) return std::nullopt;
  return axes[0] < 0 ? axes[0] + rank : axes[0];
}

// The values of a constant that broadcasts over exactly the dims `feat` (x's dims from the normalized axis):
// one element, or `feat`'s element count with every dim before them 1. Returned as the `feat`-shaped tensor.
std::optional<Tensor> feature_constant(const Value* c, const std::vector<Dim>& feat, DType dt) {
  const Tensor* t = constant_payload(c);
  if (!t || c->type.dtype != dt) return std::nullopt;
  Shape shape;
  int64_t n = 1;
  for (const Dim& d : feat) {
    if (!d.is_static()) return std::nullopt;
    shape.push_back(d.size);
    n *= d.size;
  }
  const auto& cd = c->type.dims;
  if (cd.size() > feat.size() && t->numel() != 1) {
    for (size_t i = 0; i + feat.size() < cd.size(); ++i)
      if (!(cd[i].is_static() && cd[i].size == 1)) return std::nullopt;
  }
  if (t->numel() == 1) return Tensor::from_doubles(std::vector<double>(static_cast<size_t>(n), t->item_at(0)), shape, dt);
  if (t->numel() != n) return std::nullopt;
  // The trailing dims must be feat's (leading 1s allowed when the constant has lower rank too).
  const size_t k = std::min(cd.size(), feat.size());
  for (size_t i = 0; i < k; ++i) {
    const Dim& a = cd[cd.size() - 1 - i];
    const Dim& b = feat[feat.size() - 1 - i];
    if (!(a.is_static() && a.size == b.size)) return std::nullopt;
  }
  return Tensor::from_doubles(t->to_doubles(), shape, dt);
}

// ---- normalizations

// t / sqrt(v + eps) | t * rsqrt(v + eps) | t * reciprocal(sqrt(v + eps)), v = mean(t*t | pow(t, 2)) over
// trailing axes; `first` is how t is written where it is met first (the numerator), `t` its name after that.
std::string norm_core(const std::string& first, const std::string& t) {
  const std::string var = "s=add(v=reduce_mean(q={mul(" + t + ", " + t + ") | pow(" + t + ", 2)}), $eps)";
  return "n={div(" + first + ", sqrt(" + var + ")) | mul(" + first + ", rsqrt(" + var + ")) | mul(" + first +
         ", reciprocal(sqrt(" + var + ")))}";
}

// The core's axes, eps and types; `layer`: t is x - mean(x) over the same axes.
bool check_norm(bool layer, Match& mt, Build& b) {
  const TensorType& type = mt.root->output(0)->type;
  Value* t = mt[layer ? "d" : "x"];
  if (!float_dtype(type.dtype) || t->type != type) return false;
  const auto eps = scalar_constant(mt["eps"]);
  const auto axis = trailing_reduce(mt.node("v"));
  if (!eps || *eps < 0 || !axis || mt["s"]->type != mt["v"]->type || mt["q"]->type != t->type) return false;
  if (layer) {
    const auto mean_axis = trailing_reduce(mt.node("mu"));
    if (!mean_axis || *mean_axis != *axis || mt["x"]->type != type) return false;
  }
  b.attrs = Attrs{{"axis", *axis - type.rank()}, {"epsilon", *eps}};
  return true;
}

// A norm `n` (without this operand yet) followed by op(n, c) with c a constant over the normalized dims: c (or
// a feature-shaped copy, named <base><suffix>) is captured as `as`.
bool check_norm_operand(Match& mt, Rewriter& rw, Build& b, const char* c, const char* as, const char* suffix) {
  const Node* n = mt.node("n");
  const TensorType& type = n->output(0)->type;
  if (mt.root->output(0)->type != type) return false;
  const Attrs a = normalized(n);
  const int64_t axis = a.i("axis") < 0 ? a.i("axis") + type.rank() : a.i("axis");
  const std::vector<Dim> feat(type.dims.begin() + axis, type.dims.end());
  const std::string base = n->name.empty() ? mt.root->output(0)->name : n->name;
  if (std::string_view(as) == "b" && !mt.has("w")) {  // layer_norm takes a bias only after a weight: ones
    if (!feature_constant(mt[c], feat, type.dtype)) return false;
    Shape shape;
    for (const Dim& d : feat) shape.push_back(d.size);
    mt.values["w"] = rw.constant(
        Tensor::from_doubles(std::vector<double>(static_cast<size_t>(shape_numel(shape)), 1.0), shape, type.dtype),
        base + ".weight");
  }
  auto t = feature_constant(mt[c], feat, type.dtype);
  if (!t) return false;
  mt.values[as] = mt[c]->type.dims == feat ? mt[c] : rw.constant(std::move(*t), base + suffix);
  b.attrs = n->attrs;
  return true;
}

// ---- gelu

constexpr const char* kGeluErf =
    "mul+(0.5, x, add(1, erf({div(x, 1.4142135623730951) | mul(x, 0.70710678118654752)})))";
constexpr const char* kGeluTanh =
    "mul+(0.5, x, add(1, tanh(mul(0.79788456080286536, add(x, {mul+(0.044715, x, x, x) | "
    "mul(0.044715, pow(x, 3))})))))";

// Every matched node has the root's floating type (elementwise forms of x).
bool elementwise_of_x(Match& mt) {
  const TensorType& type = mt.root->output(0)->type;
  return float_dtype(type.dtype) && mt["x"]->type == type && same_type(mt, type);
}

// ---- linear

// matmul(x, W) with W a constant [K, N] (or [N, K] under transpose_b): W^T, made once per weight.
bool check_linear(Match& mt, Graph& g, std::unordered_map<const Value*, Value*>& transposed) {
  const Attrs a = normalized(mt.root);
  if (a.b("transpose_a")) return false;
  Value* x = mt["x"];
  Value* w = mt["w"];
  const Tensor* wt = constant_payload(w);
  const TensorType& type = mt.root->output(0)->type;
  if (!wt || w->type.rank() != 2 || !w->type.is_static() || x->type.rank() < 2 || !float_dtype(type.dtype) ||
      w->type.dtype != type.dtype || x->type.dtype != type.dtype)
    return false;
  if (a.b("transpose_b")) {
    mt.values["lw"] = w;
    return true;
  }
  auto it = transposed.find(w);
  if (it == transposed.end()) {
    const int64_t rows = w->type.dims[0].size, cols = w->type.dims[1].size;
    const std::vector<double> v = wt->to_doubles();
    std::vector<double> t(v.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
    // Not through the Rewriter: a weight shared by several matmuls outlives a rule that declines.
    it = transposed.emplace(w, g.add_constant(Tensor::from_doubles(t, {cols, rows}, type.dtype), w->name + ".T")).first;
  }
  mt.values["lw"] = it->second;
  return true;
}

// linear(x, W) + b with b a constant over the output features: b, or a [N] copy named <b>.flat.
bool check_linear_bias(Match& mt, Rewriter& rw, Build& b) {
  const Node* n = mt.node("n");
  const TensorType& type = n->output(0)->type;
  Value* c = mt["c"];
  if (mt.root->output(0)->type != type || !n->inputs[1]->type.dims[0].is_static()) return false;
  const int64_t out_features = n->inputs[1]->type.dims[0].size;
  auto bt = feature_constant(c, {Dim(out_features)}, type.dtype);
  if (!bt) return false;
  const bool flat = c->type.rank() == 1 && c->type.dims[0].is_static() && c->type.dims[0].size == out_features;
  mt.values["bias"] = flat ? c : rw.constant(std::move(*bt), c->name + ".flat");
  b.name = n->name;  // the linear keeps the matmul's name
  return true;
}

RewriteSet make_rules(Graph& g, std::unordered_map<const Value*, Value*>& transposed) {
  RewriteSet rs("recognize_patterns", registry_facts());
  // exp(x - max(x)) / sum(.), or exp(x) / sum(.), over one axis.
  const RuleCheck softmax = [](Match& mt, Rewriter&, Build& b) {
    const TensorType& type = mt.root->output(0)->type;
    const auto axis = single_axis_reduce(mt.node("s"));
    if (!axis || mt["e"]->uses.size() != 2 || !float_dtype(type.dtype) || mt["e"]->type != type ||
        mt["x"]->type != type)
      return false;
    if (mt.has("mx") && single_axis_reduce(mt.node("mx")) != axis) return false;
    b.attrs = Attrs{{"axis", *axis}};
    return true;
  };
  rs.add(replace_rule("softmax_stable", "div(e=exp(sub(x, mx=reduce_max(x))), s=reduce_sum(e))", "softmax(x)",
                      softmax));
  rs.add(replace_rule("softmax", "div(e=exp(x), s=reduce_sum(e))", "softmax(x)", softmax));
  rs.add(replace_rule("layer_norm", norm_core("d=sub(x, mu=reduce_mean(x))", "d"), "layer_norm(x)",
                      [](Match& mt, Rewriter&, Build& b) { return check_norm(true, mt, b); }));
  rs.add(replace_rule("rms_norm", norm_core("x", "x"), "rms_norm(x)",
                      [](Match& mt, Rewriter&, Build& b) { return check_norm(false, mt, b); }));
  rs.add(replace_rule("rms_norm_weight", "mul(n=rms_norm(x), $c)", "rms_norm(x, w)",
                      [](Match& mt, Rewriter& rw, Build& b) { return check_norm_operand(mt, rw, b, "c", "w", ".weight"); }));
  rs.add(replace_rule("layer_norm_weight", "mul(n=layer_norm(x), $c)", "layer_norm(x, w)",
                      [](Match& mt, Rewriter& rw, Build& b) { return check_norm_operand(mt, rw, b, "c", "w", ".weight"); }));
  rs.add(replace_rule("layer_norm_bias", "add(n={layer_norm(x, w) | layer_norm(x)}, $c)", "layer_norm(x, w, b)",
                      [](Match& mt, Rewriter& rw, Build& b) { return check_norm_operand(mt, rw, b, "c", "b", ".bias"); }));
  rs.add(replace_rule("silu", "mul(x, sigmoid(x))", "silu(x)",
                      [](Match& mt, Rewriter&, Build&) { return elementwise_of_x(mt); }));
  rs.add(replace_rule("gelu", kGeluErf, "gelu(x)", [](Match& mt, Rewriter&, Build& b) {
    b.attrs = Attrs{{"approximate", std::string("none")}};
    return elementwise_of_x(mt);
  }));
  rs.add(replace_rule("gelu_tanh", kGeluTanh, "gelu(x)", [](Match& mt, Rewriter&, Build& b) {
    b.attrs = Attrs{{"approximate", std::string("tanh")}};
    return elementwise_of_x(mt);
  }));
  rs.add(replace_rule("linear", "matmul(x, $w)", "linear(x, lw)",
                      [&g, &transposed](Match& mt, Rewriter&, Build&) { return check_linear(mt, g, transposed); }));
  rs.add(replace_rule("linear_bias", "add(n=linear(x, lw), $c)", "linear(x, lw, bias)",
                      [](Match& mt, Rewriter& rw, Build& b) { return check_linear_bias(mt, rw, b); }));
  return rs;
}

class RecognizePatternsPass final : public Pass {
 public:
  std::string name() const override { return "recognize_patterns"; }
  int min_opt_level() const override { return 1; }
  bool run(Graph& g, const PassOptions& opts) override {
    if (!opts.inference) return false;
    std::unordered_map<const Value*, Value*> transposed;
    const bool changed = rewrite::apply_greedy(g, make_rules(g, transposed)).applied > 0;
    for (auto& [w, t] : transposed)  // weights whose every use turned out not to match
      if (t->uses.empty()) g.erase_node(t->producer);
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_recognize_patterns_pass() { return std::make_unique<RecognizePatternsPass>(); }

}  // namespace spore
