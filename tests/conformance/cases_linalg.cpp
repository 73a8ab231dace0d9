// Conformance cases of the linalg family: matmul (NumPy semantics) and linear.
#include "conformance/harness.h"

namespace spore::conformance {
void add_linalg_cases(CaseList& c, ErrorList& e) {
  const auto ta = [](OpCase x) { return x.attr("transpose_a", true); };
  const auto tb = [](OpCase x) { return x.attr("transpose_b", true); };
  // Low-precision inputs accumulate over K in the reference (double) and cpu (f32) alike; the output
  // rounding dominates, but cancellation near zero needs a wider atol as K grows.
  c.push_back(OpCase("matmul/2d", "matmul"_op, {{7, 5}, {5, 9}}));
  c.push_back(OpCase("matmul/square33", "matmul"_op, {{33, 33}, {33, 33}}).tol(2));
  c.push_back(OpCase("matmul/large_k", "matmul"_op, {{3, 1030}, {1030, 17}}).tol(8));
  c.push_back(OpCase("matmul/row_vector_m1", "matmul"_op, {{1, 64}, {64, 40}}).tol(4));
  // Size-1 dims whose strides are not valid BLAS leading dimensions (a column transposed into a row, n = 1, k = 1).
  c.push_back(OpCase("matmul/ta_column", "matmul"_op, {{64, 1}, {64, 16}}).attr("transpose_a", true).tol(4));
  c.push_back(OpCase("matmul/tb_n1", "matmul"_op, {{5, 7}, {1, 7}}).attr("transpose_b", true));
  c.push_back(OpCase("matmul/outer_k1", "matmul"_op, {{6, 1}, {1, 5}}));
  c.push_back(OpCase("matmul/both_t_k1", "matmul"_op, {{1, 6}, {5, 1}}).attr("transpose_a", true).attr("transpose_b", true));
  c.push_back(OpCase("matmul/batched", "matmul"_op, {{4, 6, 8}, {4, 8, 3}}));
  c.push_back(OpCase("matmul/batch_broadcast", "matmul"_op, {{2, 1, 5, 7}, {3, 7, 4}}));
  c.push_back(OpCase("matmul/batch_broadcast_lhs", "matmul"_op, {{5, 7}, {2, 3, 7, 4}}));
  c.push_back(OpCase("matmul/vec_mat", "matmul"_op, {{7}, {2, 7, 5}}));
  c.push_back(OpCase("matmul/mat_vec", "matmul"_op, {{3, 4, 7}, {7}}));
  c.push_back(OpCase("matmul/vec_vec", "matmul"_op, {{33}, {33}}).tol(2));
  c.push_back(ta(OpCase("matmul/transpose_a", "matmul"_op, {{2, 9, 4}, {2, 9, 6}})));
  c.push_back(tb(OpCase("matmul/transpose_b", "matmul"_op, {{2, 4, 9}, {6, 9}})));
  c.push_back(tb(ta(OpCase("matmul/transpose_both", "matmul"_op, {{3, 1, 9, 4}, {2, 6, 9}}))));
  c.push_back(ta(OpCase("matmul/transpose_a_1d_ignored", "matmul"_op, {{5}, {5, 3}})));
  c.push_back(OpCase("matmul/zero_k", "matmul"_op, {{3, 0}, {0, 4}}));
  c.push_back(OpCase("linear/bias", "linear"_op, {{4, 13}, {7, 13}, {7}}));
  c.push_back(OpCase("linear/no_bias", "linear"_op, {{2, 3, 13}, {9, 13}}));
  c.push_back(OpCase("linear/vector_input", "linear"_op, {{13}, {5, 13}, {5}}));
  c.push_back(OpCase("linear/large", "linear"_op, {{33, 1024}, {65, 1024}, {65}}).tol(8));
  c.push_back(OpCase("linear/single_row", "linear"_op, {{1, 100}, {1000, 100}, {1000}}).tol(4));

  const auto f32 = DType::f32;
  e.push_back({"matmul/k_mismatch", "matmul"_op, {{3, 4}, {5, 6}}, {f32, f32}, {}, ErrorCode::shape_mismatch});
  e.push_back({"matmul/k_mismatch_transposed",
               "matmul"_op,
               {{3, 4}, {3, 6}},
               {f32, f32},
               {{"transpose_b", true}},
               ErrorCode::shape_mismatch});
  e.push_back(
      {"matmul/batch_mismatch", "matmul"_op, {{2, 3, 4}, {3, 4, 5}}, {f32, f32}, {}, ErrorCode::shape_mismatch});
  e.push_back({"matmul/scalar", "matmul"_op, {{}, {3}}, {f32, f32}, {}, ErrorCode::shape_mismatch});
  e.push_back({"matmul/dtype_mix", "matmul"_op, {{3, 4}, {4, 5}}, {f32, DType::f64}, {}, ErrorCode::dtype_mismatch});
  e.push_back({"matmul/int", "matmul"_op, {{3, 4}, {4, 5}}, {DType::i32, DType::i32}, {}, ErrorCode::dtype_mismatch});
  e.push_back({"linear/in_mismatch", "linear"_op, {{3, 4}, {5, 6}}, {f32, f32}, {}, ErrorCode::shape_mismatch});
  e.push_back({"linear/w_rank", "linear"_op, {{3, 4}, {4}}, {f32, f32}, {}, ErrorCode::shape_mismatch});
  e.push_back(
      {"linear/bias_shape", "linear"_op, {{3, 4}, {5, 4}, {4}}, {f32, f32, f32}, {}, ErrorCode::shape_mismatch});
  e.push_back({"linear/bias_dtype",
               "linear"_op,
               {{3, 4}, {5, 4}, {5}},
               {f32, f32, DType::f16},
               {},
               ErrorCode::dtype_mismatch});
}
}  // namespace spore::conformance
