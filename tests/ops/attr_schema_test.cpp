// Attribute schemas are data: a string attribute declared with .choice() takes only its listed values, checked once
// by normalize (eager calls, graph building, file loading alike), and the first choice is the default.
#include <gtest/gtest.h>

#include "ops/ops.h"
#include "ops/registry.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

TEST(AttrSchema, ChoicesAreCheckedByNormalize) {
  const OpDef& conv = op_registry().get("conv2d"_op);
  const AttrSpec* spec = conv.find_attr("pad_mode");
  ASSERT_NE(spec, nullptr);
  EXPECT_EQ(spec->choices, (std::vector<std::string>{"pad", "same", "valid"}));
  EXPECT_EQ(conv.normalize({}).s("pad_mode"), "pad");
  EXPECT_EQ(conv.normalize(Attrs{{"pad_mode", std::string("valid")}}).s("pad_mode"), "valid");
  const std::string e = testing::error_of([&] { conv.normalize(Attrs{{"pad_mode", std::string("SAME")}}, "c1"); });
  EXPECT_NE(e.find("[conv2d] (node c1) attribute 'pad_mode' must be one of \"pad\", \"same\", \"valid\"; got \"SAME\""),
            std::string::npos)
      << e;
}

TEST(AttrSchema, EagerCallsRejectAnUnknownChoice) {
  init();
  const std::vector<Tensor> x{Tensor::from_doubles({-1.0, 0.5, 2.0}, {3}, DType::f32)};
  const std::string e = testing::error_of([&] { ops::call("gelu"_op, x, Attrs{{"approximate", std::string("fast")}}); });
  EXPECT_NE(e.find("attribute 'approximate' must be one of \"none\", \"tanh\""), std::string::npos) << e;
  const std::string p = testing::error_of([&] {
    ops::call("pad"_op, x, Attrs{{"pads", std::vector<int64_t>{1, 1}}, {"mode", std::string("wrap")}});
  });
  EXPECT_NE(p.find("attribute 'mode' must be one of \"constant\", \"reflect\", \"edge\""), std::string::npos) << p;
}

}  // namespace
}  // namespace spore
