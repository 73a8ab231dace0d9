#pragma once
// An epilogue a conv kernel applies to each output value in registers as it stores it (winograd.h's F(4x4) tiles,
// direct_blocked.h's rows): y = y + residual (residual in y's layout, the same element), then relu
// (x < 0 ? 0 : x, as unary_f32 computes it). The bits of the conv followed by the separate add and relu ops.
namespace spore::cpu {

struct StoreEpilogue {
  const float* residual = nullptr;
  bool relu = false;
};

}  // namespace spore::cpu
