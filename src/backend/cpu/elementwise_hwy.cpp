// Highway kernels of the elementwise family (declared in elementwise_simd.h), compiled once per SIMD
// target and picked at run time. Math comes from hwy/contrib/math, wrapped to give IEEE results for
// nan/inf/zero where Highway's versions do not; erf is a rational approximation (|err| < 4e-7).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/elementwise_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
#include "spore/kernels/tanh_f32.h"  // tanh shared with the tanhcustom plugin (issue 7)

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/elementwise_simd.h"

HWY_BEFORE_NAMESPACE();
namespace spore::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr size_t kMaxLanes = hn::MaxLanes(DF());
constexpr size_t kBlock = 1024;  // f16/bf16 are widened to f32 this many elements at a time

// Applies fn to every element; the tail goes through a zero-padded vector so each element gets the same
// code (and bits) wherever it sits.
template <class Fn>
HWY_INLINE void Apply(const float* x, float* y, size_t n, const Fn& fn) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(fn(d, hn::LoadU(d, x + i)), d, y + i);
  if (i < n) {
    HWY_ALIGN float buf[kMaxLanes] = {};
    std::copy(x + i, x + n, buf);
    hn::Store(fn(d, hn::Load(d, buf)), d, buf);
    std::copy(buf, buf + (n - i), y + i);
  }
}

HWY_INLINE VF Inf(DF d) { return hn::Set(d, std::numeric_limits<float>::infinity()); }
HWY_INLINE VF NaN(DF d) { return hn::Set(d, std::numeric_limits<float>::quiet_NaN()); }

// hn::Exp returns 0 for nan and garbage for x > ~128 (its exponent arithmetic wraps); e^x overflows f32 above 88.73.
HWY_INLINE VF ExpF(DF d, VF v) {
  const VF r = hn::IfThenElse(hn::Gt(v, hn::Set(d, 88.75f)), Inf(d), hn::Exp(d, v));
  return hn::IfThenElse(hn::IsNaN(v), v, r);
}

// hn::Log is only defined for finite x > 0.
HWY_INLINE VF LogF(DF d, VF v) {
  const VF zero = hn::Zero(d);
  VF r = hn::Log(d, v);
  r = hn::IfThenElse(hn::Eq(v, zero), hn::Neg(Inf(d)), r);
  r = hn::IfThenElse(hn::Lt(v, zero), NaN(d), r);
  r = hn::IfThenElse(hn::Eq(v, Inf(d)), v, r);
  return hn::IfThenElse(hn::IsNaN(v), v, r);
}

// Rational approximation on [-4, 4] (erf rounds to +-1 in f32 beyond); the form Eigen uses.
HWY_INLINE VF ErfF(DF d, VF v) {
  const VF x = hn::Min(hn::Max(v, hn::Set(d, -4.0f)), hn::Set(d, 4.0f));
  const VF x2 = hn::Mul(x, x);
  VF p = hn::Set(d, -2.72614225801306e-10f);
  p = hn::MulAdd(p, x2, hn::Set(d, 2.77068142495902e-08f));
  p = hn::MulAdd(p, x2, hn::Set(d, -2.10102402082508e-06f));
  p = hn::MulAdd(p, x2, hn::Set(d, -5.69250639462346e-05f));
  p = hn::MulAdd(p, x2, hn::Set(d, -7.34990630326855e-04f));
  p = hn::MulAdd(p, x2, hn::Set(d, -2.95459980854025e-03f));
  p = hn::MulAdd(p, x2, hn::Set(d, -1.60960333262415e-02f));
  p = hn::Mul(p, x);
  VF q = hn::Set(d, -1.45660718464996e-05f);
  q = hn::MulAdd(q, x2, hn::Set(d, -2.13374055278905e-04f));
  q = hn::MulAdd(q, x2, hn::Set(d, -1.68282697438203e-03f));
  q = hn::MulAdd(q, x2, hn::Set(d, -7.37332916720468e-03f));
  q = hn::MulAdd(q, x2, hn::Set(d, -1.42647390514189e-02f));
  return hn::IfThenElse(hn::IsNaN(v), v, hn::Div(p, q));
}

