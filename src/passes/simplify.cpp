// Algebraic simplification: a rule set on the rewrite engine that removes work whose result is already at
// hand. Every rule here is exact (the simplified graph gives the same bits as the original), so it is safe
// under spore's graph == PyNative promise:
//   x*1, 1*x, x/1, x-(+0), x+(-0), (-0)+x   (integer x: any zero; float x+(+0) is NOT removed: -0 + +0 = +0)
//   neg(neg x); transpose(transpose x) -> one transpose (or x when the composed perm is the identity)
//   reshape-like(reshape-like x) -> one reshape (reshape, flatten, squeeze, unsqueeze), or x if the shape is x's
//   reshape/flatten/squeeze/unsqueeze/expand/transpose/slice(step 1) whose output type equals its input's
//   cast to the own dtype; cast(cast(x: A -> B) -> A) when A -> B is lossless (f32 -> f64 -> f32, ...)
//   identity; dropout that is off (training=false or p=0)
// A constant operand counts only by value (every element equal to 1 / 0) and only when the op's output type
// equals the kept operand's type, so broadcasting or type promotion by the constant is never dropped.
// Graph outputs keep their value names: the surviving value takes the output's name (or, when it is a graph
// input or another output, the rule does not fire).
#include <cmath>
#include <optional>

#include "ir/rewrite/rewrite.h"
#include "ops/graph_ops.h"
#include "passes/pass.h"

