#pragma once
// The null backend: runs plans without doing any math and counts kernels and bytes moved, so
// fusion and planning tests need no data and no time.
#include <cstdint>

#include "ops/kernel.h"

namespace spore {
struct NullBackendStats {
  int64_t kernels = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
};
void register_null_kernels(KernelRegistry& r);
NullBackendStats null_backend_stats();
void reset_null_backend_stats();
}  // namespace spore
