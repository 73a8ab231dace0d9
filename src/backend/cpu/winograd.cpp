// Winograd F(2x2, 3x3) on nChw8c (winograd.h); F(4x4, 3x3) is the same scheme with 6x6 windows and 36 planes
// (its transforms in winograd_f4.inc, built for 8 and 16 channels per vector: Lavin & Gray's points 0, +-1,
// +-2). Notation of Lavin & Gray 2015: an output tile Y (2x2) of one output channel is
// A^T [ sum_c (G g_c G^T) ⊙ (B^T d_c B) ] A, where d_c is the 4x4 input window of the tile in channel c and g_c
// the 3x3 filter. With U = G g G^T and V = B^T d B (16 numbers each), the sum over c is 16
// independent GEMMs M_k[tiles, O] = V_k[tiles, C] * U_k[C, O], k = 0..15.
//
// Work: the tiles of the whole batch (image-major, then tile row, then tile column) are cut into blocks of T
// tiles, one task per block. A task transforms its tiles' input into V[16][T][C] (its own L2-sized scratch),
// then for each 16-channel slice of U (16 x C x 16 floats, in L2 across the block) and each group of 12 tiles
// runs the 16 GEMMs with a register-blocked micro-kernel (12 tiles x 16 channels in zmm where the CPU has
// AVX-512, else two 6 x 16 calls in ymm; the tile's value is broadcast, U's row loaded) into M[16][12][16] (L1),
// and turns M into the 2x2 outputs right away (output transform + bias), so M never leaves L1. U is computed
// once per plan constant (constant_cache.h) and per call for weights that are not (eager mode, training).
// conv2d_fused's epilogue (residual add, activation) runs in the F(4x4) output transform's registers where it is
// a residual and/or relu (store_epilogue.h), else on each task's output right after the task (still in cache).
//
// Threads: the tasks run on the OpenMP team that runs oneDNN (run_onednn_tasks), not on spore's pool. In a conv
// chain these convs alternate with oneDNN ones (strided, 1x1, the stem) whose OpenMP workers keep spinning for a
// while after each region; pool workers competing with them for the cores made the ResNet bench at 2 threads much
// slower than running on the team.
//
// Determinism and batch invariance by construction: an element of M_k is the sum, left to right, of FMA chains
// over groups of 16 channels in c order (kWinoGroup), computed the same way by every micro-kernel variant (any tile count, 16 or 8 channels, AVX2 or
// AVX-512); the transforms are fixed formulas of one tile's window (zero outside the image), and a window's
// values never depend on other images. So which tiles share a block, a micro-kernel call or a thread changes no
// bits, and the block size T may depend on the batch size and thread count (it does: for load balance).
#include "backend/cpu/winograd.h"

#include "backend/cpu/transpose8.h"

#include <algorithm>
#include <cstdlib>

#include <immintrin.h>

#include "backend/cpu/constant_cache.h"
#include "backend/cpu/onednn_util.h"
#include "backend/cpu/winograd_f4.h"
#include "base/error.h"
#include "base/thread_pool.h"

