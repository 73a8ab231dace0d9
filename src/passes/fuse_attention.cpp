// Attention fusion (inference): matmul(A, B) -> [add(mask)] -> softmax(last axis) -> matmul(., V) becomes one
// `attention` node (ops/attention.h) whose kernel keeps each block of scores in cache instead of writing the
// [..., Lq, Lk] scores and probabilities out and reading them back three times.
//
// A may be q scaled by a scalar constant c (div(q, c), mul(q, c), mul(c, q)), and the scores q k^T may be
// scaled the same way before the mask (as spore's MultiHeadAttention writes it); the scales move into the
// node's `scale` attribute and the scaling nodes go. B is k^T: a transpose swapping k's last two axes (k is passed
// as is), a matmul with transpose_b=true (B is k), or any other value (passed as k with k_transposed=true).
// The mask is the other operand of an add whose output has the scores' type (so it only broadcasts into them).
// Every absorbed intermediate must have exactly one use and not be a graph output; q, k and v must have equal
// ranks and leading dims (the op does not broadcast batches); the fused node must infer the final type.
//
// The fused kernel sums in another order than matmul + softmax + matmul (and applies the scale to the scores,
// not to q), so the pass runs only when PassOptions::inference is set: training graphs must stay bit-identical
// to eager mode. The attention node keeps the last matmul's node name and its output's value name.
#include <cmath>

#include "ops/graph_ops.h"
#include "passes/pass.h"

namespace spore {
namespace {

bool single_use(const Graph& g, const Value* v) { return v->uses.size() == 1 && !g.is_output(v); }

Node* producer_of(const Value* v, OpId op) { return v->producer && v->producer->op == op ? v->producer : nullptr; }

// The value of a one-element constant (any rank), if v is one.
std::optional<double> scalar_constant(const Value* v) {
  const Node* p = v->producer && v->producer->is_constant() ? v->producer : nullptr;
  if (!p || !p->payload.defined() || p->payload.numel() != 1) return std::nullopt;
  const double x = p->payload.item_at(0);
  if (!std::isfinite(x)) return std::nullopt;
  return x;
}

bool same_leading_dims(const TensorType& a, const TensorType& b) {
  if (a.rank() != b.rank() || a.rank() < 2) return false;
  for (int i = 0; i + 2 < a.rank(); ++i)
    if (!(a.dims[i] == b.dims[i])) return false;
  return true;
}

bool swaps_last_two(const Node& t) {
  const std::vector<int64_t>& perm = t.attrs.ints("perm");
  const int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2) return false;
  for (int64_t i = 0; i + 2 < r; ++i)
    if (perm[i] != i) return false;
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

struct Match {
  Node* mm1 = nullptr;
  Node* add = nullptr;
  Node* softmax = nullptr;
  Node* mm2 = nullptr;
  Node* scale_node = nullptr;  // div / mul of q absorbed into the scale
  Node* score_scale = nullptr;  // div / mul of q k^T absorbed into the scale (spore's MultiHeadAttention)
  Value *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr;
  double scale = 1.0;
  bool k_transposed = false;
};

// s = mul(t, c) | mul(c, t) | div(t, c) with c a scalar constant, t of s's type produced by a matmul: t and the
// factor; nullopt otherwise.
std::optional<std::pair<Value*, double>> scaled_matmul(const Value* s) {
  const Node* n = s->producer;
  if (!n || (n->op != "mul"_op && n->op != "div"_op) || n->inputs.size() != 2) return std::nullopt;
  for (int i = n->op == "div"_op ? 1 : 0; i < 2; ++i) {
    const auto c = scalar_constant(n->input(i));
    Value* t = n->input(1 - i);
    if (!c || t->type != s->type || !producer_of(t, "matmul"_op) || (n->op == "div"_op && *c == 0.0)) continue;
    return std::make_pair(t, n->op == "div"_op ? 1.0 / *c : *c);
  }
  return std::nullopt;
}

// Matches from the softmax node outwards; nullopt when the subgraph is not a fusable attention.
std::optional<Match> match(const Graph& g, Node* sm) {
  Match m;
  m.softmax = sm;
  const Value* p = sm->output(0);
  const int rank = p->type.rank();
  if (rank < 2 || !is_floating(p->type.dtype)) return std::nullopt;
  const int64_t axis = sm->attrs.i("axis");
  if (axis != -1 && axis != rank - 1) return std::nullopt;
  // softmax -> matmul(P, V)
  if (!single_use(g, p)) return std::nullopt;
  m.mm2 = p->uses[0].user;
  if (m.mm2->op != "matmul"_op || p->uses[0].index != 0 || m.mm2->attrs.b("transpose_a") ||
      m.mm2->attrs.b("transpose_b"))
    return std::nullopt;
  m.v = m.mm2->input(1);
  // [add(mask)] -> softmax
  Value* s = sm->input(0);
  if (!single_use(g, s)) return std::nullopt;
  if (Node* a = producer_of(s, "add"_op); a && a->inputs.size() == 2 && a->input(0) != a->input(1)) {
    for (int i = 0; i < 2; ++i) {
      Value* x = a->input(i);
      if (x->type == s->type && (producer_of(x, "matmul"_op) || scaled_matmul(x))) {
        m.add = a;
        m.mask = a->input(1 - i);
        s = x;
        break;
      }
    }
    if (!m.add || !single_use(g, s) || m.mask->type.dtype != s->type.dtype) return std::nullopt;
  }
  double score_scale = 1.0;
  if (const auto sc = scaled_matmul(s)) {  // (q k^T) * c: the scale applied to the scores
    m.score_scale = s->producer;
    score_scale = sc->second;
    s = sc->first;
    if (!single_use(g, s)) return std::nullopt;
  }
  m.mm1 = producer_of(s, "matmul"_op);
  if (!m.mm1 || m.mm1->attrs.b("transpose_a")) return std::nullopt;
  Value* a = m.mm1->input(0);
  Value* b = m.mm1->input(1);
  // A: q, or q scaled by a scalar constant (the scaling node's output must have q's type).
  m.q = a;
  if (single_use(g, a) && a->producer && (a->producer->op == "div"_op || a->producer->op == "mul"_op)) {
    Node* n = a->producer;
    for (int i = n->op == "div"_op ? 1 : 0; i < 2; ++i) {
      const auto c = scalar_constant(n->input(i));
      Value* other = n->input(1 - i);
      if (!c || other->type != a->type || (n->op == "div"_op && *c == 0.0)) continue;
      m.q = other;
      m.scale = n->op == "div"_op ? 1.0 / *c : *c;
      m.scale_node = n;
      break;
    }
  }
  m.scale *= score_scale;
  // B: k^T.
  if (m.mm1->attrs.b("transpose_b")) {
    m.k = b;
  } else if (Node* t = producer_of(b, "transpose"_op); t && swaps_last_two(*t)) {
    m.k = t->input(0);
  } else {
    m.k = b;
    m.k_transposed = true;
  }
  if (!same_leading_dims(m.q->type, m.k->type) || !same_leading_dims(m.q->type, m.v->type)) return std::nullopt;
  if (m.q->type.dtype != m.k->type.dtype || m.q->type.dtype != m.v->type.dtype) return std::nullopt;
  return m;
}

class FuseAttentionPass final : public Pass {
 public:
  std::string name() const override { return "fuse_attention"; }
  int min_opt_level() const override { return 1; }

