// CPU kernels of the elementwise family. f32/f16/bf16 run the Highway kernels of elementwise_hwy.cpp;
// f64 and integers are plain loops the compiler vectorizes. Work is split into fixed 16K-element chunks,
// so results do not depend on the thread count.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/cpu/elementwise_simd.h"
#include "backend/cpu/families.h"
#include "base/thread_pool.h"

namespace spore::cpu {

std::optional<UnaryOp> unary_op_for(OpId op, bool gelu_tanh) {
  switch (op) {
    case "neg"_op: return UnaryOp::neg;
    case "abs"_op: return UnaryOp::abs;
    case "exp"_op: return UnaryOp::exp;
    case "log"_op: return UnaryOp::log;
    case "sqrt"_op: return UnaryOp::sqrt;
    case "rsqrt"_op: return UnaryOp::rsqrt;
    case "reciprocal"_op: return UnaryOp::reciprocal;
    case "tanh"_op: return UnaryOp::tanh;
    case "sigmoid"_op: return UnaryOp::sigmoid;
    case "relu"_op: return UnaryOp::relu;
    case "leaky_relu"_op: return UnaryOp::leaky_relu;
    case "gelu"_op: return gelu_tanh ? UnaryOp::gelu_tanh : UnaryOp::gelu_erf;
    case "silu"_op: return UnaryOp::silu;
    case "erf"_op: return UnaryOp::erf;
    case "sin"_op: return UnaryOp::sin;
    case "cos"_op: return UnaryOp::cos;
    case "asin"_op: return UnaryOp::asin;
    case "acos"_op: return UnaryOp::acos;
    case "atan"_op: return UnaryOp::atan;
    case "floor"_op: return UnaryOp::floor;
    case "ceil"_op: return UnaryOp::ceil;
    case "round"_op: return UnaryOp::round;
    case "sign"_op: return UnaryOp::sign;
    case "clip"_op: return UnaryOp::clip;
    case "hardsigmoid"_op: return UnaryOp::hardsigmoid;
    case "hardswish"_op: return UnaryOp::hardswish;
    default: return std::nullopt;
  }
}

namespace {

constexpr int64_t kGrain = 16384;

// Runs fn(begin, count) over fixed chunks of [0, n).
template <class Fn>
void for_chunks(int64_t n, const Fn& fn) {
  const int64_t chunks = num_chunks(n, kGrain);
  if (chunks == 1) return fn(int64_t{0}, n);
  parallel_for(chunks, [&](int64_t c) { fn(c * kGrain, std::min(kGrain, n - c * kGrain)); });
}

UnaryOp unary_op_of(const KernelContext& k) {
  const auto op = unary_op_for(k.op, k.op == "gelu"_op && k.attrs.s("approximate") == "tanh");
  SPORE_CHECK(op.has_value(), ErrorCode::internal, "elementwise cpu kernel called for op {}", op_name(k.op));
  return *op;
}

// clip's bounds in x's dtype, as a scalar operand of that dtype would hold them.
template <class T>
T clip_bound(double v, DType t) {
  alignas(8) char buf[8];
  store_from_double(buf, t, v);
  T r;
  std::memcpy(&r, buf, sizeof(T));
  return r;
}

// ---- f32 / f16 / bf16: Highway
template <class T>
void unary_lowp_kernel(KernelContext& k) {
  const UnaryOp op = unary_op_of(k);
  const DType t = k.in(0).dtype();
  UnaryParams p;
  if (op == UnaryOp::leaky_relu) p.a = static_cast<float>(k.attrs.f("alpha"));
  if (op == UnaryOp::hardsigmoid) {
    p.a = static_cast<float>(k.attrs.f("alpha"));
    p.b = static_cast<float>(k.attrs.f("beta"));
  }
  if (op == UnaryOp::clip) {
    p.a = static_cast<float>(clip_bound<T>(k.attrs.f("min"), t));
    p.b = static_cast<float>(clip_bound<T>(k.attrs.f("max"), t));
  }
  const T* x = static_cast<const T*>(k.in(0).raw_data());
  T* y = static_cast<T*>(k.out(0).raw_data());
  for_chunks(k.in(0).numel(), [&](int64_t b, int64_t m) {
    if constexpr (std::is_same_v<T, float>) {
      unary_f32(op, x + b, y + b, static_cast<size_t>(m), p);
    } else {
      const auto* xb = reinterpret_cast<const uint16_t*>(x + b);
      auto* yb = reinterpret_cast<uint16_t*>(y + b);
      if constexpr (std::is_same_v<T, f16>) unary_f16(op, xb, yb, static_cast<size_t>(m), p);
      else unary_bf16(op, xb, yb, static_cast<size_t>(m), p);
    }
  });
}

// ---- f64: scalar libm loops
template <class Fn>
void map_f64(KernelContext& k, const Fn& fn) {
  const double* x = k.in(0).data<double>();
  double* y = k.out(0).data<double>();
  for_chunks(k.in(0).numel(), [&](int64_t b, int64_t m) {
    for (int64_t i = b; i < b + m; ++i) y[i] = fn(x[i]);
  });
}

void unary_f64_kernel(KernelContext& k) {
  const UnaryOp op = unary_op_of(k);
  constexpr double kInvSqrt2 = 0.70710678118654752440, kSqrt2OverPi = 0.79788456080286535588;
  switch (op) {
    case UnaryOp::neg: return map_f64(k, [](double v) { return -v; });
    case UnaryOp::abs: return map_f64(k, [](double v) { return std::fabs(v); });
    case UnaryOp::exp: return map_f64(k, [](double v) { return std::exp(v); });
    case UnaryOp::log: return map_f64(k, [](double v) { return std::log(v); });
    case UnaryOp::sqrt: return map_f64(k, [](double v) { return std::sqrt(v); });
    case UnaryOp::rsqrt: return map_f64(k, [](double v) { return 1.0 / std::sqrt(v); });
    case UnaryOp::reciprocal: return map_f64(k, [](double v) { return 1.0 / v; });
    case UnaryOp::tanh: return map_f64(k, [](double v) { return std::tanh(v); });
    case UnaryOp::sigmoid: return map_f64(k, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
    case UnaryOp::relu: return map_f64(k, [](double v) { return v < 0 ? 0.0 : v; });
    case UnaryOp::leaky_relu: {
      const double alpha = k.attrs.f("alpha");
      return map_f64(k, [alpha](double v) { return v < 0 ? alpha * v : v; });
    }
    case UnaryOp::gelu_erf: return map_f64(k, [](double v) { return 0.5 * v * (1.0 + std::erf(v * kInvSqrt2)); });
    case UnaryOp::gelu_tanh:
      return map_f64(k, [](double v) { return 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v))); });
    case UnaryOp::silu: return map_f64(k, [](double v) { return v / (1.0 + std::exp(-v)); });
    case UnaryOp::erf: return map_f64(k, [](double v) { return std::erf(v); });
    case UnaryOp::sin: return map_f64(k, [](double v) { return std::sin(v); });
    case UnaryOp::cos: return map_f64(k, [](double v) { return std::cos(v); });
    case UnaryOp::asin: return map_f64(k, [](double v) { return std::asin(v); });
    case UnaryOp::acos: return map_f64(k, [](double v) { return std::acos(v); });
    case UnaryOp::atan: return map_f64(k, [](double v) { return std::atan(v); });
    case UnaryOp::floor: return map_f64(k, [](double v) { return std::floor(v); });
    case UnaryOp::ceil: return map_f64(k, [](double v) { return std::ceil(v); });
    case UnaryOp::round: return map_f64(k, [](double v) { return std::nearbyint(v); });
    case UnaryOp::sign: return map_f64(k, [](double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : v; });
    case UnaryOp::clip: {
      const double lo = k.attrs.f("min"), hi = k.attrs.f("max");
      return map_f64(k, [lo, hi](double v) { return std::isnan(v) ? v : std::min(std::max(v, lo), hi); });
    }
    case UnaryOp::hardsigmoid: {
      const double alpha = k.attrs.f("alpha"), beta = k.attrs.f("beta");
      return map_f64(k, [alpha, beta](double v) {
        const double t = v * alpha + beta;
        return std::isnan(t) ? t : std::min(std::max(t, 0.0), 1.0);
      });
    }
    case UnaryOp::hardswish:
      return map_f64(k, [](double v) {
        const double t = v + 3.0;
        return v * ((std::isnan(t) ? t : std::min(std::max(t, 0.0), 6.0)) / 6.0);
      });
  }
}

