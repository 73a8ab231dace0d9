#pragma once
// The C interface between spore (parallel/mpi_communicator.cpp) and its MPI module (parallel/module/mpi.cpp, built
// as libspore_mpi.so). Only the module includes <mpi.h> and links libmpi; this header is plain C so the module and
// spore share no C++ ABI. The module is a thin transport (MPI point-to-point with polled requests): the collective
// algorithms, and so their deterministic order, stay in spore.
#include <stdint.h>

#define SPORE_MPI_ABI_VERSION 2
#define SPORE_MPI_ENTRY_SYMBOL "spore_mpi_api_v1"

#ifdef __cplusplus
extern "C" {
#endif

struct spore_mpi_api {
  int abi_version;  // SPORE_MPI_ABI_VERSION
  // Every int-returning call gives 0 on success, else -1 with the reason in last_error().
  // MPI_Init_thread asking for MPI_THREAD_SERIALIZED (any thread may call, one at a time: spore's communication
  // thread) unless MPI is initialized; MPI_COMM_WORLD. thread_level: what MPI provides, 0 single .. 3 multiple.
  int (*init)(int* rank, int* size, int* thread_level);
  void (*finalize)(void);
  int (*isend)(const void* data, int bytes, int peer, int tag, void** request);
  int (*irecv)(void* data, int bytes, int peer, int tag, void** request);
  // 1: done (the request is freed), 0: pending, -1: failed (freed).
  int (*test)(void* request);
  void (*cancel)(void* request);  // cancels and frees a pending request
  void (*abort)(int code);
  const char* (*last_error)(void);
  const char* (*library_version)(void);  // MPI_Get_library_version's first line
  // MPI's own MPI_Allreduce (f32, sum) on MPI_COMM_WORLD: the baseline the bench compares with.
  int (*native_allreduce_f32)(const float* in, float* out, int count);
  // Version 2: sub-communicators. comm_split is MPI_Comm_split of `parent` (null: MPI_COMM_WORLD), collective over it:
  // the ranks passing one color form one communicator, ranked by key (then by their rank in parent).
  int (*comm_split)(void* parent, int color, int key, void** comm, int* rank, int* size);
  void (*comm_free)(void* comm);
  // isend / irecv on `comm` (null: MPI_COMM_WORLD); peer is a rank of that communicator.
  int (*isend_on)(void* comm, const void* data, int bytes, int peer, int tag, void** request);
  int (*irecv_on)(void* comm, void* data, int bytes, int peer, int tag, void** request);
};

typedef const struct spore_mpi_api* (*spore_mpi_entry_fn)(void);

#ifdef __cplusplus
}
#endif
