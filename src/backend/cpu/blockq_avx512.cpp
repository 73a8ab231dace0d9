// linear_blockq's tiles built for AVX-512 (F, BW, VL) + AVX512-VNNI: blockq_tiles.inc inside `#pragma GCC target`,
// chosen at run time by blockq.cpp (blockq_use_avx512). Every header is included before the pragma, so only the
// functions defined here (in this file's unnamed namespace) are built for that ISA; nothing shared with other
// translation units (inline functions, template instances of headers) can pick up AVX-512 code that would fault
// on an AVX2-only CPU.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/blockq.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "ops/llm_ops.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
// GCC 12's own _mm512_setzero_ps / _mm512_broadcast_f32x8 read an uninitialized variable by design (a known false
// positive of -Wuninitialized inside its headers).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define SPORE_BLOCKQ_AVX512 1

namespace spore::cpu {
namespace {

using llm_ops::WeightFormat;
using llm_ops::qk;

#include "backend/cpu/blockq_tiles.inc"

}  // namespace

void blockq_run_avx512(WeightFormat f, const BlockqProblem* problems, int count, int64_t m, bool glu) {
  BlockqProblem ps[kBlockqMaxProblems];
  std::copy(problems, problems + count, ps);
  const BlockqProblem& p = ps[0];
  // Float formats from 2 rows on: x_f's rows interleaved in pairs for tile_f_pairs (this thread's scratch, kept
  // between calls; the workers only read it during this call). An odd last row pairs with a copy of itself.
  thread_local std::vector<float> pairs;
  const bool fl = f == WeightFormat::f32 || f == WeightFormat::f16 || f == WeightFormat::bf16;
  const int64_t k8 = p.k / 8 * 8;
  if (fl && m >= 2 && k8 > 0) {
    const int64_t np = (m + 1) / 2;
    if (pairs.size() < static_cast<size_t>(np * 2 * k8)) pairs.resize(static_cast<size_t>(np * 2 * k8));
    float* dst = pairs.data();
    const float* x = p.x_f;
    const int64_t k = p.k;
    parallel_for(num_chunks(np, 8), [&](int64_t t) {
      for (int64_t j = t * 8; j < std::min(np, (t + 1) * 8); ++j) {
        const float* a = x + 2 * j * k;
        const float* b = 2 * j + 1 < m ? a + k : a;
        float* d = dst + j * 2 * k8;
        for (int64_t i = 0; i < k8; i += 8) {
          _mm256_storeu_ps(d + 2 * i, _mm256_loadu_ps(a + i));
          _mm256_storeu_ps(d + 2 * i + 8, _mm256_loadu_ps(b + i));
        }
      }
    });
    for (int i = 0; i < count; ++i) ps[i].x_pairs = dst;
  }
  run_format(f, ps, count, m, glu);
}

}  // namespace spore::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options
