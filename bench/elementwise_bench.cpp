// ops::add on f32 arrays, eager and through a compiled plan, in GB/s (3 arrays x 4 bytes per
// element), next to a STREAM triad on the same array size run in this same process: the summary
// line is add / triad, the "fraction of measured bandwidth" that docs/PERFORMANCE.md targets (>= 70%).
#include <memory>

#include "bench_util.h"
#include "ops/kernel.h"
#include "ops/ops.h"
#include "runtime/jit.h"

namespace {

using spore::Tensor;
using spore::bench::gbps;

constexpr int64_t kLarge = 1 << 24;

Tensor random_f32(int64_t n, float base) {
  Tensor t = Tensor::empty({n}, spore::DType::f32);
  spore::bench::fill(t.data<float>(), n, base);
  return t;
}

void BM_triad_f32(benchmark::State& state) {
  const int64_t n = state.range(0);
  spore::set_threads(static_cast<int>(state.range(1)));
  Tensor a = random_f32(n, 0.0f), b = random_f32(n, 1.0f), c = random_f32(n, 2.0f);
  for (auto _ : state) {
    spore::bench::triad(a.data<float>(), b.data<float>(), c.data<float>(), 3.0f, n);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = gbps(3.0 * 4 * n);
}

// The cpu add kernel alone, called through the registry with a preallocated output: what eager and
// plan would reach without a fresh (page-faulting) output allocation per call.
void BM_add_kernel(benchmark::State& state) {
  const int64_t n = state.range(0);
  spore::set_threads(static_cast<int>(state.range(1)));
  const spore::KernelInfo* k = spore::kernel_registry().find(spore::Backend::cpu, spore::op_id("add"), spore::DType::f32);
  if (!k) {
    state.SkipWithError("no cpu add kernel for f32");
    return;
  }
  Tensor ins[2] = {random_f32(n, 1.0f), random_f32(n, 2.0f)};
  Tensor outs[1] = {random_f32(n, 0.0f)};
  const spore::Attrs attrs;
  for (auto _ : state) {
    spore::KernelContext ctx{ins, outs, attrs, spore::op_id("add"), {}};
    k->fn(ctx);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = gbps(3.0 * 4 * n);
}

// mode 0: eager ops::add; mode 1: CompiledFunction (trace once, then replay the cached plan).
void BM_add(benchmark::State& state) {
  const int64_t n = state.range(0);
  const bool graph = state.range(2) == 1;
  spore::set_threads(static_cast<int>(state.range(1)));
  Tensor a = random_f32(n, 1.0f), b = random_f32(n, 2.0f);
  spore::CompiledFunction f([](std::span<const Tensor> in) { return std::vector<Tensor>{spore::ops::add(in[0], in[1])}; });
  try {
    Tensor y = graph ? f({a, b})[0] : spore::ops::add(a, b);  // warm-up; also checks the op exists
    if (y.item_at(n - 1) != a.item_at(n - 1) + b.item_at(n - 1)) {
      state.SkipWithError("ops::add gave a wrong result");
      return;
    }
  } catch (const spore::Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    Tensor y = graph ? f({a, b})[0] : spore::ops::add(a, b);
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.counters["GB/s"] = gbps(3.0 * 4 * n);
}

BENCHMARK(BM_triad_f32)->ArgsProduct({{kLarge}, {1, 2}})->ArgNames({"n", "threads"})->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_add_kernel)->ArgsProduct({{kLarge}, {1, 2}})->ArgNames({"n", "threads"})->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_add)
    ->ArgsProduct({{kLarge}, {1, 2}, {0, 1}})
    ->ArgNames({"n", "threads", "graph"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
// Small sizes: cache-resident, so these show per-call overhead and SIMD throughput, not DRAM.
BENCHMARK(BM_add)
    ->ArgsProduct({{1 << 10, 1 << 16}, {1, 2}, {0, 1}})
    ->ArgNames({"n", "threads", "graph"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  spore::init();
  spore::bench::Results rep;
  if (!spore::bench::run_benchmarks(argc, argv, rep)) return 1;
  std::fprintf(rep.out, "\n");
  spore::bench::print_machine_line(rep.out);
  std::fprintf(rep.out, "\n## ops::add f32 n=%lld vs STREAM triad f32 of the same size (this run):\n", static_cast<long long>(kLarge));
  std::fprintf(rep.out, "  %-8s %-6s %10s %10s %8s\n", "threads", "mode", "add GB/s", "triad GB/s", "ratio");
  for (int t : {1, 2}) {
    const double triad = rep.get(fmt::format("BM_triad_f32/n:{}/threads:{}/real_time", kLarge, t), "GB/s");
    for (int g : {0, 1, 2}) {
      const char* mode = g == 0 ? "eager" : g == 1 ? "plan" : "kernel";
      const double add =
          g == 2 ? rep.get(fmt::format("BM_add_kernel/n:{}/threads:{}/real_time", kLarge, t), "GB/s")
                 : rep.get(fmt::format("BM_add/n:{}/threads:{}/graph:{}/real_time", kLarge, t, g), "GB/s");
      if (add < 0 || triad <= 0) {
        std::fprintf(rep.out, "  %-8d %-6s %10s\n", t, mode, "n/a");
        continue;
      }
      std::fprintf(rep.out, "  %-8d %-6s %10.2f %10.2f %7.0f%%\n", t, mode, add, triad, 100.0 * add / triad);
    }
  }
  return 0;
}
