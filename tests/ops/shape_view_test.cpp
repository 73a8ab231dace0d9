// Shape family beyond the conformance harness: eager view ops share storage with their input, graph mode
// (copy kernels) gives the same values; the view ops' kernels are run directly (eager mode would return
// views) against the reference and across thread counts; bad indices fail at run time with a clear
// message; a few gradient rules and symbolic shapes.
#include <gtest/gtest.h>

#include <limits>

#include "base/thread_pool.h"
#include "ops/ops.h"
#include "ops/registry.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"

namespace spore {
namespace {

using Ints = std::vector<int64_t>;

Tensor iota(Shape shape, DType dt = DType::f32) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7) % 101) - 50;
  return Tensor::from_doubles(v, std::move(shape), dt);
}

std::vector<Tensor> in_graph(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x) {
  CompiledFunction f([&](std::span<const Tensor> in) { return std::vector<Tensor>{fn(in[0])}; });
  return f({x});
}

struct ViewCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
};

TEST(ShapeViews, EagerViewsShareStorageAndMatchGraph) {
  const Tensor x = iota({4, 6, 5});
  const std::vector<ViewCase> cases = {
      {"reshape",
       [](const Tensor& t) {
         return ops::reshape(t, {6, -1});
       }},
      {"transpose",
       [](const Tensor& t) {
         return ops::transpose(t, {2, 0, 1});
       }},
      {"slice",
       [](const Tensor& t) {
         return ops::slice(t, {1, -4}, {3, 100}, {0, 2}, {1, 2});
       }},
      {"expand",
       [](const Tensor& t) {
         return ops::expand(ops::reshape(t, {4, 1, 6, 5}), {4, 3, 6, 5});
       }},
      {"squeeze",
       [](const Tensor& t) {
         return ops::squeeze(ops::unsqueeze(t, {0, 2}));
       }},
      {"unsqueeze", [](const Tensor& t) { return ops::unsqueeze(t, {-1}); }},
      {"flatten", [](const Tensor& t) { return ops::flatten(t, 2); }},
      {"chain", [](const Tensor& t) { return ops::squeeze(ops::slice(ops::transpose(t), {2}, {3}, {1}), {1}); }},
  };
  for (const auto& c : cases) {
    const Tensor v = c.fn(x);
    EXPECT_EQ(v.storage().get(), x.storage().get()) << c.name << " did not return a view";
    const auto g = in_graph(c.fn, x);
    ASSERT_EQ(g.size(), 1u);
    EXPECT_NE(g[0].storage().get(), x.storage().get()) << c.name;
    EXPECT_TRUE(v.bit_equal(g[0])) << c.name << ": eager " << v.to_string() << " graph " << g[0].to_string();
  }
}

TEST(ShapeViews, CopiesWhenAViewCannotExpressTheResult) {
  const Tensor x = iota({3, 4});
  const Tensor t = ops::transpose(x);
  const Tensor r = ops::reshape(t, {12});  // non-contiguous input: needs a copy
  EXPECT_NE(r.storage().get(), x.storage().get());
  EXPECT_EQ(r.to_doubles(), t.contiguous().view({12}).to_doubles());
  const Tensor rev = ops::slice(x, {-1}, {std::numeric_limits<int64_t>::min()}, {1}, {-1});  // negative step: copy
  EXPECT_NE(rev.storage().get(), x.storage().get());
  EXPECT_EQ(rev.item_at(0), x.item_at(3));
  EXPECT_EQ(rev.item_at(5), x.item_at(6));
  // squeeze of a transposed view still is a view (only size-1 dims change).
  const Tensor s = ops::squeeze(ops::transpose(iota({3, 1, 4}), {2, 1, 0}));
  EXPECT_EQ(s.shape(), (Shape{4, 3}));
}

// Runs an op's kernel on `b` directly (no eager view), with `threads` threads.
std::vector<Tensor> run_kernel(Backend b, OpId op, std::vector<Tensor> ins, const Attrs& attrs, int threads = 1) {
  const OpDef& def = op_registry().get(op);
  const Attrs a = def.normalize(attrs);
  std::vector<TensorType> in_types;
  for (const Tensor& t : ins) in_types.push_back(TensorType::of(t.dtype(), t.shape()));
  const auto out_types = def.infer_types(in_types, a);
  const KernelInfo* k = kernel_registry().find(b, op, def.dispatch_dtype(in_types, out_types));
  EXPECT_NE(k, nullptr);
  std::vector<Tensor> outs;
  for (const TensorType& t : out_types) outs.push_back(Tensor::empty(t.shape(), t.dtype));
  KernelContext ctx{ins, outs, a, op, {}};
  const int saved = num_threads();
  set_threads(threads);
  k->fn(ctx);
  set_threads(saved);
  return outs;
}

