// recognize_patterns (passes/patterns.cpp): each pattern as a Before/Expected text-IR pair (the pass, then DCE),
// the cases that must stay (an intermediate used elsewhere, wrong axes, non-constant or wrongly shaped gamma,
// wrong constants, training graphs), and numerics: a graph full of written-out patterns compiled with and
// without the pass gives the same outputs within per-dtype tolerances, with fewer kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <filesystem>

#include "base/rng.h"
#include "io/npy.h"
#include "io/onnx/onnx.h"
#include "ops/graph_ops.h"
#include "passes/pass.h"
#include "runtime/plan.h"
#include "test_util.h"

namespace spore {
namespace {

// `hex"..."` of f32 values, as the printer writes constants.
std::string hexf(std::initializer_list<float> vals) {
  std::string s = "hex\"";
  for (float f : vals) {
    unsigned char b[4];
    std::memcpy(b, &f, 4);
    for (unsigned char c : b) s += fmt::format("{:02x}", c);
  }
  return s + "\"";
}

std::string recognized(const std::string& before, bool inference = true) {
  auto g = parse_graph(before);
  verify_graph(*g);
  PassManager pm(PassOptions{.verify_each = true, .inference = inference});
  pm.add(make_recognize_patterns_pass()).add(make_dce_pass());
  pm.run(*g);
  return print_graph(*g);
}

void expect_unchanged(const std::string& text, bool inference = true) {
  EXPECT_EQ(recognized(text, inference), print_graph(*parse_graph(text)));
}

// nn.LayerNorm as torch's opset-14 export writes it (Pow(d, 2) imported as d*d), with names.
std::string torch_layer_norm(const std::string& gamma_decl = "  %gamma = constant() : f32[4] = " +
                                                              hexf({1.5f, -2.f, 0.5f, 3.f}) + "\n") {
  return "graph @g(%x: f32[2,3,4], %gi: f32[4]) {\n"
         "  %m = reduce_mean(%x) {axes=[2], keepdims=true} : f32[2,3,1] !name=\"norm1/ReduceMean\"\n"
         "  %d = sub(%x, %m) : f32[2,3,4]\n"
         "  %p = mul(%d, %d) : f32[2,3,4] !name=\"norm1/Pow\"\n"
         "  %v = reduce_mean(%p) {axes=[2], keepdims=true} : f32[2,3,1]\n"
         "  %eps = constant() : f32[] = " + hexf({0.0009765625f}) + "\n"
         "  %ve = add(%v, %eps) : f32[2,3,1]\n"
         "  %s = sqrt(%ve) : f32[2,3,1]\n"
         "  %n = div(%d, %s) : f32[2,3,4] !name=\"norm1/Div\"\n" +
         gamma_decl +
         "  %gm = mul(%n, %gamma) : f32[2,3,4]\n"
         "  %beta = constant() : f32[4] = " + hexf({0.25f, 0.f, -1.f, 2.f}) + "\n"
         "  %y = add(%beta, %gm) : f32[2,3,4] !name=\"norm1/Add_1\"\n"
         "  %z = relu(%y) : f32[2,3,4]\n"
         "  return %z\n"
         "}\n";
}

TEST(RecognizePatterns, TorchLayerNormBecomesLayerNormKeepingNames) {
  EXPECT_EQ(recognized(torch_layer_norm()),
            "graph @g(%x: f32[2,3,4], %gi: f32[4]) {\n"
            "  %gamma = constant() : f32[4] = " + hexf({1.5f, -2.f, 0.5f, 3.f}) + "\n"
            "  %beta = constant() : f32[4] = " + hexf({0.25f, 0.f, -1.f, 2.f}) + "\n"
            "  %y = layer_norm(%x, %gamma, %beta) {axis=-1, epsilon=0.0009765625} : f32[2,3,4] !name=\"norm1/Add_1\"\n"
            "  %z = relu(%y) : f32[2,3,4]\n"
            "  return %z\n"
            "}\n");
}

TEST(RecognizePatterns, LayerNormRsqrtPowAndNoAffine) {
  // d * rsqrt(eps + v) with pow(d, 2), axes=[-1], the product and the sum in the other order.
  EXPECT_EQ(recognized("graph @g(%x: f64[3,5]) {\n"
                       "  %m = reduce_mean(%x) {axes=[-1], keepdims=true} : f64[3,1]\n"
                       "  %d = sub(%x, %m) : f64[3,5]\n"
                       "  %two = constant() : f64[] = hex\"0000000000000040\"\n"
                       "  %p = pow(%d, %two) : f64[3,5]\n"
                       "  %v = reduce_mean(%p) {axes=[1], keepdims=true} : f64[3,1]\n"
                       "  %eps = constant() : f64[] = hex\"000000000000d03f\"\n"
                       "  %ve = add(%eps, %v) : f64[3,1]\n"
                       "  %r = rsqrt(%ve) : f64[3,1]\n"
                       "  %y = mul(%r, %d) : f64[3,5]\n"
                       "  return %y\n"
                       "}\n"),
            "graph @g(%x: f64[3,5]) {\n"
            "  %y = layer_norm(%x) {axis=-1, epsilon=0.25} : f64[3,5]\n"
            "  return %y\n"
            "}\n");
}

TEST(RecognizePatterns, LayerNormBetaOnlyGetsUnitWeightAndGammaOfLeadingOnesIsFlattened) {
  // + beta without * gamma: layer_norm needs a weight before a bias, so a weight of ones is made.
  EXPECT_EQ(recognized("graph @g(%x: f32[2,2]) {\n"
                       "  %m = reduce_mean(%x) {axes=[1], keepdims=true} : f32[2,1]\n"
                       "  %d = sub(%x, %m) : f32[2,2]\n"
                       "  %p = mul(%d, %d) : f32[2,2]\n"
                       "  %v = reduce_mean(%p) {axes=[1], keepdims=true} : f32[2,1]\n"
                       "  %eps = constant() : f32[1] = " + hexf({0.5f}) + "\n"
                       "  %ve = add(%v, %eps) : f32[2,1]\n"
                       "  %s = sqrt(%ve) : f32[2,1]\n"
                       "  %c = reciprocal(%s) : f32[2,1]\n"
                       "  %n = mul(%d, %c) : f32[2,2]\n"
                       "  %beta = constant() : f32[1,2] = " + hexf({3.f, 4.f}) + "\n"
                       "  %y = add(%n, %beta) : f32[2,2] !name=\"ln\"\n"
                       "  return %y\n"
                       "}\n"),
            "graph @g(%x: f32[2,2]) {\n"
            "  %y.weight = constant() : f32[2] !name=\"y.weight\" = " + hexf({1.f, 1.f}) + "\n"
            "  %y.bias = constant() : f32[2] !name=\"y.bias\" = " + hexf({3.f, 4.f}) + "\n"
            "  %y = layer_norm(%x, %y.weight, %y.bias) {axis=-1, epsilon=0.5} : f32[2,2] !name=\"ln\"\n"
            "  return %y\n"
            "}\n");
}

TEST(RecognizePatterns, LayerNormOverTwoTrailingAxes) {
  EXPECT_EQ(recognized("graph @g(%x: f32[2,3,4]) {\n"
                       "  %m = reduce_mean(%x) {axes=[2,1], keepdims=true} : f32[2,1,1]\n"
                       "  %d = sub(%x, %m) : f32[2,3,4]\n"
                       "  %p = mul(%d, %d) : f32[2,3,4]\n"
                       "  %v = reduce_mean(%p) {axes=[1,2], keepdims=true} : f32[2,1,1]\n"
                       "  %eps = constant() : f32[] = " + hexf({0.5f}) + "\n"
                       "  %ve = add(%v, %eps) : f32[2,1,1]\n"
                       "  %s = sqrt(%ve) : f32[2,1,1]\n"
                       "  %y = div(%d, %s) : f32[2,3,4]\n"
                       "  return %y\n"
                       "}\n"),
            "graph @g(%x: f32[2,3,4]) {\n"
            "  %y = layer_norm(%x) {axis=-2, epsilon=0.5} : f32[2,3,4]\n"
            "  return %y\n"
            "}\n");
}

TEST(RecognizePatterns, LayerNormLeftAloneWhenItDoesNotMatch) {
  // The variance is also a graph output.
  {
    std::string t = torch_layer_norm();
    t.replace(t.find("return %z"), 9, "return %z, %v");
    expect_unchanged(t);
  }
  // Training graphs (inference off) keep the written-out ops.
  expect_unchanged(torch_layer_norm(), false);
  // Reductions over a middle axis: not trailing.
  expect_unchanged("graph @g(%x: f32[2,3,4]) {\n"
                   "  %m = reduce_mean(%x) {axes=[1], keepdims=true} : f32[2,1,4]\n"
                   "  %d = sub(%x, %m) : f32[2,3,4]\n"
                   "  %p = mul(%d, %d) : f32[2,3,4]\n"
                   "  %v = reduce_mean(%p) {axes=[1], keepdims=true} : f32[2,1,4]\n"
                   "  %eps = constant() : f32[] = " + hexf({0.5f}) + "\n"
                   "  %ve = add(%v, %eps) : f32[2,1,4]\n"
                   "  %s = sqrt(%ve) : f32[2,1,4]\n"
                   "  %y = div(%d, %s) : f32[2,3,4]\n"
                   "  return %y\n"
                   "}\n");
  // eps is not one scalar, and keepdims is off.
  expect_unchanged("graph @g(%x: f32[2,2]) {\n"
                   "  %m = reduce_mean(%x) {axes=[1], keepdims=true} : f32[2,1]\n"
                   "  %d = sub(%x, %m) : f32[2,2]\n"
                   "  %p = mul(%d, %d) : f32[2,2]\n"
                   "  %v = reduce_mean(%p) {axes=[1], keepdims=true} : f32[2,1]\n"
                   "  %eps = constant() : f32[2,1] = " + hexf({0.5f, 0.25f}) + "\n"
                   "  %ve = add(%v, %eps) : f32[2,1]\n"
                   "  %s = sqrt(%ve) : f32[2,1]\n"
                   "  %y = div(%d, %s) : f32[2,2]\n"
                   "  %v2 = reduce_mean(%p) {axes=[1], keepdims=false} : f32[2]\n"
                   "  %eps2 = constant() : f32[] = " + hexf({0.5f}) + "\n"
                   "  %ve2 = add(%v2, %eps2) : f32[2]\n"
                   "  %s2 = sqrt(%ve2) : f32[2]\n"
                   "  %y2 = div(%x, %s2) : f32[2,2]\n"
                   "  return %y, %y2\n"
                   "}\n");
}

TEST(RecognizePatterns, LayerNormTakesOnlyConstantGammaOfTheFeatureShape) {
  // gamma is a graph input: the norm is recognized, the scale stays a mul (and so does + beta after it).
  std::string t = torch_layer_norm("");
  t.replace(t.find("mul(%n, %gamma)"), 15, "mul(%n, %gi)");
  EXPECT_EQ(recognized(t),
            "graph @g(%x: f32[2,3,4], %gi: f32[4]) {\n"
            "  %beta = constant() : f32[4] = " + hexf({0.25f, 0.f, -1.f, 2.f}) + "\n"
            "  %n = layer_norm(%x) {axis=-1, epsilon=0.0009765625} : f32[2,3,4] !name=\"norm1/Div\"\n"
            "  %gm = mul(%n, %gi) : f32[2,3,4]\n"
            "  %y = add(%beta, %gm) : f32[2,3,4] !name=\"norm1/Add_1\"\n"
            "  %z = relu(%y) : f32[2,3,4]\n"
            "  return %z\n"
            "}\n");
  // gamma [3,1] scales along axis 1, not the normalized axis: not absorbed.
  const std::string g31 = "  %gamma = constant() : f32[3,1] = " + hexf({1.f, 2.f, 3.f}) + "\n";
  const std::string out = recognized(torch_layer_norm(g31));
  EXPECT_NE(out.find("layer_norm(%x) {axis=-1"), std::string::npos) << out;
  EXPECT_NE(out.find("mul(%n, %gamma)"), std::string::npos) << out;
}

TEST(RecognizePatterns, LayerNormWithUsedCenteredValueFallsBackToRmsNormOfIt) {
  // d = x - mean(x) is also an output, so x - mean stays; what is left, d / sqrt(mean(d*d) + eps), is
  // exactly rms_norm(d).
  std::string t = torch_layer_norm();
  t.replace(t.find("return %z"), 9, "return %z, %d");
  const std::string out = recognized(t);
  EXPECT_NE(out.find("%d = sub(%x, %m)"), std::string::npos) << out;
  EXPECT_NE(out.find("%gm = rms_norm(%d, %gamma) {axis=-1, epsilon=0.0009765625}"), std::string::npos) << out;
  EXPECT_EQ(out.find("layer_norm"), std::string::npos) << out;
}

TEST(RecognizePatterns, RmsNormForms) {
  EXPECT_EQ(recognized("graph @g(%x: f32[2,4]) {\n"
                       "  %p = mul(%x, %x) : f32[2,4]\n"
                       "  %v = reduce_mean(%p) {axes=[-1], keepdims=true} : f32[2,1]\n"
                       "  %eps = constant() : f32[] = " + hexf({0.125f}) + "\n"
                       "  %ve = add(%v, %eps) : f32[2,1]\n"
                       "  %s = sqrt(%ve) : f32[2,1]\n"
                       "  %c = reciprocal(%s) : f32[2,1]\n"
                       "  %n = mul(%x, %c) : f32[2,4]\n"
                       "  %w = constant() : f32[4] = " + hexf({1.f, 2.f, 3.f, 4.f}) + "\n"
                       "  %y = mul(%w, %n) : f32[2,4] !name=\"rms\"\n"
                       "  %p2 = mul(%y, %y) : f32[2,4]\n"
                       "  %v2 = reduce_mean(%p2) {axes=[1], keepdims=true} : f32[2,1]\n"
                       "  %ve2 = add(%eps, %v2) : f32[2,1]\n"
                       "  %r2 = rsqrt(%ve2) : f32[2,1]\n"
                       "  %y2 = mul(%r2, %y) : f32[2,4]\n"
                       "  %p3 = mul(%y2, %y2) : f32[2,4]\n"
                       "  %v3 = reduce_mean(%p3) {axes=[1], keepdims=true} : f32[2,1]\n"
                       "  %ve3 = add(%v3, %eps) : f32[2,1]\n"
                       "  %s3 = sqrt(%ve3) : f32[2,1]\n"
                       "  %y3 = div(%y2, %s3) : f32[2,4]\n"
                       "  return %y3\n"
                       "}\n"),
            "graph @g(%x: f32[2,4]) {\n"
            "  %w = constant() : f32[4] = " + hexf({1.f, 2.f, 3.f, 4.f}) + "\n"
            "  %y = rms_norm(%x, %w) {axis=-1, epsilon=0.125} : f32[2,4] !name=\"rms\"\n"
            "  %y2 = rms_norm(%y) {axis=-1, epsilon=0.125} : f32[2,4]\n"
            "  %y3 = rms_norm(%y2) {axis=-1, epsilon=0.125} : f32[2,4]\n"
            "  return %y3\n"
            "}\n");
  // x*x over one value and the core over another: no match.
  expect_unchanged("graph @g(%x: f32[2,4], %u: f32[2,4]) {\n"
                   "  %p = mul(%u, %u) : f32[2,4]\n"
                   "  %v = reduce_mean(%p) {axes=[-1], keepdims=true} : f32[2,1]\n"
                   "  %eps = constant() : f32[] = " + hexf({0.125f}) + "\n"
                   "  %ve = add(%v, %eps) : f32[2,1]\n"
                   "  %r = rsqrt(%ve) : f32[2,1]\n"
                   "  %y = mul(%x, %r) : f32[2,4]\n"
                   "  return %y\n"
                   "}\n");
}

TEST(RecognizePatterns, Softmax) {
  EXPECT_EQ(recognized("graph @g(%x: f32[2,3,4]) {\n"
                       "  %m = reduce_max(%x) {axes=[-1], keepdims=true} : f32[2,3,1]\n"
                       "  %d = sub(%x, %m) : f32[2,3,4]\n"
                       "  %e = exp(%d) : f32[2,3,4]\n"
                       "  %s = reduce_sum(%e) {axes=[2], keepdims=true} : f32[2,3,1]\n"
                       "  %y = div(%e, %s) : f32[2,3,4] !name=\"sm\"\n"
                       "  %e2 = exp(%y) : f32[2,3,4]\n"
                       "  %s2 = reduce_sum(%e2) {axes=[1], keepdims=true} : f32[2,1,4]\n"
                       "  %y2 = div(%e2, %s2) : f32[2,3,4]\n"
                       "  return %y2\n"
                       "}\n"),
            "graph @g(%x: f32[2,3,4]) {\n"
            "  %y = softmax(%x) {axis=2} : f32[2,3,4] !name=\"sm\"\n"
            "  %y2 = softmax(%y) {axis=1} : f32[2,3,4]\n"
            "  return %y2\n"
            "}\n");
  // exp(x) also used elsewhere; max and sum over different axes (then only the exp/sum part is softmax).
  expect_unchanged("graph @g(%x: f32[2,3]) {\n"
                   "  %e = exp(%x) : f32[2,3]\n"
                   "  %s = reduce_sum(%e) {axes=[1], keepdims=true} : f32[2,1]\n"
                   "  %y = div(%e, %s) : f32[2,3]\n"
                   "  return %y, %e\n"
                   "}\n");
  EXPECT_EQ(recognized("graph @g(%x: f32[2,3]) {\n"
                       "  %m = reduce_max(%x) {axes=[0], keepdims=true} : f32[1,3]\n"
                       "  %d = sub(%x, %m) : f32[2,3]\n"
                       "  %e = exp(%d) : f32[2,3]\n"
                       "  %s = reduce_sum(%e) {axes=[1], keepdims=true} : f32[2,1]\n"
                       "  %y = div(%e, %s) : f32[2,3]\n"
                       "  return %y\n"
                       "}\n"),
            "graph @g(%x: f32[2,3]) {\n"
            "  %m = reduce_max(%x) {axes=[0], keepdims=true} : f32[1,3]\n"
            "  %d = sub(%x, %m) : f32[2,3]\n"
            "  %y = softmax(%d) {axis=1} : f32[2,3]\n"
            "  return %y\n"
            "}\n");
}

TEST(RecognizePatterns, GeluErfForms) {
  const std::string half = hexf({0.5f}), one = hexf({1.f}), sqrt2 = hexf({1.41421356f}),
                    inv_sqrt2 = hexf({0.70710678f});
  EXPECT_EQ(recognized("graph @g(%x: f32[2,3]) {\n"
                       "  %c2 = constant() : f32[] = " + sqrt2 + "\n"
                       "  %one = constant() : f32[] = " + one + "\n"
                       "  %half = constant() : f32[] = " + half + "\n"
                       "  %inv = constant() : f32[] = " + inv_sqrt2 + "\n"
                       // torch's export: ((x * (erf(x / sqrt2) + 1)) * 0.5
                       "  %a = div(%x, %c2) : f32[2,3]\n"
                       "  %b = erf(%a) : f32[2,3]\n"
                       "  %c = add(%b, %one) : f32[2,3]\n"
                       "  %d = mul(%x, %c) : f32[2,3]\n"
                       "  %y = mul(%d, %half) : f32[2,3] !name=\"gelu1\"\n"
                       // 0.5 * y first, then * (1 + erf(y * 1/sqrt2))
                       "  %h = mul(%half, %y) : f32[2,3]\n"
                       "  %a2 = mul(%inv, %y) : f32[2,3]\n"
                       "  %b2 = erf(%a2) : f32[2,3]\n"
                       "  %c3 = add(%one, %b2) : f32[2,3]\n"
                       "  %y2 = mul(%c3, %h) : f32[2,3]\n"
                       "  return %y2\n"
                       "}\n"),
            "graph @g(%x: f32[2,3]) {\n"
            "  %y = gelu(%x) {approximate=\"none\"} : f32[2,3] !name=\"gelu1\"\n"
            "  %y2 = gelu(%y) {approximate=\"none\"} : f32[2,3]\n"
            "  return %y2\n"
            "}\n");
  // 0.6 instead of 0.5; erf of another value.
  expect_unchanged("graph @g(%x: f32[2,3], %u: f32[2,3]) {\n"
                   "  %c2 = constant() : f32[] = " + sqrt2 + "\n"
                   "  %one = constant() : f32[] = " + one + "\n"
                   "  %k = constant() : f32[] = " + hexf({0.6f}) + "\n"
                   "  %a = div(%x, %c2) : f32[2,3]\n"
                   "  %b = erf(%a) : f32[2,3]\n"
                   "  %c = add(%b, %one) : f32[2,3]\n"
                   "  %d = mul(%x, %c) : f32[2,3]\n"
                   "  %y = mul(%d, %k) : f32[2,3]\n"
                   "  %half = constant() : f32[] = " + half + "\n"
                   "  %a2 = div(%u, %c2) : f32[2,3]\n"
                   "  %b2 = erf(%a2) : f32[2,3]\n"
                   "  %c3 = add(%b2, %one) : f32[2,3]\n"
                   "  %d2 = mul(%x, %c3) : f32[2,3]\n"
                   "  %y2 = mul(%d2, %half) : f32[2,3]\n"
                   "  return %y, %y2\n"
                   "}\n");
}

TEST(RecognizePatterns, GeluTanhFormsAndSilu) {
  const std::string k = hexf({0.044715f}), c = hexf({0.7978845608f});
  EXPECT_EQ(recognized("graph @g(%x: f32[4]) {\n"
                       "  %half = constant() : f32[] = " + hexf({0.5f}) + "\n"
                       "  %one = constant() : f32[] = " + hexf({1.f}) + "\n"
                       "  %k = constant() : f32[] = " + k + "\n"
                       "  %c = constant() : f32[] = " + c + "\n"
                       "  %three = constant() : f32[] = " + hexf({3.f}) + "\n"
                       // 0.5 * x * (1 + tanh(c * (x + k * pow(x, 3))))
                       "  %p = pow(%x, %three) : f32[4]\n"
                       "  %kp = mul(%k, %p) : f32[4]\n"
                       "  %s = add(%x, %kp) : f32[4]\n"
                       "  %u = mul(%c, %s) : f32[4]\n"
                       "  %t = tanh(%u) : f32[4]\n"
                       "  %a = add(%one, %t) : f32[4]\n"
                       "  %hx = mul(%half, %x) : f32[4]\n"
                       "  %y = mul(%hx, %a) : f32[4]\n"
                       // x*x*x and the sum the other way round: (k * (y*y*y) + y) * c
                       "  %q = mul(%y, %y) : f32[4]\n"
                       "  %q3 = mul(%q, %y) : f32[4]\n"
                       "  %kq = mul(%q3, %k) : f32[4]\n"
                       "  %s2 = add(%kq, %y) : f32[4]\n"
                       "  %u2 = mul(%s2, %c) : f32[4]\n"
                       "  %t2 = tanh(%u2) : f32[4]\n"
                       "  %a2 = add(%t2, %one) : f32[4]\n"
                       "  %ya = mul(%y, %a2) : f32[4]\n"
                       "  %y2 = mul(%ya, %half) : f32[4]\n"
                       // silu, both orders
                       "  %sg = sigmoid(%y2) : f32[4]\n"
                       "  %y3 = mul(%y2, %sg) : f32[4] !name=\"act\"\n"
                       "  %sg2 = sigmoid(%y3) : f32[4]\n"
                       "  %y4 = mul(%sg2, %y3) : f32[4]\n"
                       "  return %y4\n"
                       "}\n"),
            "graph @g(%x: f32[4]) {\n"
            "  %y = gelu(%x) {approximate=\"tanh\"} : f32[4]\n"
            "  %y2 = gelu(%y) {approximate=\"tanh\"} : f32[4]\n"
            "  %y3 = silu(%y2) : f32[4] !name=\"act\"\n"
            "  %y4 = silu(%y3) : f32[4]\n"
            "  return %y4\n"
            "}\n");
  // The sigmoid is used elsewhere; the sigmoid of another value.
  expect_unchanged("graph @g(%x: f32[4], %u: f32[4]) {\n"
                   "  %sg = sigmoid(%x) : f32[4]\n"
                   "  %y = mul(%x, %sg) : f32[4]\n"
                   "  %sg2 = sigmoid(%u) : f32[4]\n"
                   "  %y2 = mul(%x, %sg2) : f32[4]\n"
                   "  return %y, %sg, %y2\n"
                   "}\n");
}

TEST(RecognizePatterns, MatmulWithConstantWeightBecomesLinear) {
  // W [3,2] = [[1,2],[3,4],[5,6]]: the linear weight is W^T [2,3] = [[1,3,5],[2,4,6]], made once for both uses.
  const std::string w = hexf({1, 2, 3, 4, 5, 6}), wt = hexf({1, 3, 5, 2, 4, 6});
  EXPECT_EQ(recognized("graph @g(%x: f32[4,5,3], %z: f32[7,3]) {\n"
                       "  %W = constant() : f32[3,2] = " + w + "\n"
                       "  %b = constant() : f32[2] = " + hexf({0.5f, -0.5f}) + "\n"
                       "  %mm = matmul(%x, %W) {transpose_a=false, transpose_b=false} : f32[4,5,2] !name=\"fc/MatMul\"\n"
                       "  %y = add(%b, %mm) : f32[4,5,2] !name=\"fc/Add\"\n"
                       "  %r = relu(%y) : f32[4,5,2]\n"
                       "  %mm2 = matmul(%z, %W) {transpose_a=false, transpose_b=false} : f32[7,2]\n"
                       "  %V = constant() : f32[2,3] = " + wt + "\n"
                       "  %mm3 = matmul(%z, %V) {transpose_a=false, transpose_b=true} : f32[7,2]\n"
                       "  %b1 = constant() : f32[1,2] = " + hexf({1.f, 2.f}) + "\n"
                       "  %y3 = add(%mm3, %b1) : f32[7,2]\n"
                       "  return %r, %mm2, %y3\n"
                       "}\n"),
            "graph @g(%x: f32[4,5,3], %z: f32[7,3]) {\n"
            "  %b = constant() : f32[2] = " + hexf({0.5f, -0.5f}) + "\n"
            "  %V = constant() : f32[2,3] = " + wt + "\n"
            "  %W.T = constant() : f32[2,3] !name=\"W.T\" = " + wt + "\n"
            "  %y = linear(%x, %W.T, %b) : f32[4,5,2] !name=\"fc/MatMul\"\n"
            "  %r = relu(%y) : f32[4,5,2]\n"
            "  %mm2 = linear(%z, %W.T) : f32[7,2]\n"
            "  %b1.flat = constant() : f32[2] !name=\"b1.flat\" = " + hexf({1.f, 2.f}) + "\n"
            "  %y3 = linear(%z, %V, %b1.flat) : f32[7,2]\n"
            "  return %r, %mm2, %y3\n"
            "}\n");
  // Weight not constant, 1-D x, transpose_a (W shared with a matmul that does become linear), a bias of the full output shape (kept as an add).
  EXPECT_EQ(recognized("graph @g(%x: f32[2,3], %w: f32[3,2], %v: f32[3], %x2: f32[3,4]) {\n"
                       "  %W = constant() : f32[3,2] = " + w + "\n"
                       "  %a = matmul(%x, %w) {transpose_a=false, transpose_b=false} : f32[2,2]\n"
                       "  %b = matmul(%v, %W) {transpose_a=false, transpose_b=false} : f32[2]\n"
                       "  %c = matmul(%x2, %W) {transpose_a=true, transpose_b=false} : f32[4,2]\n"
                       "  %full = constant() : f32[2,2] = " + hexf({1, 2, 3, 4}) + "\n"
                       "  %m = matmul(%x, %W) {transpose_a=false, transpose_b=false} : f32[2,2]\n"
                       "  %d = add(%m, %full) : f32[2,2]\n"
                       "  return %a, %b, %c, %d\n"
                       "}\n"),
            "graph @g(%x: f32[2,3], %w: f32[3,2], %v: f32[3], %x2: f32[3,4]) {\n"
            "  %W = constant() : f32[3,2] = " + w + "\n"
            "  %a = matmul(%x, %w) {transpose_a=false, transpose_b=false} : f32[2,2]\n"
            "  %b = matmul(%v, %W) {transpose_a=false, transpose_b=false} : f32[2]\n"
            "  %c = matmul(%x2, %W) {transpose_a=true, transpose_b=false} : f32[4,2]\n"
            "  %full = constant() : f32[2,2] = " + hexf({1, 2, 3, 4}) + "\n"
            "  %W.T = constant() : f32[2,3] !name=\"W.T\" = " + wt + "\n"
            "  %m = linear(%x, %W.T) : f32[2,2]\n"
            "  %d = add(%m, %full) : f32[2,2]\n"
            "  return %a, %b, %c, %d\n"
            "}\n");
  expect_unchanged("graph @g(%x: f32[4,3]) {\n"
                   "  %W = constant() : f32[3,2] = " + w + "\n"
                   "  %mm = matmul(%x, %W) {transpose_a=false, transpose_b=false} : f32[4,2]\n"
                   "  return %mm\n"
                   "}\n",
                   false);
}

// ---- numerics: the written-out graph and the recognized one, compiled, on random inputs

Tensor random_tensor(const Shape& s, uint64_t stream, DType dt, double scale = 2.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * (2.0 * philox_uniform(11, stream, i) - 1.0);
  return Tensor::from_doubles(v, s, dt);
}

// A block with every pattern written out: projections, layer norm, gelu (erf), softmax, rms norm, silu and the
// tanh gelu, in dtype `dt`.
std::unique_ptr<Graph> written_out_block(DType dt) {
  auto g = std::make_unique<Graph>("block");
  const int64_t B = 3, S = 5, D = 16, H = 24;
  Value* x = g->add_input(TensorType(dt, {B, S, D}), "x");
  uint64_t stream = 100;
  auto cst = [&](const Shape& s, double scale = 0.5) { return g->add_constant(random_tensor(s, stream++, dt, scale)); };
  auto sc = [&](double v) { return g->add_constant(Tensor::scalar(v, dt)); };
  auto b = [&](OpId op, std::vector<Value*> ins, const Attrs& a = {}) { return build_node(*g, op, ins, a)->output(0); };
  const Attrs last{{"axes", std::vector<int64_t>{-1}}, {"keepdims", true}};
  auto layer_norm = [&](Value* h, bool affine) {
    Value* d = b("sub"_op, {h, b("reduce_mean"_op, {h}, last)});
    Value* v = b("reduce_mean"_op, {b("mul"_op, {d, d})}, last);
    Value* n = b("div"_op, {d, b("sqrt"_op, {b("add"_op, {v, sc(1e-5)})})});
    return affine ? b("add"_op, {b("mul"_op, {n, cst({D})}), cst({D})}) : n;
  };
  auto proj = [&](Value* h, int64_t k, int64_t n) { return b("add"_op, {cst({n}, 0.1), b("matmul"_op, {h, cst({k, n}, 0.4)})}); };
  Value* h = layer_norm(x, true);
  Value* f = proj(h, D, H);
  Value* gelu = b("mul"_op, {b("mul"_op, {f, b("add"_op, {b("erf"_op, {b("div"_op, {f, sc(std::sqrt(2.0))})}), sc(1.0)})}), sc(0.5)});
  Value* r = b("add"_op, {x, proj(gelu, H, D)});  // residual
  Value* e = b("exp"_op, {b("sub"_op, {r, b("reduce_max"_op, {r}, last)})});
  Value* sm = b("div"_op, {e, b("reduce_sum"_op, {e}, last)});
  Value* rms = b("mul"_op, {cst({D}),
                             b("mul"_op, {sm, b("rsqrt"_op, {b("add"_op, {b("reduce_mean"_op, {b("mul"_op, {sm, sm})}, last), sc(1e-6)})})})});
  Value* silu = b("mul"_op, {rms, b("sigmoid"_op, {rms})});
  Value* l2 = layer_norm(b("matmul"_op, {silu, cst({D, D}, 0.4)}), false);
  Value* cube = b("mul"_op, {b("mul"_op, {l2, l2}), l2});
  Value* inner = b("mul"_op, {sc(0.7978845608028654), b("add"_op, {l2, b("mul"_op, {sc(0.044715), cube})})});
  Value* tg = b("mul"_op, {b("mul"_op, {sc(0.5), l2}), b("add"_op, {sc(1.0), b("tanh"_op, {inner})})});
  g->set_outputs({tg, r});
  verify_graph(*g);
  return g;
}

int count_op(const Graph& g, OpId op) {
  int n = 0;
  for (const Node* nd : g.nodes()) n += nd->op == op;
  return n;
}

void check_numerics(DType dt, double tol) {
  auto g = written_out_block(dt);
  Plan ref = compile_plan(g->clone(), CompileOptions{.disabled_passes = {"recognize_patterns"}, .inference = true});
  Plan opt = compile_plan(g->clone(), CompileOptions{.verify_each = true, .inference = true});
  {
    // The pass alone turns every written-out pattern into its op.
    auto rg = g->clone();
    PassManager pm(PassOptions{.verify_each = true, .inference = true});
    pm.add(make_recognize_patterns_pass()).add(make_dce_pass());
    pm.run(*rg);
    EXPECT_EQ(count_op(*rg, "layer_norm"_op), 2);
    EXPECT_EQ(count_op(*rg, "gelu"_op), 2);
    EXPECT_EQ(count_op(*rg, "softmax"_op), 1);
    EXPECT_EQ(count_op(*rg, "rms_norm"_op), 1);
    EXPECT_EQ(count_op(*rg, "silu"_op), 1);
    EXPECT_EQ(count_op(*rg, "linear"_op), 3);
    for (OpId op : {"matmul"_op, "reduce_mean"_op, "reduce_sum"_op, "reduce_max"_op, "exp"_op, "erf"_op,
                    "tanh"_op, "sqrt"_op, "rsqrt"_op, "sigmoid"_op, "mul"_op, "div"_op, "sub"_op})
      EXPECT_EQ(count_op(*rg, op), 0) << op_name(op) << "\n" << print_graph(*rg, {.max_constant_bytes = 0});
  }
  EXPECT_EQ(count_op(ref.graph(), "layer_norm"_op), 0);
  EXPECT_LT(opt.num_kernels(), ref.num_kernels()) << opt.describe() << "\n----\n" << ref.describe();
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const std::vector<Tensor> in = {random_tensor({3, 5, 16}, seed, dt)};
    const auto r0 = ref.run(in), r1 = opt.run(in);
    ASSERT_EQ(r0.size(), r1.size());
    for (size_t o = 0; o < r0.size(); ++o) {
      const auto a = r0[o].to_doubles(), c = r1[o].to_doubles();
      ASSERT_EQ(a.size(), c.size());
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_TRUE(std::isfinite(c[i])) << "output " << o << " element " << i;
        worst = std::max(worst, std::fabs(a[i] - c[i]) / (1.0 + std::fabs(a[i])));
      }
      EXPECT_LE(worst, tol) << dtype_name(dt) << " output " << o << " seed " << seed;
    }
  }
}

