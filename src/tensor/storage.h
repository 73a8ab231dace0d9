#pragma once
// Tensor memory: 64-byte aligned blocks on a device (tensor/device.h; the host unless asked). Host blocks are
// counted against a process-wide budget: exceeding it (set_memory_limit) fails with an out_of_memory error that
// says how much was asked and what is in use, instead of letting the OS kill the process later.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "tensor/device.h"

namespace spore {

inline constexpr size_t tensor_alignment = 64;

class Storage {
 public:
  // Allocates `bytes` (64-byte aligned). `what` names the tensor in the error if the budget is exceeded.
  static std::shared_ptr<Storage> allocate(size_t bytes, const char* what = nullptr, Device device = host_device);
  // Wraps memory owned elsewhere (an mmap'd file, an arena); `release` runs when the last user goes.
  static std::shared_ptr<Storage> wrap(void* data, size_t bytes, std::function<void()> release = {},
                                       Device device = host_device);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool owned_ = false;
  Device device_;
  std::function<void()> release_;
};

// Process-wide cap on bytes allocated through Storage::allocate (0 = unlimited).
void set_memory_limit(size_t bytes);
size_t memory_limit();
size_t memory_in_use();
size_t memory_peak();
void reset_memory_peak();

// Freed large blocks are cached for reuse (eager ops allocate the same sizes again and again).
size_t memory_cached();
void trim_memory_cache();                 // returns every cached block to the system
void set_memory_cache_limit(size_t bytes);  // default 1 GiB

// Makes the pages under [p, p + bytes) resident and writable without changing a byte (Linux
// MADV_POPULATE_WRITE, one call for the range). A first-touch fault per 4 KiB page costs far more than populating
// the range in one call (docs/PERFORMANCE.md), so memory that will be written piece by piece on a hot path (a
// KV cache filling one row per token) is populated ahead in larger steps. Best effort: where the kernel lacks it,
// or part of the range is not mapped, the pages simply fault in later as before.
void populate_pages(void* p, size_t bytes);

// Parses "512MB", "2GiB", "1000" (bytes); throws invalid_argument on anything else.
size_t parse_byte_size(const char* text);

}  // namespace spore
