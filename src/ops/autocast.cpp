#include "ops/autocast.h"

#include <algorithm>

#include "base/error.h"

namespace spore::ops {
namespace {

thread_local const AutocastScope* tls_scope = nullptr;

bool amp_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

bool in(OpId op, std::initializer_list<OpId> set) { return std::find(set.begin(), set.end(), op) != set.end(); }

// Ops autocast leaves alone: graph plumbing, the cast itself, and ops whose floating inputs have fixed meanings
// (quantized and block-quantized kernels, the KV cache).
bool untouched(OpId op) {
  return in(op, {"input"_op, "constant"_op, "cast"_op, "identity"_op, "quantize_linear"_op, "dequantize_linear"_op,
                 "qconv2d"_op, "qlinear"_op, "linear_blockq"_op, "linear_blockq_multi"_op, "embed_blockq"_op,
                 "attention_kv"_op, "rope"_op, "arange"_op, "full"_op, "one_hot"_op});
}

bool whitelisted(OpId op) {
  return in(op, {"matmul"_op, "linear"_op, "linear_fused"_op, "conv2d"_op, "conv2d_fused"_op, "conv_transpose2d"_op,
                 "conv2d_weight_grad"_op, "attention"_op});
}

bool blacklisted(OpId op) {
  return in(op, {"exp"_op, "log"_op, "pow"_op, "sqrt"_op, "rsqrt"_op, "reciprocal"_op, "softplus"_op, "reduce_sum"_op,
                 "reduce_mean"_op, "reduce_prod"_op, "cumsum"_op, "softmax"_op, "log_softmax"_op, "batch_norm"_op,
                 "layer_norm"_op, "rms_norm"_op, "group_norm"_op, "global_avg_pool"_op});
}

}  // namespace

AmpLevel parse_amp_level(const std::string& s) {
  if (s == "O0") return AmpLevel::O0;
  if (s == "O1") return AmpLevel::O1;
  if (s == "O2") return AmpLevel::O2;
  if (s == "O3") return AmpLevel::O3;
  SPORE_FAIL(ErrorCode::invalid_argument, "amp level '{}': expected O0, O1, O2 or O3", s);
}

const char* amp_level_name(AmpLevel l) {
  switch (l) {
    case AmpLevel::O0: return "O0";
    case AmpLevel::O1: return "O1";
    case AmpLevel::O2: return "O2";
    case AmpLevel::O3: return "O3";
  }
  return "?";
}

AutocastScope::AutocastScope(AmpLevel level, DType low) : level_(level), low_(low), prev_(tls_scope) {
  SPORE_CHECK(low == DType::f16 || low == DType::bf16, ErrorCode::invalid_argument,
              "autocast: the low dtype must be f16 or bf16, got {}", dtype_name(low));
  tls_scope = this;
}

AutocastScope::~AutocastScope() { tls_scope = prev_; }

const AutocastScope* AutocastScope::current() { return tls_scope; }

std::optional<DType> autocast_dtype(OpId op, std::span<const Tensor> inputs, const AutocastScope& scope) {
  if (scope.level() == AmpLevel::O0 || untouched(op)) return std::nullopt;
  bool any = false, mixed = false;
  DType first = DType::f32;
  for (const Tensor& t : inputs) {
    if (!t.defined() || !amp_floating(t.dtype())) continue;
    if (!any) first = t.dtype();
    else if (t.dtype() != first) mixed = true;
    any = true;
  }
  if (!any) return std::nullopt;
  DType target = scope.low();
  switch (scope.level()) {
    case AmpLevel::O0: return std::nullopt;
    case AmpLevel::O1:
      if (whitelisted(op)) break;
      if (!mixed) return std::nullopt;
      target = DType::f32;
      break;
    case AmpLevel::O2:
      if (blacklisted(op)) target = DType::f32;
      break;
    case AmpLevel::O3: break;
  }
  if (!mixed && first == target) return std::nullopt;
  return target;
}

}  // namespace spore::ops
