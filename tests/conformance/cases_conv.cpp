// Conformance cases of the conv family: conv2d, conv_transpose2d, max/avg pooling, global_avg_pool, and the 3-D ops.
#include "conformance/harness.h"

namespace spore::conformance {
void add_conv_cases(CaseList& c, ErrorList& e) {
  using V = std::vector<int64_t>;
  // conv2d
  c.push_back(OpCase("conv2d/basic", "conv2d"_op, {{2, 3, 7, 9}, {4, 3, 3, 3}}));
  c.push_back(
      OpCase("conv2d/bias_pad", "conv2d"_op, {{1, 8, 10, 10}, {16, 8, 3, 3}, {16}}).attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("conv2d/stride_asym_pad", "conv2d"_op, {{2, 5, 11, 13}, {6, 5, 3, 2}, {6}})
                  .attr("stride", V{2, 3})
                  .attr("padding", V{1, 0, 2, 1}));
  c.push_back(OpCase("conv2d/dilation", "conv2d"_op, {{1, 4, 12, 12}, {8, 4, 3, 3}})
                  .attr("dilation", V{2, 3})
                  .attr("padding", V{2, 2, 2, 2}));
  c.push_back(OpCase("conv2d/groups", "conv2d"_op, {{2, 6, 9, 9}, {9, 2, 3, 3}, {9}}).attr("groups", int64_t{3}));
  c.push_back(OpCase("conv2d/depthwise", "conv2d"_op, {{1, 16, 15, 15}, {16, 1, 3, 3}, {16}})
                  .attr("groups", int64_t{16})
                  .attr("padding", V{1, 1, 1, 1}));
  // depthwise_blocked.h through the plain path: C not a multiple of 8 (zero-padded blocks), stride 2 with
  // asymmetric padding, 5x5, dilation, batch > 1, narrow images (edge columns only).
  c.push_back(OpCase("conv2d/depthwise_odd_c_stride2", "conv2d"_op, {{3, 13, 17, 14}, {13, 1, 3, 3}, {13}})
                  .attr("groups", int64_t{13})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{0, 1, 1, 0}));
  c.push_back(OpCase("conv2d/depthwise_5x5_dilated", "conv2d"_op, {{2, 24, 19, 21}, {24, 1, 5, 5}, {24}})
                  .attr("groups", int64_t{24})
                  .attr("dilation", V{2, 1})
                  .attr("padding", V{4, 2, 4, 2}));
  c.push_back(OpCase("conv2d/depthwise_narrow", "conv2d"_op, {{1, 8, 5, 2}, {8, 1, 3, 3}})
                  .attr("groups", int64_t{8})
                  .attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("conv2d/depthwise_multiplier", "conv2d"_op, {{1, 4, 8, 8}, {8, 1, 5, 5}})
                  .attr("groups", int64_t{4})
                  .attr("stride", V{2, 2})
                  .attr("pad_mode", std::string("same")));
  c.push_back(
      OpCase("conv2d/same", "conv2d"_op, {{1, 3, 14, 14}, {8, 3, 4, 4}, {8}}).attr("pad_mode", std::string("same")));
  c.push_back(OpCase("conv2d/same_stride", "conv2d"_op, {{1, 3, 13, 10}, {8, 3, 3, 3}})
                  .attr("pad_mode", std::string("same"))
                  .attr("stride", V{2, 2})
                  .attr("padding", V{5, 5, 5, 5}));  // padding ignored under "same"
  c.push_back(OpCase("conv2d/valid", "conv2d"_op, {{1, 3, 9, 9}, {4, 3, 3, 3}})
                  .attr("pad_mode", std::string("valid"))
                  .attr("padding", V{3, 3, 3, 3}));
  c.push_back(OpCase("conv2d/pointwise", "conv2d"_op, {{2, 33, 7, 7}, {17, 33, 1, 1}, {17}}).tol(2));
  // A 1x1 conv over one pixel (squeeze-excite's FCs) runs as a linear layer: the dot kernel (<= 16 outputs) and the
  // GEMM (more outputs, and a reduction shorter than 16).
  c.push_back(OpCase("conv2d/one_pixel_few_outputs", "conv2d"_op, {{3, 40, 1, 1}, {12, 40, 1, 1}, {12}}));
  c.push_back(OpCase("conv2d/one_pixel_many_outputs", "conv2d"_op, {{2, 6, 1, 1}, {40, 6, 1, 1}, {40}}));
  c.push_back(OpCase("conv2d/deep_small_spatial", "conv2d"_op, {{1, 256, 3, 3}, {16, 256, 3, 3}, {16}})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(8));
  // Few outputs from many channels (an optical-flow head: the CPU kernel's im2col + sgemm path).
  c.push_back(OpCase("conv2d/few_outputs", "conv2d"_op, {{2, 40, 9, 11}, {2, 40, 3, 3}, {2}})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(2));
  c.push_back(OpCase("conv2d/large", "conv2d"_op, {{2, 32, 28, 28}, {64, 32, 3, 3}, {64}})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(4));
  // The cpu backend's direct stride-1 kernel (few input channels, output rows >= 8 wide): LeNet's first layer,
  // dilation with asymmetric padding, more output channels than one register block, rows of 8k+3 outputs.
  c.push_back(OpCase("conv2d/direct_lenet1", "conv2d"_op, {{3, 1, 28, 28}, {6, 1, 5, 5}, {6}})
                  .attr("padding", V{2, 2, 2, 2}));
  c.push_back(OpCase("conv2d/direct_dilation_asym", "conv2d"_op, {{2, 2, 13, 19}, {5, 2, 3, 3}, {5}})
                  .attr("dilation", V{2, 1})
                  .attr("padding", V{1, 0, 2, 3}));
  c.push_back(
      OpCase("conv2d/direct_blocks", "conv2d"_op, {{2, 3, 10, 11}, {13, 3, 3, 3}}).attr("padding", V{1, 1, 1, 1}));
  // conv_transpose2d
  c.push_back(OpCase("conv_transpose2d/basic", "conv_transpose2d"_op, {{2, 3, 5, 5}, {3, 4, 3, 3}}));
  c.push_back(OpCase("conv_transpose2d/stride_pad_bias", "conv_transpose2d"_op, {{1, 4, 6, 7}, {4, 5, 3, 3}, {5}})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("conv_transpose2d/output_padding", "conv_transpose2d"_op, {{1, 4, 5, 5}, {4, 3, 3, 3}, {3}})
                  .attr("stride", V{2, 3})
                  .attr("padding", V{1, 0, 0, 1})
                  .attr("output_padding", V{1, 2}));
  c.push_back(OpCase("conv_transpose2d/dilation_groups", "conv_transpose2d"_op, {{2, 6, 4, 5}, {6, 2, 2, 3}, {4}})
                  .attr("dilation", V{2, 2})
                  .attr("groups", int64_t{2}));
  c.push_back(OpCase("conv_transpose2d/depthwise", "conv_transpose2d"_op, {{1, 8, 7, 7}, {8, 1, 4, 4}})
                  .attr("groups", int64_t{8})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("conv_transpose2d/large", "conv_transpose2d"_op, {{1, 64, 14, 14}, {64, 32, 4, 4}, {32}})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(4));
  c.push_back(OpCase("conv_transpose2d/direct_small", "conv_transpose2d"_op, {{2, 3, 9, 10}, {3, 5, 3, 3}, {5}})
                  .attr("padding", V{1, 0, 1, 2}));
  // max_pool2d
  c.push_back(OpCase("max_pool2d/default", "max_pool2d"_op, {{2, 3, 8, 8}}));
  c.push_back(OpCase("max_pool2d/odd_2x2", "max_pool2d"_op, {{2, 3, 9, 7}}));
  c.push_back(OpCase("max_pool2d/large_2x2", "max_pool2d"_op, {{8, 32, 28, 28}}));
  // Rows of 16 and 15 windows (vectors of 8, the last overlapping), odd H and W.
  c.push_back(OpCase("max_pool2d/wide_2x2", "max_pool2d"_op, {{2, 3, 20, 33}}));
  c.push_back(OpCase("max_pool2d/odd_wide_2x2", "max_pool2d"_op, {{2, 3, 21, 31}}));
  c.push_back(OpCase("max_pool2d/odd_stride_pad", "max_pool2d"_op, {{1, 5, 11, 9}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("max_pool2d/ceil", "max_pool2d"_op, {{1, 2, 7, 10}})
                  .attr("kernel", V{2, 3})
                  .attr("stride", V{2, 2})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("max_pool2d/ceil_pad", "max_pool2d"_op, {{1, 3, 6, 6}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("max_pool2d/dilation", "max_pool2d"_op, {{1, 4, 10, 10}})
                  .attr("kernel", V{3, 2})
                  .attr("stride", V{1, 1})
                  .attr("dilation", V{2, 3}));
  c.push_back(OpCase("max_pool2d/same", "max_pool2d"_op, {{1, 3, 9, 7}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("pad_mode", std::string("same")));
  c.push_back(OpCase("max_pool2d/valid_large", "max_pool2d"_op, {{4, 16, 33, 33}})
                  .attr("kernel", V{3, 3})
                  .attr("pad_mode", std::string("valid")));
  // avg_pool2d
  c.push_back(OpCase("avg_pool2d/default", "avg_pool2d"_op, {{2, 3, 8, 8}}));
  c.push_back(OpCase("avg_pool2d/pad_exclude", "avg_pool2d"_op, {{1, 4, 9, 9}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1}));
  c.push_back(OpCase("avg_pool2d/pad_include", "avg_pool2d"_op, {{1, 4, 9, 9}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("count_include_pad", true));
  c.push_back(OpCase("avg_pool2d/ceil_exclude", "avg_pool2d"_op, {{1, 3, 7, 8}})
                  .attr("kernel", V{2, 3})
                  .attr("stride", V{2, 2})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("avg_pool2d/ceil_include", "avg_pool2d"_op, {{1, 3, 8, 7}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("ceil_mode", true)
                  .attr("count_include_pad", true));
  c.push_back(OpCase("avg_pool2d/same_include", "avg_pool2d"_op, {{1, 3, 10, 9}})
                  .attr("kernel", V{4, 3})
                  .attr("stride", V{3, 2})
                  .attr("pad_mode", std::string("same"))
                  .attr("count_include_pad", true));
  c.push_back(OpCase("avg_pool2d/large", "avg_pool2d"_op, {{2, 32, 35, 35}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{1, 1})
                  .attr("padding", V{1, 1, 1, 1}));
  // global_avg_pool
  c.push_back(OpCase("global_avg_pool/nchw", "global_avg_pool"_op, {{2, 5, 7, 7}}));
  c.push_back(OpCase("global_avg_pool/large_plane", "global_avg_pool"_op, {{1, 3, 40, 41}}).tol(2));
  c.push_back(OpCase("global_avg_pool/1x1", "global_avg_pool"_op, {{3, 33, 1, 1}}));
  c.push_back(OpCase("global_avg_pool/ncw", "global_avg_pool"_op, {{2, 3, 17}}));

  // conv2d_weight_grad: dy has conv2d's output shape; the big batch spans several of the cpu kernel's slices.
  c.push_back(OpCase("conv2d_weight_grad/basic", "conv2d_weight_grad"_op, {{2, 3, 7, 9}, {2, 4, 5, 7}})
                  .attr("kernel", V{3, 3}));
  c.push_back(OpCase("conv2d_weight_grad/stride_asym_pad", "conv2d_weight_grad"_op, {{2, 5, 11, 13}, {2, 6, 6, 13}})
                  .attr("kernel", V{3, 2})
                  .attr("stride", V{2, 1})
                  .attr("padding", V{1, 0, 2, 1}));
  c.push_back(OpCase("conv2d_weight_grad/dilation", "conv2d_weight_grad"_op, {{1, 4, 12, 12}, {1, 8, 8, 8}})
                  .attr("kernel", V{3, 3})
                  .attr("dilation", V{2, 2}));
  c.push_back(OpCase("conv2d_weight_grad/groups", "conv2d_weight_grad"_op, {{2, 6, 9, 9}, {2, 9, 7, 7}})
                  .attr("kernel", V{3, 3})
                  .attr("groups", int64_t{3}));
  c.push_back(OpCase("conv2d_weight_grad/negative_end_pad", "conv2d_weight_grad"_op, {{1, 2, 6, 6}, {1, 3, 2, 2}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, -1, -1}));
  c.push_back(OpCase("conv2d_weight_grad/batch_slices", "conv2d_weight_grad"_op, {{19, 8, 10, 10}, {19, 16, 10, 10}})
                  .attr("kernel", V{3, 3})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(4));
  c.push_back(OpCase("conv2d_weight_grad/simplenet", "conv2d_weight_grad"_op, {{64, 1, 28, 28}, {64, 32, 28, 28}})
                  .attr("kernel", V{3, 3})
                  .attr("padding", V{1, 1, 1, 1})
                  .tol(8));
  c.push_back(OpCase("conv2d_weight_grad/lenet1", "conv2d_weight_grad"_op, {{8, 1, 28, 28}, {8, 6, 28, 28}})
                  .attr("kernel", V{5, 5})
                  .attr("padding", V{2, 2, 2, 2})
                  .tol(4));
  c.push_back(OpCase("conv2d_weight_grad/wide_kernel", "conv2d_weight_grad"_op, {{3, 2, 12, 14}, {3, 7, 10, 9}})
                  .attr("kernel", V{3, 7})
                  .attr("dilation", V{1, 1})
                  .attr("padding", V{0, 1, 0, 0}));
  // max_pool2d_grad: dy has max_pool2d's output shape.
  // Integer inputs make ties: the first element in row-major window order takes the gradient.
  c.push_back(OpCase("max_pool2d_grad/ties_odd", "max_pool2d_grad"_op, {{2, 3, 21, 31}, {2, 3, 10, 15}})
                  .gen(0, Gen::integers(0, 3)));
  c.push_back(OpCase("max_pool2d_grad/ties_lenet", "max_pool2d_grad"_op, {{4, 6, 28, 28}, {4, 6, 14, 14}})
                  .gen(0, Gen::integers(0, 3)));
  c.push_back(OpCase("max_pool2d_grad/default", "max_pool2d_grad"_op, {{2, 3, 8, 8}, {2, 3, 4, 4}}));
  c.push_back(OpCase("max_pool2d_grad/odd_2x2", "max_pool2d_grad"_op, {{2, 3, 9, 7}, {2, 3, 4, 3}}));
  c.push_back(OpCase("max_pool2d_grad/simplenet", "max_pool2d_grad"_op, {{64, 32, 28, 28}, {64, 32, 14, 14}}));
  c.push_back(OpCase("max_pool2d_grad/overlapping", "max_pool2d_grad"_op, {{1, 2, 7, 7}, {1, 2, 5, 5}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{1, 1}));
  c.push_back(OpCase("max_pool2d_grad/ceil_pad", "max_pool2d_grad"_op, {{1, 3, 6, 6}, {1, 3, 4, 4}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("padding", V{1, 1, 1, 1})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("max_pool2d_grad/dilation", "max_pool2d_grad"_op, {{1, 4, 10, 10}, {1, 4, 4, 4}})
                  .attr("kernel", V{2, 2})
                  .attr("stride", V{2, 2})
                  .attr("dilation", V{2, 2}));
  c.push_back(OpCase("max_pool2d_grad/same", "max_pool2d_grad"_op, {{1, 3, 9, 7}, {1, 3, 5, 4}})
                  .attr("kernel", V{3, 3})
                  .attr("stride", V{2, 2})
                  .attr("pad_mode", std::string("same")));

  // ---- 3-D (NCDHW): every option of the 2-D cases on small volumes (the gradient check differentiates each input
  // element by finite differences). conv3d runs oneDNN on cpu; f16/bf16 are staged through f32.
  c.push_back(OpCase("conv3d/basic", "conv3d"_op, {{2, 3, 5, 6, 7}, {4, 3, 3, 3, 3}}));
  c.push_back(OpCase("conv3d/bias_pad", "conv3d"_op, {{1, 8, 6, 6, 6}, {16, 8, 3, 3, 3}, {16}})
                  .attr("padding", V{1, 1, 1, 1, 1, 1})
                  .tol(2));
  c.push_back(OpCase("conv3d/stride_asym_pad", "conv3d"_op, {{2, 5, 7, 9, 8}, {6, 5, 3, 3, 2}, {6}})
                  .attr("stride", V{1, 2, 3})
                  .attr("padding", V{1, 1, 0, 0, 2, 1}));
  c.push_back(OpCase("conv3d/dilation", "conv3d"_op, {{1, 4, 7, 8, 9}, {8, 4, 2, 3, 3}})
                  .attr("dilation", V{3, 2, 1})
                  .attr("padding", V{1, 2, 1, 2, 2, 1}));
  c.push_back(OpCase("conv3d/groups", "conv3d"_op, {{2, 6, 5, 5, 5}, {9, 2, 3, 3, 3}, {9}}).attr("groups", int64_t{3}));
  c.push_back(OpCase("conv3d/depthwise", "conv3d"_op, {{1, 16, 4, 7, 7}, {16, 1, 3, 3, 3}, {16}})
                  .attr("groups", int64_t{16})
                  .attr("padding", V{1, 1, 1, 1, 1, 1}));
  c.push_back(OpCase("conv3d/same_stride", "conv3d"_op, {{1, 3, 5, 9, 8}, {8, 3, 3, 4, 3}, {8}})
                  .attr("pad_mode", std::string("same"))
                  .attr("stride", V{2, 2, 1})
                  .attr("padding", V{5, 5, 5, 5, 5, 5}));  // padding ignored under "same"
  c.push_back(OpCase("conv3d/valid", "conv3d"_op, {{1, 3, 5, 6, 6}, {4, 3, 2, 3, 3}})
                  .attr("pad_mode", std::string("valid"))
                  .attr("padding", V{3, 3, 3, 3, 3, 3}));
  // r3d_18's stem (3x7x7, stride (1,2,2)) and a (2+1)-D factorised pair on a wider volume.
  c.push_back(OpCase("conv3d/r3d_stem", "conv3d"_op, {{1, 3, 4, 20, 20}, {8, 3, 3, 7, 7}})
                  .attr("stride", V{1, 2, 2})
                  .attr("padding", V{1, 3, 3, 1, 3, 3})
                  .tol(2));
  c.push_back(OpCase("conv3d/spatial_1x3x3", "conv3d"_op, {{2, 16, 4, 10, 10}, {24, 16, 1, 3, 3}, {24}})
                  .attr("padding", V{0, 1, 1, 0, 1, 1})
                  .tol(4));
  c.push_back(OpCase("conv3d/temporal_3x1x1", "conv3d"_op, {{2, 24, 6, 5, 5}, {16, 24, 3, 1, 1}, {16}})
                  .attr("padding", V{1, 0, 0, 1, 0, 0})
                  .tol(4));
  c.push_back(OpCase("conv_transpose3d/basic", "conv_transpose3d"_op, {{2, 3, 3, 4, 4}, {3, 4, 3, 3, 2}}));
  c.push_back(OpCase("conv_transpose3d/stride_pad_bias", "conv_transpose3d"_op, {{1, 4, 3, 4, 5}, {4, 5, 3, 3, 3}, {5}})
                  .attr("stride", V{2, 2, 1})
                  .attr("padding", V{1, 1, 0, 1, 0, 1}));
  c.push_back(OpCase("conv_transpose3d/output_padding", "conv_transpose3d"_op, {{1, 4, 3, 4, 4}, {4, 3, 3, 3, 3}, {3}})
                  .attr("stride", V{2, 3, 2})
                  .attr("padding", V{1, 1, 0, 0, 0, 1})
                  .attr("output_padding", V{1, 2, 0}));
  c.push_back(OpCase("conv_transpose3d/dilation_groups", "conv_transpose3d"_op, {{2, 6, 3, 4, 3}, {6, 2, 2, 2, 3}, {4}})
                  .attr("dilation", V{2, 1, 2})
                  .attr("groups", int64_t{2}));
  c.push_back(OpCase("max_pool3d/default", "max_pool3d"_op, {{2, 3, 4, 6, 6}}));
  c.push_back(OpCase("max_pool3d/odd_stride_pad", "max_pool3d"_op, {{1, 5, 5, 7, 9}})
                  .attr("kernel", V{3, 3, 3})
                  .attr("stride", V{2, 2, 2})
                  .attr("padding", V{1, 1, 1, 1, 1, 1}));
  c.push_back(OpCase("max_pool3d/ceil_pad", "max_pool3d"_op, {{1, 3, 6, 6, 5}})
                  .attr("kernel", V{2, 3, 3})
                  .attr("stride", V{2, 2, 2})
                  .attr("padding", V{0, 1, 1, 0, 1, 1})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("max_pool3d/dilation", "max_pool3d"_op, {{1, 4, 6, 8, 8}})
                  .attr("kernel", V{2, 3, 2})
                  .attr("stride", V{1, 1, 2})
                  .attr("dilation", V{2, 2, 3}));
  c.push_back(OpCase("max_pool3d/same", "max_pool3d"_op, {{1, 3, 5, 9, 7}})
                  .attr("kernel", V{3, 3, 3})
                  .attr("stride", V{1, 2, 2})
                  .attr("pad_mode", std::string("same")));
  c.push_back(OpCase("max_pool3d/s3d_1x3x3", "max_pool3d"_op, {{2, 16, 4, 15, 15}})
                  .attr("kernel", V{1, 3, 3})
                  .attr("stride", V{1, 2, 2})
                  .attr("padding", V{0, 1, 1, 0, 1, 1}));
  c.push_back(OpCase("avg_pool3d/default", "avg_pool3d"_op, {{2, 3, 4, 6, 6}}));
  c.push_back(OpCase("avg_pool3d/pad_exclude", "avg_pool3d"_op, {{1, 4, 5, 7, 7}})
                  .attr("kernel", V{3, 3, 3})
                  .attr("stride", V{2, 2, 2})
                  .attr("padding", V{1, 1, 1, 1, 1, 1}));
  c.push_back(OpCase("avg_pool3d/pad_include", "avg_pool3d"_op, {{1, 4, 5, 7, 7}})
                  .attr("kernel", V{3, 3, 3})
                  .attr("stride", V{2, 2, 2})
                  .attr("padding", V{1, 1, 1, 1, 1, 1})
                  .attr("count_include_pad", true));
  c.push_back(OpCase("avg_pool3d/ceil_exclude", "avg_pool3d"_op, {{1, 3, 5, 7, 8}})
                  .attr("kernel", V{2, 2, 3})
                  .attr("stride", V{2, 2, 2})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("avg_pool3d/ceil_include", "avg_pool3d"_op, {{1, 3, 4, 8, 7}})
                  .attr("kernel", V{3, 3, 3})
                  .attr("stride", V{2, 2, 2})
                  .attr("padding", V{1, 1, 1, 1, 1, 1})
                  .attr("ceil_mode", true)
                  .attr("count_include_pad", true));
  c.push_back(OpCase("avg_pool3d/same_include", "avg_pool3d"_op, {{1, 3, 5, 10, 9}})
                  .attr("kernel", V{2, 4, 3})
                  .attr("stride", V{2, 3, 2})
                  .attr("pad_mode", std::string("same"))
                  .attr("count_include_pad", true));
  c.push_back(OpCase("avg_pool3d/valid", "avg_pool3d"_op, {{2, 3, 5, 6, 7}})
                  .attr("kernel", V{2, 3, 3})
                  .attr("stride", V{1, 1, 2})
                  .attr("pad_mode", std::string("valid"))
                  .attr("padding", V{1, 1, 1, 1, 1, 1}));
  c.push_back(OpCase("global_avg_pool/ncdhw", "global_avg_pool"_op, {{2, 3, 4, 5, 6}}));
  c.push_back(OpCase("conv3d_weight_grad/basic", "conv3d_weight_grad"_op, {{2, 3, 5, 6, 7}, {2, 4, 3, 4, 5}})
                  .attr("kernel", V{3, 3, 3}));
  c.push_back(
      OpCase("conv3d_weight_grad/stride_pad_dilation", "conv3d_weight_grad"_op, {{2, 5, 7, 9, 8}, {2, 6, 3, 5, 3}})
          .attr("kernel", V{3, 2, 3})
          .attr("stride", V{2, 2, 3})
          .attr("dilation", V{1, 2, 1})
          .attr("padding", V{1, 1, 0, 0, 1, 1}));
  c.push_back(OpCase("conv3d_weight_grad/groups", "conv3d_weight_grad"_op, {{2, 6, 4, 5, 5}, {2, 9, 2, 3, 3}})
                  .attr("kernel", V{3, 3, 3})
                  .attr("groups", int64_t{3}));
  c.push_back(OpCase("conv3d_weight_grad/negative_end_pad", "conv3d_weight_grad"_op, {{1, 2, 5, 6, 6}, {1, 3, 2, 2, 2}})
                  .attr("kernel", V{3, 3, 3})
                  .attr("stride", V{2, 2, 2})
                  .attr("padding", V{1, 1, 1, -1, -1, -1}));
  // 11 images: slices of 2 and 1 (two primitives), summed in slice order.
  c.push_back(OpCase("conv3d_weight_grad/batch_slices", "conv3d_weight_grad"_op, {{11, 8, 4, 6, 6}, {11, 16, 4, 6, 6}})
                  .attr("kernel", V{3, 3, 3})
                  .attr("padding", V{1, 1, 1, 1, 1, 1})
                  .tol(4));
  c.push_back(OpCase("max_pool3d_grad/ties", "max_pool3d_grad"_op, {{2, 3, 6, 7, 9}, {2, 3, 3, 3, 4}})
                  .gen(0, Gen::integers(0, 3)));
  c.push_back(OpCase("max_pool3d_grad/overlapping", "max_pool3d_grad"_op, {{1, 2, 5, 6, 6}, {1, 2, 3, 4, 4}})
                  .attr("kernel", V{3, 3, 3})
                  .attr("stride", V{1, 1, 1}));
  c.push_back(OpCase("max_pool3d_grad/ceil_pad_dilation", "max_pool3d_grad"_op, {{1, 3, 6, 7, 7}, {1, 3, 3, 4, 4}})
                  .attr("kernel", V{2, 3, 2})
                  .attr("stride", V{2, 2, 2})
                  .attr("dilation", V{1, 1, 2})
                  .attr("padding", V{0, 1, 1, 0, 1, 1})
                  .attr("ceil_mode", true));
  c.push_back(OpCase("max_pool3d_grad/same", "max_pool3d_grad"_op, {{1, 3, 5, 9, 7}, {1, 3, 5, 5, 4}})
                  .attr("kernel", V{3, 3, 3})
                  .attr("stride", V{1, 2, 2})
                  .attr("pad_mode", std::string("same")));

  const auto f32 = DType::f32;
  const auto err = [&](std::string n, OpId op, std::vector<Shape> s, Attrs a, ErrorCode code) {
    e.push_back({std::move(n), op, s, std::vector<DType>(s.size(), f32), std::move(a), code});
  };
  err("conv2d_weight_grad/dy_size", "conv2d_weight_grad"_op, {{1, 3, 8, 8}, {1, 4, 5, 6}}, {{"kernel", V{3, 3}}},
      ErrorCode::shape_mismatch);
  err("conv2d_weight_grad/groups", "conv2d_weight_grad"_op, {{1, 3, 8, 8}, {1, 4, 6, 6}},
      {{"kernel", V{3, 3}}, {"groups", int64_t{2}}}, ErrorCode::shape_mismatch);
  err("max_pool2d_grad/dy_shape", "max_pool2d_grad"_op, {{1, 3, 8, 8}, {1, 3, 3, 4}}, {}, ErrorCode::shape_mismatch);
  err("conv2d/x_rank", "conv2d"_op, {{3, 8, 8}, {4, 3, 3, 3}}, {}, ErrorCode::shape_mismatch);
  err("conv2d/channel_mismatch", "conv2d"_op, {{1, 4, 8, 8}, {4, 3, 3, 3}}, {}, ErrorCode::shape_mismatch);
  err("conv2d/groups_not_dividing", "conv2d"_op, {{1, 6, 8, 8}, {4, 2, 3, 3}}, {{"groups", int64_t{4}}},
      ErrorCode::shape_mismatch);
  err("conv2d/out_channels_groups", "conv2d"_op, {{1, 6, 8, 8}, {4, 2, 3, 3}}, {{"groups", int64_t{3}}},
      ErrorCode::shape_mismatch);
  err("conv2d/kernel_too_large", "conv2d"_op, {{1, 3, 4, 4}, {4, 3, 5, 5}}, {}, ErrorCode::shape_mismatch);
  err("conv2d/dilated_kernel_too_large", "conv2d"_op, {{1, 3, 6, 6}, {4, 3, 3, 3}}, {{"dilation", V{3, 3}}},
      ErrorCode::shape_mismatch);
  err("conv2d/bias_shape", "conv2d"_op, {{1, 3, 8, 8}, {4, 3, 3, 3}, {3}}, {}, ErrorCode::shape_mismatch);
  err("conv2d/stride_len", "conv2d"_op, {{1, 3, 8, 8}, {4, 3, 3, 3}}, {{"stride", V{1}}}, ErrorCode::invalid_argument);
  err("conv2d/padding_len", "conv2d"_op, {{1, 3, 8, 8}, {4, 3, 3, 3}}, {{"padding", V{1, 1}}},
      ErrorCode::invalid_argument);
  err("conv2d/zero_stride", "conv2d"_op, {{1, 3, 8, 8}, {4, 3, 3, 3}}, {{"stride", V{0, 1}}},
      ErrorCode::invalid_argument);
  err("conv2d/pad_mode", "conv2d"_op, {{1, 3, 8, 8}, {4, 3, 3, 3}}, {{"pad_mode", std::string("full")}},
      ErrorCode::invalid_argument);
  e.push_back({"conv2d/dtype_mix",
               "conv2d"_op,
               {{1, 3, 8, 8}, {4, 3, 3, 3}},
               {f32, DType::bf16},
               {},
               ErrorCode::dtype_mismatch});
  e.push_back({"conv2d/int",
               "conv2d"_op,
               {{1, 3, 8, 8}, {4, 3, 3, 3}},
               {DType::i32, DType::i32},
               {},
               ErrorCode::dtype_mismatch});
  err("conv_transpose2d/channel_mismatch", "conv_transpose2d"_op, {{1, 4, 5, 5}, {3, 2, 3, 3}}, {},
      ErrorCode::shape_mismatch);
  err("conv_transpose2d/groups", "conv_transpose2d"_op, {{1, 3, 5, 5}, {3, 2, 3, 3}}, {{"groups", int64_t{2}}},
      ErrorCode::shape_mismatch);
  err("conv_transpose2d/output_padding_too_big", "conv_transpose2d"_op, {{1, 3, 5, 5}, {3, 2, 3, 3}},
      {{"stride", V{2, 2}}, {"output_padding", V{2, 0}}}, ErrorCode::invalid_argument);
  err("conv_transpose2d/nonpositive_out", "conv_transpose2d"_op, {{1, 3, 1, 1}, {3, 2, 1, 1}},
      {{"padding", V{1, 0, 1, 0}}}, ErrorCode::shape_mismatch);
  err("conv_transpose2d/bias_shape", "conv_transpose2d"_op, {{1, 3, 5, 5}, {3, 2, 3, 3}, {3}}, {},
      ErrorCode::shape_mismatch);
  err("max_pool2d/rank", "max_pool2d"_op, {{3, 8, 8}}, {}, ErrorCode::shape_mismatch);
  err("max_pool2d/kernel_len", "max_pool2d"_op, {{1, 3, 8, 8}}, {{"kernel", V{2}}}, ErrorCode::invalid_argument);
  err("max_pool2d/kernel_too_large", "max_pool2d"_op, {{1, 3, 4, 4}}, {{"kernel", V{5, 5}}},
      ErrorCode::shape_mismatch);
  err("max_pool2d/pad_too_large", "max_pool2d"_op, {{1, 3, 8, 8}}, {{"kernel", V{2, 2}}, {"padding", V{2, 0, 0, 0}}},
      ErrorCode::invalid_argument);
  err("max_pool2d/dilation_len", "max_pool2d"_op, {{1, 3, 8, 8}}, {{"dilation", V{1, 1, 1}}},
      ErrorCode::invalid_argument);
  err("avg_pool2d/stride_len", "avg_pool2d"_op, {{1, 3, 8, 8}}, {{"stride", V{1, 1, 1}}}, ErrorCode::invalid_argument);
  err("avg_pool2d/pad_mode", "avg_pool2d"_op, {{1, 3, 8, 8}}, {{"pad_mode", std::string("SAME")}},
      ErrorCode::invalid_argument);
  err("global_avg_pool/rank", "global_avg_pool"_op, {{3, 8}}, {}, ErrorCode::shape_mismatch);
  err("conv3d/x_rank", "conv3d"_op, {{1, 3, 8, 8}, {4, 3, 3, 3, 3}}, {}, ErrorCode::shape_mismatch);
  err("conv3d/channel_mismatch", "conv3d"_op, {{1, 4, 5, 8, 8}, {4, 3, 3, 3, 3}}, {}, ErrorCode::shape_mismatch);
  err("conv3d/groups_not_dividing", "conv3d"_op, {{1, 6, 5, 8, 8}, {4, 2, 3, 3, 3}}, {{"groups", int64_t{4}}},
      ErrorCode::shape_mismatch);
  err("conv3d/kernel_too_large", "conv3d"_op, {{1, 3, 2, 8, 8}, {4, 3, 3, 3, 3}}, {}, ErrorCode::shape_mismatch);
  err("conv3d/bias_shape", "conv3d"_op, {{1, 3, 5, 8, 8}, {4, 3, 3, 3, 3}, {3}}, {}, ErrorCode::shape_mismatch);
  err("conv3d/stride_len", "conv3d"_op, {{1, 3, 5, 8, 8}, {4, 3, 3, 3, 3}}, {{"stride", V{1, 1}}},
      ErrorCode::invalid_argument);
  err("conv3d/padding_len", "conv3d"_op, {{1, 3, 5, 8, 8}, {4, 3, 3, 3, 3}}, {{"padding", V{1, 1, 1, 1}}},
      ErrorCode::invalid_argument);
  err("conv3d/zero_dilation", "conv3d"_op, {{1, 3, 5, 8, 8}, {4, 3, 3, 3, 3}}, {{"dilation", V{1, 0, 1}}},
      ErrorCode::invalid_argument);
  err("conv_transpose3d/channel_mismatch", "conv_transpose3d"_op, {{1, 4, 3, 5, 5}, {3, 2, 3, 3, 3}}, {},
      ErrorCode::shape_mismatch);
  err("conv_transpose3d/output_padding_too_big", "conv_transpose3d"_op, {{1, 3, 3, 5, 5}, {3, 2, 3, 3, 3}},
      {{"stride", V{2, 2, 2}}, {"output_padding", V{0, 2, 0}}}, ErrorCode::invalid_argument);
  err("max_pool3d/rank", "max_pool3d"_op, {{1, 3, 8, 8}}, {}, ErrorCode::shape_mismatch);
  err("max_pool3d/kernel_len", "max_pool3d"_op, {{1, 3, 4, 8, 8}}, {{"kernel", V{2, 2}}}, ErrorCode::invalid_argument);
  err("max_pool3d/pad_too_large", "max_pool3d"_op, {{1, 3, 4, 8, 8}},
      {{"kernel", V{2, 2, 2}}, {"padding", V{0, 2, 0, 0, 0, 0}}}, ErrorCode::invalid_argument);
  err("avg_pool3d/kernel_too_large", "avg_pool3d"_op, {{1, 3, 2, 8, 8}}, {{"kernel", V{3, 3, 3}}},
      ErrorCode::shape_mismatch);
  err("conv3d_weight_grad/dy_size", "conv3d_weight_grad"_op, {{1, 3, 5, 8, 8}, {1, 4, 3, 5, 6}},
      {{"kernel", V{3, 3, 3}}}, ErrorCode::shape_mismatch);
  err("max_pool3d_grad/dy_shape", "max_pool3d_grad"_op, {{1, 3, 4, 8, 8}, {1, 3, 2, 3, 4}}, {},
      ErrorCode::shape_mismatch);
}
}  // namespace spore::conformance
