// linear_blockq's tiles built for AVX-512 (F, BW, VL) + AVX512-VNNI: blockq_tiles.inc inside `#pragma GCC target`,
// chosen at run time by blockq.cpp (blockq_use_avx512). Every header is included before the pragma, so only the
// functions defined here (in this file's unnamed namespace) are built for that ISA; nothing shared with other
// translation units (inline functions, template instances of headers) can pick up AVX-512 code that would fault
// on an AVX2-only CPU.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/blockq.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "ops/llm_ops.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

#define SPORE_BLOCKQ_AVX512 1

namespace spore::cpu {
namespace {

using llm_ops::WeightFormat;
using llm_ops::qk;

#include "backend/cpu/blockq_tiles.inc"

}  // namespace

void blockq_run_avx512(WeightFormat f, const BlockqProblem& p, int64_t m, int64_t n) {
  switch (f) {
    case WeightFormat::f32: run<WeightFormat::f32>(p, m, n); break;
    case WeightFormat::f16: run<WeightFormat::f16>(p, m, n); break;
    case WeightFormat::bf16: run<WeightFormat::bf16>(p, m, n); break;
    case WeightFormat::q8_0: run<WeightFormat::q8_0>(p, m, n); break;
    case WeightFormat::q4_0: run<WeightFormat::q4_0>(p, m, n); break;
  }
}

}  // namespace spore::cpu

#pragma GCC pop_options
