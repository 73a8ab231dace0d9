// Highway kernels of the reduce family (f32): block reductions, column folds, softmax rows and
// columns, and f16/bf16 <-> f32 conversion. Dynamic dispatch picks AVX2 or AVX-512 at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/reduce_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "base/half.h"

#ifndef SPORE_REDUCE_HWY_ONCE
#define SPORE_REDUCE_HWY_ONCE
namespace spore::cpu::reduce_detail {
// Op codes shared with reduce.cpp.
enum : int { op_sum = 0, op_prod = 1, op_max = 2, op_min = 3 };
// A block reduction accumulates position i into lane i % 64 whatever the vector width, then sums the
// 64 lanes in a fixed tree: the bits are the same on AVX2 and AVX-512.
inline constexpr size_t block_lanes = 64;
inline constexpr size_t col_tile = 256;  // max columns per softmax_cols call

template <int kOp>
inline float scalar_op(float a, float b) {
  if constexpr (kOp == op_sum) return a + b;
  else if constexpr (kOp == op_prod) return a * b;
  else if constexpr (kOp == op_max) return b > a ? b : a;
  else return b < a ? b : a;
}
template <int kOp>
inline constexpr float identity() {
  if constexpr (kOp == op_sum) return 0.0f;
  else if constexpr (kOp == op_prod) return 1.0f;
  else if constexpr (kOp == op_max) return -std::numeric_limits<float>::infinity();
  else return std::numeric_limits<float>::infinity();
}
}  // namespace spore::cpu::reduce_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace spore::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace spore::cpu::reduce_detail;  // NOLINT

template <int kOp, class D, class V>
HWY_INLINE V VecOp(D, V a, V b) {
  if constexpr (kOp == op_sum) return hn::Add(a, b);
  else if constexpr (kOp == op_prod) return hn::Mul(a, b);
  else if constexpr (kOp == op_max) return hn::Max(a, b);
  else return hn::Min(a, b);
}

template <int kOp>
float ReduceBlockT(const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  constexpr size_t N = hn::MaxLanes(decltype(d)());
  constexpr size_t kVecs = block_lanes / N;
  constexpr bool kExtreme = kOp == op_max || kOp == op_min;
  using V = decltype(hn::Zero(d));
  V acc[kVecs];
  for (size_t v = 0; v < kVecs; ++v) acc[v] = hn::Set(d, identity<kOp>());
  V nan = hn::Zero(d);
  size_t i = 0;
  for (; i + block_lanes <= n; i += block_lanes) {
    for (size_t v = 0; v < kVecs; ++v) {
      const V xv = hn::LoadU(d, x + i + v * N);
      acc[v] = VecOp<kOp>(d, acc[v], xv);
      if constexpr (kExtreme) nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(xv)));
    }
  }
  HWY_ALIGN float lanes[block_lanes];
  for (size_t v = 0; v < kVecs; ++v) hn::Store(acc[v], d, lanes + v * N);
  bool any_nan = kExtreme && !hn::AllFalse(d, hn::MaskFromVec(nan));
  for (size_t j = 0; i < n; ++i, ++j) {
    any_nan |= kExtreme && std::isnan(x[i]);
    lanes[j] = scalar_op<kOp>(lanes[j], x[i]);
  }
  for (size_t w = block_lanes / 2; w >= 1; w /= 2)
    for (size_t j = 0; j < w; ++j) lanes[j] = scalar_op<kOp>(lanes[j], lanes[j + w]);
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : lanes[0];
}

float ReduceBlock(const float* x, int64_t n, int op) {
  switch (op) {
    case op_sum: return ReduceBlockT<op_sum>(x, static_cast<size_t>(n));
    case op_prod: return ReduceBlockT<op_prod>(x, static_cast<size_t>(n));
    case op_max: return ReduceBlockT<op_max>(x, static_cast<size_t>(n));
    default: return ReduceBlockT<op_min>(x, static_cast<size_t>(n));
  }
}

