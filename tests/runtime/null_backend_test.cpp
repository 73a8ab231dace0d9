// The null backend runs plans without math and counts kernels and bytes, so planning and fusion tests
// need no data. Checks that its counts match the plan exactly.
#include <gtest/gtest.h>

#include "backend/null/null_backend.h"
#include "ops/ops.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"

namespace spore {
namespace {

TEST(NullBackend, CountsEveryKernelAndItsBytes) {
  CompileOptions opts;
  opts.backend = Backend::null;
  const Tensor w = Tensor::from_doubles(std::vector<double>(16 * 8, 0.5), {16, 8}, DType::f32);
  CompiledFunction f(
      [&](std::span<const Tensor> in) {
        Tensor h = ops::relu(ops::matmul(in[0], w));        // [4,16]x[16,8] -> [4,8]
        return std::vector<Tensor>{ops::reduce_sum(h, {1})};  // -> [4]
      },
      opts);
  const Tensor x = Tensor::from_doubles(std::vector<double>(4 * 16, 1.0), {4, 16}, DType::f32);
  Plan& plan = f.plan_for({&x, 1});
  ASSERT_EQ(plan.num_kernels(), 3);
  reset_null_backend_stats();
  f({x});
  const NullBackendStats s = null_backend_stats();
  EXPECT_EQ(s.kernels, 3);
  // matmul reads x (256 B) + w (512 B), writes 128 B; relu reads 128 B, writes 128 B; sum reads 128 B, writes 16 B.
  EXPECT_EQ(s.bytes_read, 256 + 512 + 128 + 128);
  EXPECT_EQ(s.bytes_written, 128 + 128 + 16);
  f({x});
  EXPECT_EQ(null_backend_stats().kernels, 6);
}

TEST(NullBackend, EagerCallsAreCountedToo) {
  const Tensor a = Tensor::from_doubles({1, 2, 3}, {3}, DType::f32);
  reset_null_backend_stats();
  {
    BackendScope scope(Backend::null);
    ops::add(a, a);
  }
  EXPECT_EQ(null_backend_stats().kernels, 1);
  EXPECT_EQ(null_backend_stats().bytes_written, 12);
}

}  // namespace
}  // namespace spore
