// Text IR (print/parse round trips, parse errors), structural and op-level verification, DOT output
// and graph edits that must keep use-lists valid.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "ir/graph.h"
#include "ir/test_ops.h"
#include "ops/graph_ops.h"

namespace spore {
namespace {

using test::test_ops;
using test::use_lists_valid;

std::string round_trip(const std::string& text) { return print_graph(*parse_graph(text)); }

// Every attribute kind, including the awkward values a printer gets wrong.
Attrs every_kind_attrs() {
  Attrs a;
  a.set("i", int64_t{-3});
  a.set("big", int64_t{std::numeric_limits<int64_t>::max()});
  a.set("f", 1.5);
  a.set("eps", 1e-5);
  a.set("tiny", 5e-324);
  a.set("neg", -0.25);
  a.set("negzero", -0.0);
  a.set("whole", 2.0);
  a.set("pinf", std::numeric_limits<double>::infinity());
  a.set("ninf", -std::numeric_limits<double>::infinity());
  a.set("nan", std::numeric_limits<double>::quiet_NaN());
  a.set("yes", true);
  a.set("no", false);
  a.set("s", std::string("say \"hi\"\nand \\ bye\t{x=1}, %y #not a comment"));
  a.set("empty_s", std::string());
  a.set("dt", DType::bf16);
  a.set("ints", std::vector<int64_t>{1, -2, 3});
  a.set("floats", std::vector<double>{0.5, -1e-7, 3.0, std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::quiet_NaN()});
  a.set("no_ints", std::vector<int64_t>{});
  a.set("no_floats", std::vector<double>{});
  return a;
}

std::unique_ptr<Graph> rich_graph() {
  const auto& t = test_ops();
  auto g = std::make_unique<Graph>("rich");
  Value* x = g->add_input(TensorType(DType::f32, {Dim::symbol("batch"), 3}), "x");
  Value* w = g->add_input(TensorType(DType::f16, {3, Dim::symbol("seq_len")}), "conv1/weight:0");
  Value* s = g->add_input(TensorType(DType::i64, {}), "step count");
  Node* a = g->add_node("identity"_op, {x}, every_kind_attrs(), {x->type}, "layer 1/act");
  Node* sp = g->add_node(t.split2, {a->output(0)}, {}, {x->type, x->type}, "split");
  Node* ad = g->add_node(t.add, {sp->output(0), sp->output(1)}, {}, {x->type}, "");
  ad->output(0)->arena_offset = 128;
  sp->output(1)->arena_offset = 0;
  Value* c32 = g->add_constant(test::f32_tensor({1.5f, -2.0f, 0.0f}, {3}), "c32");
  Value* c16 = g->add_constant(Tensor::from_doubles({1.0, -0.5, 65504.0, 1e-7}, {2, 2}, DType::f16), "w\"16\"");
  Value* cb = g->add_constant(Tensor::from_doubles({1.0, -3.0}, {2}, DType::bf16), "");
  Value* ci = g->add_constant(Tensor::from_doubles({-1, 7, 1LL << 40}, {3}, DType::i64), "idx");
  Value* c8 = g->add_constant(Tensor::from_doubles({-128, 127}, {2}, DType::i8), "");
  Value* cbool = g->add_constant(Tensor::from_doubles({1, 0, 1}, {3}, DType::boolean), "mask");
  Value* cs = g->add_constant(Tensor::scalar(3.25, DType::f64), "scalar");
  g->set_outputs({ad->output(0), w, s, c32, c16, cb, ci, c8, cbool, cs, sp->output(1)});
  return g;
}

TEST(IrText, RoundTripRichGraph) {
  auto g = rich_graph();
  verify_structure(*g);
  const std::string text = print_graph(*g);
  auto parsed = parse_graph(text);
  verify_structure(*parsed);
  EXPECT_EQ(print_graph(*parsed), text);
  // And once more from the re-parsed graph: printing is a fixed point.
  EXPECT_EQ(round_trip(print_graph(*parsed)), text);

  // Spot-check the parsed content, not just its printed form.
  const Value* w = parsed->find_value("conv1/weight:0");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->type.str(), "f16[3,seq_len]");
  const Node* act = parsed->find_value("layer 1/act")->producer;
  EXPECT_EQ(act->name, "layer 1/act");
  const Attrs& a = act->attrs;
  EXPECT_EQ(a.i("i"), -3);
  EXPECT_EQ(a.i("big"), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(a.f("eps"), 1e-5);
  EXPECT_EQ(a.f("tiny"), 5e-324);
  EXPECT_TRUE(std::signbit(a.f("negzero")));
  EXPECT_TRUE(std::holds_alternative<double>(*a.find("whole")));
  EXPECT_TRUE(std::isinf(a.f("pinf")) && a.f("pinf") > 0);
  EXPECT_TRUE(std::isinf(a.f("ninf")) && a.f("ninf") < 0);
  EXPECT_TRUE(std::isnan(a.f("nan")));
  EXPECT_TRUE(a.b("yes"));
  EXPECT_FALSE(a.b("no"));
  EXPECT_EQ(a.s("s"), every_kind_attrs().s("s"));
  EXPECT_EQ(a.s("empty_s"), "");
  EXPECT_EQ(a.dtype("dt"), DType::bf16);
  EXPECT_EQ(a.ints("ints"), (std::vector<int64_t>{1, -2, 3}));
  const auto fl = a.floats("floats");
  ASSERT_EQ(fl.size(), 5u);
  EXPECT_EQ(fl[1], -1e-7);
  EXPECT_TRUE(std::isinf(fl[3]));
  EXPECT_TRUE(std::isnan(fl[4]));
  EXPECT_TRUE(std::holds_alternative<std::vector<int64_t>>(*a.find("no_ints")));
  EXPECT_TRUE(std::holds_alternative<std::vector<double>>(*a.find("no_floats")));

  // Multi-output node, arena offsets and constants survive.
  const Node* sp = parsed->find_value("split.0")->producer;
  ASSERT_EQ(sp->outputs.size(), 2u);
  EXPECT_EQ(sp->output(1)->arena_offset, 0);
  EXPECT_EQ(sp->output(0)->arena_offset, -1);
  ASSERT_EQ(parsed->outputs().size(), g->outputs().size());
  for (size_t i = 0; i < g->outputs().size(); ++i) {
    const Node* orig = g->outputs()[i]->producer;
    const Node* back = parsed->outputs()[i]->producer;
    EXPECT_EQ(orig->op, back->op);
    if (orig->op == "constant"_op) {
      EXPECT_TRUE(orig->payload.bit_equal(back->payload)) << orig->label();
    }
    EXPECT_EQ(g->outputs()[i]->arena_offset, parsed->outputs()[i]->arena_offset);
  }
  EXPECT_TRUE(use_lists_valid(*parsed));
}

TEST(IrText, ParsesHandWrittenTextCanonically) {
  const std::string text =
      "graph @main(%x: f32[batch,3], %\"in/0:0\": f32[batch,3]) {\n"
      "  %a = identity(%x) {axes=[0,1], eps=1e-05, mode=\"edge\"} : f32[batch,3] !name=\"first\"\n"
      "  %b, %c = t_split2(%a) : f32[batch,3], f32[batch,3] !offset1=64\n"
      "  %d = t_add(%c, %\"in/0:0\") : f32[batch,3]\n"
      "  return %d, %b\n"
      "}\n";
  test_ops();
  EXPECT_EQ(round_trip(text), text);
}

TEST(IrText, CommentsAndWhitespaceAreIgnored) {
  const std::string text =
      "# a comment\n graph   @g ( %x :f32[ 2 , n ] ){\n   %y=identity( %x ):f32[2,n]# trailing\n return %y }";
  auto g = parse_graph(text);
  EXPECT_EQ(print_graph(*g), "graph @g(%x: f32[2,n]) {\n  %y = identity(%x) : f32[2,n]\n  return %y\n}\n");
}

TEST(IrText, MultiOutputNamesMayReuseGeneratedNames) {
  // The parser must not trip over the names it generates for results before renaming them.
  test_ops();
  const std::string text =
      "graph @g(%x: f32[2]) {\n"
      "  %2, %1 = t_split2(%x) : f32[2], f32[2]\n"
      "  %3 = t_add(%1, %2) : f32[2]\n"
      "  return %3\n"
      "}\n";
  EXPECT_EQ(round_trip(text), text);
}

TEST(IrText, EmptyGraphAndNoOutputs) {
  const std::string text = "graph @empty() {\n  return\n}\n";
  EXPECT_EQ(round_trip(text), text);
}

// Expects parse_graph(text) to fail with a parse_error whose message contains every `parts`.
void expect_parse_error(const std::string& text, std::vector<std::string> parts) {
  try {
    parse_graph(text, "model.ir");
    ADD_FAILURE() << "parsed without error:\n" << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::parse_error) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "missing '" << p << "' in: " << e.what();
  }
}

TEST(IrParseErrors, NameLineColumnAndProblem) {
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y = frobnicate(%x) : f32[2]\n  return %y\n}\n",
                     {"model.ir:2:8", "unknown op 'frobnicate'"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y = identity(%z) : f32[2]\n  return %y\n}\n",
                     {"model.ir:2:17", "undefined value %z"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y = identity(%x) : f32[2]\n  return %nope\n}\n",
                     {"model.ir:3:10", "undefined value %nope"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %x = identity(%x) : f32[2]\n  return %x\n}\n",
                     {"model.ir:2:", "%x", "defined twice"});
  expect_parse_error("graph @g(%x: f32[2], %x: f32[3]) {\n  return %x\n}\n", {"model.ir:1:", "duplicate value %x"});
  expect_parse_error("graph @g(%x: f33[2]) {\n  return %x\n}\n", {"model.ir:1:", "unknown dtype 'f33'"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y = identity(%x) : f32[2]\n", {"model.ir:3:1", "expected '%'"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y = identity(%x", {"model.ir:2:19", "expected ')'"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y = identity(%x) {s=\"abc", {"model.ir:2:", "unterminated string"});
  expect_parse_error("", {"model.ir:1:1", "expected 'graph'"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y = identity(%x) {a=1, a=2} : f32[2]\n  return %y\n}\n",
                     {"model.ir:2:", "'a' given twice"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y = identity(%x) {a=wat} : f32[2]\n  return %y\n}\n",
                     {"model.ir:2:", "bad attribute value 'wat'"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y = identity(%x) : f32[2] !bogus=1\n  return %y\n}\n",
                     {"model.ir:2:", "unknown annotation '!bogus'"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y = identity(%x) : f32[2] !offsetq=1\n  return %y\n}\n",
                     {"model.ir:2:", "offsetq"});
  expect_parse_error("graph @g() {\n  %c = constant() : f32[2] = hex\"0000\"\n  return %c\n}\n",
                     {"model.ir:2:", "constant data has 2 bytes", "needs 8"});
  expect_parse_error("graph @g() {\n  %c = constant() : f32[1] = hex\"zz000000\"\n  return %c\n}\n",
                     {"model.ir:2:", "bad hex digit"});
  expect_parse_error("graph @g() {\n  %c = constant() : f32[1]\n  return %c\n}\n", {"model.ir:2:", "has no data"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  %y, %z = identity(%x) : f32[2]\n  return %y\n}\n",
                     {"model.ir:2:", "2 results but 1 types"});
  expect_parse_error("graph @g(%x: f32[2]) {\n  return %x\n}\nextra", {"model.ir:4:1", "unexpected text after the graph"});
}

TEST(IrVerify, UseBeforeDefNamesTheNode) {
  const auto& t = test_ops();
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {4}), "x");
  Node* a = g.add_node(t.neg, {x}, {}, {x->type}, "early");
  Node* b = g.add_node(t.neg, {x}, {}, {x->type}, "late");
  g.set_outputs({a->output(0)});
  g.set_input(a, 0, b->output(0));  // `early` now reads a value defined after it
  EXPECT_TRUE(use_lists_valid(g));
  try {
    verify_structure(g);
    FAIL() << "expected a use-before-def error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t_neg 'early'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("used before it is defined"), std::string::npos) << e.what();
  }
  g.topo_sort();  // repairs the order
  verify_structure(g);
  EXPECT_EQ(g.nodes().back(), a);
}

