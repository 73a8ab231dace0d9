// tanhcustom_bench: accuracy and speed of the tanhcustom plugin's three versions next to spore's built-in tanh.
//
//   tanhcustom_bench [--n N] [--threads T] [--reps R] [--stride S | --sweep] [--json] [--plugin lib.so]
//
// Accuracy: max ULP distance from the correctly rounded f64 tanh over every S-th f32 bit pattern (default 97;
// --sweep: all 2^32), nan must stay nan; f16/bf16: all 65536 patterns against the correctly rounded result.
// Speed: best of R runs over N elements (default 2^22) with the output preallocated; GB/s counts the bytes read
// and written; "x builtin" divides by the built-in kernel of the same dtype (also preallocated). The eager
// ops::tanh row adds the output allocation spore's public API makes per call.
// The plugin is dlopened and called through the C ABI with spore's thread pool as its parallel_for.
#include <dlfcn.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include <spore/spore.h>

#include "base/half.h"
#include "base/thread_pool.h"
#include "ops/kernel.h"
#include "spore/custom_op_abi.h"

namespace {

using spore::DType;
using spore::Tensor;

struct Options {
  int64_t n = int64_t{1} << 22;
  int threads = 0;  // 0: spore's default
  int reps = 20;
  uint64_t stride = 97;
  bool json = false;
  std::string plugin = TANHCUSTOM_PLUGIN_PATH;
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "tanhcustom_bench: %s\n", msg.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    auto number = [&](int64_t lo) {
      const std::string v = value();
      char* end = nullptr;
      const long long x = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || x < lo) die(a + ": expected an integer >= " + std::to_string(lo) + ", got '" + v + "'");
      return static_cast<int64_t>(x);
    };
    if (a == "--n") o.n = number(1);
    else if (a == "--threads") o.threads = static_cast<int>(number(1));
    else if (a == "--reps") o.reps = static_cast<int>(number(1));
    else if (a == "--stride") o.stride = static_cast<uint64_t>(number(1));
    else if (a == "--sweep") o.stride = 1;
    else if (a == "--json") o.json = true;
    else if (a == "--plugin") o.plugin = value();
    else if (a == "--help" || a == "-h") {
      std::puts("usage: tanhcustom_bench [--n N] [--threads T] [--reps R] [--stride S | --sweep] [--json] [--plugin lib.so]");
      std::exit(0);
    } else {
      die("unknown argument '" + a + "' (see --help)");
    }
  }
  return o;
}

// ---- the plugin, through the C ABI ----
const spore_plugin* load_plugin(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) die("cannot load " + path + ": " + dlerror());
  auto entry = reinterpret_cast<spore_plugin_entry_fn>(dlsym(h, SPORE_PLUGIN_ENTRY_SYMBOL));
  if (!entry) die(path + " has no " SPORE_PLUGIN_ENTRY_SYMBOL);
  const spore_plugin* p = entry();
  if (!p || p->abi_version != SPORE_CUSTOM_OP_ABI_VERSION) die(path + ": ABI version mismatch");
  return p;
}

spore_kernel_fn find_kernel(const spore_plugin* p, const std::string& op, int32_t dtype) {
  for (int32_t i = 0; i < p->num_ops; ++i)
    if (op == p->ops[i].name)
      for (int32_t k = 0; k < p->ops[i].num_kernels; ++k)
        if (p->ops[i].kernels[k].dtype == dtype) return p->ops[i].kernels[k].fn;
  die("plugin has no kernel " + op + " for dtype " + std::to_string(dtype));
}

void pool_for(void*, int64_t n, int64_t grain, spore_range_fn fn, void* user) {
  spore::parallel_for(spore::num_chunks(n, grain),
                      [&](int64_t c) { fn(user, c * grain, std::min(n, (c + 1) * grain)); });
}

// out = kernel(in), n elements of dtype.
void call_plugin(spore_kernel_fn fn, int32_t dtype, const void* in, void* out, int64_t n) {
  spore_tensor ti{}, to{};
  ti.type.dtype = to.type.dtype = dtype;
  ti.type.ndim = to.type.ndim = 1;
  ti.type.shape[0] = to.type.shape[0] = n;
  ti.data = const_cast<void*>(in);
  to.data = out;
  spore_kernel_context ctx{};
  ctx.num_inputs = 1, ctx.inputs = &ti, ctx.num_outputs = 1, ctx.outputs = &to;
  ctx.num_threads = spore::num_threads(), ctx.parallel_for = pool_for;
  char err[256] = "";
  if (fn(&ctx, err, sizeof err) != 0) die(std::string("plugin kernel failed: ") + err);
}

