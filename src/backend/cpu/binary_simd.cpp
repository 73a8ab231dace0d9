// SIMD inner loops of the binary family (Highway dynamic dispatch: AVX2 baseline, AVX-512 when the
// CPU has it). Each call handles one contiguous run where each side is either a vector or a scalar;
// binary.cpp turns broadcasting into such runs. f16/bf16 are widened to f32, computed, and rounded
// back to nearest even. The tail goes through a padded buffer and the same vector code, so every
// element gets the same bits wherever a chunk boundary falls.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/binary_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstdint>
#include <cstring>

#include "base/half.h"

HWY_BEFORE_NAMESPACE();
namespace spore::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct OpAdd { template <class V> HWY_INLINE V operator()(V a, V b) const { return hn::Add(a, b); } };
struct OpSub { template <class V> HWY_INLINE V operator()(V a, V b) const { return hn::Sub(a, b); } };
struct OpMul { template <class V> HWY_INLINE V operator()(V a, V b) const { return hn::Mul(a, b); } };
struct OpDiv { template <class V> HWY_INLINE V operator()(V a, V b) const { return hn::Div(a, b); } };
// x86 max/min return the second operand when either is nan; NumPy propagates nan (a's first).
struct OpMax {
  template <class V> HWY_INLINE V operator()(V a, V b) const {
    return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Max(a, b)));
  }
};
struct OpMin {
  template <class V> HWY_INLINE V operator()(V a, V b) const {
    return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Min(a, b)));
  }
};

// Element access for a lane type: T is what memory holds, vectors are always of Compute.
template <typename T> struct Io;
template <> struct Io<float> {
  using Compute = float;
  template <class D> static HWY_INLINE hn::Vec<D> load(D d, const float* p) { return hn::LoadU(d, p); }
  template <class D> static HWY_INLINE void store(D d, hn::Vec<D> v, float* p) { hn::StoreU(v, d, p); }
  static float scalar(const float* p) { return *p; }
};
template <> struct Io<double> {
  using Compute = double;
  template <class D> static HWY_INLINE hn::Vec<D> load(D d, const double* p) { return hn::LoadU(d, p); }
  template <class D> static HWY_INLINE void store(D d, hn::Vec<D> v, double* p) { hn::StoreU(v, d, p); }
  static double scalar(const double* p) { return *p; }
};
template <> struct Io<f16> {
  using Compute = float;
  template <class D> static HWY_INLINE hn::Vec<D> load(D d, const f16* p) {
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  }
  template <class D> static HWY_INLINE void store(D d, hn::Vec<D> v, f16* p) {
    const hn::Rebind<hwy::float16_t, D> dh;  // F16C's vcvtps2ph rounds to nearest even
    hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(p));
  }
  static float scalar(const f16* p) { return static_cast<float>(*p); }
};
template <> struct Io<bf16> {
  using Compute = float;
  template <class D> static HWY_INLINE hn::Vec<D> load(D d, const bf16* p) {
    const hn::Rebind<hwy::bfloat16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(p)));
  }
  // Highway 1.0's DemoteTo(bf16) truncates; round to nearest even like spore::bf16 (quiet nan kept).
  template <class D> static HWY_INLINE void store(D d, hn::Vec<D> v, bf16* p) {
    const hn::RebindToUnsigned<D> du;
    const hn::RebindToSigned<D> di;
    const hn::Rebind<uint16_t, D> du16;
    const auto u = hn::BitCast(du, v);
    const auto bias = hn::Add(hn::Set(du, 0x7fffu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)));
    const auto rounded = hn::ShiftRight<16>(hn::Add(u, bias));
    const auto nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
    const auto bits = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, rounded);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, bits)), du16, reinterpret_cast<uint16_t*>(p));
  }
  static float scalar(const bf16* p) { return static_cast<float>(*p); }
};

