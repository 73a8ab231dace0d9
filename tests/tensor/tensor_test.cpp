#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "tensor/tensor.h"

namespace spore {
namespace {

template <typename F>
void expect_error(F&& fn, ErrorCode code, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " / " << n;
  }
}

// 0, 1, 2, ... as f32 in `shape`: element values equal their flat index, which makes views easy to check.
Tensor iota(Shape shape) {
  std::vector<float> v(shape_numel(shape));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::from_vector(v, std::move(shape));
}

TEST(Tensor, EmptyZerosAndShapeHelpers) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::f16);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.dtype(), DType::f16);
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_EQ(t.dim(0), 2);
  EXPECT_THROW(t.dim(3), Error);
  EXPECT_THROW(t.dim(-4), Error);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % tensor_alignment, 0u);
  Tensor z = Tensor::zeros({7, 33}, DType::i32);
  for (int64_t i = 0; i < z.numel(); ++i) ASSERT_EQ(z.item_at(i), 0);
  Tensor s = Tensor::zeros({}, DType::f64);  // rank 0: one element
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item(), 0);
  Tensor e = Tensor::empty({3, 0}, DType::f32);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.nbytes(), 0u);
  expect_error([] { Tensor::empty({2, -1}, DType::f32); }, ErrorCode::shape_mismatch, {"negative", "[2,-1]"});
  EXPECT_FALSE(Tensor().defined());
  expect_error([] { Tensor().raw_data(); }, ErrorCode::invalid_argument, {"undefined"});
  EXPECT_EQ(shape_str(Shape{2, 3}), "[2,3]");
  EXPECT_EQ(shape_str(Shape{}), "[]");
  EXPECT_EQ(contiguous_strides(Shape{2, 0, 3}), (Strides{3, 3, 1}));
}

TEST(Tensor, FromVectorAndDoubles) {
  Tensor a = Tensor::from_vector<int8_t>({-1, 2, -3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(a.dtype(), DType::i8);
  EXPECT_EQ(a.item_at(2), -3);
  EXPECT_EQ(a.data<int8_t>()[5], 6);
  expect_error([&] { a.data<float>(); }, ErrorCode::dtype_mismatch, {"i8", "f32"});
  expect_error([] { Tensor::from_vector<float>({1, 2, 3}, {2, 2}); }, ErrorCode::shape_mismatch, {"3 values", "[2,2]"});
  Tensor h = Tensor::from_vector<f16>({f16(1.5f), f16(-2.0f)}, {2});
  EXPECT_EQ(h.to_doubles(), (std::vector<double>{1.5, -2.0}));
  Tensor b = Tensor::from_vector<bool>({true, false, true}, {3});
  EXPECT_EQ(b.to_doubles(), (std::vector<double>{1, 0, 1}));
  Tensor d = Tensor::from_doubles({0.5, 300, -7.9}, {3}, DType::u8);
  EXPECT_EQ(d.to_doubles(), (std::vector<double>{0, 255, 0}));
  EXPECT_EQ(Tensor::scalar(2.5, DType::bf16).item(), 2.5);
  EXPECT_EQ(Tensor::scalar(2.5, DType::bf16).rank(), 0);
  expect_error([] { Tensor::from_doubles({1, 2}, {3}, DType::f32); }, ErrorCode::shape_mismatch, {"2 values"});
  expect_error([&] { a.item(); }, ErrorCode::invalid_argument, {"[2,3]"});
  expect_error([&] { a.item_at(6); }, ErrorCode::invalid_argument, {"6"});
  EXPECT_NE(a.to_string().find("i8[2,3]"), std::string::npos) << a.to_string();
}

TEST(Tensor, ViewSharesStorage) {
  Tensor a = iota({4, 6});
  Tensor v = a.view({3, -1});
  EXPECT_EQ(v.shape(), (Shape{3, 8}));
  EXPECT_EQ(v.storage(), a.storage());
  v.data<float>()[9] = 100.0f;
  EXPECT_EQ(a.item_at(9), 100.0);
  EXPECT_EQ(a.view({24}).item_at(23), 23.0);
  EXPECT_EQ(a.view({2, 2, -1}).shape(), (Shape{2, 2, 6}));
  expect_error([&] { a.view({5, -1}).numel(); }, ErrorCode::shape_mismatch, {"[4,6]"});
  expect_error([&] { a.view({-1, -1}); }, ErrorCode::shape_mismatch, {"more than one -1"});
  expect_error([&] { a.permute(std::vector<int64_t>{1, 0}).view({24}); }, ErrorCode::invalid_argument, {"not contiguous"});
}

TEST(Tensor, PermuteIndexesCorrectly) {
  Tensor a = iota({2, 3, 4});
  const std::vector<int64_t> perm{2, 0, 1};
  Tensor p = a.permute(perm);
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.storage(), a.storage());
  EXPECT_FALSE(p.is_contiguous());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k) ASSERT_EQ(p.item_at((i * 2 + j) * 3 + k), j * 12 + k * 4 + i);
  EXPECT_EQ(a.permute(std::vector<int64_t>{-1, 0, 1}).shape(), (Shape{4, 2, 3}));
  EXPECT_THROW(a.permute(std::vector<int64_t>{0, 0, 1}), Error);
  EXPECT_THROW(a.permute(std::vector<int64_t>{0, 1}), Error);
  EXPECT_THROW(a.permute(std::vector<int64_t>{0, 1, 3}), Error);
}

