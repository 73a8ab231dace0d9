#pragma once
// OpDef: everything about one op, in one place (docs/ARCHITECTURE.md, "Defining an op"):
// schema (inputs, typed attributes with defaults), one dtype + symbolic-shape inference used by
// eager and graph mode, traits as data, gradient rule, optional decomposition and eager view.
//
//   void register_unary_ops(OpRegistry& r) {
//     r.def("relu"_op).doc("max(x, 0)").inputs({"x"}).dtypes(dtypes::signed_numeric)
//         .traits(Trait::elementwise | Trait::inplace_ok, FusionKind::elementwise, AmpPolicy::follow)
//         .infer(infer::same_as_input);
//   }
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/attrs.h"
#include "ir/op_id.h"
#include "ir/type.h"
#include "tensor/tensor.h"

namespace spore {

enum class Trait : uint32_t {
  elementwise = 1u << 0,     // out[i] depends only on in[i] (same shapes)
  broadcast = 1u << 1,       // elementwise with NumPy broadcasting of inputs
  injective = 1u << 2,       // each output element is one input element (reshape, transpose, slice...)
  reduction = 1u << 3,
  commutative = 1u << 4,     // binary op with f(a,b) == f(b,a)
  inplace_ok = 1u << 5,      // output 0 may reuse input 0's buffer when it dies here
  view = 1u << 6,            // eager mode may return a view of input 0 (no copy)
  random = 1u << 7,          // uses the counter-based RNG (deterministic for a seed)
  nondeterministic = 1u << 8,  // a kernel may give different bits run to run (deterministic mode refuses)
  no_grad = 1u << 9,         // not differentiable (comparisons, argmax, casts to int...)
  graph_structure = 1u << 10,  // input/constant: not executed as a kernel
  // Output 0 is input 0's elements in the same order under another shape (reshape, flatten, squeeze, unsqueeze):
  // the memory planner lets it share input 0's buffer, and chains of such ops collapse into one reshape.
  reshape = 1u << 11,
};
struct TraitSet {
  uint32_t bits = 0;
  constexpr TraitSet() = default;
  constexpr TraitSet(Trait t) : bits(static_cast<uint32_t>(t)) {}  // NOLINT
  constexpr bool has(Trait t) const { return bits & static_cast<uint32_t>(t); }
  constexpr TraitSet operator|(TraitSet o) const { TraitSet s; s.bits = bits | o.bits; return s; }
};
constexpr TraitSet operator|(Trait a, Trait b) { return TraitSet(a) | TraitSet(b); }

// How an op can take part in fusion (TVM's OpPatternKind).
enum class FusionKind : uint8_t { elementwise, broadcast, injective, reduce, out_fusable, opaque };
// Mixed-precision policy: `low` ops compute in f16/bf16 when allowed (matmul, conv), `follow` ops take
// their inputs' type, `keep_f32` ops stay f32 (softmax, norms, reductions, exp/log).
enum class AmpPolicy : uint8_t { low, follow, keep_f32 };

// Where an op's weight is and which of its axes index the output channels (conv2d, conv_transpose2d, linear,
// matmul). Passes that quantize per channel or fold per-channel constants into weights read this, not op ids.
struct WeightOperand {
  int input = -1;             // the weight's input index; -1: the op has no weight operand
  int64_t channel_axis = 0;   // weight axis of the output channels (negative: from the end)
  std::string transpose_attr;  // a boolean attribute that, when set, moves the channels to `transposed_axis`
  int64_t transposed_axis = 0;
  int bias_input = -1;        // an optional input of one value per output channel added to the result; -1: none
  int64_t output_channel_axis = 1;  // the output's channel axis (negative: from the end)

  bool defined() const { return input >= 0; }
  // The weight's channel axis for a node's attributes (resolved from the end by the weight's rank).
  int64_t channel_axis_for(const Attrs& attrs, int weight_rank) const {
    const int64_t a = !transpose_attr.empty() && attrs.has(transpose_attr) && attrs.b(transpose_attr) ? transposed_axis : channel_axis;
    return a < 0 ? a + weight_rank : a;
  }
};

// How an elementwise op appears in a fused_elementwise program (ops/fused_elementwise.h): with its inputs as
// operands and up to two attributes as the instruction's parameters (a number as itself, a choice as its index).
// arity 0: it is not fused.
struct FusedForm {
  int arity = 0;
  std::vector<std::string> params;
};

struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<AttrValue> default_value;  // nullopt: required
  std::vector<std::string> choices;        // a string attribute's allowed values (normalize rejects others); empty: any
};

struct OpDef;

// What shape inference sees. `where` names the node ("conv2d 'conv1' (%4)") for error messages.
struct InferContext {
  const OpDef& def;
  std::span<const TensorType> inputs;
  const Attrs& attrs;  // normalized: every schema attribute present
  std::string_view where;

  const TensorType& in(int i) const { return inputs[i]; }
  int num_inputs() const { return static_cast<int>(inputs.size()); }
  // Throws Error(code, "[op] msg (node ...)").
  [[noreturn]] void fail(ErrorCode code, const std::string& msg) const;
  void check(bool cond, ErrorCode code, const std::string& msg) const {
    if (!cond) fail(code, msg);
  }
  // Formats the message only on failure (inference runs on every eager call).
  template <typename... Args>
  void check(bool cond, ErrorCode code, fmt::format_string<Args...> f, Args&&... args) const {
    if (!cond) [[unlikely]] fail(code, fmt::format(f, std::forward<Args>(args)...));
  }
};
using InferFn = std::function<std::vector<TensorType>(const InferContext&)>;

