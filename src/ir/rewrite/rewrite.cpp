#include "ir/rewrite/rewrite.h"

#include <algorithm>
#include <deque>
#include <unordered_set>

namespace spore::rewrite {

bool Pattern::match(Value* v, Match& m) const {
  switch (kind_) {
    case Kind::any:
      break;
    case Kind::constant:
      if (!v->producer || v->producer->op != "constant"_op) return false;
      break;
    case Kind::op: {
      Node* n = v->producer;
      if (!n || n->op != op_ || n->inputs.size() != args_.size()) return false;
      for (size_t i = 0; i < args_.size(); ++i)
        if (!args_[i].match(n->inputs[i], m)) return false;
      break;
    }
  }
  if (!capture_.empty()) {
    auto [it, inserted] = m.values.emplace(capture_, v);
    if (!inserted && it->second != v) return false;
  }
  return true;
}

namespace m {
Pattern any(std::string name) { return Pattern(Pattern::Kind::any, "identity"_op, {}, std::move(name)); }
Pattern op(OpId op, std::vector<Pattern> args, std::string name) {
  return Pattern(Pattern::Kind::op, op, std::move(args), std::move(name));
}
Pattern constant(std::string name) { return Pattern(Pattern::Kind::constant, "constant"_op, {}, std::move(name)); }
}  // namespace m

RewriteSet& RewriteSet::add(RewriteRule rule) {
  SPORE_ASSERT(rule.pattern.kind() == Pattern::Kind::op, "rule '{}' must be rooted at an op pattern", rule.name);
  rules_.push_back(std::make_unique<RewriteRule>(std::move(rule)));
  by_op_[static_cast<uint32_t>(rules_.back()->pattern.op())].push_back(rules_.back().get());
  return *this;
}

const std::vector<const RewriteRule*>& RewriteSet::rules_for(OpId op) const {
  static const std::vector<const RewriteRule*> none;
  auto it = by_op_.find(static_cast<uint32_t>(op));
  return it == by_op_.end() ? none : it->second;
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
    const bool unused = std::all_of(n->outputs.begin(), n->outputs.end(),
                                    [&](const Value* o) { return o->uses.empty() && !g.is_output(o); });
    if (unused) continue;
    for (const RewriteRule* r : rules.rules_for(n->op)) {
      Match mt;
      mt.root = n;
      if (!r->pattern.match(n->output(0), mt)) continue;
      Rewriter rw(g);
      // Users of the root may now match new patterns: re-queue them after a rewrite.
      std::vector<Node*> users;
      for (Value* o : n->outputs)
        for (const Use& u : o->uses) users.push_back(u.user);
      if (!r->apply(mt, rw)) continue;
      ++st.applied;
      if (++st.per_rule[r->name] > max_rewrites || st.applied > max_rewrites) {
        auto top = std::max_element(st.per_rule.begin(), st.per_rule.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
        SPORE_FAIL(ErrorCode::internal, "[rewrite {}] no fixed point after {} rewrites; rule '{}' keeps firing (cycle?)",
                   rules.name(), st.applied, top->first);
      }
      // A root the rule bypassed is erased now so it cannot match again (its inputs' users change).
      const bool root_unused = std::all_of(n->outputs.begin(), n->outputs.end(),
                                           [&](const Value* o) { return o->uses.empty() && !g.is_output(o); });
      if (root_unused && !n->dead) g.erase_node(n);
      for (Node* c : rw.created()) users.push_back(c);
      for (Node* u : users) if (!u->dead && queued.insert(u).second) work.push_back(u);
      break;
    }
  }
  g.topo_sort();
  return st;
}

}  // namespace spore::rewrite
