// The communicator's collectives against references computed locally, run by mpi_run.py under
// `mpirun -np N` (and alone, on the single-process communicator). Every rank can generate every rank's input
// (keyed by rank and element), so each checks its result bit for bit against tree_sum in rank order - the documented
// order (parallel/tree.h) - for every op, f32 and f64, sum and mean, and sizes that do not split evenly.
// `collectives timeout` checks that a broadcast whose root never sends fails within SPORE_COMM_TIMEOUT,
// naming the collective and the peer, and that the communicator refuses work after it. Exit 0 when every check passes;
// failures print "FAIL ..." lines.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "parallel/communicator.h"
#include "parallel/tree.h"

using namespace spore;
using namespace spore::parallel;

namespace {

int failures = 0;

void fail(const std::string& what) {
  ++failures;
  std::cout << "FAIL " << what << std::endl;
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Values of many magnitudes and both signs, so another summation order gives other bits.
template <typename T>
T value(int rank, int64_t i, uint64_t salt) {
  const uint64_t h = mix(salt * 1000003u + static_cast<uint64_t>(rank) * 0x1000193u + static_cast<uint64_t>(i));
  const double mant = 1.0 + static_cast<double>(h & 0xFFFFFF) / 16777216.0;
  const int exp = static_cast<int>((h >> 24) % 24) - 12;
  return static_cast<T>(((h >> 40) & 1 ? -1.0 : 1.0) * std::ldexp(mant, exp));
}

template <typename T>
std::vector<T> input(int rank, int64_t n, uint64_t salt) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value<T>(rank, i, salt);
  return v;
}

// tree_sum of every rank's input in rank order (the mean divides the sum by the rank count).
template <typename T>
std::vector<T> reference(int ranks, int64_t n, uint64_t salt, ReduceOp op) {
  std::vector<std::vector<T>> all;
  for (int r = 0; r < ranks; ++r) all.push_back(input<T>(r, n, salt));
  std::vector<T*> parts;
  for (auto& a : all) parts.push_back(a.data());
  tree_sum<T>(parts, n);
  std::vector<T> out(parts[0], parts[0] + n);
  if (op == ReduceOp::mean)
    for (T& x : out) x = x / static_cast<T>(ranks);
  return out;
}

template <typename T>
bool same_bits(const T* a, const T* b, int64_t n) {
  return n == 0 || std::memcmp(a, b, static_cast<size_t>(n) * sizeof(T)) == 0;
}

template <typename T>
void check_reductions(Communicator& c, int64_t n, uint64_t salt) {
  const DType dt = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  const std::string tag = std::string(dtype_name(dt)) + " n=" + std::to_string(n);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean}) {
    const char* opn = op == ReduceOp::sum ? "sum" : "mean";
    std::vector<T> v = input<T>(c.rank(), n, salt);
    c.allreduce(v.data(), n, dt, op);
    const std::vector<T> want = reference<T>(c.size(), n, salt, op);
    if (!same_bits(v.data(), want.data(), n)) fail("allreduce " + std::string(opn) + " " + tag);
    // reduce_scatter: n elements per rank.
    std::vector<T> in = input<T>(c.rank(), n * c.size(), salt + 7), out(static_cast<size_t>(n));
    c.reduce_scatter(in.data(), out.data(), n, dt, op);
    const std::vector<T> all = reference<T>(c.size(), n * c.size(), salt + 7, op);
    if (!same_bits(out.data(), all.data() + n * c.rank(), n)) fail("reduce_scatter " + std::string(opn) + " " + tag);
  }
}

void check_moves(Communicator& c, int64_t bytes, uint64_t salt) {
  const std::string tag = " bytes=" + std::to_string(bytes);
  const auto data_of = [&](int r) {
    std::vector<char> d(static_cast<size_t>(bytes));
    for (int64_t i = 0; i < bytes; ++i) d[static_cast<size_t>(i)] = static_cast<char>(mix(salt + r * 977u + i));
    return d;
  };
  std::vector<char> mine = data_of(c.rank()), all(static_cast<size_t>(bytes * c.size()));
  c.allgather(mine.data(), all.data(), bytes);
  for (int r = 0; r < c.size(); ++r)
    if (bytes && std::memcmp(all.data() + r * bytes, data_of(r).data(), static_cast<size_t>(bytes)) != 0)
      fail("allgather slot " + std::to_string(r) + tag);
  for (int root = 0; root < c.size(); ++root) {
    std::vector<char> b = c.rank() == root ? data_of(root) : std::vector<char>(static_cast<size_t>(bytes));
    c.broadcast(b.data(), bytes, root);
    if (b != data_of(root)) fail("broadcast root " + std::to_string(root) + tag);
  }
  if (c.size() > 1) {  // a ring: even ranks send first, odd ranks receive first
    const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
    std::vector<char> got(static_cast<size_t>(bytes));
    if (c.rank() % 2 == 0) {
      c.send(mine.data(), bytes, next, 3);
      c.recv(got.data(), bytes, prev, 3);
    } else {
      c.recv(got.data(), bytes, prev, 3);
      c.send(mine.data(), bytes, next, 3);
    }
    if (got != data_of(prev)) fail("send/recv from " + std::to_string(prev) + tag);
    // Every rank sends to next and receives from prev at once (blocking sends would deadlock above the eager limit).
    std::vector<char> both(static_cast<size_t>(bytes));
    c.sendrecv(mine.data(), bytes, next, both.data(), bytes, prev, 5, 5);
    if (both != data_of(prev)) fail("sendrecv from " + std::to_string(prev) + tag);
  }
  c.barrier();
}

