#pragma once
// Automatic mixed precision (MindSpore's amp_level): while an AutocastScope is active on a thread, ops::call casts an
// op's floating inputs (f32, f16, bf16; never f64) to the dtype the level gives that op, through explicit `cast` ops
// (so a trace records them as graph nodes and autodiff sends each gradient back in its input's dtype):
//   O0  nothing;
//   O1  the whitelist (matmul, linear, conv2d, conv_transpose2d and their fused / gradient forms, attention) in the
//       low dtype; any other op whose floating inputs disagree runs in f32;
//   O2  everything but the blacklist in the low dtype; the blacklist (norms, softmax and log_softmax, reductions,
//       exp / log / pow / sqrt and the like, which losses are built from) in f32;
//   O3  everything in the low dtype.
// train::Model opens one around the forward and backward of a step; parameters stay f32 (master weights).
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/dtype.h"
#include "ir/op_id.h"
#include "tensor/tensor.h"

namespace spore::ops {

enum class AmpLevel { O0, O1, O2, O3 };
AmpLevel parse_amp_level(const std::string& s);  // "O0".."O3"; an error naming the choices otherwise
const char* amp_level_name(AmpLevel l);

class AutocastScope {
 public:
  AutocastScope(AmpLevel level, DType low);  // low: f16 or bf16
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
  static const AutocastScope* current();  // the innermost active scope on this thread, or null
  AmpLevel level() const { return level_; }
  DType low() const { return low_; }

 private:
  AmpLevel level_;
  DType low_;
  const AutocastScope* prev_;
};

// The dtype `op` runs its floating inputs in under `scope`, or nullopt when they stay as they are.
std::optional<DType> autocast_dtype(OpId op, std::span<const Tensor> inputs, const AutocastScope& scope);

}  // namespace spore::ops
