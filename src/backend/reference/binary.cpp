// Reference kernels of the binary family: one scalar loop over the output, each input read through
// its NumPy-broadcast index, math in double. Integer results wrap like NumPy (two's complement).
#include <cmath>

#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {
namespace {

// Wraps an exact integer result into the dtype's range (i64 is stored as is: doubles cannot wrap it).
double wrap_integer(DType t, double v) {
  if (!is_integral(t) || t == DType::i64) return v;
  const double range = std::ldexp(1.0, static_cast<int>(8 * dtype_size(t)));
  const double lo = t == DType::u8 ? 0.0 : -range / 2;
  return v - range * std::floor((v - lo) / range);
}

double python_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double apply(OpId op, double a, double b, bool fmod, DType t) {
  const bool integral = is_integral(t);
  switch (op) {
    case "add"_op: return a + b;
    case "sub"_op: return a - b;
    case "mul"_op: return a * b;
    case "div"_op: return integral ? std::trunc(a / b) : a / b;
    case "pow"_op: return std::pow(a, b);
    case "maximum"_op: return std::isnan(a) ? a : std::isnan(b) ? b : std::max(a, b);
    case "minimum"_op: return std::isnan(a) ? a : std::isnan(b) ? b : std::min(a, b);
    case "mod"_op: return fmod ? std::fmod(a, b) : python_mod(a, b);
    case "eq"_op: return a == b;
    case "ne"_op: return a != b;
    case "lt"_op: return a < b;
    case "le"_op: return a <= b;
    case "gt"_op: return a > b;
    case "ge"_op: return a >= b;
    case "logical_and"_op: return a != 0 && b != 0;
    case "logical_or"_op: return a != 0 || b != 0;
    default: SPORE_ASSERT(false, "op {} is not a binary op", op_name(op));
  }
  return 0;
}

void binary_kernel(KernelContext& k) {
  const Tensor &a = k.in(0), &b = k.in(1), &out = k.out();
  const DType t = a.dtype();
  if ((k.op == "div"_op || k.op == "mod"_op) && is_integral(t)) {
    for (int64_t i = 0; i < b.numel(); ++i)
      SPORE_CHECK(get(b, i) != 0, ErrorCode::invalid_argument, "[{}] integer division by zero (divisor element {})",
                  op_name(k.op), i);
  }
  const bool fmod = k.op == "mod"_op && k.attrs.b("fmod");
  for (int64_t i = 0; i < out.numel(); ++i) {
    const auto idx = unravel(i, out.shape());
    const double v = apply(k.op, get(a, broadcast_index(idx, a.shape())), get(b, broadcast_index(idx, b.shape())), fmod, t);
    put(out, i, wrap_integer(out.dtype(), v));
  }
}

void where_kernel(KernelContext& k) {
  const Tensor &c = k.in(0), &a = k.in(1), &b = k.in(2), &out = k.out();
  for (int64_t i = 0; i < out.numel(); ++i) {
    const auto idx = unravel(i, out.shape());
    const bool pick_a = get(c, broadcast_index(idx, c.shape())) != 0;
    put(out, i, pick_a ? get(a, broadcast_index(idx, a.shape())) : get(b, broadcast_index(idx, b.shape())));
  }
}

}  // namespace

void register_binary(KernelRegistry& r) {
  const DTypeSet num = dtypes::numeric;
  for (OpId op : {"add"_op, "sub"_op, "mul"_op, "div"_op, "maximum"_op, "minimum"_op, "mod"_op, "lt"_op,
                  "le"_op, "gt"_op, "ge"_op})
    r.add(Backend::reference, op, num, binary_kernel);
  r.add(Backend::reference, "pow"_op, dtypes::floating, binary_kernel);
  r.add(Backend::reference, "eq"_op, num | dtypes::boolean, binary_kernel);
  r.add(Backend::reference, "ne"_op, num | dtypes::boolean, binary_kernel);
  r.add(Backend::reference, "logical_and"_op, dtypes::boolean, binary_kernel);
  r.add(Backend::reference, "logical_or"_op, dtypes::boolean, binary_kernel);
  r.add(Backend::reference, "where"_op, dtypes::all, where_kernel);
}

}  // namespace spore::reference
