// MpiCommunicator: the collectives over the MPI module's point-to-point transport (parallel/mpi_abi.h).
//
// allreduce = reduce-scatter + allgather. Rank r owns slice r of the vector (slices as equal as integer division
// makes them); every rank sends slice r to rank r, which sums the size() contributions with tree_sum in rank order,
// and sends the sum back to every rank. Each rank moves 2 (N-1)/N of the vector, as a ring allreduce does, and the
// bits do not depend on arrival order. Requests are polled against a deadline (timeout_seconds()), so a missing peer
// becomes an error naming it instead of a hang.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <filesystem>
#include <thread>

#include "base/error.h"
#include "parallel/communicator.h"
#include "parallel/mpi_abi.h"
#include "parallel/tree.h"

namespace spore::parallel {
namespace {

// Tags: one per message kind of a collective; user send/recv tags follow. Messages of one kind between two ranks
// match in order (MPI's non-overtaking rule), and every rank calls the collectives in the same order.
enum Tag : int { kScatter = 1, kGather, kBroadcast, kBarrierIn, kBarrierOut, kAllgather, kUser = 64 };
constexpr int kMaxUserTag = 16384;
// MPI counts are ints: longer messages go as several.
constexpr int64_t kMaxMessage = int64_t{1} << 30;

std::string module_path_hint() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&make_mpi_communicator), &info) && info.dli_fname)
    return std::filesystem::path(info.dli_fname).parent_path().string();
  return {};
}

const spore_mpi_api* load_module(std::string& where) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("SPORE_MPI_MODULE"); env && *env) {
    candidates.push_back(env);
  } else {
    // dladdr names the executable (or the Python extension) this code is linked into.
    std::error_code ec;
    std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    for (const std::filesystem::path& dir :
         {ec ? std::filesystem::path() : exe.parent_path(), std::filesystem::path(module_path_hint())}) {
      if (dir.empty()) continue;
      candidates.push_back((dir / "libspore_mpi.so").string());
      candidates.push_back((dir.parent_path() / "libspore_mpi.so").string());
    }
    candidates.push_back("libspore_mpi.so");
  }
  std::string errors;
  for (const std::string& c : candidates) {
    if (c.find('/') != std::string::npos && !std::filesystem::exists(c)) continue;
    dlerror();
    // RTLD_GLOBAL: OpenMPI's own components resolve libmpi's symbols through the global scope.
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      const char* e = dlerror();
      errors += fmt::format("; {}: {}", c, e ? e : "dlopen failed");
      continue;
    }
    auto entry = reinterpret_cast<spore_mpi_entry_fn>(dlsym(h, SPORE_MPI_ENTRY_SYMBOL));
    SPORE_CHECK(entry != nullptr, ErrorCode::invalid_argument, "MPI module '{}' does not export {}", c,
                SPORE_MPI_ENTRY_SYMBOL);
    const spore_mpi_api* api = entry();
    SPORE_CHECK(api && api->abi_version == SPORE_MPI_ABI_VERSION, ErrorCode::invalid_argument,
                "MPI module '{}' has ABI version {}, this spore needs {}", c, api ? api->abi_version : -1,
                SPORE_MPI_ABI_VERSION);
    where = c;
    return api;
  }
  SPORE_FAIL(ErrorCode::unavailable,
             "launched under MPI but spore's MPI module (libspore_mpi.so) cannot be loaded{} - build spore with "
             "OpenMPI's headers (libopenmpi-dev) or set SPORE_MPI_MODULE; SPORE_COMM=single runs each rank alone",
             errors.empty() ? " (not found)" : errors);
}

// What this rank is doing, for the SIGTERM report below (plain atomics: the handler may only read them).
struct Activity {
  std::atomic<int> rank{-1};
  std::atomic<const char*> op{nullptr};    // the collective being waited on, null between collectives
  std::atomic<const char*> last{nullptr};  // the last collective entered
  std::atomic<int> peer{-1};               // the first peer still missing in op
  std::atomic<int64_t> calls{0};           // collective waits so far
};
Activity g_activity;
struct sigaction g_previous_term {};