TEST(IrVerify, OutputTypeMustMatchInference) {
  test_ops();
  auto g = parse_graph(
      "graph @g(%x: f32[batch,4]) {\n  %y = t_neg(%x) : f32[batch,5] !name=\"act1\"\n  return %y\n}\n");
  verify_structure(*g);  // structurally fine
  try {
    verify_graph(*g);
    FAIL() << "expected a type mismatch";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("t_neg 'act1' (%y)"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[batch,5]"), std::string::npos) << m;
    EXPECT_NE(m.find("f32[batch,4]"), std::string::npos) << m;
  }
  // Inference errors (bad input types) also name the node.
  auto bad = parse_graph(
      "graph @g(%x: f32[4], %z: f32[5]) {\n  %y = t_add(%x, %z) : f32[4] !name=\"sum\"\n  return %y\n}\n");
  try {
    verify_graph(*bad);
    FAIL() << "expected an inference error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sum"), std::string::npos) << e.what();
  }
}

TEST(IrVerify, ConstantPayloadMustMatchType) {
  Graph g;
  Value* c = g.add_constant(test::f32_tensor({1, 2}, {2}), "c");
  c->type = TensorType(DType::f32, {3});
  g.set_outputs({c});
  EXPECT_THROW(verify_structure(g), Error);
}

