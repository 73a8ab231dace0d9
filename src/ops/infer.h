#pragma once
// Shape-inference helpers shared by op families. All work on symbolic dims.
#include <vector>

#include "ops/op_def.h"

namespace spore::infer {

// Output 0 has input 0's type.
std::vector<TensorType> same_as_input(const InferContext& c);
// NumPy broadcasting of two shapes. Symbolic dims: equal symbols match, 1 broadcasts, a symbol
// against a static size > 1 takes the static size.
std::vector<Dim> broadcast_dims(const InferContext& c, const std::vector<Dim>& a, const std::vector<Dim>& b);
// All inputs must share a dtype; returns it.
DType common_dtype(const InferContext& c, int first = 0, int count = -1);
// Normalizes a possibly negative axis for `rank`; fails naming the attribute.
int64_t normalize_axis(const InferContext& c, int64_t axis, int rank, const char* attr = "axis");
// Dims products: static when all static, else a symbol made of the factors ("batch*3").
Dim mul_dims(const Dim& a, const Dim& b);
bool dims_equal(const Dim& a, const Dim& b);
// Two dims that must agree: equal when both are static, otherwise assumed equal at run time.
inline bool dims_compatible(const Dim& a, const Dim& b) { return !a.is_static() || !b.is_static() || a.size == b.size; }
// "[batch,3]" for error messages.
std::string dims_str(const std::vector<Dim>& d);

}  // namespace spore::infer