// ---- integers: neg/abs wrap (two's complement), as NumPy does
template <class T, class Fn>
void map_int(KernelContext& k, const Fn& fn) {
  const T* x = static_cast<const T*>(k.in(0).raw_data());
  T* y = static_cast<T*>(k.out(0).raw_data());
  for_chunks(k.in(0).numel(), [&](int64_t b, int64_t m) {
    for (int64_t i = b; i < b + m; ++i) y[i] = fn(x[i]);
  });
}

template <class T>
void unary_int_kernel(KernelContext& k) {
  using U = std::make_unsigned_t<T>;
  const auto wrap_neg = [](T v) { return static_cast<T>(static_cast<U>(0) - static_cast<U>(v)); };
  switch (unary_op_of(k)) {
    case UnaryOp::neg: return map_int<T>(k, wrap_neg);
    case UnaryOp::abs: return map_int<T>(k, [&](T v) { return v < 0 ? wrap_neg(v) : v; });
    case UnaryOp::relu: return map_int<T>(k, [](T v) { return v < 0 ? T(0) : v; });
    case UnaryOp::sign: return map_int<T>(k, [](T v) { return static_cast<T>((v > 0) - (v < 0)); });
    default: SPORE_FAIL(ErrorCode::internal, "no integer cpu kernel for op {}", op_name(k.op));
  }
}