// acc[i] = op(acc[i], x[i]); max/min keep the first NaN they meet.
template <int kOp>
void AccumulateT(float* HWY_RESTRICT acc, const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto a = hn::LoadU(d, acc + i);
    const auto v = hn::LoadU(d, x + i);
    auto r = VecOp<kOp>(d, a, v);
    if constexpr (kOp == op_max || kOp == op_min) {
      r = hn::IfThenElse(hn::IsNaN(v), v, r);
      r = hn::IfThenElse(hn::IsNaN(a), a, r);
    }
    hn::StoreU(r, d, acc + i);
  }
  for (; i < n; ++i) {
    if constexpr (kOp == op_max || kOp == op_min) {
      if (std::isnan(acc[i])) continue;
      if (std::isnan(x[i])) { acc[i] = x[i]; continue; }
    }
    acc[i] = scalar_op<kOp>(acc[i], x[i]);
  }
}

void Accumulate(float* acc, const float* x, int64_t n, int op) {
  switch (op) {
    case op_sum: return AccumulateT<op_sum>(acc, x, static_cast<size_t>(n));
    case op_prod: return AccumulateT<op_prod>(acc, x, static_cast<size_t>(n));
    case op_max: return AccumulateT<op_max>(acc, x, static_cast<size_t>(n));
    default: return AccumulateT<op_min>(acc, x, static_cast<size_t>(n));
  }
}

// Softmax / log-softmax of one contiguous row. A row whose max is NaN or infinite is all NaN
// (as exp(x - max) is in the reference).
void SoftmaxRow(const float* x, float* y, int64_t n_, bool log) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n_);
  const float ninf = -std::numeric_limits<float>::infinity();
  auto mv = hn::Set(d, ninf);
  auto nan = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    mv = hn::Max(mv, v);
    nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(v)));
  }
  float m = hn::GetLane(hn::MaxOfLanes(d, mv));
  bool any_nan = !hn::AllFalse(d, hn::MaskFromVec(nan));
  for (size_t j = i; j < n; ++j) {
    any_nan |= std::isnan(x[j]);
    m = x[j] > m ? x[j] : m;
  }
  if (any_nan || !std::isfinite(m)) {
    for (size_t j = 0; j < n; ++j) y[j] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const auto vm = hn::Set(d, m);
  auto sv = hn::Zero(d);
  for (i = 0; i + N <= n; i += N) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm));
    if (!log) hn::StoreU(e, d, y + i);
    sv = hn::Add(sv, e);
  }
  if (i < n) {  // the tail goes through the same vector Exp, padded with -inf (exp -> 0)
    HWY_ALIGN float buf[hn::MaxLanes(decltype(d)())];
    for (size_t j = 0; j < N; ++j) buf[j] = i + j < n ? x[i + j] : ninf;
    const auto e = hn::Exp(d, hn::Sub(hn::Load(d, buf), vm));
    hn::Store(e, d, buf);
    if (!log) std::memcpy(y + i, buf, (n - i) * sizeof(float));
    sv = hn::Add(sv, e);
  }
  const float s = hn::GetLane(hn::SumOfLanes(d, sv));
  if (log) {
    const float ls = std::log(s);
    const auto vls = hn::Set(d, ls);
    for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, x + i), vm), vls), d, y + i);
    for (; i < n; ++i) y[i] = (x[i] - m) - ls;
  } else {
    const float inv = 1.0f / s;
    const auto vinv = hn::Set(d, inv);
    for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, y + i), vinv), d, y + i);
    for (; i < n; ++i) y[i] = y[i] * inv;
  }
}

// Softmax along a strided axis for `w` <= col_tile adjacent columns: x[j * stride + c], j < n.
// Vectorized across columns; tail columns use scalar code with std::exp.
void SoftmaxCols(const float* x, float* y, int64_t n_, int64_t stride_, int64_t w_, bool log) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n_), stride = static_cast<size_t>(stride_), w = static_cast<size_t>(w_);
  HWY_ALIGN float m[col_tile], s[col_tile];
  for (size_t c = 0; c < w; ++c) m[c] = -std::numeric_limits<float>::infinity(), s[c] = 0.0f;
  for (size_t j = 0; j < n; ++j) AccumulateT<op_max>(m, x + j * stride, w);
  const size_t wv = w - w % N;  // vector columns [0, wv), scalar columns [wv, w)
  for (size_t j = 0; j < n; ++j) {
    const float* xr = x + j * stride;
    float* yr = y + j * stride;
    for (size_t c = 0; c < wv; c += N) {
      const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, xr + c), hn::Load(d, m + c)));
      if (!log) hn::StoreU(e, d, yr + c);
      hn::Store(hn::Add(hn::Load(d, s + c), e), d, s + c);
    }
    for (size_t c = wv; c < w; ++c) {
      const float e = std::exp(xr[c] - m[c]);
      if (!log) yr[c] = e;
      s[c] += e;
    }
  }
  for (size_t c = 0; c < w; ++c) s[c] = log ? std::log(s[c]) : 1.0f / s[c];  // log(sum) or 1/sum
  for (size_t j = 0; j < n; ++j) {
    const float* xr = x + j * stride;
    float* yr = y + j * stride;
    size_t c = 0;
    if (log) {
      for (; c < wv; c += N)
        hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, xr + c), hn::Load(d, m + c)), hn::Load(d, s + c)), d, yr + c);
      for (; c < w; ++c) yr[c] = (xr[c] - m[c]) - s[c];
    } else {
      for (; c < wv; c += N) hn::StoreU(hn::Mul(hn::LoadU(d, yr + c), hn::Load(d, s + c)), d, yr + c);
      for (; c < w; ++c) yr[c] = yr[c] * s[c];
    }
  }
  for (size_t c = 0; c < w; ++c)
    if (!std::isfinite(m[c]))
      for (size_t j = 0; j < n; ++j) y[j * stride + c] = std::numeric_limits<float>::quiet_NaN();
}

