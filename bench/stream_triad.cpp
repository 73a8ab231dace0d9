// STREAM triad a = b + s*c: the machine's measured memory bandwidth, the baseline that
// docs/PERFORMANCE.md divides kernel figures by. Counts 3 arrays x bytes per element (no
// write-allocate traffic), like STREAM. Arrays are 3 x 256 MiB of f64 by default.
#include <immintrin.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "bench_util.h"

namespace {

using spore::bench::gbps;

struct Arrays {
  int64_t n = 0;
  std::unique_ptr<double[]> a, b, c;
};

Arrays& arrays(int64_t n) {
  static Arrays arr;
  if (arr.n != n) {
    arr.a.reset(new double[n]);
    arr.b.reset(new double[n]);
    arr.c.reset(new double[n]);
    arr.n = n;
    spore::bench::fill(arr.a.get(), n, 0.0);
    spore::bench::fill(arr.b.get(), n, 1.0);
    spore::bench::fill(arr.c.get(), n, 2.0);
  }
  return arr;
}

void BM_triad_f64(benchmark::State& state) {
  spore::set_threads(static_cast<int>(state.range(1)));
  Arrays& arr = arrays(state.range(0));
  for (auto _ : state) {
    spore::bench::triad(arr.a.get(), arr.b.get(), arr.c.get(), 3.0, arr.n);
    benchmark::DoNotOptimize(arr.a.get());
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = gbps(3.0 * sizeof(double) * static_cast<double>(arr.n));
  state.counters["threads"] = static_cast<double>(state.range(1));
}

// Read-only bandwidth: a sum over one 256 MiB array (what LLM decode does with its weights: stream them once, write
// almost nothing), split over the pool's threads like the kernels split their work.
void BM_read_f64(benchmark::State& state) {
  spore::set_threads(static_cast<int>(state.range(1)));
  Arrays& arr = arrays(state.range(0));
  const int64_t n = arr.n, chunk = 1 << 16;
  std::vector<double> part(static_cast<size_t>(spore::num_chunks(n, chunk)));
  for (auto _ : state) {
    spore::parallel_for(spore::num_chunks(n, chunk), [&](int64_t t) {
      const double* p = arr.b.get() + t * chunk;
      const int64_t len = std::min<int64_t>(chunk, n - t * chunk);
      __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
      for (int64_t i = 0; i + 16 <= len; i += 16) {
        s0 = _mm256_add_pd(s0, _mm256_loadu_pd(p + i));
        s1 = _mm256_add_pd(s1, _mm256_loadu_pd(p + i + 4));
        s2 = _mm256_add_pd(s2, _mm256_loadu_pd(p + i + 8));
        s3 = _mm256_add_pd(s3, _mm256_loadu_pd(p + i + 12));
      }
      alignas(32) double v[4];
      _mm256_store_pd(v, _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
      part[static_cast<size_t>(t)] = v[0] + v[1] + v[2] + v[3];
    });
    benchmark::DoNotOptimize(part.data());
  }
  state.counters["GB/s"] = gbps(sizeof(double) * static_cast<double>(arr.n));
  state.counters["threads"] = static_cast<double>(state.range(1));
}
BENCHMARK(BM_read_f64)->ArgsProduct({{1 << 25}, {1, 2}})->ArgNames({"n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);

// 256 MiB per array (32 Mi doubles); 3 arrays = 768 MiB. Also 2 MiB per array (cache-resident on
// most CPUs) to show what the cores can do without DRAM in the way.
BENCHMARK(BM_triad_f64)
    ->ArgsProduct({{1 << 25, 1 << 18}, {1, 2}})
    ->ArgNames({"n", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  spore::init();
  spore::bench::Results rep;
  if (!spore::bench::run_benchmarks(argc, argv, rep)) return 1;
  std::fprintf(rep.out, "\n");
  spore::bench::print_machine_line(rep.out);
  std::fprintf(rep.out, "\n## STREAM triad (f64, 3 x 256 MiB): 1 thread %.2f GB/s, 2 threads %.2f GB/s\n",
              rep.get("BM_triad_f64/n:33554432/threads:1/real_time", "GB/s"),
              rep.get("BM_triad_f64/n:33554432/threads:2/real_time", "GB/s"));
  std::fprintf(rep.out, "## read-only (sum of 256 MiB): 1 thread %.2f GB/s, 2 threads %.2f GB/s\n",
              rep.get("BM_read_f64/n:33554432/threads:1/real_time", "GB/s"),
              rep.get("BM_read_f64/n:33554432/threads:2/real_time", "GB/s"));
  return 0;
}