// e^t for the denominator 1 + e^t of a sigmoid only. t is clamped to [-86.5, 88.76]: below, 1 + e^t rounds to 1
// anyway; above, e^t overflows to inf as it should. So one power of two covers the range and no nan/inf fix-ups
// are needed (a nan t gives a number: sigmoid passes nans through itself, silu and gelu carry them in the
// numerator). 1.6x the speed of ExpF on AVX-512 (~20 ops a vector against ~32), which matters: EfficientNet-style
// SiLU nets spend ~20 % of their time here. Error against e^t over [-20, 20]: max 7.4e-8, RMS 2.6e-8 (ExpF: 8.4e-8,
// 2.8e-8); silu's mean error -2e-10 (ExpF's -4e-11).
// t log2(e) is rounded to n by adding 1.5 * 2^23 (the integer lands in the low mantissa bits, round to nearest
// even); r = t - n ln2 in two steps (Cody-Waite); e^r by Cephes' expf polynomial on |r| <= ln2 / 2; the scale
// 2^n applied as (2 e^r) * 2^(n-1), so n = 128 still yields a normal float power of two and overflows correctly.
HWY_INLINE VF ExpForSigmoid(DF d, VF t) {
  const hn::RebindToSigned<DF> di;
  t = hn::Min(hn::Max(t, hn::Set(d, -86.5f)), hn::Set(d, 88.76f));
  const VF magic = hn::Set(d, 12582912.0f);  // 1.5 * 2^23
  const VF nm = hn::MulAdd(t, hn::Set(d, 1.44269504088896341f), magic);
  const VF n = hn::Sub(nm, magic);
  VF r = hn::MulAdd(n, hn::Set(d, -0.693359375f), t);
  r = hn::MulAdd(n, hn::Set(d, 2.12194440e-4f), r);
  VF p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));  // Horner to the end: p r^2 + (r + 1) rounds r + 1 first and biases
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));  // silu's error by -9e-9 on average (this way: -2e-10, as ExpF)
  // nm's bits are those of magic plus n; (n - 1 + 127) << 23 is the f32 2^(n-1) (n in [-125, 128]).
  const auto bits = hn::Sub(hn::BitCast(di, nm), hn::Set(di, 0x4B400000 - 126));
  return hn::Mul(hn::Add(p, p), hn::BitCast(d, hn::ShiftLeft<23>(bits)));
}

// x / (1 + e^-s): sigmoid (x = 1), silu, and gelu's tanh form (1 + tanh(u) = 2 sigmoid(2u)).
HWY_INLINE VF DivOnePlusExpNeg(DF d, VF x, VF s) {
  return hn::Div(x, hn::Add(hn::Set(d, 1.0f), ExpForSigmoid(d, hn::Neg(s))));
}

// Highway's sin/cos are accurate for |x| <= 39000; beyond (and for inf) lanes fall back to libm.
template <bool kSin>
HWY_INLINE VF SinCosF(DF d, VF v) {
  VF r = kSin ? hn::Sin(d, v) : hn::Cos(d, v);
  const auto big = hn::Gt(hn::Abs(v), hn::Set(d, 32768.0f));
  if (HWY_UNLIKELY(!hn::AllFalse(d, big))) {
    HWY_ALIGN float buf[kMaxLanes];
    hn::Store(v, d, buf);
    for (size_t i = 0; i < hn::Lanes(d); ++i) {
      const double t = buf[i];
      buf[i] = static_cast<float>(kSin ? std::sin(t) : std::cos(t));
    }
    r = hn::IfThenElse(big, hn::Load(d, buf), r);
  }
  return r;
}

