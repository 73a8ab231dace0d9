// Precision modes (Ascend ATC's --precision_mode) as one rewrite of a deployable graph.
//
// 1. Float-to-float casts inside the graph are dropped: the mode, not the source model, decides the dtype of every
//    float op (this is how force_fp32 turns an f16 model back into f32, and how re-converting a converted model
//    does not stack casts).
// 2. Nodes are visited in topological order. A float node (compute dtype f32/f16/bf16; f64 is left alone) gets a
//    target dtype from the mode and its OpDef's AmpPolicy; a low target falls back to f32 when the cpu backend has
//    no kernel for that op in the low dtype. The operands that shared the node's compute dtype in the source graph
//    are cast to the target; other operands (indices, masks, scales in another dtype) are untouched. Outputs are
//    re-inferred.
// 3. Casts of constants are not emitted as nodes: the constant is converted once (round to nearest even) and the
//    converted tensor takes over the original constant's node when nothing else uses the f32 one, so the file
//    stores f16/bf16 weights under their original names.
// 4. Graph outputs get a cast back to their source dtype; graph inputs are never retyped. A converted model is a
//    drop-in replacement for the source.
#include "passes/precision.h"

#include <algorithm>
#include <optional>

#include "base/error.h"
#include "ops/backend.h"
#include "ops/graph_ops.h"
#include "ops/kernel.h"
#include "ops/ops.h"
#include "ops/registry.h"

