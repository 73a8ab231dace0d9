// The rewrite engine: fixed points, cycle reports that name the rule, and capture semantics.
#include <gtest/gtest.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "ir/rewrite/rewrite.h"
#include "ir/test_ops.h"

namespace spore {
namespace {

using namespace spore::rewrite;
using test::test_ops;
using test::use_lists_valid;

// identity(identity(x)) -> identity(x)
RewriteSet double_identity_rules() {
  RewriteSet rules("simplify");
  rules.add({"double_identity", m::op("identity"_op, {m::op("identity"_op, {m::any("x")}, "inner")}),
             [](Match& mt, Rewriter& rw) {
               rw.replace(mt.root->output(0), mt["inner"]);
               return true;
             }});
  return rules;
}

TEST(Rewrite, IdentityChainReachesFixedPoint) {
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {Dim::symbol("n")}), "x");
  Value* v = x;
  for (int i = 0; i < 6; ++i) v = g.add_node("identity"_op, {v}, {}, {x->type})->output(0);
  g.set_outputs({v});
  const RewriteStats st = apply_greedy(g, double_identity_rules());
  EXPECT_EQ(st.applied, 5);
  EXPECT_EQ(st.per_rule.at("double_identity"), 5);
  // The output is now one identity away from x; the bypassed nodes are unused.
  const Node* out = g.outputs()[0]->producer;
  EXPECT_EQ(out->op, "identity"_op);
  EXPECT_EQ(out->input(0), x);
  verify_structure(g);
  EXPECT_TRUE(use_lists_valid(g));
  // A second run finds nothing to do.
  EXPECT_EQ(apply_greedy(g, double_identity_rules()).applied, 0);
}

TEST(Rewrite, CollapseToInputThroughNewNodes) {
  // identity(x) -> x, written as a rule that builds a replacement (t_neg(t_neg(x))) and a second
  // rule that removes double negation: the driver must revisit the nodes the first rule created.
  const auto& t = test_ops();
  RewriteSet rules("lower");
  rules.add({"identity_to_negneg", m::op("identity"_op, {m::any("x")}), [&t](Match& mt, Rewriter& rw) {
               Value* x = mt["x"];
               Node* a = rw.add(t.neg, {x}, {}, {x->type});
               Node* b = rw.add(t.neg, {a->output(0)}, {}, {x->type});
               rw.replace(mt.root->output(0), b->output(0));
               return true;
             }});
  rules.add({"negneg", m::op(t.neg, {m::op(t.neg, {m::any("x")})}), [](Match& mt, Rewriter& rw) {
               rw.replace(mt.root->output(0), mt["x"]);
               return true;
             }});
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {3}), "x");
  Node* id = g.add_node("identity"_op, {x}, {}, {x->type});
  Node* s = g.add_node(t.scale, {id->output(0)}, Attrs{{"alpha", 2.0}}, {x->type});
  g.set_outputs({s->output(0)});
  const RewriteStats st = apply_greedy(g, rules);
  EXPECT_EQ(st.per_rule.at("identity_to_negneg"), 1);
  EXPECT_EQ(st.per_rule.at("negneg"), 1);
  EXPECT_EQ(s->input(0), x);
  verify_structure(g);
  EXPECT_TRUE(use_lists_valid(g));
}

TEST(Rewrite, PingPongIsReportedAsCycleNamingTheRule) {
  const auto& t = test_ops();
  RewriteSet rules("pingpong");
  rules.add({"ping_to_pong", m::op(t.ping, {m::any("x")}), [&t](Match& mt, Rewriter& rw) {
               Node* n = rw.add(t.pong, {mt["x"]}, {}, {mt["x"]->type});
               rw.replace(mt.root->output(0), n->output(0));
               return true;
             }});
  rules.add({"pong_to_ping", m::op(t.pong, {m::any("x")}), [&t](Match& mt, Rewriter& rw) {
               Node* n = rw.add(t.ping, {mt["x"]}, {}, {mt["x"]->type});
               rw.replace(mt.root->output(0), n->output(0));
               return true;
             }});
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {3}), "x");
  Node* p = g.add_node(t.ping, {x}, {}, {x->type});
  g.set_outputs({p->output(0)});
  try {
    apply_greedy(g, rules, 200);
    FAIL() << "expected a cycle report";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[rewrite pingpong]"), std::string::npos) << m;
    EXPECT_TRUE(m.find("'ping_to_pong'") != std::string::npos || m.find("'pong_to_ping'") != std::string::npos) << m;
    EXPECT_NE(m.find("cycle"), std::string::npos) << m;
  }
}

