// libspore_mpi.so: spore's transport over OpenMPI (the C interface in parallel/mpi_abi.h). Built only when CMake finds
// MPI; loaded by parallel::make_mpi_communicator with dlopen, so the spore binary does not link libmpi.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "parallel/mpi_abi.h"

namespace {

thread_local std::string g_error;
bool g_we_initialized = false;

int fail(const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, text, &len);
  g_error = std::string(what) + ": " + std::string(text, static_cast<size_t>(len));
  return -1;
}

int init(int* rank, int* size, int* thread_level) {
  int inited = 0;
  MPI_Initialized(&inited);
  int provided = MPI_THREAD_SINGLE;
  if (!inited) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return fail("MPI_Init_thread", rc);
    g_we_initialized = true;
  } else {
    MPI_Query_thread(&provided);
  }
  *thread_level = provided == MPI_THREAD_MULTIPLE     ? 3
                  : provided == MPI_THREAD_SERIALIZED ? 2
                  : provided == MPI_THREAD_FUNNELED   ? 1
                                                      : 0;
  // Errors come back as codes (and become spore::Error), instead of MPI aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return 0;
}

void finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_we_initialized && !finalized) MPI_Finalize();
}

MPI_Comm comm_of(void* comm) { return comm ? *static_cast<MPI_Comm*>(comm) : MPI_COMM_WORLD; }

int isend_on(void* comm, const void* data, int bytes, int peer, int tag, void** request) {
  auto* r = new MPI_Request;
  const int rc = MPI_Isend(data, bytes, MPI_BYTE, peer, tag, comm_of(comm), r);
  if (rc != MPI_SUCCESS) {
    delete r;
    return fail("MPI_Isend", rc);
  }
  *request = r;
  return 0;
}

int irecv_on(void* comm, void* data, int bytes, int peer, int tag, void** request) {
  auto* r = new MPI_Request;
  const int rc = MPI_Irecv(data, bytes, MPI_BYTE, peer, tag, comm_of(comm), r);
  if (rc != MPI_SUCCESS) {
    delete r;
    return fail("MPI_Irecv", rc);
  }
  *request = r;
  return 0;
}

int isend(const void* data, int bytes, int peer, int tag, void** request) {
  return isend_on(nullptr, data, bytes, peer, tag, request);
}
int irecv(void* data, int bytes, int peer, int tag, void** request) {
  return irecv_on(nullptr, data, bytes, peer, tag, request);
}

int comm_split(void* parent, int color, int key, void** comm, int* rank, int* size) {
  auto* c = new MPI_Comm;
  int rc = MPI_Comm_split(comm_of(parent), color, key, c);
  if (rc != MPI_SUCCESS) {
    delete c;
    return fail("MPI_Comm_split", rc);
  }
  MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
  MPI_Comm_rank(*c, rank);
  MPI_Comm_size(*c, size);
  *comm = c;
  return 0;
}

void comm_free(void* comm) {
  auto* c = static_cast<MPI_Comm*>(comm);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && *c != MPI_COMM_NULL) MPI_Comm_free(c);
  delete c;
}

int test(void* request) {
  auto* r = static_cast<MPI_Request*>(request);
  int done = 0;
  MPI_Status status;
  const int rc = MPI_Test(r, &done, &status);
  if (rc != MPI_SUCCESS) {
    delete r;
    return fail("MPI_Test", rc);
  }
  if (!done) return 0;
  delete r;
  return 1;
}

void cancel(void* request) {
  auto* r = static_cast<MPI_Request*>(request);
  if (*r != MPI_REQUEST_NULL) {
    MPI_Cancel(r);
    MPI_Request_free(r);
  }
  delete r;
}

void abort_job(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

const char* last_error() { return g_error.c_str(); }

const char* library_version() {
  static char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  if (!text[0]) {
    int len = 0;
    MPI_Get_library_version(text, &len);
    if (char* nl = std::strchr(text, '\n')) *nl = '\0';
    if (char* comma = std::strchr(text, ',')) *comma = '\0';
  }
  return text;
}

int native_allreduce_f32(const float* in, float* out, int count) {
  const int rc = MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? 0 : fail("MPI_Allreduce", rc);
}

const spore_mpi_api kApi{SPORE_MPI_ABI_VERSION,
                         init,
                         finalize,
                         isend,
                         irecv,
                         test,
                         cancel,
                         abort_job,
                         last_error,
                         library_version,
                         native_allreduce_f32,
                         comm_split,
                         comm_free,
                         isend_on,
                         irecv_on};

}  // namespace

extern "C" __attribute__((visibility("default"))) const spore_mpi_api* spore_mpi_api_v1() { return &kApi; }
