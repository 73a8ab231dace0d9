// ONNX import: model, graph, tensor and attribute plumbing, op classification and function inlining.
// The op table itself is in onnx_import_ops.cpp.
//
// Import runs in two phases so that an unsupported op never throws from the middle of a half-built graph:
// every node is classified first (op table, then the op schema's function body, then model-local
// functions, then custom ops registered with spore), and only a model whose ops are all supported is built.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>
#include <onnx/defs/schema.h>

#include "base/error.h"
#include "io/onnx/onnx.h"
#include "io/onnx/onnx_import_internal.h"
#include "ops/dispatch.h"
#include "ops/graph_ops.h"
#include "ops/registry.h"

namespace spore::io {

namespace oi = onnx_import;

namespace onnx_import {

// ------------------------------------------------------------------------------------------- tensors

std::optional<DType> dtype_from_onnx(int32_t t) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DType::f32;
    case onnx::TensorProto::DOUBLE: return DType::f64;
    case onnx::TensorProto::FLOAT16: return DType::f16;
    case onnx::TensorProto::BFLOAT16: return DType::bf16;
    case onnx::TensorProto::INT64: return DType::i64;
    case onnx::TensorProto::INT32: return DType::i32;
    case onnx::TensorProto::INT8: return DType::i8;
    case onnx::TensorProto::UINT8: return DType::u8;
    case onnx::TensorProto::BOOL: return DType::boolean;
    default: return std::nullopt;
  }
}

int32_t onnx_type_of(DType d) {
  switch (d) {
    case DType::f32: return onnx::TensorProto::FLOAT;
    case DType::f64: return onnx::TensorProto::DOUBLE;
    case DType::f16: return onnx::TensorProto::FLOAT16;
    case DType::bf16: return onnx::TensorProto::BFLOAT16;
    case DType::i64: return onnx::TensorProto::INT64;
    case DType::i32: return onnx::TensorProto::INT32;
    case DType::i8: return onnx::TensorProto::INT8;
    case DType::u8: return onnx::TensorProto::UINT8;
    case DType::boolean: return onnx::TensorProto::BOOL;
  }
  return onnx::TensorProto::UNDEFINED;
}

std::string onnx_type_name(int32_t t) {
  if (onnx::TensorProto_DataType_IsValid(t))
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(t));
  return fmt::format("type#{}", t);
}

Tensor tensor_from_proto(const onnx::TensorProto& t, const std::string& what) {
  SPORE_CHECK(t.data_location() != onnx::TensorProto::EXTERNAL, ErrorCode::unsupported,
              "tensor '{}' keeps its data in an external file; spore reads self-contained models only "
              "(re-save with onnx.save_model(m, path, save_as_external_data=False))", what);
  SPORE_CHECK(!t.has_segment(), ErrorCode::unsupported, "tensor '{}' is segmented; not supported", what);
  const std::optional<DType> dt = dtype_from_onnx(t.data_type());
  SPORE_CHECK(dt.has_value(), ErrorCode::unsupported, "tensor '{}' has element type {}, which spore lacks", what,
              onnx_type_name(t.data_type()));
  Shape shape;
  for (int64_t d : t.dims()) {
    SPORE_CHECK(d >= 0, ErrorCode::invalid_argument, "tensor '{}' has a negative dim {}", what, d);
    shape.push_back(d);
  }
  Tensor out = Tensor::empty(shape, *dt);
  const int64_t n = out.numel();
  const size_t esize = dtype_size(*dt);
  if (t.has_raw_data()) {
    SPORE_CHECK(t.raw_data().size() == static_cast<size_t>(n) * esize, ErrorCode::invalid_argument,
                "tensor '{}' ({} {}): raw_data has {} bytes, expected {}", what, dtype_name(*dt), shape_str(shape),
                t.raw_data().size(), static_cast<size_t>(n) * esize);
    if (n) std::memcpy(out.raw_data(), t.raw_data().data(), t.raw_data().size());  // both little-endian
    return out;
  }
  auto check_count = [&](int64_t have, const char* field) {
    SPORE_CHECK(have == n, ErrorCode::invalid_argument, "tensor '{}' ({} {}): {} has {} values, expected {}", what,
                dtype_name(*dt), shape_str(shape), field, have, n);
  };
  auto* p = static_cast<uint8_t*>(n ? out.raw_data() : nullptr);
  switch (*dt) {
    case DType::f32:
      check_count(t.float_data_size(), "float_data");
      if (n) std::memcpy(p, t.float_data().data(), n * 4);
      break;
    case DType::f64:
      check_count(t.double_data_size(), "double_data");
      if (n) std::memcpy(p, t.double_data().data(), n * 8);
      break;
    case DType::i64:
      check_count(t.int64_data_size(), "int64_data");
      if (n) std::memcpy(p, t.int64_data().data(), n * 8);
      break;
    case DType::i32:
      check_count(t.int32_data_size(), "int32_data");
      if (n) std::memcpy(p, t.int32_data().data(), n * 4);
      break;
    case DType::f16:
    case DType::bf16:  // int32_data holds the 16-bit patterns
      check_count(t.int32_data_size(), "int32_data");
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t bits = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
        std::memcpy(p + i * 2, &bits, 2);
      }
      break;
    case DType::i8:
    case DType::u8:
    case DType::boolean:
      check_count(t.int32_data_size(), "int32_data");
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(t.int32_data(static_cast<int>(i)));
      break;
  }
  return out;
}

// ------------------------------------------------------------------------------------------- attributes

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}
int64_t node_attr_i(const onnx::NodeProto& n, const std::string& name, int64_t def) {
  const auto* a = find_attr(n, name);
  return a ? a->i() : def;
}
std::string node_attr_s(const onnx::NodeProto& n, const std::string& name, const std::string& def) {
  const auto* a = find_attr(n, name);
  return a ? a->s() : def;
}

int NodeInfo::rank(int i) const {
  const onnx::TypeProto* t = type(i);
  if (t && t->has_tensor_type() && t->tensor_type().has_shape()) return t->tensor_type().shape().dim_size();
  if (const onnx::TensorProto* c = constant(i)) return c->dims_size();
  return -1;
}

namespace {

std::string node_label(const onnx::NodeProto& n) {
  const std::string type = n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type() : n.domain() + "." + n.op_type();
  if (!n.name().empty()) return fmt::format("{} '{}'", type, n.name());
  if (n.output_size() > 0) return fmt::format("{} (output '{}')", type, n.output(0));
  return type;
}

std::string node_display_name(const onnx::NodeProto& n) {
  if (!n.name().empty()) return n.name();
  if (n.output_size() > 0) return "(output " + n.output(0) + ")";
  return "(unnamed)";
}

// Symbol names must be identifiers in the text IR.
std::string sanitize_symbol(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "d_" + out;
  return out;
}

std::string canonical_domain(const std::string& d) { return d == "ai.onnx" ? std::string() : d; }

using OpsetMap = std::map<std::string, int64_t>;

OpsetMap opsets_of(const google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto>& ids, const OpsetMap& fallback) {
  OpsetMap m = fallback;
  for (const auto& id : ids) m[canonical_domain(id.domain())] = id.version();
  return m;
}

}  // namespace

// ------------------------------------------------------------------------------------------- the importer

using Scope = std::unordered_map<std::string, Value*>;

class Importer {
 public:
  Importer(const onnx::ModelProto& m, const OpsetMap& opsets) : model(m), model_opsets(opsets) {
    for (const auto& f : m.functions()) local_functions[f.domain() + ":" + f.name()] = &f;
    const onnx::GraphProto& g = m.graph();
    for (const auto& vi : g.input()) known_types[vi.name()] = &vi.type();
    for (const auto& vi : g.value_info()) known_types[vi.name()] = &vi.type();
    for (const auto& vi : g.output()) known_types[vi.name()] = &vi.type();
    for (const auto& t : g.initializer()) known_consts[t.name()] = &t;
    for (const auto& n : g.node())
      if (n.op_type() == "Constant" && canonical_domain(n.domain()).empty() && n.output_size() == 1)
        if (const auto* a = find_attr(n, "value"); a && a->has_t()) known_consts[n.output(0)] = &a->t();
  }

  // Classification-time knowledge of a top-level node's inputs (empty inside function bodies).
  NodeInfo info_of(const onnx::NodeProto& n, int depth) const {
    NodeInfo info;
    if (depth > 0) return info;
    for (const std::string& name : n.input()) {
      auto t = known_types.find(name);
      auto c = known_consts.find(name);
      info.types.push_back(t == known_types.end() ? nullptr : t->second);
      info.consts.push_back(c == known_consts.end() ? nullptr : c->second);
    }
    return info;
  }
  std::map<std::string, const onnx::TypeProto*> known_types;
  std::map<std::string, const onnx::TensorProto*> known_consts;