// ---- the built-in tanh kernel, with a preallocated output ----
void call_builtin(const spore::KernelInfo* k, const Tensor& in, Tensor& out) {
  static const spore::Attrs attrs;
  const Tensor ins[1] = {in};
  Tensor outs[1] = {out};
  spore::KernelContext ctx{ins, outs, attrs, spore::op_id("tanh"), {}};
  k->fn(ctx);
}

int64_t ordered(uint32_t bits, int width) {
  const uint32_t sign = 1u << (width - 1);
  return (bits & sign) ? -static_cast<int64_t>(bits & (sign - 1)) : static_cast<int64_t>(bits);
}

struct Row {
  std::string version, dtype, impl;
  int64_t max_ulp = 0;
  double worst_x = 0;
  int64_t nan_wrong = 0;
  double gbps = 0, ratio = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  if (opt.threads > 0) spore::set_threads(opt.threads);
  const spore_plugin* plugin = load_plugin(opt.plugin);
  const spore::KernelInfo* bf32 = spore::kernel_registry().find(spore::Backend::cpu, spore::op_id("tanh"), DType::f32);
  const spore::KernelInfo* bf16k = spore::kernel_registry().find(spore::Backend::cpu, spore::op_id("tanh"), DType::f16);
  const spore::KernelInfo* bbf16 = spore::kernel_registry().find(spore::Backend::cpu, spore::op_id("tanh"), DType::bf16);
  if (!bf32 || !bf16k || !bbf16) die("spore has no cpu tanh kernel for f32/f16/bf16");

  std::vector<Row> rows = {{"v1 scalar", "f32", "plugin"}, {"v2 hwy", "f32", "plugin"}, {"v3 hwy", "f32", "plugin"},
                           {"builtin", "f32", spore::kernel_registry().find(spore::Backend::cpu, spore::op_id("tanh"), DType::f32)->impl},
                           {"builtin eager ops::tanh", "f32", "public API"},
                           {"v3 hwy", "f16", "plugin"}, {"builtin", "f16", bf16k->impl},
                           {"v3 hwy", "bf16", "plugin"}, {"builtin", "bf16", bbf16->impl}};
  const spore_kernel_fn k1 = find_kernel(plugin, "tanhcustom_v1", SPORE_F32);
  const spore_kernel_fn k2 = find_kernel(plugin, "tanhcustom_v2", SPORE_F32);
  const spore_kernel_fn k3 = find_kernel(plugin, "tanhcustom_v3", SPORE_F32);
  const spore_kernel_fn k3h = find_kernel(plugin, "tanhcustom_v3", SPORE_F16);
  const spore_kernel_fn k3b = find_kernel(plugin, "tanhcustom_v3", SPORE_BF16);

