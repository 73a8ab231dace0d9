#include "tensor/storage.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"

namespace spore {
namespace {
std::atomic<size_t> g_limit{0}, g_in_use{0}, g_peak{0};

// Large blocks are 2 MiB aligned and marked for transparent huge pages: every large block is a fresh
// mmap, and first-touch faults on 4 KiB pages made a 64 MiB eager add ~4x slower than the kernel.
constexpr size_t huge_page = size_t{2} << 20;
constexpr size_t huge_threshold = size_t{8} << 20;

void* host_alloc(size_t bytes) {
  if (bytes < huge_threshold) return std::aligned_alloc(tensor_alignment, bytes);
  const size_t padded = (bytes + huge_page - 1) / huge_page * huge_page;  // aligned_alloc wants a multiple
  void* p = std::aligned_alloc(huge_page, padded);
#ifdef MADV_HUGEPAGE
  if (p) madvise(p, padded, MADV_HUGEPAGE);  // advisory: ignored where THP is off
#endif
  return p;
}

// Freed blocks are kept per exact size and handed out again: eager ops and plan outputs allocate the same
// sizes over and over. A fresh large block costs page faults on first touch; small blocks went through
// aligned_alloc/free, and glibc trimming the heap top after a free made the next 32 KiB activation fault its
// pages in again (an eager relu ran ~5x slower than the same kernel in a plan's arena).
// Bounded (set_memory_cache_limit) and trimmed before the memory limit would be exceeded.
constexpr size_t cache_min_block = size_t{64} << 10;
// Blocks below cache_min_block sit in one list per 64-byte size class (no hashing on the hot path).
// Under AddressSanitizer small blocks are not cached, so use-after-free on them stays detectable.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool cache_small = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool cache_small = false;
#else
constexpr bool cache_small = true;
#endif
#else
constexpr bool cache_small = true;
#endif
constexpr size_t small_classes = cache_min_block / tensor_alignment;
struct BlockCache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // >= cache_min_block
  std::vector<void*> small[small_classes];                     // [size / 64], sizes < cache_min_block
  size_t bytes = 0;
  size_t cap = size_t{1} << 30;
};
BlockCache& cache() {
  static BlockCache* c = new BlockCache();  // leaked on purpose: storages may die during static teardown
  return *c;
}
bool cacheable(size_t size) { return size >= cache_min_block || (cache_small && size > 0); }
std::vector<void*>* small_list(BlockCache& c, size_t size) {
  return size < cache_min_block ? &c.small[size / tensor_alignment] : nullptr;
}
void* cache_take(size_t size) {
  if (!cacheable(size)) return nullptr;
  BlockCache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  std::vector<void*>* list = small_list(c, size);
  if (!list) {
    auto it = c.free_blocks.find(size);
    if (it == c.free_blocks.end()) return nullptr;
    list = &it->second;
  }
  if (list->empty()) return nullptr;
  void* p = list->back();
  list->pop_back();
  c.bytes -= size;
  return p;
}
bool cache_give(void* p, size_t size) {
  if (!cacheable(size)) return false;
  BlockCache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  if (c.bytes + size > c.cap) return false;
  std::vector<void*>* list = small_list(c, size);
  (list ? *list : c.free_blocks[size]).push_back(p);
  c.bytes += size;
  return true;
}
}  // namespace

void trim_memory_cache() {
  BlockCache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  for (auto& [size, blocks] : c.free_blocks)
    for (void* p : blocks) std::free(p);
  c.free_blocks.clear();
  for (auto& blocks : c.small) {
    for (void* p : blocks) std::free(p);
    blocks.clear();
  }
  c.bytes = 0;
}
size_t memory_cached() {
  std::lock_guard<std::mutex> lk(cache().mu);
  return cache().bytes;
}
void set_memory_cache_limit(size_t bytes) {
  {
    std::lock_guard<std::mutex> lk(cache().mu);
    cache().cap = bytes;
  }
  if (memory_cached() > bytes) trim_memory_cache();
}

