// Reference kernels of the elementwise family: one scalar loop per op, computing in double (floats) or
// exactly in int64 (integers, so neg/abs wrap like two's complement and i64 keeps all its bits).
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/reference/families.h"
#include "backend/reference/util.h"
#include "ops/registry.h"

namespace spore::reference {

namespace {

constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

// Exact integer element access (load_as_double would lose i64 bits above 2^53).
int64_t load_int(const char* p, DType t) {
  switch (t) {
    case DType::i64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    case DType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::i8: return static_cast<int8_t>(*p);
    case DType::u8: return static_cast<uint8_t>(*p);
    case DType::boolean: return *p != 0;
    default: SPORE_FAIL(ErrorCode::internal, "load_int on {}", dtype_name(t));
  }
}
int64_t get_int(const Tensor& t, int64_t i) {
  return load_int(static_cast<const char*>(t.raw_data()) + i * static_cast<int64_t>(dtype_size(t.dtype())), t.dtype());
}
// Stores v modulo 2^bits of the destination (C++20 integer conversion), bool as v != 0.
void put_int(const Tensor& t, int64_t i, int64_t v) {
  char* p = static_cast<char*>(t.raw_data());
  switch (t.dtype()) {
    case DType::i64: std::memcpy(p + i * 8, &v, 8); return;
    case DType::i32: { const auto w = static_cast<int32_t>(v); std::memcpy(p + i * 4, &w, 4); return; }
    case DType::i8: p[i] = static_cast<char>(static_cast<int8_t>(v)); return;
    case DType::u8: p[i] = static_cast<char>(static_cast<uint8_t>(v)); return;
    case DType::boolean: p[i] = v != 0; return;
    default: SPORE_FAIL(ErrorCode::internal, "put_int on {}", dtype_name(t.dtype()));
  }
}
int64_t wrap_neg(int64_t v) { return static_cast<int64_t>(0 - static_cast<uint64_t>(v)); }

// Rounds a double to float "to odd" (truncate, then set the last bit if inexact); rounding that
// result to nearest-even f16/bf16 equals rounding the double directly (no double-rounding error).
float round_to_odd_f32(double d) {
  if (std::isnan(d) || std::isinf(d)) return static_cast<float>(d);
  float f = static_cast<float>(d);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // truncate
  if (static_cast<double>(f) != d) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u |= 1;
    std::memcpy(&f, &u, 4);
  }
  return f;
}

// Stores a double into a floating tensor element with exactly one rounding (nearest even).
void put_float(const Tensor& t, int64_t i, double v) {
  char* p = static_cast<char*>(t.raw_data());
  switch (t.dtype()) {
    case DType::f16: { const f16 h(round_to_odd_f32(v)); std::memcpy(p + i * 2, &h, 2); return; }
    case DType::bf16: { const bf16 h(round_to_odd_f32(v)); std::memcpy(p + i * 2, &h, 2); return; }
    default: put(t, i, v);
  }
}

double gelu(double x, bool tanh_form) {
  if (tanh_form) return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + std::erf(x / kSqrt2));
}

double apply_float(OpId op, double x, const Attrs& a) {
  switch (op) {
    case "neg"_op: return -x;
    case "abs"_op: return std::fabs(x);
    case "exp"_op: return std::exp(x);
    case "log"_op: return std::log(x);
    case "sqrt"_op: return std::sqrt(x);
    case "rsqrt"_op: return 1.0 / std::sqrt(x);
    case "reciprocal"_op: return 1.0 / x;
    case "tanh"_op: return std::tanh(x);
    case "sigmoid"_op: return 1.0 / (1.0 + std::exp(-x));
    case "relu"_op: return x < 0 ? 0.0 : x;  // nan stays nan
    case "leaky_relu"_op: return x < 0 ? a.f("alpha") * x : x;
    case "gelu"_op: return gelu(x, a.s("approximate") == "tanh");
    case "silu"_op: return x / (1.0 + std::exp(-x));
    case "erf"_op: return std::erf(x);
    case "sin"_op: return std::sin(x);
    case "cos"_op: return std::cos(x);
    case "asin"_op: return std::asin(x);
    case "acos"_op: return std::acos(x);
    case "atan"_op: return std::atan(x);
    case "floor"_op: return std::floor(x);
    case "ceil"_op: return std::ceil(x);
    case "round"_op: return std::nearbyint(x);  // default rounding mode: to nearest, ties to even
    case "sign"_op: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;  // keeps 0, -0 and nan
    default: SPORE_FAIL(ErrorCode::internal, "no float form for op {}", op_name(op));
  }
}

