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
#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "ops/graph_ops.h"
#include "passes/pass.h"

namespace spore {
namespace {

bool single_use(const Graph& g, const Value* v) { return v->uses.size() == 1 && !g.is_output(v); }

Node* producer_if(const Value* v, OpId op) {
  Node* p = v->producer;
  return p && !p->dead && p->op == op ? p : nullptr;
}

const Tensor* constant_payload(const Value* v) {
  const Node* p = v->producer;
  if (!p || !p->is_constant() || !p->payload.defined()) return nullptr;
  return &p->payload;
}

// The value of a one-element constant.
std::optional<double> scalar_constant(const Value* v) {
  const Tensor* t = constant_payload(v);
  if (!t || t->numel() != 1) return std::nullopt;
  return t->item_at(0);
}

// A constant written in `dt` approximates `want` (exporters store sqrt(2), 0.044715... rounded to the dtype).
bool near(double got, double want, DType dt) {
  double tol = 1e-12;
  if (dt == DType::f32) tol = 1e-6;
  if (dt == DType::f16) tol = 2e-3;
  if (dt == DType::bf16) tol = 1e-2;
  return std::fabs(got - want) <= tol * std::fabs(want);
}

bool scalar_is(const Value* v, double want, DType dt) {
  const auto c = scalar_constant(v);
  return c && near(*c, want, dt);
}

bool float_dtype(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

Attrs normalized(const Node* n) { return op_registry().get(n->op).normalize(n->attrs, n->label()); }

// The other input of a two-input node, given one of them (nullptr if `v` is neither or both).
Value* other_input(const Node* n, const Value* v) {
  if (n->inputs.size() != 2 || n->inputs[0] == n->inputs[1]) return nullptr;
  if (n->inputs[0] == v) return n->inputs[1];
  if (n->inputs[1] == v) return n->inputs[0];
  return nullptr;
}

// The reduction's axes if it keeps dims and reduces exactly the trailing axes a..r-1: returns a (else nullopt).
std::optional<int64_t> trailing_reduce(const Node* n, OpId op) {
  if (!n || n->op != op || n->inputs.size() != 1) return std::nullopt;
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

// Every use of `v` is by one of `inside`, and `v` is no graph output.
bool uses_only(const Graph& g, const Value* v, std::initializer_list<const Node*> inside) {
  if (g.is_output(v)) return false;
  for (const Use& u : v->uses)
    if (std::find(inside.begin(), inside.end(), u.user) == inside.end()) return false;
  return true;
}

// The factors of a product tree rooted at `v`: mul nodes are opened while their output is single-use (the
// root's own output is opened whatever its uses); their nodes go to `nodes`.
void factors(const Graph& g, Value* v, bool root, std::vector<Value*>& out, std::vector<Node*>& nodes) {
  Node* p = producer_if(v, "mul"_op);
  if (p && p->inputs.size() == 2 && (root || single_use(g, v)) && p->inputs[0]->type.dtype == v->type.dtype &&
      p->inputs[1]->type.dtype == v->type.dtype) {
    nodes.push_back(p);
    factors(g, p->inputs[0], false, out, nodes);
    factors(g, p->inputs[1], false, out, nodes);
    return;
  }
  out.push_back(v);
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

// The replacement of a matched chain: `repl` takes over `old`'s uses and name; the matched nodes (listed from
// the root backwards) are erased as they become unused.
void commit(Graph& g, Value* old, Node* repl, const std::vector<Node*>& matched) {
  const std::string keep = old->name;
  g.replace_all_uses(old, repl->output(0));
  g.rename_value(old, fmt::format("{}.unfused{}", keep, old->id));  // frees the name
  g.rename_value(repl->output(0), keep);
  for (Node* n : matched) {
    if (n->dead) continue;
    bool used = false;
    for (const Value* o : n->outputs) used = used || !o->uses.empty() || g.is_output(o);
    if (!used) g.erase_node(n);
  }
}

// Builds the node; nullptr if its inferred type is not `want` (or inference fails).
Node* build_checked(Graph& g, OpId op, std::vector<Value*> ins, const Attrs& attrs, const TensorType& want,
                    const std::string& name) {
  Node* n = try_build_node(g, op, std::move(ins), attrs, name);
  if (n == nullptr) return nullptr;
  if (n->outputs.size() == 1 && n->output(0)->type == want) return n;
  g.erase_node(n);
  return nullptr;
}

// ---- normalizations

// `core` computes t / sqrt(v + eps) in one of the three spellings. Fills t, the denominator's nodes and eps.
struct NormCore {
  Value* t = nullptr;       // the normalized numerator (d for layer norm, x for rms norm)
  Node* mean_sq = nullptr;  // v = reduce_mean(q)
  Node* square = nullptr;   // q = t*t or pow(t, 2)
  std::vector<Node*> nodes; // add eps, sqrt/rsqrt, reciprocal
  double eps = 0;
  int64_t axis = 0;
};

// v + eps with v = mean(t*t | pow(t,2)) over trailing axes; `s` is the sum's value.
bool match_variance(const Graph& g, Value* s, Value* t, NormCore& c) {
  Node* add = producer_if(s, "add"_op);
  if (!add || !single_use(g, s) || add->inputs.size() != 2) return false;
  for (int i = 0; i < 2; ++i) {
    Value* v = add->inputs[i];
    const auto eps = scalar_constant(add->inputs[1 - i]);
    Node* mean = v->producer;
    const auto axis = trailing_reduce(mean, "reduce_mean"_op);
    if (!eps || *eps < 0 || !axis || !single_use(g, v) || s->type != v->type) continue;
    Value* q = mean->inputs[0];
    Node* sq = q->producer;
    if (!sq || !single_use(g, q) || q->type != t->type) continue;
    const bool is_sq = (sq->op == "mul"_op && sq->inputs.size() == 2 && sq->inputs[0] == t && sq->inputs[1] == t) ||
                       (sq->op == "pow"_op && sq->inputs.size() == 2 && sq->inputs[0] == t &&
                        scalar_is(sq->inputs[1], 2.0, DType::f64));
    if (!is_sq) continue;
    c.t = t;
    c.mean_sq = mean;
    c.square = sq;
    c.eps = *eps;
    c.axis = *axis;
    c.nodes.push_back(add);
    return true;
  }
  return false;
}

std::optional<NormCore> match_norm_core(const Graph& g, Node* n) {
  if (n->inputs.size() != 2 || n->outputs.size() != 1) return std::nullopt;
  NormCore c;
  if (n->op == "div"_op) {  // t / sqrt(v + eps)
    Value* den = n->inputs[1];
    Node* sq = producer_if(den, "sqrt"_op);
    if (!sq || !single_use(g, den)) return std::nullopt;
    if (!match_variance(g, sq->inputs[0], n->inputs[0], c)) return std::nullopt;
    c.nodes.push_back(sq);
    return c;
  }
  if (n->op != "mul"_op) return std::nullopt;
  for (int i = 0; i < 2; ++i) {  // t * rsqrt(v + eps) | t * reciprocal(sqrt(v + eps)), either order
    Value* r = n->inputs[1 - i];
    Value* t = n->inputs[i];
    if (!single_use(g, r) || r == t) continue;
    NormCore cc;
    if (Node* rs = producer_if(r, "rsqrt"_op)) {
      if (!match_variance(g, rs->inputs[0], t, cc)) continue;
      cc.nodes.push_back(rs);
      return cc;
    }
    if (Node* rec = producer_if(r, "reciprocal"_op)) {
      Value* s = rec->inputs[0];
      Node* sq = producer_if(s, "sqrt"_op);
      if (!sq || !single_use(g, s) || !match_variance(g, sq->inputs[0], t, cc)) continue;
      cc.nodes.push_back(sq);
      cc.nodes.push_back(rec);
      return cc;
    }
  }
  return std::nullopt;
}

// A following `op c` (either order) with c a feature constant: the node and c as a constant of the feature
// shape (c itself when it has that shape, else a new constant with its values).
struct Scale {
  Node* node;
  Value* c;
  std::optional<Tensor> values;  // set when c must be replaced by a feature-shaped copy
};
std::optional<Scale> scale_after(const Graph& g, Value* y, OpId op, const std::vector<Dim>& feat) {
  if (!single_use(g, y)) return std::nullopt;
  Node* u = y->uses[0].user;
  if (u->op != op || u->outputs.size() != 1 || u->output(0)->type != y->type) return std::nullopt;
  Value* c = other_input(u, y);
  if (!c) return std::nullopt;
  auto t = feature_constant(c, feat, y->type.dtype);
  if (!t) return std::nullopt;
  if (c->type.dims == feat) return Scale{u, c, std::nullopt};
  return Scale{u, c, std::move(*t)};
}

bool try_norm(Graph& g, Node* n) {
  auto core = match_norm_core(g, n);
  if (!core) return false;
  Value* y = n->output(0);
  Value* t = core->t;
  const TensorType& type = y->type;
  if (!float_dtype(type.dtype) || t->type != type) return false;
  // The numerator is used by the square and the core only.
  const bool t_inner_only = uses_only(g, t, {core->square, n});
  std::vector<Dim> feat(type.dims.begin() + core->axis, type.dims.end());

  // Layer norm: t = x - mean(x) over the same axes.
  Value* x = t;
  OpId op = "rms_norm"_op;
  std::vector<Node*> matched;
  if (Node* sub = producer_if(t, "sub"_op); sub && t_inner_only && sub->inputs.size() == 2) {
    Value* m = sub->inputs[1];
    Node* mean = m->producer;
    const auto axis = trailing_reduce(mean, "reduce_mean"_op);
    if (axis && *axis == core->axis && mean->inputs[0] == sub->inputs[0] && single_use(g, m) &&
        sub->inputs[0]->type == type) {
      x = sub->inputs[0];
      op = "layer_norm"_op;
      matched = {sub, mean};
    }
  }
  // Optional trailing * gamma [+ beta] (rms norm: * w).
  Value* out = y;
  std::vector<Node*> tail;
  std::optional<Scale> gamma, beta;
  if ((gamma = scale_after(g, out, "mul"_op, feat))) {
    tail.push_back(gamma->node);
    out = gamma->node->output(0);
  }
  if (op == "layer_norm"_op && (beta = scale_after(g, out, "add"_op, feat))) {
    tail.push_back(beta->node);
    out = beta->node->output(0);
  }
  std::vector<Value*> ins = {x};
  std::vector<Node*> created;  // constants made here, dropped again if the node cannot be built
  const std::string base = n->name.empty() ? out->name : n->name;
  auto constant_in = [&](const std::optional<Scale>& s, const char* suffix) {
    if (s && !s->values) return s->c;
    Tensor t;
    if (s) {
      t = *s->values;
    } else {  // layer_norm takes a bias only after a weight: a weight of ones
      Shape shape;
      for (const Dim& d : feat) shape.push_back(d.size);
      t = Tensor::from_doubles(std::vector<double>(static_cast<size_t>(shape_numel(shape)), 1.0), shape, type.dtype);
    }
    Value* v = g.add_constant(std::move(t), base + suffix);
    created.push_back(v->producer);
    return v;
  };
  if (gamma || beta) {
    ins.push_back(constant_in(gamma, ".weight"));
    if (beta) ins.push_back(constant_in(beta, ".bias"));
  }
  Node* last = tail.empty() ? n : tail.back();
  const int64_t axis = core->axis - type.rank();  // negative: the trailing dims, as layer_norm's default -1
  Node* r = build_checked(g, op, ins, Attrs{{"axis", axis}, {"epsilon", core->eps}}, out->type, last->name);
  if (!r) {
    for (Node* c : created) g.erase_node(c);
    return false;
  }
  std::vector<Node*> all(tail.rbegin(), tail.rend());
  all.push_back(n);
  for (auto it = core->nodes.rbegin(); it != core->nodes.rend(); ++it) all.push_back(*it);
  all.push_back(core->mean_sq);
  all.push_back(core->square);
  all.insert(all.end(), matched.begin(), matched.end());
  commit(g, out, r, all);
  return true;
}

// ---- softmax: exp(x - max(x)) / sum(.) along one axis

std::optional<int64_t> single_axis_reduce(const Node* n, OpId op) {
  if (!n || n->op != op || n->inputs.size() != 1) return std::nullopt;
  const Attrs a = normalized(n);
  const auto& axes = a.ints("axes");
  const int rank = n->inputs[0]->type.rank();
  if (!a.b("keepdims") || axes.size() != 1 || rank == 0) return std::nullopt;
  const int64_t ax = axes[0] < 0 ? axes[0] + rank : axes[0];
  return ax;
}

bool try_softmax(Graph& g, Node* n) {
  if (n->op != "div"_op || n->inputs.size() != 2) return false;
  Value* e = n->inputs[0];
  Value* s = n->inputs[1];
  Node* ex = producer_if(e, "exp"_op);
  Node* sum = s->producer;
  const auto axis = single_axis_reduce(sum, "reduce_sum"_op);
  if (!ex || !axis || sum->inputs[0] != e || !single_use(g, s)) return false;
  if (!uses_only(g, e, {sum, n}) || e->uses.size() != 2) return false;
  const TensorType& type = n->output(0)->type;
  if (!float_dtype(type.dtype) || e->type != type) return false;
  Value* x = ex->inputs[0];
  std::vector<Node*> matched = {n, sum, ex};
  if (Node* sub = producer_if(x, "sub"_op); sub && single_use(g, x) && sub->inputs.size() == 2) {
    Value* m = sub->inputs[1];
    const auto max_axis = single_axis_reduce(m->producer, "reduce_max"_op);
    if (max_axis && *max_axis == *axis && m->producer->inputs[0] == sub->inputs[0] && single_use(g, m) &&
        sub->inputs[0]->type == type) {
      x = sub->inputs[0];
      matched.push_back(sub);
      matched.push_back(m->producer);
    }
  }
  if (x->type != type) return false;
  Node* r = build_checked(g, "softmax"_op, {x}, Attrs{{"axis", *axis}}, type, n->name);
  if (!r) return false;
  commit(g, n->output(0), r, matched);
  return true;
}

// ---- gelu and silu

constexpr double kSqrt2 = 1.4142135623730950488;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

// x / sqrt2 or x * (1/sqrt2) (either order).
bool is_scaled_for_erf(const Graph& g, Value* a, Value* x, DType dt, std::vector<Node*>& nodes) {
  Node* p = a->producer;
  if (!p || !single_use(g, a) || p->inputs.size() != 2 || a->type != x->type) return false;
  if (p->op == "div"_op && p->inputs[0] == x && scalar_is(p->inputs[1], kSqrt2, dt)) {
    nodes.push_back(p);
    return true;
  }
  if (p->op == "mul"_op) {
    Value* c = other_input(p, x);
    if (c && scalar_is(c, kInvSqrt2, dt)) {
      nodes.push_back(p);
      return true;
    }
  }
  return false;
}

// sqrt(2/pi) * (x + 0.044715 * x^3), x^3 as pow(x, 3) or x*x*x.
bool is_tanh_arg(const Graph& g, Value* u, Value* x, DType dt, std::vector<Node*>& nodes) {
  if (!single_use(g, u) || u->type != x->type) return false;
  std::vector<Value*> f;
  std::vector<Node*> fn;
  factors(g, u, true, f, fn);
  if (f.size() != 2 || fn.empty()) return false;
  for (int i = 0; i < 2; ++i) {
    if (!scalar_is(f[1 - i], kSqrt2OverPi, dt)) continue;
    Value* s = f[i];
    Node* add = producer_if(s, "add"_op);
    if (!add || !single_use(g, s)) continue;
    Value* cube = other_input(add, x);
    if (!cube || !single_use(g, cube) || cube->type != x->type) continue;
    std::vector<Value*> cf;
    std::vector<Node*> cn;
    factors(g, cube, true, cf, cn);
    if (cn.empty()) continue;
    int coef = 0, xs = 0, pows = 0;
    for (Value* v : cf) {
      if (v == x) {
        ++xs;
      } else if (scalar_is(v, 0.044715, dt)) {
        ++coef;
      } else if (Node* p = producer_if(v, "pow"_op); p && p->inputs[0] == x && single_use(g, v) &&
                                                       scalar_is(p->inputs[1], 3.0, DType::f64)) {
        ++pows;
        cn.push_back(p);
      } else {
        return false;
      }
    }
    if (coef != 1 || !((xs == 3 && pows == 0) || (xs == 0 && pows == 1))) continue;
    nodes.insert(nodes.end(), fn.begin(), fn.end());
    nodes.push_back(add);
    nodes.insert(nodes.end(), cn.begin(), cn.end());
    return true;
  }
  return false;
}

// 1 + erf(x/sqrt2) or 1 + tanh(...): returns "none" / "tanh".
std::optional<std::string> gelu_bracket(const Graph& g, Value* a, Value* x, DType dt, std::vector<Node*>& nodes) {
  Node* add = producer_if(a, "add"_op);
  if (!add || !single_use(g, a) || add->inputs.size() != 2 || a->type != x->type) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    if (!scalar_is(add->inputs[1 - i], 1.0, dt)) continue;
    Value* f = add->inputs[i];
    if (!single_use(g, f)) continue;
    std::vector<Node*> sub;
    if (Node* erf = producer_if(f, "erf"_op); erf && is_scaled_for_erf(g, erf->inputs[0], x, dt, sub)) {
      nodes.push_back(add);
      nodes.push_back(erf);
      nodes.insert(nodes.end(), sub.begin(), sub.end());
      return std::string("none");
    }
    if (Node* th = producer_if(f, "tanh"_op); th && is_tanh_arg(g, th->inputs[0], x, dt, sub)) {
      nodes.push_back(add);
      nodes.push_back(th);
      nodes.insert(nodes.end(), sub.begin(), sub.end());
      return std::string("tanh");
    }
  }
  return std::nullopt;
}

bool try_gelu_silu(Graph& g, Node* n) {
  if (n->op != "mul"_op || n->inputs.size() != 2) return false;
  Value* y = n->output(0);
  const TensorType& type = y->type;
  if (!float_dtype(type.dtype)) return false;
  // silu: x * sigmoid(x)
  for (int i = 0; i < 2; ++i) {
    Value* x = n->inputs[i];
    Value* s = n->inputs[1 - i];
    Node* sg = producer_if(s, "sigmoid"_op);
    if (sg && sg->inputs[0] == x && single_use(g, s) && x->type == type) {
      Node* r = build_checked(g, "silu"_op, {x}, {}, type, n->name);
      if (!r) return false;
      commit(g, y, r, {n, sg});
      return true;
    }
  }
  std::vector<Value*> f;
  std::vector<Node*> fn;
  factors(g, y, true, f, fn);
  if (f.size() != 3) return false;
  for (int h = 0; h < 3; ++h) {
    if (!scalar_is(f[h], 0.5, type.dtype)) continue;
    for (int k = 0; k < 3; ++k) {
      if (k == h) continue;
      Value* x = f[3 - h - k];
      if (x->type != type) continue;
      std::vector<Node*> nodes = fn;
      const auto form = gelu_bracket(g, f[k], x, type.dtype, nodes);
      if (!form) continue;
      Node* r = build_checked(g, "gelu"_op, {x}, Attrs{{"approximate", *form}}, type, n->name);
      if (!r) return false;
      commit(g, y, r, nodes);
      return true;
    }
  }
  return false;
}

// ---- linear: matmul(x, W const) [+ bias const]

bool try_linear(Graph& g, Node* n, std::unordered_map<const Value*, Value*>& transposed) {
  if (n->op != "matmul"_op || n->inputs.size() != 2) return false;
  const Attrs a = normalized(n);
  if (a.b("transpose_a")) return false;
  Value* x = n->inputs[0];
  Value* w = n->inputs[1];
  Value* y = n->output(0);
  const Tensor* wt = constant_payload(w);
  const TensorType& type = y->type;
  if (!wt || w->type.rank() != 2 || !w->type.is_static() || x->type.rank() < 2 || !float_dtype(type.dtype) ||
      w->type.dtype != type.dtype || x->type.dtype != type.dtype)
    return false;
  const bool tb = a.b("transpose_b");
  const int64_t rows = w->type.dims[0].size, cols = w->type.dims[1].size;
  const int64_t out_features = tb ? rows : cols;
  // Linear weight [N, K]: W itself under transpose_b, else W^T (one copy per weight, shared by its matmuls).
  Value* lw = w;
  if (!tb) {
    auto it = transposed.find(w);
    if (it != transposed.end()) {
      lw = it->second;
    } else {
      const std::vector<double> v = wt->to_doubles();
      std::vector<double> t(v.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = v[r * cols + c];
      lw = g.add_constant(Tensor::from_doubles(t, {cols, rows}, type.dtype), w->name + ".T");
      transposed[w] = lw;
    }
  }
  std::vector<Value*> ins = {x, lw};
  Value* out = y;
  std::vector<Node*> matched;
  Node* bias_node = nullptr;
  if (single_use(g, y)) {
    Node* u = y->uses[0].user;
    Value* b = u->op == "add"_op ? other_input(u, y) : nullptr;
    const std::vector<Dim> feat = {Dim(out_features)};
    if (b && u->output(0)->type == type) {
      if (auto bt = feature_constant(b, feat, type.dtype)) {
        if (b->type.rank() == 1 && b->type.dims[0].is_static() && b->type.dims[0].size == out_features) {
          ins.push_back(b);
        } else {
          bias_node = g.add_constant(*bt, b->name + ".flat")->producer;
          ins.push_back(bias_node->output(0));
        }
        matched.push_back(u);
        out = u->output(0);
      }
    }
  }
  matched.push_back(n);
  Node* r = build_checked(g, "linear"_op, ins, {}, out->type, n->name);
  if (!r) {
    if (bias_node) g.erase_node(bias_node);
    return false;
  }
  commit(g, out, r, matched);
  return true;
}

class RecognizePatternsPass final : public Pass {
 public:
  std::string name() const override { return "recognize_patterns"; }
  int min_opt_level() const override { return 1; }
  bool run(Graph& g, const PassOptions& opts) override {
    if (!opts.inference) return false;
    bool changed = false;
    std::unordered_map<const Value*, Value*> transposed;
    // Nodes in order: an inner product (0.5 * x) is tried before the product it feeds, and a norm's core
    // before the gamma/beta that extend it.
    for (Node* n : std::vector<Node*>(g.nodes())) {
      if (n->dead || n->outputs.size() != 1) continue;
      bool hit = false;
      switch (n->op) {
        case "matmul"_op:
          hit = try_linear(g, n, transposed);
          break;
        case "div"_op:
          hit = try_softmax(g, n) || try_norm(g, n);
          break;
        case "mul"_op:
          hit = try_norm(g, n) || try_gelu_silu(g, n);
          break;
        default:
          break;
      }
      changed = changed || hit;
    }
    for (auto& [w, t] : transposed)  // weights whose every use turned out not to match
      if (t->uses.empty()) g.erase_node(t->producer);
    if (changed) g.topo_sort();
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_recognize_patterns_pass() { return std::make_unique<RecognizePatternsPass>(); }

}  // namespace spore
