// allreduce bandwidth vs message size: spore's deterministic allreduce (parallel::Communicator, tree order over ranks)
// against OpenMPI's own MPI_Allreduce (f32 sum) in the same run, the same buffers, alternating rounds.
//
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/allreduce_bench [--json] [--max-mib 64]
//
// Per size: 5 rounds of (spore loop, MPI loop), each loop ~30 ms after a warm-up; the best round of each is reported
// (rank 0's clock, between barriers). algbw = bytes / time; busbw = algbw * 2 (N-1) / N (the bytes each rank must
// move, as nccl-tests report it); ratio = spore busbw / MPI busbw.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "parallel/communicator.h"

using namespace spore;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv) {
  bool json = false;
  int64_t max_mib = 64;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) json = true;
    else if (!std::strcmp(argv[i], "--max-mib") && i + 1 < argc) max_mib = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: mpirun -np N allreduce_bench [--json] [--max-mib M]\n");
      return 2;
    }
  }
  try {
    parallel::Communicator& comm = parallel::world();
    const int n = comm.size();
    if (n < 2) {
      std::fprintf(stderr, "allreduce_bench: run it under mpirun -np N with N >= 2\n");
      return 2;
    }
    const bool root = comm.rank() == 0;
    if (root && !json)
      std::printf("allreduce f32 sum, %d ranks, %s\n%12s %14s %14s %14s %14s %8s\n", n,
                  parallel::transport_version(comm).c_str(), "bytes", "spore us", "MPI us", "spore busGB/s",
                  "MPI busGB/s", "ratio");
    for (int64_t bytes = 4 * 1024; bytes <= max_mib * 1024 * 1024; bytes *= 4) {
      const int64_t count = bytes / 4;
      std::vector<float> a(static_cast<size_t>(count)), b(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) a[static_cast<size_t>(i)] = static_cast<float>((i % 97) * 0.25);
      const auto spore_op = [&] { comm.allreduce(a.data(), count, DType::f32); };
      const auto mpi_op = [&] { parallel::native_mpi_allreduce_f32(comm, a.data(), b.data(), count); };
      // Iterations per loop: from one timed call, ~30 ms per loop; every rank uses rank 0's choice.
      comm.barrier();
      spore_op();
      mpi_op();
      auto t0 = clock_type::now();
      spore_op();
      double one = std::chrono::duration<double>(clock_type::now() - t0).count();
      int64_t iters = std::clamp<int64_t>(static_cast<int64_t>(0.03 / std::max(one, 1e-7)), 3, 20000);
      comm.broadcast(&iters, sizeof iters, 0);
      double best[2] = {1e30, 1e30};
      for (int round = 0; round < 5; ++round) {
        for (int which = 0; which < 2; ++which) {
          comm.barrier();
          t0 = clock_type::now();
          for (int64_t k = 0; k < iters; ++k) which == 0 ? spore_op() : mpi_op();
          comm.barrier();
          best[which] = std::min(
              best[which], std::chrono::duration<double>(clock_type::now() - t0).count() / static_cast<double>(iters));
        }
      }
      const double factor = 2.0 * (n - 1) / n, bus_s = bytes * factor / best[0] / 1e9,
                   bus_m = bytes * factor / best[1] / 1e9;
      if (!root) continue;
      if (json)
        std::printf(
            "{\"bytes\": %lld, \"ranks\": %d, \"spore_us\": %.3f, \"mpi_us\": %.3f, \"spore_busbw_gbps\": %.4f, "
            "\"mpi_busbw_gbps\": %.4f, \"ratio\": %.4f}\n",
            static_cast<long long>(bytes), n, best[0] * 1e6, best[1] * 1e6, bus_s, bus_m, bus_s / bus_m);
      else
        std::printf("%12lld %14.1f %14.1f %14.3f %14.3f %8.2f\n", static_cast<long long>(bytes), best[0] * 1e6,
                    best[1] * 1e6, bus_s, bus_m, bus_s / bus_m);
      std::fflush(stdout);
    }
    comm.barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