template <class T>
void clip_int_kernel(KernelContext& k) {
  const T lo = clip_bound<T>(k.attrs.f("min"), k.in(0).dtype()), hi = clip_bound<T>(k.attrs.f("max"), k.in(0).dtype());
  map_int<T>(k, [lo, hi](T v) { return std::min(std::max(v, lo), hi); });
}

void logical_not_kernel(KernelContext& k) {
  const auto* x = static_cast<const uint8_t*>(k.in(0).raw_data());
  auto* y = static_cast<uint8_t*>(k.out(0).raw_data());
  for_chunks(k.in(0).numel(), [&](int64_t b, int64_t m) {
    for (int64_t i = b; i < b + m; ++i) y[i] = x[i] == 0;
  });
}

// ---- cast
// Storage type for bool elements: any nonzero byte reads as true.
enum class B8 : uint8_t {};

// Float -> integer: truncate toward zero, saturate, nan -> 0. Integer -> integer: wrap. x -> bool: x != 0.
template <class D, class S>
D convert(S s) {
  if constexpr (std::is_same_v<S, B8>) {
    return convert<D>(static_cast<uint8_t>(static_cast<uint8_t>(s) != 0));
  } else if constexpr (std::is_same_v<D, B8>) {
    return static_cast<B8>(s != S(0));
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    if (std::isnan(s)) return D(0);
    if (s <= static_cast<S>(std::numeric_limits<D>::min())) return std::numeric_limits<D>::min();
    if (s >= static_cast<S>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
    return static_cast<D>(s);
  } else {
    return static_cast<D>(s);
  }
}

template <class S, class D>
void convert_loop(const void* x, void* y, size_t n) {
  const S* xs = static_cast<const S*>(x);
  D* yd = static_cast<D*>(y);
  for (size_t i = 0; i < n; ++i) yd[i] = convert<D>(xs[i]);
}

// Calls f(T{}) for the storage type of a non-16-bit dtype.
template <class F>
void visit_wide(DType t, const F& f) {
  switch (t) {
    case DType::f64: return f(double{});
    case DType::f32: return f(float{});
    case DType::i64: return f(int64_t{});
    case DType::i32: return f(int32_t{});
    case DType::i8: return f(int8_t{});
    case DType::u8: return f(uint8_t{});
    case DType::boolean: return f(B8{});
    default: SPORE_FAIL(ErrorCode::internal, "visit_wide on {}", dtype_name(t));
  }
}

// Rounds to float "to odd" (truncate, set the last bit if inexact): rounding that to f16/bf16 to
// nearest even then equals rounding the wide value directly (no double-rounding error).
float round_to_odd_f32(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) != d && !std::isnan(d)) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) u -= 1;  // step toward zero
    f = std::bit_cast<float>(u | 1u);
  }
  return f;
}

constexpr size_t kCastBlock = 1024;

