#pragma once
// The op registry: one OpDef per op id. Built-in families register through explicit calls in
// registry.cpp (no static-initializer registrars); custom ops are added at run time.
#include <array>
#include <deque>
#include <mutex>
#include <vector>

#include "ops/op_def.h"

namespace spore {

class OpRegistry {
 public:
  OpDefBuilder def(OpId id);  // starts the definition of a built-in op
  // Adds a custom op: registers its name, assigns an id, returns the stored def.
  const OpDef& add_custom(OpDef def);

  const OpDef& get(OpId id) const;  // throws not_found for an id without a def
  const OpDef* find(OpId id) const;
  const OpDef* find(std::string_view name) const;
  std::vector<const OpDef*> all() const;  // in op_index() order

 private:
  static constexpr size_t max_ops = 4096;
  std::array<const OpDef*, max_ops> by_index_{};  // by op_index()
  std::deque<OpDef> defs_;
  mutable std::mutex mu_;
};

// The process-wide registry, with every built-in op registered on first use.
OpRegistry& op_registry();

}  // namespace spore
