#include "ir/rewrite/rewrite.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <unordered_set>

namespace spore::rewrite {

using Cont = std::function<bool(MatchState&)>;

// The captures and nodes of the match being built; every step undoes what it added before it returns.
struct MatchState {
  const Graph* g = nullptr;
  std::vector<std::pair<const std::string*, Value*>> caps;
  std::vector<std::pair<Node*, bool>> nodes;  // node, may be shared
};

namespace {

// Binds `name` to `v` (or checks the value it already has) for the rest of the match.
bool bind_capture(const std::string& name, Value* v, MatchState& s, const Cont& k) {
  if (name.empty()) return k(s);
  for (const auto& [n, val] : s.caps)
    if (*n == name) return val == v && k(s);
  s.caps.emplace_back(&name, v);
  const bool ok = k(s);
  s.caps.pop_back();
  return ok;
}

// A constant written in `dt` approximates `want` (exporters store sqrt(2), 0.044715... rounded to the dtype).
bool near(double got, double want, DType dt) {
  if (!std::isfinite(got)) return false;
  double tol = 1e-12;
  if (dt == DType::f32) tol = 1e-6;
  if (dt == DType::f16) tol = 2e-3;
  if (dt == DType::bf16) tol = 1e-2;
  return std::fabs(got - want) <= tol * std::fabs(want);
}

const int kSwapped[2] = {1, 0};

}  // namespace

bool Pattern::match_args(const Node* n, size_t i, const int* order, MatchState& s, const Cont& k) const {
  if (i == args_.size()) return k(s);
  Value* in = n->inputs[order ? order[i] : static_cast<int>(i)];
  return args_[i].match(in, s, [&](MatchState& s2) { return match_args(n, i + 1, order, s2, k); });
}

bool Pattern::match(Value* v, MatchState& s, const Cont& k) const {
  switch (kind_) {
    case Kind::any:
      return bind_capture(capture_, v, s, k);
    case Kind::constant:
      if (!v->producer || !v->producer->is_constant()) return false;
      return bind_capture(capture_, v, s, k);
    case Kind::literal: {
      const Node* p = v->producer;
      if (!p || !p->is_constant() || !p->payload.defined() || p->payload.numel() != 1) return false;
      if (!near(p->payload.item_at(0), literal_, v->type.dtype)) return false;
      return bind_capture(capture_, v, s, k);
    }
    case Kind::alt:
      return bind_capture(capture_, v, s, [&](MatchState& s2) {
        for (const Pattern& a : args_)
          if (a.match(v, s2, k)) return true;
        return false;
      });
    case Kind::op: {
      Node* n = v->producer;
      if (!n || n->dead || n->op != op_ || n->inputs.size() != args_.size() || n->output(0) != v) return false;
      return bind_capture(capture_, v, s, [&](MatchState& s2) {
        s2.nodes.emplace_back(n, shared_);
        bool ok = match_args(n, 0, nullptr, s2, k);
        if (!ok && commutative_ && n->inputs[0] != n->inputs[1]) ok = match_args(n, 0, kSwapped, s2, k);
        s2.nodes.pop_back();
        return ok;
      });
    }
    case Kind::tree: {
      Node* root = v->producer;
      if (!root || root->dead || root->op != op_ || root->inputs.size() != 2 || root->output(0) != v) return false;
      // Open op nodes from the root while they have one use and the root's dtype; the rest are leaves.
      std::vector<Value*> leaves;
      std::vector<Node*> inner;
      const DType dt = v->type.dtype;
      std::function<void(Value*, bool)> open = [&](Value* x, bool is_root) {
        Node* p = x->producer;
        if (p && !p->dead && p->op == op_ && p->inputs.size() == 2 && p->output(0) == x &&
            (is_root || (x->uses.size() == 1 && !s.g->is_output(x))) && p->inputs[0]->type.dtype == dt &&
            p->inputs[1]->type.dtype == dt) {
          inner.push_back(p);
          open(p->inputs[0], false);
          open(p->inputs[1], false);
          return;
        }
        leaves.push_back(x);
      };
      open(v, true);
      if (leaves.size() != args_.size()) return false;
      std::vector<char> used(leaves.size(), 0);
      std::function<bool(size_t, MatchState&)> assign = [&](size_t i, MatchState& s2) -> bool {
        if (i == args_.size()) return k(s2);
        for (size_t j = 0; j < leaves.size(); ++j) {
          if (used[j]) continue;
          bool tried = false;  // the same value at an earlier free leaf was tried already
          for (size_t e = 0; e < j && !tried; ++e) tried = !used[e] && leaves[e] == leaves[j];
          if (tried) continue;
          used[j] = 1;
          const bool ok = args_[i].match(leaves[j], s2, [&](MatchState& s3) { return assign(i + 1, s3); });
          used[j] = 0;
          if (ok) return true;
        }
        return false;
      };
      return bind_capture(capture_, v, s, [&](MatchState& s2) {
        for (Node* p : inner) s2.nodes.emplace_back(p, shared_);
        const bool ok = assign(0, s2);
        s2.nodes.resize(s2.nodes.size() - inner.size());
        return ok;
      });
    }
  }
  return false;
}

std::vector<OpId> Pattern::root_ops() const {
  if (kind_ == Kind::op || kind_ == Kind::tree) return {op_};
  std::vector<OpId> ops;
  if (kind_ == Kind::alt) {
    for (const Pattern& a : args_) {
      std::vector<OpId> sub = a.root_ops();
      if (sub.empty()) return {};
      for (OpId o : sub)
        if (std::find(ops.begin(), ops.end(), o) == ops.end()) ops.push_back(o);
    }
  }
  return ops;
}

// ---- the pattern language

class Parser {
 public:
  Parser(std::string_view text, const OpFacts& facts) : t_(text), facts_(facts) {}

