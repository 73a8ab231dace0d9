#pragma once
// Op ids: built-ins come from op_list.inc (dense, so dispatch tables are arrays); custom ops
// registered at run time get ids from num_builtin_ops upward. The IR stores ids and prints names.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace spore {

enum class OpId : uint16_t {
#define SPORE_OP(name) name,
#include "ir/op_list.inc"
#undef SPORE_OP
};

inline constexpr int num_builtin_ops = 0
#define SPORE_OP(name) +1
#include "ir/op_list.inc"
#undef SPORE_OP
    ;

// Name of an op id ("add"); custom ops return their registered name.
std::string_view op_name(OpId id);
std::optional<OpId> op_from_name(std::string_view name);
// Adds a name to the table for a custom op; returns its new id. Throws if the name is taken.
OpId register_op_name(std::string_view name);
int num_ops();  // built-in + custom

}  // namespace spore
