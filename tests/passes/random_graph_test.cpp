// Property test: seeded random graphs (~30 nodes of elementwise unary/binary ops with broadcasting, reductions,
// reshape/transpose/slice/concat/expand chains, matmul, casts, identity/dropout-off, and constants that are 0, -0
// and 1 so the simplifier fires) compiled at opt_level 0 and through simplify + the inference passes + CSE +
// constant folding + DCE and then the default pipeline. Every rewrite involved is exact, so the outputs must be
// bit-identical; a failure names the seed and prints the graph. SPORE_RANDOM_GRAPH_SEEDS overrides the count.
#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

#include "base/rng.h"
#include "ops/graph_ops.h"
#include "passes/pass.h"
#include "runtime/plan.h"

namespace spore {
namespace {

using Ints = std::vector<int64_t>;

class Gen {
 public:
  explicit Gen(uint64_t seed) : seed_(seed) {}

  std::unique_ptr<Graph> make(int nodes) {
    g_ = std::make_unique<Graph>("random");
    const Shape s = {dim(), dim()};
    pool_.push_back(g_->add_input(TensorType::of(DType::f32, s), "x"));
    pool_.push_back(g_->add_input(TensorType::of(DType::f32, {s[1]}), "b"));
    while (static_cast<int>(g_->num_live_nodes()) < nodes) step();
    std::vector<Value*> outs = {pick()};
    for (int i = 0; i < 4; ++i) {
      Value* v = pick();
      if (v->producer->op != "input"_op) outs.push_back(v);
    }
    g_->set_outputs(outs);
    return std::move(g_);
  }

 private:
  // floor(u * n): u has few low bits (a float's), so `bits % n` would skip values.
  int64_t below(int64_t n) {
    return std::min<int64_t>(n - 1, static_cast<int64_t>(philox_uniform(seed_, 1, counter_++) * static_cast<double>(n)));
  }
  int64_t dim() { return 1 + below(4); }
  Value* pick() {
    // Favour recent values so chains form.
    const int64_t n = static_cast<int64_t>(pool_.size());
    for (;;) {  // f32 values only (the f64 ones are the middles of cast chains)
      Value* v = pool_[below(2) ? n - 1 - below(std::min<int64_t>(n, 3)) : below(n)];
      if (v->type.dtype == DType::f32) return v;
    }
  }
  Value* node(OpId op, std::vector<Value*> in, Attrs a = {}) {
    Value* v = build_node(*g_, op, std::move(in), a)->output(0);
    pool_.push_back(v);
    return v;
  }
  Value* constant(const Shape& s, int kind) {
    std::vector<double> v(static_cast<size_t>(shape_numel(s)));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = kind == 0 ? 0.0 : kind == 1 ? -0.0 : kind == 2 ? 1.0 : 2.0 * philox_uniform(seed_, 2, counter_++) - 1.0;
    return g_->add_constant(Tensor::from_doubles(v, s, DType::f32));
  }
  // A shape that broadcasts against s: s itself, a suffix, or s with some dims set to 1.
  Shape broadcast_partner(const Shape& s) {
    Shape p = s;
    switch (below(3)) {
      case 0: break;
      case 1: p.erase(p.begin(), p.begin() + below(static_cast<int64_t>(p.size()) + 1)); break;
      default:
        for (auto& d : p)
          if (below(2)) d = 1;
    }
    return p;
  }
  static Ints iota(int n) {
    Ints p(n);
    for (int i = 0; i < n; ++i) p[i] = i;
    return p;
  }

