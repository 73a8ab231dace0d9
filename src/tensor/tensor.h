#pragma once
// Tensor: a handle to typed, possibly strided data. Copies share storage (like torch.Tensor).
// During graph tracing a Tensor may be *symbolic*: it stands for a value of the graph being traced
// and has no data; reading its data raises an error that names the op that produced it.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "tensor/storage.h"

namespace spore {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;  // in elements

int64_t shape_numel(std::span<const int64_t> shape);
Strides contiguous_strides(std::span<const int64_t> shape);
std::string shape_str(std::span<const int64_t> shape);  // "[2,3]"

// Set while tracing: which trace, which graph value, and the op that made it (for error messages).
struct SymbolicRef {
  uint64_t trace_id = 0;
  int64_t value_id = -1;
  std::string producer;
};

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(Shape shape, DType dtype);
  // Uninitialised memory on a device (tensor/device.h).
  static Tensor empty_on(Device device, Shape shape, DType dtype);
  static Tensor zeros(Shape shape, DType dtype);
  // A scalar or vector from host values, converted to `dtype`.
  static Tensor from_doubles(const std::vector<double>& values, Shape shape, DType dtype);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape) {
    Tensor t = empty(std::move(shape), dtype_v<T>);
    SPORE_CHECK(static_cast<int64_t>(values.size()) == t.numel(), ErrorCode::shape_mismatch,
                "from_vector: {} values for shape {}", values.size(), shape_str(t.shape()));
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }
  static Tensor scalar(double v, DType dtype) { return from_doubles({v}, {}, dtype); }
  // Wraps existing storage as a tensor view.
  static Tensor from_storage(std::shared_ptr<Storage> s, Shape shape, Strides strides, int64_t offset, DType dtype);
  static Tensor symbolic(Shape shape, DType dtype, SymbolicRef ref);

  bool defined() const { return defined_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;
  bool is_symbolic() const { return sym_ != nullptr; }
  const SymbolicRef* symbolic_ref() const { return sym_.get(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Where the elements live: the storage's device (the host for an undefined or symbolic tensor).
  Device device() const { return storage_ ? storage_->device() : host_device; }
  // A packed copy on `device` (self when it is there and packed already).
  Tensor to(Device device) const;

  // Data access (throws on symbolic or undefined tensors). data<T>() checks T against dtype().
  void* raw_data() const;
  template <typename T>
  T* data() const {
    SPORE_CHECK(dtype_v<T> == dtype_, ErrorCode::dtype_mismatch, "tensor is {}, accessed as {}",
                dtype_name(dtype_), dtype_name(dtype_v<T>));
    return static_cast<T*>(raw_data());
  }
  // Element at a flat (row-major logical) index, as double; for tests and printing.
  double item_at(int64_t flat_index) const;
  double item() const;
  std::vector<double> to_doubles() const;

  // Views: share storage, no copy.
  Tensor as_strided(Shape shape, Strides strides, int64_t offset) const;
  Tensor view(Shape shape) const;  // requires contiguous; one dim may be -1
  Tensor permute(std::span<const int64_t> perm) const;
  Tensor slice(int axis, int64_t start, int64_t stop, int64_t step = 1) const;
  Tensor expand(Shape shape) const;  // broadcast to shape (stride 0 on broadcast dims)

  Tensor contiguous() const;  // self if already contiguous, else a packed copy
  Tensor clone() const;       // always a packed copy

  // Bit-exact equality of dtype, shape and element bytes (strides may differ).
  bool bit_equal(const Tensor& other) const;
  std::string to_string(int max_elems = 16) const;

  // Opaque slots used by higher layers (autodiff tape, parameters); the tensor layer never reads them.
  std::shared_ptr<void>& autograd_slot() { return autograd_; }
  const std::shared_ptr<void>& autograd_slot() const { return autograd_; }

 private:
  std::shared_ptr<Storage> storage_;
  std::shared_ptr<const SymbolicRef> sym_;
  std::shared_ptr<void> autograd_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::f32;
  bool defined_ = false;
};

// Copies src's elements (any strides) into dst (same shape and dtype, any strides).
void copy_strided(const Tensor& src, const Tensor& dst);

}  // namespace spore