  const onnx::ModelProto& model;
  OpsetMap model_opsets;
  std::map<std::string, const onnx::FunctionProto*> local_functions;
  std::unique_ptr<Graph> graph;
  int64_t max_value_id = -1;
  // Graph inputs that a const_in needed the value of (OnnxImportReport::needs_values).
  std::set<std::string> needed_inputs;
  bool refused = false;  // OnnxImportReport::refused
  Composites composites;  // sequence and optional handles (onnx_import_sequence.cpp)

  Value* track(Value* v) {
    max_value_id = std::max(max_value_id, v->id);
    return v;
  }

  // ---- classification
  struct Verdict {
    std::string status;  // supported | decomposed | unsupported
    std::string note;
  };
  Verdict classify(const onnx::NodeProto& n, const OpsetMap& opsets, int depth) const;

  // ---- building
  void emit_node(const onnx::NodeProto& n, Scope& scope, const OpsetMap& opsets, int depth);
  std::vector<Value*> inline_function(const onnx::FunctionProto& f, const onnx::NodeProto& caller,
                                      const std::vector<Value*>& ins, const OpsetMap& caller_opsets, int depth,
                                      const onnx::OpSchema* schema);
  void name_value(Value* v, const std::string& name);
  // If / Loop / Scan: the branch taken, or the loop unrolled, once the condition and trip count are constants.
  std::vector<Value*> emit_control_flow(const onnx::NodeProto& n, const std::vector<Value*>& ins, const Scope& scope,
                                        const OpsetMap& opsets, int depth, int since);
  std::vector<Value*> emit_control_flow_body(const onnx::NodeProto& n, const std::vector<Value*>& ins,
                                             const Scope& scope, const OpsetMap& opsets, int depth, int since);
  // The nodes of a subgraph (a branch or loop body) with `args` as its inputs; outer names stay visible.
  std::vector<Value*> emit_subgraph(const onnx::GraphProto& g, const onnx::NodeProto& owner, const Scope& outer,
                                    const std::vector<Value*>& args, const OpsetMap& opsets, int depth);
};

namespace {

const onnx::OpSchema* schema_for(const onnx::NodeProto& n, const OpsetMap& opsets) {
  const std::string dom = canonical_domain(n.domain());
  auto it = opsets.find(dom);
  if (it == opsets.end()) return nullptr;
  return onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(it->second), dom);
}

bool is_control_flow(const std::string& op) { return op == "If" || op == "Loop" || op == "Scan"; }

// The ONNX library spore builds against (1.12) knows schemas up to opset 17. The default-domain ops that opsets
// 18-21 changed or added, with the versions they changed in (from the ONNX operator changelog). An op listed here
// at the model's opset takes that version as its since_version: the mappings implement its new form (axes as
// inputs, num_outputs, per-channel GroupNormalization...), and its opset-17 schema (or function body) is not used.
const std::map<std::string, std::vector<int>>& later_versions() {
  static const std::map<std::string, std::vector<int>> t = {
      {"AffineGrid", {20}}, {"AveragePool", {19}}, {"BitwiseAnd", {18}}, {"BitwiseNot", {18}}, {"BitwiseOr", {18}},
      {"BitwiseXor", {18}}, {"Cast", {19, 21}}, {"CastLike", {19, 21}}, {"CenterCropPad", {18}}, {"Col2Im", {18}},
      {"Constant", {19, 21}}, {"ConstantOfShape", {20, 21}}, {"DFT", {20}}, {"DeformConv", {19}},
      {"DequantizeLinear", {19, 21}}, {"Equal", {19}}, {"Flatten", {21}}, {"Gelu", {20}}, {"GridSample", {20}},
      {"GroupNormalization", {18, 21}}, {"Identity", {19, 21}}, {"If", {19, 21}}, {"ImageDecoder", {20}},
      {"IsInf", {20}}, {"IsNaN", {20}}, {"Loop", {19, 21}}, {"LpPool", {18}}, {"Mish", {18}},
      {"OptionalGetElement", {18}}, {"OptionalHasElement", {18}}, {"Pad", {18, 19, 21}}, {"QLinearMatMul", {21}},
      {"QuantizeLinear", {19, 21}}, {"ReduceL1", {18}}, {"ReduceL2", {18}}, {"ReduceLogSum", {18}},
      {"ReduceLogSumExp", {18}}, {"ReduceMax", {18, 20}}, {"ReduceMean", {18}}, {"ReduceMin", {18, 20}},
      {"ReduceProd", {18}}, {"ReduceSumSquare", {18}}, {"RegexFullMatch", {20}}, {"Reshape", {19, 21}},
      {"Resize", {18, 19}}, {"Scan", {19, 21}}, {"ScatterElements", {18}}, {"ScatterND", {18}}, {"Shape", {19, 21}},
      {"Size", {19, 21}}, {"Split", {18}}, {"Squeeze", {21}}, {"StringConcat", {20}}, {"StringSplit", {20}},
      {"Transpose", {21}}, {"Unsqueeze", {21}},
  };
  return t;
}

// since_version of a default-domain node at the model's opset: the library's schema, or a later version from
// later_versions(); 0 when the op does not exist at that opset. `newer` says the library's schema is older.
int node_since(const onnx::NodeProto& n, const OpsetMap& opsets, const onnx::OpSchema* s, bool* newer = nullptr) {
  int since = s ? s->SinceVersion() : 0;
  if (newer) *newer = false;
  auto it = opsets.find("");
  const int64_t opset = it == opsets.end() ? 0 : it->second;
  if (auto t = later_versions().find(n.op_type()); t != later_versions().end())
    for (int v : t->second)
      if (v <= opset && v > since) {
        since = v;
        if (newer) *newer = true;
      }
  return since;
}

// A node of a non-default domain is a spore custom op of the same name when the domain is the op's plugin's
// domain or "spore.custom" (ops defined in process, without a domain, accept any).
const OpDef* custom_op_for(const onnx::NodeProto& n, const std::string& dom) {
  const OpDef* d = op_registry().find(n.op_type());
  if (d == nullptr || is_builtin_op(d->id)) return nullptr;
  return d->onnx_domain.empty() || dom == d->onnx_domain || dom == "spore.custom" ? d : nullptr;
}

bool schema_has_body(const onnx::OpSchema* s) { return s && (s->HasFunction() || s->HasContextDependentFunction()); }

// A context-dependent body needs the input types; `types` may hold default TypeProtos when unknown.
bool build_schema_body(const onnx::OpSchema* s, const onnx::NodeProto& n, const std::vector<onnx::TypeProto>& types,
                       onnx::FunctionProto& out) {
  if (s->HasFunction() && s->GetFunction()) {
    out = *s->GetFunction();
    return true;
  }
  if (!s->HasContextDependentFunction()) return false;
  try {
    onnx::FunctionBodyBuildContextImpl ctx(n, types);
    return s->BuildContextDependentFunction(ctx, out);
  } catch (const std::exception&) {
    return false;
  }
}

// Body nodes with attribute references (ref_attr_name) take the caller's attribute of that name.
// A referenced attribute the caller leaves out takes the op schema's default.
onnx::NodeProto substitute_attrs(const onnx::NodeProto& body_node, const onnx::NodeProto& caller,
                                 const onnx::OpSchema* schema) {
  onnx::NodeProto out = body_node;
  out.clear_attribute();
  for (const auto& a : body_node.attribute()) {
    if (a.ref_attr_name().empty()) {
      *out.add_attribute() = a;
      continue;
    }
    if (const auto* given = find_attr(caller, a.ref_attr_name())) {
      onnx::AttributeProto copy = *given;
      copy.set_name(a.name());
      *out.add_attribute() = copy;
    } else if (schema) {
      auto it = schema->attributes().find(a.ref_attr_name());
      if (it != schema->attributes().end() && it->second.default_value.type() != onnx::AttributeProto::UNDEFINED) {
        onnx::AttributeProto copy = it->second.default_value;
        copy.set_name(a.name());
        *out.add_attribute() = copy;
      }
    }
  }
  return out;
}

constexpr int max_function_depth = 16;

}  // namespace