  bool run(Graph& g, const PassOptions& opts) override {
    if (!opts.inference) return false;
    bool changed = false;
    for (Node* sm : std::vector<Node*>(g.nodes())) {
      if (sm->dead || sm->op != "softmax"_op) continue;
      const std::optional<Match> m = match(g, sm);
      if (!m) continue;
      std::vector<Value*> ins{m->q, m->k, m->v};
      if (m->mask) ins.push_back(m->mask);
      Attrs attrs;
      attrs.set("scale", m->scale);
      attrs.set("k_transposed", m->k_transposed);
      Value* out = m->mm2->output(0);
      // nullptr e.g. for a mask of a dtype or rank the op rejects: leave the subgraph alone.
      Node* f = try_build_node(g, "attention"_op, std::move(ins), attrs, m->mm2->name);
      if (f == nullptr) continue;
      if (f->output(0)->type != out->type) {
        g.erase_node(f);
        continue;
      }
      const std::string keep = out->name;
      g.replace_all_uses(out, f->output(0));
      g.erase_node(m->mm2);
      g.erase_node(m->softmax);
      if (m->add) g.erase_node(m->add);
      if (m->score_scale) g.erase_node(m->score_scale);
      g.erase_node(m->mm1);
      if (m->scale_node) g.erase_node(m->scale_node);
      if (!keep.empty()) {
        g.rename_value(out, fmt::format("{}.unfused{}", keep, out->id));  // frees the name
        g.rename_value(f->output(0), keep);
      }
      changed = true;
    }
    if (changed) g.topo_sort();
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_attention_pass() { return std::make_unique<FuseAttentionPass>(); }

}  // namespace spore
