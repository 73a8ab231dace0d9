// Dropout's keep mask on SIMD lanes (declared in elementwise_simd.h): the Philox-4x32-10 draw of base/rng.cpp, word 0,
// for one counter per 64-bit lane, compiled once per SIMD target and picked at run time. A lane holds a 32-bit word
// in its low half, so MulEven on the 32-bit view gives the full 32x32 -> 64-bit products Philox's rounds need
// (VPMULUDQ on x86). Same words as philox4x32 computes one counter at a time, so the mask keeps its bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/dropout_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "backend/cpu/elementwise_simd.h"

HWY_BEFORE_NAMESPACE();
namespace spore::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Four vectors of counters at a time: a round is a chain of dependent multiplies, so independent chains side by
// side keep the multiplier busy.
constexpr size_t kChains = 4;

void PhiloxKeep(uint64_t seed, uint64_t stream, uint64_t start, size_t n, uint32_t threshold, uint8_t* keep) {
  const hn::ScalableTag<uint64_t> d;
  const hn::Repartition<uint32_t, decltype(d)> d32;
  const hn::RebindToSigned<decltype(d)> di;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  const V low = hn::Set(d, 0xFFFFFFFFull);
  const V m0 = hn::Set(d, 0xD2511F53ull), m1 = hn::Set(d, 0xCD9E8D57ull);
  const V s_lo = hn::Set(d, stream & 0xFFFFFFFFull), s_hi = hn::Set(d, stream >> 32);
  const V below = hn::Set(d, static_cast<uint64_t>(threshold) - 1);  // threshold 0: all ones, i.e. -1 signed
  const V lanes = hn::Iota(d, 0), one = hn::Set(d, 1);
  HWY_ALIGN uint64_t kept[kChains * hn::MaxLanes(hn::ScalableTag<uint64_t>())];
  for (size_t i = 0; i < n; i += kChains * N) {
    V c0[kChains], c1[kChains], c2[kChains], c3[kChains];
    for (size_t j = 0; j < kChains; ++j) {
      const V ctr = hn::Add(lanes, hn::Set(d, start + i + j * N));
      c0[j] = hn::And(ctr, low);
      c1[j] = hn::ShiftRight<32>(ctr);
      c2[j] = s_lo;
      c3[j] = s_hi;
    }
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const V key0 = hn::Set(d, k0), key1 = hn::Set(d, k1);
      for (size_t j = 0; j < kChains; ++j) {
        const V p0 = hn::MulEven(hn::BitCast(d32, m0), hn::BitCast(d32, c0[j]));
        const V p1 = hn::MulEven(hn::BitCast(d32, m1), hn::BitCast(d32, c2[j]));
        c0[j] = hn::Xor(hn::Xor(hn::ShiftRight<32>(p1), c1[j]), key0);
        c1[j] = hn::And(p1, low);
        c2[j] = hn::Xor(hn::Xor(hn::ShiftRight<32>(p0), c3[j]), key1);
        c3[j] = hn::And(p0, low);
      }
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // `word >> 8 >= threshold` as `> threshold - 1` on signed lanes (Highway has Gt for 64-bit lanes on every
    // target): word >> 8 is below 2^24 and threshold at most 2^24, so the signed compare is exact.
    for (size_t j = 0; j < kChains; ++j) {
      const auto ge = hn::Gt(hn::BitCast(di, hn::ShiftRight<8>(c0[j])), hn::BitCast(di, below));
      hn::Store(hn::IfThenElseZero(hn::RebindMask(d, ge), one), d, kept + j * N);
    }
    const size_t m = n - i < kChains * N ? n - i : kChains * N;
    for (size_t j = 0; j < m; ++j) keep[i + j] = static_cast<uint8_t>(kept[j]);
  }
}

}  // namespace spore::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace spore::cpu {
HWY_EXPORT(PhiloxKeep);

void philox_keep(uint64_t seed, uint64_t stream, uint64_t start, size_t n, uint32_t threshold, uint8_t* keep) {
  HWY_DYNAMIC_DISPATCH(PhiloxKeep)(seed, stream, start, n, threshold, keep);
}
}  // namespace spore::cpu
#endif