// kMode 0: a and b are vectors; 1: b is a scalar; 2: a is a scalar.
template <int kMode, typename T, class Op>
HWY_INLINE void run(Op op, const T* a, const T* b, T* out, size_t n) {
  using C = typename Io<T>::Compute;
  const hn::ScalableTag<C> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  const V sa = hn::Set(d, kMode == 2 ? Io<T>::scalar(a) : C(0));
  const V sb = hn::Set(d, kMode == 1 ? Io<T>::scalar(b) : C(0));
  auto va = [&](const T* p) { return kMode == 2 ? sa : Io<T>::load(d, p); };
  auto vb = [&](const T* p) { return kMode == 1 ? sb : Io<T>::load(d, p); };
  size_t i = 0;
  // Unrolled so the loads of both streams overlap (the same-shape case is bandwidth bound).
  for (; i + 4 * N <= n; i += 4 * N) {
    const V a0 = va(a + i), a1 = va(a + i + N), a2 = va(a + i + 2 * N), a3 = va(a + i + 3 * N);
    const V b0 = vb(b + i), b1 = vb(b + i + N), b2 = vb(b + i + 2 * N), b3 = vb(b + i + 3 * N);
    Io<T>::store(d, op(a0, b0), out + i);
    Io<T>::store(d, op(a1, b1), out + i + N);
    Io<T>::store(d, op(a2, b2), out + i + 2 * N);
    Io<T>::store(d, op(a3, b3), out + i + 3 * N);
  }
  for (; i + N <= n; i += N) Io<T>::store(d, op(va(a + i), vb(b + i)), out + i);
  if (i < n) {
    constexpr size_t kMax = HWY_MAX_BYTES / sizeof(C);
    const size_t rem = n - i;
    T ba[kMax] = {}, bb[kMax] = {}, bo[kMax];
    if (kMode != 2) std::memcpy(static_cast<void*>(ba), a + i, rem * sizeof(T));
    if (kMode != 1) std::memcpy(static_cast<void*>(bb), b + i, rem * sizeof(T));
    Io<T>::store(d, op(va(ba), vb(bb)), bo);
    std::memcpy(static_cast<void*>(out + i), bo, rem * sizeof(T));
  }
}

template <typename T, class Op>
HWY_INLINE void run_mode(Op op, const T* a, const T* b, T* out, size_t n, int mode) {
  if (mode == 0) run<0>(op, a, b, out, n);
  else if (mode == 1) run<1>(op, a, b, out, n);
  else run<2>(op, a, b, out, n);
}

template <typename T>
void binary_simd(int op, const T* a, const T* b, T* out, size_t n, int mode) {
  switch (op) {
    case 0: return run_mode(OpAdd(), a, b, out, n, mode);
    case 1: return run_mode(OpSub(), a, b, out, n, mode);
    case 2: return run_mode(OpMul(), a, b, out, n, mode);
    case 3: return run_mode(OpDiv(), a, b, out, n, mode);
    case 4: return run_mode(OpMax(), a, b, out, n, mode);
    default: return run_mode(OpMin(), a, b, out, n, mode);
  }
}

void binary_f32(int op, const float* a, const float* b, float* out, size_t n, int mode) { binary_simd(op, a, b, out, n, mode); }
void binary_f64(int op, const double* a, const double* b, double* out, size_t n, int mode) { binary_simd(op, a, b, out, n, mode); }
void binary_f16(int op, const f16* a, const f16* b, f16* out, size_t n, int mode) { binary_simd(op, a, b, out, n, mode); }
void binary_bf16(int op, const bf16* a, const bf16* b, bf16* out, size_t n, int mode) { binary_simd(op, a, b, out, n, mode); }

}  // namespace spore::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spore::cpu {
HWY_EXPORT(binary_f32);
HWY_EXPORT(binary_f64);
HWY_EXPORT(binary_f16);
HWY_EXPORT(binary_bf16);

// Declared in binary.cpp (no shared header: these are private to the binary family).
void simd_binary(int op, const float* a, const float* b, float* out, size_t n, int mode) {
  HWY_DYNAMIC_DISPATCH(binary_f32)(op, a, b, out, n, mode);
}
void simd_binary(int op, const double* a, const double* b, double* out, size_t n, int mode) {
  HWY_DYNAMIC_DISPATCH(binary_f64)(op, a, b, out, n, mode);
}
void simd_binary(int op, const f16* a, const f16* b, f16* out, size_t n, int mode) {
  HWY_DYNAMIC_DISPATCH(binary_f16)(op, a, b, out, n, mode);
}
void simd_binary(int op, const bf16* a, const bf16* b, bf16* out, size_t n, int mode) {
  HWY_DYNAMIC_DISPATCH(binary_bf16)(op, a, b, out, n, mode);
}
}  // namespace spore::cpu
#endif
