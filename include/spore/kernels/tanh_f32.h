// tanh for f32, accurate to <= 2 ULP of the correctly rounded result over every f32 input, exact at +-0, +-inf
// and nan (quieted), identity on subnormals. Header-only so both spore's built-in tanh (backend/cpu) and the
// tanhcustom plugin (examples/custom_ops/tanhcustom, built without spore) compute the same bits.
//
// Algorithm (on a = |x|, the sign is put back at the end, so tanh(-x) == -tanh(x) bit for bit):
//   a <  0.625: tanh(a) = a + a^3 P(a^2), P a degree-5 minimax fit of (tanh(a) - a) / a^3 (error < 1.5e-9, i.e.
//               ~0.01 ULP after scaling by a^2); the correction is < 12% of a, so its rounding barely shows.
//   a >= 0.625: tanh(a) = 1 - 2 / (e^(2a) + 1). The result is >= 0.55, so the error of the small term
//               2/(e^2a+1) (<= 0.45) is less than half as large in ULPs of the result (with the switch at 0.55,
//               where that term is ~0.5, a few inputs reached 2 ULP; from 0.625 on the max is 1).
//               e^y = 2^k e^r, r = y - k ln2 with a two-constant reduction (exact with FMA), e^r a degree-7
//               Taylor polynomial (truncation < 0.1 ULP), e^(2a) + 1 in one FMA. 2a is clamped to 20, where
//               1 - tanh is far below half an ULP of 1: large |x| and inf give +-1.
// Only IEEE operations (FMA, div, no approximate reciprocals), so every target with FMA (AVX2, AVX-512, NEON,
// SVE) gives the same bits, and so does the scalar version below (std::fma); a target without FMA (SSE4) rounds
// the products separately and may differ in the last bit.
//
// Vector version: Highway; this file follows Highway's per-target include convention, so include it after
// <hwy/highway.h> from a file compiled once per target (foreach_target) and call
// spore::kernels::HWY_NAMESPACE::TanhF32(d, v).

#ifndef SPORE_KERNELS_TANH_F32_SCALAR_H_
#define SPORE_KERNELS_TANH_F32_SCALAR_H_
#include <cmath>
#include <cstdint>
#include <cstring>

namespace spore::kernels {

// Shared constants of both versions.
struct TanhF32Consts {
  static constexpr float kSmall = 0.625f;  // below: odd polynomial; from here on: the exp form
  static constexpr float kMaxTwoA = 20.0f;
  // (tanh(a) - a) / a^3 ~= P(a^2) on a in [0, 0.625] (own Remez fit, coefficients rounded to f32).
  static constexpr float kP0 = -3.333333433e-01f, kP1 = 1.333330572e-01f, kP2 = -5.395954847e-02f,
                         kP3 = 2.177099511e-02f, kP4 = -8.350008167e-03f, kP5 = 2.298941836e-03f;
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693145751953125f;       // 16 significant bits: k * kLn2Hi is exact
  static constexpr float kLn2Lo = 1.428606765330187045e-06f;  // ln 2 - kLn2Hi
  // 1/n! for n = 7..2 (e^r = 1 + r + r^2/2! + ... + r^7/7!).
  static constexpr float kE7 = 1.0f / 5040, kE6 = 1.0f / 720, kE5 = 1.0f / 120, kE4 = 1.0f / 24, kE3 = 1.0f / 6,
                         kE2 = 0.5f;
};

// Scalar version: the same operations in the same order as TanhF32 (std::fma is exact-then-round like the
// vector FMA), so both give identical bits. Used by tests and as a portable fallback.
inline float tanh_f32(float x) {
  using C = TanhF32Consts;
  if (std::isnan(x)) return x + x;  // quiet nan, payload kept
  const float a = std::fabs(x);
  float r;
  if (a < C::kSmall) {
    const float z = a * a;
    float p = C::kP5;
    p = std::fma(p, z, C::kP4);
    p = std::fma(p, z, C::kP3);
    p = std::fma(p, z, C::kP2);
    p = std::fma(p, z, C::kP1);
    p = std::fma(p, z, C::kP0);
    r = std::fma(a * z, p, a);
  } else {
    const float y = std::fmin(a + a, C::kMaxTwoA);
    const float k = std::nearbyint(y * C::kLog2e);  // ties to even, as the vector Round
    float t = std::fma(-k, C::kLn2Hi, y);
    t = std::fma(-k, C::kLn2Lo, t);
    float p = C::kE7;
    p = std::fma(p, t, C::kE6);
    p = std::fma(p, t, C::kE5);
    p = std::fma(p, t, C::kE4);
    p = std::fma(p, t, C::kE3);
    p = std::fma(p, t, C::kE2);
    p = std::fma(p, t, 1.0f);
    p = std::fma(p, t, 1.0f);
    const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(k) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    r = 1.0f - 2.0f / std::fma(p, scale, 1.0f);
  }
  return std::copysign(r, x);
}

}  // namespace spore::kernels
#endif  // SPORE_KERNELS_TANH_F32_SCALAR_H_