Importer::Verdict Importer::classify(const onnx::NodeProto& n, const OpsetMap& opsets, int depth) const {
  const std::string dom = canonical_domain(n.domain());
  if (depth > max_function_depth) return {"unsupported", "function bodies nest too deeply (recursive function?)"};
  // Model-local functions first: they may shadow anything.
  if (auto it = local_functions.find(n.domain() + ":" + n.op_type()); it != local_functions.end()) {
    const OpsetMap body_opsets = opsets_of(it->second->opset_import(), opsets);
    for (const auto& b : it->second->node()) {
      const Verdict v = classify(b, body_opsets, depth + 1);
      if (v.status == "unsupported")
        return {"unsupported", fmt::format("model-local function body needs {}: {}", b.op_type(), v.note)};
    }
    return {"decomposed", "model-local function (inlined)"};
  }
  if (dom.empty() && is_control_flow(n.op_type())) {
    for (const auto& a : n.attribute()) {
      if (a.type() != onnx::AttributeProto::GRAPH) continue;
      for (const auto& b : a.g().node()) {
        const Verdict v = classify(b, opsets, depth + 1);
        if (v.status == "unsupported")
          return {"unsupported", fmt::format("its {} needs {}: {}", a.name(), b.op_type(), v.note)};
      }
    }
    return {"decomposed", n.op_type() == "If" ? "the branch taken, inlined (the condition must be known once inputs "
                                                "bind; from a model input: one plan per value)"
                                              : "unrolled (the trip count and condition must be known once inputs bind)"};
  }
  if (dom.empty()) {
    auto op_it = opsets.find("");
    const int64_t opset = op_it == opsets.end() ? 0 : op_it->second;
    const onnx::OpSchema* s = schema_for(n, opsets);
    bool newer = false;
    const int since = node_since(n, opsets, s, &newer);
    if (since == 0) return {"unsupported", fmt::format("not an ONNX op at opset {}", opset)};
    if (newer) s = nullptr;  // the library's schema (and function body) is an older version's
    std::string why_not;
    if (const OpMapping* t = find_op_mapping(n.op_type())) {
      const OpMapping& m = *t;
      if (since < m.min_since) {
        why_not = fmt::format("{}-{} (opset {}) predates the oldest version spore maps ({})", n.op_type(), since,
                              opset, m.min_since);
      } else {
        std::string reason = m.check ? m.check(n, since, info_of(n, depth)) : std::string();
        if (reason.empty()) return {m.decomposed ? "decomposed" : "supported", m.note};
        why_not = reason;
      }
    } else {
      why_not = "no spore mapping";
    }
    if (schema_has_body(s)) {
      onnx::FunctionProto body;
      std::vector<onnx::TypeProto> types;
      const NodeInfo info = info_of(n, depth);
      for (int i = 0; i < n.input_size(); ++i) types.push_back(info.type(i) ? *info.type(i) : onnx::TypeProto());
      if (build_schema_body(s, n, types, body)) {
        const OpsetMap body_opsets = opsets_of(body.opset_import(), opsets);
        for (const auto& b : body.node()) {
          const Verdict v = classify(b, body_opsets, depth + 1);
          if (v.status == "unsupported")
            return {"unsupported", fmt::format("{}; its ONNX function body needs {}: {}", why_not, b.op_type(), v.note)};
        }
        return {"decomposed", "ONNX function body (inlined)"};
      }
      if (s->HasContextDependentFunction()) return {"decomposed", "ONNX function body (inlined; built from input types)"};
    }
    return {"unsupported", why_not};
  }
  // Other domains: a custom op registered with spore under the same name.
  if (const OpDef* d = custom_op_for(n, dom))
    return {"supported", d->plugin.empty() ? "spore custom op" : fmt::format("custom op of plugin '{}'", d->plugin)};
  if (const OpDef* d = op_registry().find(n.op_type()); d && !d->onnx_domain.empty())
    return {"unsupported", fmt::format("custom op '{}' of plugin '{}' is in domain '{}' (or 'spore.custom'), not '{}'",
                                       d->name, d->plugin, d->onnx_domain, dom)};
  if (opsets.find(dom) == opsets.end())
    return {"unsupported", fmt::format("domain '{}' is not imported by the model", dom)};
  return {"unsupported", fmt::format("domain '{}' is not supported (a custom op? load its plugin with --custom-ops)", dom)};
}

void Importer::name_value(Value* v, const std::string& name) {
  if (name.empty() || v->name == name) return;
  Graph& g = *graph;
  if (Value* other = g.find_value(name)) {  // an auto-named value took it: move that one aside
    std::string alt;
    for (int k = 1;; ++k) {
      alt = fmt::format("{}_{}", name, k);
      if (!g.find_value(alt)) break;
    }
    g.rename_value(other, alt);
  }
  g.rename_value(v, name);
}

std::vector<Value*> Importer::inline_function(const onnx::FunctionProto& f, const onnx::NodeProto& caller,
                                              const std::vector<Value*>& ins, const OpsetMap& caller_opsets,
                                              int depth, const onnx::OpSchema* schema) {
  Scope scope;
  for (int i = 0; i < f.input_size(); ++i) scope[f.input(i)] = i < static_cast<int>(ins.size()) ? ins[i] : nullptr;
  const OpsetMap opsets = opsets_of(f.opset_import(), caller_opsets);
  for (const auto& b : f.node()) emit_node(substitute_attrs(b, caller, schema), scope, opsets, depth + 1);
  std::vector<Value*> outs;
  for (int i = 0; i < f.output_size(); ++i) {
    const std::string& o = f.output(i);
    if (i >= caller.output_size() || caller.output(i).empty()) {  // not requested: the body may skip it
      outs.push_back(nullptr);
      continue;
    }
    auto it = scope.find(o);
    SPORE_CHECK(it != scope.end() && it->second, ErrorCode::invalid_argument,
                "function body of {} does not define its output '{}'", node_label(caller), o);
    outs.push_back(it->second);
  }
  return outs;
}

void Importer::emit_node(const onnx::NodeProto& n, Scope& scope, const OpsetMap& opsets, int depth) {
  std::vector<Value*> ins;
  for (const std::string& name : n.input()) {
    if (name.empty()) {
      ins.push_back(nullptr);
      continue;
    }
    auto it = scope.find(name);
    SPORE_CHECK(it != scope.end(), ErrorCode::invalid_argument,
                "node {}: input '{}' is not defined before its use (graph not topologically sorted, or a missing "
                "initializer)", node_label(n), name);
    ins.push_back(it->second);
  }
  const int64_t watermark = max_value_id;
  std::vector<Value*> outs;
  try {
    const std::string dom = canonical_domain(n.domain());
    const onnx::OpSchema* s = dom.empty() ? schema_for(n, opsets) : nullptr;
    bool newer = false;
    const int since = dom.empty() ? node_since(n, opsets, s, &newer) : 0;
    if (newer) s = nullptr;  // an older version's schema: its function body is not this op's
    auto lf = local_functions.find(n.domain() + ":" + n.op_type());
    const OpMapping* t = find_op_mapping(n.op_type());
    bool mapped = false;
    // Only the sequence/optional ops (and control flow, functions) take handles; any other op names the input.
    auto tensors_only = [&] {
      for (size_t i = 0; i < ins.size(); ++i)
        if (composites.is(ins[i]))
          SPORE_FAIL(ErrorCode::invalid_argument, "input {} ('{}') is {}; this op takes tensors", i,
                     n.input(static_cast<int>(i)), composites.describe(ins[i]));
    };
    if (lf != local_functions.end()) {
      outs = inline_function(*lf->second, n, ins, opsets, depth, nullptr);
      mapped = true;
    } else if (dom.empty() && is_control_flow(n.op_type())) {
      outs = emit_control_flow(n, ins, scope, opsets, depth, since);
      mapped = true;
    } else if (dom.empty() && since > 0 && t && since >= t->min_since &&
               (!t->check || t->check(n, since, info_of(n, depth)).empty())) {
      if (!t->takes_composites) tensors_only();
      NodeCtx ctx(*this, n, since, ins);
      outs = t->emit(ctx);
      mapped = true;
    } else if (dom.empty() && schema_has_body(s)) {
      std::vector<onnx::TypeProto> types;
      for (Value* v : ins) types.push_back(v ? type_proto_of(composites, v) : onnx::TypeProto());
      onnx::FunctionProto body;
      SPORE_CHECK(build_schema_body(s, n, types, body), ErrorCode::unsupported,
                  "could not build the ONNX function body of this op");
      outs = inline_function(body, n, ins, opsets, depth, s);
      mapped = true;
    } else if (!dom.empty()) {
      if (const OpDef* d = custom_op_for(n, dom)) {
        tensors_only();
        NodeCtx ctx(*this, n, 1, ins);
        Attrs attrs;
        for (const auto& a : n.attribute()) {
          switch (a.type()) {
            case onnx::AttributeProto::INT: attrs.set(a.name(), a.i()); break;
            case onnx::AttributeProto::FLOAT: attrs.set(a.name(), static_cast<double>(a.f())); break;
            case onnx::AttributeProto::STRING: attrs.set(a.name(), a.s()); break;
            case onnx::AttributeProto::INTS: attrs.set(a.name(), std::vector<int64_t>(a.ints().begin(), a.ints().end())); break;
            case onnx::AttributeProto::FLOATS: attrs.set(a.name(), std::vector<double>(a.floats().begin(), a.floats().end())); break;
            default: SPORE_FAIL(ErrorCode::unsupported, "attribute '{}' has a kind spore custom ops cannot take", a.name());
          }
        }
        std::vector<Value*> present;
        for (Value* v : ins)
          if (v) present.push_back(v);
        outs = ctx.op_n(d->id, present, attrs);
        mapped = true;
      }
    }
    SPORE_CHECK(mapped, ErrorCode::unsupported, "no spore mapping (classification missed it)");
  } catch (const Error& e) {
    if (e.message().rfind("node ", 0) == 0) throw;  // already names its (inner) node
    throw Error(e.code(), fmt::format("node {}: {}", node_label(n), e.message()));
  }
  for (int i = 0; i < n.output_size(); ++i) {
    const std::string& name = n.output(i);
    if (name.empty()) continue;
    SPORE_CHECK(i < static_cast<int>(outs.size()) && outs[i], ErrorCode::unsupported,
                "node {}: output {} ('{}') is not produced by spore's mapping", node_label(n), i, name);
    Value* v = outs[i];
    // Fresh values take the ONNX name (so outputs keep their names); reused ones (Identity-like) keep theirs.
    if (depth == 0 && v->id > watermark) name_value(v, name);
    scope[name] = v;
  }
}