  void step() {
    Value* x = pick();
    const Shape s = x->type.shape();
    const int rank = static_cast<int>(s.size());
    // reciprocal turns a wrong zero sign into a wrong infinity, which survives later ops.
    static const OpId unary[] = {"neg"_op, "abs"_op, "relu"_op, "tanh"_op, "sigmoid"_op, "reciprocal"_op};
    static const OpId binary[] = {"add"_op, "sub"_op, "mul"_op, "div"_op, "maximum"_op};
    switch (below(18)) {
      case 0: node(unary[below(6)], {x}); break;
      case 15: node("reciprocal"_op, {x}); break;
      case 1: node("neg"_op, {node("relu"_op, {x})}); break;  // -0 wherever x <= 0: signed zeros reach ops
      case 2: case 3: {  // identity-valued constants in either position
        const OpId op = binary[below(5)];
        Value* c = constant(broadcast_partner(s), static_cast<int>(below(4)));
        node(op, below(2) || op == "div"_op || op == "sub"_op ? std::vector<Value*>{x, c} : std::vector<Value*>{c, x});
        break;
      }
      case 4: case 5: {  // two computed values that broadcast
        Value* y = pick();
        const Shape t = y->type.shape();
        if (!infer_ok(s, t)) {
          node("neg"_op, {x});
          break;
        }
        node(binary[below(5)], {x, y});
        break;
      }
      case 6:
        if (rank > 0) node("reduce_sum"_op, {x}, {{"axes", Ints{below(rank)}}, {"keepdims", below(2) == 1}});
        else node("neg"_op, {x});
        break;
      case 7: {  // reshape chains (flatten then split back, or a no-op reshape)
        Value* f = node("reshape"_op, {x}, {{"shape", Ints{-1}}});
        if (below(2)) node("reshape"_op, {f}, {{"shape", Ints(s.begin(), s.end())}});
        else node("unsqueeze"_op, {f}, {{"axes", Ints{0}}});
        break;
      }
      case 8:
        if (rank >= 2) {
          Ints p = iota(rank);
          for (int i = rank - 1; i > 0; --i) std::swap(p[i], p[below(i + 1)]);
          Value* t = node("transpose"_op, {x}, {{"perm", p}});
          if (below(2)) node("transpose"_op, {t}, {{"perm", below(2) ? p : Ints{}}});
        } else {
          node("unsqueeze"_op, {x}, {{"axes", Ints{0}}});
        }
        break;
      case 9:
        if (rank > 0) {
          const int64_t axis = below(rank);
          const bool full = below(2);
          node("slice"_op, {x}, {{"starts", Ints{full ? 0 : below(s[axis])}}, {"ends", Ints{full ? 1000 : s[axis]}},
                                  {"axes", Ints{axis}}});
        } else {
          node("neg"_op, {x});
        }
        break;
      case 10:
        if (rank > 0) node("concat"_op, {x, pick_same(x)}, {{"axis", below(rank)}});
        else node("neg"_op, {x});
        break;
      case 11:
        if (rank == 2) node("matmul"_op, {x, constant({s[1], dim()}, 3)});
        else node("relu"_op, {x});
        break;
      case 12: {
        Value* d = node("cast"_op, {x}, {{"dtype", DType::f64}});
        node("cast"_op, {below(2) ? node("neg"_op, {d}) : d}, {{"dtype", DType::f32}});
        break;
      }
      case 13: {
        Value* u = node("unsqueeze"_op, {x}, {{"axes", Ints{0}}});
        node("squeeze"_op, {u}, {{"axes", Ints{0}}});
        break;
      }
      case 14:
        node(below(2) ? "identity"_op : "neg"_op, {x});
        if (below(2)) node("expand"_op, {pool_.back()}, {{"shape", Ints(s.begin(), s.end())}});
        break;
      case 17: {  // a signed-zero trap: -0 + (+-0 or 1 constant), then a sign-sensitive op
        Value* z = node("neg"_op, {node("relu"_op, {x})});
        Value* c = constant(broadcast_partner(s), static_cast<int>(below(3)));
        node("reciprocal"_op, {node(below(2) ? "add"_op : "sub"_op, {z, c})});
        break;
      }
      case 16:
        node("dropout"_op, {x}, {{"p", 0.5}, {"training", false}});
        break;
    }
  }
  static bool infer_ok(const Shape& a, const Shape& b) {
    const size_t n = std::max(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
      const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
      if (da != db && da != 1 && db != 1) return false;
    }
    return n <= 4;
  }
  Value* pick_same(Value* x) {
    for (int tries = 0; tries < 4; ++tries) {
      Value* y = pick();
      if (y->type == x->type) return y;
    }
    return x;
  }

  uint64_t seed_;
  uint64_t counter_ = 0;
  std::unique_ptr<Graph> g_;
  std::vector<Value*> pool_;
};

Tensor random_input(const TensorType& t, uint64_t seed, uint64_t stream) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    const double u = philox_uniform(seed, 100 + stream, i);
    v[i] = i % 7 == 3 ? -0.0 : 4.0 * u - 2.0;  // some negative zeros so signed-zero mistakes show
  }
  return Tensor::from_doubles(v, t.shape(), t.dtype);
}

TEST(RandomGraph, OptimizedEqualsUnoptimizedBitExact) {
  int seeds = 2000;
  if (const char* e = std::getenv("SPORE_RANDOM_GRAPH_SEEDS")) seeds = std::atoi(e);
  int64_t nodes_before = 0, nodes_after = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    std::unique_ptr<Graph> g = Gen(static_cast<uint64_t>(seed)).make(30);
    ASSERT_NO_THROW(verify_graph(*g)) << "seed " << seed;
    std::vector<Tensor> in;
    for (size_t i = 0; i < g->inputs().size(); ++i) in.push_back(random_input(g->inputs()[i]->type, seed, i));

    auto opt = g->clone();
    try {
      PassManager pm(PassOptions{.verify_each = true, .inference = true});
      pm.add(make_dce_pass()).add(make_remove_dropout_pass()).add(make_fold_batch_norm_pass());
      pm.add(make_simplify_pass()).add(make_cse_pass()).add(make_fold_constants_pass()).add(make_dce_pass());
      pm.run(*opt);
    } catch (const Error& e) {
      FAIL() << "seed " << seed << ": " << e.what() << "\n" << print_graph(*g);
    }
    nodes_before += static_cast<int64_t>(g->num_live_nodes());
    nodes_after += static_cast<int64_t>(opt->num_live_nodes());
    const std::string opt_text = print_graph(*opt);
    Plan p0 = compile_plan(g->clone(), CompileOptions{.opt_level = 0});
    Plan p1 = compile_plan(std::move(opt), {});
    const auto r0 = p0.run(in), r1 = p1.run(in);
    ASSERT_EQ(r0.size(), r1.size()) << "seed " << seed;
    for (size_t i = 0; i < r0.size(); ++i) {
      ASSERT_TRUE(r0[i].bit_equal(r1[i])) << "seed " << seed << " output " << i << "\nunoptimized:\n"
                                          << print_graph(*g) << "optimized:\n" << opt_text;
    }
  }
  std::printf("%d random graphs: %lld nodes -> %lld after the passes\n", seeds, static_cast<long long>(nodes_before),
              static_cast<long long>(nodes_after));
  // The generator must give the passes something to do.
  EXPECT_LT(nodes_after * 10, nodes_before * 9) << nodes_before << " -> " << nodes_after;
}

}  // namespace
}  // namespace spore