namespace spore::cpu {
namespace detail {
namespace {
#define SPORE_WG_LANES 8
#define SPORE_WG_INPUT winograd_f4_input_avx2
#define SPORE_WG_OUTPUT winograd_f4_output_avx2
#include "backend/cpu/winograd_f4.inc"
#undef SPORE_WG_OUTPUT
#undef SPORE_WG_INPUT
#undef SPORE_WG_LANES
}  // namespace
}  // namespace detail

namespace {

constexpr int kMR = detail::kWinogradMR;  // tiles per group: one AVX-512 micro-kernel call, two AVX2 ones (6 each)
constexpr int kNR = detail::kWinogradNR;  // output channels per micro-kernel call (two ymm, one zmm)
// V and U hold 16 or 36 planes (one per k) used side by side, kPlanePad floats apart (winograd_f4.h).
constexpr int64_t kPlanePad = detail::kWinogradPlanePad;
// Input channels per summation group of the transformed-domain GEMMs. One FMA chain over all C had ~1.5x (C = 64)
// to 2.5x (C = 256) the f32 error against float64 of ORT's conv on resnet layers (M's values are large against
// the outputs A^T M A makes of them, so their rounding dominates); groups of 16 summed left to right bring it to
// ORT's (measured per layer: bench note in docs/PERFORMANCE.md, session 24).
constexpr int64_t kWinoGroup = 16;

// A per-thread buffer of floats, 64-byte aligned, grown on demand and kept between calls (a fresh
// allocation per call would page-fault on every run).
float* scratch(int slot, size_t count) {
  struct Buf {
    float* p = nullptr;
    size_t n = 0;
    ~Buf() { std::free(p); }
  };
  thread_local Buf bufs[4];
  Buf& b = bufs[slot];
  if (b.n < count) {
    std::free(b.p);
    b.n = 0;
    b.p = static_cast<float*>(std::aligned_alloc(64, (count * sizeof(float) + 63) / 64 * 64));
    SPORE_CHECK(b.p != nullptr, ErrorCode::out_of_memory, "winograd conv: cannot allocate {} bytes of scratch",
                count * sizeof(float));
    b.n = count;
  }
  return b.p;
}

// Runs fn(0 .. tasks-1) on the OpenMP team (see the top), or on the calling thread when `serial`.
template <typename Fn>
void run_tasks(bool serial, int64_t tasks, const Fn& fn) {
  if (!serial) return run_onednn_tasks(tasks, fn);  // blocks of tiles in image order
  for (int64_t t = 0; t < tasks; ++t) fn(t);
}

// Runs per_channel(g, dst) for every 8-output-channel group and input channel c of w [O, C, 3, 3]: g points at
// the 9 taps of (group, c), 8 lanes each (g[k * 8 + lane] = w[o + lane, c, k]), dst at the group's place in a U
// plane (planes kPlanePad apart as the transforms store them: plane p starts at p * (O * C + kPlanePad)).
// One task per 16-channel slice, not per group of 8: the two groups of a slice write the two halves of the same
// cache lines, and splitting them between threads made the lines bounce between the cores.
template <typename PerChannel>
void for_each_weight_group(const float* w, int64_t C, int64_t O, float* U, bool serial, const PerChannel& per_channel) {
  const int64_t groups = O / 8;
  const int64_t slices = (O + kNR - 1) / kNR;
  run_tasks(serial, slices, [&](int64_t slice) {
    for (int64_t grp = slice * (kNR / 8); grp < std::min(groups, (slice + 1) * (kNR / 8)); ++grp) {
      const int64_t o = grp * 8, o0 = o / kNR * kNR, width = std::min<int64_t>(kNR, O - o0), oo = o - o0;
      // The group's 8 rows of w (C*9 floats each, a multiple of 8) transposed by 8x8 blocks: wt[c*9 + k][lane] =
      // w[o + lane, c, k]. Gathering the 8 lanes per (c, k) instead took ~15% of the batch-1 ResNet.
      float* wt = scratch(3, static_cast<size_t>(C * 9 * 8));
      for (int64_t q = 0; q < C * 9; q += 8) {
        __m256 r[8];
        for (int l = 0; l < 8; ++l) r[l] = _mm256_loadu_ps(w + (o + l) * C * 9 + q);
        transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_store_ps(wt + (q + i) * 8, r[i]);
      }
      for (int64_t c = 0; c < C; ++c) per_channel(wt + c * 72, U + o0 * C + c * width + oo);
    }
  });
}

// U[k][c][o] = (G g G^T)_k for g = w[o, c], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1], stored per 16-channel
// slice: slice s (channels 16s.. < O) of U_k starts at k*(O*C + kPlanePad) + 16s*C and holds [C][width],
// width = 16 or the last slice's 8. Eight output channels per vector (transposed from w's [O, C, 3, 3]), so each
// U row segment is one aligned store; the halvings are exact and the sums run in one fixed order.
void transform_weights(const float* w, int64_t C, int64_t O, float* U, bool serial) {
  const __m256 half = _mm256_set1_ps(0.5f);
  for_each_weight_group(w, C, O, U, serial, [&](const float* g, float* dst) {
    __m256 t[4][3];  // G g
    for (int j = 0; j < 3; ++j) {
      const __m256 a = _mm256_load_ps(g + j * 8), b = _mm256_load_ps(g + (3 + j) * 8), d = _mm256_load_ps(g + (6 + j) * 8);
      const __m256 ad = _mm256_add_ps(a, d);
      t[0][j] = a;
      t[1][j] = _mm256_mul_ps(half, _mm256_add_ps(ad, b));
      t[2][j] = _mm256_mul_ps(half, _mm256_sub_ps(ad, b));
      t[3][j] = d;
    }
    for (int i = 0; i < 4; ++i) {  // (G g) G^T
      const __m256 a = t[i][0], b = t[i][1], d = t[i][2], ad = _mm256_add_ps(a, d);
      const __m256 u[4] = {a, _mm256_mul_ps(half, _mm256_add_ps(ad, b)), _mm256_mul_ps(half, _mm256_sub_ps(ad, b)), d};
      for (int j = 0; j < 4; ++j) _mm256_store_ps(dst + (i * 4 + j) * (O * C + kPlanePad), u[j]);
    }
  });
}

// U for F(4x4, 3x3): 36 planes, U = G g G^T with G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6;
// 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1] (Lavin & Gray's points 0, +-1, +-2), same layout and tasks as above.
void transform_weights_f4(const float* w, int64_t C, int64_t O, float* U, bool serial) {
  const __m256 q4 = _mm256_set1_ps(0.25f), m6 = _mm256_set1_ps(-1.0f / 6.0f), p6 = _mm256_set1_ps(1.0f / 6.0f),
               p12 = _mm256_set1_ps(1.0f / 12.0f), p24 = _mm256_set1_ps(1.0f / 24.0f);
  // G applied to three vectors (a column or a row of the 3x3 filter): six results.
  const auto gmul = [&](__m256 a, __m256 b, __m256 d, __m256* r) {
    const __m256 ad = _mm256_add_ps(a, d), a24 = _mm256_fmadd_ps(d, p6, _mm256_mul_ps(a, p24)), b12 = _mm256_mul_ps(b, p12);
    r[0] = _mm256_mul_ps(a, q4);
    r[1] = _mm256_mul_ps(_mm256_add_ps(ad, b), m6);
    r[2] = _mm256_mul_ps(_mm256_sub_ps(ad, b), m6);
    r[3] = _mm256_add_ps(a24, b12);
    r[4] = _mm256_sub_ps(a24, b12);
    r[5] = d;
  };
  for_each_weight_group(w, C, O, U, serial, [&](const float* g, float* dst) {
    __m256 t[3][6];  // (G g) by filter column j: t[j][i]
    for (int j = 0; j < 3; ++j)
      gmul(_mm256_load_ps(g + j * 8), _mm256_load_ps(g + (3 + j) * 8), _mm256_load_ps(g + (6 + j) * 8), t[j]);
    for (int i = 0; i < 6; ++i) {  // (G g) G^T
      __m256 u[6];
      gmul(t[0][i], t[1][i], t[2][i], u);
      for (int j = 0; j < 6; ++j) _mm256_store_ps(dst + (i * 6 + j) * (O * C + kPlanePad), u[j]);
    }
  });
}

// m[i][0..NB*8) = sum_{c < C} v[i*C + c] * u[c*NB*8 + ..] for i < MR, in summation groups of kWinoGroup channels
// (winograd_group_sum): each group one FMA chain from +0 in c order, the group sums added left to right (here
// through m, which stays in L1: the 16 AVX2 registers hold the 12 accumulators and the operands only).
// Named accumulators (not an array): GCC spilled an array of them to the stack on every iteration.
template <int MR, int NB>
void gemm_kernel(const float* __restrict v, int64_t C, const float* __restrict u, float* __restrict m) {
  for (int64_t c0 = 0; c0 < C; c0 += kWinoGroup) {
    const int64_t c1 = std::min(C, c0 + kWinoGroup);
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00;
    __m256 a30 = a00, a31 = a00, a40 = a00, a41 = a00, a50 = a00, a51 = a00;
    const float *v0 = v, *v1 = v + C, *v2 = v + 2 * C, *v3 = v + 3 * C, *v4 = v + 4 * C, *v5 = v + 5 * C;
    const float* uc = u + c0 * NB * 8;
    for (int64_t c = c0; c < c1; ++c, uc += NB * 8) {
      const __m256 b0 = _mm256_load_ps(uc), b1 = NB > 1 ? _mm256_load_ps(uc + 8) : b0;
#define SPORE_WINO_ROW(i)                                 \
  if constexpr (MR > i) {                                 \
    const __m256 a = _mm256_broadcast_ss(v##i + c);       \
    a##i##0 = _mm256_fmadd_ps(a, b0, a##i##0);            \
    if constexpr (NB > 1) a##i##1 = _mm256_fmadd_ps(a, b1, a##i##1); \
  }
      SPORE_WINO_ROW(0)
      SPORE_WINO_ROW(1)
      SPORE_WINO_ROW(2)
      SPORE_WINO_ROW(3)
      SPORE_WINO_ROW(4)
      SPORE_WINO_ROW(5)
#undef SPORE_WINO_ROW
    }
    const __m256 acc[6][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}, {a40, a41}, {a50, a51}};
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NB; ++j) {
        float* mp = m + i * kNR + j * 8;
        _mm256_store_ps(mp, c0 == 0 ? acc[i][j] : _mm256_add_ps(_mm256_load_ps(mp), acc[i][j]));
      }
  }
}

using GemmFn = void (*)(const float*, int64_t, const float*, float*);
template <int NB>
constexpr GemmFn kGemm[7] = {nullptr,
                             gemm_kernel<1, NB>,
                             gemm_kernel<2, NB>,
                             gemm_kernel<3, NB>,
                             gemm_kernel<4, NB>,
                             gemm_kernel<5, NB>,
                             gemm_kernel<6, NB>};

// The same products with AVX-512 (zmm: 16 channels per register, the tile's value an embedded broadcast), up
// to 12 tiles per call. Each element is the same group sums added in the same order, so the bits equal the AVX2
// kernel's: the ISA changes speed, not results.
template <int MR>
__attribute__((target("avx512f"))) void gemm_kernel_512(const float* __restrict v, int64_t C,
                                                          const float* __restrict u, float* __restrict m,
                                                          const float* next_u) {
  __m512 tot[MR];  // the group sums so far (32 registers: 12 of them, 12 accumulators, U's row)
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) tot[i] = _mm512_setzero_ps();  // set by the first group; zeroed for the compiler
  for (int64_t c0 = 0; c0 < C; c0 += kWinoGroup) {
    const int64_t c1 = std::min(C, c0 + kWinoGroup);
    __m512 acc[MR];
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t c = c0; c < c1; ++c) {
      _mm_prefetch(reinterpret_cast<const char*>(next_u + c * kNR), _MM_HINT_T0);
      const __m512 b = _mm512_load_ps(u + c * kNR);
#pragma GCC unroll 12
      for (int i = 0; i < MR; ++i) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(v[i * C + c]), b, acc[i]);
    }
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) tot[i] = c0 == 0 ? acc[i] : _mm512_add_ps(tot[i], acc[i]);
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) _mm512_store_ps(m + i * kNR, tot[i]);
}