void UnaryF32(UnaryOp op, const float* x, float* y, size_t n, UnaryParams p) {
  const DF d0;
  const VF zero = hn::Zero(d0), one = hn::Set(d0, 1.0f), a = hn::Set(d0, p.a), b = hn::Set(d0, p.b);
  switch (op) {
    case UnaryOp::neg: return Apply(x, y, n, [](DF, VF v) { return hn::Neg(v); });
    case UnaryOp::abs: return Apply(x, y, n, [](DF, VF v) { return hn::Abs(v); });
    case UnaryOp::exp: return Apply(x, y, n, [](DF d, VF v) { return ExpF(d, v); });
    case UnaryOp::log: return Apply(x, y, n, [](DF d, VF v) { return LogF(d, v); });
    case UnaryOp::sqrt: return Apply(x, y, n, [](DF, VF v) { return hn::Sqrt(v); });
    // Exact division, not the approximate rsqrt/rcp instructions (their bits differ between targets).
    case UnaryOp::rsqrt: return Apply(x, y, n, [&](DF, VF v) { return hn::Div(one, hn::Sqrt(v)); });
    case UnaryOp::reciprocal: return Apply(x, y, n, [&](DF, VF v) { return hn::Div(one, v); });
    // <= 1 ULP over all f32 (hn::Tanh: 3) and faster; see include/spore/kernels/tanh_f32.h.
    case UnaryOp::tanh: return Apply(x, y, n, [](DF d, VF v) { return spore::kernels::HWY_NAMESPACE::TanhF32(d, v); });
    case UnaryOp::sigmoid:  // ExpForSigmoid clamps a nan to a number; silu and gelu carry it in the numerator
      return Apply(x, y, n, [&](DF d, VF v) { return hn::IfThenElse(hn::IsNaN(v), v, DivOnePlusExpNeg(d, one, v)); });
    case UnaryOp::relu: return Apply(x, y, n, [&](DF, VF v) { return hn::IfThenZeroElse(hn::Lt(v, zero), v); });
    case UnaryOp::leaky_relu:
      return Apply(x, y, n, [&](DF, VF v) { return hn::IfThenElse(hn::Lt(v, zero), hn::Mul(v, a), v); });
    case UnaryOp::gelu_erf:
      return Apply(x, y, n, [&](DF d, VF v) {
        const VF e = ErfF(d, hn::Mul(v, hn::Set(d, 0.70710678118654752f)));
        return hn::Mul(hn::Mul(hn::Set(d, 0.5f), v), hn::Add(one, e));
      });
    case UnaryOp::gelu_tanh:
      return Apply(x, y, n, [&](DF d, VF v) {
        // 2u = 2 sqrt(2/pi) (x + 0.044715 x^3)
        const VF x3 = hn::Mul(hn::Mul(v, v), v);
        const VF u2 = hn::Mul(hn::Set(d, 1.5957691216057308f), hn::MulAdd(hn::Set(d, 0.044715f), x3, v));
        return DivOnePlusExpNeg(d, v, u2);
      });
    case UnaryOp::silu: return Apply(x, y, n, [](DF d, VF v) { return DivOnePlusExpNeg(d, v, v); });
    case UnaryOp::erf: return Apply(x, y, n, [](DF d, VF v) { return ErfF(d, v); });
    case UnaryOp::sin: return Apply(x, y, n, [](DF d, VF v) { return SinCosF<true>(d, v); });
    case UnaryOp::cos: return Apply(x, y, n, [](DF d, VF v) { return SinCosF<false>(d, v); });
    // Highway's inverse trig (<= 3 ULP); |x| > 1 gives nan for asin/acos (a square root of a negative).
    case UnaryOp::asin: return Apply(x, y, n, [](DF d, VF v) { return hn::Asin(d, v); });
    case UnaryOp::acos: return Apply(x, y, n, [](DF d, VF v) { return hn::Acos(d, v); });
    case UnaryOp::atan: return Apply(x, y, n, [](DF d, VF v) { return hn::Atan(d, v); });
    case UnaryOp::floor: return Apply(x, y, n, [](DF, VF v) { return hn::Floor(v); });
    case UnaryOp::ceil: return Apply(x, y, n, [](DF, VF v) { return hn::Ceil(v); });
    case UnaryOp::round: return Apply(x, y, n, [](DF, VF v) { return hn::Round(v); });  // ties to even
    case UnaryOp::sign:
      return Apply(x, y, n, [&](DF, VF v) {
        return hn::IfThenElse(hn::Gt(v, zero), one, hn::IfThenElse(hn::Lt(v, zero), hn::Neg(one), v));
      });
    case UnaryOp::clip:
      return Apply(x, y, n, [&](DF, VF v) { return hn::IfThenElse(hn::IsNaN(v), v, hn::Min(hn::Max(v, a), b)); });
    // clip(x * alpha + beta, 0, 1): a multiply then an add (no fma), as the decomposition.
    case UnaryOp::hardsigmoid:
      return Apply(x, y, n, [&](DF, VF v) {
        const VF t = hn::Add(hn::Mul(v, a), b);
        return hn::IfThenElse(hn::IsNaN(t), t, hn::Min(hn::Max(t, zero), one));
      });
    // x * (clip(x + 3, 0, 6) / 6), as the decomposition.
    case UnaryOp::hardswish:
      return Apply(x, y, n, [&](DF d, VF v) {
        const VF t = hn::Add(v, hn::Set(d, 3.0f));
        const VF c = hn::IfThenElse(hn::IsNaN(t), t, hn::Min(hn::Max(t, zero), hn::Set(d, 6.0f)));
        return hn::Mul(v, hn::Div(c, hn::Set(d, 6.0f)));
      });
  }
}

