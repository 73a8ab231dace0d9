// CPU kernels of linear_blockq and embed_blockq (ops/llm_ops.h), AVX2 + FMA + F16C (the build's x86-64-v3
// baseline). The reference backend (reference/blockq.cpp) holds the definition; these differ from it only in
// summing in f32.
//
// Batch invariance. Every y[m, n] is computed by one fixed sequence of operations that depends only on K:
//   quant formats  acc (8 f32 lanes) = 0; per block b in order: acc = fma(f32(int32 lanes of the block's 32 integer
//                  products, 4 consecutive products per lane), broadcast(dw_b * dx_b), acc);
//   f32/f16/bf16   acc (8 lanes) = 0; per 8 values in order: acc = fma(x, w, acc); the last K % 8 values are added
//                  after the horizontal sum, one std::fma each;
// then s = hsum(acc) (lane i + lane i+4, then i + i+2, then 0 + 1) and y = s + bias[n].
// A register tile of R rows x C columns (tile<R, C>) runs exactly this sequence for each of its R*C elements, so
// the tile shape, which rows share a tile (the number of rows M), how the columns are chunked into tasks and the
// number of threads change nothing in the bits: M = 1 (decode) and M = 512 (prefill) give the same row. Work is
// split over N only (never over K), in chunks whose size depends on the row size only, never on the threads.
// Decode (M = 1) runs 1 x 4 tiles whose 4 columns lie a quarter of the task's chunk apart: 4 independent FMA chains
// and 4 weight streams in separate pages (4 adjacent short rows made the hardware prefetchers several times slower
// on 1 KB rows). Prefill runs 4 x 2 (quant) or 4 x 3 (float) tiles, each weight block loaded once for 4 rows.
//
// The integer dot of a q8_0 block is llama.cpp's AVX2 form: maddubs(|w|, sign(x, w)) (u8 x s8 -> pairs in i16,
// exact: at most 2 * 128 * 127) then madd with ones (-> 8 x i32); q4_0 uses the nibbles as the unsigned operand and
// subtracts 8 * sum(x) per lane (block_dot). Activations are quantized once per call into scratch (int8 rows, f32
// block scales, and for q4_0 the lane sums), f16/bf16 activations rounded once into an f32 scratch row.
//
// AVX-512: on CPUs with AVX-512 BW/VL and AVX512-VNNI the tiles run from blockq_avx512.cpp (the same code,
// blockq_tiles.inc, built for that ISA): vpdpbusd replaces maddubs + madd and twice the registers allow wider
// tiles. It keeps 8 lanes per block, so every element gets the same integers and the same f32 sequence: the bits
// do not depend on the ISA (tests/llm/blockq_test.cpp compares the two builds). SPORE_BLOCKQ_ISA=avx2 forces the
// AVX2 build. A 16-lane (two blocks per register) variant would change the summation order, so it is not used;
// Q8_0 decode puts two columns in one register instead (tile_q8_decode_pairs: each half one column's 8 lanes).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "backend/cpu/blockq.h"
#include "backend/cpu/elementwise_simd.h"
#include "backend/cpu/families.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "ops/llm_ops.h"

namespace spore::cpu {
namespace {

using llm_ops::WeightFormat;
using llm_ops::qk;

WeightFormat format_of(const KernelContext& k) { return llm_ops::format_of(k.attrs); }

#include "backend/cpu/blockq_tiles.inc"

// ---- activations -------------------------------------------------------------------------------------------------

// One row of K (a multiple of 32) values to Q8_0, as llama.cpp's x86 quantize_row_q8_0 (the one it runs on this
// hardware): per block d = amax / 127, q = x * (127 / amax) rounded to nearest, ties to even; q goes to q[K], the f32 value of the f16-rounded d to d[K / 32] and,
// when s8 is given (q4_0 weights), 8 * the sums of 4 consecutive q to s8[K / 4] (see block_dot).
void quantize_row_q8_0(const float* x, int64_t k, int8_t* q, float* d, int32_t* s8) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < k / qk; ++b) {
    const float* xb = x + b * qk;
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                             _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float db = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i iv[4];
    for (int i = 0; i < 4; ++i)
      iv[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    // packs interleave the 128-bit lanes; the permute puts the 8 groups of 4 back in order.
    const __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]), p16b = _mm256_packs_epi32(iv[2], iv[3]);
    const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * qk), p8);
    if (s8) {
      const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p8), _mm256_set1_epi16(1));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(s8 + b * 8), _mm256_slli_epi32(sums, 3));
    }
    d[b] = half_bits_to_float(float_to_half_bits(db));
  }
}

