// bf16 linear and matmul (eager ops::linear / ops::matmul on the cpu backend): the AVX512_BF16 kernel
// (gemm_bf16.h, vdpbf16ps) against the widened path (operands to f32, the f32 GEMM, rounded once; SPORE_GEMM_BF16=0),
// in GFLOP/s (2*M*N*K per call). Shapes: square 256, 512 x 1024 x 256, and the shipped LM's (data/lm: dim 192,
// kv 64, SwiGLU 512, vocab 768) linears at batch 16 x ctx 128 = 2048 rows, forward (x @ W^T) and the weight
// gradients (dW = dy^T @ x: matmul with transpose_a, K = 2048). Run it pinned to one core:
//   taskset -c 1 build/bench/gemm_bf16_bench
// The summary after the runs gives the fastest call of each (robust on a shared machine) and native / widened.
// On a CPU without AVX512_BF16 both modes run the widened path (the summary says so).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "backend/cpu/gemm_bf16.h"
#include "base/half.h"
#include "base/rng.h"
#include "bench_util.h"
#include "ops/ops.h"

namespace {

using spore::DType;
using spore::Tensor;

Tensor random_bf16(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = Tensor::empty({rows, cols}, DType::bf16);
  auto* p = static_cast<uint16_t*>(t.raw_data());
  for (int64_t i = 0; i < rows * cols; ++i) p[i] = spore::float_to_bf16_bits(spore::philox_uniform(seed, 0, i) - 0.5f);
  return t;
}

std::map<std::string, double>& fastest() {
  static std::map<std::string, double> m;
  return m;
}

// range(0): 0 native, 1 widened; range(1): 0 linear y = x @ W^T, 1 weight gradient matmul(a, b, transpose_a),
// 2 attention scores matmul(q [32, M, K], k [32, N, K], transpose_b) (the LM's 16 sequences x 2 kv heads);
// range(2..4) = M, K, N of the (per-batch) product.
void BM_gemm_bf16(benchmark::State& state) {
  const bool widened = state.range(0) == 1, grad = state.range(1) == 1, attn = state.range(1) == 2;
  const int64_t m = state.range(2), k = state.range(3), n = state.range(4);
  spore::set_threads(1);
  if (widened) setenv("SPORE_GEMM_BF16", "0", 1);
  else unsetenv("SPORE_GEMM_BF16");
  // linear: x [M, K], W [N, K]; gradient: a = x [K, M] (the batch rows are K), b = dy [K, N]
  const int64_t batch = attn ? 32 : 1;
  Tensor a = grad ? random_bf16(k, m, 1) : random_bf16(batch * m, k, 1);
  Tensor b = grad ? random_bf16(k, n, 2) : random_bf16(batch * n, k, 2);
  if (attn) {
    a = spore::ops::reshape(a, {batch, m, k});
    b = spore::ops::reshape(b, {batch, n, k});
  }
  const std::string key = fmt::format("{} M={:<5} K={:<5} N={:<5}",
                                      grad   ? "dW     "
                                      : attn ? "QK^T x32"
                                             : "forward",
                                      m, k, n);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor y = grad   ? spore::ops::matmul(a, b, /*transpose_a=*/true)
               : attn ? spore::ops::matmul(a, b, false, /*transpose_b=*/true)
                      : spore::ops::linear(a, b);
    benchmark::DoNotOptimize(y.raw_data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto [it, fresh] = fastest().emplace(key + (widened ? "|w" : "|n"), s);
    if (!fresh) it->second = std::min(it->second, s);
  }
  unsetenv("SPORE_GEMM_BF16");
  state.SetLabel(widened ? "widened" : "avx512_bf16");
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(batch * m * n * k) / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void shapes(benchmark::internal::Benchmark* b) {
  struct S {
    int grad;
    int64_t m, k, n;
  };
  const S list[] = {{0, 256, 256, 256},  {0, 512, 1024, 256}, {0, 2048, 192, 192}, {0, 2048, 192, 64},
                    {0, 2048, 192, 512}, {0, 2048, 512, 192}, {0, 2048, 192, 768}, {1, 192, 2048, 192},
                    {1, 192, 2048, 512}, {1, 512, 2048, 192}, {2, 384, 32, 128}};
  for (const S& s : list)
    for (int mode : {0, 1}) b->Args({mode, s.grad, s.m, s.k, s.n});
}
BENCHMARK(BM_gemm_bf16)->Apply(shapes)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  spore::init();
  spore::bench::Results rep;
  if (!spore::bench::run_benchmarks(argc, argv, rep)) return 1;
  std::fprintf(rep.out, "\n");
  spore::bench::print_machine_line(rep.out);
  std::fprintf(rep.out, "bf16 GEMM, 1 thread, fastest call (%s):\n",
               spore::cpu::gemm_bf16_enabled() ? "native = AVX512_BF16 kernel"
                                               : "no AVX512_BF16 here: both rows are the widened path");
  for (const auto& [k, sec] : fastest()) {
    if (k.back() != 'n') continue;
    const std::string base = k.substr(0, k.size() - 2);
    auto w = fastest().find(base + "|w");
    long long m = 0, kk = 0, n = 0;
    std::sscanf(base.c_str() + base.find("M="), "M=%lld K=%lld N=%lld", &m, &kk, &n);
    const double flops = 2.0 * static_cast<double>(m * kk * n) * (base.rfind("QK", 0) == 0 ? 32 : 1);
    if (w == fastest().end()) continue;
    std::fprintf(rep.out, "  %s native %7.3f ms %6.1f GFLOP/s | widened %7.3f ms %6.1f GFLOP/s | x%.2f\n", base.c_str(),
                 sec * 1e3, flops / sec / 1e9, w->second * 1e3, flops / w->second / 1e9, w->second / sec);
  }
  return 0;
}
