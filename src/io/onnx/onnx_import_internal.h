#pragma once
// Internal to the ONNX importer (onnx_import.cpp: model/graph/tensor/attribute plumbing and function
// inlining; onnx_import_ops.cpp: the op table). Includes the protobuf types, so only .cpp files include it.
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include <onnx/onnx_pb.h>

#include "base/attrs.h"
#include "io/onnx/onnx.h"
#include "ir/graph.h"

namespace spore::io::onnx_import {

// ONNX TensorProto -> spore tensor (raw_data or the typed fields). `what` names the tensor in errors
// (external data, unsupported element types, size mismatches).
Tensor tensor_from_proto(const onnx::TensorProto& t, const std::string& what);
// ONNX element type -> spore dtype; nullopt for types spore lacks (strings, uint16, complex...).
std::optional<DType> dtype_from_onnx(int32_t elem_type);
std::string onnx_type_name(int32_t elem_type);
int32_t onnx_type_of(DType d);

class Importer;

// ONNX sequences and optionals in the importer (onnx_import_sequence.cpp). spore's IR has tensors only, so such a
// value is a *handle*: a Value that belongs to no graph (no producer, id -1), standing for a list of tensor values the
// importer keeps here. Handles flow through the importer's scopes like tensors (so Identity, If branches and unrolled
// Loop bodies carry them), only the sequence and optional ops look inside, and every other op refuses one with an
// error naming the node and the input. A sequence's length is therefore known at import time: graph inputs fix it
// (OnnxImportOptions::input_counts), and an index into it must be a constant once inputs bind.
struct Composite {
  bool is_sequence = true;        // else an optional
  std::vector<Value*> elems;      // a sequence's tensors; an optional's content: none, or one tensor or sequence handle
  DType elem_dtype = DType::f32;  // a sequence's element type (its elements', SequenceEmpty's dtype)
};
class Composites {
 public:
  Value* make(Composite c);  // a new handle
  const Composite* find(const Value* v) const;
  bool is(const Value* v) const { return find(v) != nullptr; }
  // "a sequence of 3 tensors", "an optional that holds nothing", for error messages.
  std::string describe(const Value* v) const;

 private:
  std::deque<Value> handles_;
  std::unordered_map<const Value*, Composite> map_;
};

// What one op mapping sees: the node, its (resolved) inputs and helpers that build spore nodes.
// Every builder folds at import time when all of its inputs are constants.
class NodeCtx {
 public:
  NodeCtx(Importer& im, const onnx::NodeProto& node, int since, std::vector<Value*> inputs);

  const onnx::NodeProto& node;
  const int since;  // since_version of the op's schema at the model's opset