  Pattern parse() {
    Pattern p = term();
    ws();
    if (pos_ != t_.size()) fail("expected the end of the pattern");
    return p;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    SPORE_FAIL(ErrorCode::parse_error, "rewrite pattern '{}': at offset {}: {}", t_, pos_, what);
  }
  void ws() {
    while (pos_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[pos_]))) ++pos_;
  }
  bool peek(char c) {
    ws();
    return pos_ < t_.size() && t_[pos_] == c;
  }
  bool eat(char c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!eat(c)) fail(fmt::format("expected '{}'", c));
  }
  static bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }
  std::string ident() {
    ws();
    const size_t b = pos_;
    if (pos_ < t_.size() && (std::isalpha(static_cast<unsigned char>(t_[pos_])) || t_[pos_] == '_'))
      while (pos_ < t_.size() && ident_char(t_[pos_])) ++pos_;
    return std::string(t_.substr(b, pos_ - b));
  }

  Pattern alternatives(std::string capture) {
    expect('{');
    std::vector<Pattern> alts;
    do {
      alts.push_back(term());
    } while (eat('|'));
    expect('}');
    if (alts.size() < 2) fail("an alternation needs at least two alternatives");
    return Pattern(Pattern::Kind::alt, OpId{}, std::move(alts), std::move(capture));
  }

  Pattern call(const std::string& name, std::string capture, bool shared) {
    const auto op = op_from_name(name);
    if (!op) fail(fmt::format("unknown op '{}'", name));
    const bool tree = eat('+');
    expect('(');
    std::vector<Pattern> args;
    if (!peek(')')) {
      do {
        args.push_back(term());
      } while (eat(','));
    }
    expect(')');
    if (tree && args.size() < 2) fail(fmt::format("{}+ needs at least two operands", name));
    Pattern p(tree ? Pattern::Kind::tree : Pattern::Kind::op, *op, std::move(args), std::move(capture));
    p.shared_ = shared;
    p.commutative_ = !tree && p.args_.size() == 2 && facts_.commutative && facts_.commutative(*op);
    return p;
  }

  Pattern term() {
    const bool shared = eat('~');
    ws();
    if (pos_ >= t_.size()) fail("expected a pattern");
    const char c = t_[pos_];
    if (c == '{') {
      if (shared) fail("'~' applies to an op, not an alternation");
      return alternatives("");
    }
    if (c == '$') {
      ++pos_;
      if (shared) fail("'~' applies to an op, not a constant");
      return Pattern(Pattern::Kind::constant, OpId{}, {}, ident());
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.') {
      if (shared) fail("'~' applies to an op, not a number");
      const std::string rest(t_.substr(pos_));
      char* end = nullptr;
      const double x = std::strtod(rest.c_str(), &end);
      if (end == rest.c_str()) fail("expected a number");
      pos_ += static_cast<size_t>(end - rest.c_str());
      Pattern p(Pattern::Kind::literal, OpId{}, {}, "");
      p.literal_ = x;
      return p;
    }
    const std::string id = ident();
    if (id.empty()) fail("expected a name, an op, '$', a number or '{'");
    if (eat('=')) {  // a capture of what follows
      if (id == "_") fail("'_' cannot capture");
      const bool inner_shared = shared || eat('~');
      if (peek('{')) {
        if (inner_shared) fail("'~' applies to an op, not an alternation");
        return alternatives(id);
      }
      const std::string op = ident();
      if (op.empty() || !(peek('(') || peek('+'))) fail(fmt::format("expected an op or '{{' after '{}='", id));
      return call(op, id, inner_shared);
    }
    if (peek('(') || peek('+')) return call(id, "", shared);
    if (shared) fail("'~' applies to an op");
    return Pattern(Pattern::Kind::any, OpId{}, {}, id == "_" ? "" : id);
  }

  std::string_view t_;
  const OpFacts& facts_;
  size_t pos_ = 0;
};

Pattern Pattern::parse(std::string_view text, const OpFacts& facts) { return Parser(text, facts).parse(); }

