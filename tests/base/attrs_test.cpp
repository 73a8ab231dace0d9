#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "base/attrs.h"
#include "base/error.h"

namespace spore {
namespace {

// Runs fn, expecting a spore::Error whose message contains every one of `needles`.
template <typename F>
void expect_error(F&& fn, ErrorCode code, std::initializer_list<const char*> needles) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " / " << n;
  }
}

TEST(Attrs, SetGetAndOverwrite) {
  Attrs a{{"axis", int64_t{1}}, {"alpha", 0.5}, {"keepdims", true}, {"mode", std::string("same")},
          {"to", DType::bf16}, {"perm", std::vector<int64_t>{2, 0, 1}}, {"scales", std::vector<double>{1.5, 2}}};
  EXPECT_EQ(a.i("axis"), 1);
  EXPECT_EQ(a.f("alpha"), 0.5);
  EXPECT_TRUE(a.b("keepdims"));
  EXPECT_EQ(a.s("mode"), "same");
  EXPECT_EQ(a.dtype("to"), DType::bf16);
  EXPECT_EQ(a.ints("perm"), (std::vector<int64_t>{2, 0, 1}));
  EXPECT_EQ(a.floats("scales"), (std::vector<double>{1.5, 2.0}));
  EXPECT_TRUE(a.has("axis"));
  EXPECT_FALSE(a.has("axes"));
  EXPECT_EQ(a.find("nope"), nullptr);
  a.set("axis", int64_t{-1});
  EXPECT_EQ(a.i("axis"), -1);
  EXPECT_EQ(a.items().size(), 7u);
  for (size_t i = 1; i < a.items().size(); ++i) EXPECT_LT(a.items()[i - 1].first, a.items()[i].first);  // sorted
}

TEST(Attrs, IntWidensToFloat) {
  Attrs a{{"alpha", int64_t{2}}, {"scales", std::vector<int64_t>{1, 3}}};
  EXPECT_EQ(a.f("alpha"), 2.0);
  EXPECT_EQ(a.floats("scales"), (std::vector<double>{1.0, 3.0}));
  expect_error([&] { a.i("scales"); }, ErrorCode::invalid_argument, {"scales", "int", "int list"});
}

TEST(Attrs, KindErrorsNameTheAttribute) {
  Attrs a{{"axis", int64_t{1}}, {"alpha", 0.5}, {"mode", std::string("x")}};
  expect_error([&] { a.i("alpha"); }, ErrorCode::invalid_argument, {"'alpha'", "must be int", "got float"});
  expect_error([&] { a.b("axis"); }, ErrorCode::invalid_argument, {"'axis'", "bool"});
  expect_error([&] { a.s("axis"); }, ErrorCode::invalid_argument, {"'axis'", "string"});
  expect_error([&] { a.dtype("mode"); }, ErrorCode::invalid_argument, {"'mode'", "dtype"});
  expect_error([&] { a.ints("mode"); }, ErrorCode::invalid_argument, {"'mode'", "int list"});
  expect_error([&] { a.f("mode"); }, ErrorCode::invalid_argument, {"'mode'", "float"});
  expect_error([&] { a.floats("axis"); }, ErrorCode::invalid_argument, {"'axis'", "float list"});
  expect_error([&] { a.i("missing_one"); }, ErrorCode::invalid_argument, {"missing", "'missing_one'"});
}

TEST(Attrs, EqualityAndHashAreCanonical) {
  Attrs a{{"b", int64_t{1}}, {"a", 2.0}};
  Attrs b;
  b.set("a", 2.0).set("b", int64_t{1});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  Attrs c{{"b", 1.0}, {"a", 2.0}};  // same text-ish value, different kind
  EXPECT_FALSE(a == c);
  EXPECT_NE(a.hash(), c.hash());
}

TEST(Attrs, FormatValues) {
  EXPECT_EQ(format_attr_value(int64_t{-3}), "-3");
  EXPECT_EQ(format_attr_value(1.0), "1.0");
  EXPECT_EQ(format_attr_value(-0.0), "-0.0");
  EXPECT_EQ(format_attr_value(0.1), "0.1");
  EXPECT_EQ(format_attr_value(100.0), "100.0");
  EXPECT_EQ(format_attr_value(1e300), "1e+300");
  EXPECT_EQ(format_attr_value(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_attr_value(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(format_attr_value(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(format_attr_value(true), "true");
  EXPECT_EQ(format_attr_value(DType::i8), "i8");
  EXPECT_EQ(format_attr_value(std::string("a\"b\\c\nd\x01")), "\"a\\\"b\\\\c\\nd\\x01\"");
  EXPECT_EQ(format_attr_value(std::vector<int64_t>{1, -2}), "[1,-2]");
  EXPECT_EQ(format_attr_value(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(format_attr_value(std::vector<double>{1, 0.5}), "[1.0,0.5]");
  EXPECT_EQ(format_attr_value(std::vector<double>{}), "[:f]");
  EXPECT_EQ(format_attrs(Attrs{}), "");
  EXPECT_EQ(format_attrs(Attrs{{"keepdims", true}, {"axis", int64_t{1}}}), "{axis=1, keepdims=true}");
}

// Significant digits of a decimal string, ignoring sign, exponent, leading and trailing zeros.
int significant_digits(const std::string& s) {
  std::string m = s.substr(0, s.find_first_of("eE"));
  std::string digits;
  for (char c : m) if (c >= '0' && c <= '9') digits += c;
  const size_t b = digits.find_first_not_of('0');
  if (b == std::string::npos) return 1;
  const size_t e = digits.find_last_not_of('0');
  return static_cast<int>(e - b + 1);
}

TEST(Attrs, FloatFormatRoundTripsExactlyAndIsShortest) {
  uint64_t s = 0x243f6a8885a308d3ull;
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t bits = s ^ (s >> 29);
    if (i % 4 == 1) bits = std::bit_cast<uint64_t>(static_cast<double>(static_cast<float>(std::bit_cast<double>(bits))));
    if (i % 4 == 2) bits = std::bit_cast<uint64_t>(static_cast<double>(static_cast<int64_t>(bits >> 40)) / 1000.0);
    const double d = std::bit_cast<double>(bits);
    if (!std::isfinite(d)) continue;
    const std::string txt = format_attr_value(d);
    ASSERT_NE(txt.find_first_of(".eE"), std::string::npos) << txt;  // re-parses as a float
    const double back = std::strtod(txt.c_str(), nullptr);
    ASSERT_EQ(std::bit_cast<uint64_t>(back), bits) << txt;
    // Shortest: no precision below the printed digit count round-trips.
    int p = 1;
    char buf[64];
    for (; p <= 17; ++p) {
      std::snprintf(buf, sizeof buf, "%.*g", p, d);
      if (std::strtod(buf, nullptr) == d) break;
    }
    ASSERT_EQ(significant_digits(txt), p) << txt << " vs " << buf;
    ++checked;
  }
  EXPECT_GT(checked, 150000);
}

}  // namespace
}  // namespace spore