TEST(Tensor, SliceWithStepsIndexesCorrectly) {
  Tensor a = iota({5, 9});
  Tensor s = a.slice(1, 1, 8, 3);  // columns 1, 4, 7
  EXPECT_EQ(s.shape(), (Shape{5, 3}));
  EXPECT_EQ(s.storage(), a.storage());
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 3; ++c) ASSERT_EQ(s.item_at(r * 3 + c), r * 9 + 1 + 3 * c);
  Tensor t = s.slice(0, -3, 5, 2);  // rows 2, 4 of the slice
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.item_at(0), 2 * 9 + 1);
  EXPECT_EQ(t.item_at(5), 4 * 9 + 7);
  EXPECT_EQ(a.slice(1, 7, 100).shape(), (Shape{5, 2}));  // stop clamps
  EXPECT_EQ(a.slice(1, 6, 2).shape(), (Shape{5, 0}));    // empty
  EXPECT_EQ(a.slice(-1, 0, 9, 4).shape(), (Shape{5, 3}));
  EXPECT_EQ(a.slice(1, 0, 9, 9).shape(), (Shape{5, 1}));
  expect_error([&] { a.slice(1, 0, 9, 0); }, ErrorCode::invalid_argument, {"step"});
  expect_error([&] { a.slice(2, 0, 1); }, ErrorCode::invalid_argument, {"axis 2"});
  // Writes through a strided view land in the base.
  Tensor col = a.slice(1, 2, 3);
  static_cast<float*>(col.raw_data())[0] = -1.0f;
  EXPECT_EQ(a.item_at(2), -1.0);
}

TEST(Tensor, ExpandBroadcasts) {
  Tensor a = iota({3, 1});
  Tensor e = a.expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Strides{0, 1, 0}));
  EXPECT_EQ(e.storage(), a.storage());
  EXPECT_FALSE(e.is_contiguous());
  for (int64_t i = 0; i < e.numel(); ++i) ASSERT_EQ(e.item_at(i), (i / 4) % 3);
  EXPECT_EQ(a.expand({3, 1}).strides(), a.strides());
  expect_error([&] { a.expand({3, 2, 2}); }, ErrorCode::shape_mismatch, {"[3,1]", "[3,2,2]"});
  expect_error([&] { a.expand({1}); }, ErrorCode::shape_mismatch, {"[3,1]"});
}