  // ---- accuracy, f32: batches of bit patterns; reference and comparison on the pool ----
  const auto t_acc = std::chrono::steady_clock::now();
  constexpr int64_t kBatch = int64_t{1} << 22, kChunk = 1 << 16;
  Tensor xin = Tensor::empty({kBatch}, DType::f32), yout = Tensor::empty({kBatch}, DType::f32);
  std::vector<double> ref(kBatch);
  std::vector<float> y[4];
  for (auto& v : y) v.resize(kBatch);
  std::mutex mu;
  uint64_t checked = 0;
  float* x = xin.data<float>();
  for (uint64_t start = 0; start <= 0xffffffffull;) {
    int64_t m = 0;
    for (; m < kBatch && start <= 0xffffffffull; ++m, start += opt.stride) x[m] = std::bit_cast<float>(static_cast<uint32_t>(start));
    checked += static_cast<uint64_t>(m);
    Tensor xm = m == kBatch ? xin : Tensor::empty({m}, DType::f32);
    Tensor ym = m == kBatch ? yout : Tensor::empty({m}, DType::f32);
    if (m != kBatch) std::memcpy(xm.data<float>(), x, m * 4);
    const int64_t chunks = spore::num_chunks(m, kChunk);
    spore::parallel_for(chunks, [&](int64_t c) {
      const int64_t b = c * kChunk, e = std::min(m, b + kChunk);
      for (int64_t i = b; i < e; ++i) ref[i] = std::tanh(static_cast<double>(x[i]));
      // v1 is single-threaded by design; for the sweep it is called per chunk.
      call_plugin(k1, SPORE_F32, x + b, y[0].data() + b, e - b);
    });
    call_plugin(k2, SPORE_F32, x, y[1].data(), m);
    call_plugin(k3, SPORE_F32, x, y[2].data(), m);
    call_builtin(bf32, xm, ym);
    std::memcpy(y[3].data(), ym.data<float>(), m * 4);
    spore::parallel_for(chunks, [&](int64_t c) {
      const int64_t b = c * kChunk, e = std::min(m, b + kChunk);
      Row local[4];
      for (int64_t i = b; i < e; ++i) {
        for (int v = 0; v < 4; ++v) {
          const float yi = y[v][i];
          if (std::isnan(x[i])) {
            local[v].nan_wrong += !std::isnan(yi);
            continue;
          }
          const float r = static_cast<float>(ref[i]);
          const int64_t u = std::llabs(ordered(std::bit_cast<uint32_t>(yi), 32) - ordered(std::bit_cast<uint32_t>(r), 32));
          if (u > local[v].max_ulp) local[v].max_ulp = u, local[v].worst_x = x[i];
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      for (int v = 0; v < 4; ++v) {
        rows[v].nan_wrong += local[v].nan_wrong;
        if (local[v].max_ulp > rows[v].max_ulp) rows[v].max_ulp = local[v].max_ulp, rows[v].worst_x = local[v].worst_x;
      }
    });
  }
  rows[4].max_ulp = rows[3].max_ulp, rows[4].worst_x = rows[3].worst_x, rows[4].nan_wrong = rows[3].nan_wrong;

  // ---- accuracy, f16/bf16: all 65536 patterns against the correctly rounded f64 tanh ----
  auto exhaustive16 = [&](bool bf, spore_kernel_fn kp, const spore::KernelInfo* kb, Row& rp, Row& rb) {
    auto to_float = [bf](uint16_t h) { return bf ? spore::bf16_bits_to_float(h) : spore::half_bits_to_float(h); };
    auto to_bits = [bf](float f) { return bf ? spore::float_to_bf16_bits(f) : spore::float_to_half_bits(f); };
    Tensor in = Tensor::empty({65536}, bf ? DType::bf16 : DType::f16), out = Tensor::empty({65536}, in.dtype());
    auto* xs = static_cast<uint16_t*>(in.raw_data());
    for (uint32_t i = 0; i < 65536; ++i) xs[i] = static_cast<uint16_t>(i);
    std::vector<uint16_t> yp(65536);
    call_plugin(kp, bf ? SPORE_BF16 : SPORE_F16, xs, yp.data(), 65536);
    call_builtin(kb, in, out);
    const auto* yb = static_cast<const uint16_t*>(out.raw_data());
    for (uint32_t i = 0; i < 65536; ++i) {
      const double xv = to_float(xs[i]);
      if (std::isnan(xv)) {
        rp.nan_wrong += !std::isnan(to_float(yp[i]));
        rb.nan_wrong += !std::isnan(to_float(yb[i]));
        continue;
      }
      // Correct rounding: the nearest of the first rounding's neighbours.
      const double r = std::tanh(xv);
      const uint16_t h0 = to_bits(static_cast<float>(r));
      uint16_t best = h0;
      for (int64_t c : {ordered(h0, 16) - 1, ordered(h0, 16) + 1}) {
        const uint16_t cb = c < 0 ? static_cast<uint16_t>(0x8000 | -c) : static_cast<uint16_t>(c);
        const double v = to_float(cb), bv = to_float(best);
        if (std::isfinite(v) && (std::fabs(v - r) < std::fabs(bv - r) || (std::fabs(v - r) == std::fabs(bv - r) && !(cb & 1))))
          best = cb;
      }
      for (auto [yy, row] : {std::pair<uint16_t, Row*>{yp[i], &rp}, {yb[i], &rb}}) {
        const int64_t u = std::llabs(ordered(yy, 16) - ordered(best, 16));
        if (u > row->max_ulp) row->max_ulp = u, row->worst_x = xv;
      }
    }
  };
  exhaustive16(false, k3h, bf16k, rows[5], rows[6]);
  exhaustive16(true, k3b, bbf16, rows[7], rows[8]);
  const double acc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_acc).count();

  // ---- speed ----
  const int64_t n = opt.n;
  Tensor a = Tensor::empty({n}, DType::f32), out = Tensor::empty({n}, DType::f32);
  float* av = a.data<float>();
  for (int64_t i = 0; i < n; ++i) av[i] = -8.0f + 16.0f * static_cast<float>((i * 2654435761u) % 1000003) / 1000003.0f;
  Tensor ah = Tensor::empty({n}, DType::f16), outh = Tensor::empty({n}, DType::f16);
  Tensor ab = Tensor::empty({n}, DType::bf16), outb = Tensor::empty({n}, DType::bf16);
  for (int64_t i = 0; i < n; ++i) {
    static_cast<uint16_t*>(ah.raw_data())[i] = spore::float_to_half_bits(av[i]);
    static_cast<uint16_t*>(ab.raw_data())[i] = spore::float_to_bf16_bits(av[i]);
  }
  // The machine may be shared: time the versions in interleaved rounds (one run of each per round) and keep
  // each one's best, so a burst of outside load cannot favour whichever version ran at a quiet moment.
  const std::vector<std::pair<double, std::function<void()>>> runs = {
      {8, [&] { call_plugin(k1, SPORE_F32, av, out.raw_data(), n); }},
      {8, [&] { call_plugin(k2, SPORE_F32, av, out.raw_data(), n); }},
      {8, [&] { call_plugin(k3, SPORE_F32, av, out.raw_data(), n); }},
      {8, [&] { call_builtin(bf32, a, out); }},
      {8, [&] { Tensor t = spore::ops::tanh(a); }},
      {4, [&] { call_plugin(k3h, SPORE_F16, ah.raw_data(), outh.raw_data(), n); }},
      {4, [&] { call_builtin(bf16k, ah, outh); }},
      {4, [&] { call_plugin(k3b, SPORE_BF16, ab.raw_data(), outb.raw_data(), n); }},
      {4, [&] { call_builtin(bbf16, ab, outb); }},
  };
  std::vector<double> best(runs.size(), 1e30);
  for (int r = 0; r <= opt.reps; ++r) {  // round 0 is the warm-up (first touch of the outputs)
    for (size_t v = 0; v < runs.size(); ++v) {
      if (v == 0 && r > 2) continue;  // v1 is ~50x slower: two timed runs are plenty
      const auto t0 = std::chrono::steady_clock::now();
      runs[v].second();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best[v] = std::min(best[v], s);
    }
  }
  for (size_t v = 0; v < runs.size(); ++v) rows[v].gbps = runs[v].first * static_cast<double>(n) / best[v] / 1e9;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double base = rows[i].dtype == "f32" ? rows[3].gbps : rows[i].dtype == "f16" ? rows[6].gbps : rows[8].gbps;
    rows[i].ratio = rows[i].gbps / base;
  }