// Widens n 16-bit floats (H = hwy::float16_t or hwy::bfloat16_t) to f32; the tail goes through a
// zero-padded vector so no lane reads past the input.
template <typename H>
void Widen16ToF32(const uint16_t* x, float* y, size_t n) {
  const DF df;
  const hn::Rebind<H, DF> dh;
  const size_t N = hn::Lanes(df);
  const auto* xh = reinterpret_cast<const H*>(x);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, xh + i)), df, y + i);
  if (i < n) {
    HWY_ALIGN H hb[kMaxLanes] = {};
    HWY_ALIGN float fb[kMaxLanes];
    std::memcpy(hb, x + i, (n - i) * 2);
    hn::Store(hn::PromoteTo(df, hn::Load(dh, hb)), df, fb);
    std::copy(fb, fb + (n - i), y + i);
  }
}

void F16ToF32(const uint16_t* x, float* y, size_t n) { Widen16ToF32<hwy::float16_t>(x, y, n); }
void BF16ToF32(const uint16_t* x, float* y, size_t n) { Widen16ToF32<hwy::bfloat16_t>(x, y, n); }

// F16C's conversion rounds to nearest even (imm 0) and handles subnormals, inf and nan.
void F32ToF16(const float* x, uint16_t* y, size_t n) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const size_t N = hn::Lanes(df);
  auto* yh = reinterpret_cast<hwy::float16_t*>(y);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, x + i)), dh, yh + i);
  if (i < n) {
    HWY_ALIGN float fb[kMaxLanes] = {};
    HWY_ALIGN hwy::float16_t hb[kMaxLanes];
    std::copy(x + i, x + n, fb);
    hn::Store(hn::DemoteTo(dh, hn::Load(df, fb)), dh, hb);
    std::memcpy(y + i, hb, (n - i) * 2);
  }
}

// Highway 1.0's DemoteTo(bf16) truncates; this rounds to nearest even and quiets nan (as spore::bf16 does).
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> DemoteBF16(DF df, VF v) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto u = hn::BitCast(du, v);
  const auto rounded = hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u))));
  const auto quiet_nan = hn::Or(u, hn::Set(du, 0x400000u));
  const auto bits = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet_nan, rounded);
  return hn::DemoteTo(hn::Rebind<uint16_t, DF>(), hn::BitCast(di, hn::ShiftRight<16>(bits)));
}

void F32ToBF16(const float* x, uint16_t* y, size_t n) {
  const DF df;
  const hn::Rebind<uint16_t, DF> d16;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(DemoteBF16(df, hn::LoadU(df, x + i)), d16, y + i);
  if (i < n) {
    HWY_ALIGN float fb[kMaxLanes] = {};
    HWY_ALIGN uint16_t hb[kMaxLanes];
    std::copy(x + i, x + n, fb);
    hn::Store(DemoteBF16(df, hn::Load(df, fb)), d16, hb);
    std::copy(hb, hb + (n - i), y + i);
  }
}

