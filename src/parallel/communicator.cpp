#include "parallel/communicator.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

#include "base/error.h"

namespace spore::parallel {
namespace {

// One process: reductions over one contribution are the contribution itself (mean divides by 1, exactly).
class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 protected:
  std::unique_ptr<Communicator> do_split(int, int) override { return std::make_unique<SingleCommunicator>(); }
  void do_allreduce(void*, int64_t count, DType dtype, ReduceOp) override { check(count, dtype, "allreduce"); }
  void do_reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp) override {
    check(count, dtype, "reduce_scatter");
    if (count > 0) std::memmove(out, in, static_cast<size_t>(count) * dtype_size(dtype));
  }
  void do_allgather(const void* in, void* out, int64_t bytes) override {
    SPORE_CHECK(bytes >= 0, ErrorCode::invalid_argument, "allgather: negative byte count {}", bytes);
    if (bytes > 0) std::memmove(out, in, static_cast<size_t>(bytes));
  }
  void do_broadcast(void*, int64_t, int root) override { peer_check(root, "broadcast root"); }
  void do_send(const void*, int64_t, int peer, int) override { no_peer(peer, "send"); }
  void do_recv(void*, int64_t, int peer, int) override { no_peer(peer, "recv"); }
  void do_sendrecv(const void*, int64_t, int dest, void*, int64_t, int, int, int) override {
    no_peer(dest, "sendrecv");
  }
  void do_barrier() override {}

 private:
  static void check(int64_t count, DType dtype, const char* op) {
    SPORE_CHECK(count >= 0, ErrorCode::invalid_argument, "{}: negative element count {}", op, count);
    SPORE_CHECK(dtype == DType::f32 || dtype == DType::f64, ErrorCode::dtype_mismatch,
                "{}: reductions take f32 or f64, got {}", op, dtype_name(dtype));
  }
  static void peer_check(int peer, const char* what) {
    SPORE_CHECK(peer == 0, ErrorCode::invalid_argument, "{} {} out of range: the world has 1 rank", what, peer);
  }
  [[noreturn]] static void no_peer(int peer, const char* op) {
    SPORE_FAIL(ErrorCode::invalid_argument, "{} to/from rank {}: a single process has no peer", op, peer);
  }
};

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

}  // namespace

namespace {
std::function<void(const CollectiveEvent&)>& observer() {
  static std::function<void(const CollectiveEvent&)> fn;
  return fn;
}
}  // namespace

void Communicator::set_observer(std::function<void(const CollectiveEvent&)> fn) { observer() = std::move(fn); }

std::map<std::string, CollectiveStats> Communicator::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void Communicator::count(const char* op, int64_t bytes, double seconds, double wait_seconds) {
  for (Communicator* c = this; c != nullptr; c = c->parent_) {
    std::lock_guard<std::mutex> lock(c->stats_mu_);
    CollectiveStats& st = c->stats_[op];
    ++st.calls;
    st.bytes += bytes;
    st.seconds += seconds;
    st.wait_seconds += wait_seconds;
  }
}

template <typename Fn>
void Communicator::timed(const char* op, int64_t bytes, Fn&& fn) {
  wait_s_ = 0;
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  const auto t1 = std::chrono::steady_clock::now();
  count(op, bytes, std::chrono::duration<double>(t1 - t0).count(), wait_s_);
  if (const auto& obs = observer()) {
    const auto ns = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    };
    obs({op, bytes, ns(t0), ns(t1), wait_s_});
  }
}

void Communicator::allreduce(void* data, int64_t count, DType dtype, ReduceOp op) {
  timed("allreduce", count * static_cast<int64_t>(dtype_size(dtype)), [&] { do_allreduce(data, count, dtype, op); });
}
void Communicator::reduce_scatter(const void* in, void* out, int64_t count_per_rank, DType dtype, ReduceOp op) {
  timed("reduce_scatter", count_per_rank * size() * static_cast<int64_t>(dtype_size(dtype)),
        [&] { do_reduce_scatter(in, out, count_per_rank, dtype, op); });
}
void Communicator::allgather(const void* in, void* out, int64_t bytes_per_rank) {
  timed("allgather", bytes_per_rank * size(), [&] { do_allgather(in, out, bytes_per_rank); });
}
void Communicator::broadcast(void* data, int64_t bytes, int root) {
  timed("broadcast", bytes, [&] { do_broadcast(data, bytes, root); });
}
void Communicator::send(const void* data, int64_t bytes, int peer, int tag) {
  timed("send", bytes, [&] { do_send(data, bytes, peer, tag); });
}
void Communicator::recv(void* data, int64_t bytes, int peer, int tag) {
  timed("recv", bytes, [&] { do_recv(data, bytes, peer, tag); });
}
void Communicator::sendrecv(const void* send_data, int64_t send_bytes, int dest, void* recv_data, int64_t recv_bytes,
                            int source, int send_tag, int recv_tag) {
  timed("sendrecv", send_bytes + recv_bytes,
        [&] { do_sendrecv(send_data, send_bytes, dest, recv_data, recv_bytes, source, send_tag, recv_tag); });
}
void Communicator::barrier() {
  timed("barrier", 0, [&] { do_barrier(); });
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  std::unique_ptr<Communicator> g = do_split(color, key);
  g->parent_ = this;
  return g;
}