using Gemm512Fn = void (*)(const float*, int64_t, const float*, float*, const float*);
constexpr Gemm512Fn kGemm512[kMR + 1] = {nullptr,
                                      gemm_kernel_512<1>,
                                      gemm_kernel_512<2>,
                                      gemm_kernel_512<3>,
                                      gemm_kernel_512<4>,
                                      gemm_kernel_512<5>,
                                      gemm_kernel_512<6>,
                                      gemm_kernel_512<7>,
                                      gemm_kernel_512<8>,
                                      gemm_kernel_512<9>,
                                      gemm_kernel_512<10>,
                                      gemm_kernel_512<11>,
                                      gemm_kernel_512<12>};

// AVX-512 for the 16-channel slices where the CPU has it; SPORE_WINOGRAD_AVX512=0 forces AVX2 (read per call,
// so a test can compare the two).
bool use_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  const char* e = std::getenv("SPORE_WINOGRAD_AVX512");
  return has && !(e && e[0] == '0' && e[1] == 0);
}

struct Plan {
  const WinogradConv& g;
  int64_t tiles_h, tiles_w, tiles_per_image;
  int64_t block;  // tiles per task (T)
  int m = 2;       // output tile size: F(2x2, 3x3) or F(4x4, 3x3)
  int planes = 16;  // (m + 2)^2
};

