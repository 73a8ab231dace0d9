// Conformance cases of the conv family: conv2d, conv_transpose2d, max/avg pooling, global_avg_pool.
#include "conformance/harness.h"

namespace spore::conformance {
void add_conv_cases(CaseList& c, ErrorList& e) {
  using V = std::vector<int64_t>;
  // conv2d
  c.push_back(OpCase("conv2d/basic", OpId::conv2d, {{2, 3, 7, 9}, {4, 3, 3, 3}}));
  c.push_back(
      OpCase("conv2d/bias_pad", OpId::conv2d, {{1, 8, 10, 10}, {16, 8, 3, 3}, {16}}).attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("conv2d/stride_asym_pad", OpId::conv2d, {{2, 5, 11, 13}, {6, 5, 3, 2}, {6}})
                  .attr("stride", V{2, 3})
                  .attr("padding", V{1, 0, 2, 1}));
  c.push_back(OpCase("conv2d/dilation", OpId::conv2d, {{1, 4, 12, 12}, {8, 4, 3, 3}})
                  .attr("dilation", V{2, 3})
                  .attr("padding", V{2, 2, 2, 2}));
  c.push_back(OpCase("conv2d/groups", OpId::conv2d, {{2, 6, 9, 9}, {9, 2, 3, 3}, {9}}).attr("groups", int64_t{3}));
  c.push_back(OpCase("conv2d/depthwise", OpId::conv2d, {{1, 16, 15, 15}, {16, 1, 3, 3}, {16}})
                  .attr("groups", int64_t{16})
                  .attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("conv2d/depthwise_multiplier", OpId::conv2d, {{1, 4, 8, 8}, {8, 1, 5, 5}})
                  .attr("groups", int64_t{4})
                  .attr("stride", V{2, 2})
                  .attr("pad_mode", std::string("same")));
  c.push_back(
      OpCase("conv2d/same", OpId::conv2d, {{1, 3, 14, 14}, {8, 3, 4, 4}, {8}}).attr("pad_mode", std::string("same")));
  c.push_back(OpCase("conv2d/same_stride", OpId::conv2d, {{1, 3, 13, 10}, {8, 3, 3, 3}})
                  .attr("pad_mode", std::string("same"))
                  .attr("stride", V{2, 2})
                  .attr("padding", V{5, 5, 5, 5}));  // padding ignored under "same"
  c.push_back(OpCase("conv2d/valid", OpId::conv2d, {{1, 3, 9, 9}, {4, 3, 3, 3}})
                  .attr("pad_mode", std::string("valid"))
                  .attr("padding", V{3, 3, 3, 3}));
  c.push_back(OpCase("conv2d/pointwise", OpId::conv2d, {{2, 33, 7, 7}, {17, 33, 1, 1}, {17}}).tol(2));
  c.push_back(OpCase("conv2d/deep_small_spatial", OpId::conv2d, {{1, 256, 3, 3}, {16, 256, 3, 3}, {16}})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(8));
  c.push_back(OpCase("conv2d/large", OpId::conv2d, {{2, 32, 28, 28}, {64, 32, 3, 3}, {64}})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(4));
  // The cpu backend's direct stride-1 kernel (few input channels, output rows >= 8 wide): LeNet's first layer,
  // dilation with asymmetric padding, more output channels than one register block, rows of 8k+3 outputs.
  c.push_back(OpCase("conv2d/direct_lenet1", OpId::conv2d, {{3, 1, 28, 28}, {6, 1, 5, 5}, {6}})
                  .attr("padding", V{2, 2, 2, 2}));
  c.push_back(OpCase("conv2d/direct_dilation_asym", OpId::conv2d, {{2, 2, 13, 19}, {5, 2, 3, 3}, {5}})
                  .attr("dilation", V{2, 1})
                  .attr("padding", V{1, 0, 2, 3}));
  c.push_back(
      OpCase("conv2d/direct_blocks", OpId::conv2d, {{2, 3, 10, 11}, {13, 3, 3, 3}}).attr("padding", V{1, 1, 1, 1}));
  // conv_transpose2d
  c.push_back(OpCase("conv_transpose2d/basic", OpId::conv_transpose2d, {{2, 3, 5, 5}, {3, 4, 3, 3}}));
  c.push_back(OpCase("conv_transpose2d/stride_pad_bias", OpId::conv_transpose2d, {{1, 4, 6, 7}, {4, 5, 3, 3}, {5}})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("conv_transpose2d/output_padding", OpId::conv_transpose2d, {{1, 4, 5, 5}, {4, 3, 3, 3}, {3}})
                  .attr("stride", V{2, 3})
                  .attr("padding", V{1, 0, 0, 1})
                  .attr("output_padding", V{1, 2}));
  c.push_back(OpCase("conv_transpose2d/dilation_groups", OpId::conv_transpose2d, {{2, 6, 4, 5}, {6, 2, 2, 3}, {4}})
                  .attr("dilation", V{2, 2})
                  .attr("groups", int64_t{2}));
  c.push_back(OpCase("conv_transpose2d/depthwise", OpId::conv_transpose2d, {{1, 8, 7, 7}, {8, 1, 4, 4}})
                  .attr("groups", int64_t{8})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("conv_transpose2d/large", OpId::conv_transpose2d, {{1, 64, 14, 14}, {64, 32, 4, 4}, {32}})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(4));
  c.push_back(OpCase("conv_transpose2d/direct_small", OpId::conv_transpose2d, {{2, 3, 9, 10}, {3, 5, 3, 3}, {5}})
                  .attr("padding", V{1, 0, 1, 2}));
  // max_pool2d
  c.push_back(OpCase("max_pool2d/default", OpId::max_pool2d, {{2, 3, 8, 8}}));
  c.push_back(OpCase("max_pool2d/odd_2x2", OpId::max_pool2d, {{2, 3, 9, 7}}));
  c.push_back(OpCase("max_pool2d/large_2x2", OpId::max_pool2d, {{8, 32, 28, 28}}));
  // Rows of 16 and 15 windows (vectors of 8, the last overlapping), odd H and W.
  c.push_back(OpCase("max_pool2d/wide_2x2", OpId::max_pool2d, {{2, 3, 20, 33}}));
  c.push_back(OpCase("max_pool2d/odd_wide_2x2", OpId::max_pool2d, {{2, 3, 21, 31}}));
  c.push_back(OpCase("max_pool2d/odd_stride_pad", OpId::max_pool2d, {{1, 5, 11, 9}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("max_pool2d/ceil", OpId::max_pool2d, {{1, 2, 7, 10}})
                  .attr("kernel", V{2, 3})
                  .attr("stride", V{2, 2})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("max_pool2d/ceil_pad", OpId::max_pool2d, {{1, 3, 6, 6}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("max_pool2d/dilation", OpId::max_pool2d, {{1, 4, 10, 10}})
                  .attr("kernel", V{3, 2})
                  .attr("stride", V{1, 1})
                  .attr("dilation", V{2, 3}));
  c.push_back(OpCase("max_pool2d/same", OpId::max_pool2d, {{1, 3, 9, 7}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("pad_mode", std::string("same")));
  c.push_back(OpCase("max_pool2d/valid_large", OpId::max_pool2d, {{4, 16, 33, 33}})
                  .attr("kernel", V{3, 3})
                  .attr("pad_mode", std::string("valid")));
  // avg_pool2d
  c.push_back(OpCase("avg_pool2d/default", OpId::avg_pool2d, {{2, 3, 8, 8}}));
  c.push_back(OpCase("avg_pool2d/pad_exclude", OpId::avg_pool2d, {{1, 4, 9, 9}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("avg_pool2d/pad_include", OpId::avg_pool2d, {{1, 4, 9, 9}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("count_include_pad", true));
  c.push_back(OpCase("avg_pool2d/ceil_exclude", OpId::avg_pool2d, {{1, 3, 7, 8}})
                  .attr("kernel", V{2, 3})
                  .attr("stride", V{2, 2})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("avg_pool2d/ceil_include", OpId::avg_pool2d, {{1, 3, 8, 7}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("ceil_mode", true)
                  .attr("count_include_pad", true));
  c.push_back(OpCase("avg_pool2d/same_include", OpId::avg_pool2d, {{1, 3, 10, 9}})
                  .attr("kernel", V{4, 3})
                  .attr("stride", V{3, 2})
                  .attr("pad_mode", std::string("same"))
                  .attr("count_include_pad", true));
  c.push_back(OpCase("avg_pool2d/large", OpId::avg_pool2d, {{2, 32, 35, 35}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{1, 1})
                  .attr("padding", V{1, 1, 1, 1}));
  // global_avg_pool
  c.push_back(OpCase("global_avg_pool/nchw", OpId::global_avg_pool, {{2, 5, 7, 7}}));
  c.push_back(OpCase("global_avg_pool/large_plane", OpId::global_avg_pool, {{1, 3, 40, 41}}).tol(2));
  c.push_back(OpCase("global_avg_pool/1x1", OpId::global_avg_pool, {{3, 33, 1, 1}}));
  c.push_back(OpCase("global_avg_pool/ncw", OpId::global_avg_pool, {{2, 3, 17}}));

  // conv2d_weight_grad: dy has conv2d's output shape; the big batch spans several of the cpu kernel's slices.
  c.push_back(OpCase("conv2d_weight_grad/basic", OpId::conv2d_weight_grad, {{2, 3, 7, 9}, {2, 4, 5, 7}})
                  .attr("kernel", V{3, 3}));
  c.push_back(OpCase("conv2d_weight_grad/stride_asym_pad", OpId::conv2d_weight_grad, {{2, 5, 11, 13}, {2, 6, 6, 13}})
                  .attr("kernel", V{3, 2})
                  .attr("stride", V{2, 1})
                  .attr("padding", V{1, 0, 2, 1}));
  c.push_back(OpCase("conv2d_weight_grad/dilation", OpId::conv2d_weight_grad, {{1, 4, 12, 12}, {1, 8, 8, 8}})
                  .attr("kernel", V{3, 3})
                  .attr("dilation", V{2, 2}));
  c.push_back(OpCase("conv2d_weight_grad/groups", OpId::conv2d_weight_grad, {{2, 6, 9, 9}, {2, 9, 7, 7}})
                  .attr("kernel", V{3, 3})
                  .attr("groups", int64_t{3}));
  c.push_back(OpCase("conv2d_weight_grad/negative_end_pad", OpId::conv2d_weight_grad, {{1, 2, 6, 6}, {1, 3, 2, 2}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, -1, -1}));
  c.push_back(OpCase("conv2d_weight_grad/batch_slices", OpId::conv2d_weight_grad, {{19, 8, 10, 10}, {19, 16, 10, 10}})
                  .attr("kernel", V{3, 3})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(4));
  c.push_back(OpCase("conv2d_weight_grad/simplenet", OpId::conv2d_weight_grad, {{64, 1, 28, 28}, {64, 32, 28, 28}})
                  .attr("kernel", V{3, 3})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(8));
  c.push_back(OpCase("conv2d_weight_grad/lenet1", OpId::conv2d_weight_grad, {{8, 1, 28, 28}, {8, 6, 28, 28}})
                  .attr("kernel", V{5, 5})
                  .attr("padding", V{2, 2, 2, 2})
                  .tol(4));
  c.push_back(OpCase("conv2d_weight_grad/wide_kernel", OpId::conv2d_weight_grad, {{3, 2, 12, 14}, {3, 7, 10, 9}})
                  .attr("kernel", V{3, 7})
                  .attr("dilation", V{1, 1})
                  .attr("padding", V{0, 1, 0, 0}));
  // max_pool2d_grad: dy has max_pool2d's output shape.
  // Integer inputs make ties: the first element in row-major window order takes the gradient.
  c.push_back(OpCase("max_pool2d_grad/ties_odd", OpId::max_pool2d_grad, {{2, 3, 21, 31}, {2, 3, 10, 15}})
                  .gen(0, Gen::integers(0, 3)));
  c.push_back(OpCase("max_pool2d_grad/ties_lenet", OpId::max_pool2d_grad, {{4, 6, 28, 28}, {4, 6, 14, 14}})
                  .gen(0, Gen::integers(0, 3)));
  c.push_back(OpCase("max_pool2d_grad/default", OpId::max_pool2d_grad, {{2, 3, 8, 8}, {2, 3, 4, 4}}));
  c.push_back(OpCase("max_pool2d_grad/odd_2x2", OpId::max_pool2d_grad, {{2, 3, 9, 7}, {2, 3, 4, 3}}));
  c.push_back(OpCase("max_pool2d_grad/simplenet", OpId::max_pool2d_grad, {{64, 32, 28, 28}, {64, 32, 14, 14}}));
  c.push_back(OpCase("max_pool2d_grad/overlapping", OpId::max_pool2d_grad, {{1, 2, 7, 7}, {1, 2, 5, 5}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{1, 1}));
  c.push_back(OpCase("max_pool2d_grad/ceil_pad", OpId::max_pool2d_grad, {{1, 3, 6, 6}, {1, 3, 4, 4}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("max_pool2d_grad/dilation", OpId::max_pool2d_grad, {{1, 4, 10, 10}, {1, 4, 4, 4}})
                  .attr("kernel", V{2, 2})
                  .attr("stride", V{2, 2})
                  .attr("dilation", V{2, 2}));
  c.push_back(OpCase("max_pool2d_grad/same", OpId::max_pool2d_grad, {{1, 3, 9, 7}, {1, 3, 5, 4}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("pad_mode", std::string("same")));

  const auto f32 = DType::f32;
  const auto err = [&](std::string n, OpId op, std::vector<Shape> s, Attrs a, ErrorCode code) {
    e.push_back({std::move(n), op, s, std::vector<DType>(s.size(), f32), std::move(a), code});
  };
  err("conv2d_weight_grad/dy_size", OpId::conv2d_weight_grad, {{1, 3, 8, 8}, {1, 4, 5, 6}}, {{"kernel", V{3, 3}}},
      ErrorCode::shape_mismatch);
  err("conv2d_weight_grad/groups", OpId::conv2d_weight_grad, {{1, 3, 8, 8}, {1, 4, 6, 6}},
      {{"kernel", V{3, 3}}, {"groups", int64_t{2}}}, ErrorCode::shape_mismatch);
  err("max_pool2d_grad/dy_shape", OpId::max_pool2d_grad, {{1, 3, 8, 8}, {1, 3, 3, 4}}, {}, ErrorCode::shape_mismatch);
  err("conv2d/x_rank", OpId::conv2d, {{3, 8, 8}, {4, 3, 3, 3}}, {}, ErrorCode::shape_mismatch);
  err("conv2d/channel_mismatch", OpId::conv2d, {{1, 4, 8, 8}, {4, 3, 3, 3}}, {}, ErrorCode::shape_mismatch);
  err("conv2d/groups_not_dividing", OpId::conv2d, {{1, 6, 8, 8}, {4, 2, 3, 3}}, {{"groups", int64_t{4}}},
      ErrorCode::shape_mismatch);
  err("conv2d/out_channels_groups", OpId::conv2d, {{1, 6, 8, 8}, {4, 2, 3, 3}}, {{"groups", int64_t{3}}},
      ErrorCode::shape_mismatch);
  err("conv2d/kernel_too_large", OpId::conv2d, {{1, 3, 4, 4}, {4, 3, 5, 5}}, {}, ErrorCode::shape_mismatch);
  err("conv2d/dilated_kernel_too_large", OpId::conv2d, {{1, 3, 6, 6}, {4, 3, 3, 3}}, {{"dilation", V{3, 3}}},
      ErrorCode::shape_mismatch);
  err("conv2d/bias_shape", OpId::conv2d, {{1, 3, 8, 8}, {4, 3, 3, 3}, {3}}, {}, ErrorCode::shape_mismatch);
  err("conv2d/stride_len", OpId::conv2d, {{1, 3, 8, 8}, {4, 3, 3, 3}}, {{"stride", V{1}}}, ErrorCode::invalid_argument);
  err("conv2d/padding_len", OpId::conv2d, {{1, 3, 8, 8}, {4, 3, 3, 3}}, {{"padding", V{1, 1}}},
      ErrorCode::invalid_argument);
  err("conv2d/zero_stride", OpId::conv2d, {{1, 3, 8, 8}, {4, 3, 3, 3}}, {{"stride", V{0, 1}}},
      ErrorCode::invalid_argument);
  err("conv2d/pad_mode", OpId::conv2d, {{1, 3, 8, 8}, {4, 3, 3, 3}}, {{"pad_mode", std::string("full")}},
      ErrorCode::invalid_argument);
  e.push_back({"conv2d/dtype_mix",
               OpId::conv2d,
               {{1, 3, 8, 8}, {4, 3, 3, 3}},
               {f32, DType::bf16},
               {},
               ErrorCode::dtype_mismatch});
  e.push_back({"conv2d/int",
               OpId::conv2d,
               {{1, 3, 8, 8}, {4, 3, 3, 3}},
               {DType::i32, DType::i32},
               {},
               ErrorCode::dtype_mismatch});
  err("conv_transpose2d/channel_mismatch", OpId::conv_transpose2d, {{1, 4, 5, 5}, {3, 2, 3, 3}}, {},
      ErrorCode::shape_mismatch);
  err("conv_transpose2d/groups", OpId::conv_transpose2d, {{1, 3, 5, 5}, {3, 2, 3, 3}}, {{"groups", int64_t{2}}},
      ErrorCode::shape_mismatch);
  err("conv_transpose2d/output_padding_too_big", OpId::conv_transpose2d, {{1, 3, 5, 5}, {3, 2, 3, 3}},
      {{"stride", V{2, 2}}, {"output_padding", V{2, 0}}}, ErrorCode::invalid_argument);
  err("conv_transpose2d/nonpositive_out", OpId::conv_transpose2d, {{1, 3, 1, 1}, {3, 2, 1, 1}},
      {{"padding", V{1, 0, 1, 0}}}, ErrorCode::shape_mismatch);
  err("conv_transpose2d/bias_shape", OpId::conv_transpose2d, {{1, 3, 5, 5}, {3, 2, 3, 3}, {3}}, {},
      ErrorCode::shape_mismatch);
  err("max_pool2d/rank", OpId::max_pool2d, {{3, 8, 8}}, {}, ErrorCode::shape_mismatch);
  err("max_pool2d/kernel_len", OpId::max_pool2d, {{1, 3, 8, 8}}, {{"kernel", V{2}}}, ErrorCode::invalid_argument);
  err("max_pool2d/kernel_too_large", OpId::max_pool2d, {{1, 3, 4, 4}}, {{"kernel", V{5, 5}}},
      ErrorCode::shape_mismatch);
  err("max_pool2d/pad_too_large", OpId::max_pool2d, {{1, 3, 8, 8}}, {{"kernel", V{2, 2}}, {"padding", V{2, 0, 0, 0}}},
      ErrorCode::invalid_argument);
  err("max_pool2d/dilation_len", OpId::max_pool2d, {{1, 3, 8, 8}}, {{"dilation", V{1, 1, 1}}},
      ErrorCode::invalid_argument);
  err("avg_pool2d/stride_len", OpId::avg_pool2d, {{1, 3, 8, 8}}, {{"stride", V{1, 1, 1}}}, ErrorCode::invalid_argument);
  err("avg_pool2d/pad_mode", OpId::avg_pool2d, {{1, 3, 8, 8}}, {{"pad_mode", std::string("SAME")}},
      ErrorCode::invalid_argument);
  err("global_avg_pool/rank", OpId::global_avg_pool, {{3, 8}}, {}, ErrorCode::shape_mismatch);
}
}  // namespace spore::conformance
