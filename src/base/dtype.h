#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "base/half.h"

namespace spore {

// Element types. Order is part of the .spore file format: append only.
enum class DType : uint8_t { f64, f32, f16, bf16, i64, i32, i8, u8, boolean };
inline constexpr int num_dtypes = 9;

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "bool", ...
std::optional<DType> parse_dtype(std::string_view name);
inline bool is_floating(DType t) { return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16; }
inline bool is_integral(DType t) { return t == DType::i64 || t == DType::i32 || t == DType::i8 || t == DType::u8; }
inline bool is_low_precision(DType t) { return t == DType::f16 || t == DType::bf16; }

// A set of dtypes as a bitmask; op schemas use it for their supported-dtype lists.
struct DTypeSet {
  uint32_t bits = 0;
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> ts) { for (DType t : ts) bits |= 1u << static_cast<int>(t); }
  constexpr bool has(DType t) const { return bits & (1u << static_cast<int>(t)); }
  constexpr DTypeSet operator|(DTypeSet o) const { DTypeSet s; s.bits = bits | o.bits; return s; }
  constexpr bool empty() const { return bits == 0; }
};
namespace dtypes {
inline constexpr DTypeSet floating{DType::f64, DType::f32, DType::f16, DType::bf16};
inline constexpr DTypeSet signed_int{DType::i64, DType::i32, DType::i8};
inline constexpr DTypeSet integral{DType::i64, DType::i32, DType::i8, DType::u8};
inline constexpr DTypeSet numeric = floating | integral;
inline constexpr DTypeSet signed_numeric = floating | signed_int;
inline constexpr DTypeSet boolean{DType::boolean};
inline constexpr DTypeSet all = numeric | boolean;
inline constexpr DTypeSet index{DType::i64, DType::i32};
}  // namespace dtypes

// Maps C++ types to DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::i8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };
template <typename T> inline constexpr DType dtype_v = dtype_of<T>::value;

// Calls f(T{}) with T the C++ type of `t`. Keep uses few: each instantiates f nine times.
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f64: return f(double{});
    case DType::f32: return f(float{});
    case DType::f16: return f(f16{});
    case DType::bf16: return f(bf16{});
    case DType::i64: return f(int64_t{});
    case DType::i32: return f(int32_t{});
    case DType::i8: return f(int8_t{});
    case DType::u8: return f(uint8_t{});
    case DType::boolean: return f(bool{});
  }
  return f(float{});
}

// Converting a value of any dtype to/from double (the reference backend's compute type).
double load_as_double(const void* p, DType t);
void store_from_double(void* p, DType t, double v);

}  // namespace spore