namespace spore {

PrecisionMode parse_precision_mode(const std::string& s) {
  if (s == "force_fp32") return PrecisionMode::force_fp32;
  if (s == "allow_fp32_to_fp16") return PrecisionMode::allow_fp32_to_fp16;
  if (s == "allow_fp32_to_bf16") return PrecisionMode::allow_fp32_to_bf16;
  if (s == "allow_mix_precision") return PrecisionMode::allow_mix_precision;
  SPORE_FAIL(ErrorCode::invalid_argument,
             "unknown precision mode '{}' (choices: force_fp32, allow_fp32_to_fp16, allow_fp32_to_bf16, "
             "allow_mix_precision)",
             s);
}

std::string precision_mode_name(PrecisionMode m) {
  switch (m) {
    case PrecisionMode::force_fp32: return "force_fp32";
    case PrecisionMode::allow_fp32_to_fp16: return "allow_fp32_to_fp16";
    case PrecisionMode::allow_fp32_to_bf16: return "allow_fp32_to_bf16";
    case PrecisionMode::allow_mix_precision: return "allow_mix_precision";
  }
  return "?";
}

namespace {

// The float dtypes a precision mode moves between (f64 is never touched).
bool is_convertible(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

std::vector<TensorType> input_types(const Node* n) {
  std::vector<TensorType> t;
  for (const Value* v : n->inputs) t.push_back(v->type);
  return t;
}
std::vector<TensorType> output_types(const Node* n) {
  std::vector<TensorType> t;
  for (const Value* v : n->outputs) t.push_back(v->type);
  return t;
}

DType compute_dtype(const OpDef& def, const Node* n) {
  const auto ins = input_types(n);
  const auto outs = output_types(n);
  return def.dispatch_dtype(ins, outs);
}

bool is_float_cast(const Node* n) {
  return n->op == "cast"_op && is_convertible(n->inputs[0]->type.dtype) && is_convertible(n->outputs[0]->type.dtype);
}

class Converter {
 public:
  Converter(Graph& g, PrecisionMode mode, DType low, const BackendImpl& backend, PrecisionReport& r)
      : g_(g), mode_(mode), low_(low), backend_(backend), r_(r) {}

  void run() {
    // Source dtypes, taken before any edit: per node its compute dtype and its operands' dtypes.
    std::vector<Node*> order(g_.nodes());
    for (Node* n : order) {
      Source& s = source_[n];
      const OpDef& def = op_registry().get(n->op);
      if (def.traits.has(Trait::graph_structure)) continue;
      s.compute = compute_dtype(def, n);
      for (const Value* v : n->inputs) s.operands.push_back(v->type.dtype);
    }
    std::vector<DType> out_dtypes;
    std::vector<std::string> out_names;
    for (const Value* v : g_.outputs()) {
      out_dtypes.push_back(v->type.dtype);
      out_names.push_back(v->name);
    }

    for (Node* n : order) {
      const OpDef& def = op_registry().get(n->op);
      if (def.traits.has(Trait::graph_structure)) continue;
      if (is_float_cast(n)) {  // (1)
        Value* from = n->inputs[0];
        // An erased value keeps its name reserved; free it for the casts and outputs below.
        rename_fresh(n->outputs[0], n->outputs[0]->name + ".removed");
        g_.replace_all_uses(n->outputs[0], from);
        g_.erase_node(n);
        continue;
      }
      const Source& s = source_.at(n);
      const bool is_float_node = is_convertible(s.compute);
      const DType target = is_float_node ? decide(def, n, s) : s.compute;
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        // (2) operands of the compute dtype take the target; other float operands (an f32 scale of an int8 op)
        // keep their source dtype, even when a removed cast changed what feeds them.
        const DType want = is_float_node && s.operands[i] == s.compute ? target : s.operands[i];
        const DType have = n->inputs[i]->type.dtype;
        if (have != want && is_convertible(have) && is_convertible(want))
          g_.set_input(n, static_cast<int>(i), cast_of(n->inputs[i], want));
      }
      const auto outs = def.infer_types(input_types(n), n->attrs, n->label());
      SPORE_ASSERT(outs.size() == n->outputs.size(), "output count changed for {}", n->label());
      for (size_t i = 0; i < outs.size(); ++i) n->outputs[i]->type = outs[i];
    }

    // (4) outputs keep their source dtypes.
    std::vector<Value*> outs(g_.outputs());
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i]->type.dtype != out_dtypes[i]) outs[i] = cast_of(outs[i], out_dtypes[i]);
    g_.set_outputs(outs);
    // Outputs keep their names too (spore run writes <name>.npy, ONNX binds outputs by name): the value that
    // now holds an output's name (the f16 value feeding the output cast) gives it up.
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i]->name == out_names[i] || outs[i]->producer->is_input()) continue;
      Value* holder = g_.find_value(out_names[i]);
      if (holder != nullptr && holder->producer->is_input()) continue;
      if (holder != nullptr) rename_fresh(holder, out_names[i] + "_" + std::string(dtype_name(holder->type.dtype)));
      rename_fresh(outs[i], out_names[i]);
    }

    adopt_converted_constants();
    g_.topo_sort();
  }

 private:
  struct Source {
    DType compute = DType::f32;
    std::vector<DType> operands;
  };

  DType decide(const OpDef& def, const Node* n, const Source& s) {
    DType want = low_;
    switch (mode_) {
      case PrecisionMode::force_fp32: return DType::f32;
      case PrecisionMode::allow_fp32_to_fp16:
      case PrecisionMode::allow_fp32_to_bf16: break;
      case PrecisionMode::allow_mix_precision:
        if (def.amp == AmpPolicy::keep_f32) return keep_f32(n, "AmpPolicy keep_f32");
        if (def.amp == AmpPolicy::follow) {
          // The dtype its computed operands have now. f32 if any is f32 (the widest wins, like autocast's
          // promote), if they disagree, or if they are all constants (nothing upstream chose a dtype).
          std::optional<DType> seen;
          for (size_t i = 0; i < n->inputs.size(); ++i) {
            const Value* v = n->inputs[i];
            if (s.operands[i] != s.compute || v->producer->is_constant()) continue;
            if (seen && *seen != v->type.dtype) return DType::f32;
            seen = v->type.dtype;
          }
          if (!seen || !is_low_precision(*seen)) return DType::f32;
          want = *seen;
        }
        break;
    }
    // The target backend's plan-time answer for this node's attributes (ops/backend.h), as plan compilation asks it.
    if (!backend_.supports(n->op, op_registry().get(n->op).normalize(n->attrs, n->label()), want))
      return keep_f32(n, fmt::format("no {} kernel for {}", backend_name(backend_.id()), dtype_name(want)));
    return want;
  }

  DType keep_f32(const Node* n, const std::string& why) {
    r_.kept_f32.push_back(fmt::format("{}: {}", n->label(), why));
    return DType::f32;
  }

  Value* cast_of(Value* v, DType t) {
    const auto key = std::make_pair(v, t);
    if (auto it = casts_.find(key); it != casts_.end()) return it->second;
    Value* c = nullptr;
    if (v->producer->is_constant()) {  // (3) converted now, no node
      c = g_.add_constant(ops::cast(v->producer->payload, t), v->name + "_" + std::string(dtype_name(t)));
      converted_.push_back({v, c});
    } else {
      Attrs a;
      a.set("dtype", t);
      c = build_node(g_, "cast"_op, {v}, a)->outputs[0];
      rename_fresh(c, v->name + "_" + std::string(dtype_name(t)));
      ++r_.casts_inserted;
    }
    casts_.emplace(key, c);
    return c;
  }

  // Renames v to `base`, or the first free base_1, base_2, ...
  void rename_fresh(Value* v, const std::string& base) {
    for (int k = 0;; ++k) {
      const std::string name = k == 0 ? base : fmt::format("{}_{}", base, k);
      if (name == v->name) return;
      if (!g_.name_taken(name)) return g_.rename_value(v, name);  // free (erased values keep theirs)
    }
  }

  // A constant whose every use now reads its converted copy hands its node (and name) to that copy.
  void adopt_converted_constants() {
    for (auto [orig, conv] : converted_) {
      if (!orig->uses.empty() || g_.is_output(orig)) continue;
      orig->producer->payload = conv->producer->payload;
      orig->type = conv->type;
      g_.replace_all_uses(conv, orig);
      g_.erase_node(conv->producer);
    }
    for (Node* n : std::vector<Node*>(g_.nodes()))
      if (n->is_constant() && n->outputs[0]->uses.empty() && !g_.is_output(n->outputs[0])) {
        bool ours = std::any_of(converted_.begin(), converted_.end(),
                                [&](const auto& p) { return p.first == n->outputs[0] || p.second == n->outputs[0]; });
        if (ours) g_.erase_node(n);
      }
  }

  Graph& g_;
  PrecisionMode mode_;
  DType low_;
  const BackendImpl& backend_;
  PrecisionReport& r_;
  std::map<const Node*, Source> source_;
  std::map<std::pair<Value*, DType>, Value*> casts_;
  std::vector<std::pair<Value*, Value*>> converted_;  // (source constant, converted copy)
};

}  // namespace

