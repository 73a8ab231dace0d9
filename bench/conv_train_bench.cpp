// The conv-family kernels of a CNN training step (LeNet-5 and SimpleNet on 28x28 MNIST, batch 64), eager
// on 1 thread: forward conv, data gradient (conv_transpose2d), weight gradient (conv2d_weight_grad), max
// pooling and its gradient. GFLOP/s counters make the weak spots visible; see docs/PERFORMANCE.md.
#include "bench_util.h"
#include "ops/ops.h"

namespace {

using spore::Tensor;
namespace ops = spore::ops;

Tensor rnd(const spore::Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s, spore::DType::f32);
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    z ^= z << 13, z ^= z >> 7, z ^= z << 17;
    t.data<float>()[i] = static_cast<float>(z % 2001) / 1000.0f - 1.0f;
  }
  return t;
}

struct ConvShape {
  int64_t n, c, h, o, k, pad;
};
// 0: LeNet conv1, 1: LeNet conv2, 2: SimpleNet conv
const ConvShape kShapes[] = {{64, 1, 28, 6, 5, 2}, {64, 6, 14, 16, 5, 0}, {64, 1, 28, 32, 3, 1}};

void flops(benchmark::State& state, double f) {
  state.counters["GFLOP/s"] = benchmark::Counter(f * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_conv_forward(benchmark::State& state) {
  spore::set_threads(1);
  const ConvShape s = kShapes[state.range(0)];
  const Tensor x = rnd({s.n, s.c, s.h, s.h}, 1), w = rnd({s.o, s.c, s.k, s.k}, 2), b = rnd({s.o}, 3);
  ops::Conv2dOptions o;
  o.padding = {s.pad, s.pad, s.pad, s.pad};
  Tensor y;
  for (auto _ : state) y = ops::conv2d(x, w, b, o);
  flops(state, 2.0 * static_cast<double>(y.numel() * s.c * s.k * s.k));
}

void BM_conv_weight_grad(benchmark::State& state) {
  spore::set_threads(1);
  const ConvShape s = kShapes[state.range(0)];
  const int64_t ho = s.h + 2 * s.pad - s.k + 1;
  const Tensor x = rnd({s.n, s.c, s.h, s.h}, 1), dy = rnd({s.n, s.o, ho, ho}, 2);
  ops::Conv2dOptions o;
  o.padding = {s.pad, s.pad, s.pad, s.pad};
  for (auto _ : state) benchmark::DoNotOptimize(ops::conv2d_weight_grad(x, dy, {s.k, s.k}, o).raw_data());
  flops(state, 2.0 * static_cast<double>(dy.numel() * s.c * s.k * s.k));
}

void BM_conv_data_grad(benchmark::State& state) {
  spore::set_threads(1);
  const ConvShape s = kShapes[state.range(0)];
  const int64_t ho = s.h + 2 * s.pad - s.k + 1;
  const Tensor dy = rnd({s.n, s.o, ho, ho}, 2), w = rnd({s.o, s.c, s.k, s.k}, 3);
  ops::ConvTranspose2dOptions o;
  o.padding = {s.pad, s.pad, s.pad, s.pad};
  for (auto _ : state) benchmark::DoNotOptimize(ops::conv_transpose2d(dy, w, std::nullopt, o).raw_data());
  flops(state, 2.0 * static_cast<double>(dy.numel() * s.c * s.k * s.k));
}

void BM_max_pool(benchmark::State& state) {
  spore::set_threads(1);
  const Tensor x = rnd({64, state.range(0), 28, 28}, 1);
  for (auto _ : state) benchmark::DoNotOptimize(ops::max_pool2d(x).raw_data());
  state.SetBytesProcessed(state.iterations() * x.numel() * 5);
}

void BM_max_pool_grad(benchmark::State& state) {
  spore::set_threads(1);
  const Tensor x = rnd({64, state.range(0), 28, 28}, 1), dy = rnd({64, state.range(0), 14, 14}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(ops::max_pool2d_grad(x, dy, {}).raw_data());
  state.SetBytesProcessed(state.iterations() * x.numel() * 9);
}

BENCHMARK(BM_conv_forward)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_conv_weight_grad)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_conv_data_grad)->DenseRange(1, 1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_max_pool)->Arg(6)->Arg(32)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_max_pool_grad)->Arg(6)->Arg(32)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  spore::init();
  spore::bench::Results rep;
  return spore::bench::run_benchmarks(argc, argv, rep) ? 0 : 1;
}
