#pragma once
// Communicators: the collectives data-parallel training needs, over one process (SingleCommunicator) or OpenMPI
// (MpiCommunicator, parallel/mpi_communicator.cpp), chosen at run time by world().
//
// Determinism: a reduction's bits never depend on timing or on which message arrives first. Every reduction over
// ranks is tree_sum (parallel/tree.h) over the ranks' contributions in rank order: rank r owns slice r of the
// vector, receives slice r from every rank, adds them in that fixed tree and sends the result back. IEEE addition is
// commutative, so only the association matters, and the tree fixes it.
//
// Faults: a rank that waits longer than timeout_seconds() for a peer throws spore::Error naming the collective, the
// peer and the limit (SPORE_COMM_TIMEOUT, seconds; default 300). A dead peer usually ends the job sooner: mpirun
// stops every rank when one exits with an error.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"

namespace spore::parallel {

enum class ReduceOp { sum, mean };  // mean: the tree sum divided by size(), in the element type

// What a communicator has done, per operation ("allreduce", ...): calls, payload bytes (this rank's buffer: the
// vector reduced, the bytes gathered or sent) and wall time inside the calls, waiting for peers included.
struct CollectiveStats {
  int64_t calls = 0, bytes = 0;
  double seconds = 0;
  double wait_seconds = 0;  // of `seconds`, the time blocked on peers' messages (MPI: polling incomplete requests)
};

// One finished operation, for an observer (a profiler timeline): steady_clock nanoseconds since its epoch.
struct CollectiveEvent {
  const char* op;  // "allreduce", "barrier", ...
  int64_t bytes;   // as CollectiveStats counts them
  int64_t start_ns, end_ns;
  double wait_seconds;
};

// The public operations count and time each call (stats()) around the implementation's do_* function.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "single" | "mpi"
  // Whether a thread other than the one that started the communicator may call it (one thread at a time; MPI:
  // MPI_THREAD_SERIALIZED provided). CommThread runs collectives on its own thread only then.
  virtual bool any_thread() const { return true; }

  // In place over `count` elements of dtype (f32 or f64): every rank ends with the same reduced bits.
  void allreduce(void* data, int64_t count, DType dtype, ReduceOp op = ReduceOp::sum);
  // in: size() * count_per_rank elements; out (count_per_rank): rank r gets slice r of the reduction.
  void reduce_scatter(const void* in, void* out, int64_t count_per_rank, DType dtype, ReduceOp op = ReduceOp::sum);
  // out (size() * bytes_per_rank bytes): rank r's `in` at offset r * bytes_per_rank.
  void allgather(const void* in, void* out, int64_t bytes_per_rank);
  void broadcast(void* data, int64_t bytes, int root);
  // Point to point; tag in [0, 16384). A recv must name the sender's byte count exactly.
  void send(const void* data, int64_t bytes, int peer, int tag = 0);
  void recv(void* data, int64_t bytes, int peer, int tag = 0);
  // Both at once (posted together, then awaited): two ranks that exchange in opposite directions - a pipeline's
  // activations one way, gradients the other - cannot deadlock on each other's blocking send.
  void sendrecv(const void* send_data, int64_t send_bytes, int dest, void* recv_data, int64_t recv_bytes, int source,
                int send_tag = 0, int recv_tag = 0);
  void barrier();
  // Collective over this communicator (MPI_Comm_split): the ranks passing the same color form a new communicator,
  // ranked by key (ties by their rank here); its collectives and messages never match this one's. Data x model
  // parallelism builds its replica and stage groups this way. The result must be destroyed before world() ends.
  // A group's operations also count in this communicator's stats(), so world().stats() is all this rank did.
  std::unique_ptr<Communicator> split(int color, int key);
  // Ends every rank of the job now (MPI_Abort); for a rank that failed while the others may wait on it.
  [[noreturn]] virtual void abort(int code) = 0;

  // A copy: the communication thread may be counting an operation meanwhile.
  std::map<std::string, CollectiveStats> stats() const;
  // Called after every operation of any communicator of this process (a group's too), on the calling thread (null:
  // none). The trainers put collectives on the active profiler's timeline this way (parallel sits below runtime and
  // knows no profiler). Set it before operations start on other threads.
  static void set_observer(std::function<void(const CollectiveEvent&)> fn);

 protected:
  // Implementations add the seconds they spend blocked on peers during the current operation.
  void add_wait_seconds(double s) { wait_s_ += s; }

  virtual void do_allreduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual void do_reduce_scatter(const void* in, void* out, int64_t count_per_rank, DType dtype, ReduceOp op) = 0;
  virtual void do_allgather(const void* in, void* out, int64_t bytes_per_rank) = 0;
  virtual void do_broadcast(void* data, int64_t bytes, int root) = 0;
  virtual void do_send(const void* data, int64_t bytes, int peer, int tag) = 0;
  virtual void do_recv(void* data, int64_t bytes, int peer, int tag) = 0;
  virtual void do_sendrecv(const void* send_data, int64_t send_bytes, int dest, void* recv_data, int64_t recv_bytes,
                           int source, int send_tag, int recv_tag) = 0;
  virtual void do_barrier() = 0;
  virtual std::unique_ptr<Communicator> do_split(int color, int key);

 private:
  template <typename Fn>
  void timed(const char* op, int64_t bytes, Fn&& fn);
  void count(const char* op, int64_t bytes, double seconds, double wait_seconds);
  mutable std::mutex stats_mu_;
  std::map<std::string, CollectiveStats> stats_;
  Communicator* parent_ = nullptr;  // the communicator this group was split from
  double wait_s_ = 0;
};

// The process's communicator: MPI when launched by mpirun (OMPI_COMM_WORLD_SIZE or PMIX_RANK in the environment,
// or SPORE_COMM=mpi), else a single process (SPORE_COMM=single forces it). The MPI implementation lives in a module
// (libspore_mpi.so, built only when MPI's headers are found) loaded with dlopen here, so spore itself never links
// libmpi; launched by mpirun without the module, this throws an error that says so.
Communicator& world();
// world() if it has been started, else null (an error handler's way to reach the other ranks without starting MPI).
Communicator* started_world();
std::unique_ptr<Communicator> make_single_communicator();
// The MPI communicator, loading the module: $SPORE_MPI_MODULE, else libspore_mpi.so beside the executable (or one
// folder up), else the library search path.
std::unique_ptr<Communicator> make_mpi_communicator();
// True when the environment says this process was started by mpirun.
bool launched_by_mpi();

// The transport's own description ("Open MPI v4.1.4"; "single" for one process).
std::string transport_version(Communicator& comm);
// MPI's own MPI_Allreduce (f32 sum, order up to the library): the baseline bench/allreduce_bench compares with.
void native_mpi_allreduce_f32(Communicator& comm, const float* in, float* out, int64_t count);

// How long a collective waits for a peer before it fails (SPORE_COMM_TIMEOUT, seconds; default 300).
double timeout_seconds();

// Start-up check that every rank runs the same configuration: fields are (name, value) pairs, the same names in the
// same order on every rank. Rank 0's values are broadcast; every rank throws (invalid_argument) if any rank differs,
// naming the first such rank, the field and both values. Collective: every rank must call it.
void check_same_config(Communicator& comm, const std::vector<std::pair<std::string, std::string>>& fields);

}  // namespace spore::parallel