// Gradient rule, written with ops:: (runs eagerly or is traced into the backward graph).
// Returns one gradient per input (undefined Tensor = no gradient).
struct GradContext {
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;
  std::span<const Tensor> output_grads;  // undefined where an output got no gradient
  const Attrs& attrs;
  // Which inputs the caller needs a gradient for (empty = all). Rules may skip the others (return an undefined
  // Tensor): eager backward has no dead-code elimination, and e.g. a first layer's input gradient is large.
  std::span<const uint8_t> wanted = {};
  bool wants(size_t i) const { return wanted.empty() || (i < wanted.size() && wanted[i] != 0); }
};
using GradFn = std::function<std::vector<Tensor>(const GradContext&)>;

// Decomposition into other ops, written with ops:: (the fallback when no kernel exists).
using DecomposeFn = std::function<std::vector<Tensor>(std::span<const Tensor> inputs, const Attrs& attrs)>;
// Eager view: returns a view of inputs[0] sharing storage (only for Trait::view ops), or an
// undefined Tensor when this particular case needs a copy (the kernel then runs).
using ViewFn = std::function<Tensor(std::span<const Tensor> inputs, const Attrs& attrs, const TensorType& out)>;

// The definition of an elementwise unary op as a formula on doubles (attributes normalized). The reference backend
// runs it for every op that has one, rounding once to the output dtype, so such an op needs no reference kernel of
// its own: the formula is the oracle its decomposition and any optimized kernel are checked against.
using ScalarFn = double (*)(double x, const Attrs& attrs);

struct OpCost {
  double flops = 0;
  double bytes = 0;
};
// Cost from normalized attrs and static input/output types; default: bytes of inputs + outputs,
// one flop per output element for elementwise ops.
using CostFn = std::function<OpCost(std::span<const TensorType> inputs, std::span<const TensorType> outputs, const Attrs&)>;

struct OpDef {
  OpId id{};
  std::string name;
  std::string doc;
  std::vector<std::string> input_names;
  int min_inputs = 0;
  int max_inputs = 0;  // -1: variadic
  std::vector<AttrSpec> attrs;
  DTypeSet dtypes = dtypes::floating;  // accepted dtypes of the dispatch input
  int dispatch_input = 0;  // whose dtype picks the kernel; -1: output 0's dtype (ops with no inputs)
  TraitSet traits;
  FusionKind fusion = FusionKind::opaque;
  AmpPolicy amp = AmpPolicy::follow;
  WeightOperand weight;
  FusedForm fused;
  InferFn infer;
  GradFn grad;
  DecomposeFn decompose;
  ScalarFn scalar = nullptr;
  ViewFn view;
  CostFn cost;
  // Ops from a custom-op plugin (runtime/plugin.h): the plugin's name, which .spore files store so that a reader
  // without the plugin can say what to load, and the ONNX domain of its nodes. Empty for built-in/in-process ops.
  std::string plugin;
  std::string onnx_domain;

  const AttrSpec* find_attr(std::string_view n) const;
  // Fills defaults, coerces int->float, rejects unknown or ill-typed attributes; errors name the op.
  Attrs normalize(const Attrs& given, std::string_view where = {}) const;
  DType dispatch_dtype(std::span<const TensorType> ins, std::span<const TensorType> outs) const;
  // Checks arity and the dispatch dtype, then runs `infer`.
  std::vector<TensorType> infer_types(std::span<const TensorType> ins, const Attrs& normalized, std::string_view where = {}) const;
  OpCost cost_of(std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs& a) const;
};

// Fluent builder returned by OpRegistry::def.
class OpDefBuilder {
 public:
  explicit OpDefBuilder(OpDef& d) : d_(d) {}
  OpDefBuilder& doc(std::string s) { d_.doc = std::move(s); return *this; }
  // Fixed inputs; names ending in '?' are optional trailing inputs ("bias?").
  OpDefBuilder& inputs(std::vector<std::string> names);
  OpDefBuilder& variadic_inputs(std::string name, int min_count = 1);
  OpDefBuilder& attr(std::string name, AttrKind kind, std::optional<AttrValue> def = std::nullopt);
  // A string attribute that takes one of `choices` (the first is the default); normalize rejects any other value,
  // so inference and kernels read a known one.
  OpDefBuilder& choice(std::string name, std::vector<std::string> choices);
  OpDefBuilder& dtypes(DTypeSet s) { d_.dtypes = s; return *this; }
  OpDefBuilder& dispatch_on(int input) { d_.dispatch_input = input; return *this; }
  OpDefBuilder& traits(TraitSet t, FusionKind f, AmpPolicy a) { d_.traits = t; d_.fusion = f; d_.amp = a; return *this; }
  OpDefBuilder& weight(WeightOperand w) { d_.weight = std::move(w); return *this; }
  // May join a fused_elementwise program, these attributes as its parameters (FusedForm; arity = the inputs).
  OpDefBuilder& fusable(std::vector<std::string> params = {});
  OpDefBuilder& infer(InferFn f) { d_.infer = std::move(f); return *this; }
  OpDefBuilder& grad(GradFn f) { d_.grad = std::move(f); return *this; }
  OpDefBuilder& decompose(DecomposeFn f) { d_.decompose = std::move(f); return *this; }
  OpDefBuilder& scalar(ScalarFn f) { d_.scalar = f; return *this; }
  OpDefBuilder& view(ViewFn f) { d_.view = std::move(f); return *this; }
  OpDefBuilder& cost(CostFn f) { d_.cost = std::move(f); return *this; }

 private:
  OpDef& d_;
};

}  // namespace spore