// Column ix of a tile's N-row input window from iy0 in one nChw8c plane (8 channels per vector), zeros outside the
// image; rows_inside: all N rows are inside (no per-row check).
template <int N>
inline void load_column(const WinogradConv& g, const float* plane, int64_t iy0, int64_t ix, bool rows_inside,
                        __m256* d) {
  if (ix < 0 || ix >= g.w) {
    for (int i = 0; i < N; ++i) d[i] = _mm256_setzero_ps();
  } else if (rows_inside) {
    for (int i = 0; i < N; ++i) d[i] = _mm256_loadu_ps(plane + ((iy0 + i) * g.w + ix) * 8);
  } else {
    for (int i = 0; i < N; ++i) {
      const int64_t iy = iy0 + i;
      d[i] = iy >= 0 && iy < g.h ? _mm256_loadu_ps(plane + (iy * g.w + ix) * 8) : _mm256_setzero_ps();
    }
  }
}

// V[k][t][C] (planes k padded by kPlanePad) for tiles first .. first+count-1: V = B^T d B,
// B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], eight channels (one nChw8c pixel) per vector. Channel block
// outermost, so the input is read as 4 row streams per block (tile-major order across all C/8 planes missed in
// cache on every load). B^T d works column by column, and a tile's columns 0, 1 are its left neighbour's 2, 3:
// they are reused when the previous tile of the block is that neighbour. A column's values are the same
// arithmetic on the same pixels whichever tile computes them, so reuse changes no bits.
void transform_input(const Plan& p, const float* x, int64_t first, int64_t count, float* V) {
  const WinogradConv& g = p.g;
  const int64_t C = g.c, vplane = count * C + kPlanePad;
  for (int64_t cb = 0; cb < C / 8; ++cb) {
    __m256 s0[4], s1[4], s2[4] = {}, s3[4] = {};  // B^T d, columns 0..3 (s2, s3 carry over to the next tile)
    for (int64_t t = 0; t < count; ++t) {
      const int64_t tile = first + t, img = tile / p.tiles_per_image, r = tile % p.tiles_per_image;
      const int64_t tx = r % p.tiles_w, iy0 = (r / p.tiles_w) * 2 - g.pad_top, ix0 = tx * 2 - g.pad_left;
      const bool rows_inside = iy0 >= 0 && iy0 + 4 <= g.h;
      const float* plane = x + (img * (C / 8) + cb) * g.h * g.w * 8;
      // B^T applied to input column j (zeros outside the image).
      const auto column = [&](int j, __m256* s) {
        __m256 d[4];
        load_column<4>(g, plane, iy0, ix0 + j, rows_inside, d);
        s[0] = _mm256_sub_ps(d[0], d[2]);
        s[1] = _mm256_add_ps(d[1], d[2]);
        s[2] = _mm256_sub_ps(d[2], d[1]);
        s[3] = _mm256_sub_ps(d[1], d[3]);
      };
      if (t > 0 && tx > 0) {  // the previous tile is the left neighbour
        for (int i = 0; i < 4; ++i) {
          s0[i] = s2[i];
          s1[i] = s3[i];
        }
      } else {
        column(0, s0);
        column(1, s1);
      }
      column(2, s2);
      column(3, s3);
      float* out = V + t * C + cb * 8;
      for (int i = 0; i < 4; ++i) {  // (B^T d) B
        _mm256_storeu_ps(out + (i * 4 + 0) * vplane, _mm256_sub_ps(s0[i], s2[i]));
        _mm256_storeu_ps(out + (i * 4 + 1) * vplane, _mm256_add_ps(s1[i], s2[i]));
        _mm256_storeu_ps(out + (i * 4 + 2) * vplane, _mm256_sub_ps(s2[i], s1[i]));
        _mm256_storeu_ps(out + (i * 4 + 3) * vplane, _mm256_sub_ps(s1[i], s3[i]));
      }
    }
  }
}