  // "Conv 'conv1'" (or "Conv (output 'y')" for unnamed nodes), for error messages.
  const std::string& label() const { return label_; }
  template <typename... Args>
  [[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) const {
    fail_msg(code, fmt::format(f, std::forward<Args>(args)...));
  }
  [[noreturn]] void fail_msg(ErrorCode code, const std::string& msg) const;

  // ---- attributes (defaults when absent; wrong kinds are errors naming the node and attribute)
  bool has_attr(const std::string& name) const;
  const onnx::AttributeProto* attr(const std::string& name) const;
  int64_t attr_i(const std::string& name, int64_t def) const;
  double attr_f(const std::string& name, double def) const;
  std::string attr_s(const std::string& name, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& name, const std::vector<int64_t>& def = {}) const;
  std::vector<double> attr_floats(const std::string& name, const std::vector<double>& def = {}) const;
  Tensor attr_tensor(const std::string& name) const;

  // ---- inputs
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  bool has_input(int i) const { return i < num_inputs() && inputs_[i] != nullptr; }
  Value* in(int i) const;  // required input (error naming it when absent)
  const std::vector<Value*>& inputs() const { return inputs_; }
  int num_outputs() const;  // counts trailing outputs that are present (non-empty names)
  bool wants_output(int i) const;
  // The value of a constant input (initializer, Constant node or folded subgraph); error naming the input
  // otherwise (spore needs it at import time).
  const Tensor& const_in(int i) const;
  // A control-flow input (If's cond, Loop's M and cond): const_in, except that one computed from a floating-point
  // model input is refused (OnnxImportReport::refused), since binding it would compile a plan per input value.
  const Tensor& control_in(int i) const;
  bool is_const(Value* v) const;
  std::vector<int64_t> ints_in(int i) const;     // constant integer input as a list
  std::vector<double> floats_in(int i) const;   // constant input as doubles

  // ---- types
  const TensorType& type(Value* v) const { return v->type; }
  DType dtype(Value* v) const { return v->type.dtype; }
  int rank(Value* v) const { return v->type.rank(); }
  Shape static_shape(Value* v, const std::string& what) const;  // error if any dim is symbolic
  int64_t norm_axis(int64_t axis, int rank) const;               // negative -> positive, range-checked

  // ---- building
  Value* op(OpId op, std::vector<Value*> inputs, const Attrs& attrs = {});
  std::vector<Value*> op_n(OpId op, std::vector<Value*> inputs, const Attrs& attrs = {});
  Value* konst(const Tensor& t);
  Value* scalar(double v, DType dtype);  // 0-D constant
  Value* cast(Value* v, DType dtype);    // no-op when already dtype
  Value* reshape(Value* v, const std::vector<int64_t>& shape);

  Importer& importer() { return im_; }
  Composites& composites();
  bool is_composite(Value* v) const;
  // Input i as a sequence / optional handle; an error naming the input otherwise.
  const Composite& sequence_in(int i) const;
  const Composite& optional_in(int i) const;

 private:
  Importer& im_;
  std::vector<Value*> inputs_;
  std::string label_;
};

using EmitFn = std::function<std::vector<Value*>(NodeCtx&)>;
// What classification knows about a node's inputs before anything is built (from graph inputs, value_info,
// initializers and Constant nodes; null where unknown, e.g. inside function bodies).
struct NodeInfo {
  std::vector<const onnx::TypeProto*> types;
  std::vector<const onnx::TensorProto*> consts;
  const onnx::TypeProto* type(int i) const { return i < static_cast<int>(types.size()) ? types[i] : nullptr; }
  const onnx::TensorProto* constant(int i) const { return i < static_cast<int>(consts.size()) ? consts[i] : nullptr; }
  int rank(int i) const;  // -1 when unknown
};
// Returns "" when the node is supported, else why not (an attribute value, a dtype, a missing feature).
using CheckFn = std::function<std::string(const onnx::NodeProto&, int since, const NodeInfo&)>;

struct OpMapping {
  int min_since = 1;        // oldest schema version (since_version) this mapping implements
  bool decomposed = false;  // several spore ops (status "decomposed") rather than one ("supported")
  std::string note;         // what it maps to
  CheckFn check;            // optional
  EmitFn emit;
  bool takes_composites = false;  // its inputs may be sequence/optional handles (else the importer refuses them)
};

// The op table (onnx_import_ops.cpp), keyed by ONNX op type of the default domain.
const std::map<std::string, OpMapping>& op_table();
// Adds the signal ops (onnx_import_signal.cpp: windows, MelWeightMatrix, DFT, STFT) to the table.
void add_signal_ops(std::map<std::string, OpMapping>& table);
// The sequence and optional ops (onnx_import_sequence.cpp), and Identity of a handle.
const std::map<std::string, OpMapping>& sequence_op_table();
// The mapping of a default-domain op: sequence_op_table() first, then op_table(); null when neither has it.
const OpMapping* find_op_mapping(const std::string& op_type);

// The tensor type inside an ONNX sequence/optional/tensor TypeProto, and what wraps it. Errors name `what` for maps,
// sequences of sequences and optionals of optionals.
struct UnwrappedType {
  OnnxValueKind kind = OnnxValueKind::tensor;
  const onnx::TypeProto_Tensor* tensor = nullptr;
};
UnwrappedType unwrap_type(const onnx::TypeProto& t, const std::string& what);
// A TypeProto for a tensor or handle value (function bodies that depend on input types, e.g. SequenceMap's).
onnx::TypeProto type_proto_of(const Composites& cs, const Value* v);
// The ops whose output size the data decides (onnx_import_dynamic.cpp): NonZero, Compress, Unique, NonMaxSuppression,
// and TopK's form with k computed at run time (wrapping the TopK mapping already in `t`).
void add_dynamic_shape_mappings(std::map<std::string, OpMapping>& t);
// Whether v is computed from a value whose size the data decides (a NonZero output, ...): such a value is known only
// when the plan runs, so an op that needs it (a shape, an If condition) takes its run-time form.
bool computed_from_data_dependent(const Value* v);

// Attribute accessors on a raw NodeProto for CheckFns.
const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name);
int64_t node_attr_i(const onnx::NodeProto& n, const std::string& name, int64_t def);
std::string node_attr_s(const onnx::NodeProto& n, const std::string& name, const std::string& def);

}  // namespace spore::io::onnx_import
