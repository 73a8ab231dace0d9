// Memory planning levels O0/O1/O2: in-place outputs, packing, the compile-time cap, and that every level
// computes the same bits (a plan whose buffers overlap wrongly would not).
#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "autodiff/autodiff.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "runtime/trace.h"
#include "train_step_graph.h"

namespace spore {
namespace {

std::unique_ptr<Graph> parse(const std::string& text) {
  auto g = parse_graph(text);
  verify_graph(*g);
  return g;
}

// The value whose arena bytes `v` reuses by aliasing (reshape-like nodes that run no kernel).
const Value* alias_root(const Value* v) {
  while (is_arena_alias(*v->producer)) v = v->producer->inputs[0];
  return v;
}

// Checks a planned graph: two values whose bytes overlap are never live at the same time, unless one is
// an alias of the other, or the later one is an in-place output written over the earlier one at its last use.
void expect_valid_plan(const Graph& g) {
  std::map<const Node*, int64_t> pos;
  for (size_t i = 0; i < g.nodes().size(); ++i) pos[g.nodes()[i]] = static_cast<int64_t>(i);
  struct B {
    const Value* v;
    int64_t def, last, lo, hi;
  };
  std::vector<B> bs;
  for (const Node* n : g.nodes())
    for (const Value* v : n->outputs) {
      if (v->arena_offset < 0) continue;
      EXPECT_EQ(v->arena_offset % 64, 0) << "%" << v->name;
      int64_t last = pos[n];
      for (const Use& u : v->uses) last = std::max(last, pos[u.user]);
      const int64_t bytes = v->type.numel() * static_cast<int64_t>(dtype_size(v->type.dtype));
      bs.push_back({v, pos[n], last, v->arena_offset, v->arena_offset + bytes});
    }
  for (size_t i = 0; i < bs.size(); ++i)
    for (size_t j = i + 1; j < bs.size(); ++j) {
      const B &a = bs[i], &b = bs[j];  // a defined first
      if (!(a.def <= b.last && b.def <= a.last) || !(a.lo < b.hi && b.lo < a.hi)) continue;
      if (alias_root(a.v) == alias_root(b.v)) continue;
      const Node* w = b.v->producer;
      const bool handoff = a.last == b.def && !w->inputs.empty() && alias_root(w->inputs[0]) == alias_root(a.v) &&
                           op_registry().get(w->op).traits.has(Trait::inplace_ok) && a.lo == b.lo;
      EXPECT_TRUE(handoff) << "%" << a.v->name << " and %" << b.v->name << " overlap while both are live";
    }
}

constexpr const char* kChain =
    "graph @g(%x: f32[32,32], %w: f32[32,32]) {\n"
    "  %m = matmul(%x, %w) : f32[32,32]\n"
    "  %a = exp(%m) : f32[32,32]\n"
    "  %b = relu(%a) : f32[32,32]\n"
    "  %c = add(%b, %x) : f32[32,32]\n"
    "  %d = tanh(%c) : f32[32,32]\n"
    "  %e = matmul(%d, %w) : f32[32,32]\n"
    "  return %e\n"
    "}\n";

TEST(MemoryPlanLevels, Level2WritesDyingInputsInPlace) {
  auto g = parse(kChain);
  const MemoryPlanInfo o2 = plan_memory(*g, 2, 0);
  expect_valid_plan(*g);
  EXPECT_EQ(o2.num_inplace, 4);  // a, b, c, d over m
  EXPECT_EQ(o2.num_buffers, 1);
  EXPECT_EQ(o2.arena_bytes, 32 * 32 * 4);
  const int64_t m = g->nodes()[2]->output(0)->arena_offset;
  for (const Node* n : g->nodes())
    if (n->op != "input"_op && n->output(0)->arena_offset >= 0) {
      EXPECT_EQ(n->output(0)->arena_offset, m) << n->label();
    }
  auto g1 = parse(kChain);
  const MemoryPlanInfo o1 = plan_memory(*g1, 1, 0);
  EXPECT_EQ(o1.num_inplace, 0);
  EXPECT_EQ(o1.arena_bytes, 2 * 32 * 32 * 4);  // ping-pong
  auto g0 = parse(kChain);
  EXPECT_EQ(plan_memory(*g0, 0, 0).arena_bytes, 5 * 32 * 32 * 4);
}

TEST(MemoryPlanLevels, NoInPlaceWhenInputLivesOnOrDiffersInSizeOrType) {
  auto g = parse(
      "graph @g(%x: f32[8,16], %bias: f32[16]) {\n"
      "  %a = exp(%x) : f32[8,16]\n"             // input 0 is a graph input: never overwritten
      "  %b = neg(%a) : f32[8,16]\n"             // a is read again below
      "  %s = add(%a, %b) : f32[8,16]\n"         // a dies here: in place
      "  %r = reduce_sum(%s) {axes=[1], keepdims=true} : f32[8,1]\n"
      "  %t = add(%r, %s) : f32[8,16]\n"         // input 0 is broadcast (fewer elements): not in place
      "  %i = cast(%t) {dtype=f16} : f16[8,16]\n" // cast is not inplace_ok
      "  %j = cast(%i) {dtype=f32} : f32[8,16]\n"
      "  %k = mul(%j, %bias) : f32[8,16]\n"       // in place over j
      "  %o = neg(%k) : f32[8,16]\n"              // a graph output: not in the arena
      "  return %o\n"
      "}\n");
  const MemoryPlanInfo info = plan_memory(*g, 2, 0);
  expect_valid_plan(*g);
  EXPECT_EQ(info.num_inplace, 2) << print_graph(*g);
  std::map<std::string, int64_t> off;
  for (const Node* n : g->nodes()) off[n->output(0)->name] = n->output(0)->arena_offset;
  EXPECT_EQ(off["s"], off["a"]);
  EXPECT_NE(off["b"], off["a"]);
  EXPECT_NE(off["t"], off["r"]);
  EXPECT_EQ(off["k"], off["j"]);
  EXPECT_NE(off["j"], off["i"]);
}

// First fit in node order is poor when small buffers placed early fragment the arena under the large
// ones that come later; greedy by size places the large ones first. (No op here is in place.)
TEST(MemoryPlanLevels, Level2PacksTighterThanFirstFit) {
  auto g1 = parse(
      "graph @g(%x: f32[16]) {\n"
      "  %a = exp(%x) : f32[16]\n"
      "  %b = neg(%x) : f32[16]\n"
      "  %e = expand(%a) {shape=[64,16]} : f32[64,16]\n"
      "  %c = transpose(%e) {perm=[1,0]} : f32[16,64]\n"
      "  %s = reduce_sum(%c) {axes=[1], keepdims=false} : f32[16]\n"
      "  %t = add(%s, %b) : f32[16]\n"
      "  return %t\n"
      "}\n");
  auto g2 = g1->clone();
  const MemoryPlanInfo o1 = plan_memory(*g1, 1, 0), o2 = plan_memory(*g2, 2, 0);
  expect_valid_plan(*g1);
  expect_valid_plan(*g2);
  EXPECT_EQ(o2.num_inplace, 0);
  EXPECT_EQ(o1.arena_bytes, 64 + 64 + 4096 + 4096);  // e lands after a and b, c after e
  EXPECT_EQ(o2.arena_bytes, 64 + 4096 + 4096);       // e and c first; a under c (never live together)
  EXPECT_EQ(o2.live_peak_bytes, 64 + 4096 + 4096);   // b, e, c at c's step: the bound is reached
}

// ---- numerics: plans at O0, O1 and O2 give the same bits

std::vector<Tensor> random_inputs(const std::vector<TensorType>& types, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<Tensor> ins;
  for (const TensorType& t : types) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (float& f : v) f = nd(rng);
    ins.push_back(Tensor::from_vector<float>(v, t.shape()));
  }
  return ins;
}

struct LevelResult {
  int64_t arena = 0;
  std::vector<Tensor> outs;
};

LevelResult run_at(const Graph& g, int level, std::span<const Tensor> ins) {
  CompileOptions o;
  o.memory_optimize_level = level;
  Plan p = compile_plan(g.clone(), o);
  expect_valid_plan(p.graph());
  LevelResult r{p.arena_bytes(), p.run(ins)};
  // A second run over a dirty arena must give the same bits too.
  std::vector<Tensor> again = p.run(ins);
  for (size_t i = 0; i < again.size(); ++i)
    EXPECT_EQ(std::memcmp(again[i].raw_data(), r.outs[i].raw_data(), again[i].nbytes()), 0) << "level " << level;
  return r;
}

// Returns the arena bytes at O0, O1, O2.
std::array<int64_t, 3> expect_levels_bit_identical(const Graph& g, uint64_t seed) {
  std::vector<TensorType> types;
  for (const Value* v : g.inputs()) types.push_back(v->type);
  const std::vector<Tensor> ins = random_inputs(types, seed);
  std::array<int64_t, 3> arena{};
  LevelResult base;
  for (int level = 0; level <= 2; ++level) {
    LevelResult r = run_at(g, level, ins);
    arena[level] = r.arena;
    if (level == 0) {
      base = std::move(r);
      continue;
    }
    EXPECT_LE(r.arena, arena[level - 1]) << "level " << level << " seed " << seed;
    for (size_t i = 0; i < r.outs.size(); ++i) {
      EXPECT_EQ(r.outs[i].nbytes(), base.outs[i].nbytes());
      if (r.outs[i].nbytes() != base.outs[i].nbytes()) continue;
      EXPECT_EQ(std::memcmp(r.outs[i].contiguous().raw_data(), base.outs[i].contiguous().raw_data(), r.outs[i].nbytes()), 0)
          << "output " << i << " differs at level " << level << " (seed " << seed << ")";
    }
  }
  return arena;
}

// A random DAG of elementwise, broadcast, reshape, reduce and matmul ops on [8,16] values.
std::unique_ptr<Graph> random_graph(uint64_t seed) {
  return trace_function(
      [seed](std::span<const Tensor> in) {
        std::mt19937_64 rng(seed);
        auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
        std::vector<Tensor> pool(in.begin(), in.end());
        const int steps = 6 + static_cast<int>(rng() % 20);
        for (int s = 0; s < steps; ++s) {
          // Prefer recent values so chains (where in-place applies) are common.
          const Tensor a = pool[pool.size() - 1 - pick(std::min<size_t>(pool.size(), 3))];
          const Tensor b = pool[pick(pool.size())];
          switch (rng() % 12) {
            case 0: pool.push_back(ops::relu(a)); break;
            case 1: pool.push_back(ops::tanh(a)); break;
            case 2: pool.push_back(ops::neg(a)); break;
            case 3: pool.push_back(ops::add(a, b)); break;
            case 4: pool.push_back(ops::mul(a, b)); break;
            case 5: pool.push_back(ops::sub(b, a)); break;
            case 6: pool.push_back(ops::sigmoid(a)); break;
            case 7: pool.push_back(ops::reshape(ops::relu(ops::reshape(a, {16, 8})), {8, 16})); break;
            case 8: pool.push_back(ops::add(ops::reduce_sum(a, {1}, true), b)); break;
            case 9: pool.push_back(ops::matmul(ops::matmul(a, b, false, true), ops::transpose(ops::reshape(b, {16, 8}), {1, 0}))); break;
            case 10: pool.push_back(ops::mul(ops::exp(ops::neg(ops::mul(a, a))), a)); break;
            default: {  // row slices (views of the arena at 256-byte offsets) and 16-byte rows (misaligned: copies)
              const Tensor rows = ops::reshape(a, {32, 4});
              const Tensor rot = ops::concat({ops::slice(rows, {1}, {32}, {0}), ops::slice(rows, {0}, {1}, {0})}, 0);
              const Tensor swap = ops::concat({ops::slice(b, {4}, {8}, {0}), ops::tanh(ops::slice(b, {0}, {4}, {0}))}, 0);
              pool.push_back(ops::add(ops::reshape(rot, {8, 16}), swap));
              break;
            }
          }
        }
        std::vector<Tensor> out{pool.back()};
        if (rng() % 2) out.push_back(pool[pool.size() / 2]);
        return out;
      },
      {TensorType::of(DType::f32, {8, 16}), TensorType::of(DType::f32, {8, 16})});
}

TEST(MemoryPlanLevels, RandomGraphsGiveTheSameBitsAtEveryLevel) {
  int64_t sum0 = 0, sum2 = 0;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE(seed);
    auto g = random_graph(seed);
    const auto arena = expect_levels_bit_identical(*g, seed);
    sum0 += arena[0];
    sum2 += arena[2];
  }
  EXPECT_LT(sum2, sum0);
}

