#pragma once
// Custom operators, in process and from plugins (docs/CUSTOM_OPS.md).
//
// In process: define an op in your own C++ code with the same mechanism as the built-in ops (an OpDef in the op
// registry plus kernels in the kernel registry). The op then works with ops::call in eager and graph mode, in
// autodiff (when it has a gradient) and in text IR.
//
//   void my_square(spore::KernelContext& k) {                 // KernelFn: a plain function
//     const float* x = k.in(0).data<float>();
//     float* y = k.out(0).data<float>();
//     for (int64_t i = 0; i < k.in(0).numel(); ++i) y[i] = x[i] * x[i];
//   }
//   const spore::OpId square = spore::CustomOp("my_square")
//       .doc("x * x").inputs({"x"})
//       .traits(spore::Trait::elementwise)
//       .grad([](const spore::GradContext& g) {               // written with ops::, like built-in rules
//         return std::vector<spore::Tensor>{spore::ops::mul(g.output_grads[0], spore::ops::mul(g.inputs[0], 2.0))};
//       })
//       .kernel({spore::DType::f32}, my_square)
//       .add();
//   spore::Tensor y = spore::ops::call1(square, {x});
//
// Shared-library plugins (plain C ABI, include/spore/custom_op_abi.h): spore::load_custom_ops("lib.so"), or
// `--custom-ops lib.so` on any CLI command.
#include <cctype>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "ops/dispatch.h"
#include "ops/infer.h"
#include "ops/kernel.h"
#include "ops/op_def.h"
#include "ops/registry.h"
#include "runtime/plugin.h"
#include "runtime/runtime.h"

namespace spore {

// Builder for an in-process custom op. Nothing is registered until add(), which checks the definition first.
class CustomOp {
 public:
  explicit CustomOp(std::string name) { def_.name = std::move(name); }

  CustomOp& doc(std::string s) { def_.doc = std::move(s); return *this; }
  // Fixed inputs; names ending in '?' are optional trailing inputs ("bias?").
  CustomOp& inputs(std::vector<std::string> names) {
    OpDefBuilder(def_).inputs(std::move(names));
    return *this;
  }
  CustomOp& variadic_inputs(std::string name, int min_count = 1) {
    OpDefBuilder(def_).variadic_inputs(std::move(name), min_count);
    return *this;
  }
  // A typed attribute; without a default it is required.
  CustomOp& attr(std::string name, AttrKind kind, std::optional<AttrValue> def = std::nullopt) {
    OpDefBuilder(def_).attr(std::move(name), kind, std::move(def));
    return *this;
  }
  // Accepted dtypes of the dispatch input; default: the dtypes that have a kernel.
  CustomOp& dtypes(DTypeSet s) { dtypes_ = s; return *this; }
  // Which input's dtype picks the kernel (default 0; -1: output 0's dtype, for ops without inputs).
  CustomOp& dispatch_on(int input) { def_.dispatch_input = input; return *this; }
  CustomOp& traits(TraitSet t, FusionKind f = FusionKind::opaque, AmpPolicy a = AmpPolicy::follow) {
    def_.traits = t;
    def_.fusion = f;
    def_.amp = a;
    return *this;
  }
  // Shape/dtype inference (works on symbolic dims in graph mode); default: outputs[0] = inputs[0]'s type.
  CustomOp& infer(InferFn f) { def_.infer = std::move(f); return *this; }
  // Gradient rule written with ops:: (so it is traced into backward graphs too). Without one (and without
  // Trait::no_grad) differentiating through the op fails, naming it.
  CustomOp& grad(GradFn f) { def_.grad = std::move(f); return *this; }
  // Fallback written with ops:: where no kernel exists for a dtype or backend.
  CustomOp& decompose(DecomposeFn f) { def_.decompose = std::move(f); return *this; }
  CustomOp& cost(CostFn f) { def_.cost = std::move(f); return *this; }
  // A kernel for these dtypes on the cpu and reference backends (or only on `b`). KernelFn is a plain function;
  // one function may serve several ops, telling them apart by KernelContext::op.
  CustomOp& kernel(DTypeSet dtypes, KernelFn fn, const char* impl = "custom") {
    kernels_.push_back({Backend::cpu, dtypes, fn, impl});
    kernels_.push_back({Backend::reference, dtypes, fn, impl});
    return *this;
  }
  CustomOp& kernel(Backend b, DTypeSet dtypes, KernelFn fn, const char* impl = "custom") {
    kernels_.push_back({b, dtypes, fn, impl});
    return *this;
  }

  // Registers the op and its kernels; returns its id (for ops::call). Throws if the name is taken (built-in,
  // plugin or earlier custom op), is not an identifier the text IR can print, or the op has neither a kernel
  // nor a decomposition.
  OpId add() {
    init();  // built-in ops first, so a clash with one is reported as such
    SPORE_CHECK(!def_.name.empty(), ErrorCode::invalid_argument, "custom op needs a name");
    for (char c : def_.name)
      SPORE_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.', ErrorCode::invalid_argument,
                  "custom op name '{}' may only hold letters, digits, '_' and '.'", def_.name);
    SPORE_CHECK(!std::isdigit(static_cast<unsigned char>(def_.name[0])), ErrorCode::invalid_argument,
                "custom op name '{}' starts with a digit", def_.name);
    SPORE_CHECK(!op_from_name(def_.name), ErrorCode::invalid_argument, "custom op '{}': an op of that name already exists",
                def_.name);
    SPORE_CHECK(!kernels_.empty() || def_.decompose != nullptr, ErrorCode::invalid_argument,
                "custom op '{}' has neither a kernel nor a decomposition", def_.name);
    DTypeSet with_kernel;
    for (const K& k : kernels_) {
      SPORE_CHECK(k.fn != nullptr, ErrorCode::invalid_argument, "custom op '{}': NULL kernel function", def_.name);
      with_kernel = with_kernel | k.dtypes;
    }
    def_.dtypes = dtypes_ ? *dtypes_ : (kernels_.empty() ? dtypes::all : with_kernel);
    if (!def_.infer) def_.infer = infer::same_as_input;
    if (def_.max_inputs == 0 && def_.dispatch_input == 0) def_.dispatch_input = -1;  // no inputs: output 0 decides
    const OpId id = op_registry().add_custom(std::move(def_)).id;
    for (const K& k : kernels_) kernel_registry().add(k.backend, id, k.dtypes, k.fn, k.impl);
    kernels_.clear();
    return id;
  }

 private:
  struct K {
    Backend backend;
    DTypeSet dtypes;
    KernelFn fn;
    const char* impl;
  };
  OpDef def_;
  std::optional<DTypeSet> dtypes_;
  std::vector<K> kernels_;
};

}  // namespace spore