// ------------------------------------------------------------------------------------------- control flow

std::vector<Value*> Importer::emit_subgraph(const onnx::GraphProto& g, const onnx::NodeProto& owner, const Scope& outer,
                                            const std::vector<Value*>& args, const OpsetMap& opsets, int depth) {
  SPORE_CHECK(depth <= max_function_depth, ErrorCode::unsupported, "subgraphs nest too deeply");
  SPORE_CHECK(g.input_size() == static_cast<int>(args.size()), ErrorCode::invalid_argument,
              "the body of {} declares {} inputs, {} are passed", node_label(owner), g.input_size(), args.size());
  Scope scope = outer;  // names of the enclosing graphs stay visible
  for (int i = 0; i < g.input_size(); ++i) scope[g.input(i).name()] = args[static_cast<size_t>(i)];
  for (const auto& t : g.initializer()) scope[t.name()] = track(graph->add_constant(tensor_from_proto(t, t.name()), t.name()));
  for (const auto& b : g.node()) emit_node(b, scope, opsets, depth + 1);
  std::vector<Value*> outs;
  for (const auto& o : g.output()) {
    auto it = scope.find(o.name());
    SPORE_CHECK(it != scope.end() && it->second, ErrorCode::invalid_argument,
                "the body of {} does not define its output '{}'", node_label(owner), o.name());
    outs.push_back(it->second);
  }
  return outs;
}

std::vector<Value*> Importer::emit_control_flow(const onnx::NodeProto& n, const std::vector<Value*>& ins,
                                                const Scope& scope, const OpsetMap& opsets, int depth, int since) {
  try {
    return emit_control_flow_body(n, ins, scope, opsets, depth, since);
  } catch (const Error& e) {  // an error inside a branch or body names the node that holds it too
    const std::string prefix = fmt::format("node {}: ", node_label(n));
    if (e.message().rfind(prefix, 0) == 0) throw;
    throw Error(e.code(), prefix + "in its subgraph: " + e.message());
  }
}

