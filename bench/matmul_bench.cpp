// ops::matmul (eager, f32 and bf16) in GFLOP/s (2*n^3 per call) next to oneDNN's own dnnl_sgemm on
// the same square shapes in the same process; the summary prints matmul / sgemm per size.
// n = 4096 (137 GFLOP per call) runs only with SPORE_BENCH_LARGE=1.
#include <oneapi/dnnl/dnnl.h>

#include <cstdlib>
#include <vector>

#include "bench_util.h"
#include "base/rng.h"
#include "ops/ops.h"

namespace {

using spore::DType;
using spore::Tensor;

Tensor random_matrix(int64_t n, DType dt, uint64_t seed) {
  Tensor t = Tensor::empty({n, n}, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n * n; ++i) p[i] = spore::philox_uniform(seed, 0, i) - 0.5f;
  if (dt == DType::f32) return t;
  Tensor low = Tensor::empty({n, n}, dt);
  for (int64_t i = 0; i < n * n; ++i) low.data<spore::bf16>()[i] = spore::bf16(p[i]);
  return low;
}

void set_flops(benchmark::State& state, int64_t n) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// range(0) = n, range(1) = threads, range(2) = 0: f32, 1: bf16.
void BM_matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  spore::set_threads(static_cast<int>(state.range(1)));
  const DType dt = state.range(2) ? DType::bf16 : DType::f32;
  Tensor a = random_matrix(n, dt, 1), b = random_matrix(n, dt, 2);
  try {
    Tensor y = spore::ops::matmul(a, b);  // warm-up: primitive creation is cached after this
    if (y.shape() != spore::Shape{n, n}) {
      state.SkipWithError("ops::matmul returned a wrong shape");
      return;
    }
  } catch (const spore::Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    Tensor y = spore::ops::matmul(a, b);
    benchmark::DoNotOptimize(y.raw_data());
  }
  set_flops(state, n);
}

void BM_dnnl_sgemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  spore::set_threads(static_cast<int>(state.range(1)));
  Tensor a = random_matrix(n, DType::f32, 1), b = random_matrix(n, DType::f32, 2);
  std::vector<float> c(n * n);
  for (auto _ : state) {
    const dnnl_status_t st = dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f, c.data(), n);
    if (st != dnnl_success) {
      state.SkipWithError("dnnl_sgemm failed");
      return;
    }
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, n);
}

std::vector<int64_t> sizes() {
  std::vector<int64_t> s = {256, 512, 1024, 2048};
  if (const char* e = std::getenv("SPORE_BENCH_LARGE"); e && *e == '1') s.push_back(4096);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  spore::init();
  const std::vector<int64_t> ns = sizes();
  std::vector<int64_t> threads = {1};
  if (spore::hardware_threads() > 1) threads.push_back(spore::hardware_threads());
  benchmark::RegisterBenchmark("BM_dnnl_sgemm", BM_dnnl_sgemm)->ArgsProduct({ns, threads})->ArgNames({"n", "threads"})
      ->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_matmul", BM_matmul)->ArgsProduct({ns, threads, {0, 1}})
      ->ArgNames({"n", "threads", "bf16"})->UseRealTime()->Unit(benchmark::kMillisecond);
  spore::bench::Results rep;
  if (!spore::bench::run_benchmarks(argc, argv, rep)) return 1;
  std::fprintf(rep.out, "\n");
  spore::bench::print_machine_line(rep.out);
  std::fprintf(rep.out, "\n## GFLOP/s, ops::matmul vs dnnl_sgemm (this run):\n");
  std::fprintf(rep.out, "  %-6s %-8s %10s %10s %10s %9s %9s\n", "n", "threads", "sgemm", "f32", "bf16", "f32/sgemm", "bf16/sgemm");
  for (int64_t n : ns) {
    for (int64_t t : threads) {
      const double s = rep.get(fmt::format("BM_dnnl_sgemm/n:{}/threads:{}/real_time", n, t), "GFLOP/s");
      const double f = rep.get(fmt::format("BM_matmul/n:{}/threads:{}/bf16:0/real_time", n, t), "GFLOP/s");
      const double h = rep.get(fmt::format("BM_matmul/n:{}/threads:{}/bf16:1/real_time", n, t), "GFLOP/s");
      if (s <= 0) continue;
      std::fprintf(rep.out, "  %-6lld %-8lld %10.1f %10.1f %10.1f %8.0f%% %8.0f%%\n", static_cast<long long>(n),
                  static_cast<long long>(t), s, f, h, f > 0 ? 100 * f / s : 0.0, h > 0 ? 100 * h / s : 0.0);
    }
  }
  return 0;
}
