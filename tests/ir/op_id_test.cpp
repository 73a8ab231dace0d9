// Op ids are FNV-1a hashes of op names (src/ir/op_id.h): the same in every build, dense indices for tables, and
// a custom name whose hash is taken is refused instead of silently sharing an id.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "base/error.h"
#include "ir/op_id.h"
#include "test_util.h"

namespace spore {
namespace {

TEST(OpId, IsTheHashOfTheName) {
  static_assert("relu"_op == op_id("relu"));
  // FNV-1a 32-bit of "relu", computed by hand from the published constants: stable across builds and machines.
  uint32_t h = 2166136261u;
  for (char c : std::string("relu")) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  EXPECT_EQ(static_cast<uint32_t>("relu"_op), h);
  EXPECT_NE("relu"_op, "gelu"_op);
}

TEST(OpId, NamesAndDenseIndicesRoundTrip) {
  std::set<uint32_t> ids;
  for (int i = 0; i < num_builtin_ops(); ++i) {
    const OpId id = op_at(i);
    EXPECT_TRUE(is_builtin_op(id));
    EXPECT_EQ(op_index(id), i);
    const auto back = op_from_name(op_name(id));
    ASSERT_TRUE(back.has_value()) << op_name(id);
    EXPECT_EQ(*back, id);
    ids.insert(static_cast<uint32_t>(id));
  }
  EXPECT_EQ(static_cast<int>(ids.size()), num_builtin_ops());
  EXPECT_EQ(op_index("input"_op), 0);  // op_list.inc's order
  EXPECT_FALSE(op_from_name("no_such_op").has_value());
  EXPECT_EQ(op_index(op_id("no_such_op")), -1);
  EXPECT_EQ(op_name(op_id("no_such_op")), "<unknown op>");
  EXPECT_FALSE(is_builtin_op(op_id("no_such_op")));
}

TEST(OpId, CustomNamesJoinTheTableAndCollisionsAreRefused) {
  const int before = num_ops();
  const OpId a = register_op_name("costarring");
  EXPECT_EQ(a, op_id("costarring"));
  EXPECT_FALSE(is_builtin_op(a));
  EXPECT_EQ(op_index(a), before);
  EXPECT_EQ(op_at(before), a);
  EXPECT_EQ(op_name(a), "costarring");
  EXPECT_EQ(num_ops(), before + 1);
  EXPECT_NE(testing::error_of([] { register_op_name("costarring"); }).find("already registered"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { register_op_name("relu"); }).find("already registered"), std::string::npos);
  // "costarring" and "liquid" are a known FNV-1a 32-bit collision.
  ASSERT_EQ(op_id("costarring"), op_id("liquid"));
  const std::string e = testing::error_of([] { register_op_name("liquid"); });
  EXPECT_NE(e.find("hashes to the id of custom op 'costarring'"), std::string::npos) << e;
  EXPECT_FALSE(op_from_name("liquid").has_value());  // the colliding name does not alias the other op
  EXPECT_EQ(num_ops(), before + 1);
}

}  // namespace
}  // namespace spore
