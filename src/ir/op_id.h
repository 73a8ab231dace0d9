#pragma once
// Op ids. An op's id is the 32-bit FNV-1a hash of its name, so code names an op with `"relu"_op` and needs no
// list of every op: adding an op recompiles only the files that use it. The one list of built-in names is
// ir/op_list.inc, compiled into op_id.cpp alone (which rejects hash collisions at compile time); custom ops
// registered at run time join the same table. Ids are stable across builds; the IR and files still store names.
// Tables that want dense indices use op_index() (built-ins first, in op_list.inc's order, then custom ops).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace spore {

enum class OpId : uint32_t {};

constexpr OpId op_id(std::string_view name) {
  uint32_t h = 2166136261u;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  return static_cast<OpId>(h);
}

// "relu"_op: the id of the op named relu. tests/check_op_names.py checks every such name is a built-in op.
// constexpr, not consteval: clang 14 leaves a consteval call in a generic lambda unevaluated (a link error).
constexpr OpId operator""_op(const char* s, size_t n) { return op_id(std::string_view(s, n)); }

// Name of an op id ("add"); custom ops return their registered name, an id nobody registered "<unknown op>".
std::string_view op_name(OpId id);
// The id of a registered op name (built-in or custom), nullopt for any other name.
std::optional<OpId> op_from_name(std::string_view name);
// Adds a name to the table for a custom op; returns its id. Throws if the name is taken or its hash collides.
OpId register_op_name(std::string_view name);
bool is_builtin_op(OpId id);
int num_builtin_ops();
int num_ops();  // built-in + custom
// Dense index of a registered op (0..num_ops()-1), -1 for an unregistered id; op_at is its inverse.
int op_index(OpId id);
OpId op_at(int index);

}  // namespace spore