TEST(Rewrite, RepeatedCaptureMustBindTheSameValue) {
  const auto& t = test_ops();
  RewriteSet rules("double");
  // x + x -> 2 * x
  rules.add({"add_self", m::op(t.add, {m::any("x"), m::any("x")}), [&t](Match& mt, Rewriter& rw) {
               Node* n = rw.add(t.scale, {mt["x"]}, Attrs{{"alpha", 2.0}}, {mt["x"]->type});
               rw.replace(mt.root->output(0), n->output(0));
               return true;
             }});
  Graph g;
  Value* a = g.add_input(TensorType(DType::f32, {3}), "a");
  Value* b = g.add_input(TensorType(DType::f32, {3}), "b");
  Node* same = g.add_node(t.add, {a, a}, {}, {a->type}, "same");
  Node* diff = g.add_node(t.add, {a, b}, {}, {a->type}, "diff");
  g.set_outputs({same->output(0), diff->output(0)});
  const RewriteStats st = apply_greedy(g, rules);
  EXPECT_EQ(st.applied, 1);
  EXPECT_EQ(g.outputs()[0]->producer->op, t.scale);
  EXPECT_EQ(g.outputs()[1], diff->output(0));
  EXPECT_TRUE(use_lists_valid(g));
}

TEST(Rewrite, ConstantPatternAndDecliningRules) {
  const auto& t = test_ops();
  RewriteSet rules("fold_scale_one");
  int declined = 0;
  // scale(x) with alpha == 1 -> x; the predicate lives in the callback, which may decline.
  rules.add({"scale_one", m::op(t.scale, {m::any("x")}), [&declined](Match& mt, Rewriter& rw) {
               if (mt.root->attrs.f("alpha") != 1.0) {
                 ++declined;
                 return false;
               }
               rw.replace(mt.root->output(0), mt["x"]);
               return true;
             }});
  rules.add({"neg_const", m::op(t.neg, {m::constant("c")}), [](Match& mt, Rewriter& rw) {
               const Node* c = mt.node("c");
               std::vector<float> v(c->payload.data<float>(), c->payload.data<float>() + c->payload.numel());
               for (float& f : v) f = -f;
               rw.replace(mt.root->output(0), rw.graph().add_constant(test::f32_tensor(v, c->payload.shape())));
               return true;
             }});
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {2}), "x");
  Value* c = g.add_constant(test::f32_tensor({1, -2}, {2}), "c");
  Node* n1 = g.add_node(t.scale, {x}, Attrs{{"alpha", 1.0}}, {x->type});
  Node* n2 = g.add_node(t.scale, {n1->output(0)}, Attrs{{"alpha", 3.0}}, {x->type});
  Node* n3 = g.add_node(t.neg, {c}, {}, {c->type});
  Node* n4 = g.add_node(t.neg, {x}, {}, {x->type});
  g.set_outputs({n2->output(0), n3->output(0), n4->output(0)});
  const RewriteStats st = apply_greedy(g, rules);
  EXPECT_EQ(st.per_rule.at("scale_one"), 1);
  EXPECT_EQ(st.per_rule.at("neg_const"), 1);
  EXPECT_GE(declined, 1);
  EXPECT_EQ(n2->input(0), x);
  const Node* folded = g.outputs()[1]->producer;
  ASSERT_EQ(folded->op, "constant"_op);
  EXPECT_EQ(folded->payload.to_doubles(), (std::vector<double>{-1, 2}));
  EXPECT_EQ(g.outputs()[2], n4->output(0));  // t_neg of a non-constant is left alone
  verify_structure(g);  // the new constant was appended after its users: topo_sort fixed it
  EXPECT_TRUE(use_lists_valid(g));
}

TEST(Rewrite, RulesAreIndexedByRootOp) {
  const auto& t = test_ops();
  RewriteSet rules("idx");
  rules.add({"a", m::op(t.neg, {m::any()}), [](Match&, Rewriter&) { return false; }});
  rules.add({"b", m::op(t.neg, {m::any()}), [](Match&, Rewriter&) { return false; }});
  rules.add({"c", m::op(t.add, {m::any(), m::any()}), [](Match&, Rewriter&) { return false; }});
  EXPECT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules.rules_for(t.neg).size(), 2u);
  EXPECT_EQ(rules.rules_for(t.add).size(), 1u);
  EXPECT_TRUE(rules.rules_for(t.scale).empty());
  EXPECT_THROW(rules.add({"bad", m::any(), [](Match&, Rewriter&) { return false; }}), Error);
}


