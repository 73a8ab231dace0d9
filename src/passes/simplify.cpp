// Algebraic simplification: a rule set on the rewrite engine that removes work whose result is already at
// hand. Every rule here is exact (the simplified graph gives the same bits as the original), so it is safe
// under spore's graph == PyNative promise:
//   x*1, 1*x, x/1, x-(+0), x+(-0), (-0)+x   (integer x: any zero; float x+(+0) is NOT removed: -0 + +0 = +0)
//   neg(neg x); transpose(transpose x) -> one transpose (or x when the composed perm is the identity)
//   reshape-like(reshape-like x) -> one reshape (reshape, flatten, squeeze, unsqueeze), or x if the shape is x's
//   reshape/flatten/squeeze/unsqueeze/expand/transpose/slice(step 1)/pad(all zero) whose output type equals its input's
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
#include "passes/rules.h"

namespace spore {
namespace {
using namespace rewrite;

bool is_int_like(DType t) { return !is_floating(t); }

Pattern parse(std::string_view text) { return Pattern::parse(text, registry_facts()); }

// x (op) c == x, for a constant c of the given identity value (either side when op is commutative).
RewriteRule binary_identity(std::string name, std::string_view pattern, double value, int zero_sign_float) {
  return {std::move(name), parse(pattern), [value, zero_sign_float](Match& mt, Rewriter& rw) {
            Value* x = mt["x"];
            Value* out = mt.root->output(0);
            if (!(out->type == x->type)) return false;
            const int zs = is_int_like(x->type.dtype) ? -1 : zero_sign_float;
            if (!constant_all(mt["c"], value, zs)) return false;
            return forward_root(mt, rw, x);
          }};
}

// Output type equals input type and the op is a pure relabelling of the same elements: the node is a no-op.
RewriteRule same_type_noop(std::string name, std::string_view pattern,
                           std::function<bool(const Node*)> extra = nullptr) {
  return {std::move(name), parse(pattern), [extra](Match& mt, Rewriter& rw) {
            Value* x = mt["x"];
            Value* out = mt.root->output(0);
            if (!(out->type == x->type)) return false;
            if (extra && !extra(mt.root)) return false;
            return forward_root(mt, rw, x);
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

// A chain of two reshape-like ops collapses into one reshape (or x).
RewriteRule reshape_chain(std::string_view pattern) {
  return {"reshape_chain", parse(pattern), [](Match& mt, Rewriter& rw) {
            Value* x = mt["x"];
            Value* out = mt.root->output(0);
            if (out->type == x->type) return forward_root(mt, rw, x);
            auto target = reshape_target(out->type);
            if (!target) return false;
            Node* r = add_checked(rw, "reshape"_op, x, Attrs{{"shape", *target}}, out->type, mt.root->name);
            if (!r) return false;
            if (forward_root(mt, rw, r->output(0))) return true;
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

// Every op with trait t applied to `args`, as alternatives: "{reshape(x) | flatten(x) | ...}".
std::string any_op_with(Trait t, const std::string& args) {
  std::string alts;
  for (const OpDef* d : op_registry().all())
    if (d->traits.has(t)) alts += (alts.empty() ? "" : " | ") + d->name + "(" + args + ")";
  return "{" + alts + "}";
}

RewriteSet make_rules() {
  RewriteSet rules("simplify", registry_facts());
  // zero_sign_float (for a zero constant and float x): 0 = only +0 counts, 1 = only -0 counts.
  rules.add(binary_identity("mul_by_one", "mul(x, $c)", 1.0, -1));
  rules.add(binary_identity("div_by_one", "div(x, $c)", 1.0, -1));
  rules.add(binary_identity("sub_zero", "sub(x, $c)", 0.0, 0));  // x - (+0) == x, also for x = -0
  rules.add(binary_identity("add_zero", "add(x, $c)", 0.0, 1));  // x + (-0) == x; x + (+0) turns -0 into +0
  rules.add("neg_neg", "neg(neg(x))", [](Match& mt, Rewriter& rw) { return forward_root(mt, rw, mt["x"]); });
  rules.add("transpose_transpose", "transpose(t=transpose(x))", [](Match& mt, Rewriter& rw) {
    Value* x = mt["x"];
    Value* out = mt.root->output(0);
    const std::vector<int64_t> inner = perm(mt.node("t")), outer = perm(mt.root);
    std::vector<int64_t> composed(outer.size());
    for (size_t i = 0; i < outer.size(); ++i) composed[i] = inner.at(outer[i]);
    if (is_identity_perm(composed)) return forward_root(mt, rw, x);
    Node* t = add_checked(rw, "transpose"_op, x, Attrs{{"perm", composed}}, out->type, mt.root->name);
    if (!t) return false;
    if (forward_root(mt, rw, t->output(0))) return true;
    rw.graph().erase_node(t);
    return false;
  });
  // Every op that only relabels its input's shape (Trait::reshape): chains collapse, and one that keeps the type
  // is a no-op. expand is not a reshape (it repeats elements) but is a no-op when the type is kept.
  rules.add(reshape_chain(any_op_with(Trait::reshape, any_op_with(Trait::reshape, "x"))));
  rules.add(same_type_noop("noop_reshape", any_op_with(Trait::reshape, "x")));
  rules.add(same_type_noop("noop_expand", "expand(x)"));
  rules.add(same_type_noop("noop_transpose", "transpose(x)", [](const Node* n) { return is_identity_perm(perm(n)); }));
  // With step 1 everywhere, a slice as long as its input on every axis is the full range.
  rules.add(same_type_noop("noop_slice", "slice(x)", [](const Node* n) {
    const Attrs a = normalized(n);  // kept alive: ints() returns a reference into it
    for (int64_t s : a.ints("steps"))
      if (s != 1) return false;
    return true;
  }));
  // Every pad zero (PyTorch's exporter writes one before DenseNet's AveragePool): a copy of x, in every mode.
  rules.add(same_type_noop("noop_pad", "pad(x)", [](const Node* n) {
    const Attrs a = normalized(n);
    for (int64_t p : a.ints("pads"))
      if (p != 0) return false;
    return true;
  }));
  rules.add(same_type_noop("noop_cast", "cast(x)"));
  rules.add("cast_round_trip", "cast(mid=cast(x))", [](Match& mt, Rewriter& rw) {
    Value* x = mt["x"];
    Value* out = mt.root->output(0);
    if (!(out->type == x->type) || !lossless(x->type.dtype, mt["mid"]->type.dtype)) return false;
    return forward_root(mt, rw, x);
  });
  rules.add(same_type_noop("identity", "identity(x)"));
  rules.add(same_type_noop("dropout_off", "dropout(x)", [](const Node* n) {
    const Attrs a = normalized(n);
    return !a.b("training") || a.f("p") == 0.0;
  }));
  rules.add("dropout_off_offset", "dropout(x, _)", [](Match& mt, Rewriter& rw) {
    const Attrs a = normalized(mt.root);
    if (a.b("training") && a.f("p") != 0.0) return false;
    return forward_root(mt, rw, mt["x"]);
  });
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
