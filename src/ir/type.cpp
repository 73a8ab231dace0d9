#include "ir/type.h"

namespace spore {

TensorType TensorType::of(DType t, const Shape& shape) {
  TensorType ty;
  ty.dtype = t;
  for (int64_t d : shape) ty.dims.emplace_back(d);
  return ty;
}

bool TensorType::is_static() const {
  for (const Dim& d : dims) if (!d.is_static()) return false;
  return true;
}

Shape TensorType::shape() const {
  Shape s;
  for (const Dim& d : dims) {
    SPORE_CHECK(d.is_static(), ErrorCode::shape_mismatch, "type {} has a symbolic dim '{}'", str(), d.sym);
    s.push_back(d.size);
  }
  return s;
}

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (const Dim& d : dims) {
    if (!d.is_static()) return -1;
    n *= d.size;
  }
  return n;
}

std::string TensorType::str() const {
  std::string s(dtype_name(dtype));
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ',';
    s += dims[i].str();
  }
  return s + "]";
}

}  // namespace spore
