#include "ir/op_id.h"

#include <mutex>
#include <unordered_map>
#include <deque>

#include "base/error.h"

namespace spore {
namespace {

constexpr const char* builtin_names[] = {
#define SPORE_OP(name) #name,
#include "ir/op_list.inc"
#undef SPORE_OP
};
static_assert(sizeof(builtin_names) / sizeof(builtin_names[0]) == num_builtin_ops);

struct NameTable {
  std::deque<std::string> names;  // deque: string_views stay valid as it grows
  std::unordered_map<std::string, OpId> by_name;
  NameTable() {
    for (int i = 0; i < num_builtin_ops; ++i) {
      names.emplace_back(builtin_names[i]);
      by_name.emplace(builtin_names[i], static_cast<OpId>(i));
    }
  }
};

NameTable& table() {
  static NameTable t;
  return t;
}
std::mutex& table_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

std::string_view op_name(OpId id) {
  const auto i = static_cast<size_t>(id);
  if (i < static_cast<size_t>(num_builtin_ops)) return builtin_names[i];
  std::lock_guard<std::mutex> lk(table_mutex());
  return i < table().names.size() ? std::string_view(table().names[i]) : std::string_view("<unknown op>");
}

std::optional<OpId> op_from_name(std::string_view name) {
  std::lock_guard<std::mutex> lk(table_mutex());
  auto it = table().by_name.find(std::string(name));
  if (it == table().by_name.end()) return std::nullopt;
  return it->second;
}

OpId register_op_name(std::string_view name) {
  std::lock_guard<std::mutex> lk(table_mutex());
  auto& t = table();
  SPORE_CHECK(!t.by_name.count(std::string(name)), ErrorCode::invalid_argument, "op name '{}' is already registered", name);
  SPORE_CHECK(t.names.size() < 65535, ErrorCode::invalid_argument, "too many ops");
  const auto id = static_cast<OpId>(t.names.size());
  t.names.emplace_back(name);
  t.by_name.emplace(std::string(name), id);
  return id;
}

int num_ops() {
  std::lock_guard<std::mutex> lk(table_mutex());
  return static_cast<int>(table().names.size());
}

}  // namespace spore
