#pragma once
// Tensor types of the IR: a dtype and a shape whose dims are either static sizes or named symbols
// ("batch", "seq"). Shape inference works on these, so one inference function serves eager mode
// (all dims static) and graph mode (some dims symbolic).
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "tensor/tensor.h"

namespace spore {

struct Dim {
  int64_t size = 0;  // valid when sym is empty
  std::string sym;   // non-empty for a symbolic dim

  Dim() = default;
  Dim(int64_t s) : size(s) {}  // NOLINT: implicit from a size is the common case
  static Dim symbol(std::string name) { Dim d; d.size = -1; d.sym = std::move(name); return d; }
  bool is_static() const { return sym.empty(); }
  bool operator==(const Dim& o) const { return size == o.size && sym == o.sym; }
  std::string str() const { return is_static() ? std::to_string(size) : sym; }
};

struct TensorType {
  DType dtype = DType::f32;
  std::vector<Dim> dims;

  TensorType() = default;
  TensorType(DType t, std::vector<Dim> d) : dtype(t), dims(std::move(d)) {}
  static TensorType of(DType t, const Shape& shape);

  int rank() const { return static_cast<int>(dims.size()); }
  bool is_static() const;
  Shape shape() const;  // throws if any dim is symbolic
  // Static element count, or -1 if symbolic.
  int64_t numel() const;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && dims == o.dims; }
  std::string str() const;  // "f32[batch,3]"
};

}  // namespace spore
