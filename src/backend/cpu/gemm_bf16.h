#pragma once
// bf16 linear y[M, N] = x[M, K] @ w^T + bias on AVX512_BF16 (vdpbf16ps): linalg.cpp's bf16 linear and matmul (the
// AMP O2/O3 training path: forward linears, and backward's matmuls dx = dy @ W, dW = dy^T @ x), instead of widening
// the operands to f32 for the f32 GEMM (gemm_linear.h) and rounding its result.
//
// Numerics. vdpbf16ps adds to each f32 lane the products of two consecutive k (2k, 2k+1) of x and w: a bf16 x bf16
// product has 16 significant bits, so it is exact in f32, and the additions round to nearest even - like the f32
// GEMM's fma chain - but the instruction treats denormal inputs (bf16 operands and the f32 accumulator) as zero and
// flushes denormal results to zero (DAZ/FTZ, whatever MXCSR says). So products and partial sums below 2^-126
// (~1.2e-38) count as 0: a sum whose exact value is that small comes out 0 (or loses those terms); anything whose
// terms and partial sums stay normal is as accurate as the widened f32 path, with a different order. Every output
// is its K products in pairs, summed into one lane from +0 in increasing pair order within groups of
// kGemmGroupK (32 pairs; an odd K's last pair is (x[K-1], 0)), the group sums added left to right, + bias (f32),
// rounded once to bf16 (RNE, base/half.h's float_to_bf16_bits). That order depends on K alone: the bits do not depend
// on M, a row's place in the batch, the thread count (K is never split across tasks), the op (linear or matmul,
// W as [N, K] or [K, N]) or whether W is a plan constant. They differ from the widened path's, and from a CPU without
// AVX512_BF16 (which runs the widened path): SPORE_PORTABLE_NUMERICS=1 (onednn_util.h, the switch for the same bits
// across ISAs) turns this kernel off, and so does SPORE_GEMM_BF16=0 (read per call: tests, A/B runs).
#include <cstdint>
#include <memory>

namespace spore {
class Storage;
}

namespace spore::cpu {

// The CPU has AVX512_BF16 (and AVX512BW, which the kernel's packing uses).
bool cpu_has_avx512_bf16();
// gemm_bf16 is what bf16 linear and matmul run: cpu_has_avx512_bf16(), SPORE_PORTABLE_NUMERICS off and
// SPORE_GEMM_BF16 not "0".
bool gemm_bf16_enabled();

// y (bf16 bits) [M, N] = x (bf16, [M, K] row-major) @ w + bias (f32 or null); w bf16 [N, K] or, with w_kn, [K, N].
// weights_owner: w's storage when w is a plan constant (its packed copy is then kept); null: packed per call.
// parallel: split into tasks over the thread team (false: all on the calling thread, e.g. inside a task of a
// batched matmul; the same bits). Needs cpu_has_avx512_bf16().
void gemm_bf16(int64_t m, int64_t k, int64_t n, const uint16_t* x, const uint16_t* w, bool w_kn, const float* bias,
               uint16_t* y, const std::shared_ptr<Storage>& weights_owner = nullptr, bool parallel = true);

namespace detail {
inline constexpr int64_t kBf16NR = 32;  // columns per weight panel (two vectors of 16 f32 lanes)
struct GemmBf16Job {
  int64_t m, k, n;
  const uint16_t* x;
  const uint16_t* wp;  // panels [ceil(N/32)][ceil(K/2)][32][2]: column c's pair (w[c][2q], w[c][2q+1]), 0 past K/N
  const float* bias;
  uint16_t* y;
};
// Rows [r0, r1) x panels [p0, p1) of y (gemm_bf16_avx512.cpp, built for AVX512_BF16).
void gemm_bf16_rows_avx512(const GemmBf16Job& j, int64_t r0, int64_t r1, int64_t p0, int64_t p1);
}  // namespace detail

}  // namespace spore::cpu