// The documented order is not a right-to-left sum (v0 + (v1 + (v2 + ...))): on these inputs the two differ, so the
// checks above would see a communicator that added in another association.
void check_sensitivity(int ranks) {
  if (ranks < 3) return;
  const int64_t n = 4096;
  std::vector<float> seq(static_cast<size_t>(n), 0.0f);
  for (int r = ranks - 1; r >= 0; --r) {
    const std::vector<float> v = input<float>(r, n, 99);
    for (int64_t i = 0; i < n; ++i)
      seq[static_cast<size_t>(i)] = v[static_cast<size_t>(i)] + seq[static_cast<size_t>(i)];
  }
  const std::vector<float> tree = reference<float>(ranks, n, 99, ReduceOp::sum);
  if (same_bits(seq.data(), tree.data(), n)) fail("right-to-left sum equals the tree on every element");
}

// Communicator::split: groups of the ranks with one color, ranked by key (here in reverse), whose collectives match the
// tree order over the group and whose messages never match the parent's (same peer, same tag, both in flight).
void check_split(Communicator& c) {
  const int color = c.rank() % 2;
  std::unique_ptr<Communicator> g = c.split(color, -c.rank());
  int expect_size = 0, expect_rank = 0;
  for (int r = 0; r < c.size(); ++r)
    if (r % 2 == color) {
      ++expect_size;
      if (r > c.rank()) ++expect_rank;  // higher world ranks come first (key -rank)
    }
  if (g->size() != expect_size || g->rank() != expect_rank)
    fail("split: rank " + std::to_string(g->rank()) + "/" + std::to_string(g->size()) + " on world rank " +
         std::to_string(c.rank()));
  for (int64_t n : {0, 1, 5, 4099}) {
    check_reductions<float>(*g, n, static_cast<uint64_t>(n) + 11);
    check_reductions<double>(*g, n, static_cast<uint64_t>(n) + 12);
  }
  check_moves(*g, 13, 14);
  // Rank 0 and 1 of the world are in different groups; 0 and 2 share one. 0 sends to 2 on the group and on the world
  // with the same tag, the world message first; 2 receives the group's first.
  if (c.size() >= 3 && (c.rank() == 0 || c.rank() == 2)) {
    const int peer_world = 2 - c.rank();
    const int peer_group = g->rank() == 0 ? 1 : 0;
    int64_t a = 0, b = 0;
    if (c.rank() == 0) {
      a = 111;
      b = 222;
      c.send(&a, sizeof a, peer_world, 7);
      g->send(&b, sizeof b, peer_group, 7);
    } else {
      g->recv(&b, sizeof b, peer_group, 7);
      c.recv(&a, sizeof a, peer_world, 7);
      if (a != 111 || b != 222) fail("split: a group's message matched the world's (or the other way round)");
    }
  }
  g->barrier();
  c.barrier();
}

int run_timeout(Communicator& c) {
  if (c.size() < 2) {
    std::cout << "timeout case needs 2+ ranks" << std::endl;
    return 1;
  }
  if (c.rank() == 0) {
    const auto expect = [&](const char* op, auto&& call) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        call();
        fail(std::string(op) + " returned without its peer");
      } catch (const Error& e) {
        const std::string m = e.what();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::cout << "rank 0 got, after " << s << " s: " << m << std::endl;
        if (m.find(op) == std::string::npos || m.find("rank 1") == std::string::npos || s > 10)
          fail(std::string(op) + " timeout message or delay: " + m);
      }
    };
    int64_t x = 0;
    expect("broadcast", [&] { c.broadcast(&x, sizeof x, 1); });
    // Late messages of the failed collective could match the next one's receives: the communicator refuses.
    try {
      c.recv(&x, sizeof x, 1, 5);
      fail("recv after a timeout accepted");
    } catch (const Error& e) {
      if (std::string(e.what()).find("unusable") == std::string::npos)
        fail(std::string("after a timeout: ") + e.what());
    }
  }
  // The others never send; they outlive rank 0's waits, then everyone leaves.
  if (c.rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(4));
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Communicator& c = world();
    if (argc > 1 && std::string(argv[1]) == "timeout") return run_timeout(c);
    for (int64_t n : {0, 1, 2, 3, 5, 7, 64, 1000, 4099, 65537, (1 << 18) + 3}) {
      check_reductions<float>(c, n, static_cast<uint64_t>(n) + 1);
      check_reductions<double>(c, n, static_cast<uint64_t>(n) + 2);
    }
    for (int64_t b : {0, 1, 13, 4096, 100003}) check_moves(c, b, static_cast<uint64_t>(b) + 3);
    if (c.rank() == 0) check_sensitivity(c.size());
    check_split(c);
    // Bad input is an error, not a crash.
    try {
      float f = 0;
      c.allreduce(&f, 1, DType::i32);
      fail("allreduce on i32 accepted");
    } catch (const Error&) {
    }
    try {
      c.broadcast(nullptr, 0, c.size());
      fail("broadcast from an out-of-range root accepted");
    } catch (const Error&) {
    }
    c.barrier();
    std::cout << "rank " << c.rank() << "/" << c.size() << " (" << c.backend() << ", " << transport_version(c)
              << "): " << (failures ? "FAILED" : "all collectives match the tree order") << std::endl;
  } catch (const std::exception& e) {
    std::cout << "FAIL error: " << e.what() << std::endl;
    return 1;
  }
  return failures ? 1 : 0;
}
