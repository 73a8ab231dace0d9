// gemm_bf16.h: ISA check, weight panels (kept for plan constants) and tasks; the tiles are gemm_bf16_avx512.cpp.
#include "backend/cpu/gemm_bf16.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/constant_cache.h"
#include "backend/cpu/onednn_util.h"
#include "base/thread_pool.h"
#include "tensor/storage.h"

namespace spore::cpu {

bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return has;
}

bool gemm_bf16_enabled() {
  if (!cpu_has_avx512_bf16() || portable_numerics()) return false;
  const char* e = std::getenv("SPORE_GEMM_BF16");
  return !(e && std::string_view(e) == "0");
}

namespace {

// wp[p][q][c][h] = w[p*32 + c][2q + h] (w_kn: w[2q + h][p*32 + c]), 0 past K and N.
void pack_panels_bf16(int64_t k, int64_t n, const uint16_t* w, bool w_kn, uint16_t* wp, bool parallel) {
  constexpr int64_t nr = detail::kBf16NR;
  const int64_t panels = (n + nr - 1) / nr, pairs = (k + 1) / 2;
  const auto panel = [&](int64_t p) {
    uint16_t* dst = wp + p * pairs * nr * 2;
    const int64_t cols = std::min(nr, n - p * nr);
    for (int64_t q = 0; q < pairs; ++q, dst += nr * 2) {
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t kk = 2 * q + h;
        if (kk >= k) {
          for (int64_t c = 0; c < nr; ++c) dst[2 * c + h] = 0;
          continue;
        }
        if (w_kn) {
          const uint16_t* src = w + kk * n + p * nr;
          for (int64_t c = 0; c < cols; ++c) dst[2 * c + h] = src[c];
        } else {
          for (int64_t c = 0; c < cols; ++c) dst[2 * c + h] = w[(p * nr + c) * k + kk];
        }
        for (int64_t c = cols; c < nr; ++c) dst[2 * c + h] = 0;
      }
    }
  };
  if (parallel) return parallel_for(panels, panel);
  for (int64_t p = 0; p < panels; ++p) panel(p);
}

}  // namespace

void gemm_bf16(int64_t m, int64_t k, int64_t n, const uint16_t* x, const uint16_t* w, bool w_kn, const float* bias,
               uint16_t* y, const std::shared_ptr<Storage>& weights_owner, bool parallel) {
  if (m <= 0 || n <= 0) return;
  constexpr int64_t nr = detail::kBf16NR, mr = 12;
  const int64_t panels = (n + nr - 1) / nr, pairs = (std::max<int64_t>(k, 1) + 1) / 2;
  const size_t bf16s = static_cast<size_t>(panels * pairs * nr * 2);
  // The packed panels as floats (derived_floats' unit): two bf16 per float.
  const std::string key = weights_owner ? fmt::format("gemm_bf16:{}x{}:{}", n, k, w_kn ? "kn" : "nk") : std::string();
  std::shared_ptr<Storage> kept;
  std::vector<float> local;
  const float* buf = derived_floats(
      weights_owner, w, key, (bf16s + 1) / 2,
      [&](float* b) { pack_panels_bf16(k, n, w, w_kn, reinterpret_cast<uint16_t*>(b), parallel); }, kept, local);
  const detail::GemmBf16Job job{m, k, n, x, reinterpret_cast<const uint16_t*>(buf), bias, y};
  // Tasks as gemm_linear's: row blocks of whole tiles (about 8 per call when M allows), each over a group of panels
  // whose packed weights fit L2 (~256 KB); never a split of K.
  const int64_t rows_per = std::max(mr, num_chunks(num_chunks(m, 8), mr) * mr);
  const int64_t row_blocks = num_chunks(m, rows_per);
  const int64_t panels_per = std::max<int64_t>(1, (int64_t{256} << 10) / (pairs * nr * 2 * 2));
  const int64_t panel_groups = num_chunks(panels, panels_per);
  const auto task = [&](int64_t t) {
    const int64_t rb = t / panel_groups, pg = t % panel_groups;
    const int64_t r0 = rb * rows_per, r1 = std::min(m, r0 + rows_per);
    const int64_t p0 = pg * panels_per, p1 = std::min(panels, p0 + panels_per);
    detail::gemm_bf16_rows_avx512(job, r0, r1, p0, p1);
  };
  if (parallel) return parallel_for(row_blocks * panel_groups, task);
  for (int64_t t = 0; t < row_blocks * panel_groups; ++t) task(t);
}

}  // namespace spore::cpu
