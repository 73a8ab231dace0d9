#include "conformance/harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>

#include "base/half.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "ops/ops.h"
#include "ops/registry.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"

namespace spore::conformance {

Tolerance tolerance_for(DType t, double s) {
  switch (t) {
    case DType::f64: return {1e-12 * s, 1e-10 * s};
    case DType::f32: return {1e-5 * s, 1e-5 * s};
    case DType::f16: return {2e-3 * s, 2e-3 * s};
    case DType::bf16: return {1.6e-2 * s, 1.6e-2 * s};
    default: return {0, 0};  // integers and bool: exact
  }
}

std::vector<Tensor> make_inputs(const OpCase& c, DType dtype) {
  std::vector<Tensor> ins;
  const uint64_t seed = std::hash<std::string>{}(c.name);
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    const DType t = c.fixed_dtypes[i].value_or(dtype);
    const Gen g = c.gens[i];
    const int64_t n = shape_numel(c.shapes[i]);
    std::vector<double> vals(n);
    bool any_nonzero = false;
    for (int64_t k = 0; k < n; ++k) {
      const double u = philox_uniform(seed, i, static_cast<uint64_t>(k));
      double v = 0;
      switch (g.kind) {
        case Gen::Kind::uniform:
          v = g.lo + (g.hi - g.lo) * u;
          if (is_integral(t)) v = std::floor(v * 4);  // spread integers a bit
          break;
        case Gen::Kind::index:
        case Gen::Kind::integers:
          v = std::floor(g.lo + (g.hi - g.lo) * u);
          if (v >= g.hi) v = g.hi - 1;
          break;
        case Gen::Kind::boolean: v = u < 0.5 ? 0 : 1; break;
        case Gen::Kind::consecutive: v = g.lo + static_cast<double>(k); break;
        case Gen::Kind::q8_0_blocks:
        case Gen::Kind::q4_0_blocks: {
          // Byte k of a row of blocks: bytes 0-1 of a block hold its f16 scale, the rest random quants.
          const int64_t block = g.kind == Gen::Kind::q8_0_blocks ? 34 : 18;
          const int64_t at = k % block;
          if (at < 2) {
            const uint16_t h = float_to_half_bits(static_cast<float>(
                g.lo + (g.hi - g.lo) * philox_uniform(seed, i + 1000, static_cast<uint64_t>(k - at))));
            v = at == 0 ? (h & 0xff) : (h >> 8);
          } else if (g.kind == Gen::Kind::q8_0_blocks) {
            v = std::min(254.0, std::floor(u * 255));  // int8 quants in [-127, 127], as GGUF writes them
            if (v >= 128) v += 1;
          } else {
            v = std::min(255.0, std::floor(u * 256));
          }
          break;
        }
      }
      if (t == DType::u8 && g.kind == Gen::Kind::uniform) v = std::fabs(v);
      if (t == DType::boolean && g.kind == Gen::Kind::uniform) v = u < 0.5 ? 0 : 1;
      any_nonzero |= v != 0;
      vals[k] = v;
    }
    if (n > 0 && !any_nonzero && g.kind == Gen::Kind::uniform) vals[0] = 1;  // never all zeros
    if (g.kind == Gen::Kind::q8_0_blocks || g.kind == Gen::Kind::q4_0_blocks)
      SPORE_CHECK(t == DType::u8, ErrorCode::internal, "case {}: block generators make u8 inputs", c.name);
    ins.push_back(Tensor::from_doubles(vals, c.shapes[i], t));
  }
  return ins;
}

namespace {

struct Param {
  size_t case_index;
  DType dtype;
};

CaseList& cases() {
  static CaseList c;
  return c;
}
ErrorList& error_cases() {
  static ErrorList e;
  return e;
}
void build_lists() {
  static bool done = false;
  if (done) return;
  done = true;
  add_structure_cases(cases(), error_cases());
  add_elementwise_cases(cases(), error_cases());
  add_binary_cases(cases(), error_cases());
  add_reduce_cases(cases(), error_cases());
  add_linalg_cases(cases(), error_cases());
  add_conv_cases(cases(), error_cases());
  add_norm_cases(cases(), error_cases());
  add_shape_cases(cases(), error_cases());
  add_quant_cases(cases(), error_cases());
  add_fused_elementwise_cases(cases(), error_cases());
  add_fused_cases(cases(), error_cases());
  add_attention_cases(cases(), error_cases());
  add_rnn_cases(cases(), error_cases());
  add_llm_cases(cases(), error_cases());
  add_index_cases(cases(), error_cases());
  add_dynamic_cases(cases(), error_cases());
}

DTypeSet case_dtypes(const OpCase& c) {
  const OpDef& def = op_registry().get(c.op);
  return c.dtypes.value_or(def.dtypes);
}

std::vector<Param> all_params() {
  init();
  build_lists();
  std::vector<Param> ps;
  for (size_t i = 0; i < cases().size(); ++i) {
    const DTypeSet s = case_dtypes(cases()[i]);
    for (int d = 0; d < num_dtypes; ++d)
      if (s.has(static_cast<DType>(d))) ps.push_back({i, static_cast<DType>(d)});
  }
  return ps;
}

std::vector<Tensor> run_eager(const OpCase& c, const std::vector<Tensor>& ins, Backend b) {
  BackendScope scope(b);
  return ops::call(c.op, ins, c.attrs);
}

::testing::AssertionResult close(const Tensor& got, const Tensor& ref, Tolerance tol, const std::string& what) {
  if (got.dtype() != ref.dtype() || got.shape() != ref.shape())
    return ::testing::AssertionFailure() << what << ": got " << dtype_name(got.dtype()) << shape_str(got.shape()) << ", reference "
                                         << dtype_name(ref.dtype()) << shape_str(ref.shape());
  const auto g = got.to_doubles(), r = ref.to_doubles();
  int bad = 0;
  std::string first;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool both_nan = std::isnan(g[i]) && std::isnan(r[i]);
    const bool same_inf = std::isinf(g[i]) && g[i] == r[i];
    if (both_nan || same_inf) continue;
    if (!(std::fabs(g[i] - r[i]) <= tol.atol + tol.rtol * std::fabs(r[i]))) {
      if (bad++ == 0) first = fmt::format("element {}: got {} expected {}", i, g[i], r[i]);
    }
  }
  if (bad) return ::testing::AssertionFailure() << what << ": " << bad << " of " << g.size() << " elements off; first " << first;
  return ::testing::AssertionSuccess();
}

