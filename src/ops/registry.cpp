#include "ops/registry.h"

#include "ops/families.h"
#include "ops/llm_ops.h"

namespace spore {

// dynamic_shape.cpp: nonzero, compress, unique, non_max_suppression, topk_dynamic (data-dependent output shapes).
// Declared here rather than in families.h, which every op family file includes (one declaration, one caller).
void register_dynamic_shape_ops(OpRegistry& r);

OpDefBuilder OpRegistry::def(OpId id) {
  std::lock_guard<std::mutex> lk(mu_);
  const int i = op_index(id);
  SPORE_ASSERT(is_builtin_op(id) && by_index_[static_cast<size_t>(i)] == nullptr, "op {} is not in op_list.inc or defined twice",
               op_name(id));
  OpDef& d = defs_.emplace_back();
  d.id = id;
  d.name = std::string(op_name(id));
  by_index_[static_cast<size_t>(i)] = &d;
  return OpDefBuilder(d);
}

const OpDef& OpRegistry::add_custom(OpDef def) {
  SPORE_CHECK(!def.name.empty(), ErrorCode::invalid_argument, "custom op needs a name");
  SPORE_CHECK(def.infer != nullptr, ErrorCode::invalid_argument, "custom op '{}' needs an inference function", def.name);
  const OpId id = register_op_name(def.name);
  std::lock_guard<std::mutex> lk(mu_);
  const auto i = static_cast<size_t>(op_index(id));
  SPORE_CHECK(i < max_ops, ErrorCode::invalid_argument, "too many ops");
  def.id = id;
  OpDef& d = defs_.emplace_back(std::move(def));
  by_index_[i] = &d;
  return d;
}

const OpDef* OpRegistry::find(OpId id) const {
  const int i = op_index(id);
  return i >= 0 && static_cast<size_t>(i) < max_ops ? by_index_[static_cast<size_t>(i)] : nullptr;
}

const OpDef& OpRegistry::get(OpId id) const {
  const OpDef* d = find(id);
  SPORE_CHECK(d != nullptr, ErrorCode::not_found, "op '{}' has no definition", op_name(id));
  return *d;
}

const OpDef* OpRegistry::find(std::string_view name) const {
  auto id = op_from_name(name);
  return id ? find(*id) : nullptr;
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> out;
  for (const OpDef* d : by_index_) if (d) out.push_back(d);
  return out;
}

OpRegistry& op_registry() {
  static OpRegistry* r = [] {
    auto* reg = new OpRegistry();  // never destroyed: kernels and plans may outlive static teardown
    register_structure_ops(*reg);
    register_elementwise_ops(*reg);
    register_binary_ops(*reg);
    register_reduce_ops(*reg);
    register_linalg_ops(*reg);
    register_conv_ops(*reg);
    register_norm_ops(*reg);
    register_shape_ops(*reg);
    register_quant_ops(*reg);
    register_fused_elementwise_ops(*reg);
    register_fused_ops(*reg);
    register_attention_ops(*reg);
    register_rnn_ops(*reg);
    register_llm_ops(*reg);
    register_index_ops(*reg);
    register_dynamic_shape_ops(*reg);
    return reg;
  }();
  return *r;
}

}  // namespace spore