// Tolerances: |opt - ref| <= tol * (1 + |ref|); the fused kernels sum and round in another order.
TEST(RecognizePatterns, OptimizedMatchesUnoptimizedF32) { check_numerics(DType::f32, 1e-5); }
TEST(RecognizePatterns, OptimizedMatchesUnoptimizedF64) { check_numerics(DType::f64, 1e-12); }
// Half types: the written-out graph rounds every step to 11 (f16) or 8 (bf16) significant bits, the fused
// kernels compute in f32 and round once, so the unoptimized graph is the less accurate one. About 5 ulps
// (seen: 1.7e-3 for f16, 1.1e-2 for bf16).
TEST(RecognizePatterns, OptimizedMatchesUnoptimizedF16) { check_numerics(DType::f16, 5e-3); }
TEST(RecognizePatterns, OptimizedMatchesUnoptimizedBF16) { check_numerics(DType::bf16, 4e-2); }

// The PyTorch-exported transformer encoder of tests/onnx (in the repository, so never skipped): compiled for
// inference, its written-out layer norms and projections become layer_norm / linear, and the output still
// matches PyTorch's within torch_models_test's tolerance (1e-4 of the output scale).
TEST(RecognizePatterns, TorchTransformerStillMatchesPyTorch) {
  std::filesystem::path dir = std::filesystem::path(testing::repo_root()) / "tests/data/torch_models";
  if (const char* src = std::getenv("SPORE_SOURCE_DIR")) dir = std::filesystem::path(src) / "tests/data/torch_models";
  const Tensor x = io::read_npy((dir / "transformer.input.npy").string());
  const Tensor want = io::read_npy((dir / "transformer.output.npy").string());
  auto g = io::import_onnx((dir / "transformer.onnx").string());
  specialize_inputs(*g, {x.shape()});
  Plan p = compile_plan(std::move(g), CompileOptions{.verify_each = true, .inference = true});
  EXPECT_EQ(count_op(p.graph(), "layer_norm"_op), 4) << print_graph(p.graph(), {.max_constant_bytes = 0});
  EXPECT_EQ(count_op(p.graph(), "matmul"_op), 0);
  const auto got = p.run(std::vector<Tensor>{x});
  ASSERT_EQ(got[0].shape(), want.shape());
  const std::vector<double> a = got[0].to_doubles(), b = want.to_doubles();
  double scale = 1, err = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::abs(a[i] - b[i]));
  EXPECT_LE(err, 1e-4 * scale) << "max abs error " << err << " (output scale " << scale << ")";
}