// The 2x2 outputs of `count` tiles from M[16][kMR][kNR] (output channels o0 .. o0+width-1): Y = A^T M A + bias,
// A^T = [1 1 1 0; 0 1 -1 -1]; the parts of a tile past OH/OW are dropped.
void transform_output(const Plan& p, const float* M, int64_t first, int count, int64_t o0, int64_t width,
                      const float* bias, float* y) {
  const WinogradConv& g = p.g;
  for (int t = 0; t < count; ++t) {
    const int64_t tile = first + t, img = tile / p.tiles_per_image, r = tile % p.tiles_per_image;
    const int64_t oy = (r / p.tiles_w) * 2, ox = (r % p.tiles_w) * 2;
    const bool full_h = oy + 1 < g.oh, full_w = ox + 1 < g.ow;
    for (int64_t h = 0; h < width / 8; ++h) {
      __m256 m[4][4];
      for (int k = 0; k < 16; ++k) m[k / 4][k % 4] = _mm256_load_ps(M + (k * kMR + t) * kNR + h * 8);
      __m256 s[2][4];  // A^T M
      for (int j = 0; j < 4; ++j) {
        s[0][j] = _mm256_add_ps(_mm256_add_ps(m[0][j], m[1][j]), m[2][j]);
        s[1][j] = _mm256_sub_ps(_mm256_sub_ps(m[1][j], m[2][j]), m[3][j]);
      }
      const __m256 b = bias ? _mm256_loadu_ps(bias + o0 + h * 8) : _mm256_setzero_ps();
      __m256 out[2][2];  // (A^T M) A + bias
      for (int i = 0; i < 2; ++i) {
        out[i][0] = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s[i][0], s[i][1]), s[i][2]), b);
        out[i][1] = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s[i][1], s[i][2]), s[i][3]), b);
      }
      float* plane = y + (img * (g.o / 8) + (o0 / 8 + h)) * g.oh * g.ow * 8;
      _mm256_storeu_ps(plane + (oy * g.ow + ox) * 8, out[0][0]);
      if (full_w) _mm256_storeu_ps(plane + (oy * g.ow + ox + 1) * 8, out[0][1]);
      if (full_h) {
        _mm256_storeu_ps(plane + ((oy + 1) * g.ow + ox) * 8, out[1][0]);
        if (full_w) _mm256_storeu_ps(plane + ((oy + 1) * g.ow + ox + 1) * 8, out[1][1]);
      }
    }
  }
}