TEST(Tensor, ContiguousCopiesNonContiguousViews) {
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32, DType::i8, DType::u8,
                   DType::boolean}) {
    std::vector<double> vals(7 * 33 * 5);
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = dt == DType::boolean ? (i % 3 == 0) : static_cast<double>(i % 97);
    Tensor base = Tensor::from_doubles(vals, {7, 33, 5}, dt);
    const std::vector<Tensor> views = {
        base.permute(std::vector<int64_t>{2, 0, 1}),
        base.slice(1, 3, 30, 4),
        base.slice(0, 1, 7, 2).permute(std::vector<int64_t>{1, 2, 0}),
        base.slice(2, 4, 5).expand({3, 7, 33, 1}),
        base.slice(1, 5, 6),  // a size-1 dim with an odd stride is still contiguous
    };
    for (const Tensor& v : views) {
      Tensor c = v.contiguous();
      ASSERT_TRUE(c.is_contiguous());
      ASSERT_EQ(c.shape(), v.shape());
      ASSERT_EQ(c.strides(), contiguous_strides(v.shape()));
      if (!v.is_contiguous()) {
        EXPECT_NE(c.storage(), v.storage());
      }
      for (int64_t i = 0; i < v.numel(); ++i) ASSERT_EQ(c.item_at(i), v.item_at(i)) << dtype_name(dt) << " " << i;
      EXPECT_TRUE(c.bit_equal(v));
      EXPECT_EQ(c.to_doubles(), v.to_doubles());
      Tensor k = v.clone();
      EXPECT_NE(k.storage(), v.storage());
      EXPECT_TRUE(k.bit_equal(v));
    }
  }
  Tensor a = iota({3, 4});
  EXPECT_EQ(a.contiguous().storage(), a.storage());  // already contiguous: no copy
}

TEST(Tensor, CopyStridedIntoAView) {
  Tensor dst = Tensor::zeros({4, 6}, DType::f32);
  Tensor src = iota({3, 4}).permute(std::vector<int64_t>{1, 0});  // [4,3]
  copy_strided(src, dst.slice(1, 0, 6, 2));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 6; ++c) ASSERT_EQ(dst.item_at(r * 6 + c), c % 2 ? 0.0 : (c / 2) * 4 + r);
  expect_error([&] { copy_strided(src, dst); }, ErrorCode::shape_mismatch, {"[4,3]", "[4,6]"});
}

TEST(Tensor, BitEqual) {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector<float>({1, 4, 2, 5, 3, 6}, {3, 2}).permute(std::vector<int64_t>{1, 0});
  EXPECT_TRUE(a.bit_equal(b));  // strides differ, elements equal
  EXPECT_FALSE(a.bit_equal(a.view({3, 2})));  // shape differs
  EXPECT_FALSE(a.bit_equal(Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3})));  // dtype differs
  Tensor z = Tensor::from_vector<float>({0.0f}, {1}), nz = Tensor::from_vector<float>({-0.0f}, {1});
  EXPECT_FALSE(z.bit_equal(nz));  // bits, not values
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(Tensor::from_vector<float>({nan}, {1}).bit_equal(Tensor::from_vector<float>({nan}, {1})));
  EXPECT_TRUE(Tensor::empty({0, 3}, DType::f32).bit_equal(Tensor::empty({0, 3}, DType::f32)));
}

TEST(Tensor, SymbolicTensorsRefuseDataAccess) {
  Tensor s = Tensor::symbolic({2, 2}, DType::f32, {1, 5, "matmul"});
  EXPECT_TRUE(s.is_symbolic());
  EXPECT_EQ(s.symbolic_ref()->producer, "matmul");
  expect_error([&] { s.raw_data(); }, ErrorCode::invalid_argument, {"symbolic", "matmul"});
  EXPECT_EQ(s.to_string(), "Tensor(f32[2,2], symbolic)");
}

TEST(Storage, WrapCallsRelease) {
  int released = 0;
  float buf[4] = {1, 2, 3, 4};
  {
    auto st = Storage::wrap(buf, sizeof buf, [&] { ++released; });
    Tensor t = Tensor::from_storage(st, {2}, {2}, 1, DType::f32);  // elements 1 and 3
    EXPECT_EQ(t.to_doubles(), (std::vector<double>{2, 4}));
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 1);
}

