#pragma once
// ONNX in and out (import: opsets 1-21; export: opset 17). Protobuf types stay inside the .cpp files.
//
//   io::OnnxImportReport rep;
//   auto g = io::import_onnx("model.onnx", {}, &rep);   // throws with the unsupported list if any
//   io::export_onnx(*g, "out.onnx");                       // opset 17; ONNX Runtime and Netron open it
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace spore::io {

// ONNX sequence and optional values (onnx_import_sequence.cpp). spore's IR has tensors only: the importer keeps a
// sequence as a list of tensor values and an optional as what it holds, so such a graph input is given as its tensors
// and such an output comes back as its tensors. A sequence NAME of length k is the graph tensors NAME.0 ... NAME.{k-1}
// (sequence_element_name); an optional is what it holds (the tensor NAME, or a sequence's NAME.i), or nothing.
// How many tensors each one is (its "count") is part of the input signature (OnnxImportOptions::input_counts) and
// is reported for the outputs (OnnxImportReport::outputs): a tensor 1, a sequence its length, an optional tensor 1,
// an optional sequence its length, and an optional that holds nothing `kOnnxAbsent`.
enum class OnnxValueKind { tensor, sequence, optional, optional_sequence };
constexpr int64_t kOnnxAbsent = -1;
const char* onnx_value_kind_name(OnnxValueKind k);  // "tensor", "sequence", "optional", "optional sequence"
std::string sequence_element_name(const std::string& name, int64_t i);  // "s.0"
struct OnnxValueLayout {
  std::string name;  // the ONNX output name
  OnnxValueKind kind = OnnxValueKind::tensor;
  int64_t count = 1;  // graph tensors it maps to, in order (kOnnxAbsent: an optional that holds nothing)
};

// One ONNX op type found in a model and how spore handles it.
struct OnnxOpStatus {
  std::string domain;   // "" for the default domain
  std::string op_type;  // "Conv"
  int64_t count = 0;
  // "supported": maps to spore ops with kernels; "decomposed": maps to several spore ops or an ONNX
  // function body / op decomposition; "unsupported": neither (node names listed).
  std::string status;
  std::string note;                 // why unsupported / what it decomposes into
  std::vector<std::string> nodes;   // node names (for unsupported ones: all of them)
};

struct OnnxImportReport {
  int64_t opset = 0;
  std::string producer;              // producer_name + version from the model
  std::vector<OnnxOpStatus> ops;     // sorted by op type
  // Graph inputs whose *values* the import needed (an op took a value computed from them as an attribute, e.g.
  // Reshape's shape or TopK's k given as a model input). Filled when import fails for that reason: importing
  // again with those inputs in OnnxImportOptions::input_values succeeds (deploy::Session does this).
  std::vector<std::string> needs_values;
  // The import failed for a reason no input shapes or values fix (an If/Loop control input computed from a float
  // model input): deploy::Session fails at load instead of learning values.
  bool refused = false;
  // Every graph output as the model declares it, and how many of the graph's (flat) outputs it took. Filled when the
  // import succeeds.
  std::vector<OnnxValueLayout> outputs;
  bool has_unsupported() const;
  // Multi-line table: op type, count, status, nodes of the unsupported ones, and what the user can do.
  std::string format() const;
};

struct OnnxImportOptions {
  // Symbolic dims keep the model's dim_param names; unnamed dynamic dims become "<input>_d<i>".
  bool keep_symbolic = true;
  // Overrides of graph input dims, applied before any node is imported (so Shape/Reshape chains that need
  // static sizes import): input name -> dims; a symbolic dim with an empty name keeps the model's dim.
  // Static dims that contradict static model dims are an error naming the input.
  std::map<std::string, std::vector<Dim>> input_dims;
  // Graph inputs bound to values: they become constants (dtype and rank must match the declared input), so
  // everything computed from them folds. A model compiled this way is specialised to those values.
  std::map<std::string, Tensor> input_values;
  // Sequence and optional graph inputs: how many tensors each is given as (see OnnxValueKind; kOnnxAbsent for an
  // optional that holds nothing). Required for each such input: without it the import fails naming the input.
  // `input_dims` and `input_values` name a sequence's tensors NAME.0, NAME.1, ...
  std::map<std::string, int64_t> input_counts;
};

// A graph input as the model declares it (symbolic dims named as import_onnx names them), after `input_dims`
// overrides; initializers that double as inputs are left out. Reads only the graph's inputs.
struct OnnxInputInfo {
  std::string name;
  TensorType type;  // a sequence's (or optional's) element type
  OnnxValueKind kind = OnnxValueKind::tensor;
  bool rank_known = true;  // false: the model declares no shape for a sequence's elements (`type.dims` is empty)
};
std::vector<OnnxInputInfo> onnx_graph_inputs(const std::string& bytes, const std::string& name,
                                             const OnnxImportOptions& opts = {});
// The default-domain opset a model imports (1 for models without opset imports).
int64_t onnx_model_opset(const std::string& bytes, const std::string& name);

// Imports an ONNX model file (or bytes) into a spore graph (weights become constants). Throws spore::Error
// (code unsupported) whose message is the report's table when any op is unsupported, and clear errors for
// malformed protobufs, missing initializers, bad attributes (naming the node).
std::unique_ptr<Graph> import_onnx(const std::string& path, const OnnxImportOptions& opts = {},
                                   OnnxImportReport* report = nullptr);
std::unique_ptr<Graph> import_onnx_bytes(const std::string& bytes, const std::string& name,
                                         const OnnxImportOptions& opts = {}, OnnxImportReport* report = nullptr);
// Classifies every op of a model without failing on unsupported ones.
OnnxImportReport check_onnx_ops(const std::string& path);

// True when the bytes look like an ONNX ModelProto (used by load_model to pick the reader).
bool looks_like_onnx(const std::string& head);

struct OnnxExportOptions {
  int64_t opset = 17;
  std::string producer = "spore";
};
// Writes a spore graph as an ONNX model (atomic write). Every spore op with an ONNX equivalent maps to it
// (or to a small subgraph); a graph with an op that has none fails naming the node.
void export_onnx(const Graph& g, const std::string& path, const OnnxExportOptions& opts = {});
std::string export_onnx_bytes(const Graph& g, const OnnxExportOptions& opts = {});

}  // namespace spore::io