TEST(IrVerify, UnknownOpAndBadAttrsAreReported) {
  test_ops();
  auto g = parse_graph("graph @g(%x: f32[4]) {\n  %y = t_scale(%x) {beta=2.0} : f32[4]\n  return %y\n}\n");
  try {
    verify_graph(*g);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown attribute 'beta'"), std::string::npos) << e.what();
  }
}

TEST(IrDot, ContainsEveryNodeAndEdge) {
  auto g = rich_graph();
  const std::string dot = graph_to_dot(*g);
  EXPECT_EQ(dot.rfind("digraph \"rich\" {", 0), 0u);
  for (const Node* n : g->nodes()) {
    EXPECT_NE(dot.find(fmt::format("  n{} [label=\"{}", n->id, op_name(n->op))), std::string::npos) << n->label();
    for (const Value* v : n->inputs)
      EXPECT_NE(dot.find(fmt::format("n{} -> n{}", v->producer->id, n->id)), std::string::npos);
  }
  EXPECT_NE(dot.find("layer 1/act"), std::string::npos);
  EXPECT_NE(dot.find("w\\\"16\\\""), std::string::npos);  // quotes escaped
  EXPECT_EQ(dot.back(), '\n');
}

TEST(IrGraph, ReplaceAllUsesAndEraseKeepUseLists) {
  const auto& t = test_ops();
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {4}), "x");
  Node* a = g.add_node(t.neg, {x}, {}, {x->type}, "a");
  Node* b = g.add_node(t.add, {a->output(0), a->output(0)}, {}, {x->type}, "b");
  Node* c = g.add_node(t.neg, {a->output(0)}, {}, {x->type}, "c");
  g.set_outputs({a->output(0), b->output(0)});
  EXPECT_EQ(a->output(0)->uses.size(), 3u);

  g.replace_all_uses(a->output(0), x);
  EXPECT_TRUE(a->output(0)->uses.empty());
  EXPECT_EQ(x->uses.size(), 4u);
  EXPECT_EQ(g.outputs()[0], x);  // graph outputs are rewired too
  EXPECT_TRUE(use_lists_valid(g));

  g.erase_node(c);
  g.erase_node(a);
  EXPECT_EQ(x->uses.size(), 2u);
  EXPECT_EQ(g.num_live_nodes(), 2u);
  EXPECT_TRUE(use_lists_valid(g));
  verify_structure(g);

  // Erasing a node that is still used is an internal error, not a silent corruption.
  EXPECT_THROW(g.erase_node(b), Error);
  EXPECT_TRUE(use_lists_valid(g));
}

