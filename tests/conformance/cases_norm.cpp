// Conformance cases of the norm family: batch/layer/rms/group norm and dropout.
#include "conformance/harness.h"

namespace spore::conformance {
void add_norm_cases(CaseList& c, ErrorList& e) {
  const Gen var = Gen::positive(0.2, 2.0);
  // batch_norm: x, scale, bias, mean, var (var > 0)
  c.push_back(OpCase("batch_norm/nchw", "batch_norm"_op, {{2, 3, 5, 7}, {3}, {3}, {3}, {3}}).gen(4, var));
  c.push_back(OpCase("batch_norm/nc", "batch_norm"_op, {{7, 33}, {33}, {33}, {33}, {33}}).gen(4, var));
  c.push_back(OpCase("batch_norm/ncw_eps", "batch_norm"_op, {{2, 4, 1001}, {4}, {4}, {4}, {4}})
                  .gen(4, var)
                  .attr("epsilon", 1e-2));
  c.push_back(OpCase("batch_norm/ncdhw", "batch_norm"_op, {{1, 5, 3, 4, 5}, {5}, {5}, {5}, {5}}).gen(4, var));
  // layer_norm
  c.push_back(OpCase("layer_norm/affine", "layer_norm"_op, {{4, 33}, {33}, {33}}));
  c.push_back(OpCase("layer_norm/weight_only", "layer_norm"_op, {{2, 3, 7}, {7}}));
  c.push_back(OpCase("layer_norm/plain", "layer_norm"_op, {{5, 1}}));
  c.push_back(OpCase("layer_norm/axis1", "layer_norm"_op, {{3, 4, 5}, {4, 5}, {4, 5}}).attr("axis", int64_t{1}));
  c.push_back(
      OpCase("layer_norm/axis0_eps", "layer_norm"_op, {{6, 9}}).attr("axis", int64_t{0}).attr("epsilon", 1e-3));
  c.push_back(OpCase("layer_norm/wide", "layer_norm"_op, {{3, 1030}, {1030}, {1030}}).tol(2));
  // rms_norm
  c.push_back(OpCase("rms_norm/weight", "rms_norm"_op, {{4, 33}, {33}}));
  c.push_back(OpCase("rms_norm/plain", "rms_norm"_op, {{2, 3, 7}}));
  c.push_back(
      OpCase("rms_norm/axis1", "rms_norm"_op, {{3, 4, 5}, {4, 5}}).attr("axis", int64_t{1}).attr("epsilon", 1e-2));
  c.push_back(OpCase("rms_norm/wide", "rms_norm"_op, {{2, 4099}, {4099}}).tol(2));
  // group_norm
  c.push_back(OpCase("group_norm/affine", "group_norm"_op, {{2, 6, 5, 5}, {6}, {6}}).attr("num_groups", int64_t{3}));
  c.push_back(OpCase("group_norm/weight_only", "group_norm"_op, {{2, 8, 7}, {8}}).attr("num_groups", int64_t{2}));
  c.push_back(OpCase("group_norm/plain_instance", "group_norm"_op, {{3, 4, 3, 3}}).attr("num_groups", int64_t{4}));
  c.push_back(OpCase("group_norm/one_group_eps", "group_norm"_op, {{1, 33, 4, 4}, {33}, {33}})
                  .attr("num_groups", int64_t{1})
                  .attr("epsilon", 1e-3));
  c.push_back(OpCase("group_norm/nc", "group_norm"_op, {{5, 6}, {6}, {6}}).attr("num_groups", int64_t{2}));
  // InstanceNorm rows longer than the CPU kernel's 8 sum lanes, with a remainder (19 x 23 = 437 per channel).
  c.push_back(
      OpCase("group_norm/instance_rows", "group_norm"_op, {{2, 4, 19, 23}, {4}, {4}}).attr("num_groups", int64_t{4}));
  // dropout
  c.push_back(OpCase("dropout/eval", "dropout"_op, {{4, 33}}).attr("p", 0.5).attr("training", false));
  c.push_back(OpCase("dropout/train", "dropout"_op, {{7, 1001}})
                  .attr("p", 0.3)
                  .attr("training", true)
                  .attr("seed", int64_t{1234}));
  c.push_back(OpCase("dropout/train_p0", "dropout"_op, {{33}}).attr("p", 0.0).attr("training", true));
  c.push_back(OpCase("dropout/train_p1", "dropout"_op, {{5, 7}}).attr("p", 1.0).attr("training", true));
  c.push_back(OpCase("dropout/train_big", "dropout"_op, {{70000}})
                  .attr("p", 0.9)
                  .attr("training", true)
                  .attr("seed", int64_t{-5}));
  // dropout with the offset input (the training step in graph mode): i64 or i32, shape [] or [1].
  c.push_back(OpCase("dropout/offset_i64", "dropout"_op, {{7, 1001}, {}})
                  .input_dtype(1, DType::i64)
                  .gen(1, Gen::integers(1, 1000000))
                  .attr("p", 0.3)
                  .attr("training", true)
                  .attr("seed", int64_t{1234}));
  c.push_back(OpCase("dropout/offset_i32_shape1", "dropout"_op, {{4, 33}, {1}})
                  .input_dtype(1, DType::i32)
                  .gen(1, Gen::integers(-50, 50))
                  .attr("p", 0.5)
                  .attr("training", true)
                  .attr("seed", int64_t{7}));
  c.push_back(OpCase("dropout/offset_eval", "dropout"_op, {{3, 17}, {}})
                  .input_dtype(1, DType::i64)
                  .gen(1, Gen::integers(1, 100))
                  .attr("p", 0.5)
                  .attr("training", false));
  c.push_back(OpCase("dropout/offset_big", "dropout"_op, {{70000}, {}})
                  .input_dtype(1, DType::i64)
                  .gen(1, Gen::integers(1, 1000))
                  .attr("p", 0.1)
                  .attr("training", true)
                  .attr("seed", int64_t{3}));

  const auto f32 = DType::f32;
  const auto err = [&](std::string n, OpId op, std::vector<Shape> s, Attrs a, ErrorCode code) {
    e.push_back({std::move(n), op, s, std::vector<DType>(s.size(), f32), std::move(a), code});
  };
  err("batch_norm/rank1", "batch_norm"_op, {{5}, {5}, {5}, {5}, {5}}, {}, ErrorCode::shape_mismatch);
  err("batch_norm/param_shape", "batch_norm"_op, {{2, 3, 4}, {3}, {3}, {4}, {3}}, {}, ErrorCode::shape_mismatch);
  err("batch_norm/negative_eps", "batch_norm"_op, {{2, 3}, {3}, {3}, {3}, {3}}, {{"epsilon", -1.0}},
      ErrorCode::invalid_argument);
  e.push_back({"batch_norm/dtype_mix",
               "batch_norm"_op,
               {{2, 3}, {3}, {3}, {3}, {3}},
               {f32, f32, f32, f32, DType::f64},
               {},
               ErrorCode::dtype_mismatch});
  err("layer_norm/weight_shape", "layer_norm"_op, {{3, 4, 5}, {4}}, {}, ErrorCode::shape_mismatch);
  err("layer_norm/bias_shape", "layer_norm"_op, {{3, 4, 5}, {4, 5}, {5}}, {{"axis", int64_t{1}}},
      ErrorCode::shape_mismatch);
  err("layer_norm/axis", "layer_norm"_op, {{3, 4}}, {{"axis", int64_t{2}}}, ErrorCode::invalid_argument);
  e.push_back({"layer_norm/int", "layer_norm"_op, {{3, 4}}, {DType::i64}, {}, ErrorCode::dtype_mismatch});
  err("rms_norm/weight_shape", "rms_norm"_op, {{3, 4}, {3}}, {}, ErrorCode::shape_mismatch);
  err("rms_norm/scalar", "rms_norm"_op, {{}}, {}, ErrorCode::shape_mismatch);
  err("group_norm/groups_not_dividing", "group_norm"_op, {{2, 6, 4}}, {{"num_groups", int64_t{4}}},
      ErrorCode::shape_mismatch);
  err("group_norm/zero_groups", "group_norm"_op, {{2, 6, 4}}, {{"num_groups", int64_t{0}}},
      ErrorCode::invalid_argument);
  err("group_norm/weight_shape", "group_norm"_op, {{2, 6, 4}, {3}}, {{"num_groups", int64_t{3}}},
      ErrorCode::shape_mismatch);
  err("group_norm/rank1", "group_norm"_op, {{6}}, {{"num_groups", int64_t{3}}}, ErrorCode::shape_mismatch);
  err("dropout/p_range", "dropout"_op, {{4}}, {{"p", 1.5}, {"training", true}}, ErrorCode::invalid_argument);
  e.push_back(
      {"dropout/int", "dropout"_op, {{4}}, {DType::i32}, {{"p", 0.5}, {"training", true}}, ErrorCode::dtype_mismatch});
  const Attrs train_half{{"p", 0.5}, {"training", true}};
  e.push_back({"dropout/offset_float", "dropout"_op, {{4}, {}}, {f32, f32}, train_half, ErrorCode::dtype_mismatch});
  e.push_back({"dropout/offset_bool", "dropout"_op, {{4}, {}}, {f32, DType::boolean}, train_half,
               ErrorCode::dtype_mismatch});
  e.push_back(
      {"dropout/offset_vector", "dropout"_op, {{4}, {2}}, {f32, DType::i64}, train_half, ErrorCode::shape_mismatch});
  e.push_back({"dropout/offset_matrix", "dropout"_op, {{4}, {1, 1}}, {f32, DType::i64}, train_half,
               ErrorCode::shape_mismatch});
}
}  // namespace spore::conformance