namespace spore {
namespace {
using namespace rewrite;

Attrs normalized(const Node* n) { return op_registry().get(n->op).normalize(n->attrs, n->label()); }

// Every element of the constant equals v (zero_sign, for v == 0: -1 = any sign, 0 = +0 only, 1 = -0 only).
bool constant_all(const Value* c, double v, int zero_sign = -1) {
  if (!c->producer || !c->producer->is_constant()) return false;
  const Tensor& t = c->producer->payload;
  if (!t.defined()) return false;
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const double x = t.item_at(i);
    if (x != v) return false;
    if (v == 0 && zero_sign >= 0 && std::signbit(x) != (zero_sign == 1)) return false;
  }
  return true;
}

// Gives `v` a fresh name starting with `base` (names of dead values stay taken, find_value does not see them).
void park_name(Graph& g, Value* v, const std::string& base) {
  for (int k = 0;; ++k) {
    const std::string name = k ? base + std::to_string(k) : base;
    if (!g.name_taken(name)) return g.rename_value(v, name);
  }
}

// Routes the uses of `from` to `to`. If `from` is a graph output, `to` takes its name; that is only possible
// when `to` is neither a graph input nor already an output (then nothing changes and false is returned).
bool forward(Rewriter& rw, Value* from, Value* to) {
  Graph& g = rw.graph();
  if (g.is_output(from)) {
    if (to->producer && to->producer->is_input()) return false;
    if (g.is_output(to)) return false;
    const std::string name = from->name;
    park_name(g, from, name + ".simplified");
    rw.replace(from, to);
    g.rename_value(to, name);
    return true;
  }
  rw.replace(from, to);
  return true;
}

bool is_int_like(DType t) { return !is_floating(t); }

// a (op) c == a, for a constant c of the given identity value.
RewriteRule binary_identity(std::string name, OpId op, bool const_first, double value, int zero_sign_float) {
  Pattern p = const_first ? m::op(op, {m::constant("c"), m::any("x")}) : m::op(op, {m::any("x"), m::constant("c")});
  return {std::move(name), std::move(p), [value, zero_sign_float](Match& mt, Rewriter& rw) {
            Value* x = mt["x"];
            Value* out = mt.root->output(0);
            if (!(out->type == x->type)) return false;
            const int zs = is_int_like(x->type.dtype) ? -1 : zero_sign_float;
            if (!constant_all(mt["c"], value, zs)) return false;
            return forward(rw, out, x);
          }};
}

// Output type equals input type and the op is a pure relabelling of the same elements: the node is a no-op.
RewriteRule same_type_noop(std::string name, OpId op, std::function<bool(const Node*)> extra = nullptr) {
  return {std::move(name), m::op(op, {m::any("x")}), [extra](Match& mt, Rewriter& rw) {
            Value* x = mt["x"];
            Value* out = mt.root->output(0);
            if (!(out->type == x->type)) return false;
            if (extra && !extra(mt.root)) return false;
            return forward(rw, out, x);
          }};
}

// The reshape target for a type: static dims as-is, one symbolic dim as -1; nullopt if more than one is symbolic.
std::optional<std::vector<int64_t>> reshape_target(const TensorType& t) {
  std::vector<int64_t> s;
  int symbolic = 0;
  for (const Dim& d : t.dims) {
    if (d.is_static()) {
      s.push_back(d.size);
    } else {
      ++symbolic;
      s.push_back(-1);
    }
  }
  if (symbolic > 1) return std::nullopt;
  return s;
}

// A node whose inferred output type differs from `want` is removed again (no rewrite).
Node* add_checked(Rewriter& rw, OpId op, Value* x, Attrs attrs, const TensorType& want, const std::string& name) {
  const OpDef& def = op_registry().get(op);
  Attrs a = def.normalize(attrs, name);
  const TensorType in[] = {x->type};
  auto outs = try_infer_types(def, in, a, name);
  if (!outs || outs->size() != 1 || !((*outs)[0] == want)) return nullptr;
  return rw.add(op, {x}, std::move(a), std::move(*outs), name);
}

RewriteRule reshape_chain(OpId outer, OpId inner) {
  return {fmt::format("{}_of_{}", op_name(outer), op_name(inner)), m::op(outer, {m::op(inner, {m::any("x")})}),
          [](Match& mt, Rewriter& rw) {
            Value* x = mt["x"];
            Value* out = mt.root->output(0);
            if (out->type == x->type) return forward(rw, out, x);
            auto target = reshape_target(out->type);
            if (!target) return false;
            Node* r = add_checked(rw, "reshape"_op, x, Attrs{{"shape", *target}}, out->type, mt.root->name);
            if (!r) return false;
            if (forward(rw, out, r->output(0))) return true;
            rw.graph().erase_node(r);
            return false;
          }};
}

// A -> B keeps every value of A exactly (so casting back gives x).
bool lossless(DType a, DType b) {
  if (a == b || a == DType::boolean) return true;
  switch (a) {
    case DType::u8:
    case DType::i8:
      return b == DType::i32 || b == DType::i64 || is_floating(b);  // |v| <= 255 fits bf16's 8-bit significand
    case DType::i32:
      return b == DType::i64 || b == DType::f64;
    case DType::f16:
    case DType::bf16:
      return b == DType::f32 || b == DType::f64;
    case DType::f32:
      return b == DType::f64;
    default:
      return false;
  }
}

std::vector<int64_t> perm(const Node* n) {
  const Attrs a = normalized(n);
  std::vector<int64_t> p = a.ints("perm");
  const int rank = n->inputs[0]->type.rank();
  if (p.empty())
    for (int i = rank - 1; i >= 0; --i) p.push_back(i);
  for (int64_t& v : p)
    if (v < 0) v += rank;
  return p;
}

bool is_identity_perm(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

RewriteSet make_rules() {
  RewriteSet rules("simplify");
  // zero_sign_float (for a zero constant and float x): 0 = only +0 counts, 1 = only -0 counts.
  rules.add(binary_identity("mul_by_one", "mul"_op, false, 1.0, -1));
  rules.add(binary_identity("one_mul", "mul"_op, true, 1.0, -1));
  rules.add(binary_identity("div_by_one", "div"_op, false, 1.0, -1));
  rules.add(binary_identity("sub_zero", "sub"_op, false, 0.0, 0));   // x - (+0) == x, also for x = -0
  rules.add(binary_identity("add_zero", "add"_op, false, 0.0, 1));   // x + (-0) == x; x + (+0) turns -0 into +0
  rules.add(binary_identity("zero_add", "add"_op, true, 0.0, 1));
  rules.add({"neg_neg", m::op("neg"_op, {m::op("neg"_op, {m::any("x")})}),
             [](Match& mt, Rewriter& rw) { return forward(rw, mt.root->output(0), mt["x"]); }});
  rules.add({"transpose_transpose", m::op("transpose"_op, {m::op("transpose"_op, {m::any("x")}, "t")}),
             [](Match& mt, Rewriter& rw) {
               Value* x = mt["x"];
               Value* out = mt.root->output(0);
               const std::vector<int64_t> inner = perm(mt.node("t")), outer = perm(mt.root);
               std::vector<int64_t> composed(outer.size());
               for (size_t i = 0; i < outer.size(); ++i) composed[i] = inner.at(outer[i]);
               if (is_identity_perm(composed)) return forward(rw, out, x);
               Node* t = add_checked(rw, "transpose"_op, x, Attrs{{"perm", composed}}, out->type, mt.root->name);
               if (!t) return false;
               if (forward(rw, out, t->output(0))) return true;
               rw.graph().erase_node(t);
               return false;
             }});
  // Every op that only relabels its input's shape (Trait::reshape): chains collapse, and one that keeps the type
  // is a no-op. expand is not a reshape (it repeats elements) but is a no-op when the type is kept.
  std::vector<OpId> reshapes;
  for (const OpDef* d : op_registry().all())
    if (d->traits.has(Trait::reshape)) reshapes.push_back(d->id);
  for (OpId outer : reshapes)
    for (OpId inner : reshapes) rules.add(reshape_chain(outer, inner));
  reshapes.push_back("expand"_op);
  for (OpId op : reshapes) rules.add(same_type_noop(fmt::format("noop_{}", op_name(op)), op));
  rules.add(same_type_noop("noop_transpose", "transpose"_op, [](const Node* n) { return is_identity_perm(perm(n)); }));
  // With step 1 everywhere, a slice as long as its input on every axis is the full range.
  rules.add(same_type_noop("noop_slice", "slice"_op, [](const Node* n) {
    const Attrs a = normalized(n);  // kept alive: ints() returns a reference into it
    for (int64_t s : a.ints("steps"))
      if (s != 1) return false;
    return true;
  }));
  rules.add(same_type_noop("noop_cast", "cast"_op));
  rules.add({"cast_round_trip", m::op("cast"_op, {m::op("cast"_op, {m::any("x")}, "mid")}),
             [](Match& mt, Rewriter& rw) {
               Value* x = mt["x"];
               Value* out = mt.root->output(0);
               if (!(out->type == x->type) || !lossless(x->type.dtype, mt["mid"]->type.dtype)) return false;
               return forward(rw, out, x);
             }});
  rules.add(same_type_noop("identity", "identity"_op));
  rules.add(same_type_noop("dropout_off", "dropout"_op, [](const Node* n) {
    const Attrs a = normalized(n);
    return !a.b("training") || a.f("p") == 0.0;
  }));
  rules.add({"dropout_off_offset", m::op("dropout"_op, {m::any("x"), m::any()}), [](Match& mt, Rewriter& rw) {
               const Attrs a = normalized(mt.root);
               if (a.b("training") && a.f("p") != 0.0) return false;
               return forward(rw, mt.root->output(0), mt["x"]);
             }});
  return rules;
}

class SimplifyPass final : public Pass {
 public:
  std::string name() const override { return "simplify"; }
  int min_opt_level() const override { return 1; }
  bool run(Graph& g, const PassOptions&) override {
    static const RewriteSet rules = make_rules();
    return apply_greedy(g, rules).applied > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_simplify_pass() { return std::make_unique<SimplifyPass>(); }

}  // namespace spore