// M[k][t][0..width) for the mr tiles of one group: the 16 GEMMs of one 16-channel slice (or the last 8).
void gemm_group(const float* V, int64_t count, int64_t C, const float* U, int64_t O, int64_t o0, int64_t width,
                int mr, bool avx512, int planes, float* M) {
  for (int k = 0; k < planes; ++k) {
    const float* v = V + k * (count * C + kPlanePad);
    const float* u = U + k * (O * C + kPlanePad) + o0 * C;
    float* m = M + k * kMR * kNR;
    if (avx512 && width == kNR) {
      // U's same slice of the next plane (or this one again), one line per channel ahead of its use: with few
      // tiles the GEMMs stream U (128 channels: 2.4 MB, past L2) and wait on it.
      kGemm512[mr](v, C, u, m, k + 1 < planes ? u + (O * C + kPlanePad) : u);
    } else {
      const GemmFn* gemm = width == kNR ? kGemm<2> : kGemm<1>;
      gemm[std::min(mr, 6)](v, C, u, m);
      if (mr > 6) gemm[mr - 6](v + 6 * C, C, u, m + 6 * kNR);
    }
  }
}

void run_block(const Plan& p, const float* x, const float* U, const float* bias, float* y, int64_t first,
               int64_t count, bool avx512, int64_t o_begin, int64_t o_end, const StoreEpilogue& epi) {
  const int64_t C = p.g.c, O = p.g.o;
  float* V = scratch(0, static_cast<size_t>(p.planes * (count * C + kPlanePad)));
  float* M = scratch(1, static_cast<size_t>(p.planes * kMR * kNR));
  const detail::WinogradTiles tiles{&p.g, p.tiles_w, p.tiles_per_image};
  if (p.m != 4) transform_input(p, x, first, count, V);
  else if (avx512 && C % 16 == 0) detail::winograd_f4_input_avx512(tiles, x, first, count, V);
  else detail::winograd_f4_input_avx2(tiles, x, first, count, V);
  for (int64_t o0 = o_begin; o0 < std::min(O, o_end); o0 += kNR) {
    const int64_t width = std::min<int64_t>(kNR, O - o0);
    for (int64_t t0 = 0; t0 < count; t0 += kMR) {
      const int mr = static_cast<int>(std::min<int64_t>(kMR, count - t0));
      gemm_group(V + t0 * C, count, C, U, O, o0, width, mr, avx512, p.planes, M);
      if (p.m != 4) transform_output(p, M, first + t0, mr, o0, width, bias, y);
      else if (avx512 && width == 16)
        detail::winograd_f4_output_avx512(tiles, M, first + t0, mr, o0, width, bias, y, epi);
      else detail::winograd_f4_output_avx2(tiles, M, first + t0, mr, o0, width, bias, y, epi);
    }
  }
}

// The epilogue over the outputs of tiles first .. first+count-1 (m x m each) in output blocks [ob0, ob1): per block
// plane, one range for a run of whole tile rows, one per output row for a partial tile row (a task's first or last).
void apply_epilogue(const Plan& p, int64_t first, int64_t count, int64_t ob0, int64_t ob1,
                    const std::function<void(int64_t, int64_t)>& fn) {
  const WinogradConv& g = p.g;
  const int64_t end = first + count, plane = g.oh * g.ow * 8;
  for (int64_t t = first; t < end;) {
    const int64_t img = t / p.tiles_per_image, r = t % p.tiles_per_image, ty = r / p.tiles_w, tx = r % p.tiles_w;
    const int64_t row_end = std::min(end, img * p.tiles_per_image + (ty + 1) * p.tiles_w);  // this tile row's
    const int64_t base = img * (g.o / 8) * plane;
    if (tx == 0 && row_end - t == p.tiles_w) {  // whole tile rows from ty, up to the block's or the image's end
      const int64_t rows = std::min(end - t, (p.tiles_h - ty) * p.tiles_w) / p.tiles_w;
      const int64_t oy0 = ty * p.m, oy1 = std::min(g.oh, (ty + rows) * p.m);
      for (int64_t ob = ob0; ob < ob1; ++ob) fn(base + ob * plane + oy0 * g.ow * 8, (oy1 - oy0) * g.ow * 8);
      t += rows * p.tiles_w;
    } else {
      const int64_t ox0 = tx * p.m, ox1 = std::min(g.ow, (tx + row_end - t) * p.m);
      for (int64_t ob = ob0; ob < ob1; ++ob)
        for (int64_t oy = ty * p.m; oy < std::min(g.oh, (ty + 1) * p.m); ++oy)
          fn(base + ob * plane + (oy * g.ow + ox0) * 8, (ox1 - ox0) * 8);
      t = row_end;
    }
  }
}

}  // namespace