// A slice that is a contiguous run of its input's bytes on a 64-byte boundary (a block of whole rows) is placed on
// those bytes and runs no kernel; a strided slice (columns) or one starting off the boundary is a copy with its own
// buffer. No value is written in place over an offset view.
TEST(MemoryPlanLevels, ContiguousRowSlicesAreViewsOfTheirInput) {
  for (int level : {1, 2}) {
    SCOPED_TRACE(level);
    auto g = parse(
        "graph @g(%x: f32[4,16], %w: f32[16,16]) {\n"
        "  %m = matmul(%x, %w) : f32[4,16]\n"
        "  %r1 = slice(%m) {starts=[1], ends=[2], axes=[0], steps=[]} : f32[1,16]\n"
        "  %r23 = slice(%m) {starts=[2], ends=[4], axes=[0], steps=[]} : f32[2,16]\n"
        "  %cols = slice(%m) {starts=[3], ends=[7], axes=[1], steps=[]} : f32[4,4]\n"
        "  %q = reshape(%m) {shape=[16,4]} : f32[16,4]\n"
        "  %odd = slice(%q) {starts=[1], ends=[2], axes=[0], steps=[]} : f32[1,4]\n"
        "  %e = exp(%r1) : f32[1,16]\n"
        "  %t = tanh(%r23) : f32[2,16]\n"
        "  %n = neg(%cols) : f32[4,4]\n"
        "  %o = relu(%odd) : f32[1,4]\n"
        "  return %e, %t, %n, %o\n"
        "}\n");
    plan_memory(*g, level, 0);
    expect_valid_plan(*g);
    std::map<std::string, const Node*> by;
    for (const Node* n : g->nodes()) by[n->output(0)->name] = n;
    const int64_t m = by["m"]->output(0)->arena_offset;
    EXPECT_TRUE(is_arena_alias(*by["r1"]));
    EXPECT_EQ(by["r1"]->output(0)->arena_offset, m + 64);
    EXPECT_TRUE(is_arena_alias(*by["r23"]));
    EXPECT_EQ(by["r23"]->output(0)->arena_offset, m + 128);
    EXPECT_FALSE(is_arena_alias(*by["cols"]));
    EXPECT_FALSE(is_arena_alias(*by["odd"]));  // 16 bytes in
  }
  auto g = parse(
      "graph @g(%x: f32[4,16], %w: f32[16,16]) {\n"
      "  %m = matmul(%x, %w) : f32[4,16]\n"
      "  %r1 = slice(%m) {starts=[1], ends=[2], axes=[0], steps=[]} : f32[1,16]\n"
      "  %r0 = slice(%m) {starts=[0], ends=[1], axes=[0], steps=[]} : f32[1,16]\n"
      "  %a = exp(%r0) : f32[1,16]\n"
      "  %b = tanh(%r1) : f32[1,16]\n"
      "  %c = add(%a, %b) : f32[1,16]\n"
      "  return %c\n"
      "}\n");
  expect_levels_bit_identical(*g, 5);
}