class Conformance : public ::testing::TestWithParam<Param> {};

TEST_P(Conformance, CpuMatchesReference) {
  const OpCase& c = cases()[GetParam().case_index];
  const DType dt = GetParam().dtype;
  const auto ins = make_inputs(c, dt);
  const auto ref = run_eager(c, ins, Backend::reference);
  const auto got = run_eager(c, ins, Backend::cpu);
  ASSERT_EQ(ref.size(), got.size());
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_TRUE(close(got[i], ref[i], tolerance_for(got[i].dtype(), c.tol_scale), fmt::format("output {}", i)));
}

TEST_P(Conformance, GraphEqualsEager) {
  const OpCase& c = cases()[GetParam().case_index];
  if (!c.graph) GTEST_SKIP() << "graph check disabled for this case";
  const DType dt = GetParam().dtype;
  const auto ins = make_inputs(c, dt);
  const auto eager = run_eager(c, ins, Backend::cpu);
  CompiledFunction f([&](std::span<const Tensor> in) { return ops::call(c.op, in, c.attrs); });
  const auto graph = f(std::span<const Tensor>(ins));
  ASSERT_EQ(eager.size(), graph.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(eager[i].bit_equal(graph[i])) << "output " << i;
}

TEST_P(Conformance, ThreadCountInvariant) {
  const OpCase& c = cases()[GetParam().case_index];
  const DType dt = GetParam().dtype;
  const auto ins = make_inputs(c, dt);
  const int saved = num_threads();
  set_threads(1);
  const auto one = run_eager(c, ins, Backend::cpu);
  set_threads(2);
  const auto two = run_eager(c, ins, Backend::cpu);
  set_threads(4);
  const auto four = run_eager(c, ins, Backend::cpu);
  set_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(one[i].bit_equal(two[i])) << "output " << i << ": 1 vs 2 threads";
    EXPECT_TRUE(one[i].bit_equal(four[i])) << "output " << i << ": 1 vs 4 threads";
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string n = cases()[info.param.case_index].name + "_" + std::string(dtype_name(info.param.dtype));
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n + "_" + std::to_string(info.param.case_index);
}

INSTANTIATE_TEST_SUITE_P(Ops, Conformance, ::testing::ValuesIn(all_params()), param_name);

// Every op and every dtype it accepts has at least one case.
TEST(ConformanceCoverage, EveryOpAndDtypeHasACase) {
  build_lists();
  std::set<std::pair<int, int>> covered;
  for (const auto& c : cases()) {
    const DTypeSet s = case_dtypes(c);
    for (int d = 0; d < num_dtypes; ++d)
      if (s.has(static_cast<DType>(d))) covered.insert({op_index(c.op), d});
  }
  for (int op = 0; op < num_builtin_ops(); ++op) {
    const OpDef* def = op_registry().find(op_at(op));
    ASSERT_NE(def, nullptr) << "op " << op_name(op_at(op)) << " has no OpDef";
    if (def->traits.has(Trait::graph_structure)) continue;
    for (int d = 0; d < num_dtypes; ++d) {
      if (!def->dtypes.has(static_cast<DType>(d))) continue;
      EXPECT_TRUE(covered.count({op, d})) << "op " << def->name << " dtype " << dtype_name(static_cast<DType>(d))
                                          << " has no conformance case";
    }
  }
}

// Bad inputs are rejected with the expected error code and a message naming the op.
TEST(ConformanceErrors, ShapeInferenceRejectsBadInputs) {
  build_lists();
  for (const auto& e : error_cases()) {
    const OpDef& def = op_registry().get(e.op);
    std::vector<TensorType> ins;
    for (size_t i = 0; i < e.shapes.size(); ++i) ins.push_back(TensorType::of(e.dtypes.at(i), e.shapes[i]));
    try {
      def.infer_types(ins, def.normalize(e.attrs), "node_x");
      ADD_FAILURE() << e.name << ": expected an error";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), e.code) << e.name << ": " << err.what();
      EXPECT_NE(std::string(err.what()).find(def.name), std::string::npos) << e.name << ": " << err.what();
    }
  }
}

}  // namespace
}  // namespace spore::conformance
