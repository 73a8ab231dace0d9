// spore's f32 GEMM for linear (gemm_linear.h): weight panels (kept for plan constants), ISA choice and tasks; the
// tiles are gemm_linear_tiles.inc, built here for AVX2 and in gemm_linear_avx512.cpp for AVX-512.
#include "backend/cpu/gemm_linear.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/constant_cache.h"
#include "base/thread_pool.h"
#include "tensor/storage.h"

namespace spore::cpu {
namespace detail {
namespace {
#define SPORE_GL_LANES 8
#define SPORE_GL_ROWS rows_impl
#include "backend/cpu/gemm_linear_tiles.inc"
#undef SPORE_GL_ROWS
#undef SPORE_GL_LANES
}  // namespace

void gemm_rows_avx2(const GemmJob& j, int64_t r0, int64_t r1, int64_t p0, int64_t p1) { rows_impl(j, r0, r1, p0, p1); }
}  // namespace detail

namespace {

bool use_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  const char* e = std::getenv("SPORE_LINEAR_GEMM");
  return has && !(e && std::string_view(e) == "avx2");
}

// Products this small (eager calls on tiny matrices) skip packing, the cache key and the pool: each output is
// computed alone in exactly the tiles' order - groups of kGemmGroupK products summed by fma from +0 in increasing k,
// the group sums added in order, then the bias - so the bits are the tiles' whatever the shape (batch invariance).
constexpr int64_t kTinyGemm = 4096;
void tiny_gemm(int64_t m, int64_t k, int64_t n, const float* x, const float* w, const float* bias, float* y,
               bool w_kn) {
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      float sum = 0.f;
      for (int64_t k0 = 0; k0 < k; k0 += kGemmGroupK) {
        const int64_t k1 = std::min(k, k0 + kGemmGroupK);
        float acc = 0.f;
        for (int64_t kk = k0; kk < k1; ++kk) acc = std::fma(x[r * k + kk], w_kn ? w[kk * n + c] : w[c * k + kk], acc);
        sum = k0 == 0 ? acc : sum + acc;
      }
      y[r * n + c] = bias ? sum + bias[c] : sum;
    }
}

// wp[p][k][c] = w[p*NR + c][k] (w_kn: w[k][p*NR + c]), 0 past N.
void pack_panels(int64_t k, int64_t n, const float* w, int64_t nr, float* wp, bool w_kn) {
  const int64_t panels = (n + nr - 1) / nr;
  parallel_for(panels, [&](int64_t p) {
    float* dst = wp + p * k * nr;
    const int64_t cols = std::min(nr, n - p * nr);
    for (int64_t kk = 0; kk < k; ++kk) {
      if (w_kn) {
        const float* src = w + kk * n + p * nr;
        for (int64_t c = 0; c < cols; ++c) dst[c] = src[c];
      } else {
        for (int64_t c = 0; c < cols; ++c) dst[c] = w[(p * nr + c) * k + kk];
      }
      for (int64_t c = cols; c < nr; ++c) dst[c] = 0.0f;
      dst += nr;
    }
  });
}

}  // namespace

int64_t gemm_panel_width() { return use_avx512() ? 32 : 16; }
int64_t gemm_panels_floats(int64_t k, int64_t n, int64_t nr) {
  return (n + nr - 1) / nr * std::max<int64_t>(k, 1) * nr;
}
void gemm_pack(int64_t k, int64_t n, const float* w, float* wp, int64_t nr) { pack_panels(k, n, w, nr, wp, false); }
void gemm_packed_rows(const detail::GemmJob& j, int64_t r0, int64_t r1, int64_t nr) {
  const int64_t panels = (j.n + nr - 1) / nr;
  if (nr == 32) detail::gemm_rows_avx512(j, r0, r1, 0, panels);
  else detail::gemm_rows_avx2(j, r0, r1, 0, panels);
}

void gemm_linear(int64_t m, int64_t k, int64_t n, const float* x, const float* w, const float* bias, float* y,
                 const std::shared_ptr<Storage>& weights_owner, bool w_kn) {
  if (m <= 0 || n <= 0) return;
  if (!weights_owner && m * n * std::max<int64_t>(k, 1) <= kTinyGemm) return tiny_gemm(m, k, n, x, w, bias, y, w_kn);
  const bool wide = use_avx512();
  const int64_t nr = wide ? 32 : 16, mr = wide ? 12 : 6, panels = (n + nr - 1) / nr;
  const size_t floats = static_cast<size_t>(panels * std::max<int64_t>(k, 1) * nr);
  std::shared_ptr<Storage> kept;
  std::vector<float> local;
  // The cache key only for constant weights (eager calls on tiny matrices paid more for formatting it than for the
  // product).
  const std::string key =
      weights_owner ? fmt::format("gemm_linear:{}:{}x{}:{}", nr, n, k, w_kn ? "kn" : "nk") : std::string();
  const float* wp = derived_floats(weights_owner, w, key, floats,
                                   [&](float* buf) { pack_panels(k, n, w, nr, buf, w_kn); }, kept, local);
  const detail::GemmJob job{m, k, n, x, wp, bias, y};
  // Tasks: row blocks of whole tiles (about 8 per call when M allows), each over a group of panels that fits L2
  // (~256 KB of packed weights); row-block major, so consecutive layers split their rows alike (TaskRanges).
  const int64_t rows_per = std::max(mr, num_chunks(num_chunks(m, 8), mr) * mr);
  const int64_t row_blocks = num_chunks(m, rows_per);
  const int64_t panels_per = std::max<int64_t>(1, (int64_t{256} << 10) / (std::max<int64_t>(k, 1) * nr * 4));
  const int64_t panel_groups = num_chunks(panels, panels_per);
  parallel_for(
      row_blocks * panel_groups,
      [&](int64_t t) {
        const int64_t rb = t / panel_groups, pg = t % panel_groups;
        const int64_t r0 = rb * rows_per, r1 = std::min(m, r0 + rows_per);
        const int64_t p0 = pg * panels_per, p1 = std::min(panels, p0 + panels_per);
        if (wide) detail::gemm_rows_avx512(job, r0, r1, p0, p1);
        else detail::gemm_rows_avx2(job, r0, r1, p0, p1);
      });
}

}  // namespace spore::cpu