TEST(RecognizePatterns, NormsAndLinearsWrittenDirectlyTakeTheFollowingConstants) {
  // The gamma/beta/bias rules extend any norm or linear node, not only those the pass made: layer_norm(x) * g + b
  // and linear(x, W) + b written as ops become one node; a constant of the wrong shape stays an add.
  EXPECT_EQ(recognized("graph @g(%x: f32[3,2]) {\n"
                       "  %g = constant() : f32[2] = " + hexf({2.f, 3.f}) + "\n"
                       "  %b = constant() : f32[2] = " + hexf({-1.f, 1.f}) + "\n"
                       "  %n = layer_norm(%x) {axis=-1, epsilon=0.5} : f32[3,2]\n"
                       "  %m = mul(%n, %g) : f32[3,2]\n"
                       "  %y = add(%b, %m) : f32[3,2] !name=\"ln\"\n"
                       "  return %y\n"
                       "}\n"),
            "graph @g(%x: f32[3,2]) {\n"
            "  %g = constant() : f32[2] = " + hexf({2.f, 3.f}) + "\n"
            "  %b = constant() : f32[2] = " + hexf({-1.f, 1.f}) + "\n"
            "  %y = layer_norm(%x, %g, %b) {axis=-1, epsilon=0.5} : f32[3,2] !name=\"ln\"\n"
            "  return %y\n"
            "}\n");
  EXPECT_EQ(recognized("graph @g(%x: f32[3,2], %w: f32[4,2]) {\n"
                       "  %b = constant() : f32[4] = " + hexf({1.f, 2.f, 3.f, 4.f}) + "\n"
                       "  %c = constant() : f32[3,4] = " + hexf({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}) + "\n"
                       "  %l = linear(%x, %w) : f32[3,4] !name=\"fc\"\n"
                       "  %y = add(%l, %b) : f32[3,4]\n"
                       "  %l2 = linear(%x, %w) : f32[3,4]\n"
                       "  %z = add(%l2, %c) : f32[3,4]\n"
                       "  return %y, %z\n"
                       "}\n"),
            "graph @g(%x: f32[3,2], %w: f32[4,2]) {\n"
            "  %b = constant() : f32[4] = " + hexf({1.f, 2.f, 3.f, 4.f}) + "\n"
            "  %c = constant() : f32[3,4] = " + hexf({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}) + "\n"
            "  %l2 = linear(%x, %w) : f32[3,4]\n"
            "  %z = add(%l2, %c) : f32[3,4]\n"
            "  %y = linear(%x, %w, %b) : f32[3,4] !name=\"fc\"\n"
            "  return %y, %z\n"
            "}\n");
}

}  // namespace
}  // namespace spore