TEST(ShapeViews, ViewOpKernelsMatchReferenceOnAnyThreadCount) {
  struct KCase {
    OpId op;
    Shape shape;
    Attrs attrs;
  };
  const int64_t kmin = std::numeric_limits<int64_t>::min();
  const std::vector<KCase> cases = {
      {"reshape"_op, {7, 33}, {{"shape", Ints{33, -1}}}},
      {"transpose"_op, {67, 129}, {}},
      {"transpose"_op, {3, 65, 40}, {{"perm", Ints{2, 0, 1}}}},
      {"transpose"_op, {2, 5, 33, 3}, {{"perm", Ints{0, 2, 1, 3}}}},
      {"slice"_op, {40, 70}, {{"starts", Ints{3, -1}}, {"ends", Ints{39, kmin}}, {"steps", Ints{2, -3}}}},
      {"slice"_op, {1100, 3}, {{"starts", Ints{5}}, {"ends", Ints{1099}}}},
      {"expand"_op, {33, 1}, {{"shape", Ints{2, 33, 1001}}}},
      {"squeeze"_op, {1, 7, 1}, {}},
      {"unsqueeze"_op, {7, 3}, {{"axes", Ints{1}}}},
      {"flatten"_op, {2, 3, 5}, {{"axis", int64_t{2}}}},
  };
  for (const DType dt : {DType::f32, DType::f16, DType::i64, DType::u8, DType::boolean}) {
    for (const auto& c : cases) {
      const Tensor x = iota(c.shape, dt);
      const auto ref = run_kernel(Backend::reference, c.op, {x}, c.attrs);
      const auto one = run_kernel(Backend::cpu, c.op, {x}, c.attrs, 1);
      const auto four = run_kernel(Backend::cpu, c.op, {x}, c.attrs, 4);
      const std::string what = fmt::format("{} {}{}", op_name(c.op), dtype_name(dt), shape_str(c.shape));
      EXPECT_TRUE(one[0].bit_equal(ref[0])) << what;
      EXPECT_TRUE(one[0].bit_equal(four[0])) << what;
      // And the eager view agrees with the kernels.
      const Tensor v = ops::call1(c.op, std::vector<Tensor>{x}, c.attrs);
      EXPECT_TRUE(v.bit_equal(ref[0])) << what;
    }
  }
}

TEST(ShapeViews, LargeCopiesAreThreadCountInvariant) {
  const Tensor x = iota({3, 300, 257});
  const std::vector<std::pair<OpId, Attrs>> cases = {
      {"transpose"_op, {{"perm", Ints{2, 1, 0}}}},
      {"tile"_op, {{"repeats", Ints{1, 2, 3}}}},
      {"pad"_op, {{"pads", Ints{1, 2, 3, 1, 0, 7}}, {"mode", std::string("reflect")}}},
      {"pad"_op, {{"pads", Ints{0, 5, -3, 1, 9, 2}}, {"value", 4.0}}},
  };
  for (const auto& [op, attrs] : cases) {
    const auto one = run_kernel(Backend::cpu, op, {x}, attrs, 1);
    const auto four = run_kernel(Backend::cpu, op, {x}, attrs, 4);
    EXPECT_TRUE(one[0].bit_equal(four[0])) << op_name(op);
  }
  const Tensor big = iota({2, 100000});
  const auto a = run_kernel(Backend::cpu, "concat"_op, {big, big}, {{"axis", int64_t{0}}}, 1);
  const auto b = run_kernel(Backend::cpu, "concat"_op, {big, big}, {{"axis", int64_t{0}}}, 4);
  EXPECT_TRUE(a[0].bit_equal(b[0]));
}

TEST(ShapeIndex, OutOfRangeIndexIsAClearRuntimeError) {
  const Tensor x = iota({5, 3});
  const Tensor idx = Tensor::from_vector<int64_t>({1, 7, -2}, {3});
  for (Backend b : {Backend::cpu, Backend::reference}) {
    BackendScope scope(b);
    try {
      ops::gather(x, idx, 0);
      ADD_FAILURE() << "expected an error on " << backend_name(b);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      const std::string m = e.what();
      EXPECT_NE(m.find("gather"), std::string::npos) << m;
      EXPECT_NE(m.find("index 7"), std::string::npos) << m;
      EXPECT_NE(m.find("size 5"), std::string::npos) << m;
    }
  }
  CompiledFunction f([](std::span<const Tensor> in) { return std::vector<Tensor>{ops::embedding(in[0], in[1])}; });
  EXPECT_THROW(f({x, Tensor::from_vector<int32_t>({0, -6}, {2})}), Error);
  // Negative indices wrap like numpy.take.
  const Tensor ok = ops::gather(x, Tensor::from_vector<int64_t>({-1}, {1}), 0);
  EXPECT_EQ(ok.to_doubles(), ops::slice(x, {4}, {5}).to_doubles());
}