  if (opt.json) {
    std::printf("{\"n\": %lld, \"threads\": %d, \"reps\": %d, \"f32_stride\": %llu, \"f32_inputs_checked\": %llu, "
                "\"accuracy_seconds\": %.1f, \"rows\": [",
                static_cast<long long>(n), spore::num_threads(), opt.reps, static_cast<unsigned long long>(opt.stride),
                static_cast<unsigned long long>(checked), acc_s);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("%s{\"version\": \"%s\", \"dtype\": \"%s\", \"impl\": \"%s\", \"max_ulp\": %lld, \"worst_x\": %.9g, "
                  "\"nan_wrong\": %lld, \"gbps\": %.3f, \"ratio_to_builtin\": %.3f}",
                  i ? ", " : "", r.version.c_str(), r.dtype.c_str(), r.impl.c_str(), static_cast<long long>(r.max_ulp),
                  r.worst_x, static_cast<long long>(r.nan_wrong), r.gbps, r.ratio);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("tanh: n = %lld, threads = %d, best of %d; f32 accuracy over %llu bit patterns (stride %llu), "
              "f16/bf16 over all 65536 (%.1f s)\n\n",
              static_cast<long long>(n), spore::num_threads(), opt.reps, static_cast<unsigned long long>(checked),
              static_cast<unsigned long long>(opt.stride), acc_s);
  std::printf("%-24s %-5s %8s %14s %9s %9s %10s\n", "version", "dtype", "max ULP", "worst x", "nan ok", "GB/s", "x builtin");
  for (const Row& r : rows)
    std::printf("%-24s %-5s %8lld %14.7g %9s %9.2f %9.2fx\n", r.version.c_str(), r.dtype.c_str(),
                static_cast<long long>(r.max_ulp), r.worst_x, r.nan_wrong ? "NO" : "yes", r.gbps, r.ratio);
  return 0;
}