int64_t apply_int(OpId op, int64_t x) {
  switch (op) {
    case "neg"_op: return wrap_neg(x);
    case "abs"_op: return x < 0 ? wrap_neg(x) : x;
    case "relu"_op: return x < 0 ? 0 : x;
    case "sign"_op: return x > 0 ? 1 : x < 0 ? -1 : 0;
    default: SPORE_FAIL(ErrorCode::internal, "no integer form for op {}", op_name(op));
  }
}

void unary_kernel(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& y = k.out(0);
  const int64_t n = x.numel();
  if (is_floating(x.dtype())) {
    for (int64_t i = 0; i < n; ++i) put_float(y, i, apply_float(k.op, get(x, i), k.attrs));
  } else {
    for (int64_t i = 0; i < n; ++i) put_int(y, i, apply_int(k.op, get_int(x, i)));
  }
}

// The bounds take x's dtype first (as a scalar operand would), then min(max(x, lo), hi).
void clip_kernel(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& y = k.out(0);
  const int64_t n = x.numel();
  const DType t = x.dtype();
  // Round-trip each bound through one element of x's dtype.
  alignas(8) char lo_buf[8], hi_buf[8];
  store_from_double(lo_buf, t, k.attrs.f("min"));
  store_from_double(hi_buf, t, k.attrs.f("max"));
  if (is_floating(t)) {
    const double lo_hi[2] = {load_as_double(lo_buf, t), load_as_double(hi_buf, t)};
    for (int64_t i = 0; i < n; ++i) {
      const double v = get(x, i);
      put_float(y, i, std::isnan(v) ? v : std::min(std::max(v, lo_hi[0]), lo_hi[1]));
    }
  } else {
    const int64_t lo = load_int(lo_buf, t), hi = load_int(hi_buf, t);
    for (int64_t i = 0; i < n; ++i) put_int(y, i, std::min(std::max(get_int(x, i), lo), hi));
  }
}

void logical_not_kernel(KernelContext& k) {
  for (int64_t i = 0; i < k.in(0).numel(); ++i) put_int(k.out(0), i, get_int(k.in(0), i) == 0);
}

// Float -> integer: truncate toward zero, saturate, nan -> 0 (store_from_double does exactly that).
// Integer -> f16/bf16 goes through double, exact for |v| < 2^53.
void cast_kernel(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& y = k.out(0);
  const int64_t n = x.numel();
  const bool from_float = is_floating(x.dtype()), to_float = is_floating(y.dtype());
  for (int64_t i = 0; i < n; ++i) {
    if (y.dtype() == DType::boolean) put_int(y, i, from_float ? get(x, i) != 0.0 : get_int(x, i) != 0);
    else if (!from_float && !to_float) put_int(y, i, get_int(x, i));
    else if (!from_float && y.dtype() == DType::f32) y.data<float>()[i] = static_cast<float>(get_int(x, i));
    else if (!from_float) put_float(y, i, static_cast<double>(get_int(x, i)));
    else if (to_float) put_float(y, i, get(x, i));
    else put(y, i, get(x, i));
  }
}

// Every op whose OpDef gives a scalar formula (OpDef::scalar): the formula in double, rounded once.
void scalar_formula_kernel(KernelContext& k) {
  const ScalarFn f = op_registry().get(k.op).scalar;
  const Tensor& x = k.in(0);
  const Tensor& y = k.out(0);
  for (int64_t i = 0; i < x.numel(); ++i) put_float(y, i, f(get(x, i), k.attrs));
}

}  // namespace

void register_elementwise(KernelRegistry& r) {
  for (const OpDef* def : op_registry().all())
    if (def->scalar != nullptr) r.add(Backend::reference, def->id, def->dtypes, scalar_formula_kernel);
  for (OpId op :
       {"exp"_op, "log"_op, "sqrt"_op, "rsqrt"_op, "reciprocal"_op, "tanh"_op, "sigmoid"_op, "leaky_relu"_op, "gelu"_op,
        "silu"_op, "erf"_op, "sin"_op, "cos"_op, "asin"_op, "acos"_op, "atan"_op, "floor"_op, "ceil"_op, "round"_op}) {
    r.add(Backend::reference, op, dtypes::floating, unary_kernel);
  }
  for (OpId op : {"neg"_op, "abs"_op, "relu"_op, "sign"_op}) r.add(Backend::reference, op, dtypes::signed_numeric, unary_kernel);
  r.add(Backend::reference, "clip"_op, dtypes::numeric, clip_kernel);
  r.add(Backend::reference, "logical_not"_op, dtypes::boolean, logical_not_kernel);
  r.add(Backend::reference, "cast"_op, dtypes::all, cast_kernel);
}

}  // namespace spore::reference
