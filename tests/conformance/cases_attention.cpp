// Conformance cases of the fused attention op (ops/attention.h): plain and k_transposed keys, masks broadcast
// every way (full, per row, per column, per batch), sizes that take the 4x16 / 8-wide / scalar column paths and
// the row tails of the cpu kernel, several row blocks per batch (Lk small -> 64-row blocks, Lq = 70), every float
// dtype vs the double reference. The scores go through exp, so f32 gets a wider tolerance than one rounding.
#include <limits>

#include "conformance/harness.h"

namespace spore::conformance {

void add_attention_cases(CaseList& c, ErrorList& e) {
  const OpId at = "attention"_op;
  const DType f = DType::f32;
  c.push_back(OpCase("attention/basic", at, {{2, 5, 8}, {2, 7, 8}, {2, 7, 6}}).attr("scale", 0.35).tol(4));
  c.push_back(OpCase("attention/k_transposed", at, {{3, 9, 16}, {3, 16, 11}, {3, 11, 5}})
                  .attr("scale", 0.25)
                  .attr("k_transposed", true)
                  .tol(4));
  c.push_back(OpCase("attention/heads_4d", at, {{2, 3, 6, 32}, {2, 3, 33, 32}, {2, 3, 33, 17}})
                  .attr("scale", 0.17677669529663687)
                  .tol(4));
  c.push_back(OpCase("attention/transformer_shape", at, {{8, 32, 32}, {8, 32, 32}, {8, 32, 32}})
                  .attr("scale", 0.17677669529663687)
                  .tol(4));
  c.push_back(OpCase("attention/many_row_blocks", at, {{2, 70, 4}, {2, 130, 4}, {2, 130, 3}})
                  .attr("scale", 0.5)
                  .tol(4));
  c.push_back(OpCase("attention/single_key", at, {{1, 3, 2}, {1, 1, 2}, {1, 1, 4}}));
  c.push_back(OpCase("attention/mask_full", at, {{2, 5, 8}, {2, 7, 8}, {2, 7, 6}, {2, 5, 7}})
                  .attr("scale", 0.3)
                  .gen(3, Gen::uniform(-4, 1))
                  .tol(4));
  c.push_back(OpCase("attention/mask_per_key", at, {{2, 2, 5, 8}, {2, 2, 7, 8}, {2, 2, 7, 6}, {2, 1, 1, 7}})
                  .attr("scale", 0.3)
                  .tol(4));
  c.push_back(OpCase("attention/mask_per_query", at, {{3, 6, 4}, {3, 4, 9}, {3, 9, 4}, {6, 1}})
                  .attr("k_transposed", true)
                  .attr("scale", 0.5)
                  .tol(4));
  c.push_back(OpCase("attention/mask_rank2_causal_like", at, {{4, 6, 4}, {4, 6, 4}, {4, 6, 4}, {6, 6}})
                  .gen(3, Gen::uniform(-8, 0))
                  .attr("scale", 0.5)
                  .tol(4));

  e.push_back(
      {"attention/d_mismatch", at, {{2, 5, 8}, {2, 7, 9}, {2, 7, 6}}, {f, f, f}, {}, ErrorCode::shape_mismatch});
  e.push_back({"attention/k_transposed_d_mismatch", at, {{2, 5, 8}, {2, 7, 8}, {2, 7, 6}}, {f, f, f},
               {{"k_transposed", true}}, ErrorCode::shape_mismatch});
  e.push_back(
      {"attention/lk_mismatch", at, {{2, 5, 8}, {2, 7, 8}, {2, 6, 6}}, {f, f, f}, {}, ErrorCode::shape_mismatch});
  e.push_back({"attention/batch_mismatch", at, {{2, 5, 8}, {3, 7, 8}, {3, 7, 6}}, {f, f, f}, {},
               ErrorCode::shape_mismatch});
  e.push_back({"attention/rank_mismatch", at, {{2, 5, 8}, {7, 8}, {7, 6}}, {f, f, f}, {}, ErrorCode::shape_mismatch});
  e.push_back({"attention/rank1", at, {{8}, {8}, {8}}, {f, f, f}, {}, ErrorCode::shape_mismatch});
  e.push_back({"attention/mask_not_broadcastable", at, {{2, 5, 8}, {2, 7, 8}, {2, 7, 6}, {5, 6}}, {f, f, f, f}, {},
               ErrorCode::shape_mismatch});
  e.push_back({"attention/mask_rank_too_big", at, {{2, 5, 8}, {2, 7, 8}, {2, 7, 6}, {1, 2, 5, 7}}, {f, f, f, f}, {},
               ErrorCode::shape_mismatch});
  e.push_back({"attention/dtype_mismatch", at, {{2, 5, 8}, {2, 7, 8}, {2, 7, 6}}, {f, DType::f64, f}, {},
               ErrorCode::dtype_mismatch});
  e.push_back({"attention/scale_not_finite", at, {{2, 5, 8}, {2, 7, 8}, {2, 7, 6}}, {f, f, f},
               {{"scale", std::numeric_limits<double>::infinity()}}, ErrorCode::invalid_argument});
}

}  // namespace spore::conformance
