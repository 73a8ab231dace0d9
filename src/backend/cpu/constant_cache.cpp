// The cache of data derived from plan constants (constant_cache.h).
#include "backend/cpu/constant_cache.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"

namespace spore::cpu {
namespace {

struct Entry {
  std::weak_ptr<Storage> owner;
  const void* src;
  std::string key;
  std::shared_ptr<Storage> data;
  size_t bytes;
};

constexpr size_t kCapBytes = size_t{256} << 20;
std::mutex mu;
std::vector<Entry> entries;  // least recently used first
size_t held = 0;
int64_t hits = 0, misses = 0;

bool same_owner(const std::weak_ptr<Storage>& a, const std::shared_ptr<Storage>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

bool bypassed() {
  const char* e = std::getenv("SPORE_CONSTANT_CACHE");
  return e && e[0] == '0' && e[1] == 0;
}

}  // namespace

std::shared_ptr<Storage> constant_derived(const std::shared_ptr<Storage>& owner, const void* src, std::string_view key,
                                          size_t bytes, const std::function<void(void*)>& fill) {
  if (!owner || bypassed()) return nullptr;
  {
    const std::lock_guard<std::mutex> lock(mu);
    for (auto it = entries.begin(); it != entries.end();) {
      if (it->owner.expired()) {
        held -= it->bytes;
        it = entries.erase(it);
      } else if (it->src == src && it->bytes == bytes && it->key == key && same_owner(it->owner, owner)) {
        ++hits;
        Entry e = std::move(*it);
        entries.erase(it);
        entries.push_back(std::move(e));
        return entries.back().data;
      } else {
        ++it;
      }
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
  if (bytes > kCapBytes) return data;
  while (held + bytes > kCapBytes && !entries.empty()) {
    held -= entries.front().bytes;
    entries.erase(entries.begin());
  }
  entries.push_back({owner, src, std::string(key), data, bytes});
  held += bytes;
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
