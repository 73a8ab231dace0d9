#pragma once
// The CPU backend: oneDNN for conv/matmul/pooling/norms where it wins, Highway SIMD (dynamic
// dispatch: AVX2 baseline, AVX-512 when present) for elementwise ops, reductions and softmax.
// Every kernel gives the same bits for any thread count (fixed-size chunks, fixed combine order).
#include <cstdint>
#include <functional>
#include <string>

#include "ops/kernel.h"

namespace spore {
void register_cpu_kernels(KernelRegistry& r);
// Applies the thread count to the libraries the backend uses (oneDNN's OpenMP runtime).
void cpu_set_num_threads(int n);
// Runs body() on the calling thread with the other threads of the team waiting for its parallel_for calls: one
// fork/join for everything body runs instead of one per parallel_for. A oneDNN primitive that body runs outside a
// parallel_for task gets one thread only (nested OpenMP), so callers keep steps that run one outside (see
// cpu_team_primitive_calls). Same results either way: kernels split work into the same tasks. Runs body() plainly
// when cpu_team_sessions() is false, inside a parallel region, or while another thread's session runs (one team
// of spinning threads per process).
void cpu_run_in_team(const std::function<void()>& body);
// Whether cpu_run_in_team uses a team: more than one thread, no more threads than CPUs (its members spin while
// waiting), OpenMP's runner installed, and SPORE_TEAM_SESSION=0 not set.
bool cpu_team_sessions();
// How many oneDNN primitives the calling thread has run so far that parallelize over the team themselves (run
// outside parallel regions with more than one thread allowed): a step that raises it wants the whole team.
int64_t cpu_team_primitive_calls();
// The SIMD target Highway picked at run time ("AVX3_ZEN4", "AVX2", ...).
std::string cpu_simd_target();
// CPU ISA features ("avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni").
std::string cpu_features();
std::string onednn_version();
}  // namespace spore