// The budget is process-wide; these tests restore it.
struct LimitGuard {
  ~LimitGuard() { set_memory_limit(0); }
};

TEST(Storage, MemoryAccountingInUseAndPeak) {
  LimitGuard guard;
  const size_t before = memory_in_use();
  reset_memory_peak();
  EXPECT_EQ(memory_peak(), before);
  {
    Tensor a = Tensor::empty({1000}, DType::u8);  // rounded up to the 64-byte alignment
    EXPECT_EQ(memory_in_use(), before + 1024);
    {
      Tensor b = Tensor::empty({250}, DType::f32);
      EXPECT_EQ(memory_in_use(), before + 2048);
      Tensor v = b.view({25, 10});  // views allocate nothing
      EXPECT_EQ(memory_in_use(), before + 2048);
    }
    EXPECT_EQ(memory_in_use(), before + 1024);
    EXPECT_EQ(memory_peak(), before + 2048);
  }
  EXPECT_EQ(memory_in_use(), before);
  EXPECT_EQ(memory_peak(), before + 2048);
  reset_memory_peak();
  EXPECT_EQ(memory_peak(), before);
}

TEST(Storage, BudgetExceededThrowsOutOfMemoryNamingSizes) {
  LimitGuard guard;
  const size_t base = memory_in_use();
  set_memory_limit(base + (1 << 20));
  EXPECT_EQ(memory_limit(), base + (1 << 20));
  Tensor keep = Tensor::empty({1 << 19}, DType::u8);  // 512 KiB of the 1 MiB headroom
  const std::string limit_str = std::to_string(base + (1 << 20));
  const std::string in_use_str = std::to_string(base + (1 << 19));
  expect_error([] { Tensor::empty({1 << 18}, DType::f32); }, ErrorCode::out_of_memory,
               {"1048576 bytes", limit_str, in_use_str});
  expect_error([] { Storage::allocate(600000, "weights.fc1"); }, ErrorCode::out_of_memory,
               {"600000", "weights.fc1", limit_str});
  EXPECT_EQ(memory_in_use(), base + (1 << 19));  // a refused allocation leaves no trace
  Tensor fits = Tensor::empty({1 << 17}, DType::f32);  // exactly the remaining 512 KiB
  EXPECT_EQ(memory_in_use(), base + (1 << 20));
  set_memory_limit(0);
  Tensor big = Tensor::empty({1 << 20}, DType::f32);  // unlimited again
  EXPECT_EQ(big.numel(), 1 << 20);
}

TEST(Storage, ParseByteSize) {
  EXPECT_EQ(parse_byte_size("1000"), 1000u);
  EXPECT_EQ(parse_byte_size("0"), 0u);
  EXPECT_EQ(parse_byte_size("12B"), 12u);
  EXPECT_EQ(parse_byte_size("512MB"), 512000000u);
  EXPECT_EQ(parse_byte_size("512mb"), 512000000u);
  EXPECT_EQ(parse_byte_size("2GiB"), 2147483648u);
  EXPECT_EQ(parse_byte_size("1.5KB"), 1500u);
  EXPECT_EQ(parse_byte_size("1.5KiB"), 1536u);
  EXPECT_EQ(parse_byte_size("3K"), 3000u);
  EXPECT_EQ(parse_byte_size("64MiB"), 64u << 20);
  EXPECT_EQ(parse_byte_size("1G"), 1000000000u);
  for (const char* bad : {"", "MB", "-1", "12XB", "1.2.3", ".", "1e3", "5 GB x", "99999999999999999999999GB"}) {
    EXPECT_THROW(parse_byte_size(bad), Error) << bad;
  }
  EXPECT_THROW(parse_byte_size(nullptr), Error);
  expect_error([] { parse_byte_size("12XB"); }, ErrorCode::invalid_argument, {"12XB", "XB"});
}

}  // namespace
}  // namespace spore