#if defined(HWY_HIGHWAY_INCLUDED)  // vector version: only when <hwy/highway.h> came first
#if defined(SPORE_KERNELS_TANH_F32_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPORE_KERNELS_TANH_F32_H_
#undef SPORE_KERNELS_TANH_F32_H_
#else
#define SPORE_KERNELS_TANH_F32_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace spore::kernels::HWY_NAMESPACE {

template <class D, class V = hwy::HWY_NAMESPACE::Vec<D>>
HWY_INLINE V TanhF32(D d, V x) {
  namespace hn = hwy::HWY_NAMESPACE;
  using C = TanhF32Consts;
  const hn::RebindToSigned<D> di;
  const V a = hn::Abs(x);
  const V sign = hn::Xor(x, a);

  // a < 0.625: a + a^3 P(a^2)
  const V z = hn::Mul(a, a);
  V p = hn::Set(d, C::kP5);
  p = hn::MulAdd(p, z, hn::Set(d, C::kP4));
  p = hn::MulAdd(p, z, hn::Set(d, C::kP3));
  p = hn::MulAdd(p, z, hn::Set(d, C::kP2));
  p = hn::MulAdd(p, z, hn::Set(d, C::kP1));
  p = hn::MulAdd(p, z, hn::Set(d, C::kP0));
  const V small = hn::MulAdd(hn::Mul(a, z), p, a);

  // a >= 0.625: 1 - 2 / (e^(2a) + 1). Min's nan behaviour does not matter: nan lanes are replaced below.
  const V y = hn::Min(hn::Add(a, a), hn::Set(d, C::kMaxTwoA));
  const V k = hn::Round(hn::Mul(y, hn::Set(d, C::kLog2e)));
  V t = hn::NegMulAdd(k, hn::Set(d, C::kLn2Hi), y);
  t = hn::NegMulAdd(k, hn::Set(d, C::kLn2Lo), t);
  V q = hn::Set(d, C::kE7);
  q = hn::MulAdd(q, t, hn::Set(d, C::kE6));
  q = hn::MulAdd(q, t, hn::Set(d, C::kE5));
  q = hn::MulAdd(q, t, hn::Set(d, C::kE4));
  q = hn::MulAdd(q, t, hn::Set(d, C::kE3));
  q = hn::MulAdd(q, t, hn::Set(d, C::kE2));
  q = hn::MulAdd(q, t, hn::Set(d, 1.0f));
  q = hn::MulAdd(q, t, hn::Set(d, 1.0f));
  const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, k), hn::Set(di, 127))));
  const V one = hn::Set(d, 1.0f);
  const V large = hn::Sub(one, hn::Div(hn::Set(d, 2.0f), hn::MulAdd(q, scale, one)));

  const V r = hn::Or(hn::IfThenElse(hn::Lt(a, hn::Set(d, C::kSmall)), small, large), sign);
  return hn::IfThenElse(hn::IsNaN(x), hn::Add(x, x), r);
}

}  // namespace spore::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // SPORE_KERNELS_TANH_F32_H_ toggle
#endif  // HWY_HIGHWAY_INCLUDED