std::vector<Value*> Importer::emit_control_flow_body(const onnx::NodeProto& n, const std::vector<Value*>& ins,
                                                     const Scope& scope, const OpsetMap& opsets, int depth, int since) {
  NodeCtx c(*this, n, since, ins);
  auto body = [&](const char* name) -> const onnx::GraphProto& {
    const onnx::AttributeProto* a = find_attr(n, name);
    if (!a || a->type() != onnx::AttributeProto::GRAPH) c.fail(ErrorCode::invalid_argument, "no '{}' graph", name);
    return a->g();
  };
  auto is_true = [&](int i) { return c.control_in(i).contiguous().item_at(0) != 0; };
  // Scan outputs: one value per iteration stacked along `axis` (iteration order as given).
  auto stack = [&](const std::vector<Value*>& parts, int64_t axis) -> Value* {
    if (parts.empty()) c.fail(ErrorCode::unsupported, "a scan output of a loop that runs zero times");
    std::vector<Value*> u;
    const int r = c.rank(parts[0]) + 1;
    const int64_t ax = axis < 0 ? axis + r : axis;
    for (Value* p : parts) u.push_back(c.op("unsqueeze"_op, {p}, {{"axes", std::vector<int64_t>{ax}}}));
    return u.size() == 1 ? u[0] : c.op("concat"_op, u, {{"axis", ax}});
  };
  constexpr int64_t max_unroll = 4096;
  if (n.op_type() == "If") {
    // A condition computed from data-dependent sizes (detectors' If(boxes.numel() == 0) around NMS): both branches
    // inlined, if_select picks at run time, and the plan's dynamic region runs only the branch taken.
    if (c.has_input(0) && !c.is_const(c.in(0)) && onnx_import::computed_from_data_dependent(c.in(0))) {
      const std::vector<Value*> a = emit_subgraph(body("then_branch"), n, scope, {}, opsets, depth);
      const std::vector<Value*> b = emit_subgraph(body("else_branch"), n, scope, {}, opsets, depth);
      if (static_cast<int>(a.size()) != n.output_size() || static_cast<int>(b.size()) != n.output_size())
        c.fail(ErrorCode::invalid_argument, "the branches give {} and {} outputs, the node has {}", a.size(), b.size(),
               n.output_size());
      std::vector<Value*> outs;
      for (size_t k = 0; k < a.size(); ++k) outs.push_back(c.op("if_select"_op, {c.in(0), a[k], b[k]}));
      return outs;
    }
    const bool cond = is_true(0);  // a model input here: the session compiles one plan per value
    std::vector<Value*> outs = emit_subgraph(body(cond ? "then_branch" : "else_branch"), n, scope, {}, opsets, depth);
    if (static_cast<int>(outs.size()) != n.output_size())
      c.fail(ErrorCode::invalid_argument, "the branch gives {} outputs, the node has {}", outs.size(), n.output_size());
    return outs;
  }
  if (n.op_type() == "Loop") {
    const onnx::GraphProto& g = body("body");
    const bool has_m = c.has_input(0), has_cond = c.has_input(1);
    // M read as the integer it is: exporters write INT64_MAX for "no limit", which a double does not hold.
    int64_t trip = -1;
    if (has_m) {
      const Tensor m = c.control_in(0).contiguous();
      if (m.numel() != 1) c.fail(ErrorCode::invalid_argument, "the trip count M has {} elements, not 1", m.numel());
      if (m.dtype() == DType::i64) trip = m.data<int64_t>()[0];
      else if (m.dtype() == DType::i32) trip = m.data<int32_t>()[0];
      else c.fail(ErrorCode::invalid_argument, "the trip count M is {}, not int64", dtype_name(m.dtype()));
    }
    bool cond = has_cond ? is_true(1) : true;
    const int n_carried = c.num_inputs() - 2;
    if (n_carried < 0) c.fail(ErrorCode::invalid_argument, "Loop needs the M and cond inputs (possibly empty)");
    std::vector<Value*> carried(ins.begin() + 2, ins.end());
    const int n_scan = g.output_size() - 1 - n_carried;
    if (n_scan < 0) c.fail(ErrorCode::invalid_argument, "the body has {} outputs for {} loop-carried values", g.output_size(), n_carried);
    std::vector<std::vector<Value*>> scans(static_cast<size_t>(n_scan));
    int64_t i = 0;
    for (; cond && (trip < 0 || i < trip); ++i) {
      if (i >= max_unroll)
        c.fail(ErrorCode::unsupported, "more than {} iterations (spore unrolls loops at compile time)", max_unroll);
      std::vector<Value*> args{c.konst(Tensor::scalar(static_cast<double>(i), DType::i64)),
                               c.konst(Tensor::scalar(cond ? 1.0 : 0.0, DType::boolean))};
      args.insert(args.end(), carried.begin(), carried.end());
      std::vector<Value*> outs = emit_subgraph(g, n, scope, args, opsets, depth);
      Value* cv = outs[0];
      if (!c.is_const(cv))
        c.fail(ErrorCode::unsupported,
               "the loop condition depends on data computed in the loop; spore unrolls loops whose trip count and "
               "condition are known at compile time");
      cond = cv->producer->payload.contiguous().item_at(0) != 0;
      for (int k = 0; k < n_carried; ++k) carried[static_cast<size_t>(k)] = outs[static_cast<size_t>(1 + k)];
      for (int k = 0; k < n_scan; ++k) scans[static_cast<size_t>(k)].push_back(outs[static_cast<size_t>(1 + n_carried + k)]);
    }
    std::vector<Value*> result = carried;
    for (const auto& parts : scans) result.push_back(stack(parts, 0));
    return result;
  }
  // Scan (opset 9+): the first N inputs are states, the last num_scan_inputs are sliced along their scan axes.
  if (since < 9) {
    // Scan-8: every state and scan input (and output) has a batch axis 0, scan inputs are [batch, steps, ...];
    // unrolled per batch row and step. A given sequence_lens (input 0) must be the full length of every row.
    const onnx::GraphProto& g8 = body("body");
    const int k8 = static_cast<int>(c.attr_i("num_scan_inputs", 0));
    const int ns = c.num_inputs() - 1 - k8;
    const int nout = g8.output_size() - ns;
    const std::vector<int64_t> dirs =
        c.attr_ints("directions", std::vector<int64_t>(static_cast<size_t>(std::max(k8, 0)), 0));
    if (k8 <= 0 || ns < 0 || nout < 0 || static_cast<int>(dirs.size()) != k8)
      c.fail(ErrorCode::invalid_argument, "num_scan_inputs {} and directions for {} inputs and {} body outputs", k8,
             c.num_inputs(), g8.output_size());
    const Shape s0 = c.static_shape(c.in(1 + ns), "scan input");
    if (s0.size() < 2)
      c.fail(ErrorCode::invalid_argument, "scan input is {}; Scan-8 takes [batch, steps, ...]", shape_str(s0));
    const int64_t batch = s0[0], steps = s0[1];
    for (int k = 0; k < k8; ++k) {
      const Shape sk = c.static_shape(c.in(1 + ns + k), "scan input");
      if (sk.size() < 2 || sk[0] != batch || sk[1] != steps)
        c.fail(ErrorCode::invalid_argument, "scan inputs {} and {} differ in batch or steps", shape_str(s0),
               shape_str(sk));
    }
    if (c.has_input(0))
      for (int64_t l : c.ints_in(0))
        if (l != steps)
          c.fail(ErrorCode::unsupported, "sequence_lens {} for {} steps (Scan-8 over ragged sequences)", l, steps);
    if (batch * steps > max_unroll)
      c.fail(ErrorCode::unsupported, "{} x {} iterations (spore unrolls up to {})", batch, steps, max_unroll);
    auto row = [&](Value* v, int64_t i) {
      return c.op("gather"_op, {v, c.konst(Tensor::scalar(static_cast<double>(i), DType::i64))},
                  {{"axis", int64_t{0}}});
    };
    std::vector<std::vector<Value*>> finals(static_cast<size_t>(ns)), outs8(static_cast<size_t>(nout));
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Value*> state, xs;
      for (int k = 0; k < ns; ++k) state.push_back(row(c.in(1 + k), b));
      for (int k = 0; k < k8; ++k) xs.push_back(row(c.in(1 + ns + k), b));
      std::vector<std::vector<Value*>> per_step(static_cast<size_t>(nout));
      for (int64_t t = 0; t < steps; ++t) {
        std::vector<Value*> args = state;
        for (int k = 0; k < k8; ++k)
          args.push_back(row(xs[static_cast<size_t>(k)], dirs[static_cast<size_t>(k)] ? steps - 1 - t : t));
        std::vector<Value*> outs = emit_subgraph(g8, n, scope, args, opsets, depth);
        for (int k = 0; k < ns; ++k) state[static_cast<size_t>(k)] = outs[static_cast<size_t>(k)];
        for (int j = 0; j < nout; ++j) per_step[static_cast<size_t>(j)].push_back(outs[static_cast<size_t>(ns + j)]);
      }
      for (int k = 0; k < ns; ++k) finals[static_cast<size_t>(k)].push_back(state[static_cast<size_t>(k)]);
      for (int j = 0; j < nout; ++j)
        outs8[static_cast<size_t>(j)].push_back(stack(per_step[static_cast<size_t>(j)], 0));
    }
    std::vector<Value*> result;
    for (const auto& f : finals) result.push_back(stack(f, 0));
    for (const auto& o : outs8) result.push_back(stack(o, 0));
    return result;
  }
  const onnx::GraphProto& g = body("body");
  const int k_in = static_cast<int>(c.attr_i("num_scan_inputs", 0));
  const int n_state = c.num_inputs() - k_in;
  if (k_in <= 0 || n_state < 0) c.fail(ErrorCode::invalid_argument, "num_scan_inputs {} for {} inputs", k_in, c.num_inputs());
  const int n_scan_out = g.output_size() - n_state;
  const std::vector<int64_t> in_axes = c.attr_ints("scan_input_axes", std::vector<int64_t>(static_cast<size_t>(k_in), 0));
  const std::vector<int64_t> in_dirs = c.attr_ints("scan_input_directions", std::vector<int64_t>(static_cast<size_t>(k_in), 0));
  const std::vector<int64_t> out_axes = c.attr_ints("scan_output_axes", std::vector<int64_t>(static_cast<size_t>(std::max(n_scan_out, 0)), 0));
  const std::vector<int64_t> out_dirs = c.attr_ints("scan_output_directions", std::vector<int64_t>(static_cast<size_t>(std::max(n_scan_out, 0)), 0));
  if (n_scan_out < 0 || static_cast<int>(in_axes.size()) != k_in || static_cast<int>(in_dirs.size()) != k_in ||
      static_cast<int>(out_axes.size()) != n_scan_out || static_cast<int>(out_dirs.size()) != n_scan_out)
    c.fail(ErrorCode::invalid_argument, "scan axes/directions do not match the scan inputs and outputs");
  int64_t len = -1;
  std::vector<int64_t> axes(static_cast<size_t>(k_in));
  for (int k = 0; k < k_in; ++k) {
    Value* x = c.in(n_state + k);
    axes[static_cast<size_t>(k)] = c.norm_axis(in_axes[static_cast<size_t>(k)], c.rank(x));
    const Shape s = c.static_shape(x, "scan input");
    const int64_t l = s[static_cast<size_t>(axes[static_cast<size_t>(k)])];
    if (len >= 0 && l != len) c.fail(ErrorCode::invalid_argument, "scan inputs of lengths {} and {}", len, l);
    len = l;
  }
  if (len > max_unroll) c.fail(ErrorCode::unsupported, "{} iterations (spore unrolls up to {})", len, max_unroll);
  std::vector<Value*> state(ins.begin(), ins.begin() + n_state);
  std::vector<std::vector<Value*>> scans(static_cast<size_t>(n_scan_out));
  for (int64_t t = 0; t < len; ++t) {
    std::vector<Value*> args = state;
    for (int k = 0; k < k_in; ++k) {
      const int64_t idx = in_dirs[static_cast<size_t>(k)] ? len - 1 - t : t;
      args.push_back(c.op("gather"_op, {c.in(n_state + k), c.konst(Tensor::scalar(static_cast<double>(idx), DType::i64))},
                          {{"axis", axes[static_cast<size_t>(k)]}}));
    }
    std::vector<Value*> outs = emit_subgraph(g, n, scope, args, opsets, depth);
    for (int k = 0; k < n_state; ++k) state[static_cast<size_t>(k)] = outs[static_cast<size_t>(k)];
    for (int j = 0; j < n_scan_out; ++j) scans[static_cast<size_t>(j)].push_back(outs[static_cast<size_t>(n_state + j)]);
  }
  std::vector<Value*> result = state;
  for (int j = 0; j < n_scan_out; ++j) {
    std::vector<Value*> parts = scans[static_cast<size_t>(j)];
    if (out_dirs[static_cast<size_t>(j)]) std::reverse(parts.begin(), parts.end());
    result.push_back(stack(parts, out_axes[static_cast<size_t>(j)]));
  }
  return result;
}

// ------------------------------------------------------------------------------------------- NodeCtx

NodeCtx::NodeCtx(Importer& im, const onnx::NodeProto& n, int since_version, std::vector<Value*> inputs)
    : node(n), since(since_version), im_(im), inputs_(std::move(inputs)), label_(node_label(n)) {}

void NodeCtx::fail_msg(ErrorCode code, const std::string& msg) const {
  throw Error(code, fmt::format("node {}: {}", label_, msg));
}

bool NodeCtx::has_attr(const std::string& name) const { return find_attr(node, name) != nullptr; }
const onnx::AttributeProto* NodeCtx::attr(const std::string& name) const { return find_attr(node, name); }

