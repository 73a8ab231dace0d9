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

// The build a conv (group) runs: 16 lanes with AVX-512, 8 lanes with AVX-512's 32 registers where O < 16 and the
// source is blocked (the grouped convs of a chain; an 8-channel conv from NCHW is rare enough for the AVX2 build, and
// leaving it out halves that build's code), else AVX2.
enum class DirectIsa { avx2, avx512_8, avx512 };
DirectIsa direct_isa(const DirectBlockedConv& g) {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl");
  const char* e = std::getenv("SPORE_CONV_DIRECT_ISA");
  if (!has || (e && std::string_view(e) == "avx2")) return DirectIsa::avx2;
  return g.o >= 16 ? DirectIsa::avx512 : g.plain_src ? DirectIsa::avx2 : DirectIsa::avx512_8;
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
  if (g.groups < 1 || g.c <= 0 || g.o <= 0 || g.c % g.groups != 0 || g.o % g.groups != 0) return false;
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  return (g.plain_src || cg % 8 == 0) && og % 8 == 0 && g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1 &&
         g.pad_top >= 0 && g.pad_left >= 0 && g.oh >= 1 && g.ow >= 1;
}

void direct_blocked_conv(const DirectBlockedConv& g, const float* x, const float* w, const float* bias, float* y,
                         const std::shared_ptr<Storage>& weights_owner,
                         const std::function<void(int64_t offset, int64_t count)>* epilogue,
                         const StoreEpilogue* fused) {
  // A grouped conv is `groups` convs over slices of whole channel blocks (planes for a plain source): gg is one
  // group's geometry; x, y and the residual of group q start q * C/groups (O/groups) channel planes in.
  const int64_t ng = g.groups;
  DirectBlockedConv gg = g;
  gg.c = g.c / ng;
  gg.o = g.o / ng;
  gg.groups = 1;
  const DirectIsa isa = direct_isa(gg);
  const bool wide = isa == DirectIsa::avx512;
  const int lanes = wide ? 16 : 8;
  // AVX-512 with O % 16 == 8 (the mobile nets' 24- and 40-channel projections): the last 16-lane block is half
  // used, its upper lanes zero weights and bias, so the block pair is one pass over the input (an 8-lane second
  // pass broadcast every input value again: 144 -> 24 at 56x56 took 257 us against ORT's 140). The fma sequence
  // of each stored output is the same either way.
  const int64_t o_pad = (gg.o + lanes - 1) / lanes * lanes;  // per group
  const int64_t per_channel = (gg.c + 7) / 8 * 8 * g.kh * g.kw;
  const int64_t group_floats = o_pad * per_channel;
  std::shared_ptr<Storage> kept;
  std::vector<float> local;
  const std::string key = fmt::format("direct_blocked:{}:{}x{}x{}x{}/{}", lanes, g.o, g.c, g.kh, g.kw, ng);
  const float* wp = derived_floats(
      weights_owner, w, key, static_cast<size_t>(ng * group_floats),
      [&](float* buf) {
        for (int64_t q = 0; q < ng; ++q)
          pack_weights(gg, w + q * gg.o * gg.c * g.kh * g.kw, lanes, 0, o_pad, buf + q * group_floats);
      },
      kept, local);
  std::vector<float> bias_pad;
  if (bias && o_pad > gg.o) {  // each group's bias, zero past its O/groups
    bias_pad.assign(static_cast<size_t>(ng * o_pad), 0.0f);
    for (int64_t q = 0; q < ng; ++q) std::copy(bias + q * gg.o, bias + (q + 1) * gg.o, bias_pad.begin() + q * o_pad);
  }
  const int64_t bias_step = bias_pad.empty() ? gg.o : o_pad;
  const float* const bias_all = bias_pad.empty() ? bias : bias_pad.data();
  const StoreEpilogue epi = fused ? *fused : StoreEpilogue{};
  const int64_t x_image = g.plain_src ? g.c * g.h * g.w : (g.c + 7) / 8 * 8 * g.h * g.w, y_image = g.o * g.oh * g.ow;
  const int64_t x_group = gg.c * g.h * g.w, y_group = gg.o * g.oh * g.ow;
  std::vector<detail::DirectJob> jobs;
  jobs.reserve(static_cast<size_t>(ng));
  for (int64_t q = 0; q < ng; ++q) {
    StoreEpilogue e = epi;
    if (e.residual) e.residual += q * y_group;
    jobs.push_back(detail::DirectJob{&gg, g.plain_src, x + q * x_group, wp + q * group_floats,
                                     bias_all ? bias_all + q * bias_step : nullptr, y + q * y_group, e, 0, o_pad,
                                     x_image, y_image});
  }
  if (fused) epilogue = nullptr;  // applied in the row kernels' stores
  // Tasks: (image, group, output channel chunk, row chunk); any split gives the same bits. A task reads the packed
  // weights of its channels once per row chunk (block pairs, then summation groups outermost,
  // direct_blocked_tiles.inc: a group's weight slice stays in L1 across the rows) and its image's input once per block
  // pair. Where the weights outweigh an image's input (deep convs at small sizes: resnet50's 512 -> 2048 1x1 at 7x7
  // reads 4 MB of weights for 100 KB of input) a task takes a whole image, and at batch < 4 a quarter of the channels
  // (tasks for the threads); else ~16 row chunks per image over all channels, as the chain's other convs split their
  // rows. Measured on resnet50's 7x7 layers at batch 1: rows as tasks re-read the weights per row, 65 GFLOP/s against
  // oneDNN's 150; whole images 155.
  const int64_t blocks = o_pad / lanes;  // L-lane blocks of a group
  const int64_t w_bytes = g.o * per_channel * static_cast<int64_t>(sizeof(float));
  const int64_t in_bytes = x_image * static_cast<int64_t>(sizeof(float));
  int64_t ochunks = 1, per = std::max<int64_t>(1, num_chunks(g.oh, 16));
  if (w_bytes > in_bytes) {
    ochunks = std::max<int64_t>(1, std::min(blocks / 2, num_chunks(4, g.n * ng)));
    per = g.oh;
  }
  const int64_t chunks = num_chunks(g.oh, per);
  const int64_t blocks_per = num_chunks(num_chunks(blocks, ochunks), 2) * 2;  // whole block pairs
  ochunks = std::max<int64_t>(1, num_chunks(blocks, blocks_per));
  parallel_for(
      g.n * ng * ochunks * chunks,
      [&](int64_t task) {
        const int64_t n = task / (ng * ochunks * chunks), q = task / (ochunks * chunks) % ng;
        const int64_t oc = task / chunks % ochunks, rc = task % chunks;
        const int64_t oy0 = rc * per, oy1 = std::min(g.oh, oy0 + per);
        const int64_t t_lo = oc * blocks_per, t_hi = std::min(blocks, t_lo + blocks_per);
        float* tot = group_sums(static_cast<size_t>((oy1 - oy0) * g.ow * (wide ? 4 : 2) * lanes));  // kMaxV blocks
        const detail::DirectJob& job = jobs[static_cast<size_t>(q)];
        if (wide) detail::direct_rows_avx512(job, n, oy0, oy1, t_lo, t_hi, tot);
        else if (isa == DirectIsa::avx512_8) detail::direct_rows_avx512_8(job, n, oy0, oy1, t_lo, t_hi, tot);
        else detail::direct_rows_avx2(job, n, oy0, oy1, t_lo, t_hi, tot);
        if (epilogue) {  // rows oy0 .. oy1 of the task's 8-channel output block planes of image n
          const int64_t ob_lo = q * gg.o / 8 + t_lo * lanes / 8, ob_hi = q * gg.o / 8 + std::min(gg.o / 8, t_hi * lanes / 8);
          for (int64_t ob = ob_lo; ob < ob_hi; ++ob)
            (*epilogue)(((n * (g.o / 8) + ob) * g.oh + oy0) * g.ow * 8, (oy1 - oy0) * g.ow * 8);
        }
      });  // image-major, as the chain's other convs split them
}

}  // namespace spore::cpu