TEST(ShapeOps, SymbolicShapes) {
  const TensorType x(DType::f32, {Dim::symbol("batch"), 4, 3});
  auto infer = [&](OpId op, const Attrs& a) {
    const OpDef& def = op_registry().get(op);
    return def.infer_types(std::span<const TensorType>(&x, 1), def.normalize(a));
  };
  EXPECT_EQ(infer("reshape"_op, {{"shape", Ints{-1, 6}}})[0].str(), "f32[batch*2,6]");
  EXPECT_EQ(infer("flatten"_op, {})[0].str(), "f32[batch,12]");
  EXPECT_EQ(infer("transpose"_op, {})[0].str(), "f32[3,4,batch]");
  EXPECT_EQ(infer("pad"_op, {{"pads", Ints{1, 0, 0, 1, 0, 0}}})[0].str(), "f32[batch+2,4,3]");
  EXPECT_EQ(
      infer("slice"_op, {{"starts", Ints{0, 1}}, {"ends", Ints{std::numeric_limits<int64_t>::max(), 3}}})[0].str(),
      "f32[batch,2,3]");
  EXPECT_THROW(infer("reshape"_op, {{"shape", Ints{2, 6}}}), Error);
}

TEST(ShapeOps, Semantics) {
  // arange length is ceil((stop - start) / step); one_hot counts negative indices from depth.
  EXPECT_EQ(ops::arange(0, 1, 0.25).to_doubles(), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(ops::arange(5, 0, -2, DType::i32).to_doubles(), (std::vector<double>{5, 3, 1}));
  const Tensor oh = ops::one_hot(Tensor::from_vector<int64_t>({0, -1, 3}, {3}), 3);
  EXPECT_EQ(oh.to_doubles(), (std::vector<double>{1, 0, 0, 0, 0, 1, 0, 0, 0}));
  // ONNX ScatterElements with add.
  const Tensor s = ops::scatter(ops::zeros({3}), Tensor::from_vector<int64_t>({0, 2, 0}, {3}),
                                Tensor::from_vector<float>({1, 2, 3}, {3}), 0, "add");
  EXPECT_EQ(s.to_doubles(), (std::vector<double>{4, 0, 2}));
  // Reflect mirrors without repeating the edge; edge repeats it.
  const Tensor v = Tensor::from_vector<float>({1, 2, 3}, {3});
  EXPECT_EQ(ops::pad(v, {2, 2}, "reflect").to_doubles(), (std::vector<double>{3, 2, 1, 2, 3, 2, 1}));
  EXPECT_EQ(ops::pad(v, {2, 1}, "edge").to_doubles(), (std::vector<double>{1, 1, 1, 2, 3, 3}));
  const auto parts = ops::split(iota({5, 2}), {2, 3}, 0);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].shape(), (Shape{3, 2}));
}

// Gradient rules written with ops:: (run eagerly here): adjoints of linear maps, <g, f(x)> == <grad, x>.
TEST(ShapeOps, GradientRulesAreAdjoints) {
  const Tensor x = iota({6, 7});
  struct GCase {
    OpId op;
    Attrs attrs;
  };
  const int64_t kmin = std::numeric_limits<int64_t>::min();
  const std::vector<GCase> cases = {
      {"slice"_op, {{"starts", Ints{1, -1}}, {"ends", Ints{6, kmin}}, {"steps", Ints{2, -3}}}},
      {"slice"_op, {{"starts", Ints{2}}, {"ends", Ints{5}}, {"axes", Ints{1}}}},
      {"transpose"_op, {}},
      {"pad"_op, {{"pads", Ints{1, -2, 0, 3}}}},
      {"reshape"_op, {{"shape", Ints{3, 14}}}},
  };
  for (const auto& c : cases) {
    const OpDef& def = op_registry().get(c.op);
    const Attrs a = def.normalize(c.attrs);
    const Tensor y = ops::call1(c.op, std::vector<Tensor>{x}, a);
    const Tensor g = iota(y.shape()).clone();
    std::vector<Tensor> ins{x}, outs{y}, gs{g};
    const auto grads = def.grad(GradContext{ins, outs, gs, a});
    ASSERT_EQ(grads.size(), 1u);
    ASSERT_EQ(grads[0].shape(), x.shape()) << op_name(c.op);
    double lhs = 0, rhs = 0;
    const auto yv = y.to_doubles(), gv = g.to_doubles(), xv = x.to_doubles(), dv = grads[0].to_doubles();
    for (size_t i = 0; i < yv.size(); ++i) lhs += yv[i] * gv[i];
    for (size_t i = 0; i < xv.size(); ++i) rhs += xv[i] * dv[i];
    EXPECT_DOUBLE_EQ(lhs, rhs) << op_name(c.op);
  }
}

}  // namespace
}  // namespace spore
