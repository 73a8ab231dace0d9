// Direct f32 convolution on nChw8c (direct_blocked.h): weight packing (kept for plan constants), ISA choice and
// tasks; the row kernels are direct_blocked_tiles.inc, built here for AVX2 and in direct_blocked_avx512.cpp.
#include "backend/cpu/direct_blocked.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/constant_cache.h"
#include "base/thread_pool.h"
#include "tensor/storage.h"

namespace spore::cpu {
namespace detail {
namespace {
#define SPORE_DB_LANES 8
#define SPORE_DB_ROWS rows_impl
#include "backend/cpu/direct_blocked_tiles.inc"
#undef SPORE_DB_ROWS
#undef SPORE_DB_LANES
}  // namespace

void direct_rows_avx2(const DirectJob& j, int64_t n, int64_t oy0, int64_t oy1, int64_t t_lo, int64_t t_hi, float* tot) {
  rows_impl(j, n, oy0, oy1, t_lo, t_hi, tot);
}
}  // namespace detail

namespace {

bool use_avx512(const DirectBlockedConv& g) {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  const char* e = std::getenv("SPORE_CONV_DIRECT_ISA");
  return has && g.o >= 16 && !(e && std::string_view(e) == "avx2");
}

// Output channels [o_begin, o_end) (multiples of L): wp[t][cb][i][j][cc][l] = w[o_begin + t*L + l][cb*8 + cc][i][j]
// (0 past C and past O).
void pack_weights(const DirectBlockedConv& g, const float* w, int lanes, int64_t o_begin, int64_t o_end, float* wp) {
  const int64_t blocks = (o_end - o_begin) / lanes, cb_n = (g.c + 7) / 8, ks = g.kh * g.kw;
  parallel_for(blocks, [&](int64_t b) {
    const int64_t t = o_begin / lanes + b;
    float* dst = wp + b * cb_n * ks * 8 * lanes;
    for (int64_t cb = 0; cb < cb_n; ++cb)
      for (int64_t k = 0; k < ks; ++k)
        for (int64_t cc = 0; cc < 8; ++cc)
          for (int64_t l = 0; l < lanes; ++l)
            *dst++ = cb * 8 + cc < g.c && t * lanes + l < g.o ? w[((t * lanes + l) * g.c + cb * 8 + cc) * ks + k] : 0.0f;
  });
}

// The calling thread's scratch for a task's running group sums, kept between calls (a fresh allocation per call
// would page-fault on every run).
float* group_sums(size_t floats) {
  thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

}  // namespace

bool direct_blocked_supported(const DirectBlockedConv& g) {
  // Taps outside the image are skipped, so any output size is safe; negative (cropping) pads are not handled.
  return g.c > 0 && g.o > 0 && (g.plain_src || g.c % 8 == 0) && g.o % 8 == 0 && g.kh >= 1 && g.kw >= 1 &&
         g.sh >= 1 && g.sw >= 1 &&
         g.pad_top >= 0 && g.pad_left >= 0 && g.oh >= 1 && g.ow >= 1;
}

void direct_blocked_conv(const DirectBlockedConv& g, const float* x, const float* w, const float* bias, float* y,
                         const std::shared_ptr<Storage>& weights_owner,
                         const std::function<void(int64_t offset, int64_t count)>* epilogue,
                         const StoreEpilogue* fused) {
  const bool wide = use_avx512(g);
  const int lanes = wide ? 16 : 8;
  // AVX-512 with O % 16 == 8 (the mobile nets' 24- and 40-channel projections): the last 16-lane block is half
  // used, its upper lanes zero weights and bias, so the block pair is one pass over the input (an 8-lane second
  // pass broadcast every input value again: 144 -> 24 at 56x56 took 257 us against ORT's 140). The fma sequence
  // of each stored output is the same either way.
  const int64_t o_pad = (g.o + lanes - 1) / lanes * lanes;
  const int64_t per_channel = (g.c + 7) / 8 * 8 * g.kh * g.kw;
  const size_t floats = static_cast<size_t>(o_pad * per_channel);
  std::shared_ptr<Storage> kept;
  std::vector<float> local;
  const std::string key = fmt::format("direct_blocked:{}:{}x{}x{}x{}", lanes, g.o, g.c, g.kh, g.kw);
  const float* wp = derived_floats(
      weights_owner, w, key, floats, [&](float* buf) { pack_weights(g, w, lanes, 0, o_pad, buf); }, kept, local);
  std::vector<float> bias_pad;
  if (bias && o_pad > g.o) {
    bias_pad.assign(bias, bias + g.o);
    bias_pad.resize(static_cast<size_t>(o_pad), 0.0f);
    bias = bias_pad.data();
  }
  const StoreEpilogue epi = fused ? *fused : StoreEpilogue{};
  const detail::DirectJob job{&g, g.plain_src, x, wp, bias, y, epi, 0, o_pad};
  if (fused) epilogue = nullptr;  // applied in the row kernels' stores
  // Tasks: (image, output channel chunk, row chunk); any split gives the same bits. A task reads the packed weights of
  // its channels once per row chunk (block pairs, then summation groups outermost, direct_blocked_tiles.inc: a group's
  // weight slice stays in L1 across the rows) and its image's input once per block pair. Where the weights outweigh an image's input (deep convs at small
  // sizes: resnet50's 512 -> 2048 1x1 at 7x7 reads 4 MB of weights for 100 KB of input) a task takes a whole image,
  // and at batch < 4 a quarter of the channels (tasks for the threads); else ~16 row chunks per image over all
  // channels, as the chain's other convs split their rows. Measured on resnet50's 7x7 layers at batch 1: rows as tasks
  // re-read the weights per row, 65 GFLOP/s against oneDNN's 150; whole images 155.
  const int64_t blocks = o_pad / lanes;  // L-lane blocks
  const int64_t w_bytes = g.o * per_channel * static_cast<int64_t>(sizeof(float));
  const int64_t in_bytes = (g.plain_src ? g.c : (g.c + 7) / 8 * 8) * g.h * g.w * static_cast<int64_t>(sizeof(float));
  int64_t ochunks = 1, per = std::max<int64_t>(1, num_chunks(g.oh, 16));
  if (w_bytes > in_bytes) {
    ochunks = std::max<int64_t>(1, std::min(blocks / 2, num_chunks(4, g.n)));
    per = g.oh;
  }
  const int64_t chunks = num_chunks(g.oh, per);
  const int64_t blocks_per = num_chunks(num_chunks(blocks, ochunks), 2) * 2;  // whole block pairs
  ochunks = std::max<int64_t>(1, num_chunks(blocks, blocks_per));
  parallel_for(
      g.n * ochunks * chunks,
      [&](int64_t task) {
        const int64_t n = task / (ochunks * chunks), oc = task / chunks % ochunks, rc = task % chunks;
        const int64_t oy0 = rc * per, oy1 = std::min(g.oh, oy0 + per);
        const int64_t t_lo = oc * blocks_per, t_hi = std::min(blocks, t_lo + blocks_per);
        float* tot = group_sums(static_cast<size_t>((oy1 - oy0) * g.ow * (wide ? 4 : 2) * lanes));  // kMaxV blocks
        if (wide) detail::direct_rows_avx512(job, n, oy0, oy1, t_lo, t_hi, tot);
        else detail::direct_rows_avx2(job, n, oy0, oy1, t_lo, t_hi, tot);
        if (epilogue) {  // rows oy0 .. oy1 of the task's 8-channel output block planes of image n
          const int64_t ob_lo = t_lo * lanes / 8, ob_hi = std::min(g.o / 8, t_hi * lanes / 8);
          for (int64_t ob = ob_lo; ob < ob_hi; ++ob)
            (*epilogue)(((n * (g.o / 8) + ob) * g.oh + oy0) * g.ow * 8, (oy1 - oy0) * g.ow * 8);
        }
      });  // image-major, as the chain's other convs split them
}

}  // namespace spore::cpu