bool winograd_qualifies(const WinogradConv& g, WinogradRule rule) {
  const bool supported = g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 &&
                         g.groups == 1 && g.c % 8 == 0 && g.o % 8 == 0 && g.c > 0 && g.o > 0 &&
                         std::min({g.pad_top, g.pad_left, g.pad_bottom, g.pad_right}) >= 0 &&
                         g.oh == g.h + g.pad_top + g.pad_bottom - 2 && g.ow == g.w + g.pad_left + g.pad_right - 2;
  if (!supported || rule == WinogradRule::supported) return supported;
  // Measured on a Zen 5 (1 thread, interleaved medians, /tmp harness calling conv2d_blocked): Winograd wins
  // wherever the per-call weight transform (16 x C x O floats written) is amortized over enough tiles, and
  // loses by up to 25% below that.
  //  - vs oneDNN capped at AVX2 (jit:avx2 on nChw8c, spore's default): 2.4-3.1x on the ResNet layers at batch
  //    32, 1.6-2.5x at batch 1; C=O=128 wins from 4 tiles (one 4x4 image); C=O=512 loses 0.84x at 16 tiles
  //    (one 7x7 image) and wins 1.3-1.9x from 49 tiles; C=O=64 loses 0.84x at 1 tile (a 2x2 image).
  //  - vs oneDNN at full AVX-512 (ONEDNN_MAX_CPU_ISA=ALL: brgconv on nhwc, plus its reorders): 1.4-1.5x at
  //    batch 32; C=O=128 ties at 16 tiles and wins from 32, 256 wins from 64; with C or O = 512, U (16 MB)
  //    fits no cache and the GEMMs stream it per block: 0.7-0.8x even at batch 32.
  // Counted per image, never per batch: which kernel a conv runs (and so its bits) must not depend on the batch
  // size, or a row of a batch would differ from the same input run alone (with the weights' transform kept for
  // plan constants, the per-call cost these thresholds amortize is mostly gone anyway).
  const int64_t tiles = ((g.oh + 1) / 2) * ((g.ow + 1) / 2), co = g.c * g.o;
  if (rule == WinogradRule::beats_onednn_avx2) return std::max(g.c, g.o) <= 512 && tiles >= 2 && tiles * 8192 > co;
  return std::max(g.c, g.o) <= 256 && tiles * 1024 > co;
}

int winograd_tile(const WinogradConv& g, int max_tile) {
  if (const char* e = std::getenv("SPORE_WINOGRAD_TILE"); e && (e[0] == '2' || e[0] == '4') && e[1] == 0)
    return e[0] - '0';
  if (max_tile < 4) return 2;
  // The tile with fewer GEMM multiplies for this output size, counting the padding tiles: F(4x4) does 36 per tile
  // of 16 outputs, F(2x2) 16 per 4 (32x32: 2304 vs 4096; 5x5: a tie, kept on F(2x2); 2x2: 36 vs 16).
  const auto tiles = [&](int64_t m) { return ((g.oh + m - 1) / m) * ((g.ow + m - 1) / m); };
  return tiles(4) * 36 < tiles(2) * 16 ? 4 : 2;
}

