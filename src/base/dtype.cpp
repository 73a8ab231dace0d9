#include "base/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace spore {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i8: case DType::u8: case DType::boolean: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (int i = 0; i < num_dtypes; ++i) {
    if (dtype_name(static_cast<DType>(i)) == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

double load_as_double(const void* p, DType t) {
  switch (t) {
    case DType::f64: return *static_cast<const double*>(p);
    case DType::f32: return *static_cast<const float*>(p);
    case DType::f16: return static_cast<float>(*static_cast<const f16*>(p));
    case DType::bf16: return static_cast<float>(*static_cast<const bf16*>(p));
    case DType::i64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::i32: return *static_cast<const int32_t*>(p);
    case DType::i8: return *static_cast<const int8_t*>(p);
    case DType::u8: return *static_cast<const uint8_t*>(p);
    case DType::boolean: return *static_cast<const uint8_t*>(p) != 0 ? 1.0 : 0.0;
  }
  return 0;
}

namespace {
// Float -> integer conversion as C++ casts do it for in-range values, saturating (not UB) outside.
template <typename I>
I saturate(double v) {
  if (std::isnan(v)) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}
}  // namespace

void store_from_double(void* p, DType t, double v) {
  switch (t) {
    case DType::f64: *static_cast<double*>(p) = v; return;
    case DType::f32: *static_cast<float*>(p) = static_cast<float>(v); return;
    case DType::f16: *static_cast<f16*>(p) = f16(static_cast<float>(v)); return;
    case DType::bf16: *static_cast<bf16*>(p) = bf16(static_cast<float>(v)); return;
    case DType::i64: *static_cast<int64_t*>(p) = saturate<int64_t>(v); return;
    case DType::i32: *static_cast<int32_t*>(p) = saturate<int32_t>(v); return;
    case DType::i8: *static_cast<int8_t*>(p) = saturate<int8_t>(v); return;
    case DType::u8: *static_cast<uint8_t*>(p) = saturate<uint8_t>(v); return;
    case DType::boolean: *static_cast<uint8_t*>(p) = v != 0.0 ? 1 : 0; return;
  }
}

}  // namespace spore