std::map<std::string, int64_t> ops_per_dtype(const Graph& g) {
  std::map<std::string, int64_t> out;
  for (const Node* n : g.nodes()) {
    const OpDef& def = op_registry().get(n->op);
    if (def.traits.has(Trait::graph_structure)) continue;
    // Quantized compute (qconv2d, qlinear, dequantize_linear dispatch on their int8 operand) counts as int8,
    // although its scales are f32.
    const DType dispatch = compute_dtype(def, n);
    std::optional<DType> t;
    if (dispatch == DType::i8 || dispatch == DType::u8) t = dispatch;
    for (const Value* v : n->inputs)
      if (!t && is_floating(v->type.dtype)) t = v->type.dtype;
    for (const Value* v : n->outputs)
      if (!t && is_floating(v->type.dtype)) t = v->type.dtype;
    if (!t) t = dispatch;
    ++out[std::string(dtype_name(*t))];
  }
  return out;
}

PrecisionReport apply_precision_mode(Graph& g, PrecisionMode mode, DType low, Backend target) {
  SPORE_CHECK(is_low_precision(low), ErrorCode::invalid_argument, "precision mode {}: the low dtype must be f16 or bf16, not {}",
              precision_mode_name(mode), dtype_name(low));
  if (mode == PrecisionMode::allow_fp32_to_fp16) low = DType::f16;
  if (mode == PrecisionMode::allow_fp32_to_bf16) low = DType::bf16;
  // Kernel availability decides f32 fallbacks; an empty registry would silently keep everything f32.
  SPORE_CHECK(kernel_registry().find(target, "cast"_op, DType::f32) != nullptr, ErrorCode::internal,
              "precision mode {}: no {} kernels are registered (call spore::init() first)", precision_mode_name(mode),
              backend_name(target));
  PrecisionReport r;
  r.ops_per_dtype_before = ops_per_dtype(g);
  Converter(g, mode, low, backend_impl(target), r).run();
  r.ops_per_dtype_after = ops_per_dtype(g);
  return r;
}

}  // namespace spore
