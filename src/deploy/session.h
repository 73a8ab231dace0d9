#pragma once
// A deployed model that runs on whatever inputs it is given (issue 22, "shapes at run time").
//
//   deploy::Session s("resnet.onnx");            // .onnx, .spore or text IR
//   std::vector<Tensor> y = s.run({x});           // x: any batch, any image size the model allows
//
// Symbolic dims bind from the given inputs' shapes (consistently across inputs). A plan is compiled per concrete
// input signature and kept in a bounded LRU cache, so a new batch or image size costs one compile. ONNX models
// whose shape computations (Shape -> Gather -> Concat -> Reshape, ...) need concrete sizes are imported again per
// signature with the input dims bound, so those chains fold. An input whose *value* an op takes as an attribute
// (Reshape's shape, TopK's k, Resize's sizes, ... given as model inputs) becomes part of the signature: the model is
// imported with that input bound to its value. Output shapes that depend on the data (NonZero, Unique, NMS, TopK with
// a computed k, ...) run in the plan's dynamic region (runtime/dynamic_region.h): new data never compiles a new plan.
// What still cannot be compiled (an unsupported op, a shape the importer needs that depends on data) fails with the
// importer's error, which names the node.
//
// ONNX sequence and optional inputs and outputs travel as their tensors (io::OnnxValueKind), with a Layout:
//   s.run({a, b, x}, {2, 1});   // input 0 a sequence of 2 tensors (a, b), input 1 the tensor x
// How many tensors each one holds is part of the signature, like a shape: a new sequence length is one compile.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "io/onnx/onnx.h"
#include "ir/graph.h"
#include "runtime/plan.h"

namespace spore::deploy {

struct SessionOptions {
  CompileOptions compile;                               // `inference` is always set: a session runs a model
  size_t max_plans = 8;                                 // plans kept, least recently used dropped first
  std::map<std::string, std::vector<Dim>> input_dims;  // fixes input dims, as `--input-shape` does
};

struct SessionStats {
  int64_t runs = 0;       // calls of specialize (run calls it)
  int64_t compiles = 0;   // plans compiled (cache misses)
  int64_t imports = 0;    // ONNX imports made for a signature (beyond the first, symbolic one)
  int64_t evictions = 0;  // plans dropped by the LRU bound
};

struct SessionInput {
  std::string name;
  TensorType type;  // as the model declares it (symbolic dims named), after SessionOptions::input_dims; for an ONNX
                    // sequence or optional input, its tensors' type
  io::OnnxValueKind kind = io::OnnxValueKind::tensor;
  bool rank_known = true;  // false: a sequence's (optional's) tensors declare no shape; `type.dims` is empty
};

// How many tensors each model input (or output) is, in order: a tensor 1; a sequence its length; an optional 1 (an
// optional sequence its length) or io::kOnnxAbsent when it holds nothing. Empty: one tensor each.
using Layout = std::vector<int64_t>;
// The names of the tensors `layout` makes of `inputs`: NAME for a tensor or optional tensor, NAME.0, NAME.1, ...
// for a sequence's; an error naming the input when a count does not fit its kind.
std::vector<std::string> flat_input_names(const std::vector<SessionInput>& inputs, const Layout& layout);

// One compiled form of the model for one input signature.
struct Specialization {
  Plan plan;
  std::vector<size_t> plan_inputs;    // for each plan input, the session input it takes
  std::vector<std::string> bound_values;  // session inputs compiled in as constants (their values are the key)
  std::string how;                    // "symbolic graph" | "imported for these shapes" | "... and values of k"
  // Each model output and how many of the plan's outputs it is (ONNX sequences and optionals; see Layout). Empty
  // when every output is one tensor.
  std::vector<io::OnnxValueLayout> outputs;
  // The plan's inputs picked from the session's.
  std::vector<Tensor> select(std::span<const Tensor> inputs) const;
};

// Replaces the named graph inputs' dims (a static dim fixes a symbolic one; a symbolic dim with an empty name keeps
// the model's; a static dim that contradicts a static model dim is an error naming `option` and the input) and
// re-infers every type.
void apply_input_dims(Graph& g, const std::map<std::string, std::vector<Dim>>& dims,
                      const std::string& option = "--input-shape");

class Session {
 public:
  explicit Session(const std::string& path, SessionOptions opts = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  const std::string& path() const;
  const std::string& model_name() const;
  const std::vector<SessionInput>& inputs() const;
  // Why the model is re-imported per signature ("" when one symbolic graph serves every signature).
  const std::string& per_signature_reason() const;

  // Checks the inputs against the declared types (count, dtype, rank, static dims, one size per symbol) and
  // returns the symbol bindings. Errors name the input and the dim. `partial`: undefined tensors are skipped
  // (inputs not given yet), so the bindings of the given ones can shape the rest.
  std::map<std::string, int64_t> bind(std::span<const Tensor> inputs, bool partial = false) const;
  // The plan for these inputs' signature, compiled on a miss (and counted in stats).
  Specialization& specialize(std::span<const Tensor> inputs);
  std::vector<Tensor> run(std::span<const Tensor> inputs);
  // The same for a model with sequence or optional inputs: `inputs` are the tensors `layout` says (Layout). A
  // sequence's tensors are checked against its element type; each has its own sizes (its symbolic dims bind no other
  // input's).
  std::map<std::string, int64_t> bind(std::span<const Tensor> inputs, const Layout& layout, bool partial = false) const;
  Specialization& specialize(std::span<const Tensor> inputs, const Layout& layout);
  std::vector<Tensor> run(std::span<const Tensor> inputs, const Layout& layout);

  // Inputs learned to be taken as attributes (compiled in by value; part of the signature).
  const std::set<std::string>& value_inputs() const;
  const SessionStats& stats() const;
  size_t cached_plans() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What `spore check-ops` reports beyond the op list: whether the model compiles, through a Session as `spore run`
// compiles it, for `given` inputs (undefined entries, or all when empty: seeded random ones, a symbolic first dim
// = 1). `compiled` is true only when a plan was built. A model that takes some inputs as attributes (a shape, k, ...)
// compiles per value: random values may not suit it, and the note then says so and asks for real inputs.
struct CompileCheck {
  bool compiled = false;
  std::string note;
};
// With `layout` (Layout), `given` are the tensors it says, all defined. Without, random inputs take optional inputs
// as absent and cannot make a sequence (the note asks for one).
CompileCheck check_compiles(const std::string& path, const SessionOptions& opts, std::span<const Tensor> given = {},
                            const Layout& layout = {});

}  // namespace spore::deploy
