// DCE, CSE, constant folding, memory planning and the PassManager. Pass inputs are written as text
// IR where that reads best; the test-only ops (tests/ir/test_ops.h) stand in for the op families.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "ir/test_ops.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "passes/pass.h"

namespace spore {
namespace {

using test::test_ops;
using test::use_lists_valid;

std::unique_ptr<Graph> parse(const std::string& text) {
  test_ops();
  auto g = parse_graph(text);
  verify_graph(*g);
  return g;
}

bool run_pass(Pass& p, Graph& g, PassOptions o = {}) {
  const bool changed = p.run(g, o);
  verify_graph(g);
  EXPECT_TRUE(use_lists_valid(g));
  return changed;
}

TEST(Dce, RemovesUnusedNodesButKeepsInputs) {
  auto g = parse(
      "graph @g(%x: f32[4], %unused: f32[4]) {\n"
      "  %a = t_neg(%x) : f32[4]\n"
      "  %dead1 = t_neg(%a) : f32[4]\n"
      "  %dead2 = t_add(%dead1, %unused) : f32[4]\n"
      "  %s0, %s1 = t_split2(%a) : f32[4], f32[4]\n"
      "  return %s0\n"
      "}\n");
  auto dce = make_dce_pass();
  EXPECT_EQ(dce->name(), "dce");
  EXPECT_TRUE(run_pass(*dce, *g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%x: f32[4], %unused: f32[4]) {\n"
            "  %a = t_neg(%x) : f32[4]\n"
            "  %s0, %s1 = t_split2(%a) : f32[4], f32[4]\n"  // one used output keeps the node
            "  return %s0\n"
            "}\n");
  EXPECT_FALSE(run_pass(*dce, *g));
}

TEST(Dce, OutputThatIsAnInputOrConstant) {
  auto g = parse(
      "graph @g(%x: f32[1]) {\n"
      "  %c = constant() : f32[1] = hex\"0000803f\"\n"
      "  %d = constant() : f32[1] = hex\"00000040\"\n"
      "  %n = t_neg(%x) : f32[1]\n"
      "  return %x, %c, %x\n"
      "}\n");
  EXPECT_TRUE(run_pass(*make_dce_pass(), *g));
  EXPECT_EQ(print_graph(*g),
            "graph @g(%x: f32[1]) {\n  %c = constant() : f32[1] = hex\"0000803f\"\n  return %x, %c, %x\n}\n");
}

TEST(Cse, MergesDuplicatesAndEqualConstantsButNotDifferentAttrs) {
  auto g = parse(
      "graph @g(%x: f32[2]) {\n"
      "  %c1 = constant() : f32[2] = hex\"0000803f00000040\"\n"
      "  %c2 = constant() : f32[2] = hex\"0000803f00000040\"\n"
      "  %c3 = constant() : f32[2] = hex\"0000803f00004040\"\n"
      "  %a = t_neg(%x) : f32[2]\n"
      "  %b = t_neg(%x) : f32[2]\n"
      "  %s2 = t_scale(%a) {alpha=2.0} : f32[2]\n"
      "  %s2b = t_scale(%b) {alpha=2.0} : f32[2]\n"
      "  %s3 = t_scale(%a) {alpha=3.0} : f32[2]\n"
      "  %p = t_add(%c1, %s2) : f32[2]\n"
      "  %q = t_add(%c2, %s2b) : f32[2]\n"
      "  %r = t_add(%c3, %s3) : f32[2]\n"
      "  return %p, %q, %r\n"
      "}\n");
  auto cse = make_cse_pass();
  EXPECT_TRUE(run_pass(*cse, *g));
  run_pass(*make_dce_pass(), *g);
  EXPECT_EQ(print_graph(*g),
            "graph @g(%x: f32[2]) {\n"
            "  %c1 = constant() : f32[2] = hex\"0000803f00000040\"\n"
            "  %c3 = constant() : f32[2] = hex\"0000803f00004040\"\n"
            "  %a = t_neg(%x) : f32[2]\n"
            "  %s2 = t_scale(%a) {alpha=2.0} : f32[2]\n"
            "  %s3 = t_scale(%a) {alpha=3.0} : f32[2]\n"
            "  %p = t_add(%c1, %s2) : f32[2]\n"
            "  %r = t_add(%c3, %s3) : f32[2]\n"
            "  return %p, %p, %r\n"
            "}\n");
  EXPECT_FALSE(run_pass(*cse, *g));
}

TEST(Cse, ConstantsOfDifferentTypeWithSameBytesStayApart) {
  auto g = parse(
      "graph @g() {\n"
      "  %a = constant() : f32[2] = hex\"0000000000000000\"\n"
      "  %b = constant() : i32[2] = hex\"0000000000000000\"\n"
      "  %c = constant() : f32[1,2] = hex\"0000000000000000\"\n"
      "  return %a, %b, %c\n"
      "}\n");
  EXPECT_FALSE(run_pass(*make_cse_pass(), *g));
  EXPECT_EQ(g->num_live_nodes(), 3u);
}

TEST(Fold, EvaluatesConstantSubgraphs) {
  auto g = parse(
      "graph @g(%x: f32[2]) {\n"
      "  %c1 = constant() : f32[2] = hex\"0000803f00000040\"\n"  // [1, 2]
      "  %n = t_neg(%c1) : f32[2]\n"
      "  %s = t_scale(%n) {alpha=3.0} : f32[2]\n"
      "  %y = t_add(%s, %x) : f32[2]\n"
      "  return %y, %s\n"
      "}\n");
  EXPECT_TRUE(run_pass(*make_fold_constants_pass(), *g));
  run_pass(*make_dce_pass(), *g);
  // Only t_add (which reads the input) is left; the folded value is a constant.
  int consts = 0, adds = 0;
  for (const Node* n : g->nodes()) {
    consts += n->op == "constant"_op;
    adds += n->op == test_ops().add;
    EXPECT_NE(n->op, test_ops().neg);
    EXPECT_NE(n->op, test_ops().scale);
  }
  EXPECT_EQ(consts, 1);
  EXPECT_EQ(adds, 1);
  const Node* c = g->outputs()[1]->producer;
  ASSERT_EQ(c->op, "constant"_op);
  EXPECT_EQ(c->payload.to_doubles(), (std::vector<double>{-3, -6}));
  EXPECT_EQ(g->outputs()[0]->producer->input(0), g->outputs()[1]);
  EXPECT_FALSE(run_pass(*make_fold_constants_pass(), *g));
}

TEST(Fold, RealOpsWhenTheFamiliesAreRegistered) {
  if (!op_registry().find("add"_op) || !op_registry().find("relu"_op) || !op_registry().find("mul"_op))
    GTEST_SKIP() << "add/relu/mul not registered yet";
  auto g = parse_graph(
      "graph @g(%x: f32[3]) {\n"
      "  %c = constant() : f32[3] = hex\"000080bf0000004000004040\"\n"  // [-1, 2, 3]
      "  %r = relu(%c) : f32[3]\n"
      "  %m = mul(%r, %r) : f32[3]\n"
      "  %y = add(%m, %x) : f32[3]\n"
      "  return %y\n"
      "}\n");
  verify_graph(*g);
  EXPECT_TRUE(run_pass(*make_fold_constants_pass(), *g));
  run_pass(*make_dce_pass(), *g);
  EXPECT_EQ(g->num_live_nodes(), 3u);  // x, the folded constant, add
  EXPECT_EQ(g->outputs()[0]->producer->input(0)->producer->payload.to_doubles(), (std::vector<double>{0, 4, 9}));
}

// A chain x -> n0 -> n1 -> ... of t_neg on f32[100] (400 bytes, 448 aligned), each node named.
std::unique_ptr<Graph> chain(int length, int64_t size = 100) {
  const auto& t = test_ops();
  auto g = std::make_unique<Graph>("chain");
  Value* v = g->add_input(TensorType(DType::f32, {size}), "x");
  for (int i = 0; i < length; ++i) v = g->add_node(t.neg, {v}, {}, {v->type}, "layer" + std::to_string(i))->output(0);
  g->set_outputs({v});
  return g;
}

// A graph with branches, multi-output nodes and long-lived values.
std::unique_ptr<Graph> branchy() {
  return parse(
      "graph @b(%x: f32[64]) {\n"
      "  %a = t_neg(%x) : f32[64]\n"
      "  %b0, %b1 = t_split2(%a) : f32[64], f32[64]\n"
      "  %c = t_scale(%b0) {alpha=2.0} : f32[64]\n"
      "  %d = t_neg(%c) : f32[64]\n"
      "  %e = t_add(%d, %b1) : f32[64]\n"
      "  %f = t_neg(%a) : f32[64]\n"
      "  %g = t_add(%e, %f) : f32[64]\n"
      "  %h = t_neg(%g) : f32[64]\n"
      "  %k = t_add(%h, %a) : f32[64]\n"
      "  %l = t_neg(%k) : f32[64]\n"
      "  return %l, %e\n"
      "}\n");
}

// Every pair of planned buffers whose live ranges intersect must occupy disjoint byte ranges.
void expect_no_live_overlap(const Graph& g) {
  struct B { const Value* v; int64_t def, last, lo, hi; };
  std::vector<B> bs;
  const auto& order = g.nodes();
  for (size_t i = 0; i < order.size(); ++i) {
    for (const Value* v : order[i]->outputs) {
      if (v->arena_offset < 0) continue;
      int64_t last = static_cast<int64_t>(i);
      for (const Use& u : v->uses)
        last = std::max<int64_t>(last, std::find(order.begin(), order.end(), u.user) - order.begin());
      const int64_t bytes = v->type.numel() * static_cast<int64_t>(dtype_size(v->type.dtype));
      bs.push_back({v, static_cast<int64_t>(i), last, v->arena_offset, v->arena_offset + bytes});
    }
  }
  for (size_t i = 0; i < bs.size(); ++i) {
    for (size_t j = i + 1; j < bs.size(); ++j) {
      const bool live_together = bs[i].def <= bs[j].last && bs[j].def <= bs[i].last;
      const bool overlap = bs[i].lo < bs[j].hi && bs[j].lo < bs[i].hi;
      EXPECT_FALSE(live_together && overlap) << "%" << bs[i].v->name << " and %" << bs[j].v->name << " overlap";
    }
  }
}

TEST(MemoryPlan, Level0IsTheSumOfSizes) {
  auto g = chain(6);
  const MemoryPlanInfo info = plan_memory(*g, 0, 0);
  EXPECT_EQ(info.num_buffers, 5);  // the last node's value is a graph output, not in the arena
  EXPECT_EQ(info.total_bytes, 5 * 448);
  EXPECT_EQ(info.arena_bytes, info.total_bytes);
  expect_no_live_overlap(*g);
  std::set<int64_t> offsets;
  for (const Node* n : g->nodes()) if (n->output(0)->arena_offset >= 0) offsets.insert(n->output(0)->arena_offset);
  EXPECT_EQ(offsets.size(), 5u);  // all distinct
}

TEST(MemoryPlan, Level1ReusesBuffersWithoutOverlap) {
  auto g = chain(6);
  const MemoryPlanInfo info = plan_memory(*g, 1, 0);
  EXPECT_EQ(info.total_bytes, 5 * 448);
  EXPECT_EQ(info.arena_bytes, 2 * 448);  // a chain needs only ping-pong buffers
  expect_no_live_overlap(*g);
  for (int level : {0, 1}) {
    auto b = branchy();
    const MemoryPlanInfo bi = plan_memory(*b, level, 0);
    expect_no_live_overlap(*b);
    EXPECT_EQ(bi.num_buffers, 9);  // a, b0, b1, c, d, f, g, h, k (e and l are outputs)
    if (level == 1) {
      EXPECT_LT(bi.arena_bytes, bi.total_bytes);
    }
    // Offsets are written into the graph, so the plan prints and re-parses.
    const std::string text = print_graph(*b);
    EXPECT_NE(text.find("!offset0="), std::string::npos);
    EXPECT_EQ(print_graph(*parse_graph(text)), text);
  }
}

TEST(MemoryPlan, CapBelowTheNeedThrowsOutOfMemoryNamingNodes) {
  auto g = chain(6, 1000);
  try {
    plan_memory(*g, 1, 1000);
    FAIL() << "expected out_of_memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    const std::string m = e.what();
    EXPECT_NE(m.find("needs 8064 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("max_device_memory is 1000 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("t_neg 'layer"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(plan_memory(*g, 1, 8064));
}

TEST(MemoryPlan, SymbolicShapesAreRejected) {
  test_ops();
  auto g = parse_graph(
      "graph @g(%x: f32[n]) {\n  %a = t_neg(%x) : f32[n]\n  %b = t_neg(%a) : f32[n]\n  return %b\n}\n");
  try {
    plan_memory(*g, 1, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("%a"), std::string::npos) << e.what();
  }
}

// A pass that breaks the graph: retypes a value so inference disagrees.
class CorruptPass final : public Pass {
 public:
  std::string name() const override { return "corrupt"; }
  bool run(Graph& g, const PassOptions&) override {
    for (Node* n : g.nodes())
      if (n->op == test_ops().neg) n->output(0)->type = TensorType(DType::f32, {12345});
    return true;
  }
};

class CountingPass final : public Pass {
 public:
  explicit CountingPass(int* runs, int min_level = 0) : runs_(runs), min_level_(min_level) {}
  std::string name() const override { return "counting"; }
  int min_opt_level() const override { return min_level_; }
  bool run(Graph&, const PassOptions&) override {
    ++*runs_;
    return false;
  }

 private:
  int* runs_;
  int min_level_;
};

TEST(PassManager, RecordsNamesAndTimingAndSkipsDisabled) {
  auto g = chain(3);
  int runs = 0;
  PassManager pm(PassOptions{.opt_level = 1, .disabled = {"cse"}});
  add_default_pipeline(pm);
  pm.add(std::make_unique<CountingPass>(&runs, 2));
  pm.run(*g);
  std::vector<std::string> names;
  for (const auto& r : pm.records()) {
    names.push_back(r.name);
    EXPECT_GE(r.ms, 0.0);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"dce", "remove_dropout", "fold_batch_norm", "simplify", "cse", "fold_constants",
                                              "dce", "recognize_patterns", "fuse_attention", "dce", "group_linear_blockq", "fuse_epilogue", "fuse_elementwise",
                                              "layout", "dce", "rematerialize", "memory_plan", "counting"}));
  EXPECT_TRUE(pm.records()[4].skipped);
  EXPECT_FALSE(pm.records()[0].skipped);
  EXPECT_TRUE(pm.records()[17].skipped);  // needs opt_level 2
  EXPECT_EQ(runs, 0);
  EXPECT_TRUE(pm.records()[16].changed);
  verify_graph(*g);
}

TEST(PassManager, VerifyEachCatchesACorruptingPass) {
  auto g = chain(3);
  PassManager pm(PassOptions{.verify_each = true});
  pm.add(make_dce_pass()).add(std::make_unique<CorruptPass>());
  try {
    pm.run(*g);
    FAIL() << "expected verification to fail";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("after pass 'corrupt'"), std::string::npos) << m;
    EXPECT_NE(m.find("layer0"), std::string::npos) << m;
  }
  // Without verify_each the corruption goes unnoticed by the manager.
  auto g2 = chain(3);
  PassManager quiet;
  quiet.add(std::make_unique<CorruptPass>());
  EXPECT_NO_THROW(quiet.run(*g2));
}

TEST(PassManager, SaveGraphsWritesNumberedFiles) {
  const auto dir = std::filesystem::temp_directory_path() / ("spore_passes_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto g = chain(3);
  PassManager pm(PassOptions{.save_graphs_dir = dir.string()});
  add_default_pipeline(pm);
  pm.run(*g);
  for (const char* f : {"00_input.ir", "01_dce.ir", "04_simplify.ir", "05_cse.ir", "06_fold_constants.ir", "13_fuse_elementwise.ir",
                        "14_layout.ir", "17_memory_plan.ir", "17_memory_plan.dot"}) {
    ASSERT_TRUE(std::filesystem::exists(dir / f)) << f;
    std::ifstream in(dir / f);
    std::stringstream ss;
    ss << in.rdbuf();
    if (std::string(f).ends_with(".dot")) continue;
    auto back = parse_graph(ss.str(), f);  // every dump is valid text IR
    verify_graph(*back);
  }
  std::ifstream last(dir / "17_memory_plan.ir");
  std::stringstream ss;
  ss << last.rdbuf();
  EXPECT_EQ(ss.str(), print_graph(*g));
  EXPECT_NE(ss.str().find("!offset0="), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace spore
