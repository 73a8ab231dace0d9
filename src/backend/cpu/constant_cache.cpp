// The cache of data derived from plan constants (constant_cache.h).
#include "backend/cpu/constant_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"

namespace spore::cpu {
namespace {

struct Entry {
  std::weak_ptr<Storage> owner;
  std::shared_ptr<Storage> data;
  size_t bytes;
};

std::mutex mu;
std::unordered_map<std::string, Entry> entries;  // by src address + key
size_t held = 0;
int64_t hits = 0, misses = 0;

bool same_owner(const std::weak_ptr<Storage>& a, const std::shared_ptr<Storage>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

bool bypassed() {
  const char* e = std::getenv("SPORE_CONSTANT_CACHE");
  return e && e[0] == '0' && e[1] == 0;
}

size_t cap_bytes() {
  static const size_t cap = [] {
    if (const char* e = std::getenv("SPORE_CONSTANT_CACHE_MB"); e && *e) return static_cast<size_t>(std::atoll(e)) << 20;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const size_t phys = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : size_t{4} << 30;
    return std::max(size_t{256} << 20, phys / 4);
  }();
  return cap;
}

void drop_expired() {
  for (auto it = entries.begin(); it != entries.end();) {
    if (it->second.owner.expired()) {
      held -= it->second.bytes;
      it = entries.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

std::shared_ptr<Storage> constant_derived(const std::shared_ptr<Storage>& owner, const void* src, std::string_view key,
                                          size_t bytes, const std::function<void(void*)>& fill) {
  if (!owner || bypassed()) return nullptr;
  std::string id = fmt::format("{}:{}", src, key);
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (auto it = entries.find(id); it != entries.end()) {
      if (it->second.bytes == bytes && same_owner(it->second.owner, owner)) {
        ++hits;
        return it->second.data;
      }
      held -= it->second.bytes;  // a dead storage's entry at a recycled address
      entries.erase(it);
    }
  }
  std::shared_ptr<Storage> data;
  try {
    data = Storage::allocate(bytes, "derived constant (cpu kernel cache)");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::out_of_memory) throw;
    return nullptr;  // no room under the memory limit: the caller derives the data per call instead
  }
  fill(data->data());
  const std::lock_guard<std::mutex> lock(mu);
  ++misses;
  if (held + bytes > cap_bytes()) drop_expired();
  if (held + bytes > cap_bytes()) return data;  // full of live entries: used for this call only
  if (entries.emplace(std::move(id), Entry{owner, data, bytes}).second) held += bytes;
  return data;
}

const float* derived_floats(const std::shared_ptr<Storage>& owner, const void* src, std::string_view key, size_t floats,
                            const std::function<void(float*)>& fill, std::shared_ptr<Storage>& kept,
                            std::vector<float>& local) {
  kept = constant_derived(owner, src, key, floats * sizeof(float), [&](void* buf) { fill(static_cast<float*>(buf)); });
  if (kept) return static_cast<const float*>(kept->data());
  local.resize(floats);
  fill(local.data());
  return local.data();
}

ConstantCacheStats constant_cache_stats() {
  const std::lock_guard<std::mutex> lock(mu);
  return {static_cast<int64_t>(entries.size()), static_cast<int64_t>(held), hits, misses};
}

}  // namespace spore::cpu