// y = clamp(rint(x / scale) + zp, lo, hi) as u8 / i8 (quantize_linear; lo, hi within the code type's range).
// Division, not a reciprocal multiply, for the reference's bits; Round is nearest-even. A nan x gives lo
// (Max returns its second operand on nan).
template <typename Q>
HWY_INLINE void QuantizeT(const float* x, Q* y, size_t n, float scale, float zp, float lo, float hi) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<Q, DF> dq;
  const size_t N = hn::Lanes(df);
  const VF s = hn::Set(df, scale), z = hn::Set(df, zp), l = hn::Set(df, lo), h = hn::Set(df, hi);
  const auto q = [&](VF v) {
    const VF r = hn::Min(hn::Max(hn::Add(hn::Round(hn::Div(v, s)), z), l), h);
    return hn::DemoteTo(dq, hn::ConvertTo(di, r));
  };
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(q(hn::LoadU(df, x + i)), dq, y + i);
  if (i < n) {
    HWY_ALIGN float fb[kMaxLanes] = {};
    HWY_ALIGN Q qb[kMaxLanes];
    std::copy(x + i, x + n, fb);
    hn::Store(q(hn::Load(df, fb)), dq, qb);
    std::copy(qb, qb + (n - i), y + i);
  }
}
void QuantizeU8(const float* x, uint8_t* y, size_t n, float scale, float zp, float lo, float hi) {
  QuantizeT(x, y, n, scale, zp, lo, hi);
}
void QuantizeI8(const float* x, int8_t* y, size_t n, float scale, float zp, float lo, float hi) {
  QuantizeT(x, y, n, scale, zp, lo, hi);
}

void UnaryF16(UnaryOp op, const uint16_t* x, uint16_t* y, size_t n, UnaryParams p) {
  HWY_ALIGN float buf[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    F16ToF32(x + i, buf, m);
    UnaryF32(op, buf, buf, m, p);
    F32ToF16(buf, y + i, m);
  }
}

void UnaryBF16(UnaryOp op, const uint16_t* x, uint16_t* y, size_t n, UnaryParams p) {
  HWY_ALIGN float buf[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    BF16ToF32(x + i, buf, m);
    UnaryF32(op, buf, buf, m, p);
    F32ToBF16(buf, y + i, m);
  }
}

}  // namespace spore::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spore::cpu {
HWY_EXPORT(UnaryF32);
HWY_EXPORT(UnaryF16);
HWY_EXPORT(UnaryBF16);
HWY_EXPORT(F16ToF32);
HWY_EXPORT(BF16ToF32);
HWY_EXPORT(F32ToF16);
HWY_EXPORT(F32ToBF16);
HWY_EXPORT(QuantizeU8);
HWY_EXPORT(QuantizeI8);

void unary_f32(UnaryOp op, const float* x, float* y, size_t n, UnaryParams p) { HWY_DYNAMIC_DISPATCH(UnaryF32)(op, x, y, n, p); }
void unary_f16(UnaryOp op, const uint16_t* x, uint16_t* y, size_t n, UnaryParams p) {
  HWY_DYNAMIC_DISPATCH(UnaryF16)(op, x, y, n, p);
}
void unary_bf16(UnaryOp op, const uint16_t* x, uint16_t* y, size_t n, UnaryParams p) {
  HWY_DYNAMIC_DISPATCH(UnaryBF16)(op, x, y, n, p);
}
void f16_to_f32(const uint16_t* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(F16ToF32)(x, y, n); }
void bf16_to_f32(const uint16_t* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(BF16ToF32)(x, y, n); }
void f32_to_f16(const float* x, uint16_t* y, size_t n) { HWY_DYNAMIC_DISPATCH(F32ToF16)(x, y, n); }
void f32_to_bf16(const float* x, uint16_t* y, size_t n) { HWY_DYNAMIC_DISPATCH(F32ToBF16)(x, y, n); }
void quantize_f32(const float* x, uint8_t* y, size_t n, float scale, float zp, float lo, float hi) {
  HWY_DYNAMIC_DISPATCH(QuantizeU8)(x, y, n, scale, zp, lo, hi);
}
void quantize_f32(const float* x, int8_t* y, size_t n, float scale, float zp, float lo, float hi) {
  HWY_DYNAMIC_DISPATCH(QuantizeI8)(x, y, n, scale, zp, lo, hi);
}
}  // namespace spore::cpu
#endif