TEST(IrGraph, EraseUnusedInputRemovesItFromSignature) {
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {4}), "x");
  g.add_input(TensorType(DType::f32, {4}), "unused");
  g.set_outputs({x});
  g.erase_node(g.inputs()[1]->producer);
  EXPECT_EQ(g.inputs().size(), 1u);
  verify_structure(g);
}

TEST(IrGraph, TopoSortRepairsOrderAndDetectsCycles) {
  const auto& t = test_ops();
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {4}), "x");
  Node* a = g.add_node(t.neg, {x}, {}, {x->type}, "a");
  Node* b = g.add_node(t.neg, {a->output(0)}, {}, {x->type}, "b");
  Node* late = g.add_node(t.scale, {x}, Attrs{{"alpha", 2.0}}, {x->type}, "late");
  g.set_outputs({b->output(0)});
  g.set_input(a, 0, late->output(0));
  EXPECT_THROW(verify_structure(g), Error);
  g.topo_sort();
  verify_structure(g);
  std::vector<std::string> order;
  for (const Node* n : g.nodes()) order.push_back(n->name);
  EXPECT_EQ(order, (std::vector<std::string>{"x", "late", "a", "b"}));
  EXPECT_TRUE(use_lists_valid(g));

  g.set_input(late, 0, b->output(0));  // late -> a -> b -> late
  try {
    g.topo_sort();
    FAIL() << "expected a cycle error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos);
  }
}

