#include "passes/rules.h"

#include <cctype>
#include <cmath>

#include "ops/graph_ops.h"

namespace spore {

using rewrite::Match;
using rewrite::Rewriter;

const rewrite::OpFacts& registry_facts() {
  static const rewrite::OpFacts facts{[](OpId op) {
    const OpDef* d = op_registry().find(op);
    return d != nullptr && d->traits.has(Trait::commutative) && d->max_inputs == 2;
  }};
  return facts;
}

Replacement::Replacement(std::string_view text) {
  auto fail = [&](const std::string& what) {
    SPORE_FAIL(ErrorCode::parse_error, "rewrite replacement '{}': {}", text, what);
  };
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
  };
  const size_t open = text.find('('), close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open ||
      !trim(text.substr(close + 1)).empty())
    fail("expected op(input, ...)");
  const std::string_view name = trim(text.substr(0, open));
  const auto op = op_from_name(name);
  if (!op) fail(fmt::format("unknown op '{}'", name));
  op_ = *op;
  std::string_view rest = trim(text.substr(open + 1, close - open - 1));
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view a = trim(rest.substr(0, comma));
    const bool optional = !a.empty() && a.back() == '?';
    if (optional) a = trim(a.substr(0, a.size() - 1));
    if (a.empty()) fail("empty input");
    args_.emplace_back(std::string(a), optional);
    rest = comma == std::string_view::npos ? std::string_view() : trim(rest.substr(comma + 1));
    if (comma != std::string_view::npos && rest.empty()) fail("empty input after ','");
  }
}

bool Replacement::apply(const Match& mt, Rewriter& rw, const Build& b) const {
  Graph& g = rw.graph();
  std::vector<Value*> ins;
  for (const auto& [name, optional] : args_) {
    auto it = mt.values.find(name);
    if (it == mt.values.end()) {
      SPORE_ASSERT(optional, "replacement input '{}' was not captured by the pattern", name);
      continue;
    }
    ins.push_back(it->second);
  }
  Value* old = mt.root->output(0);
  Node* n = try_build_node(g, op_, std::move(ins), b.attrs, b.name ? *b.name : mt.root->name);
  if (n == nullptr) return false;
  if (n->outputs.size() != 1 || n->output(0)->type != old->type) {
    g.erase_node(n);
    return false;
  }
  rw.created(n);
  const std::string keep = old->name;
  g.replace_all_uses(old, n->output(0));
  if (!keep.empty()) {
    g.rename_value(old, fmt::format("{}.unfused{}", keep, old->id));  // frees the name
    g.rename_value(n->output(0), keep);
  }
  // Erase the matched nodes nothing uses any more (the root first, then what fed it).
  for (bool erased = true; erased;) {
    erased = false;
    for (Node* m : mt.nodes) {
      if (m->dead || !rewrite::node_unused(g, m)) continue;
      g.erase_node(m);
      erased = true;
    }
  }
  return true;
}

rewrite::RewriteRule replace_rule(std::string name, std::string_view pattern, std::string_view replacement,
                                  RuleCheck check) {
  return {std::move(name), rewrite::Pattern::parse(pattern, registry_facts()),
          [repl = Replacement(replacement), check = std::move(check)](Match& mt, Rewriter& rw) {
            Build b;
            if ((!check || check(mt, rw, b)) && repl.apply(mt, rw, b)) return true;
            rw.drop_unused_created();
            return false;
          },
          rewrite::Interior::exclusive};
}

namespace {
// Gives `v` a fresh name starting with `base` (names of dead values stay taken, find_value does not see them).
void park_name(Graph& g, Value* v, const std::string& base) {
  for (int k = 0;; ++k) {
    const std::string name = k ? base + std::to_string(k) : base;
    if (!g.name_taken(name)) return g.rename_value(v, name);
  }
}
}  // namespace

bool forward_root(Match& mt, Rewriter& rw, Value* to) {
  Graph& g = rw.graph();
  Value* from = mt.root->output(0);
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

const Tensor* constant_payload(const Value* v) {
  const Node* p = v->producer;
  if (!p || !p->is_constant() || !p->payload.defined()) return nullptr;
  return &p->payload;
}

std::optional<double> scalar_constant(const Value* v) {
  const Tensor* t = constant_payload(v);
  if (!t || t->numel() != 1) return std::nullopt;
  const double x = t->item_at(0);
  if (!std::isfinite(x)) return std::nullopt;
  return x;
}

bool constant_all(const Value* c, double v, int zero_sign) {
  const Tensor* t = constant_payload(c);
  if (!t) return false;
  const int64_t n = t->numel();
  for (int64_t i = 0; i < n; ++i) {
    const double x = t->item_at(i);
    if (x != v) return false;
    if (v == 0 && zero_sign >= 0 && std::signbit(x) != (zero_sign == 1)) return false;
  }
  return true;
}

bool float_dtype(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

Attrs normalized(const Node* n) { return op_registry().get(n->op).normalize(n->attrs, n->label()); }

bool same_type(const Match& mt, const TensorType& t) {
  for (const Node* n : mt.nodes)
    if (n->output(0)->type != t) return false;
  return true;
}

}  // namespace spore
