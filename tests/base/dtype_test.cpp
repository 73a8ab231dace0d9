#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "base/dtype.h"

namespace spore {
namespace {

constexpr DType kAll[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64,
                          DType::i32, DType::i8,  DType::u8,  DType::boolean};

TEST(DType, NamesParseAndPrint) {
  static_assert(std::size(kAll) == num_dtypes);
  const char* names[] = {"f64", "f32", "f16", "bf16", "i64", "i32", "i8", "u8", "bool"};
  for (int i = 0; i < num_dtypes; ++i) {
    EXPECT_EQ(dtype_name(kAll[i]), names[i]);
    ASSERT_TRUE(parse_dtype(names[i]).has_value()) << names[i];
    EXPECT_EQ(*parse_dtype(names[i]), kAll[i]);
    EXPECT_EQ(static_cast<int>(kAll[i]), i);  // the enum order is part of the file format
  }
  for (const char* bad : {"", "float32", "F32", "f32 ", "boolean", "int8", "f8"}) EXPECT_FALSE(parse_dtype(bad)) << bad;
}

TEST(DType, Sizes) {
  const size_t sizes[] = {8, 4, 2, 2, 8, 4, 1, 1, 1};
  for (int i = 0; i < num_dtypes; ++i) EXPECT_EQ(dtype_size(kAll[i]), sizes[i]) << dtype_name(kAll[i]);
  EXPECT_EQ(dtype_size(dtype_v<bool>), sizeof(bool));
}

TEST(DType, Classes) {
  for (DType t : kAll) {
    EXPECT_EQ(is_floating(t), dtypes::floating.has(t));
    EXPECT_EQ(is_integral(t), dtypes::integral.has(t));
    EXPECT_TRUE(dtypes::all.has(t));
    EXPECT_EQ(dtypes::signed_numeric.has(t), t != DType::u8 && t != DType::boolean);
  }
  EXPECT_TRUE(is_low_precision(DType::f16) && is_low_precision(DType::bf16) && !is_low_precision(DType::f32));
  EXPECT_TRUE(DTypeSet{}.empty());
  EXPECT_EQ((DTypeSet{DType::f32} | DTypeSet{DType::i8}).bits, (DTypeSet{DType::i8, DType::f32}).bits);
}

TEST(DType, VisitMapsToTheCxxType) {
  for (DType t : kAll) {
    const DType seen = visit_dtype(t, [](auto v) { return dtype_v<decltype(v)>; });
    EXPECT_EQ(seen, t);
  }
}

double store_load(DType t, double v) {
  alignas(8) unsigned char buf[8] = {0xAB, 0xAB, 0xAB, 0xAB, 0xAB, 0xAB, 0xAB, 0xAB};
  store_from_double(buf, t, v);
  return load_as_double(buf, t);
}

TEST(DType, StoreSaturatesIntegers) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(store_load(DType::i8, 300), 127);
  EXPECT_EQ(store_load(DType::i8, -300), -128);
  EXPECT_EQ(store_load(DType::i8, 127.9), 127);
  EXPECT_EQ(store_load(DType::i8, -128.9), -128);
  EXPECT_EQ(store_load(DType::u8, -5), 0);
  EXPECT_EQ(store_load(DType::u8, 256), 255);
  EXPECT_EQ(store_load(DType::u8, 255.5), 255);
  EXPECT_EQ(store_load(DType::i32, 1e10), 2147483647.0);
  EXPECT_EQ(store_load(DType::i32, -1e10), -2147483648.0);
  EXPECT_EQ(store_load(DType::i32, inf), 2147483647.0);
  EXPECT_EQ(store_load(DType::i32, -inf), -2147483648.0);
  int64_t i64 = 0;
  store_from_double(&i64, DType::i64, 1e30);
  EXPECT_EQ(i64, std::numeric_limits<int64_t>::max());
  store_from_double(&i64, DType::i64, -1e30);
  EXPECT_EQ(i64, std::numeric_limits<int64_t>::min());
  store_from_double(&i64, DType::i64, std::ldexp(1.0, 63));  // one past the max
  EXPECT_EQ(i64, std::numeric_limits<int64_t>::max());
  store_from_double(&i64, DType::i64, std::ldexp(1.0, 63) - 1024);  // the largest double below 2^63
  EXPECT_EQ(i64, std::numeric_limits<int64_t>::max() - 1023);
}

TEST(DType, StoreTruncatesTowardZero) {
  EXPECT_EQ(store_load(DType::i32, 3.7), 3);
  EXPECT_EQ(store_load(DType::i32, -3.7), -3);
  EXPECT_EQ(store_load(DType::i8, -0.9), 0);
  EXPECT_EQ(store_load(DType::u8, 0.99), 0);
}

TEST(DType, NanStoresZeroInIntegers) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType t : {DType::i64, DType::i32, DType::i8, DType::u8}) EXPECT_EQ(store_load(t, nan), 0) << dtype_name(t);
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16}) EXPECT_TRUE(std::isnan(store_load(t, nan)));
}

TEST(DType, BoolAndFloatStores) {
  EXPECT_EQ(store_load(DType::boolean, 0.0), 0);
  EXPECT_EQ(store_load(DType::boolean, -0.0), 0);
  EXPECT_EQ(store_load(DType::boolean, 0.25), 1);
  EXPECT_EQ(store_load(DType::boolean, -7), 1);
  unsigned char b = 0;
  store_from_double(&b, DType::boolean, 42);
  EXPECT_EQ(b, 1);  // always 0/1, never another byte value
  EXPECT_EQ(store_load(DType::f16, 1e6), std::numeric_limits<double>::infinity());
  EXPECT_EQ(store_load(DType::f16, 0.1), static_cast<double>(static_cast<float>(f16(0.1f))));
  EXPECT_EQ(store_load(DType::bf16, 1e39), std::numeric_limits<double>::infinity());
  EXPECT_EQ(store_load(DType::f32, 0.1), static_cast<double>(0.1f));
  EXPECT_EQ(store_load(DType::f64, 0.1), 0.1);
}

TEST(DType, RoundTripsRepresentableValues) {
  for (DType t : kAll) {
    for (double v : {0.0, 1.0, 2.0, 100.0}) EXPECT_EQ(store_load(t, v), t == DType::boolean ? (v != 0) : v) << dtype_name(t);
  }
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::i64, DType::i32, DType::i8}) {
    EXPECT_EQ(store_load(t, -3.0), -3.0) << dtype_name(t);
  }
  EXPECT_EQ(store_load(DType::i64, -9007199254740992.0), -9007199254740992.0);
}

}  // namespace
}  // namespace spore
