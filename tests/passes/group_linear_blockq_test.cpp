// The group_linear_blockq pass (passes/group_linear_blockq.cpp): Before/Expected text IR, what it leaves alone, and
// a compiled plan whose outputs keep their bits (the kernel side is tests/llm/blockq_test.cpp).
#include <gtest/gtest.h>

#include <random>

#include "ops/graph_ops.h"
#include "ops/llm_ops.h"
#include "passes/pass.h"
#include "runtime/plan.h"

namespace spore {
namespace {

std::string grouped(const std::string& before) {
  auto g = parse_graph(before);
  verify_graph(*g);
  PassManager pm(PassOptions{.verify_each = true});
  pm.add(make_group_linear_blockq_pass());
  pm.run(*g);
  return print_graph(*g);
}

// Q/K/V with biases over %h, gate/up without over %s, and two that must stay alone: another format over %h and
// a projection of another value. The grouped node goes where topo_sort puts it (before its first user).
constexpr const char* kBefore =
    "graph @g(%h: f32[2,64], %wq: u8[64,68], %wk: u8[16,68], %wv: u8[16,68], %bq: f32[64], %bk: f32[16], "
    "%bv: f32[16], %wf: f16[8,64], %wg: u8[32,68], %wu: u8[32,68]) {\n"
    "  %q = linear_blockq(%h, %wq, %bq) {format=\"q8_0\"} : f32[2,64]\n"
    "  %k = linear_blockq(%h, %wk, %bk) {format=\"q8_0\"} : f32[2,16]\n"
    "  %f = linear_blockq(%h, %wf) {format=\"f16\"} : f32[2,8]\n"
    "  %v = linear_blockq(%h, %wv, %bv) {format=\"q8_0\"} : f32[2,16]\n"
    "  %s = add(%q, %q) : f32[2,64]\n"
    "  %g = linear_blockq(%s, %wg) {format=\"q8_0\"} : f32[2,32]\n"
    "  %u = linear_blockq(%s, %wu) {format=\"q8_0\"} : f32[2,32]\n"
    "  %o = linear_blockq(%q, %wq) {format=\"q8_0\"} : f32[2,64]\n"
    "  return %g, %u, %f, %v, %o\n"
    "}\n";

TEST(GroupLinearBlockq, SiblingsBecomeOneNode) {
  const std::string expected =
      "graph @g(%h: f32[2,64], %wq: u8[64,68], %wk: u8[16,68], %wv: u8[16,68], %bq: f32[64], %bk: f32[16], "
      "%bv: f32[16], %wf: f16[8,64], %wg: u8[32,68], %wu: u8[32,68]) {\n"
      "  %f = linear_blockq(%h, %wf) {format=\"f16\"} : f32[2,8]\n"
      "  %q, %k, %v = linear_blockq_multi(%h, %wq, %wk, %wv, %bq, %bk, %bv) {count=3, epilogue=\"\", format=\"q8_0\"} : f32[2,64], "
      "f32[2,16], f32[2,16]\n"
      "  %s = add(%q, %q) : f32[2,64]\n"
      "  %o = linear_blockq(%q, %wq) {format=\"q8_0\"} : f32[2,64]\n"
      "  %g, %u = linear_blockq_multi(%s, %wg, %wu) {count=2, epilogue=\"\", format=\"q8_0\"} : f32[2,32], f32[2,32]\n"
      "  return %g, %u, %f, %v, %o\n"
      "}\n";
  EXPECT_EQ(grouped(kBefore), expected);
}

// A SwiGLU MLP: mul(silu(gate), up) over the grouped pair becomes the silu_mul epilogue (the mul's name stays).
constexpr const char* kSwiglu =
    "graph @g(%h: f32[3,64], %wg: u8[32,68], %wu: u8[32,68], %wd: u8[64,34]) {\n"
    "  %g = linear_blockq(%h, %wg) {format=\"q8_0\"} : f32[3,32]\n"
    "  %u = linear_blockq(%h, %wu) {format=\"q8_0\"} : f32[3,32]\n"
    "  %a = silu(%g) : f32[3,32]\n"
    "  %ff = mul(%u, %a) : f32[3,32]\n"
    "  %d = linear_blockq(%ff, %wd) {format=\"q8_0\"} : f32[3,64]\n"
    "  return %d\n"
    "}\n";

TEST(GroupLinearBlockq, SwigluBecomesTheEpilogue) {
  const std::string expected =
      "graph @g(%h: f32[3,64], %wg: u8[32,68], %wu: u8[32,68], %wd: u8[64,34]) {\n"
      "  %ff = linear_blockq_multi(%h, %wg, %wu) {count=2, epilogue=\"silu_mul\", format=\"q8_0\"} : f32[3,32]\n"
      "  %d = linear_blockq(%ff, %wd) {format=\"q8_0\"} : f32[3,64]\n"
      "  return %d\n"
      "}\n";
  EXPECT_EQ(grouped(kSwiglu), expected);
  // Up traced before gate (C++ leaves the order of a call's arguments open): gate's weight still goes first.
  std::string up_first = kSwiglu;
  const std::string gl = "  %g = linear_blockq(%h, %wg) {format=\"q8_0\"} : f32[3,32]\n";
  const std::string ul = "  %u = linear_blockq(%h, %wu) {format=\"q8_0\"} : f32[3,32]\n";
  up_first.replace(up_first.find(gl), gl.size() + ul.size(), ul + gl);
  EXPECT_EQ(grouped(up_first), expected);
  // gate read elsewhere too: the pair is grouped, the silu and mul stay.
  const std::string shared =
      "graph @g(%h: f32[3,64], %wg: u8[32,68], %wu: u8[32,68]) {\n"
      "  %g = linear_blockq(%h, %wg) {format=\"q8_0\"} : f32[3,32]\n"
      "  %u = linear_blockq(%h, %wu) {format=\"q8_0\"} : f32[3,32]\n"
      "  %a = silu(%g) : f32[3,32]\n"
      "  %ff = mul(%a, %u) : f32[3,32]\n"
      "  return %ff, %g\n"
      "}\n";
  const std::string out = grouped(shared);
  EXPECT_NE(out.find("%g, %u = linear_blockq_multi"), std::string::npos) << out;
  EXPECT_NE(out.find("silu(%g)"), std::string::npos) << out;
  EXPECT_EQ(out.find("silu_mul"), std::string::npos) << out;
}

TEST(GroupLinearBlockq, LeavesAloneMixedBiasesAndLoneNodes) {
  // One with a bias, one without: different kernels' inputs, not grouped; a single projection stays as it is.
  const std::string mixed =
      "graph @g(%h: f32[2,64], %wq: u8[64,68], %wk: u8[16,68], %bq: f32[64]) {\n"
      "  %q = linear_blockq(%h, %wq, %bq) {format=\"q8_0\"} : f32[2,64]\n"
      "  %k = linear_blockq(%h, %wk) {format=\"q8_0\"} : f32[2,16]\n"
      "  return %q, %k\n"
      "}\n";
  EXPECT_EQ(grouped(mixed), mixed);
}

Tensor random_q8_0(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), scale(0x2000, 0x2400);  // small positive f16 scales
  Tensor w = Tensor::empty({n, k / 32 * 34}, DType::u8);
  uint8_t* p = w.data<uint8_t>();
  for (int64_t b = 0; b < n * k / 32; ++b) {
    const auto d = static_cast<uint16_t>(scale(rng));
    p[b * 34] = static_cast<uint8_t>(d & 0xff);
    p[b * 34 + 1] = static_cast<uint8_t>(d >> 8);
    for (int j = 2; j < 34; ++j) p[b * 34 + j] = static_cast<uint8_t>(byte(rng));
  }
  return w;
}

// The compiled graph (default pipeline, so the pass runs) gives the bits of the graph compiled without it.
TEST(GroupLinearBlockq, PlanKeepsBits) {
  auto run = [&](bool group) {
    auto g = parse_graph(kBefore);
    CompileOptions o;
    if (!group) o.disabled_passes = {"group_linear_blockq"};
    Plan p = compile_plan(std::move(g), o);
    if (group) {
      EXPECT_NE(p.describe().find("linear_blockq_multi"), std::string::npos) << p.describe();
    } else {
      EXPECT_EQ(p.describe().find("linear_blockq_multi"), std::string::npos) << p.describe();
    }
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    std::vector<float> h(128);
    for (float& v : h) v = d(rng);
    Tensor wf = Tensor::empty({8, 64}, DType::f16);
    for (int64_t i = 0; i < wf.numel(); ++i) static_cast<uint16_t*>(wf.raw_data())[i] = static_cast<uint16_t>(0x3000 + 7 * i);
    std::vector<Tensor> ins{Tensor::from_vector<float>(h, {2, 64}), random_q8_0(64, 64, 1), random_q8_0(16, 64, 2),
                            random_q8_0(16, 64, 3), Tensor::from_vector<float>(std::vector<float>(64, 0.5f), {64}),
                            Tensor::from_vector<float>(std::vector<float>(16, -0.25f), {16}),
                            Tensor::from_vector<float>(std::vector<float>(16, 1.5f), {16}), wf,
                            random_q8_0(32, 64, 4), random_q8_0(32, 64, 5)};
    return p.run(ins);
  };
  const auto a = run(true), b = run(false);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].bit_equal(b[i])) << "output " << i;
  // The SwiGLU graph: the epilogue gives the bits of the separate silu and mul (fused_elementwise without the pass).
  auto swiglu = [&](bool group) {
    CompileOptions o;
    if (!group) o.disabled_passes = {"group_linear_blockq"};
    Plan p = compile_plan(parse_graph(kSwiglu), o);
    EXPECT_EQ(p.describe().find("silu_mul") != std::string::npos || p.describe().find("linear_blockq_multi") != std::string::npos, group)
        << p.describe();
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    std::vector<float> h(192);
    for (float& v : h) v = d(rng);
    return p.run(std::vector<Tensor>{Tensor::from_vector<float>(h, {3, 64}), random_q8_0(32, 64, 6),
                                     random_q8_0(32, 64, 7), random_q8_0(64, 32, 8)});
  };
  EXPECT_TRUE(swiglu(true)[0].bit_equal(swiglu(false)[0]));
}

}  // namespace
}  // namespace spore
