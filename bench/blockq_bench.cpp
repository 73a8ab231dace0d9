// linear_blockq (ops/llm_ops.h) on the cpu backend, eager. Decode (M = 1) is memory-bound: GB/s of weight bytes
// streamed per call, next to the STREAM triad measured in the same run. Prefill (M = 128, 512): GFLOP/s (2*M*N*K).
// Shapes of Qwen2-0.5B: the output projection (N = 151936, K = 896) and the FFN down projection (N = 896, K = 4864);
// prefill on the FFN up projection (N = 4864, K = 896).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include "bench_util.h"
#include "base/half.h"
#include "base/rng.h"
#include "ops/llm_ops.h"

namespace {

using spore::Tensor;
using spore::llm_ops::WeightFormat;

constexpr WeightFormat formats[] = {WeightFormat::f32, WeightFormat::f16, WeightFormat::bf16, WeightFormat::q8_0,
                                    WeightFormat::q4_0};

// A weight [n, k] in format f with random values (quant formats: small scales, random bytes). Cached per shape.
const Tensor& weight(WeightFormat f, int64_t n, int64_t k) {
  static std::map<std::tuple<int, int64_t, int64_t>, Tensor> cache;
  auto key = std::make_tuple(static_cast<int>(f), n, k);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  cache.clear();  // one weight at a time: the largest is 580 MB in f32
  const int64_t rb = spore::llm_ops::row_bytes(f, k);
  const bool typed = f == WeightFormat::f32 || f == WeightFormat::f16 || f == WeightFormat::bf16;
  Tensor w = Tensor::empty({n, typed ? k : rb}, spore::llm_ops::weight_dtype(f));
  auto* p = static_cast<uint8_t*>(w.raw_data());
  spore::parallel_for(n, [&](int64_t r) {
    uint8_t* row = p + r * rb;
    for (int64_t i = 0; i < rb; ++i) row[i] = static_cast<uint8_t>(spore::philox_uniform(5, r, i) * 256);
    if (f == WeightFormat::f32)
      for (int64_t i = 0; i < k; ++i) reinterpret_cast<float*>(row)[i] = spore::philox_uniform(6, r, i) - 0.5f;
    if (f == WeightFormat::f16 || f == WeightFormat::bf16)
      for (int64_t i = 0; i < k; ++i) {
        const float v = spore::philox_uniform(6, r, i) - 0.5f;
        const uint16_t h = f == WeightFormat::f16 ? spore::float_to_half_bits(v) : spore::float_to_bf16_bits(v);
        std::memcpy(row + 2 * i, &h, 2);
      }
    if (f == WeightFormat::q8_0 || f == WeightFormat::q4_0) {
      const int64_t bb = f == WeightFormat::q8_0 ? 34 : 18;
      for (int64_t b = 0; b < k / 32; ++b) {
        const uint16_t h = spore::float_to_half_bits(0.01f);
        std::memcpy(row + b * bb, &h, 2);
      }
    }
  });
  return cache.emplace(key, std::move(w)).first->second;
}

// The fastest single call of each configuration, in seconds: on a shared machine the mean mixes in other
// processes' time slices, the fastest call does not. The summary after the runs uses these.
std::map<std::string, double>& fastest() {
  static std::map<std::string, double> m;
  return m;
}
void record(const std::string& key, double seconds) {
  auto [it, fresh] = fastest().emplace(key, seconds);
  if (!fresh) it->second = std::min(it->second, seconds);
}
std::string key(WeightFormat f, int64_t n, int64_t k, int64_t m, int64_t t) {
  return fmt::format("{}/{}/{}/{}/{}", spore::llm_ops::format_name(f), n, k, m, t);
}

Tensor activations(int64_t m, int64_t k) {
  Tensor x = Tensor::empty({m, k}, spore::DType::f32);
  float* p = x.data<float>();
  for (int64_t i = 0; i < m * k; ++i) p[i] = spore::philox_uniform(7, 0, i) - 0.5f;
  return x;
}

// range(0) = format index, range(1) = N, range(2) = K, range(3) = M, range(4) = threads.
void BM_linear_blockq(benchmark::State& state) {
  const WeightFormat f = formats[state.range(0)];
  const int64_t n = state.range(1), k = state.range(2), m = state.range(3);
  spore::set_threads(static_cast<int>(state.range(4)));
  const Tensor& w = weight(f, n, k);
  const Tensor x = activations(m, k);
  const std::string name(spore::llm_ops::format_name(f));
  state.SetLabel(name);
  const std::string kname = key(f, n, k, m, state.range(4));
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor y = spore::ops::linear_blockq(x, w, name);
    benchmark::DoNotOptimize(y.raw_data());
    record(kname, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double wbytes = static_cast<double>(n) * static_cast<double>(spore::llm_ops::row_bytes(f, k));
  state.counters["GB/s"] = spore::bench::gbps(wbytes + 4.0 * static_cast<double>(m * (k + n)));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(m * n * k) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void decode_args(benchmark::internal::Benchmark* b) {
  for (int f : {1, 3, 4, 0})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{151936, 896}, {896, 4864}})
      for (int t : {1, 2}) b->Args({f, n, k, 1, t});
}
BENCHMARK(BM_linear_blockq)
    ->Name("decode")
    ->Apply(decode_args)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void prefill_args(benchmark::internal::Benchmark* b) {
  for (int f : {3, 4, 1, 0})
    for (int64_t m : {128, 512})
      for (int t : {1, 2}) b->Args({f, 4864, 896, m, t});
  // The FFN down projection (K = 4864: 8 activation rows no longer fit L1).
  for (int f : {3, 1})
    for (int t : {1, 2}) b->Args({f, 896, 4864, 512, t});
}
BENCHMARK(BM_linear_blockq)
    ->Name("prefill")
    ->Apply(prefill_args)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Decode steps of a continuous batch (spore serve): a few rows, one per sequence, on the FFN projections, 2 threads.
void few_rows_args(benchmark::internal::Benchmark* b) {
  for (int f : {1, 2, 3})
    for (int64_t m : {1, 2, 4, 8, 16})
      for (auto [n, k] : {std::pair<int64_t, int64_t>{4864, 896}, {896, 4864}}) b->Args({f, n, k, m, 2});
}
BENCHMARK(BM_linear_blockq)
    ->Name("few_rows")
    ->Apply(few_rows_args)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

struct Triad {
  int64_t n = 1 << 25;
  std::unique_ptr<double[]> a{new double[1 << 25]}, b{new double[1 << 25]}, c{new double[1 << 25]};
};

void BM_triad(benchmark::State& state) {
  static Triad t;
  static bool filled = false;
  spore::set_threads(static_cast<int>(state.range(0)));
  if (!filled) {
    spore::bench::fill(t.a.get(), t.n, 0.0);
    spore::bench::fill(t.b.get(), t.n, 1.0);
    spore::bench::fill(t.c.get(), t.n, 2.0);
    filled = true;
  }
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    spore::bench::triad(t.a.get(), t.b.get(), t.c.get(), 3.0, t.n);
    benchmark::ClobberMemory();
    record(fmt::format("triad/{}", state.range(0)), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["GB/s"] = spore::bench::gbps(3.0 * sizeof(double) * static_cast<double>(t.n));
}
BENCHMARK(BM_triad)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  spore::init();
  spore::bench::Results rep;
  if (!spore::bench::run_benchmarks(argc, argv, rep)) return 1;
  auto best = [](const std::string& k) {
    auto it = fastest().find(k);
    return it == fastest().end() ? -1.0 : it->second;
  };
  const double triad_bytes = 3.0 * sizeof(double) * (1 << 25);
  auto stream_gbs = [&](const char* k) { return best(k) > 0 ? triad_bytes / best(k) / 1e9 : -1.0; };
  const double s1 = stream_gbs("triad/1"), s2 = stream_gbs("triad/2");
  std::fprintf(rep.out, "\n");
  spore::bench::print_machine_line(rep.out);
  std::fprintf(rep.out, "Fastest call of each configuration (robust on a shared machine):\n");
  std::fprintf(rep.out, "STREAM triad: 1 thread %.1f GB/s, 2 threads %.1f GB/s\n", s1, s2);
  for (const auto& [k, sec] : fastest()) {
    if (k.rfind("triad", 0) == 0) continue;
    char fname[8];
    long long n, kk, m, t;
    if (std::sscanf(k.c_str(), "%7[^/]/%lld/%lld/%lld/%lld", fname, &n, &kk, &m, &t) != 5) continue;
    const WeightFormat f = *spore::llm_ops::parse_format(fname);
    const double bytes = static_cast<double>(n) * static_cast<double>(spore::llm_ops::row_bytes(f, kk)) +
                         4.0 * static_cast<double>(m * (kk + n));
    const double gbs = bytes / sec / 1e9, gflops = 2.0 * static_cast<double>(m * n * kk) / sec / 1e9;
    const double stream = t == 1 ? s1 : s2;
    if (m > 1 && m <= 16)
      std::fprintf(rep.out, "  rows    %-5s M=%-4lld N=%-6lld K=%-5lld threads=%lld: %8.3f ms %6.1f GB/s %6.1f GFLOP/s\n",
                   fname, m, n, kk, t, sec * 1e3, gbs, gflops);
    else if (m == 1 && stream > 0)
      std::fprintf(rep.out, "  decode  %-5s N=%-6lld K=%-5lld threads=%lld: %8.3f ms %6.1f GB/s = %3.0f%% of STREAM\n",
                   fname, n, kk, t, sec * 1e3, gbs, 100.0 * gbs / stream);
    else if (m == 1)
      std::fprintf(rep.out, "  decode  %-5s N=%-6lld K=%-5lld threads=%lld: %8.3f ms %6.1f GB/s\n", fname, n, kk, t,
                   sec * 1e3, gbs);
    else
      std::fprintf(rep.out, "  prefill %-5s M=%-4lld N=%-6lld K=%-5lld threads=%lld: %8.2f ms %6.1f GFLOP/s\n", fname, m, n,
                   kk, t, sec * 1e3, gflops);
  }
  return 0;
}
