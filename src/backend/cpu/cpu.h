#pragma once
// The CPU backend: oneDNN for conv/matmul/pooling/norms where it wins, Highway SIMD (dynamic
// dispatch: AVX2 baseline, AVX-512 when present) for elementwise ops, reductions and softmax.
// Every kernel gives the same bits for any thread count (fixed-size chunks, fixed combine order).
#include <string>

#include "ops/kernel.h"

namespace spore {
void register_cpu_kernels(KernelRegistry& r);
// Applies the thread count to the libraries the backend uses (oneDNN's OpenMP runtime).
void cpu_set_num_threads(int n);
// The SIMD target Highway picked at run time ("AVX3_ZEN4", "AVX2", ...).
std::string cpu_simd_target();
// CPU ISA features ("avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni").
std::string cpu_features();
std::string onednn_version();
}  // namespace spore
