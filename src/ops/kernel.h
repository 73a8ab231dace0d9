#pragma once
// Kernels: backends register a function per (backend, op, dispatch dtype). A kernel never sees the
// IR: it gets a KernelContext with input tensors (contiguous unless the op has Trait::view or the
// kernel says otherwise), preallocated contiguous outputs, the op's normalized attributes and scratch.
//
//   void relu_f32(KernelContext& k) { ... k.in(0).data<float>() ... k.out(0).data<float>() ... }
//   void register_cpu_kernels(KernelRegistry& r) { r.add(Backend::cpu, "relu"_op, {DType::f32}, relu_f32, "hwy"); }
#include <array>
#include <span>
#include <vector>

#include "base/attrs.h"
#include "ir/op_id.h"
#include "tensor/tensor.h"

namespace spore {

// Backend ids: the built-in three, then those registered at run time (register_backend_id), up to max_backends.
enum class Backend : uint8_t { reference, cpu, null };
inline constexpr int max_backends = 16;
int num_backends();  // built-in + registered
// A new backend id named `name` (a backend outside the built-in three: a CUDA library, a test's). Throws
// invalid_argument when the name is taken or every id is used.
Backend register_backend_id(std::string_view name);
std::string_view backend_name(Backend b);

struct KernelContext {
  std::span<const Tensor> inputs;
  std::span<Tensor> outputs;
  const Attrs& attrs;
  OpId op;

  const Tensor& in(int i) const { return inputs[i]; }
  Tensor& out(int i = 0) const { return outputs[i]; }
  int num_inputs() const { return static_cast<int>(inputs.size()); }
  // Zeroed-on-request scratch memory that lives until the kernel returns (per call, not shared).
  void* scratch(size_t bytes);

  std::vector<std::shared_ptr<Storage>> scratch_blocks;  // owned by this call
  // Bit i set: input i is a constant of the running plan (a model weight): its bytes do not change while its
  // storage lives (plans snapshot their constants, as batch_norm folding already does), so a kernel may cache
  // what it derives from them - keyed on the storage, never on the address alone. Eager calls pass 0.
  uint64_t constant_inputs = 0;
};

using KernelFn = void (*)(KernelContext&);

// The implementation a kernel call actually ran, finer than KernelInfo::impl (which path of a multi-path kernel:
// "winograd_f4", "depthwise_blocked", or a oneDNN primitive's own name such as "onednn:brg:avx512_core"). A kernel
// notes it on the calling thread; the profiler reads and clears it around each call (null: nothing noted).
// The string must outlive the process's profiles: a literal, or intern_impl_name's copy.
void note_kernel_impl(const char* impl);
const char* take_kernel_impl();
// A stable copy of `name` (interned once per distinct name; for names built at run time).
const char* intern_impl_name(std::string_view name);

struct KernelInfo {
  KernelFn fn = nullptr;
  const char* impl = "";  // "onednn", "hwy", "scalar", ...
};

class KernelRegistry {
 public:
  void add(Backend b, OpId op, DTypeSet dtypes, KernelFn fn, const char* impl = "scalar");
  const KernelInfo* find(Backend b, OpId op, DType dtype) const;
  DTypeSet dtypes_of(Backend b, OpId op) const;

 private:
  // [backend][op][dtype]; grows for custom ops.
  std::vector<std::array<KernelInfo, num_dtypes>> table_[max_backends];
};

KernelRegistry& kernel_registry();

}  // namespace spore
