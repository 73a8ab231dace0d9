// ONNX sequences and optionals: SequenceEmpty/Construct/Insert/At/Erase/Length, SplitToSequence,
// ConcatFromSequence, Optional, OptionalHasElement, OptionalGetElement, and Identity of a handle.
//
// spore's IR has tensors only, and it needs none other for these: every sequence a model builds has a length the
// importer knows (graph inputs give theirs with their tensors, OnnxImportOptions::input_counts; the ops here build the
// rest), so a sequence is a list of tensor values kept in the importer (Composites, onnx_import_internal.h) and the
// compiled plan sees only the tensors. An index or a split that is not a constant once inputs bind is an error
// naming the node (NodeCtx::const_in; a graph input it comes from is then bound by value, as Reshape's shape is).
// SequenceMap imports through its ONNX function body (a Loop over SequenceAt/SequenceInsert), unrolled.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "io/onnx/onnx_import_internal.h"

namespace spore::io {

const char* onnx_value_kind_name(OnnxValueKind k) {
  switch (k) {
    case OnnxValueKind::tensor: return "tensor";
    case OnnxValueKind::sequence: return "sequence";
    case OnnxValueKind::optional: return "optional";
    case OnnxValueKind::optional_sequence: return "optional sequence";
  }
  return "?";
}

std::string sequence_element_name(const std::string& name, int64_t i) { return fmt::format("{}.{}", name, i); }

namespace onnx_import {

// ------------------------------------------------------------------------------------------- handles

Value* Composites::make(Composite c) {
  Value& h = handles_.emplace_back();
  h.id = -1;  // never a graph value: the importer's "fresh value" naming and id tracking skip it
  h.name = c.is_sequence ? "(sequence)" : "(optional)";
  map_.emplace(&h, std::move(c));
  return &h;
}

const Composite* Composites::find(const Value* v) const {
  if (v == nullptr || v->producer != nullptr) return nullptr;
  auto it = map_.find(v);
  return it == map_.end() ? nullptr : &it->second;
}

std::string Composites::describe(const Value* v) const {
  const Composite* c = find(v);
  if (!c) return "a tensor";
  if (c->is_sequence) return fmt::format("a sequence of {} {} tensor(s)", c->elems.size(), dtype_name(c->elem_dtype));
  if (c->elems.empty()) return "an optional that holds nothing";
  return "an optional that holds " + describe(c->elems[0]);
}

bool NodeCtx::is_composite(Value* v) const { return const_cast<NodeCtx*>(this)->composites().is(v); }

const Composite& NodeCtx::sequence_in(int i) const {
  Value* v = in(i);
  const Composite* c = const_cast<NodeCtx*>(this)->composites().find(v);
  if (!c || !c->is_sequence)
    fail(ErrorCode::invalid_argument, "input {} ('{}') should be a sequence, is {}", i, node.input(i),
         const_cast<NodeCtx*>(this)->composites().describe(v));
  return *c;
}

const Composite& NodeCtx::optional_in(int i) const {
  Value* v = in(i);
  const Composite* c = const_cast<NodeCtx*>(this)->composites().find(v);
  if (!c || c->is_sequence)
    fail(ErrorCode::invalid_argument, "input {} ('{}') should be an optional, is {}", i, node.input(i),
         const_cast<NodeCtx*>(this)->composites().describe(v));
  return *c;
}

// ------------------------------------------------------------------------------------------- types

UnwrappedType unwrap_type(const onnx::TypeProto& t, const std::string& what) {
  UnwrappedType u;
  const onnx::TypeProto* inner = &t;
  if (inner->has_optional_type()) {
    inner = &inner->optional_type().elem_type();
    u.kind = OnnxValueKind::optional;
    SPORE_CHECK(!inner->has_optional_type(), ErrorCode::unsupported, "{} is an optional of an optional", what);
  }
  if (inner->has_sequence_type()) {
    inner = &inner->sequence_type().elem_type();
    u.kind = u.kind == OnnxValueKind::optional ? OnnxValueKind::optional_sequence : OnnxValueKind::sequence;
    SPORE_CHECK(inner->has_tensor_type(), ErrorCode::unsupported,
                "{} is a sequence of {}; spore takes sequences of tensors only", what,
                inner->has_sequence_type() ? "sequences"
                : inner->has_map_type()    ? "maps"
                                           : "non-tensors");
  }
  SPORE_CHECK(!inner->has_map_type(), ErrorCode::unsupported, "{} is a map; spore has no map values", what);
  SPORE_CHECK(inner->has_tensor_type(), ErrorCode::unsupported, "{} is not a tensor (type case {})", what,
              static_cast<int>(inner->value_case()));
  u.tensor = &inner->tensor_type();
  return u;
}

onnx::TypeProto type_proto_of(const Composites& cs, const Value* v) {
  onnx::TypeProto t;
  if (const Composite* c = cs.find(v)) {
    if (c->is_sequence) {
      t.mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(onnx_type_of(c->elem_dtype));
    } else if (!c->elems.empty()) {
      *t.mutable_optional_type()->mutable_elem_type() = type_proto_of(cs, c->elems[0]);
    } else {
      t.mutable_optional_type()->mutable_elem_type()->mutable_tensor_type();
    }
    return t;
  }
  auto* tt = t.mutable_tensor_type();
  tt->set_elem_type(onnx_type_of(v->type.dtype));
  auto* sh = tt->mutable_shape();
  for (const Dim& d : v->type.dims) {
    auto* dim = sh->add_dim();
    if (d.is_static()) dim->set_dim_value(d.size);
    else dim->set_dim_param(d.sym);
  }
  return t;
}

// ------------------------------------------------------------------------------------------- the ops

namespace {

using V = std::vector<Value*>;
using Ints = std::vector<int64_t>;

// A scalar position input (SequenceInsert/At/Erase) as an index into a sequence of n, negatives from the back.
// `end_ok`: n itself is valid (insert at the back).
int64_t position_in(NodeCtx& c, int i, int64_t n, bool end_ok) {
  const Ints p = c.ints_in(i);
  if (p.size() != 1)
    c.fail(ErrorCode::invalid_argument, "input {} ('{}') should be one index, has {} elements", i, c.node.input(i),
           p.size());
  const int64_t hi = end_ok ? n : n - 1;
  if (p[0] < -n || p[0] > hi) {
    if (n == 0 && !end_ok) c.fail(ErrorCode::invalid_argument, "position {} in an empty sequence", p[0]);
    c.fail(ErrorCode::invalid_argument, "position {} is out of range for a sequence of {} (valid: {} to {})", p[0], n,
           -n, hi);
  }
  return p[0] < 0 ? p[0] + n : p[0];
}

void check_elem(NodeCtx& c, const Composite& s, Value* t, const char* what) {
  if (c.is_composite(t))
    c.fail(ErrorCode::invalid_argument, "{} is {}; a sequence holds tensors", what, c.composites().describe(t));
  if (c.dtype(t) != s.elem_dtype)
    c.fail(ErrorCode::dtype_mismatch, "{} is {}, the sequence holds {}", what, dtype_name(c.dtype(t)),
           dtype_name(s.elem_dtype));
}

V emit_sequence_empty(NodeCtx& c) {
  const auto dt = dtype_from_onnx(static_cast<int32_t>(c.attr_i("dtype", onnx::TensorProto::FLOAT)));
  if (!dt)
    c.fail(ErrorCode::unsupported, "dtype {}, which spore lacks",
           onnx_type_name(static_cast<int32_t>(c.attr_i("dtype", 1))));
  return {c.composites().make({true, {}, *dt})};
}

V emit_sequence_construct(NodeCtx& c) {
  Composite s;
  for (int i = 0; i < c.num_inputs(); ++i) {
    Value* t = c.in(i);
    if (i == 0) s.elem_dtype = c.dtype(t);
    check_elem(c, s, t, fmt::format("input {} ('{}')", i, c.node.input(i)).c_str());
    s.elems.push_back(t);
  }
  if (s.elems.empty())
    c.fail(ErrorCode::invalid_argument, "needs at least one input (SequenceEmpty makes an empty sequence)");
  return {c.composites().make(std::move(s))};
}

V emit_sequence_insert(NodeCtx& c) {
  Composite s = c.sequence_in(0);
  Value* t = c.in(1);
  const int64_t n = static_cast<int64_t>(s.elems.size());
  check_elem(c, s, t, fmt::format("the tensor ('{}')", c.node.input(1)).c_str());
  const int64_t pos = c.has_input(2) ? position_in(c, 2, n, true) : n;
  s.elems.insert(s.elems.begin() + pos, t);
  return {c.composites().make(std::move(s))};
}

V emit_sequence_at(NodeCtx& c) {
  const Composite& s = c.sequence_in(0);
  return {s.elems[static_cast<size_t>(position_in(c, 1, static_cast<int64_t>(s.elems.size()), false))]};
}

V emit_sequence_erase(NodeCtx& c) {
  Composite s = c.sequence_in(0);
  const int64_t n = static_cast<int64_t>(s.elems.size());
  if (!c.has_input(1) && n == 0) c.fail(ErrorCode::invalid_argument, "erases from an empty sequence");
  const int64_t pos = c.has_input(1) ? position_in(c, 1, n, false) : n - 1;
  s.elems.erase(s.elems.begin() + pos);
  return {c.composites().make(std::move(s))};
}

V emit_sequence_length(NodeCtx& c) {
  return {c.konst(Tensor::scalar(static_cast<double>(c.sequence_in(0).elems.size()), DType::i64))};
}

// SplitToSequence: the pieces of `split` sizes (a 1-D input), of one chunk size (a scalar: the last piece smaller),
// or of size 1 (no split: keepdims=0 drops the axis) along `axis`.
V emit_split_to_sequence(NodeCtx& c) {
  Value* x = c.in(0);
  const int64_t axis = c.norm_axis(c.attr_i("axis", 0), c.rank(x));
  const Dim& d = x->type.dims.at(static_cast<size_t>(axis));
  if (!d.is_static())
    c.fail(ErrorCode::unsupported,
           "splits symbolic dim '{}' of input '{}': the number of pieces must be known at "
           "import time (give the input's shape)",
           d.sym, c.node.input(0));
  const int64_t len = d.size;
  Ints sizes;
  bool squeeze = false;
  if (c.has_input(1)) {
    const Tensor& sp = c.const_in(1);
    const Ints v = c.ints_in(1);
    if (sp.rank() == 0) {
      if (v[0] <= 0) c.fail(ErrorCode::invalid_argument, "split size {} is not positive", v[0]);
      for (int64_t at = 0; at < len; at += v[0]) sizes.push_back(std::min(v[0], len - at));
    } else {
      if (sp.rank() != 1) c.fail(ErrorCode::invalid_argument, "split should be a scalar or 1-D, is rank {}", sp.rank());
      int64_t sum = 0;
      for (int64_t s : v) {
        if (s < 0) c.fail(ErrorCode::invalid_argument, "split size {} is negative", s);
        sum += s;
      }
      if (sum != len)
        c.fail(ErrorCode::invalid_argument, "split sizes {} sum to {}, but dim {} is {}", fmt::join(v, ","), sum, axis,
               len);
      sizes = v;
    }
  } else {
    sizes.assign(static_cast<size_t>(len), 1);
    squeeze = c.attr_i("keepdims", 1) == 0;
  }
  Composite s{true, {}, c.dtype(x)};
  if (sizes.size() == 1) {
    s.elems.push_back(x);
  } else if (!sizes.empty()) {
    s.elems = c.op_n("split"_op, {x}, {{"sizes", sizes}, {"axis", axis}});
  }
  if (squeeze)
    for (Value*& e : s.elems) e = c.op("squeeze"_op, {e}, {{"axes", Ints{axis}}});
  return {c.composites().make(std::move(s))};
}

// ConcatFromSequence: concat along `axis`, or stack along a new one (new_axis=1).
V emit_concat_from_sequence(NodeCtx& c) {
  const Composite& s = c.sequence_in(0);
  if (s.elems.empty()) c.fail(ErrorCode::invalid_argument, "concatenates an empty sequence");
  const bool stack = c.attr_i("new_axis", 0) != 0;
  const int r = c.rank(s.elems[0]);
  for (Value* e : s.elems)
    if (c.rank(e) != r)
      c.fail(ErrorCode::shape_mismatch, "the sequence holds tensors of ranks {} and {}", r, c.rank(e));
  const int64_t axis = c.norm_axis(c.attr_i("axis", 0), stack ? r + 1 : r);
  V parts = s.elems;
  if (stack)
    for (Value*& p : parts) p = c.op("unsqueeze"_op, {p}, {{"axes", Ints{axis}}});
  if (parts.size() == 1) return {stack ? parts[0] : c.op("identity"_op, parts)};
  return {c.op("concat"_op, parts, {{"axis", axis}})};
}

V emit_optional(NodeCtx& c) {
  Composite o{false, {}, DType::f32};
  if (c.has_input(0)) {
    Value* v = c.in(0);
    if (const Composite* inner = c.composites().find(v); inner && !inner->is_sequence)
      c.fail(ErrorCode::invalid_argument, "input '{}' is already an optional", c.node.input(0));
    o.elems.push_back(v);
  } else if (!c.has_attr("type")) {
    c.fail(ErrorCode::invalid_argument, "an empty Optional needs its 'type' attribute");
  }
  return {c.composites().make(std::move(o))};
}

// A tensor or sequence where an optional is expected is an optional that holds it: opset 18 allows it outright, and
// a Loop-carried optional becomes what the body returns (a sequence) after the first iteration (ONNX Runtime and the
// reference implementation read it so). Opset 18 also allows an absent input: an optional that holds nothing.
V emit_optional_has_element(NodeCtx& c) {
  bool has = false;
  if (c.has_input(0)) {
    const Composite* o = c.composites().find(c.in(0));
    has = !o || o->is_sequence || !o->elems.empty();
  } else if (c.since < 18) {
    c.fail(ErrorCode::invalid_argument, "input 0 is required but absent (optional from opset 18)");
  }
  return {c.konst(Tensor::scalar(has ? 1.0 : 0.0, DType::boolean))};
}

V emit_optional_get_element(NodeCtx& c) {
  Value* v = c.in(0);
  const Composite* o = c.composites().find(v);
  if (!o || o->is_sequence) return {v};
  if (o->elems.empty())
    c.fail(ErrorCode::invalid_argument, "input '{}' is an optional that holds nothing", c.node.input(0));
  return {o->elems[0]};
}

V emit_identity(NodeCtx& c) {
  Value* v = c.in(0);
  if (c.is_composite(v)) return {v};
  return {c.op("identity"_op, {v})};
}

std::map<std::string, OpMapping> build_table() {
  std::map<std::string, OpMapping> t;
  auto add = [&](const std::string& name, int min_since, const std::string& note, EmitFn emit,
                 CheckFn check = nullptr) {
    t[name] = OpMapping{min_since, true, note, std::move(check), std::move(emit), true};
  };
  const std::string list = "a list of tensors in the importer (no kernel)";
  add("SequenceEmpty", 11, list, emit_sequence_empty, [](const onnx::NodeProto& n, int, const NodeInfo&) {
    const auto dt = static_cast<int32_t>(node_attr_i(n, "dtype", onnx::TensorProto::FLOAT));
    return dtype_from_onnx(dt) ? std::string() : "dtype " + onnx_type_name(dt);
  });
  add("SequenceConstruct", 11, list, emit_sequence_construct);
  add("SequenceInsert", 11, list + "; the position must be known once inputs bind", emit_sequence_insert);
  add("SequenceAt", 11, "the element (the position must be known once inputs bind)", emit_sequence_at);
  add("SequenceErase", 11, list + "; the position must be known once inputs bind", emit_sequence_erase);
  add("SequenceLength", 11, "constant (the length is known at import)", emit_sequence_length);
  add("SplitToSequence", 11, "split (the pieces known at import)", emit_split_to_sequence);
  add("ConcatFromSequence", 11, "concat (new_axis: unsqueeze + concat)", emit_concat_from_sequence);
  add("Optional", 15, "what it holds, or nothing (no kernel)", emit_optional);
  add("OptionalHasElement", 15, "constant (known at import)", emit_optional_has_element);
  add("OptionalGetElement", 15, "what the optional holds", emit_optional_get_element);
  t["Identity"] = OpMapping{1, false, "identity", nullptr, emit_identity, true};
  return t;
}

}  // namespace

const std::map<std::string, OpMapping>& sequence_op_table() {
  static const std::map<std::string, OpMapping> table = build_table();
  return table;
}

const OpMapping* find_op_mapping(const std::string& op_type) {
  if (auto it = sequence_op_table().find(op_type); it != sequence_op_table().end()) return &it->second;
  if (auto it = op_table().find(op_type); it != op_table().end()) return &it->second;
  return nullptr;
}

}  // namespace onnx_import
}  // namespace spore::io