// ---- the pattern language

OpFacts test_facts() {
  return {[](OpId op) { return op == test_ops().add; }};
}

// Counts the matches a text pattern finds at the outputs' producers (the callback declines every match but the
// last one it is asked to accept, so the count is the number of ways to match).
struct Probe {
  int calls = 0;
  std::vector<std::unordered_map<std::string, Value*>> seen;
};

RewriteSet probe_rules(const std::string& pattern, Probe& p, Interior interior = Interior::shared) {
  RewriteSet rs("probe", test_facts());
  rs.add("probe", pattern, [&p](Match& mt, Rewriter&) {
    ++p.calls;
    p.seen.push_back(mt.values);
    return false;
  }, interior);
  return rs;
}

// Every way `pattern` matches in g (the rules decline them all, so g does not change).
Probe probe(Graph& g, const std::string& pattern, Interior interior = Interior::shared) {
  Probe p;
  apply_greedy(g, probe_rules(pattern, p, interior));
  return p;
}

TEST(RewritePattern, CommutativeOpMatchesEitherOperandOrder) {
  const auto& t = test_ops();
  Graph g;
  Value* a = g.add_input(TensorType(DType::f32, {3}), "a");
  Value* n = g.add_node(t.neg, {a}, {}, {a->type})->output(0);
  Value* s = g.add_node(t.add, {n, a}, {}, {a->type})->output(0);  // neg(a) + a
  g.set_outputs({s});
  const Probe p = probe(g, "t_add(x, t_neg(x))");
  ASSERT_EQ(p.calls, 1);
  EXPECT_EQ(p.seen[0].at("x"), a);
  // t_neg is not commutative and t_scale has one input: no swapped orders there.
  const Probe q = probe(g, "t_add(t_neg(x), y)");
  EXPECT_EQ(q.calls, 1);
  EXPECT_EQ(q.seen[0].at("y"), a);
}

TEST(RewritePattern, DecliningCallbackBacktracksThroughAlternativesAndOrders) {
  const auto& t = test_ops();
  Graph g;
  Value* a = g.add_input(TensorType(DType::f32, {3}), "a");
  Value* b = g.add_input(TensorType(DType::f32, {3}), "b");
  Value* n = g.add_node(t.neg, {a}, {}, {a->type})->output(0);
  Value* s = g.add_node(t.add, {n, b}, {}, {a->type})->output(0);
  g.set_outputs({s});
  // {t_neg(x) | x} on either side of the add: (neg side: 2 alternatives) + (b side: 1) ... each way once.
  const Probe p = probe(g, "t_add({t_neg(x) | x}, y)");
  ASSERT_EQ(p.calls, 3);
  EXPECT_EQ(p.seen[0].at("x"), a);  // first: the neg alternative, operands as written
  EXPECT_EQ(p.seen[1].at("x"), n);  // then x = the neg's output itself
  EXPECT_EQ(p.seen[2].at("x"), b);  // then the swapped order
  // A callback that accepts the second way: the rewrite happens with that match.
  RewriteSet rs("pick", test_facts());
  int calls = 0;
  rs.add("second", "t_add({t_neg(x) | x}, y)", [&](Match& mt, Rewriter& rw) {
    if (++calls < 2) return false;
    rw.replace(mt.root->output(0), mt["x"]);
    return true;
  });
  apply_greedy(g, rs);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(g.outputs()[0], n);
  EXPECT_TRUE(use_lists_valid(g));
}