std::unique_ptr<Communicator> Communicator::do_split(int, int) {
  SPORE_FAIL(ErrorCode::unsupported, "the '{}' communicator cannot be split into groups", backend());
}

std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<SingleCommunicator>(); }

bool launched_by_mpi() { return env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK") || env_set("PMI_RANK"); }

namespace {
std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> comm;
  return comm;
}
}  // namespace

Communicator* started_world() { return world_slot().get(); }

Communicator& world() {
  std::unique_ptr<Communicator>& comm = world_slot();
  static std::once_flag once;
  std::call_once(once, [&comm] {
    const char* forced = std::getenv("SPORE_COMM");
    const std::string kind = forced && *forced ? forced : (launched_by_mpi() ? "mpi" : "single");
    SPORE_CHECK(kind == "mpi" || kind == "single", ErrorCode::invalid_argument,
                "SPORE_COMM='{}': expected 'mpi' or 'single'", kind);
    comm = kind == "mpi" ? make_mpi_communicator() : make_single_communicator();
  });
  SPORE_CHECK(comm != nullptr, ErrorCode::internal, "parallel::world: the communicator failed to start earlier");
  return *comm;
}

double timeout_seconds() {
  const char* v = std::getenv("SPORE_COMM_TIMEOUT");
  if (v == nullptr || *v == '\0') return 300.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  SPORE_CHECK(end && *end == '\0' && s > 0, ErrorCode::invalid_argument,
              "SPORE_COMM_TIMEOUT='{}': expected seconds > 0", v);
  return s;
}

void check_same_config(Communicator& comm, const std::vector<std::pair<std::string, std::string>>& fields) {
  if (comm.size() == 1) return;
  // Rank 0's fields as "name\0value\0...", length first.
  std::string mine;
  for (const auto& [k, v] : fields) mine += k + '\0' + v + '\0';
  int64_t len = static_cast<int64_t>(mine.size());
  comm.broadcast(&len, sizeof len, 0);
  std::string root = comm.rank() == 0 ? mine : std::string(static_cast<size_t>(len), '\0');
  if (len > 0) comm.broadcast(root.data(), len, 0);
  std::vector<std::pair<std::string, std::string>> theirs;
  for (size_t at = 0; at < root.size();) {
    const size_t k_end = root.find('\0', at), v_end = root.find('\0', k_end + 1);
    theirs.emplace_back(root.substr(at, k_end - at), root.substr(k_end + 1, v_end - k_end - 1));
    at = v_end + 1;
  }
  // The first differing field of this rank (-1: none; fields.size(): a different field list).
  int32_t bad = -1;
  for (size_t i = 0; i < fields.size() && i < theirs.size() && bad < 0; ++i)
    if (fields[i] != theirs[i]) bad = static_cast<int32_t>(i);
  if (bad < 0 && fields.size() != theirs.size()) bad = static_cast<int32_t>(std::min(fields.size(), theirs.size()));
  std::vector<int32_t> all(static_cast<size_t>(comm.size()));
  comm.allgather(&bad, all.data(), sizeof bad);
  for (int r = 0; r < comm.size(); ++r) {
    const int32_t b = all[static_cast<size_t>(r)];
    if (b < 0) continue;
    const std::string name = b < static_cast<int32_t>(theirs.size())   ? theirs[static_cast<size_t>(b)].first
                             : b < static_cast<int32_t>(fields.size()) ? fields[static_cast<size_t>(b)].first
                                                                       : "the field list";
    const std::string root_value =
        b < static_cast<int32_t>(theirs.size()) ? theirs[static_cast<size_t>(b)].second : "-";
    const std::string own = r == comm.rank() && b < static_cast<int32_t>(fields.size())
                                ? fmt::format(" ({})", fields[static_cast<size_t>(b)].second)
                                : std::string();
    SPORE_FAIL(ErrorCode::invalid_argument,
               "configuration mismatch across ranks: rank {}'s {}{} differs from rank 0's ({}); every rank must run "
               "the same settings",
               r, name, own, root_value);
  }
}

}  // namespace spore::parallel
