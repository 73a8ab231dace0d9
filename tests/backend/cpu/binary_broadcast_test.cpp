// Binary ops on broadcast shapes whose innermost runs are short (backend/cpu/binary.cpp's tiled path: an input
// repeating its run along the next dim, as squeeze-excite's x * s on the blocked layout) against a naive float
// loop: exact, since each element is one IEEE operation. Either operand broadcast, runs of 1-17, one or many row
// chunks, 1 and 3 threads.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_test_util.h"
#include "ir/graph.h"
#include "ops/graph_ops.h"
#include "ops/ops.h"
#include "runtime/plan.h"
#include "runtime/runtime.h"

namespace spore {
namespace {

Tensor random_tensor(std::mt19937& rng, const Shape& shape) {
  std::uniform_real_distribution<double> d(-2.0, 2.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = d(rng);
  return Tensor::from_doubles(v, shape, DType::f32);
}

// Index of out coordinate `i` (row-major over out) in a tensor of shape s broadcast to out.
int64_t bcast_index(const Shape& out, const Shape& s, int64_t i) {
  int64_t idx = 0, stride = 1;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    const int64_t c = i % out[d];
    i /= out[d];
    const int sd = d - static_cast<int>(out.size() - s.size());
    if (sd >= 0) {
      if (s[sd] != 1) idx += c * stride;
      stride *= s[sd];
    }
  }
  return idx;
}

TEST(BinaryBroadcast, ShortRunsRepeatedAlongTheNextDimMatchANaiveLoop) {
  struct Case { Shape a, b; };
  const std::vector<Case> cases = {
      {{2, 3, 5, 8}, {2, 3, 1, 8}},     // squeeze-excite on the blocked layout
      {{2, 3, 1, 8}, {2, 3, 5, 8}},     // the repeated operand first
      {{2, 3, 700, 8}, {2, 3, 1, 8}},   // several row chunks per outer index
      {{4, 7, 3}, {4, 1, 3}},
      {{3, 9, 17}, {1, 17}},            // leading broadcast too
      {{6, 5, 1}, {6, 1, 1}},           // runs of 1: the scalar-per-row path
      {{2, 1, 4, 6}, {2, 5, 1, 6}},     // both broadcast, on different dims
  };
  const OpId ops[] = {"mul"_op, "add"_op, "sub"_op, "div"_op};
  std::mt19937 rng(17);
  for (const Case& c : cases)
    for (OpId op : ops) {
      SCOPED_TRACE(fmt::format("{} {} {}", op_name(op), shape_str(c.a), shape_str(c.b)));
      auto g = std::make_unique<Graph>("binary");
      Value* a = g->add_input(TensorType::of(DType::f32, c.a), "a");
      Value* b = g->add_input(TensorType::of(DType::f32, c.b), "b");
      g->set_outputs({build_node(*g, op, {a, b}, {})->output(0)});
      CompileOptions o;
      o.inference = true;
      Plan plan = compile_plan(std::move(g), o);
      const Tensor in[] = {random_tensor(rng, c.a), random_tensor(rng, c.b)};
      for (int threads : {1, 3}) {
        set_threads(threads);
        const Tensor y = plan.run(in)[0];
        const Shape& out = y.shape();
        const float* pa = in[0].data<float>();
        const float* pb = in[1].data<float>();
        int64_t bad = 0;
        for (int64_t i = 0; i < y.numel(); ++i) {
          const float u = pa[bcast_index(out, c.a, i)], v = pb[bcast_index(out, c.b, i)];
          const float want = op == "mul"_op ? u * v : op == "add"_op ? u + v : op == "sub"_op ? u - v : u / v;
          const float got = y.data<float>()[i];
          if (std::memcmp(&got, &want, sizeof(float)) != 0 && bad++ < 3)
            ADD_FAILURE() << "element " << i << ": got " << got << " want " << want << " (" << threads << " threads)";
        }
        EXPECT_EQ(bad, 0);
      }
      set_threads(0);
    }
}

}  // namespace
}  // namespace spore