// x rounded to f16 (nearest even, F16C) and back to f32.
void round_row_f16(const float* x, float* y, int64_t k) {
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  for (; i < k; ++i) y[i] = half_bits_to_float(float_to_half_bits(x[i]));
}

// x rounded to bf16 (nearest even; nan stays a quiet nan, as base/half.h) and back to f32.
void round_row_bf16(const float* x, float* y, int64_t k) {
  int64_t i = 0;
  const __m256i lsb = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), hi = _mm256_set1_epi32(-65536);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
                quiet = _mm256_set1_epi32(0x00400000);
  for (; i + 8 <= k; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), lsb)));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i v = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), is_nan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm256_and_si256(v, hi));
  }
  for (; i < k; ++i) y[i] = bf16_bits_to_float(float_to_bf16_bits(x[i]));
}

// y_i = x W_i^T (+ bias_i) for the `count` weights of a linear_blockq (count 1) or linear_blockq_multi node: inputs
// x, w_0..w_{count-1}, then (has_bias) bias_0..bias_{count-1}; outputs y_i. The activations are prepared once.
void run_linear(KernelContext& k, int count, bool has_bias, bool glu) {
  const WeightFormat f = format_of(k);
  const Tensor& x = k.in(0);
  const int64_t kk = x.dim(-1);
  int64_t m = 1;
  for (int i = 0; i + 1 < x.rank(); ++i) m *= x.dim(i);
  SPORE_CHECK(count >= 1 && count <= kBlockqMaxProblems, ErrorCode::internal, "linear_blockq: {} weights (1 to {})",
              count, kBlockqMaxProblems);
  Problem ps[kBlockqMaxProblems];
  int live = 0;
  for (int i = 0; i < count; ++i) {
    const Tensor& w = k.in(1 + i);
    Problem& p = ps[live];
    p.n = w.dim(0);
    if (m == 0 || p.n == 0) continue;
    p.w = static_cast<const uint8_t*>(w.raw_data());
    p.bias = has_bias ? k.in(1 + count + i).data<float>() : nullptr;
    p.y = glu && i == 1 ? nullptr : k.out(i).data<float>();
    p.k = kk;
    p.w_row = llm_ops::row_bytes(f, kk);
    p.ldy = p.n;
    SPORE_CHECK(w.dim(1) * static_cast<int64_t>(dtype_size(w.dtype())) == p.w_row, ErrorCode::internal,
                "linear_blockq: {} weight rows of {} bytes, expected {} for K={}", llm_ops::format_name(f),
                w.dim(1) * static_cast<int64_t>(dtype_size(w.dtype())), p.w_row, kk);
    ++live;
  }
  if (live == 0) return;
  if (glu) {
    SPORE_CHECK(live == 2 && ps[0].n == ps[1].n, ErrorCode::internal, "linear_blockq_multi silu_mul: gate and up differ");
    ps[1].y = static_cast<float*>(k.scratch(static_cast<size_t>(m * ps[1].n) * sizeof(float)));
  }
  const float* xp = x.data<float>();
  // Activations are prepared once per call, per row (so a row's prepared values never depend on the other rows).
  const size_t rows = static_cast<size_t>(m), kz = static_cast<size_t>(kk);
  switch (f) {
    case WeightFormat::q8_0:
    case WeightFormat::q4_0: {
      auto* q = static_cast<int8_t*>(k.scratch(std::max<size_t>(rows * kz, 1)));
      auto* d = static_cast<float*>(k.scratch(std::max<size_t>(rows * kz / qk * sizeof(float), 1)));
      int32_t* s8 = nullptr;
      if (f == WeightFormat::q4_0) s8 = static_cast<int32_t*>(k.scratch(std::max<size_t>(rows * kz / 4 * sizeof(int32_t), 1)));
      parallel_for(m, [&](int64_t r) {
        quantize_row_q8_0(xp + r * kk, kk, q + r * kk, d + r * (kk / qk), s8 ? s8 + r * (kk / 4) : nullptr);
      });
      for (int i = 0; i < live; ++i) {
        ps[i].x_q = q;
        ps[i].x_d = d;
        ps[i].x_s = s8;
      }
      break;
    }
    case WeightFormat::f16:
    case WeightFormat::bf16: {
      auto* xr = static_cast<float*>(k.scratch(std::max<size_t>(rows * kz * sizeof(float), 1)));
      const bool half = f == WeightFormat::f16;
      parallel_for(m, [&](int64_t r) {
        (half ? round_row_f16 : round_row_bf16)(xp + r * kk, xr + r * kk, kk);
      });
      for (int i = 0; i < live; ++i) ps[i].x_f = xr;
      break;
    }
    case WeightFormat::f32:
      for (int i = 0; i < live; ++i) ps[i].x_f = xp;
      break;
  }
  if (blockq_use_avx512()) return blockq_run_avx512(f, ps, live, m, glu);
  run_format(f, ps, live, m, glu);
}