void cast_block(const char* x, DType st, char* y, DType dt, size_t m) {
  alignas(64) float buf[kCastBlock];
  if (st == DType::f16 || st == DType::bf16) {
    const auto* xh = reinterpret_cast<const uint16_t*>(x);
    st == DType::f16 ? f16_to_f32(xh, buf, m) : bf16_to_f32(xh, buf, m);
    x = reinterpret_cast<const char*>(buf);
    st = DType::f32;
  }
  if (dt == DType::f16 || dt == DType::bf16) {
    const float* f = buf;
    if (st == DType::f32) {
      f = reinterpret_cast<const float*>(x);
    } else if (st == DType::f64 || st == DType::i64 || st == DType::i32) {  // may need rounding to float
      visit_wide(st, [&](auto s) {
        using S = decltype(s);
        const S* xs = reinterpret_cast<const S*>(x);
        for (size_t i = 0; i < m; ++i) buf[i] = round_to_odd_f32(static_cast<double>(xs[i]));
      });
    } else {
      visit_wide(st, [&](auto s) { convert_loop<decltype(s), float>(x, buf, m); });
    }
    auto* yh = reinterpret_cast<uint16_t*>(y);
    dt == DType::f16 ? f32_to_f16(f, yh, m) : f32_to_bf16(f, yh, m);
    return;
  }
  visit_wide(st, [&](auto s) { visit_wide(dt, [&](auto d) { convert_loop<decltype(s), decltype(d)>(x, y, m); }); });
}

void cast_kernel(KernelContext& k) {
  const DType st = k.in(0).dtype(), dt = k.out(0).dtype();
  const auto* x = static_cast<const char*>(k.in(0).raw_data());
  auto* y = static_cast<char*>(k.out(0).raw_data());
  const auto ss = static_cast<int64_t>(dtype_size(st)), ds = static_cast<int64_t>(dtype_size(dt));
  for_chunks(k.in(0).numel(), [&](int64_t b, int64_t m) {
    if (st == dt) {
      std::memcpy(y + b * ds, x + b * ss, static_cast<size_t>(m * ss));
      return;
    }
    for (int64_t i = b; i < b + m; i += static_cast<int64_t>(kCastBlock)) {
      const auto len = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(kCastBlock), b + m - i));
      cast_block(x + i * ss, st, y + i * ds, dt, len);
    }
  });
}

}  // namespace

void register_elementwise(KernelRegistry& r) {
  for (OpId op : {"neg"_op,   "abs"_op,     "exp"_op,  "log"_op,         "sqrt"_op,     "rsqrt"_op, "reciprocal"_op,
                  "tanh"_op,  "sigmoid"_op, "relu"_op, "leaky_relu"_op,  "gelu"_op,     "silu"_op,  "erf"_op,
                  "sin"_op,   "cos"_op,     "asin"_op, "acos"_op,        "atan"_op,     "floor"_op, "ceil"_op,
                  "round"_op, "sign"_op,    "clip"_op, "hardsigmoid"_op, "hardswish"_op}) {
    r.add(Backend::cpu, op, {DType::f32}, unary_lowp_kernel<float>, "hwy");
    r.add(Backend::cpu, op, {DType::f16}, unary_lowp_kernel<f16>, "hwy");
    r.add(Backend::cpu, op, {DType::bf16}, unary_lowp_kernel<bf16>, "hwy");
    r.add(Backend::cpu, op, {DType::f64}, unary_f64_kernel, "scalar");
  }
  for (OpId op : {"neg"_op, "abs"_op, "relu"_op, "sign"_op}) {
    r.add(Backend::cpu, op, {DType::i64}, unary_int_kernel<int64_t>, "scalar");
    r.add(Backend::cpu, op, {DType::i32}, unary_int_kernel<int32_t>, "scalar");
    r.add(Backend::cpu, op, {DType::i8}, unary_int_kernel<int8_t>, "scalar");
  }
  r.add(Backend::cpu, "clip"_op, {DType::i64}, clip_int_kernel<int64_t>, "scalar");
  r.add(Backend::cpu, "clip"_op, {DType::i32}, clip_int_kernel<int32_t>, "scalar");
  r.add(Backend::cpu, "clip"_op, {DType::i8}, clip_int_kernel<int8_t>, "scalar");
  r.add(Backend::cpu, "clip"_op, {DType::u8}, clip_int_kernel<uint8_t>, "scalar");
  r.add(Backend::cpu, "logical_not"_op, dtypes::boolean, logical_not_kernel, "scalar");
  r.add(Backend::cpu, "cast"_op, dtypes::all, cast_kernel, "scalar");
}

}  // namespace spore::cpu