namespace m {
Pattern any(std::string name) { return Pattern(Pattern::Kind::any, OpId{}, {}, std::move(name)); }
Pattern op(OpId op, std::vector<Pattern> args, std::string name) {
  return Pattern(Pattern::Kind::op, op, std::move(args), std::move(name));
}
Pattern constant(std::string name) { return Pattern(Pattern::Kind::constant, OpId{}, {}, std::move(name)); }
}  // namespace m

bool node_unused(const Graph& g, const Node* n) {
  return std::all_of(n->outputs.begin(), n->outputs.end(),
                     [&](const Value* o) { return o->uses.empty() && !g.is_output(o); });
}

void Rewriter::drop_unused_created() {
  for (auto it = created_.rbegin(); it != created_.rend(); ++it)
    if (!(*it)->dead && node_unused(g_, *it)) g_.erase_node(*it);
  created_.clear();
}

RewriteSet& RewriteSet::add(RewriteRule rule) {
  const std::vector<OpId> roots = rule.pattern.root_ops();
  SPORE_ASSERT(!roots.empty(), "rule '{}' must be rooted at an op pattern", rule.name);
  rules_.push_back(std::make_unique<RewriteRule>(std::move(rule)));
  for (OpId op : roots) by_op_[static_cast<uint32_t>(op)].push_back(rules_.back().get());
  return *this;
}

RewriteSet& RewriteSet::add(std::string name, std::string_view pattern, std::function<bool(Match&, Rewriter&)> apply,
                            Interior interior) {
  return add(RewriteRule{std::move(name), Pattern::parse(pattern, facts_), std::move(apply), interior});
}

const std::vector<const RewriteRule*>& RewriteSet::rules_for(OpId op) const {
  static const std::vector<const RewriteRule*> none;
  auto it = by_op_.find(static_cast<uint32_t>(op));
  return it == by_op_.end() ? none : it->second;
}

namespace {

// The matched nodes other than the root (and those marked ~) are used only inside the match.
bool interior_exclusive(const Graph& g, const Node* root, const MatchState& s) {
  std::unordered_set<const Node*> inside;
  for (const auto& [n, shared] : s.nodes) inside.insert(n);
  for (const auto& [n, shared] : s.nodes) {
    if (n == root || shared) continue;
    for (const Value* o : n->outputs) {
      if (g.is_output(o)) return false;
      for (const Use& u : o->uses)
        if (!inside.count(u.user)) return false;
    }
  }
  return true;
}

}  // namespace

bool try_rule(Graph& g, const RewriteRule& rule, Node* n, Rewriter& rw) {
  MatchState s;
  s.g = &g;
  return rule.pattern.match(n->output(0), s, [&](MatchState& st) {
    if (rule.interior == Interior::exclusive && !interior_exclusive(g, n, st)) return false;
    Match mt;
    mt.root = n;
    for (const auto& [name, v] : st.caps) mt.values.emplace(*name, v);
    mt.nodes.push_back(n);
    for (const auto& [node, shared] : st.nodes)
      if (std::find(mt.nodes.begin(), mt.nodes.end(), node) == mt.nodes.end()) mt.nodes.push_back(node);
    return rule.apply(mt, rw);
  });
}

RewriteStats apply_greedy(Graph& g, const RewriteSet& rules, int64_t max_rewrites) {
  RewriteStats st;
  std::deque<Node*> work(g.nodes().begin(), g.nodes().end());
  std::unordered_set<Node*> queued(work.begin(), work.end());
  while (!work.empty()) {
    Node* n = work.front();
    work.pop_front();
    queued.erase(n);
    if (n->dead || n->outputs.empty()) continue;
    // Dead code is DCE's business; rewriting it would keep "applying" rules forever.
    if (node_unused(g, n)) continue;
    for (const RewriteRule* r : rules.rules_for(n->op)) {
      Rewriter rw(g);
      // Users of the root may now match new patterns: re-queue them after a rewrite.
      std::vector<Node*> users;
      for (Value* o : n->outputs)
        for (const Use& u : o->uses) users.push_back(u.user);
      if (!try_rule(g, *r, n, rw)) continue;
      ++st.applied;
      if (++st.per_rule[r->name] > max_rewrites || st.applied > max_rewrites) {
        auto top = std::max_element(st.per_rule.begin(), st.per_rule.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
        SPORE_FAIL(ErrorCode::internal, "[rewrite {}] no fixed point after {} rewrites; rule '{}' keeps firing (cycle?)",
                   rules.name(), st.applied, top->first);
      }
      // A root the rule bypassed is erased now so it cannot match again (its inputs' users change).
      if (!n->dead && node_unused(g, n)) g.erase_node(n);
      for (Node* c : rw.created())
        if (!c->dead) {
          users.push_back(c);
          for (Value* o : c->outputs)
            for (const Use& u : o->uses) users.push_back(u.user);
        }
      for (Node* u : users)
        if (!u->dead && queued.insert(u).second) work.push_back(u);
      break;
    }
  }
  g.topo_sort();
  return st;
}

}  // namespace spore::rewrite
