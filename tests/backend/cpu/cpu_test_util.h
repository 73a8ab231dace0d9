#pragma once
// Helpers shared by the cpu backend's kernel tests.
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "backend/cpu/cpu.h"
#include "backend/cpu/store_epilogue.h"
#include "base/thread_pool.h"

namespace spore::cpu::test {

// Uniform in [-1, 1) from a fixed seed: never all zeros.
inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Whether this CPU runs the kernels' AVX-512 builds. A test comparing them with the AVX2 builds skips without it:
// it would compare AVX2 with itself.
inline bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                      __builtin_cpu_supports("avx512vl"); }
#define SPORE_SKIP_WITHOUT_AVX512()                                                                          \
  do {                                                                                                      \
    if (!::spore::cpu::test::cpu_has_avx512())                                                              \
      GTEST_SKIP() << "this CPU has no AVX-512 (F/BW/VL): only the AVX2 build runs here, nothing to compare"; \
  } while (0)

// Index of (n, c, y, x) in an nChw8c buffer ([N, C/8, h, w, 8]) with C channels.
inline size_t nchw8c_at(int64_t n, int64_t c, int64_t y, int64_t x, int64_t C, int64_t h, int64_t w) {
  return static_cast<size_t>((((n * (C / 8) + c / 8) * h + y) * w + x) * 8 + c % 8);
}

// Sets the thread count of both spore's pool and the OpenMP team (kernels run their tasks on the team, as oneDNN
// does; runtime::set_threads does the same).
inline void set_threads(int n) {
  set_num_threads(n);
  cpu_set_num_threads(n);
}

// The store epilogue (store_epilogue.h) as the separate ops compute it, on y[off .. off + count): y + r (when r is
// given), then relu x < 0 ? 0 : x (when relu). Expected values, and the body of an epilogue callback.
inline void separate_epilogue(std::vector<float>& y, const std::vector<float>* r, bool relu, size_t off, size_t count) {
  for (size_t i = off; i < off + count; ++i) {
    if (r) y[i] = y[i] + (*r)[i];
    if (relu) y[i] = y[i] < 0 ? 0.0f : y[i];
  }
}

// A residual for epilogue tests: random, with NaN at both ends and -0 inside.
inline std::vector<float> epilogue_residual(size_t n, uint32_t seed) {
  std::vector<float> r = random_floats(n, seed);
  r[0] = std::nanf("");
  r[n / 3] = -0.0f;
  r[n - 1] = std::nanf("");
  return r;
}

// The epilogues a kernel's fused path must match: residual only, relu only, both - each with the store epilogue to
// pass and the expected output (`plain`, the conv without epilogue, then the separate ops).
struct EpilogueCase {
  const std::vector<float>* residual;
  bool relu;
  StoreEpilogue fused;
  std::vector<float> want;
};
inline std::vector<EpilogueCase> epilogue_cases(const std::vector<float>& plain, const std::vector<float>& r) {
  std::vector<EpilogueCase> cases;
  const auto add = [&](const std::vector<float>* res, bool relu) {
    EpilogueCase c{res, relu, StoreEpilogue{res ? res->data() : nullptr, relu}, plain};
    separate_epilogue(c.want, res, relu, 0, c.want.size());
    cases.push_back(std::move(c));
  };
  add(&r, false);
  add(nullptr, true);
  add(&r, true);
  return cases;
}

// An output buffer (NaN-filled) and an epilogue callback over it that applies separate_epilogue and counts how
// often each element was passed, for the kernels' per-task epilogue hooks.
struct EpilogueProbe {
  std::vector<float> y;
  std::vector<int> calls;
  std::function<void(int64_t, int64_t)> fn;
  EpilogueProbe(size_t n, const std::vector<float>* r, bool relu) : y(n, std::nanf("")), calls(n, 0) {
    fn = [this, r, relu](int64_t off, int64_t count) {
      for (int64_t i = off; i < off + count; ++i) ++calls[static_cast<size_t>(i)];
      separate_epilogue(y, r, relu, static_cast<size_t>(off), static_cast<size_t>(count));
    };
  }
  EpilogueProbe(const EpilogueProbe&) = delete;
  EpilogueProbe& operator=(const EpilogueProbe&) = delete;
  // Whether every element was passed exactly `times` times.
  bool every_element_called(int times) const {
    for (int c : calls)
      if (c != times) return false;
    return true;
  }
};

// Restores the thread count however a test exits.
struct ThreadsGuard {
  int saved = num_threads();
  ~ThreadsGuard() { set_threads(saved); }
};

}  // namespace spore::cpu::test