TEST(RewritePattern, TreeMatchesEveryAssociationAndOrder) {
  const auto& t = test_ops();
  for (int shape = 0; shape < 2; ++shape) {
    Graph g;
    Value* a = g.add_input(TensorType(DType::f32, {3}), "a");
    Value* b = g.add_input(TensorType(DType::f32, {3}), "b");
    Value* c = g.add_input(TensorType(DType::f32, {3}), "c");
    Value* na = g.add_node(t.neg, {a}, {}, {a->type})->output(0);
    // (neg(a) + b) + c  or  c + (b + neg(a))
    Value* inner = shape == 0 ? g.add_node(t.add, {na, b}, {}, {a->type})->output(0)
                              : g.add_node(t.add, {b, na}, {}, {a->type})->output(0);
    Value* root = shape == 0 ? g.add_node(t.add, {inner, c}, {}, {a->type})->output(0)
                             : g.add_node(t.add, {c, inner}, {}, {a->type})->output(0);
    g.set_outputs({root});
    const Probe p = probe(g, "t_add+(t_neg(x), y, z)");
    // At the root: neg(a) is x, and {b, c} fill y, z in both ways. The inner add (2 leaves) does not match.
    ASSERT_EQ(p.calls, 2) << shape;
    for (const auto& m : p.seen) {
      EXPECT_EQ(m.at("x"), a);
      EXPECT_TRUE((m.at("y") == b && m.at("z") == c) || (m.at("y") == c && m.at("z") == b));
    }
  }
  // An inner add with another use is a leaf, not opened.
  Graph g;
  Value* a = g.add_input(TensorType(DType::f32, {3}), "a");
  Value* inner = g.add_node(t.add, {a, a}, {}, {a->type})->output(0);
  Value* root = g.add_node(t.add, {inner, a}, {}, {a->type})->output(0);
  g.set_outputs({root, inner});
  const Probe p = probe(g, "t_add+(x, x, x)");
  EXPECT_EQ(p.calls, 0);
}

TEST(RewritePattern, ExclusiveInteriorAndSharedMarker) {
  const auto& t = test_ops();
  Graph g;
  Value* a = g.add_input(TensorType(DType::f32, {3}), "a");
  Value* n = g.add_node(t.neg, {a}, {}, {a->type})->output(0);
  Value* s = g.add_node(t.scale, {n}, Attrs{{"alpha", 2.0}}, {a->type})->output(0);
  Value* other = g.add_node(t.neg, {n}, {}, {a->type})->output(0);  // a second use of n
  g.set_outputs({s, other});
  const Probe shared = probe(g, "t_scale(t_neg(x))", Interior::shared);
  const Probe exclusive = probe(g, "t_scale(t_neg(x))", Interior::exclusive);
  const Probe marked = probe(g, "t_scale(~t_neg(x))", Interior::exclusive);
  EXPECT_EQ(shared.calls, 1);
  EXPECT_EQ(exclusive.calls, 0);  // n is used outside the match
  EXPECT_EQ(marked.calls, 1);
}

TEST(RewritePattern, NumbersMatchOneElementConstantsUpToTheirDtype) {
  const auto& t = test_ops();
  Graph g;
  Value* a = g.add_input(TensorType(DType::f32, {1}), "a");
  Value* half = g.add_constant(test::f32_tensor({0.5f + 1e-7f}, {1}), "half");  // within f32 rounding
  Value* more = g.add_constant(test::f32_tensor({0.5001f}, {1}), "more");
  Value* s1 = g.add_node(t.add, {a, half}, {}, {a->type})->output(0);
  Value* s2 = g.add_node(t.add, {a, more}, {}, {a->type})->output(0);
  g.set_outputs({s1, s2});
  const Probe p = probe(g, "t_add(x, 0.5)");
  ASSERT_EQ(p.calls, 1);
  EXPECT_EQ(p.seen[0].at("x"), a);
  const Probe c = probe(g, "t_add(x, $k)");
  EXPECT_EQ(c.calls, 2);
  EXPECT_EQ(c.seen[0].at("k"), half);
}

TEST(RewritePattern, MalformedPatternsAreParseErrorsNamingTheOffset) {
  test_ops();  // registers the t_ ops the patterns name
  auto error_of = [](const std::string& text) -> std::string {
    try {
      Pattern::parse(text, test_facts());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::parse_error) << text;
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("t_neg(x").find("at offset 7: expected ')'"), std::string::npos) << error_of("t_neg(x");
  EXPECT_NE(error_of("no_such_op(x)").find("unknown op 'no_such_op'"), std::string::npos);
  EXPECT_NE(error_of("t_neg(x) y").find("expected the end"), std::string::npos);
  EXPECT_NE(error_of("{t_neg(x)}").find("at least two alternatives"), std::string::npos);
  EXPECT_NE(error_of("~x").find("'~' applies to an op"), std::string::npos);
  EXPECT_NE(error_of("t_add+(x)").find("at least two operands"), std::string::npos);
  EXPECT_NE(error_of("t_neg(,)").find("expected a"), std::string::npos);
  EXPECT_EQ(error_of("n=t_add({t_neg(x) | $c}, ~m=t_scale(_))"), "");
  // A rule must be rooted at ops: a bare capture or constant cannot index it.
  RewriteSet rs("bad", test_facts());
  EXPECT_THROW(rs.add("bad", "{t_neg(x) | x}", [](Match&, Rewriter&) { return false; }), Error);
}

}  // namespace
}  // namespace spore
