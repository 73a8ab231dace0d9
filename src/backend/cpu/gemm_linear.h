#pragma once
// f32 linear y[M, N] = x[M, K] @ w[N, K]^T + bias[N] as spore's own GEMM (linalg.cpp's linear and f32 matmul
// kernels, N > 16). oneDNN's sgemm gave different bits for B given as [K, N] or as [N, K]^T on AVX-512 (so an
// exported-and-reimported LSTM changed its outputs), and at the transformer encoder's sizes (K 128-512, N 128-512)
// it ran at 40 GFLOP/s (32 rows) to 95 GFLOP/s (1024 rows) on one core when capped at AVX2.
//
// Lanes are output columns: every output is its grouped sum of the k products (kGemmGroupK), then + bias - a sequence
// that depends on nothing but K, so the AVX-512 (12 rows x 32 columns per tile) and AVX2 (6 x 16) builds give the
// same bits, on any machine, for any thread count, and a row's outputs do not depend on the rest of the batch.
// w is packed into column panels [N/NR][K][NR] (kept for plan constants, constant_cache.h).
#include <cstdint>
#include <memory>

namespace spore {
class Storage;
}

namespace spore::cpu {

// Every output's K products are summed in groups of kGemmGroupK: each group from +0 by fma in increasing k, then
// the group sums left to right, then + bias (MLAS sums in K blocks too; its f32 error against float64 on the
// torchvision exports was half of a single chain's).
inline constexpr int64_t kGemmGroupK = 64;

// weights_owner: w's storage when w is a plan constant (its packed copy is then kept); null: packed per call.
// w_kn: w is [K, N] row-major (matmul's B) instead of [N, K]; the packed panels, hence the bits, are the same.
// SPORE_LINEAR_GEMM=avx2 forces the AVX2 build (tests compare the two).
void gemm_linear(int64_t m, int64_t k, int64_t n, const float* x, const float* w, const float* bias, float* y,
                 const std::shared_ptr<Storage>& weights_owner = nullptr, bool w_kn = false);

namespace detail {
struct GemmJob;
}
// For kernels that run many products with one weight (rnn_sequence's recurrent step): the panel width of the build
// gemm_linear runs (32 with AVX-512, else 16), w [N, K] packed into its panels (gemm_panels_floats floats), and rows
// [r0, r1) of a job over every panel, on the calling thread - the same tiles, hence the same bits, as gemm_linear.
// nr: the width the panels were packed with (gemm_panel_width() read once per call: it looks at the environment).
int64_t gemm_panel_width();
int64_t gemm_panels_floats(int64_t k, int64_t n, int64_t nr);
void gemm_pack(int64_t k, int64_t n, const float* w, float* wp, int64_t nr);
void gemm_packed_rows(const detail::GemmJob& j, int64_t r0, int64_t r1, int64_t nr);

namespace detail {
struct GemmJob {
  int64_t m, k, n;
  const float* x;
  const float* wp;  // panels [ceil(N/NR)][K][NR], zero past N
  const float* bias;
  float* y;
};
// Rows [r0, r1) x panels [p0, p1) of y.
void gemm_rows_avx2(const GemmJob& j, int64_t r0, int64_t r1, int64_t p0, int64_t p1);
void gemm_rows_avx512(const GemmJob& j, int64_t r0, int64_t r1, int64_t p0, int64_t p1);
}  // namespace detail

}  // namespace spore::cpu
