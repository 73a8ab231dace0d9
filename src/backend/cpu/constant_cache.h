#pragma once
// Data the cpu kernels derive from plan constants (KernelContext::constant_inputs: model weights, whose bytes do
// not change while their storage lives) and keep across calls instead of recomputing it per call: Winograd's
// transformed 3x3 weights, oneDNN's reordered (blocked) conv weights. Same bits as deriving them again.
//
// An entry is found by the constant's storage (its control block: a new storage at a recycled address never
// matches an old entry), the address derived from and a kernel-chosen key (what was derived, in which layout),
// through a hash index. Entries whose storage died are dropped (checked on a miss). At most a quarter of the
// machine's memory is kept (SPORE_CONSTANT_CACHE_MB overrides): when that is full, new entries are not kept and
// their kernels derive per call - live entries are never evicted for new ones, because a plan whose derived
// weights exceed the cap would otherwise evict every entry before its next use (ViT-B/16's 338 MB of linear
// panels under the old 256 MB LRU: every linear repacked every call). The buffers are Storage, counted against
// set_memory_limit: with no room left, lookup returns null and the kernel derives per call as before.
// SPORE_CONSTANT_CACHE=0 bypasses the cache (read per call, for A/B benchmarks and tests).
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "tensor/storage.h"

namespace spore::cpu {

// The buffer derived from `src` (inside `owner`) under `key`, `bytes` long: found, or allocated and filled by
// `fill(buffer)` (called without the cache's lock held, so it may run parallel tasks). Null when bypassed or no
// memory is left for it. The returned pointer keeps the buffer alive whatever the cache evicts meanwhile.
std::shared_ptr<Storage> constant_derived(const std::shared_ptr<Storage>& owner, const void* src, std::string_view key,
                                          size_t bytes, const std::function<void(void*)>& fill);

// The usual use: a float buffer derived from `src` - the kept one, or (no owner, bypassed, no room) `fill` run into
// `local` for this call. `kept` keeps a cached buffer alive while the caller uses it.
const float* derived_floats(const std::shared_ptr<Storage>& owner, const void* src, std::string_view key, size_t floats,
                            const std::function<void(float*)>& fill, std::shared_ptr<Storage>& kept,
                            std::vector<float>& local);

struct ConstantCacheStats {
  int64_t entries, bytes, hits, misses;
};
ConstantCacheStats constant_cache_stats();

}  // namespace spore::cpu