void linear_blockq_kernel(KernelContext& k) { run_linear(k, 1, k.num_inputs() > 2, false); }

void linear_blockq_multi_kernel(KernelContext& k) {
  const int count = static_cast<int>(k.attrs.i("count"));
  run_linear(k, count, k.num_inputs() > 1 + count, !k.attrs.s("epilogue").empty());
}

// ---- embed -------------------------------------------------------------------------------------------------------

// One table row of K values to f32 (exact: d * q fits f32's mantissa).
void dequantize_row(WeightFormat f, const uint8_t* src, float* dst, int64_t k) {
  switch (f) {
    case WeightFormat::f32: std::memcpy(dst, src, static_cast<size_t>(k) * sizeof(float)); return;
    case WeightFormat::f16: {
      int64_t i = 0;
      for (; i + 8 <= k; i += 8) _mm256_storeu_ps(dst + i, load8<WeightFormat::f16>(src + 2 * i));
      for (; i < k; ++i) dst[i] = load1<WeightFormat::f16>(src + 2 * i);
      return;
    }
    case WeightFormat::bf16: {
      int64_t i = 0;
      for (; i + 8 <= k; i += 8) _mm256_storeu_ps(dst + i, load8<WeightFormat::bf16>(src + 2 * i));
      for (; i < k; ++i) dst[i] = load1<WeightFormat::bf16>(src + 2 * i);
      return;
    }
    case WeightFormat::q8_0:
    case WeightFormat::q4_0: {
      const int64_t bb = f == WeightFormat::q8_0 ? llm_ops::q8_0_block_bytes : llm_ops::q4_0_block_bytes;
      for (int64_t b = 0; b < k / qk; ++b) {
        const uint8_t* blk = src + b * bb;
        const __m256i v = f == WeightFormat::q8_0 ? load_block<WeightFormat::q8_0>(blk) : load_block<WeightFormat::q4_0>(blk);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(load_u16(blk)));
        const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int i = 0; i < 4; ++i)
          _mm256_storeu_ps(dst + b * qk + 8 * i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[i]))));
      }
      return;
    }
  }
}

void embed_blockq_kernel(KernelContext& k) {
  const WeightFormat f = format_of(k);
  const Tensor& w = k.in(0);
  const Tensor& ids = k.in(1);
  const int64_t v = w.dim(0);
  const int64_t kk = k.out(0).dim(-1);
  const int64_t w_row = llm_ops::row_bytes(f, kk);
  const int64_t count = ids.numel();
  const bool i64 = ids.dtype() == DType::i64;
  auto id_at = [&](int64_t i) -> int64_t { return i64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i]; };
  // All ids are checked before any work, so an error leaves no half-written output behind a thread.
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = id_at(i);
    SPORE_CHECK(id >= 0 && id < v, ErrorCode::invalid_argument,
                "embed_blockq: id {} at index {} is out of range for a table of {} rows", id, i, v);
  }
  const auto* wp = static_cast<const uint8_t*>(w.raw_data());
  float* y = k.out(0).data<float>();
  constexpr int64_t grain = 16;
  parallel_for(num_chunks(count, grain), [&](int64_t t) {
    for (int64_t i = t * grain; i < std::min(count, (t + 1) * grain); ++i)
      dequantize_row(f, wp + id_at(i) * w_row, y + i * kk, kk);
  });
}

}  // namespace

void blockq_silu_mul(float* g, const float* u, int64_t n) {
  unary_f32(UnaryOp::silu, g, g, static_cast<size_t>(n), {});
  for (int64_t i = 0; i < n; ++i) g[i] *= u[i];
}

bool blockq_use_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  if (!has) return false;
  const char* isa = std::getenv("SPORE_BLOCKQ_ISA");
  return isa == nullptr || std::string_view(isa) != "avx2";
}

void register_blockq(KernelRegistry& r) {
  r.add(Backend::cpu, "linear_blockq"_op, DTypeSet{DType::f32}, linear_blockq_kernel, "avx2");
  r.add(Backend::cpu, "linear_blockq_multi"_op, DTypeSet{DType::f32}, linear_blockq_multi_kernel, "avx2");
  r.add(Backend::cpu, "embed_blockq"_op, DTypeSet{DType::f32, DType::f16, DType::bf16, DType::u8},
        embed_blockq_kernel, "avx2");
}

}  // namespace spore::cpu
