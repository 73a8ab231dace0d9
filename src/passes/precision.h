#pragma once
// Precision conversion of a deployable graph (Ascend ATC's --precision_mode), decided by each op's AmpPolicy
// trait (ops/op_def.h), never by op-name lists:
//   force_fp32           float tensors stay / become f32
//   allow_fp32_to_fp16   every float op that has an f16 kernel computes in f16 (weights stored f16)
//   allow_fp32_to_bf16   the same with bf16
//   allow_mix_precision  AmpPolicy::low ops (matmul, conv...) in the low dtype, keep_f32 ops (softmax, norms,
//                        reductions, exp/log, losses) in f32, follow ops take their inputs' dtype
// Graph inputs and outputs keep their dtypes (casts are inserted at the boundary), so a converted model is a
// drop-in replacement. Constant weights are converted in the file (casts on constants are folded).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/kernel.h"

namespace spore {

enum class PrecisionMode { force_fp32, allow_fp32_to_fp16, allow_fp32_to_bf16, allow_mix_precision };
PrecisionMode parse_precision_mode(const std::string& s);  // throws invalid_argument listing the choices
std::string precision_mode_name(PrecisionMode m);

struct PrecisionReport {
  std::map<std::string, int64_t> ops_per_dtype_before;  // compute dtype of each non-structural node -> count
  std::map<std::string, int64_t> ops_per_dtype_after;
  int64_t casts_inserted = 0;
  std::vector<std::string> kept_f32;  // node labels kept in f32 by their AmpPolicy (mix mode) or lacking a kernel
};

// Counts nodes per compute dtype (the dtype of their first floating input or output; i8/u8 for nodes dispatching
// on an int8 operand, e.g. qconv2d), skipping input/constant.
std::map<std::string, int64_t> ops_per_dtype(const Graph& g);

// `low` is the dtype for allow_mix_precision (f16 or bf16). A node goes low only where `target` supports it in that
// dtype (BackendImpl::supports, the query plan compilation makes); elsewhere it stays f32, said in kept_f32.
PrecisionReport apply_precision_mode(Graph& g, PrecisionMode mode, DType low = DType::f16, Backend target = Backend::cpu);

}  // namespace spore