std::shared_ptr<Storage> Storage::allocate(size_t bytes, const char* what, Device device) {
  const size_t rounded = (bytes + tensor_alignment - 1) / tensor_alignment * tensor_alignment;
  struct Made : Storage {};  // the constructor is private, hence the local type
  if (!device.is_host()) {  // the device's own allocator; the host budget does not count it
    void* p = rounded == 0 ? nullptr : device_memory(device).allocate(rounded);
    SPORE_CHECK(rounded == 0 || p != nullptr, ErrorCode::out_of_memory, "out of memory on device {}: {} bytes{}{}",
                device_name(device), bytes, what ? " for " : "", what ? what : "");
    std::shared_ptr<Storage> s = std::make_shared<Made>();
    s->data_ = p;
    s->size_ = rounded;
    s->owned_ = true;
    s->device_ = device;
    return s;
  }
  const size_t limit = g_limit.load();
  if (limit != 0 && g_in_use.load() + memory_cached() + rounded > limit) trim_memory_cache();
  const size_t now = g_in_use.fetch_add(rounded) + rounded;
  if (limit != 0 && now > limit) {
    g_in_use.fetch_sub(rounded);
    SPORE_FAIL(ErrorCode::out_of_memory,
               "out of memory: allocating {} bytes{}{} would exceed the memory limit of {} bytes ({} in use)",
               bytes, what ? " for " : "", what ? what : "", limit, now - rounded);
  }
  void* p = rounded == 0 ? nullptr : cache_take(rounded);
  if (rounded != 0 && p == nullptr) p = host_alloc(rounded);
  if (rounded != 0 && p == nullptr) {
    g_in_use.fetch_sub(rounded);
    SPORE_FAIL(ErrorCode::out_of_memory, "out of memory: the system refused {} bytes{}{}", bytes,
               what ? " for " : "", what ? what : "");
  }
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {}
  // One heap block for the Storage and its control block.
  std::shared_ptr<Storage> s = std::make_shared<Made>();
  s->data_ = p;
  s->size_ = rounded;
  s->owned_ = true;
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t bytes, std::function<void()> release, Device device) {
  auto s = std::shared_ptr<Storage>(new Storage());
  s->data_ = data;
  s->size_ = bytes;
  s->device_ = device;
  s->release_ = std::move(release);
  return s;
}

Storage::~Storage() {
  if (owned_ && !device_.is_host()) {
    if (data_) device_memory(device_).release(data_, size_);
  } else if (owned_) {
    if (!cache_give(data_, size_)) std::free(data_);
    g_in_use.fetch_sub(size_);
  } else if (release_) {
    release_();
  }
}

void set_memory_limit(size_t bytes) { g_limit.store(bytes); }
size_t memory_limit() { return g_limit.load(); }
size_t memory_in_use() { return g_in_use.load(); }
size_t memory_peak() { return g_peak.load(); }
void reset_memory_peak() { g_peak.store(g_in_use.load()); }

size_t parse_byte_size(const char* text) {
  std::string s(text ? text : "");
  size_t i = 0, digits = 0, dots = 0;
  for (; i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.'); ++i) {
    if (s[i] == '.') ++dots;
    else ++digits;
  }
  // "1.2.3" and "." used to parse as 1 and 0 bytes; a number is digits with at most one point.
  SPORE_CHECK(digits > 0 && dots <= 1, ErrorCode::invalid_argument,
              "bad byte size '{}': expected e.g. 512MB, 2GiB, 1000", s);
  double v = std::strtod(s.substr(0, i).c_str(), nullptr);
  std::string unit = s.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mul = 0;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KB") mul = 1e3;
  else if (unit == "M" || unit == "MB") mul = 1e6;
  else if (unit == "G" || unit == "GB") mul = 1e9;
  else if (unit == "KIB") mul = 1024.0;
  else if (unit == "MIB") mul = 1024.0 * 1024;
  else if (unit == "GIB") mul = 1024.0 * 1024 * 1024;
  SPORE_CHECK(mul != 0, ErrorCode::invalid_argument, "bad byte size '{}': unknown unit '{}'", s, unit);
  // Converting a double >= 2^64 to size_t is undefined behaviour, so refuse it by name.
  SPORE_CHECK(v * mul < 18446744073709551616.0, ErrorCode::invalid_argument, "bad byte size '{}': too large", s);
  return static_cast<size_t>(v * mul);
}

void populate_pages(void* p, size_t bytes) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older headers lack the name
#endif
  if (p == nullptr || bytes == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) / page * page;
  // The pages at either end may hold other data: populating never changes it. Errors (EINVAL on old kernels,
  // ENOMEM for an unmapped page) are ignored: the pages then fault in on first touch.
  (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE);
}

}  // namespace spore