int64_t NodeCtx::attr_i(const std::string& name, int64_t def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::INT && a->type() != onnx::AttributeProto::UNDEFINED)
    fail(ErrorCode::invalid_argument, "attribute '{}' should be an int", name);
  return a->i();
}
double NodeCtx::attr_f(const std::string& name, double def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() == onnx::AttributeProto::INT) return static_cast<double>(a->i());
  if (a->type() != onnx::AttributeProto::FLOAT && a->type() != onnx::AttributeProto::UNDEFINED)
    fail(ErrorCode::invalid_argument, "attribute '{}' should be a float", name);
  return a->f();
}
std::string NodeCtx::attr_s(const std::string& name, const std::string& def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::STRING && a->type() != onnx::AttributeProto::UNDEFINED)
    fail(ErrorCode::invalid_argument, "attribute '{}' should be a string", name);
  return a->s();
}
std::vector<int64_t> NodeCtx::attr_ints(const std::string& name, const std::vector<int64_t>& def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() == onnx::AttributeProto::INT) return {a->i()};
  return {a->ints().begin(), a->ints().end()};
}
std::vector<double> NodeCtx::attr_floats(const std::string& name, const std::vector<double>& def) const {
  const auto* a = attr(name);
  if (!a) return def;
  if (a->type() == onnx::AttributeProto::FLOAT) return {static_cast<double>(a->f())};
  return {a->floats().begin(), a->floats().end()};
}
Tensor NodeCtx::attr_tensor(const std::string& name) const {
  const auto* a = attr(name);
  if (!a || !a->has_t()) fail(ErrorCode::invalid_argument, "attribute '{}' (a tensor) is missing", name);
  return tensor_from_proto(a->t(), fmt::format("{}.{}", label_, name));
}

Value* NodeCtx::in(int i) const {
  if (!has_input(i)) fail(ErrorCode::invalid_argument, "input {} is required but absent", i);
  return inputs_[i];
}
int NodeCtx::num_outputs() const {
  int k = node.output_size();
  while (k > 0 && node.output(k - 1).empty()) --k;
  return k;
}
bool NodeCtx::wants_output(int i) const { return i < node.output_size() && !node.output(i).empty(); }

bool NodeCtx::is_const(Value* v) const { return v && v->producer && v->producer->op == "constant"_op; }

const Tensor& NodeCtx::const_in(int i) const {
  Value* v = in(i);
  if (!is_const(v)) {
    // Which graph inputs is it computed from? Importing again with their values bound makes it constant.
    std::vector<const Value*> todo{v};
    std::set<const Value*> seen;
    while (!todo.empty()) {
      const Value* u = todo.back();
      todo.pop_back();
      if (!u || !u->producer || !seen.insert(u).second) continue;
      if (u->producer->op == "input"_op) im_.needed_inputs.insert(u->name);
      for (const Value* w : u->producer->inputs) todo.push_back(w);
    }
    fail(ErrorCode::unsupported,
         "input {} ('{}') must be known at import time (a constant, an initializer, or computable from static "
         "shapes); spore takes it as an attribute", i, node.input(i));
  }
  return v->producer->payload;
}

const Tensor& NodeCtx::control_in(int i) const {
  Value* v = in(i);
  if (!is_const(v)) {
    std::vector<const Value*> todo{v};
    std::set<const Value*> seen;
    while (!todo.empty()) {
      const Value* u = todo.back();
      todo.pop_back();
      if (!u || !u->producer || !seen.insert(u).second) continue;
      if (u->producer->op == "input"_op && is_floating(u->type.dtype)) {
        im_.refused = true;
        fail(ErrorCode::unsupported,
             "input {} ('{}') is computed from the floating-point model input '{}'; spore resolves control flow at "
             "compile time and would compile the model once per input value, so it refuses this model (control "
             "inputs computed from integer or bool model inputs, such as a flag or a sample rate, are specialised "
             "per value)",
             i, node.input(i), u->name);
      }
      for (const Value* w : u->producer->inputs) todo.push_back(w);
    }
  }
  return const_in(i);
}

std::vector<int64_t> NodeCtx::ints_in(int i) const {
  const Tensor& t = const_in(i);
  const Tensor c = t.contiguous();
  std::vector<int64_t> out(static_cast<size_t>(c.numel()));
  switch (c.dtype()) {
    case DType::i64: std::copy_n(c.data<int64_t>(), out.size(), out.begin()); break;
    case DType::i32: std::copy_n(c.data<int32_t>(), out.size(), out.begin()); break;
    default:
      if (is_floating(c.dtype())) fail(ErrorCode::invalid_argument, "input {} ('{}') should be integer, is {}", i, node.input(i), dtype_name(c.dtype()));
      for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<int64_t>(c.item_at(static_cast<int64_t>(k)));
  }
  return out;
}

std::vector<double> NodeCtx::floats_in(int i) const { return const_in(i).to_doubles(); }

Shape NodeCtx::static_shape(Value* v, const std::string& what) const {
  if (!v->type.is_static())
    fail(ErrorCode::unsupported, "{} ('{}', {}) needs a static shape here; fix the input shapes (--input-shape)", what,
         v->name, v->type.str());
  return v->type.shape();
}

int64_t NodeCtx::norm_axis(int64_t axis, int r) const {
  if (axis < -r || axis >= std::max(r, 1) + (r == 0 ? 0 : 0))
    if (!(r == 0 && (axis == 0 || axis == -1))) fail(ErrorCode::invalid_argument, "axis {} is out of range for rank {}", axis, r);
  return axis < 0 ? axis + r : axis;
}

std::vector<Value*> NodeCtx::op_n(OpId id, std::vector<Value*> ins, const Attrs& attrs) {
  for (Value* v : ins) {
    SPORE_ASSERT(v != nullptr, "null input to {} in {}", op_name(id), label_);
    if (im_.composites.is(v))
      fail(ErrorCode::invalid_argument, "{} reaches spore op {}, which takes tensors", im_.composites.describe(v),
           op_name(id));
  }
  const OpDef& def = op_registry().get(id);
  bool fold = current_dispatcher() != nullptr && !def.traits.has(Trait::random) && id != "constant"_op;
  for (Value* v : ins) fold = fold && is_const(v);
  if (fold) {
    std::vector<Tensor> ts;
    for (Value* v : ins) ts.push_back(v->producer->payload);
    std::vector<Tensor> outs = ops::call(id, ts, attrs);
    std::vector<Value*> vs;
    for (const Tensor& t : outs) vs.push_back(konst(t));
    return vs;
  }
  Node* n = build_node(*im_.graph, id, std::move(ins), attrs, node.name());
  for (Value* v : n->outputs) im_.track(v);
  return n->outputs;
}

Value* NodeCtx::op(OpId id, std::vector<Value*> ins, const Attrs& attrs) { return op_n(id, std::move(ins), attrs).at(0); }

Composites& NodeCtx::composites() { return im_.composites; }

Value* NodeCtx::konst(const Tensor& t) { return im_.track(im_.graph->add_constant(t.contiguous(), node.name())); }

Value* NodeCtx::scalar(double v, DType dt) { return konst(Tensor::scalar(v, dt)); }

Value* NodeCtx::cast(Value* v, DType dt) { return v->type.dtype == dt ? v : op("cast"_op, {v}, {{"dtype", dt}}); }

Value* NodeCtx::reshape(Value* v, const std::vector<int64_t>& shape) { return op("reshape"_op, {v}, {{"shape", shape}}); }

}  // namespace onnx_import

// ------------------------------------------------------------------------------------------- public API

bool OnnxImportReport::has_unsupported() const {
  return std::any_of(ops.begin(), ops.end(), [](const OnnxOpStatus& s) { return s.status == "unsupported"; });
}

std::string OnnxImportReport::format() const {
  std::string out = fmt::format("ONNX model: opset {}{}\n", opset, producer.empty() ? "" : ", producer " + producer);
  size_t w = 7;
  for (const auto& s : ops) w = std::max(w, (s.domain.empty() ? 0 : s.domain.size() + 1) + s.op_type.size());
  out += fmt::format("  {:<{}}  {:>5}  {:<11}  {}\n", "op type", w, "count", "status", "note");
  int64_t unsupported = 0;
  for (const auto& s : ops) {
    const std::string type = s.domain.empty() ? s.op_type : s.domain + "." + s.op_type;
    std::string note = s.note;
    if (s.status == "unsupported") {
      ++unsupported;
      std::string nodes;
      for (size_t i = 0; i < s.nodes.size() && i < 20; ++i) {
        if (i) nodes += ", ";
        nodes += s.nodes[i];
      }
      if (s.nodes.size() > 20) nodes += fmt::format(", ... ({} in all)", s.nodes.size());
      note += (note.empty() ? "" : "; ") + std::string("nodes: ") + nodes;
    }
    out += fmt::format("  {:<{}}  {:>5}  {:<11}  {}\n", type, w, s.count, s.status, note);
  }
  if (unsupported)
    out += fmt::format(
        "{} op type(s) unsupported. To run this model: decompose them in the exporter (e.g. a lower opset or "
        "export options), or register a custom op of the same name (spore --custom-ops lib.so).\n",
        unsupported);
  return out;
}

