// Conformance cases of the fused ops (ops/fused.h): conv2d_fused and linear_fused with every activation, with
// and without bias and residual, on geometries that take each conv2d kernel path (direct AVX2 stride-1 conv
// for few input channels, im2col + sgemm, oneDNN).
#include <limits>

#include "conformance/harness.h"

namespace spore::conformance {

void add_fused_cases(CaseList& c, ErrorList& e) {
  using V = std::vector<int64_t>;
  const OpId cf = "conv2d_fused"_op, lf = "linear_fused"_op;
  const DType f = DType::f32;
  // Activations with their parameters.
  struct Act {
    const char* name;
    Attrs attrs;
  };
  const std::vector<Act> acts = {
      {"relu", {{"activation", std::string("relu")}}},
      {"leaky_relu", {{"activation", std::string("leaky_relu")}, {"alpha", 0.2}}},
      {"clip", {{"activation", std::string("clip")}, {"min", -0.5}, {"max", 1.25}}},
      {"sigmoid", {{"activation", std::string("sigmoid")}}},
      {"tanh", {{"activation", std::string("tanh")}}},
      {"gelu", {{"activation", std::string("gelu")}}},
      {"gelu_tanh", {{"activation", std::string("gelu")}, {"approximate", std::string("tanh")}}},
      {"silu", {{"activation", std::string("silu")}}},
  };
  for (const Act& a : acts) {
    OpCase conv(fmt::format("conv2d_fused/{}", a.name), cf, {{2, 8, 9, 9}, {6, 8, 3, 3}, {6}});
    conv.attr("padding", V{1, 1, 1, 1});
    for (const auto& [k, v] : a.attrs.items()) conv.attr(k, v);
    c.push_back(conv);
    OpCase lin(fmt::format("linear_fused/{}", a.name), lf, {{5, 19}, {7, 19}, {7}});
    for (const auto& [k, v] : a.attrs.items()) lin.attr(k, v);
    c.push_back(lin);
  }
  // Residual, with and without bias and activation, on each conv path.
  c.push_back(OpCase("conv2d_fused/direct_bias_residual_relu", cf, {{2, 1, 12, 12}, {8, 1, 3, 3}, {8}, {2, 8, 12, 12}})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("activation", std::string("relu"))
                  .attr("residual", true));
  c.push_back(OpCase("conv2d_fused/im2col_residual_silu", cf, {{2, 3, 13, 11}, {4, 3, 3, 3}, {2, 4, 6, 5}})
                  .attr("stride", V{2, 2})
                  .attr("activation", std::string("silu"))
                  .attr("residual", true));
  c.push_back(OpCase("conv2d_fused/onednn_residual_only", cf, {{1, 8, 10, 10}, {16, 8, 1, 1}, {16}, {1, 16, 10, 10}})
                  .attr("residual", true));
  c.push_back(OpCase("conv2d_fused/one_pixel_sigmoid", cf, {{2, 24, 1, 1}, {72, 24, 1, 1}, {72}})
                  .attr("activation", std::string("sigmoid")));
  c.push_back(OpCase("conv2d_fused/one_pixel_residual_silu", cf, {{3, 72, 1, 1}, {10, 72, 1, 1}, {10}, {3, 10, 1, 1}})
                  .attr("activation", std::string("silu"))
                  .attr("residual", true));
  c.push_back(OpCase("conv2d_fused/groups_same_tanh", cf, {{2, 6, 9, 9}, {9, 2, 3, 3}, {9}})
                  .attr("groups", int64_t{3})
                  .attr("pad_mode", std::string("same"))
                  .attr("activation", std::string("tanh")));
  c.push_back(OpCase("linear_fused/residual_gelu", lf, {{2, 3, 13}, {9, 13}, {9}, {2, 3, 9}})
                  .attr("activation", std::string("gelu"))
                  .attr("residual", true));
  c.push_back(OpCase("linear_fused/no_bias_residual", lf, {{4, 33}, {5, 33}, {4, 5}}).attr("residual", true));
  c.push_back(OpCase("linear_fused/large_relu", lf, {{33, 1024}, {65, 1024}, {65}})
                  .attr("activation", std::string("relu"))
                  .tol(8));

  // pool="max2x2" after the activation, on each conv path, odd and even sizes, with a residual.
  c.push_back(OpCase("conv2d_fused/direct_relu_pool", cf, {{2, 1, 11, 13}, {6, 1, 3, 3}, {6}})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("activation", std::string("relu"))
                  .attr("pool", std::string("max2x2")));
  c.push_back(OpCase("conv2d_fused/im2col_pool_no_act", cf, {{2, 3, 15, 12}, {4, 3, 3, 3}})
                  .attr("stride", V{2, 2})
                  .attr("pool", std::string("max2x2")));
  c.push_back(OpCase("conv2d_fused/onednn_residual_gelu_pool", cf, {{1, 16, 10, 10}, {8, 16, 3, 3}, {8}, {1, 8, 10, 10}})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("activation", std::string("gelu"))
                  .attr("residual", true)
                  .attr("pool", std::string("max2x2")));

  e.push_back({"conv2d_fused/unknown_pool", cf, {{1, 2, 5, 5}, {3, 2, 3, 3}}, {f, f}, {{"pool", std::string("avg")}},
               ErrorCode::invalid_argument});
  e.push_back({"conv2d_fused/pool_too_small", cf, {{1, 2, 3, 3}, {3, 2, 3, 3}}, {f, f}, {{"pool", std::string("max2x2")}},
               ErrorCode::shape_mismatch});
  e.push_back({"conv2d_fused/residual_shape", cf, {{1, 2, 5, 5}, {3, 2, 3, 3}, {3}, {1, 3, 5, 5}}, {f, f, f, f},
               {{"residual", true}}, ErrorCode::shape_mismatch});
  e.push_back({"linear_fused/residual_broadcast", lf, {{4, 6}, {5, 6}, {5}}, {f, f, f}, {{"residual", true}},
               ErrorCode::shape_mismatch});
  e.push_back({"linear_fused/unknown_activation", lf, {{4, 6}, {5, 6}}, {f, f},
               {{"activation", std::string("softplus")}}, ErrorCode::invalid_argument});
  e.push_back({"conv2d_fused/residual_without_operand", cf, {{1, 2, 5, 5}, {3, 2, 3, 3}}, {f, f}, {{"residual", true}},
               ErrorCode::invalid_argument});
}

}  // namespace spore::conformance