void winograd_conv2d_nchw8c(const WinogradConv& g, const float* x, const float* w, const float* bias, float* y,
                            const std::shared_ptr<Storage>& weights_owner,
                            const std::function<void(int64_t offset, int64_t count)>* epilogue,
                            const StoreEpilogue* fused, int max_tile) {
  SPORE_CHECK(winograd_qualifies(g, WinogradRule::supported), ErrorCode::unsupported,
              "winograd conv: needs a 3x3 kernel, stride 1, dilation 1, groups 1 and C, O multiples of 8 "
              "(got C={} O={} kernel {}x{} stride {}x{} dilation {}x{} groups {})",
              g.c, g.o, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.groups);
  if (g.n == 0 || g.oh <= 0 || g.ow <= 0) return;
  const int m = winograd_tile(g, max_tile);
  Plan p{g, (g.oh + m - 1) / m, (g.ow + m - 1) / m, 0, 0, m, (m + 2) * (m + 2)};
  p.tiles_per_image = p.tiles_h * p.tiles_w;
  const int64_t tiles = g.n * p.tiles_per_image;
  // Block size: V (planes x T x C floats) within ~384 KB so it and a 16-channel slice of U stay in L2; then as
  // many blocks as makes the thread count divide them (bits do not depend on it, see the top).
  const int64_t cap = std::max<int64_t>(kMR, 6144 * 16 / p.planes / g.c / kMR * kMR);
  // Every size runs on the thread team. Small convs (GEMMs under 32 MFLOP) used to run on the calling thread: with
  // the weights transformed per call (tasks then writing shared cache lines) the team lost at batch 1-2. With U kept
  // for plan constants the team wins there too (and ties from batch 4). `serial` stays for one-thread runs.
  const bool serial = num_threads() <= 1;
  const int64_t threads = serial ? 1 : std::max(1, num_threads());
  const int64_t blocks = (tiles + cap - 1) / cap, rounds = (blocks + threads - 1) / threads;
  // One round (every thread one block): equal blocks, not whole micro-kernel groups - at 2 threads 16 tiles split
  // 8 + 8 instead of 12 + 4 and 64 split 32 + 32 instead of 36 + 28, and the conv waits for the larger block.
  // Where U is small (each block reads all of it), up to 4 blocks of >= 8 tiles per thread, so that a thread
  // running fast takes blocks from a slow one (back-stealing): on a 2-vCPU VM one vCPU often runs the transforms
  // markedly slower than the other for a while. Where U is large, re-reading it per block costs more than stealing
  // gains, hence the 256 KB limit on U below.
  const int64_t u_bytes = p.planes * g.c * g.o * static_cast<int64_t>(sizeof(float));
  const int64_t per_thread = rounds == 1 && !serial && u_bytes <= (256 << 10)
                                 ? std::clamp<int64_t>(tiles / (threads * 8), 1, 4) : 1;
  const int64_t even = (tiles + rounds * threads * per_thread - 1) / (rounds * threads * per_thread);
  p.block = std::min(cap, rounds == 1 && !serial ? even : (even + kMR - 1) / kMR * kMR);
  // Tiles for one micro-kernel group only (batch 1 at 8x8 with F(4x4): 4 tiles): one task by tiles, so the tasks
  // split the output channels (16-channel slices) instead, each transforming the tiles' input itself (repeated,
  // a small share). Such convs are weight-bound (128 in and 128 out channels: 2.4 MB of U for 4 tiles): each thread
  // then reads half of U. Where tiles fill several groups the tile split stays: splitting channels there was
  // slower, as the next conv then reads half its input from the other core (slow cross-core cache lines on a VM).
  static const bool osplit_on = [] {
    const char* e = std::getenv("SPORE_WINOGRAD_OSPLIT");
    return !(e && e[0] == '0');
  }();
  const int64_t slices = (g.o + kNR - 1) / kNR;
  const int64_t osplit = osplit_on && !serial && tiles <= kMR ? std::min(threads, slices) : 1;
  if (osplit > 1) p.block = std::min(cap, (tiles + kMR - 1) / kMR * kMR);
  // A plan constant's U is kept for its storage (constant_cache.h); otherwise (or with no room) it is
  // transformed into this thread's scratch per call.
  const auto transform = [&](float* u) {
    if (m == 4) transform_weights_f4(w, g.c, g.o, u, serial);
    else transform_weights(w, g.c, g.o, u, serial);
  };
  const size_t ufloats = static_cast<size_t>(p.planes * (g.c * g.o + kPlanePad));
  const std::shared_ptr<Storage> kept =
      constant_derived(weights_owner, w, fmt::format("winograd_f{}x3:{}x{}", m, g.c, g.o), ufloats * sizeof(float),
                       [&](void* u) { transform(static_cast<float*>(u)); });
  float* U = kept ? static_cast<float*>(kept->data()) : nullptr;
  if (!U) {
    U = scratch(2, ufloats);  // slots 0, 1, 3: V, M, wt
    transform(U);
  }
  const bool avx512 = use_avx512();
  // The epilogue in the F(4x4) output transform's registers: a separate pass over each task's output, even in its
  // cache, took 7-17 k TSC ticks of a 32-tile task's ~75 k at 2 threads (ResNet-style, 32 channels at 32x32).
  const bool in_registers = fused != nullptr && m == 4;
  const int64_t tile_tasks = (tiles + p.block - 1) / p.block;
  run_tasks(serial, tile_tasks * osplit, [&](int64_t t) {
    const int64_t b = t / osplit, s = t % osplit, first = b * p.block, count = std::min(p.block, tiles - first);
    const int64_t o_begin = slices * s / osplit * kNR, o_end = std::min(g.o, slices * (s + 1) / osplit * kNR);
    run_block(p, x, U, bias, y, first, count, avx512, o_begin, o_end, in_registers ? *fused : StoreEpilogue{});
    if (epilogue && !in_registers) apply_epilogue(p, first, count, o_begin / 8, o_end / 8, *epilogue);
  });
}

}  // namespace spore::cpu