TEST(IrGraph, CloneIsDeepAndEqual) {
  auto g = rich_graph();
  auto c = g->clone();
  EXPECT_EQ(print_graph(*c), print_graph(*g));
  verify_structure(*c);
  EXPECT_TRUE(use_lists_valid(*c));
  for (const Node* n : c->nodes())
    for (const Value* v : n->inputs) EXPECT_NE(g->find_value(v->name), v) << "clone shares a value with the original";

  // Editing the clone leaves the original untouched.
  const std::string before = print_graph(*g);
  Value* x = c->find_value("x");
  Node* n = c->add_node(test_ops().neg, {x}, {}, {x->type}, "extra");
  c->set_outputs({n->output(0)});
  EXPECT_EQ(print_graph(*g), before);
  EXPECT_TRUE(use_lists_valid(*c));

  // Cloning a graph after edits (dead nodes, renamed values) still round-trips.
  c->rename_value(n->output(0), "renamed");
  auto c2 = c->clone();
  EXPECT_EQ(print_graph(*c2), print_graph(*c));
  EXPECT_EQ(round_trip(print_graph(*c2)), print_graph(*c));
}

TEST(IrGraph, RenameValueRejectsTakenNames) {
  Graph g;
  Value* x = g.add_input(TensorType(DType::f32, {4}), "x");
  Value* y = g.add_input(TensorType(DType::f32, {4}), "y");
  EXPECT_THROW(g.rename_value(y, "x"), Error);
  g.rename_value(x, "z");
  g.rename_value(y, "x");  // freed by the first rename
  EXPECT_EQ(g.find_value("x"), y);
  EXPECT_THROW(g.add_input(TensorType(DType::f32, {4}), "z"), Error);
}

}  // namespace
}  // namespace spore