void HalfToF32(const uint16_t* src, bool bf16, float* dst, int64_t n_) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n_);
  size_t i = 0;
  if (bf16) {
    const hn::Rebind<hwy::bfloat16_t, decltype(d)> dh;
    for (; i + N <= n; i += N)
      hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(src + i))), d, dst + i);
    for (; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
  } else {
    const hn::Rebind<hwy::float16_t, decltype(d)> dh;
    for (; i + N <= n; i += N)
      hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(src + i))), d, dst + i);
    for (; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
  }
}

// f32 -> f16/bf16, round to nearest even. Highway 1.0's bf16 DemoteTo truncates, so bf16 rounds by hand
// exactly like spore::float_to_bf16_bits.
void F32ToHalf(const float* src, bool bf16, uint16_t* dst, int64_t n_) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t n = static_cast<size_t>(n_);
  size_t i = 0;
  if (bf16) {
    const hn::RebindToUnsigned<decltype(d)> du;
    const hn::RebindToSigned<decltype(d)> di;
    const hn::Rebind<uint16_t, decltype(d)> d16;
    for (; i + N <= n; i += N) {
      const auto v = hn::LoadU(d, src + i);
      const auto u = hn::BitCast(du, v);
      const auto rounded = hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u))));
      const auto quiet = hn::Or(hn::ShiftLeft<16>(hn::ShiftRight<16>(u)), hn::Set(du, 0x400000u));
      const auto bits = hn::ShiftRight<16>(hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet, rounded));
      hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, bits)), d16, dst + i);
    }
    for (; i < n; ++i) dst[i] = float_to_bf16_bits(src[i]);
  } else {
    const hn::Rebind<hwy::float16_t, decltype(d)> dh;
    for (; i + N <= n; i += N)
      hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, src + i)), dh, reinterpret_cast<hwy::float16_t*>(dst + i));
    for (; i < n; ++i) dst[i] = float_to_half_bits(src[i]);
  }
}

}  // namespace spore::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spore::cpu {
HWY_EXPORT(ReduceBlock);
HWY_EXPORT(Accumulate);
HWY_EXPORT(SoftmaxRow);
HWY_EXPORT(SoftmaxCols);
HWY_EXPORT(HalfToF32);
HWY_EXPORT(F32ToHalf);

float reduce_block_f32(const float* x, int64_t n, int op) { return HWY_DYNAMIC_DISPATCH(ReduceBlock)(x, n, op); }
void accumulate_f32(float* acc, const float* x, int64_t n, int op) { HWY_DYNAMIC_DISPATCH(Accumulate)(acc, x, n, op); }
void softmax_row_f32(const float* x, float* y, int64_t n, bool log) { HWY_DYNAMIC_DISPATCH(SoftmaxRow)(x, y, n, log); }
void softmax_cols_f32(const float* x, float* y, int64_t n, int64_t stride, int64_t w, bool log) {
  HWY_DYNAMIC_DISPATCH(SoftmaxCols)(x, y, n, stride, w, log);
}
void half_to_f32(const uint16_t* src, bool bf16, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(HalfToF32)(src, bf16, dst, n); }
void f32_to_half(const float* src, bool bf16, uint16_t* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(F32ToHalf)(src, bf16, dst, n); }
}  // namespace spore::cpu
#endif
