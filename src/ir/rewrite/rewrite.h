#pragma once
// The rewrite engine every pattern pass uses (simplification, fusion, lowering).
//
//   using namespace spore::rewrite;
//   RewriteSet rules("simplify");
//   rules.add({"mul_by_one", m::op("mul"_op, {m::any("x"), m::constant("one")}),
//              [](Match& mt, Rewriter& rw) {
//                if (!is_all(mt.node("one"), 1.0)) return false;  // a predicate on the capture
//                rw.replace(mt.root->output(0), mt["x"]);
//                return true;
//              }});
//   RewriteStats st = apply_greedy(graph, rules);
//
// Patterns are plain values (no mutable capture state); a Match holds the captures. Rules are indexed
// by their root op, so a node is only tried against rules that can match it. The greedy driver runs
// to a fixed point and, if a rule keeps firing past the iteration cap, throws naming that rule.
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace spore::rewrite {

struct Match {
  Node* root = nullptr;
  std::unordered_map<std::string, Value*> values;
  Value* operator[](const std::string& name) const { return values.at(name); }
  Node* node(const std::string& name) const { return values.at(name)->producer; }
};

class Pattern {
 public:
  enum class Kind { any, op, constant };
  Pattern(Kind k, OpId op, std::vector<Pattern> args, std::string capture)
      : kind_(k), op_(op), args_(std::move(args)), capture_(std::move(capture)) {}
  bool match(Value* v, Match& m) const;
  Kind kind() const { return kind_; }
  OpId op() const { return op_; }

 private:
  Kind kind_;
  OpId op_;
  std::vector<Pattern> args_;
  std::string capture_;
};

namespace m {
// Any value; captured under `name` if given. A repeated name must bind the same value.
Pattern any(std::string name = "");
// A value produced by `op` whose inputs match `args` (arity must match).
Pattern op(OpId op, std::vector<Pattern> args, std::string name = "");
// A value produced by a constant node.
Pattern constant(std::string name = "");
}  // namespace m

// Creates replacement nodes and rewires uses, keeping use-lists valid.
class Rewriter {
 public:
  explicit Rewriter(Graph& g) : g_(g) {}
  Graph& graph() { return g_; }
  Node* add(OpId op, std::vector<Value*> inputs, Attrs attrs, std::vector<TensorType> types, std::string name = "") {
    Node* n = g_.add_node(op, std::move(inputs), std::move(attrs), std::move(types), std::move(name));
    created_.push_back(n);
    return n;
  }
  void replace(Value* from, Value* to) { g_.replace_all_uses(from, to); }
  const std::vector<Node*>& created() const { return created_; }

 private:
  Graph& g_;
  std::vector<Node*> created_;
};

struct RewriteRule {
  std::string name;
  Pattern pattern;  // must be an op pattern: its op is the rule's root op
  std::function<bool(Match&, Rewriter&)> apply;
};

class RewriteSet {
 public:
  explicit RewriteSet(std::string name) : name_(std::move(name)) {}
  RewriteSet& add(RewriteRule rule);
  const std::string& name() const { return name_; }
  const std::vector<const RewriteRule*>& rules_for(OpId op) const;
  size_t size() const { return rules_.size(); }

 private:
  std::string name_;
  std::vector<std::unique_ptr<RewriteRule>> rules_;
  std::unordered_map<uint32_t, std::vector<const RewriteRule*>> by_op_;
};

struct RewriteStats {
  int64_t applied = 0;
  std::unordered_map<std::string, int64_t> per_rule;
};

// Applies rules until none matches. Throws (naming the most-fired rule) after `max_rewrites`.
RewriteStats apply_greedy(Graph& g, const RewriteSet& rules, int64_t max_rewrites = 100000);

}  // namespace spore::rewrite