TEST(MemoryPlanLevels, MlpTrainingStepO2NeedsAtMostHalfOfO0) {
  auto g = mlp_training_step(20, 32, 64);
  const auto arena = expect_levels_bit_identical(*g, 7);
  std::printf("20-layer MLP training step (batch 32, width 64): arena O0 %lld, O1 %lld, O2 %lld bytes (O2/O0 %.3f)\n",
              static_cast<long long>(arena[0]), static_cast<long long>(arena[1]), static_cast<long long>(arena[2]),
              static_cast<double>(arena[2]) / static_cast<double>(arena[0]));
  EXPECT_LE(arena[2] * 2, arena[0]);
  EXPECT_LE(arena[2], arena[1]);
}

TEST(MemoryPlanLevels, CapBelowTheNeedFailsAtCompileTimeNamingTensorsAndOptions) {
  auto g = mlp_training_step(20, 32, 64);
  CompileOptions o;
  o.memory_optimize_level = 2;
  const int64_t need2 = compile_plan(g->clone(), o).arena_bytes();
  o.memory_optimize_level = 1;
  const int64_t need1 = compile_plan(g->clone(), o).arena_bytes();
  ASSERT_LT(need2, need1);
  o.max_memory = static_cast<size_t>(need1 - 64 * 1024 > need2 ? need1 - 64 * 1024 : need2);  // O1 does not fit, O2 does
  try {
    compile_plan(g->clone(), o);
    FAIL() << "expected out_of_memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    const std::string m = e.what();
    EXPECT_NE(m.find(fmt::format("max_device_memory is {} bytes", o.max_memory)), std::string::npos) << m;
    EXPECT_NE(m.find("largest live buffers at the peak"), std::string::npos) << m;
    EXPECT_NE(m.find(" bytes: %"), std::string::npos) << m;  // sizes and value names
    EXPECT_NE(m.find(" from "), std::string::npos) << m;      // producing nodes
    EXPECT_NE(m.find("memory_optimize_level=2"), std::string::npos) << m;
    EXPECT_NE(m.find("which fits"), std::string::npos) << m;
    EXPECT_NE(m.find("a smaller batch"), std::string::npos) << m;
  }
  o.memory_optimize_level = 2;
  EXPECT_NO_THROW(compile_plan(g->clone(), o));
  o.max_memory = static_cast<size_t>(need2 / 2);
  try {
    compile_plan(g->clone(), o);
    FAIL() << "expected out_of_memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_EQ(std::string(e.what()).find("memory_optimize_level=2 ("), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a smaller batch"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlanLevels, BadLevelIsAnError) {
  auto g = parse(kChain);
  EXPECT_THROW(plan_memory(*g, 3, 0), Error);
}

}  // namespace
}  // namespace spore
