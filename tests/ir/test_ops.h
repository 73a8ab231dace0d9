#pragma once
// Test-only custom ops (registered through op_registry().add_custom, with cpu and reference kernels),
// so IR, pass and runtime tests do not depend on the built-in op families. f32 only.
//   t_neg(x)            -> -x
//   t_add(a, b)         -> a + b (same shapes)
//   t_scale(x){alpha}   -> alpha * x
//   t_split2(x)         -> (x, -x): a two-output op
//   t_ping(x), t_pong(x) -> x (a pair of rules rewriting one into the other never ends)
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ir/graph.h"
#include "ops/dispatch.h"
#include "ops/infer.h"
#include "ops/kernel.h"
#include "ops/registry.h"

namespace spore::test {

struct TestOps {
  OpId neg, add, scale, split2, ping, pong;
};

inline void t_neg_kernel(KernelContext& k) {
  const float* x = k.in(0).data<float>();
  float* y = k.out(0).data<float>();
  for (int64_t i = 0; i < k.in(0).numel(); ++i) y[i] = -x[i];
}
inline void t_add_kernel(KernelContext& k) {
  const float* a = k.in(0).data<float>();
  const float* b = k.in(1).data<float>();
  float* y = k.out(0).data<float>();
  for (int64_t i = 0; i < k.out(0).numel(); ++i) y[i] = a[i] + b[i];
}
inline void t_scale_kernel(KernelContext& k) {
  const float alpha = static_cast<float>(k.attrs.f("alpha"));
  const float* x = k.in(0).data<float>();
  float* y = k.out(0).data<float>();
  for (int64_t i = 0; i < k.in(0).numel(); ++i) y[i] = alpha * x[i];
}
inline void t_split2_kernel(KernelContext& k) {
  const float* x = k.in(0).data<float>();
  float* y0 = k.out(0).data<float>();
  float* y1 = k.out(1).data<float>();
  for (int64_t i = 0; i < k.in(0).numel(); ++i) {
    y0[i] = x[i];
    y1[i] = -x[i];
  }
}
inline void t_copy_kernel(KernelContext& k) {
  const float* x = k.in(0).data<float>();
  float* y = k.out(0).data<float>();
  for (int64_t i = 0; i < k.in(0).numel(); ++i) y[i] = x[i];
}

inline OpId add_test_op(const std::string& name, std::vector<std::string> inputs, std::vector<AttrSpec> attrs,
                        InferFn infer, KernelFn kernel, TraitSet traits = Trait::elementwise) {
  OpDef d;
  d.name = name;
  d.doc = "test-only op";
  d.input_names = inputs;
  d.min_inputs = d.max_inputs = static_cast<int>(inputs.size());
  d.attrs = std::move(attrs);
  d.dtypes = DTypeSet{DType::f32};
  d.traits = traits;
  d.fusion = FusionKind::elementwise;
  d.infer = std::move(infer);
  const OpId id = op_registry().add_custom(std::move(d)).id;
  kernel_registry().add(Backend::cpu, id, DTypeSet{DType::f32}, kernel, "test");
  kernel_registry().add(Backend::reference, id, DTypeSet{DType::f32}, kernel, "test");
  return id;
}

inline const TestOps& test_ops() {
  static const TestOps ops = [] {
    TestOps t;
    t.neg = add_test_op("t_neg", {"x"}, {}, infer::same_as_input, t_neg_kernel);
    t.add = add_test_op("t_add", {"a", "b"}, {},
                        [](const InferContext& c) -> std::vector<TensorType> {
                          c.check(c.in(0) == c.in(1), ErrorCode::shape_mismatch,
                                  "expected equal input types, got " + c.in(0).str() + " and " + c.in(1).str());
                          return {c.in(0)};
                        },
                        t_add_kernel, Trait::elementwise | Trait::commutative);
    t.scale = add_test_op("t_scale", {"x"}, {{"alpha", AttrKind::f64, AttrValue(1.0)}}, infer::same_as_input,
                          t_scale_kernel);
    t.split2 = add_test_op("t_split2", {"x"}, {},
                           [](const InferContext& c) -> std::vector<TensorType> { return {c.in(0), c.in(0)}; },
                           t_split2_kernel);
    t.ping = add_test_op("t_ping", {"x"}, {}, infer::same_as_input, t_copy_kernel);
    t.pong = add_test_op("t_pong", {"x"}, {}, infer::same_as_input, t_copy_kernel);
    return t;
  }();
  return ops;
}

// Checks every value's use-list is exactly the multiset of (user, index) pairs that reference it.
inline ::testing::AssertionResult use_lists_valid(const Graph& g) {
  std::set<std::pair<const Node*, int>> expected_total;
  for (const Node* n : g.nodes()) {
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Value* v = n->inputs[i];
      int count = 0;
      for (const Use& u : v->uses) count += (u.user == n && u.index == static_cast<int>(i));
      if (count != 1)
        return ::testing::AssertionFailure() << n->label() << " input " << i << " listed " << count << " times in %"
                                             << v->name << "'s uses";
    }
    for (const Value* v : n->outputs) {
      for (const Use& u : v->uses) {
        if (u.user->dead) return ::testing::AssertionFailure() << "%" << v->name << " has a dead user";
        if (u.index >= static_cast<int>(u.user->inputs.size()) || u.user->inputs[u.index] != v)
          return ::testing::AssertionFailure() << "%" << v->name << " has a stale use by " << u.user->label();
      }
    }
  }
  return ::testing::AssertionSuccess();
}

inline Tensor f32_tensor(std::vector<float> values, Shape shape) {
  return Tensor::from_vector<float>(values, std::move(shape));
}

}  // namespace spore::test