// Appends text / a decimal number to buf (async-signal-safe: no allocation, no locale).
size_t put(char* buf, size_t at, size_t cap, const char* text) {
  while (text && *text && at + 1 < cap) buf[at++] = *text++;
  return at;
}
size_t put(char* buf, size_t at, size_t cap, int64_t v) {
  char digits[24];
  int n = 0;
  const bool neg = v < 0;
  uint64_t u = neg ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  do {
    digits[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0 && n < 23);
  if (neg && at + 1 < cap) buf[at++] = '-';
  while (n > 0 && at + 1 < cap) buf[at++] = digits[--n];
  return at;
}

// When one rank dies, mpirun ends the job: it sends SIGTERM to every other rank (then SIGKILL) and prints which rank
// died. This handler adds the surviving rank's side - which collective it was in and which peer it waited for - then
// lets SIGTERM do what it did before.
void report_sigterm(int sig) {
  char buf[512];
  size_t n = put(buf, 0, sizeof buf, "spore: rank ");
  n = put(buf, n, sizeof buf, static_cast<int64_t>(g_activity.rank.load()));
  n = put(buf, n, sizeof buf, " terminated by SIGTERM (mpirun ends the job when a rank fails; it names that rank) ");
  if (const char* op = g_activity.op.load()) {
    n = put(buf, n, sizeof buf, "in ");
    n = put(buf, n, sizeof buf, op);
    n = put(buf, n, sizeof buf, " waiting for rank ");
    n = put(buf, n, sizeof buf, static_cast<int64_t>(g_activity.peer.load()));
  } else if (const char* last = g_activity.last.load()) {
    n = put(buf, n, sizeof buf, "between collectives, computing after ");
    n = put(buf, n, sizeof buf, last);
  } else {
    n = put(buf, n, sizeof buf, "before its first collective");
  }
  n = put(buf, n, sizeof buf, " (collective wait #");
  n = put(buf, n, sizeof buf, g_activity.calls.load());
  n = put(buf, n, sizeof buf, ")\n");
  [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, buf, n);
  sigaction(sig, &g_previous_term, nullptr);
  std::raise(sig);
}

void install_sigterm_report(int rank) {
  g_activity.rank = rank;
  struct sigaction sa {};
  sa.sa_handler = report_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGTERM, &sa, &g_previous_term);
}

struct Pending {
  void* request;
  int peer;
  bool is_recv;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() : timeout_(timeout_seconds()) {
    api_ = load_module(path_);
    if (api_->init(&rank_, &size_, &thread_level_) != 0)
      SPORE_FAIL(ErrorCode::unavailable, "MPI start-up failed: {}", api_->last_error());
    install_sigterm_report(rank_);
  }
  // A group of `parent`'s ranks (Communicator::split): the same transport on the MPI communicator `comm`.
  MpiCommunicator(const MpiCommunicator& parent, void* comm, int rank, int size)
      : api_(parent.api_), path_(parent.path_), rank_(rank), size_(size), timeout_(parent.timeout_), comm_(comm) {}
  ~MpiCommunicator() override {
    if (comm_ != nullptr) api_->comm_free(comm_);
    else api_->finalize();
  }

