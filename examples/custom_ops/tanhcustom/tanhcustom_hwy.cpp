// Highway kernels of tanhcustom (v2, v3, the gradient), compiled once per SIMD target and chosen at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tanhcustom_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cstring>

#include "spore/kernels/tanh_f32.h"
#include "tanhcustom_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace tanhcustom::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr size_t kMaxLanes = hn::MaxLanes(DF());

// Element formats: f32 in memory as is; f16 and bf16 widened on load and rounded to nearest even on store.
struct F32 {
  using T = float;
  static HWY_INLINE VF Load(DF d, const float* p) { return hn::LoadU(d, p); }
  static HWY_INLINE void Store(DF d, VF v, float* p) { hn::StoreU(v, d, p); }
};
struct F16 {
  using T = uint16_t;
  static HWY_INLINE VF Load(DF d, const uint16_t* p) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }
  // F16C's conversion rounds to nearest even and keeps subnormals, inf and nan.
  static HWY_INLINE void Store(DF d, VF v, uint16_t* p) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(p));
  }
};
struct BF16 {
  using T = uint16_t;
  static HWY_INLINE VF Load(DF d, const uint16_t* p) {
    const hn::RebindToUnsigned<DF> du;
    const hn::Rebind<uint16_t, DF> d16;
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  }
  // Highway 1.0's DemoteTo(bf16) truncates: round to nearest even by hand, and keep nan a (quiet) nan.
  static HWY_INLINE void Store(DF d, VF v, uint16_t* p) {
    const hn::RebindToUnsigned<DF> du;
    const hn::RebindToSigned<DF> di;
    const hn::Rebind<uint16_t, DF> d16;
    const auto u = hn::BitCast(du, v);
    const auto rounded = hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u))));
    const auto bits = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Or(u, hn::Set(du, 0x400000u)), rounded);
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, hn::ShiftRight<16>(bits))), d16, p);
  }
};

// y[i] = fn(x[i]), x in format In, y in format Out. The tail goes through a zero-padded vector, so every element
// is computed by the same code whatever its position: block boundaries (and so the thread count) cannot change
// a result.
template <class In, class Out, class Fn>
HWY_INLINE void Map(const typename In::T* x, typename Out::T* y, size_t n, const Fn& fn) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) Out::Store(d, fn(d, In::Load(d, x + i)), y + i);
  if (i < n) {
    HWY_ALIGN typename In::T bx[kMaxLanes] = {};
    HWY_ALIGN typename Out::T by[kMaxLanes];
    std::copy(x + i, x + n, bx);
    Out::Store(d, fn(d, In::Load(d, bx)), by);
    std::copy(by, by + (n - i), y + i);
  }
}
template <class Fmt, class Fn>
HWY_INLINE void Map1(const typename Fmt::T* x, typename Fmt::T* y, size_t n, const Fn& fn) {
  Map<Fmt, Fmt>(x, y, n, fn);
}

// out[i] = fn(a[i], b[i]), tail as in Map1.
template <class Fmt, class Fn>
HWY_INLINE void Map2(const typename Fmt::T* a, const typename Fmt::T* b, typename Fmt::T* out, size_t n,
                     const Fn& fn) {
  using T = typename Fmt::T;
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) Fmt::Store(d, fn(d, Fmt::Load(d, a + i), Fmt::Load(d, b + i)), out + i);
  if (i < n) {
    HWY_ALIGN T ba[kMaxLanes] = {};
    HWY_ALIGN T bb[kMaxLanes] = {};
    std::copy(a + i, a + n, ba);
    std::copy(b + i, b + n, bb);
    Fmt::Store(d, fn(d, Fmt::Load(d, ba), Fmt::Load(d, bb)), ba);
    std::copy(ba, ba + (n - i), out + i);
  }
}

