// Conformance cases of the quantization family: quantize_linear, dequantize_linear, qconv2d, qlinear.
// quantize/dequantize follow ONNX to the bit (exact for integer outputs). qconv2d / qlinear sum int8 products
// exactly (int32 in the cpu kernels, int64 in the reference); only the f32 scaling differs (f32 products on the
// cpu, double then one rounding in the reference), so they are held to |d| <= 1e-6 + 1e-6 |ref| (tol 0.1).
#include "conformance/harness.h"

namespace spore::conformance {
void add_quant_cases(CaseList& c, ErrorList& e) {
  using V = std::vector<int64_t>;
  const DType f32 = DType::f32, i8 = DType::i8, u8 = DType::u8;
  const DTypeSet only_u8{u8}, only_i8{i8};

  // quantize_linear: x / scale spans past the int8 range, so saturation is exercised too.
  const auto quant = [&](const std::string& name, Shape x, Shape s, std::optional<DType> zp_dtype, Gen zp_gen) {
    std::vector<Shape> shapes{x, s};
    if (zp_dtype) shapes.push_back(s);
    OpCase q(name, "quantize_linear"_op, shapes);
    q.gen(0, Gen::uniform(-3, 3)).gen(1, Gen::positive(0.008, 0.03)).input_dtype(1, f32);
    if (zp_dtype) q.input_dtype(2, *zp_dtype).gen(2, zp_gen);
    return q;
  };
  c.push_back(quant("quantize_linear/per_tensor_u8", {2, 3, 5, 5}, {}, u8, Gen::integers(100, 140)));
  c.push_back(quant("quantize_linear/per_tensor_i8", {2, 3, 5, 5}, {}, i8, Gen::integers(-10, 10)));
  c.push_back(quant("quantize_linear/per_axis_i8", {3, 4, 6}, {4}, i8, Gen::integers(-3, 3)));
  c.push_back(quant("quantize_linear/per_axis_last_u8", {5, 8}, {8}, u8, Gen::integers(0, 256)).attr("axis", int64_t{-1}));
  c.push_back(quant("quantize_linear/scale_shape_1", {4, 6}, {1}, i8, Gen::integers(-3, 3)));
  c.push_back(quant("quantize_linear/no_zero_point", {17}, {}, std::nullopt, {}));
  // Past one task's chunk (32768 elements) with a vector tail; per axis with rows that are not a vector multiple.
  c.push_back(quant("quantize_linear/large_u8", {2, 7, 2401}, {}, u8, Gen::integers(0, 20)));
  c.push_back(quant("quantize_linear/large_per_axis_i8", {2, 19, 1030}, {19}, i8, Gen::integers(-5, 5)));

  // dequantize_linear: q and zero point take the case's dtype (i8, u8, i32).
  c.push_back(OpCase("dequantize_linear/per_tensor", "dequantize_linear"_op, {{2, 3, 4}, {}, {}})
                  .gen(0, Gen::integers(0, 100))
                  .gen(1, Gen::positive(0.001, 0.1))
                  .input_dtype(1, f32)
                  .gen(2, Gen::integers(0, 7)));
  c.push_back(OpCase("dequantize_linear/per_axis", "dequantize_linear"_op, {{2, 3, 4}, {3}, {3}})
                  .gen(0, Gen::integers(0, 100))
                  .gen(1, Gen::positive(0.001, 0.1))
                  .input_dtype(1, f32)
                  .gen(2, Gen::integers(0, 7)));
  c.push_back(OpCase("dequantize_linear/per_axis0_no_zp", "dequantize_linear"_op, {{4, 5}, {4}})
                  .attr("axis", int64_t{0})
                  .gen(0, Gen::integers(0, 100))
                  .gen(1, Gen::positive(0.001, 0.1))
                  .input_dtype(1, f32));

  // qconv2d / qlinear: (x, x_scale, x_zero_point, w, w_scale, bias?); x and its zero point take the case dtype.
  // x_hi / w_hi: 128 / 65 keep the products inside what oneDNN's non-VNNI kernels compute exactly (7-bit u8
  // activations, or 7-bit weights); 256 / 128 take the cpu kernel's int32 fallback on such machines.
  int64_t x_hi = 256, w_hi = 128;
  const auto qcase = [&](const std::string& name, OpId op, bool is_u8, Shape x, Shape w, Shape ws, bool bias, int64_t zp_lo,
                         int64_t zp_hi) {
    std::vector<Shape> shapes{x, {}, {}, w, ws};
    if (bias) shapes.push_back({w[0]});
    OpCase q(name, op, shapes);
    q.only(is_u8 ? only_u8 : only_i8)
        .gen(0, is_u8 ? Gen::integers(0, x_hi) : Gen::integers(-128, 128))
        .gen(1, Gen::positive(0.01, 0.05))
        .input_dtype(1, f32)
        .gen(2, Gen::integers(zp_lo, zp_hi))
        .gen(3, Gen::integers(1 - w_hi, w_hi))
        .input_dtype(3, i8)
        .gen(4, Gen::positive(0.001, 0.01))
        .input_dtype(4, f32)
        .tol(0.1);
    if (bias) q.gen(5, Gen::uniform(-1, 1)).input_dtype(5, f32);
    return q;
  };
  const OpId qc = "qconv2d"_op, ql = "qlinear"_op;
  for (const int form : {0, 1, 2, 3}) {  // u8 7-bit, u8 full range, i8 with 7-bit weights, i8
    const bool u = form < 2;
    x_hi = form == 0 ? 128 : 256;
    w_hi = form == 2 ? 65 : 128;
    const std::string t = std::vector<std::string>{"_u7", "_u8", "_i8w7", "_i8"}[form];
    const int64_t zlo = u ? 100 : -5, zhi = u ? 140 : 5;
    c.push_back(qcase("qconv2d/pad_bias" + t, qc, u, {2, 3, 7, 9}, {4, 3, 3, 3}, {4}, true, zlo, zhi)
                    .attr("padding", V{1, 1, 1, 1}));
    c.push_back(qcase("qconv2d/zero_point_0" + t, qc, u, {2, 8, 6, 6}, {16, 8, 3, 3}, {16}, true, 0, 1)
                    .attr("padding", V{1, 1, 1, 1}));
    c.push_back(qcase("qconv2d/stride_asym_pad" + t, qc, u, {2, 5, 11, 13}, {6, 5, 3, 2}, {6}, true, zlo, zhi)
                    .attr("stride", V{2, 3})
                    .attr("padding", V{1, 0, 2, 1}));
    c.push_back(qcase("qconv2d/groups_dilation" + t, qc, u, {1, 6, 10, 10}, {9, 2, 3, 3}, {9}, false, zlo, zhi)
                    .attr("groups", int64_t{3})
                    .attr("dilation", V{2, 1})
                    .attr("padding", V{2, 1, 2, 1}));
    c.push_back(qcase("qconv2d/depthwise_same" + t, qc, u, {1, 8, 9, 9}, {8, 1, 3, 3}, {8}, true, zlo, zhi)
                    .attr("groups", int64_t{8})
                    .attr("pad_mode", std::string("same")));
    c.push_back(qcase("qconv2d/per_tensor_w_scale" + t, qc, u, {1, 4, 6, 6}, {5, 4, 3, 3}, {}, true, zlo, zhi));
    c.push_back(qcase("qconv2d/simplenet_first" + t, qc, u, {2, 1, 28, 28}, {16, 1, 3, 3}, {16}, true, 0, 1)
                    .attr("pad_mode", std::string("same")));
    c.push_back(qcase("qconv2d/pointwise_deep" + t, qc, u, {1, 64, 5, 5}, {16, 64, 1, 1}, {16}, true, zlo, zhi));
    c.push_back(qcase("qlinear/bias" + t, ql, u, {4, 37}, {10, 37}, {10}, true, zlo, zhi));
    c.push_back(qcase("qlinear/zero_point_0" + t, ql, u, {8, 64}, {12, 64}, {12}, true, 0, 1));
    c.push_back(qcase("qlinear/no_bias_3d" + t, ql, u, {2, 3, 13}, {5, 13}, {5}, false, zlo, zhi));
    c.push_back(qcase("qlinear/per_tensor_w_scale" + t, ql, u, {3, 20}, {7, 20}, {}, true, zlo, zhi));
    c.push_back(qcase("qlinear/large_k" + t, ql, u, {3, 1500}, {10, 1500}, {10}, true, zlo, zhi));
  }

  const Attrs none;
  e.push_back({"quantize_linear/x_not_f32", "quantize_linear"_op, {{3}, {}}, {DType::f64, f32}, none,
               ErrorCode::dtype_mismatch});
  e.push_back({"quantize_linear/zero_point_i32", "quantize_linear"_op, {{3}, {}, {}}, {f32, f32, DType::i32}, none,
               ErrorCode::dtype_mismatch});
  e.push_back({"quantize_linear/scale_len", "quantize_linear"_op, {{2, 3}, {4}, {4}}, {f32, f32, u8}, none,
               ErrorCode::shape_mismatch});
  e.push_back({"quantize_linear/zp_shape", "quantize_linear"_op, {{2, 3}, {3}, {}}, {f32, f32, u8}, none,
               ErrorCode::shape_mismatch});
  e.push_back({"dequantize_linear/zp_dtype", "dequantize_linear"_op, {{3}, {}, {}}, {i8, f32, u8}, none,
               ErrorCode::dtype_mismatch});
  e.push_back({"dequantize_linear/f32_input", "dequantize_linear"_op, {{3}, {}}, {f32, f32}, none,
               ErrorCode::dtype_mismatch});
  e.push_back({"qconv2d/w_not_i8", qc, {{1, 2, 5, 5}, {}, {}, {3, 2, 3, 3}, {3}}, {u8, f32, u8, u8, f32}, none,
               ErrorCode::dtype_mismatch});
  e.push_back({"qconv2d/zp_dtype", qc, {{1, 2, 5, 5}, {}, {}, {3, 2, 3, 3}, {3}}, {u8, f32, i8, i8, f32}, none,
               ErrorCode::dtype_mismatch});
  e.push_back({"qconv2d/w_scale_len", qc, {{1, 2, 5, 5}, {}, {}, {3, 2, 3, 3}, {2}}, {u8, f32, u8, i8, f32}, none,
               ErrorCode::shape_mismatch});
  e.push_back({"qconv2d/channels", qc, {{1, 4, 5, 5}, {}, {}, {3, 2, 3, 3}, {3}}, {u8, f32, u8, i8, f32}, none,
               ErrorCode::shape_mismatch});
  e.push_back({"qconv2d/x_scale_vector", qc, {{1, 2, 5, 5}, {2}, {}, {3, 2, 3, 3}, {3}}, {u8, f32, u8, i8, f32}, none,
               ErrorCode::shape_mismatch});
  e.push_back({"qlinear/in_mismatch", ql, {{3, 4}, {}, {}, {5, 6}, {5}}, {i8, f32, i8, i8, f32}, none,
               ErrorCode::shape_mismatch});
  e.push_back({"qlinear/bias_dtype", ql, {{3, 4}, {}, {}, {5, 4}, {5}, {5}}, {i8, f32, i8, i8, f32, DType::f16}, none,
               ErrorCode::dtype_mismatch});
  e.push_back({"qlinear/x_f32", ql, {{3, 4}, {}, {}, {5, 4}, {5}}, {f32, f32, f32, i8, f32}, none,
               ErrorCode::dtype_mismatch});
}
}  // namespace spore::conformance
