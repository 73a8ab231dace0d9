// Fixed costs, on 1 thread: eager dispatch per small op (ops::add on 1 and 16 elements; target
// <= 2 us/op) and plan replay per kernel (a compiled chain of 100 tiny adds; time per run divided
// by the plan's kernel count; target <= 0.3 us/kernel). Also the cost of the CompiledFunction cache
// lookup on top of Plan::run, and what a raw kernel call costs, to show where the time goes.
#include "bench_util.h"
#include "ops/kernel.h"
#include "ops/ops.h"
#include "runtime/jit.h"

namespace {

using spore::Tensor;
constexpr int kChain = 100;

Tensor small(int64_t n, float v) {
  Tensor t = Tensor::empty({n}, spore::DType::f32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = v + static_cast<float>(i);
  return t;
}

bool op_available(benchmark::State& state) {
  try {
    spore::ops::add(small(1, 1), small(1, 2));
    return true;
  } catch (const spore::Error& e) {
    state.SkipWithError(e.what());
    return false;
  }
}

void per_item(benchmark::State& state, double items_per_iter, const char* name) {
  // kIsIterationInvariantRate | kInvert: seconds per item; reported in us for readability.
  state.counters[name] = benchmark::Counter(items_per_iter * 1e-6, benchmark::Counter::kIsIterationInvariantRate |
                                                                       benchmark::Counter::kInvert);
}

void BM_eager_add(benchmark::State& state) {
  spore::set_threads(1);
  if (!op_available(state)) return;
  Tensor a = small(state.range(0), 1), b = small(state.range(0), 2);
  for (auto _ : state) {
    Tensor y = spore::ops::add(a, b);
    benchmark::DoNotOptimize(y.raw_data());
  }
  per_item(state, 1, "us/op");
}

// The same work with no dispatch at all: registry lookup done once, output preallocated.
void BM_raw_kernel_add(benchmark::State& state) {
  spore::set_threads(1);
  const spore::KernelInfo* k = spore::kernel_registry().find(spore::Backend::cpu, spore::op_id("add"), spore::DType::f32);
  if (!k) {
    state.SkipWithError("no cpu add kernel for f32");
    return;
  }
  Tensor ins[2] = {small(state.range(0), 1), small(state.range(0), 2)};
  Tensor outs[1] = {small(state.range(0), 0)};
  const spore::Attrs attrs;
  for (auto _ : state) {
    spore::KernelContext ctx{ins, outs, attrs, spore::op_id("add"), {}};
    k->fn(ctx);
    benchmark::DoNotOptimize(outs[0].raw_data());
  }
  per_item(state, 1, "us/op");
}

std::vector<Tensor> chain(std::span<const Tensor> in) {
  Tensor x = in[0];
  for (int i = 0; i < kChain; ++i) x = spore::ops::add(x, in[1]);
  return {x};
}

// range(0) = elements per tensor; range(1) = 0: Plan::run directly, 1: through CompiledFunction.
void BM_plan_replay(benchmark::State& state) {
  spore::set_threads(1);
  if (!op_available(state)) return;
  Tensor x = small(state.range(0), 1), y = small(state.range(0), 2);
  spore::CompiledFunction f(chain);
  const Tensor inputs[2] = {x, y};
  spore::Plan* plan = nullptr;
  try {
    plan = &f.plan_for(inputs);
    if (plan->run(inputs)[0].item_at(0) != 1.0 + kChain * 2.0) {
      state.SkipWithError("the compiled chain gave a wrong result");
      return;
    }
  } catch (const spore::Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  const bool via_function = state.range(1) == 1;
  for (auto _ : state) {
    std::vector<Tensor> out = via_function ? f(inputs) : plan->run(inputs);
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  state.counters["kernels"] = static_cast<double>(plan->num_kernels());
  per_item(state, static_cast<double>(std::max<int64_t>(plan->num_kernels(), 1)), "us/kernel");
}

// The same chain eagerly: 100 dispatches per iteration.
void BM_eager_chain(benchmark::State& state) {
  spore::set_threads(1);
  if (!op_available(state)) return;
  const Tensor inputs[2] = {small(state.range(0), 1), small(state.range(0), 2)};
  for (auto _ : state) {
    std::vector<Tensor> out = chain(inputs);
    benchmark::DoNotOptimize(out[0].raw_data());
  }
  per_item(state, kChain, "us/op");
}

BENCHMARK(BM_eager_add)->Arg(1)->Arg(16)->ArgName("n");
BENCHMARK(BM_raw_kernel_add)->Arg(1)->Arg(16)->ArgName("n");
BENCHMARK(BM_eager_chain)->Arg(16)->ArgName("n")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_plan_replay)->ArgsProduct({{1, 16}, {0, 1}})->ArgNames({"n", "cached_fn"})->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  spore::init();
  spore::bench::Results rep;
  if (!spore::bench::run_benchmarks(argc, argv, rep)) return 1;
  std::fprintf(rep.out, "\n");
  spore::bench::print_machine_line(rep.out);
  auto show = [&](const char* what, const std::string& name, const char* counter, double target) {
    const double v = rep.get(name, counter);
    if (v < 0) {
      std::fprintf(rep.out, "  %-52s %10s\n", what, "n/a");
      return;
    }
    // The counter is in seconds per item scaled by 1e6, i.e. microseconds.
    std::fprintf(rep.out, "  %-52s %8.3f us %s (target <= %.1f us)\n", what, v, v <= target ? "ok  " : "MISS", target);
  };
  std::fprintf(rep.out, "\n## Fixed costs, 1 thread (this run):\n");
  show("eager ops::add, 1 element, per op", "BM_eager_add/n:1", "us/op", 2.0);
  show("eager ops::add, 16 elements, per op", "BM_eager_add/n:16", "us/op", 2.0);
  show("plan replay, chain of 100 adds (16 el), per kernel", "BM_plan_replay/n:16/cached_fn:0", "us/kernel", 0.3);
  show("  same via CompiledFunction call, per kernel", "BM_plan_replay/n:16/cached_fn:1", "us/kernel", 0.3);
  return 0;
}