// v2: the formula everyone writes first, vectorized. Fast and within ~1e-7 absolute, but (1 - q) cancels for
// small |x|, so the relative error explodes near 0 (tiny and subnormal x give 0), and nan comes out as +-1
// (Min drops it). v3 fixes both.
HWY_INLINE VF TanhV2(DF d, VF v) {
  const VF one = hn::Set(d, 1.0f);
  const VF a = hn::Min(hn::Abs(v), hn::Set(d, 9.1f));  // beyond 9.1 tanh rounds to 1; keeps Exp in range
  const VF q = hn::Exp(d, hn::Mul(a, hn::Set(d, -2.0f)));
  return hn::CopySign(hn::Div(hn::Sub(one, q), hn::Add(one, q)), v);
}

HWY_INLINE VF Grad(DF d, VF y, VF dy) { return hn::Mul(dy, hn::NegMulAdd(y, y, hn::Set(d, 1.0f))); }

void TanhV2F32(const float* x, float* y, size_t n) { Map1<F32>(x, y, n, TanhV2); }

HWY_INLINE VF TanhV3(DF d, VF v) { return spore::kernels::HWY_NAMESPACE::TanhF32(d, v); }
HWY_INLINE VF Identity(DF, VF v) { return v; }

void TanhV3F32(const float* x, float* y, size_t n) { Map1<F32>(x, y, n, TanhV3); }

// f16: one fused loop (F16C converts in one instruction each way). bf16: widen a block into an L1-resident f32
// buffer, run the f32 loop on it, round back: TanhF32 alone keeps ~17 constants live, and with bf16's
// shift/round/pack on top AVX2's 16 registers spill (measured ~15% slower fused).
constexpr size_t kBlock = 1024;
template <class Fmt>
void TanhV3Half(const uint16_t* x, uint16_t* y, size_t n) {
  HWY_ALIGN float buf[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    Map<Fmt, F32>(x + i, buf, m, Identity);
    Map1<F32>(buf, buf, m, TanhV3);
    Map<F32, Fmt>(buf, y + i, m, Identity);
  }
}
void TanhV3F16(const uint16_t* x, uint16_t* y, size_t n) { Map1<F16>(x, y, n, TanhV3); }
void TanhV3BF16(const uint16_t* x, uint16_t* y, size_t n) { TanhV3Half<BF16>(x, y, n); }

void GradF32(const float* y, const float* dy, float* dx, size_t n) { Map2<F32>(y, dy, dx, n, Grad); }
void GradF16(const uint16_t* y, const uint16_t* dy, uint16_t* dx, size_t n) { Map2<F16>(y, dy, dx, n, Grad); }
void GradBF16(const uint16_t* y, const uint16_t* dy, uint16_t* dx, size_t n) { Map2<BF16>(y, dy, dx, n, Grad); }

}  // namespace tanhcustom::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tanhcustom {
HWY_EXPORT(TanhV2F32);
HWY_EXPORT(TanhV3F32);
HWY_EXPORT(TanhV3F16);
HWY_EXPORT(TanhV3BF16);
HWY_EXPORT(GradF32);
HWY_EXPORT(GradF16);
HWY_EXPORT(GradBF16);

void tanh_v2_f32(const float* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(TanhV2F32)(x, y, n); }
void tanh_v3_f32(const float* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(TanhV3F32)(x, y, n); }
void tanh_v3_f16(const uint16_t* x, uint16_t* y, size_t n) { HWY_DYNAMIC_DISPATCH(TanhV3F16)(x, y, n); }
void tanh_v3_bf16(const uint16_t* x, uint16_t* y, size_t n) { HWY_DYNAMIC_DISPATCH(TanhV3BF16)(x, y, n); }
void tanh_grad_f32(const float* y, const float* dy, float* dx, size_t n) { HWY_DYNAMIC_DISPATCH(GradF32)(y, dy, dx, n); }
void tanh_grad_f16(const uint16_t* y, const uint16_t* dy, uint16_t* dx, size_t n) {
  HWY_DYNAMIC_DISPATCH(GradF16)(y, dy, dx, n);
}
void tanh_grad_bf16(const uint16_t* y, const uint16_t* dy, uint16_t* dx, size_t n) {
  HWY_DYNAMIC_DISPATCH(GradBF16)(y, dy, dx, n);
}
}  // namespace tanhcustom
#endif