  std::unique_ptr<Communicator> do_split(int color, int key) override {
    check_usable();
    SPORE_CHECK(color >= 0, ErrorCode::invalid_argument, "split: color {} must be >= 0", color);
    void* comm = nullptr;
    int rank = 0, size = 0;
    if (api_->comm_split(comm_, color, key, &comm, &rank, &size) != 0)
      SPORE_FAIL(ErrorCode::unavailable, "MPI_Comm_split on rank {} failed: {}", rank_, api_->last_error());
    return std::make_unique<MpiCommunicator>(*this, comm, rank, size);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  bool any_thread() const override { return thread_level_ >= 2; }  // MPI_THREAD_SERIALIZED or more

  [[noreturn]] void abort(int code) override {
    // MPI_Abort normally ends the whole job; should it stall (several ranks aborting at once, a launcher already
    // gone), this process still exits, and mpirun ends the others when it sees a rank exit with an error.
    std::thread([code] {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      std::_Exit(code);
    }).detach();
    api_->abort(code);
    std::_Exit(code);
  }

  void native_allreduce(const float* in, float* out, int64_t count) {
    SPORE_CHECK(count >= 0 && count <= INT_MAX, ErrorCode::invalid_argument, "MPI_Allreduce: count {} out of range",
                count);
    if (api_->native_allreduce_f32(in, out, static_cast<int>(count)) != 0)
      SPORE_FAIL(ErrorCode::unavailable, "MPI_Allreduce failed: {}", api_->last_error());
  }
  std::string library_version() const { return api_->library_version(); }

 protected:
  void do_allreduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    check_reduce(count, dtype, "allreduce");
    if (count == 0) return;
    const size_t es = dtype_size(dtype);
    char* bytes = static_cast<char*>(data);
    const auto begin = [&](int r) { return count * r / size_; };
    const int64_t mine = begin(rank_ + 1) - begin(rank_);
    reduce_slices(
        "allreduce", [&](int r) { return bytes + begin(r) * static_cast<int64_t>(es); },
        [&](int r) { return begin(r + 1) - begin(r); }, mine, dtype, op, bytes + begin(rank_) * es);
    // Allgather the reduced slices in place.
    std::vector<Pending> reqs;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      post_recv(reqs, bytes + begin(p) * es, (begin(p + 1) - begin(p)) * static_cast<int64_t>(es), p, kGather);
      post_send(reqs, bytes + begin(rank_) * es, mine * static_cast<int64_t>(es), p, kGather);
    }
    wait("allreduce", reqs);
  }

  void do_reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override {
    check_reduce(count, dtype, "reduce_scatter");
    if (count == 0) return;
    const size_t es = dtype_size(dtype);
    const char* bytes = static_cast<const char*>(in);
    std::memcpy(out, bytes + static_cast<size_t>(rank_ * count) * es, static_cast<size_t>(count) * es);
    reduce_slices(
        "reduce_scatter", [&](int r) { return const_cast<char*>(bytes) + static_cast<size_t>(r * count) * es; },
        [&](int) { return count; }, count, dtype, op, static_cast<char*>(out), /*own_in_out=*/true);
  }

  void do_allgather(const void* in, void* out, int64_t bytes_per_rank) override {
    SPORE_CHECK(bytes_per_rank >= 0, ErrorCode::invalid_argument, "allgather: negative byte count {}", bytes_per_rank);
    char* o = static_cast<char*>(out);
    if (bytes_per_rank > 0) std::memmove(o + rank_ * bytes_per_rank, in, static_cast<size_t>(bytes_per_rank));
    std::vector<Pending> reqs;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      post_recv(reqs, o + p * bytes_per_rank, bytes_per_rank, p, kAllgather);
      post_send(reqs, o + rank_ * bytes_per_rank, bytes_per_rank, p, kAllgather);
    }
    wait("allgather", reqs);
  }

  void do_broadcast(void* data, int64_t bytes, int root) override {
    check_peer(root, "broadcast root");
    std::vector<Pending> reqs;
    if (rank_ == root) {
      for (int p = 0; p < size_; ++p)
        if (p != root) post_send(reqs, data, bytes, p, kBroadcast);
    } else {
      post_recv(reqs, data, bytes, root, kBroadcast);
    }
    wait("broadcast", reqs);
  }

  void do_send(const void* data, int64_t bytes, int peer, int tag) override {
    check_user(peer, tag, "send");
    std::vector<Pending> reqs;
    post_send(reqs, data, bytes, peer, kUser + tag);
    wait("send", reqs);
  }

  void do_recv(void* data, int64_t bytes, int peer, int tag) override {
    check_user(peer, tag, "recv");
    std::vector<Pending> reqs;
    post_recv(reqs, data, bytes, peer, kUser + tag);
    wait("recv", reqs);
  }

  void do_sendrecv(const void* send_data, int64_t send_bytes, int dest, void* recv_data, int64_t recv_bytes, int source,
                   int send_tag, int recv_tag) override {
    check_user(dest, send_tag, "sendrecv");
    check_user(source, recv_tag, "sendrecv");
    std::vector<Pending> reqs;
    post_recv(reqs, recv_data, recv_bytes, source, kUser + recv_tag);
    post_send(reqs, send_data, send_bytes, dest, kUser + send_tag);
    wait("sendrecv", reqs);
  }

  // Everyone reports to rank 0, which releases everyone: a rank that never arrives is named by rank 0.
  void do_barrier() override {
    char none = 0;
    std::vector<Pending> reqs;
    if (rank_ == 0) {
      for (int p = 1; p < size_; ++p) post_recv(reqs, &none, 0, p, kBarrierIn);
      wait("barrier", reqs);
      for (int p = 1; p < size_; ++p) post_send(reqs, &none, 0, p, kBarrierOut);
    } else {
      post_send(reqs, &none, 0, 0, kBarrierIn);
      post_recv(reqs, &none, 0, 0, kBarrierOut);
    }
    wait("barrier", reqs);
  }

 private:
  // Sends slice r (at slice(r), count(r) elements) to rank r for every r, receives this rank's slice from every rank
  // and writes their tree_sum (rank order) to `result`. With own_in_out the own contribution is already in result.
  template <typename SliceAt, typename CountOf>
  void reduce_slices(const char* op_name, SliceAt slice, CountOf count_of, int64_t mine, DType dtype, ReduceOp op,
                     char* result, bool own_in_out = false) {
    const size_t es = dtype_size(dtype);
    const int64_t slice_bytes = mine * static_cast<int64_t>(es);
    scratch_.resize(static_cast<size_t>(slice_bytes) * static_cast<size_t>(size_));
    std::vector<Pending> reqs;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      post_recv(reqs, scratch_.data() + static_cast<size_t>(p * slice_bytes), slice_bytes, p, kScatter);
      post_send(reqs, slice(p), count_of(p) * static_cast<int64_t>(es), p, kScatter);
    }
    wait(op_name, reqs);
    char* own = own_in_out ? result : slice(rank_);
    std::vector<char*> parts(static_cast<size_t>(size_));
    for (int p = 0; p < size_; ++p)
      parts[p] = p == rank_ ? own : scratch_.data() + static_cast<size_t>(p * slice_bytes);
    if (dtype == DType::f32) {
      finish<float>(parts, mine, op, result);
    } else {
      finish<double>(parts, mine, op, result);
    }
  }

  template <typename T>
  void finish(const std::vector<char*>& raw, int64_t n, ReduceOp op, char* result) {
    std::vector<T*> parts;
    for (char* p : raw) parts.push_back(reinterpret_cast<T*>(p));
    tree_sum<T>(parts, n);
    T* out = reinterpret_cast<T*>(result);
    if (n > 0 && parts[0] != out) std::memcpy(out, parts[0], static_cast<size_t>(n) * sizeof(T));  // n 0: maybe null
    if (op == ReduceOp::mean)
      for (int64_t e = 0; e < n; ++e) out[e] = out[e] / static_cast<T>(size_);
  }

  void post_send(std::vector<Pending>& reqs, const void* data, int64_t bytes, int peer, int tag) {
    check_usable();
    const char* d = static_cast<const char*>(data);
    int64_t off = 0;
    do {
      const int n = static_cast<int>(std::min(bytes - off, kMaxMessage));
      void* r = nullptr;
      if (api_->isend_on(comm_, d + off, n, peer, tag, &r) != 0) fail_now("send", peer);
      reqs.push_back({r, peer, false});
      off += n;
    } while (off < bytes);
  }

  void post_recv(std::vector<Pending>& reqs, void* data, int64_t bytes, int peer, int tag) {
    check_usable();
    char* d = static_cast<char*>(data);
    int64_t off = 0;
    do {
      const int n = static_cast<int>(std::min(bytes - off, kMaxMessage));
      void* r = nullptr;
      if (api_->irecv_on(comm_, d + off, n, peer, tag, &r) != 0) fail_now("recv", peer);
      reqs.push_back({r, peer, true});
      off += n;
    } while (off < bytes);
  }

  // Polls until every request completes; past the deadline, cancels the rest and names the first peer missing.
  void wait(const char* op, std::vector<Pending>& reqs) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    int64_t idle_polls = 0;
    if (!reqs.empty()) {
      g_activity.peer = reqs.front().peer;
      g_activity.last = op;
      g_activity.op = op;
      ++g_activity.calls;
    }
    struct Leave {
      MpiCommunicator* self;
      clock::time_point start;
      ~Leave() {
        g_activity.op = nullptr;
        self->add_wait_seconds(std::chrono::duration<double>(clock::now() - start).count());
      }
    } leave{this, start};
    while (!reqs.empty()) {
      bool progressed = false;
      for (size_t i = 0; i < reqs.size();) {
        const int rc = api_->test(reqs[i].request);
        if (rc == 0) {
          if (i == 0) g_activity.peer = reqs[0].peer;
          ++i;
          continue;
        }
        const Pending done = reqs[i];
        reqs.erase(reqs.begin() + static_cast<std::ptrdiff_t>(i));
        progressed = true;
        if (rc < 0) {
          for (Pending& p : reqs) api_->cancel(p.request);
          reqs.clear();
          broken_ = op;
          SPORE_FAIL(ErrorCode::unavailable, "{}: rank {} failed to {} rank {}: {}", op, rank_,
                     done.is_recv ? "receive from" : "send to", done.peer, api_->last_error());
        }
      }
      if (reqs.empty()) break;
      if (progressed) {
        idle_polls = 0;
        continue;
      }
      // Spin briefly, then yield: ranks often share cores (mpirun --oversubscribe), and a spinning rank would
      // take the core its peer needs. Long waits sleep between polls and check the deadline.
      if (++idle_polls < 64) continue;
      const double waited = std::chrono::duration<double>(clock::now() - start).count();
      if (waited > timeout_) {
        const Pending first = reqs.front();
        for (Pending& p : reqs) api_->cancel(p.request);
        reqs.clear();
        broken_ = op;
        SPORE_FAIL(ErrorCode::unavailable,
                   "{}: rank {} timed out after {:.0f} s waiting {} rank {} (a peer that died or hangs; "
                   "SPORE_COMM_TIMEOUT sets the limit in seconds)",
                   op, rank_, timeout_, first.is_recv ? "for data from" : "to send to", first.peer);
      }
      if (waited > 0.01) std::this_thread::sleep_for(std::chrono::microseconds(50));
      else std::this_thread::yield();
    }
  }

  // After a failed or timed-out collective, messages of it may still arrive and would match the next one's receives.
  void check_usable() const {
    SPORE_CHECK(broken_.empty(), ErrorCode::unavailable,
                "the MPI communicator is unusable after its failed {} on rank {}: end the job", broken_, rank_);
  }

  [[noreturn]] void fail_now(const char* what, int peer) {
    SPORE_FAIL(ErrorCode::unavailable, "{} to/from rank {} failed on rank {}: {}", what, peer, rank_,
               api_->last_error());
  }

  void check_reduce(int64_t count, DType dtype, const char* op) const {
    SPORE_CHECK(count >= 0, ErrorCode::invalid_argument, "{}: negative element count {}", op, count);
    SPORE_CHECK(dtype == DType::f32 || dtype == DType::f64, ErrorCode::dtype_mismatch,
                "{}: reductions take f32 or f64, got {}", op, dtype_name(dtype));
  }
  void check_peer(int peer, const char* what) const {
    SPORE_CHECK(peer >= 0 && peer < size_, ErrorCode::invalid_argument, "{} {} out of range [0, {})", what, peer,
                size_);
  }
  void check_user(int peer, int tag, const char* op) const {
    check_peer(peer, op);
    SPORE_CHECK(peer != rank_, ErrorCode::invalid_argument, "{}: rank {} cannot {} itself", op, rank_, op);
    SPORE_CHECK(tag >= 0 && tag < kMaxUserTag, ErrorCode::invalid_argument, "{}: tag {} out of range [0, {})", op, tag,
                kMaxUserTag);
  }

  const spore_mpi_api* api_ = nullptr;
  std::string path_;
  int rank_ = 0, size_ = 1;
  int thread_level_ = 0;  // MPI's, 0 single .. 3 multiple
  double timeout_;
  std::vector<char> scratch_;
  std::string broken_;    // the collective that failed; empty while usable
  void* comm_ = nullptr;  // the module's MPI communicator of a split group; null: MPI_COMM_WORLD
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

std::string transport_version(Communicator& comm) {
  if (auto* m = dynamic_cast<MpiCommunicator*>(&comm)) return m->library_version();
  return comm.backend();
}

void native_mpi_allreduce_f32(Communicator& comm, const float* in, float* out, int64_t count) {
  auto* m = dynamic_cast<MpiCommunicator*>(&comm);
  SPORE_CHECK(m != nullptr, ErrorCode::unsupported, "native MPI_Allreduce needs the MPI communicator, this is '{}'",
              comm.backend());
  m->native_allreduce(in, out, count);
}

}  // namespace spore::parallel
