#pragma once
// The rewrite engine every pattern pass uses (simplification, recognition, fusion).
//
// A rule is a pattern, written as text over op names, and a callback that checks what the pattern cannot say
// and rewrites:
//
//   RewriteSet rules("recognize", facts);            // facts: which ops are commutative (the op registry's)
//   rules.add("silu", "mul(x, sigmoid(x))", [](Match& mt, Rewriter& rw) { ...; return true; }, Interior::exclusive);
//
// The pattern language:
//   x              any value, captured as x; a name used twice must bind the same value
//   _              any value, not captured
//   $c             a value made by a constant node, captured as c ($ alone: not captured)
//   0.5  -1  2e-3  a one-element constant equal to the number up to its dtype's rounding
//   op(p, q, ...)  a node of op with exactly these inputs; a commutative binary op matches either order
//   op+(p, q, ...) a tree of op nodes (op associative and commutative, e.g. mul+) whose leaves match the
//                  arguments in some order; inner nodes have one use and the root's dtype
//   n=op(...)      the node's output captured as n (also n={...})
//   ~op(...)       this node may have uses outside the match (see Interior::exclusive)
//   {p | q | ...}  the first alternative that gives a whole match the callback accepts
// A rule's root (its outermost op, or each alternative's) indexes it, so a node is only tried against rules
// that can match it. Matching backtracks: when the callback declines, the next way to match is tried (other
// operand order, the next alternative, another leaf assignment), and the rule gives up only when none is left.
//
// Patterns are plain values (no mutable capture state); a Match holds the captures. The greedy driver runs to a
// fixed point and, if a rule keeps firing past the iteration cap, throws naming that rule.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace spore::rewrite {

// What the engine needs to know about ops; the op registry provides it (passes/rules.h), tests their own.
struct OpFacts {
  std::function<bool(OpId)> commutative;  // binary, f(a, b) == f(b, a)
};

struct Match {
  Node* root = nullptr;
  std::unordered_map<std::string, Value*> values;
  std::vector<Node*> nodes;  // every node the pattern matched, the root first
  Value* operator[](const std::string& name) const { return values.at(name); }
  Node* node(const std::string& name) const { return values.at(name)->producer; }
  bool has(const std::string& name) const { return values.count(name) != 0; }
};

// Whether the nodes a pattern matched (the root aside) may be used outside the match.
enum class Interior : uint8_t {
  shared,     // yes: the rule rewires the root only (simplifications)
  exclusive,  // no: their outputs are used only by matched nodes and are no graph outputs, unless marked ~
};

struct MatchState;

class Pattern {
 public:
  enum class Kind { any, op, constant, literal, alt, tree };
  Pattern(Kind k, OpId op, std::vector<Pattern> args, std::string capture)
      : kind_(k), op_(op), args_(std::move(args)), capture_(std::move(capture)) {}
  // Calls `k` for each way `v` matches (until k returns true); true if one was accepted.
  bool match(Value* v, MatchState& s, const std::function<bool(MatchState&)>& k) const;
  Kind kind() const { return kind_; }
  OpId op() const { return op_; }
  // The ops a match can be rooted at (one, or one per alternative); empty if any value can match.
  std::vector<OpId> root_ops() const;

  // Parsed from the language above. Throws naming the position and what was expected; op names must be
  // registered ops.
  static Pattern parse(std::string_view text, const OpFacts& facts);

 private:
  friend class Parser;
  bool match_args(const Node* n, size_t i, const int* order, MatchState& s,
                  const std::function<bool(MatchState&)>& k) const;
  Kind kind_;
  OpId op_;
  std::vector<Pattern> args_;
  std::string capture_;
  double literal_ = 0;
  bool commutative_ = false;
  bool shared_ = false;
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
  Value* constant(Tensor t, std::string name) {
    Value* v = g_.add_constant(std::move(t), std::move(name));
    created_.push_back(v->producer);
    return v;
  }
  // Nodes made elsewhere (a typed builder) that the driver should revisit.
  void created(Node* n) { created_.push_back(n); }
  void replace(Value* from, Value* to) { g_.replace_all_uses(from, to); }
  const std::vector<Node*>& created() const { return created_; }
  // Erases the created nodes nothing uses (a rule that built a candidate and then declined).
  void drop_unused_created();

 private:
  Graph& g_;
  std::vector<Node*> created_;
};

struct RewriteRule {
  std::string name;
  Pattern pattern;  // must be rooted at an op (or alternatives of ops)
  std::function<bool(Match&, Rewriter&)> apply;
  Interior interior = Interior::shared;
};

class RewriteSet {
 public:
  explicit RewriteSet(std::string name, OpFacts facts = {}) : name_(std::move(name)), facts_(std::move(facts)) {}
  RewriteSet& add(RewriteRule rule);
  // A rule whose pattern is text in the language above.
  RewriteSet& add(std::string name, std::string_view pattern, std::function<bool(Match&, Rewriter&)> apply,
                  Interior interior = Interior::shared);
  const std::string& name() const { return name_; }
  const std::vector<const RewriteRule*>& rules_for(OpId op) const;
  size_t size() const { return rules_.size(); }

 private:
  std::string name_;
  OpFacts facts_;
  std::vector<std::unique_ptr<RewriteRule>> rules_;
  std::unordered_map<uint32_t, std::vector<const RewriteRule*>> by_op_;
};

struct RewriteStats {
  int64_t applied = 0;
  std::unordered_map<std::string, int64_t> per_rule;
};

// No output of n is used or a graph output (a node a rewrite bypassed).
bool node_unused(const Graph& g, const Node* n);

// Tries `rule` at `n`: each match whose interior is allowed goes to the callback until one is accepted.
bool try_rule(Graph& g, const RewriteRule& rule, Node* n, Rewriter& rw);

// Applies rules until none matches. Throws (naming the most-fired rule) after `max_rewrites`.
RewriteStats apply_greedy(Graph& g, const RewriteSet& rules, int64_t max_rewrites = 100000);

}  // namespace spore::rewrite
