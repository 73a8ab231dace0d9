#include "ir/op_id.h"

#include <algorithm>
#include <array>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.h"

namespace spore {
namespace {

constexpr std::string_view builtin_names[] = {
#define SPORE_OP(name) #name,
#include "ir/op_list.inc"
#undef SPORE_OP
};
constexpr int kBuiltins = static_cast<int>(std::size(builtin_names));

constexpr bool hashes_distinct() {
  std::array<uint32_t, kBuiltins> h{};
  for (int i = 0; i < kBuiltins; ++i) h[i] = static_cast<uint32_t>(op_id(builtin_names[i]));
  std::sort(h.begin(), h.end());
  for (int i = 1; i < kBuiltins; ++i)
    if (h[i] == h[i - 1]) return false;
  return true;
}
static_assert(hashes_distinct(), "two built-in op names have the same FNV-1a hash: rename one");

// Open-addressing table of the built-ins (hash -> index), built at compile time and at most a quarter full, so
// op_index() of a built-in is a probe or two without a lock: kernels and the fused-elementwise decoder ask often.
constexpr size_t kSlots = [] {
  size_t n = 64;
  while (n < 4 * static_cast<size_t>(kBuiltins)) n *= 2;
  return n;
}();
struct Slot {
  uint32_t hash = 0;
  int index = -1;
};
constexpr std::array<Slot, kSlots> builtin_table() {
  std::array<Slot, kSlots> t{};
  for (int i = 0; i < kBuiltins; ++i) {
    const auto h = static_cast<uint32_t>(op_id(builtin_names[i]));
    size_t s = h & (kSlots - 1);
    while (t[s].index >= 0) s = (s + 1) & (kSlots - 1);
    t[s] = {h, i};
  }
  return t;
}
constexpr auto kTable = builtin_table();

int builtin_index(OpId id) {
  const auto h = static_cast<uint32_t>(id);
  for (size_t s = h & (kSlots - 1);; s = (s + 1) & (kSlots - 1)) {
    const Slot& e = kTable[s];
    if (e.index < 0) return -1;
    if (e.hash == h) return e.index;
  }
}

struct CustomTable {  // ops registered at run time; index = kBuiltins + position
  std::mutex mu;
  std::deque<std::string> names;  // deque: string_views stay valid as it grows
  std::vector<OpId> ids;
  std::unordered_map<uint32_t, int> index;
};

CustomTable& custom() {
  static CustomTable t;
  return t;
}

}  // namespace

std::string_view op_name(OpId id) {
  if (const int i = builtin_index(id); i >= 0) return builtin_names[i];
  auto& t = custom();
  std::lock_guard<std::mutex> lk(t.mu);
  const auto it = t.index.find(static_cast<uint32_t>(id));
  return it == t.index.end() ? std::string_view("<unknown op>") : std::string_view(t.names[static_cast<size_t>(it->second)]);
}

std::optional<OpId> op_from_name(std::string_view name) {
  const OpId id = op_id(name);
  if (const int i = builtin_index(id); i >= 0) {
    if (builtin_names[i] == name) return id;
    return std::nullopt;
  }
  auto& t = custom();
  std::lock_guard<std::mutex> lk(t.mu);
  const auto it = t.index.find(static_cast<uint32_t>(id));
  if (it == t.index.end() || t.names[static_cast<size_t>(it->second)] != name) return std::nullopt;
  return id;
}

OpId register_op_name(std::string_view name) {
  const OpId id = op_id(name);
  if (const int i = builtin_index(id); i >= 0) {
    SPORE_CHECK(builtin_names[i] != name, ErrorCode::invalid_argument, "op name '{}' is already registered", name);
    SPORE_FAIL(ErrorCode::invalid_argument, "op name '{}' hashes to the id of built-in op '{}'; choose another name", name,
               builtin_names[i]);
  }
  auto& t = custom();
  std::lock_guard<std::mutex> lk(t.mu);
  if (const auto it = t.index.find(static_cast<uint32_t>(id)); it != t.index.end()) {
    const std::string& other = t.names[static_cast<size_t>(it->second)];
    SPORE_CHECK(other != name, ErrorCode::invalid_argument, "op name '{}' is already registered", name);
    SPORE_FAIL(ErrorCode::invalid_argument, "op name '{}' hashes to the id of custom op '{}'; choose another name", name, other);
  }
  SPORE_CHECK(t.names.size() < 65535, ErrorCode::invalid_argument, "too many ops");
  t.index.emplace(static_cast<uint32_t>(id), static_cast<int>(t.names.size()));
  t.names.emplace_back(name);
  t.ids.push_back(id);
  return id;
}

bool is_builtin_op(OpId id) { return builtin_index(id) >= 0; }

int num_builtin_ops() { return kBuiltins; }

int num_ops() {
  auto& t = custom();
  std::lock_guard<std::mutex> lk(t.mu);
  return kBuiltins + static_cast<int>(t.names.size());
}

int op_index(OpId id) {
  if (const int i = builtin_index(id); i >= 0) return i;
  auto& t = custom();
  std::lock_guard<std::mutex> lk(t.mu);
  const auto it = t.index.find(static_cast<uint32_t>(id));
  return it == t.index.end() ? -1 : kBuiltins + it->second;
}

OpId op_at(int index) {
  if (index >= 0 && index < kBuiltins) return op_id(builtin_names[index]);
  auto& t = custom();
  std::lock_guard<std::mutex> lk(t.mu);
  const auto j = static_cast<size_t>(index - kBuiltins);
  SPORE_CHECK(index >= kBuiltins && j < t.ids.size(), ErrorCode::invalid_argument, "op index {} out of range", index);
  return t.ids[j];
}

}  // namespace spore