namespace {

onnx::ModelProto parse_model(const std::string& bytes, const std::string& name) {
  onnx::ModelProto m;
  SPORE_CHECK(!bytes.empty(), ErrorCode::parse_error, "'{}' is empty, not an ONNX model", name);
  SPORE_CHECK(m.ParseFromString(bytes), ErrorCode::parse_error,
              "'{}' is not a valid ONNX model (protobuf parse failed; {} bytes)", name, bytes.size());
  SPORE_CHECK(m.has_graph(), ErrorCode::parse_error, "'{}': the ONNX model has no graph", name);
  return m;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  SPORE_CHECK(f.good(), ErrorCode::io_error, "cannot open ONNX model '{}'", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

constexpr int64_t max_opset = 21;

oi::OpsetMap model_opsets(const onnx::ModelProto& m, const std::string& name) {
  oi::OpsetMap opsets = oi::opsets_of(m.opset_import(), {});
  if (m.opset_import_size() == 0) opsets[""] = 1;  // IR version 1-2 models have no opset import
  auto it = opsets.find("");
  SPORE_CHECK(it != opsets.end(), ErrorCode::unsupported, "'{}': the model imports no default-domain (ai.onnx) opset",
              name);
  SPORE_CHECK(it->second >= 1 && it->second <= max_opset, ErrorCode::unsupported,
              "'{}': ONNX opset {} is not supported (spore imports opsets up to {}; convert it with "
              "onnx.version_converter.convert_version(model, 21))", name, it->second, max_opset);
  return opsets;
}

OnnxImportReport classify_model(const onnx::ModelProto& m, const oi::OpsetMap& opsets, const oi::Importer& im) {
  OnnxImportReport rep;
  rep.opset = opsets.at("");
  rep.producer = m.producer_name() + (m.producer_version().empty() ? "" : " " + m.producer_version());
  std::map<std::pair<std::string, std::string>, OnnxOpStatus> by_type;
  auto rank = [](const std::string& s) { return s == "unsupported" ? 2 : s == "decomposed" ? 1 : 0; };
  for (const auto& n : m.graph().node()) {
    const auto v = im.classify(n, opsets, 0);
    const std::string dom = oi::canonical_domain(n.domain());
    OnnxOpStatus& s = by_type[{n.op_type(), dom}];
    s.domain = dom;
    s.op_type = n.op_type();
    ++s.count;
    if (s.status.empty() || rank(v.status) > rank(s.status)) {
      if (v.status == "unsupported" && s.status != "unsupported") s.nodes.clear();
      s.status = v.status;
      s.note = v.note;
    }
    if (v.status == s.status && (v.status == "unsupported" || s.nodes.size() < 8))
      s.nodes.push_back(oi::node_display_name(n));
  }
  for (auto& [k, s] : by_type) rep.ops.push_back(std::move(s));
  return rep;
}

// A graph input as declared: a tensor, or the tensors of a sequence or optional (`rank_known` false: a sequence's or
// optional's elements declare no shape, and the type's dims are empty).
struct InputDecl {
  OnnxValueKind kind = OnnxValueKind::tensor;
  TensorType type;
  bool rank_known = true;
};

InputDecl input_decl(const onnx::ValueInfoProto& vi, const std::string& input_name) {
  InputDecl decl;
  const oi::UnwrappedType u = oi::unwrap_type(vi.type(), fmt::format("graph input '{}'", vi.name()));
  decl.kind = u.kind;
  const auto& tt = *u.tensor;
  const std::optional<DType> dt = oi::dtype_from_onnx(tt.elem_type());
  SPORE_CHECK(dt.has_value(), ErrorCode::unsupported, "graph input '{}' has element type {}, which spore lacks",
              vi.name(), oi::onnx_type_name(tt.elem_type()));
  decl.type.dtype = *dt;
  if (!tt.has_shape() && u.kind != OnnxValueKind::tensor) {
    decl.rank_known = false;
    return decl;
  }
  SPORE_CHECK(tt.has_shape(), ErrorCode::unsupported,
              "graph input '{}' has no shape (unknown rank); spore needs the rank at import", vi.name());
  std::vector<Dim> dims;
  for (int i = 0; i < tt.shape().dim_size(); ++i) {
    const auto& d = tt.shape().dim(i);
    if (d.has_dim_value() && d.dim_value() >= 0)
      dims.emplace_back(d.dim_value());
    else if (d.has_dim_param() && !d.dim_param().empty())
      dims.push_back(Dim::symbol(oi::sanitize_symbol(d.dim_param())));
    else
      dims.push_back(Dim::symbol(oi::sanitize_symbol(fmt::format("{}_d{}", input_name, i))));
  }
  decl.type.dims = std::move(dims);
  return decl;
}

std::unique_ptr<Graph> import_model(const onnx::ModelProto& m, const std::string& name, const OnnxImportOptions& opts,
                                    OnnxImportReport* report) {
  const oi::OpsetMap opsets = model_opsets(m, name);
  oi::Importer im(m, opsets);
  OnnxImportReport rep = classify_model(m, opsets, im);
  if (report) *report = rep;
  if (rep.has_unsupported())
    throw Error(ErrorCode::unsupported, fmt::format("'{}' has ops spore cannot run:\n{}", name, rep.format()));

  const onnx::GraphProto& gp = m.graph();
  im.graph = std::make_unique<Graph>(gp.name().empty() ? "main" : gp.name());
  Graph& g = *im.graph;
  oi::Scope scope;
  std::set<std::string> init_names;
  for (const auto& t : gp.initializer()) init_names.insert(t.name());
  SPORE_CHECK(gp.sparse_initializer_size() == 0, ErrorCode::unsupported, "'{}': sparse initializers are not supported",
              name);
  // Inputs first (declaration order), then initializers as constants.
  // One graph tensor input (a tensor input, or an element of a sequence/optional one): its dims overridden by
  // input_dims, or bound to a value by input_values.
  auto add_tensor_input = [&](const std::string& in_name, TensorType t, bool rank_known) -> Value* {
    auto dims_it = opts.input_dims.find(in_name);
    auto value_it = opts.input_values.find(in_name);
    if (!rank_known) {  // the model declares no shape for these elements: the given dims or value are the shape
      if (value_it != opts.input_values.end()) {
        for (int64_t d : value_it->second.shape()) t.dims.emplace_back(d);
      } else {
        SPORE_CHECK(dims_it != opts.input_dims.end(), ErrorCode::unsupported,
                    "'{}': input '{}' has no declared shape; give its dims (spore needs the rank at import)", name,
                    in_name);
        t.dims = dims_it->second;
        for (const Dim& d : t.dims)
          SPORE_CHECK(d.is_static() || !d.sym.empty(), ErrorCode::invalid_argument,
                      "'{}': input '{}' has no declared shape, so every dim given for it must be a size or a name",
                      name, in_name);
      }
    }
    if (dims_it != opts.input_dims.end()) {
      SPORE_CHECK(dims_it->second.size() == t.dims.size(), ErrorCode::shape_mismatch,
                  "'{}': input shape for '{}' has {} dims, but the model's input is {} (rank {})", name, in_name,
                  dims_it->second.size(), t.str(), t.rank());
      for (size_t i = 0; i < t.dims.size(); ++i) {
        const Dim& want = dims_it->second[i];
        if (!want.is_static() && want.sym.empty()) continue;
        SPORE_CHECK(!(t.dims[i].is_static() && want.is_static()) || t.dims[i].size == want.size,
                    ErrorCode::shape_mismatch, "'{}': input '{}' dim {} is fixed to {} in the model, cannot become {}",
                    name, in_name, i, t.dims[i].size, want.size);
        t.dims[i] = want;
      }
    }
    if (value_it != opts.input_values.end()) {
      const Tensor& val = value_it->second;
      SPORE_CHECK(val.dtype() == t.dtype && val.rank() == t.rank(), ErrorCode::shape_mismatch,
                  "'{}': the value bound to input '{}' is {}{}, but the model's input is {}", name, in_name,
                  dtype_name(val.dtype()), shape_str(val.shape()), t.str());
      for (int i = 0; i < t.rank(); ++i)
        SPORE_CHECK(!t.dims[i].is_static() || t.dims[i].size == val.dim(i), ErrorCode::shape_mismatch,
                    "'{}': the value bound to input '{}' has shape {}, but the model's input is {}", name, in_name,
                    shape_str(val.shape()), t.str());
      Value* c = im.track(g.add_constant(val.contiguous(), in_name));
      im.name_value(c, in_name);
      return c;
    }
    if (!opts.keep_symbolic)
      for (Dim& d : t.dims)
        SPORE_CHECK(d.is_static(), ErrorCode::invalid_argument,
                    "graph input '{}' has a dynamic dim '{}' and keep_symbolic is off", in_name, d.sym);
    return im.track(g.add_input(std::move(t), in_name));
  };
  for (const auto& vi : gp.input()) {
    if (init_names.count(vi.name())) continue;  // an initializer with a default value: a constant
    const InputDecl decl = input_decl(vi, vi.name());
    if (decl.kind == OnnxValueKind::tensor) {
      scope[vi.name()] = add_tensor_input(vi.name(), decl.type, true);
      continue;
    }
    // A sequence or optional: as many tensors as input_counts says, each a graph input (OnnxValueKind).
    const bool is_optional = decl.kind == OnnxValueKind::optional || decl.kind == OnnxValueKind::optional_sequence;
    const bool is_sequence = decl.kind == OnnxValueKind::sequence || decl.kind == OnnxValueKind::optional_sequence;
    auto cnt = opts.input_counts.find(vi.name());
    SPORE_CHECK(cnt != opts.input_counts.end(), ErrorCode::invalid_argument,
                "'{}': input '{}' is {} of {}; spore needs to know how many tensors it holds (a sequence's length, or "
                "whether an optional holds one): give its tensors (`spore run --input`, deploy::Session) or set "
                "OnnxImportOptions::input_counts",
                name, vi.name(), is_optional ? (is_sequence ? "an optional sequence" : "an optional") : "a sequence",
                decl.type.str());
    const int64_t count = cnt->second;
    if (count == kOnnxAbsent) {
      SPORE_CHECK(is_optional, ErrorCode::invalid_argument, "'{}': input '{}' is a sequence; it cannot be absent", name,
                  vi.name());
      scope[vi.name()] = im.composites.make({false, {}, decl.type.dtype});
      continue;
    }
    SPORE_CHECK(count >= 0 && (is_sequence || count == 1), ErrorCode::invalid_argument,
                "'{}': input '{}' is an optional tensor: it holds 1 tensor or none, not {}", name, vi.name(), count);
    Value* v = nullptr;
    if (!is_sequence) {
      v = add_tensor_input(vi.name(), decl.type, decl.rank_known);
    } else {
      oi::Composite seq{true, {}, decl.type.dtype};
      for (int64_t i = 0; i < count; ++i) {
        TensorType t = decl.type;
        for (Dim& d : t.dims)  // each element has its own sizes: a dim named N in the model is N_0, N_1, ...
          if (!d.is_static()) d = Dim::symbol(fmt::format("{}_{}", d.sym, i));
        seq.elems.push_back(add_tensor_input(sequence_element_name(vi.name(), i), std::move(t), decl.rank_known));
      }
      v = im.composites.make(std::move(seq));
    }
    scope[vi.name()] = is_optional ? im.composites.make({false, {v}, decl.type.dtype}) : v;
  }
  for (const auto& t : gp.initializer()) {
    Value* v = im.track(g.add_constant(oi::tensor_from_proto(t, t.name()), t.name()));
    im.name_value(v, t.name());
    scope[t.name()] = v;
  }
  try {
    for (const auto& n : gp.node()) im.emit_node(n, scope, opsets, 0);
  } catch (const Error&) {
    if (report) {
      report->needs_values.assign(im.needed_inputs.begin(), im.needed_inputs.end());
      report->refused = im.refused;
    }
    throw;
  }
  std::vector<Value*> outs;
  std::vector<OnnxValueLayout> layouts;
  // An output that is a graph input, an earlier-named value or a repeated output gets its own identity node
  // so that it carries the ONNX output name.
  auto add_output = [&](Value* v, const std::string& out_name) {
    if (v->name != out_name) {
      Node* idn = build_node(g, "identity"_op, {v}, {}, out_name);
      im.name_value(idn->output(0), out_name);
      v = idn->output(0);
    }
    outs.push_back(v);
  };
  for (const auto& o : gp.output()) {
    auto it = scope.find(o.name());
    SPORE_CHECK(it != scope.end() && it->second, ErrorCode::invalid_argument,
                "'{}': graph output '{}' is not produced by any node", name, o.name());
    Value* v = it->second;
    // A sequence or optional output: its tensors, named as its inputs would be (OnnxValueKind).
    OnnxValueLayout lay{o.name(), OnnxValueKind::tensor, 1};
    const oi::Composite* c = im.composites.find(v);
    bool optional = false;
    if (c && !c->is_sequence) {
      optional = true;
      lay.kind = OnnxValueKind::optional;
      if (c->elems.empty()) {
        if (o.type().has_optional_type() && o.type().optional_type().elem_type().has_sequence_type())
          lay.kind = OnnxValueKind::optional_sequence;
        lay.count = kOnnxAbsent;
        layouts.push_back(lay);
        continue;
      }
      v = c->elems[0];
      c = im.composites.find(v);
    }
    if (c) {
      lay.kind = optional ? OnnxValueKind::optional_sequence : OnnxValueKind::sequence;
      lay.count = static_cast<int64_t>(c->elems.size());
      for (size_t i = 0; i < c->elems.size(); ++i)
        add_output(c->elems[i], sequence_element_name(o.name(), static_cast<int64_t>(i)));
    } else {
      add_output(v, o.name());
    }
    layouts.push_back(lay);
  }
  g.set_outputs(outs);
  if (report) report->outputs = layouts;
  // Drop what folding left unused (dead constants and the nodes that only fed them).
  bool changed = true;
  while (changed) {
    changed = false;
    std::vector<Node*> nodes = g.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* n = *it;
      if (n->op == "input"_op) continue;
      bool used = false;
      for (Value* v : n->outputs) used = used || !v->uses.empty() || g.is_output(v);
      if (!used) {
        g.erase_node(n);
        changed = true;
      }
    }
  }
  verify_graph(g);
  return std::move(im.graph);
}

}  // namespace

std::unique_ptr<Graph> import_onnx_bytes(const std::string& bytes, const std::string& name,
                                         const OnnxImportOptions& opts, OnnxImportReport* report) {
  const onnx::ModelProto m = parse_model(bytes, name);
  return import_model(m, name, opts, report);
}

std::unique_ptr<Graph> import_onnx(const std::string& path, const OnnxImportOptions& opts, OnnxImportReport* report) {
  return import_onnx_bytes(read_file(path), path, opts, report);
}

std::vector<OnnxInputInfo> onnx_graph_inputs(const std::string& bytes, const std::string& name,
                                             const OnnxImportOptions& opts) {
  const onnx::ModelProto m = parse_model(bytes, name);
  std::set<std::string> init_names;
  for (const auto& t : m.graph().initializer()) init_names.insert(t.name());
  std::vector<OnnxInputInfo> out;
  for (const auto& vi : m.graph().input()) {
    if (init_names.count(vi.name())) continue;
    InputDecl decl = input_decl(vi, vi.name());
    TensorType& t = decl.type;
    if (auto it = opts.input_dims.find(vi.name()); it != opts.input_dims.end() && it->second.size() == t.dims.size())
      for (size_t i = 0; i < t.dims.size(); ++i)
        if (it->second[i].is_static() || !it->second[i].sym.empty()) t.dims[i] = it->second[i];
    out.push_back({vi.name(), std::move(t), decl.kind, decl.rank_known});
  }
  return out;
}

int64_t onnx_model_opset(const std::string& bytes, const std::string& name) {
  const onnx::ModelProto m = parse_model(bytes, name);
  if (m.opset_import_size() == 0) return 1;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 0;
}

OnnxImportReport check_onnx_ops(const std::string& path) {
  const onnx::ModelProto m = parse_model(read_file(path), path);
  const oi::OpsetMap opsets = model_opsets(m, path);
  oi::Importer im(m, opsets);
  return classify_model(m, opsets, im);
}

bool looks_like_onnx(const std::string& head) {
  // A ModelProto starts with field 1 (ir_version, varint: 0x08) in every exporter we know; some writers put
  // another field first, so also accept the tags of opset_import (8, 0x42), producer_name (2, 0x12),
  // producer_version (3, 0x1a), domain (4, 0x22), model_version (5, 0x28), doc_string (6, 0x32), graph (7, 0x3a).
  if (head.empty()) return false;
  const unsigned char c = static_cast<unsigned char>(head[0]);
  if (c == 0x08) return head.size() >= 2 && static_cast<unsigned char>(head[1]) < 0x80 && head[1] > 0 && head[1] < 32;
  return c == 0x12 || c == 0x1a || c == 0x22 || c == 0x28 || c == 0x32 || c == 0x3a || c == 0x42;
}

}  // namespace spore::io
