#pragma once
// Helpers shared by the cpu backend's kernel tests.
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/cpu.h"
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

// Sets the thread count of both spore's pool and the OpenMP team (kernels run their tasks on the team, as oneDNN
// does; runtime::set_threads does the same).
inline void set_threads(int n) {
  set_num_threads(n);
  cpu_set_num_threads(n);
}

// Restores the thread count however a test exits.
struct ThreadsGuard {
  int saved = num_threads();
  ~ThreadsGuard() { set_threads(saved); }
};

}  // namespace spore::cpu::test
