// Reference kernels of the shape family: every output element is located by index arithmetic on the
// logical (row-major) layout and moved as a double. Slow and obvious on purpose: this is the oracle.
#include <algorithm>
#include <string>

#include "backend/reference/families.h"
#include "backend/reference/util.h"
#include "ops/pad_index.h"

namespace spore::reference {
namespace {

using Ints = std::vector<int64_t>;

int64_t norm_axis(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

// Index value `flat` of an index tensor, wrapped if negative; out of range is a user error.
int64_t index_at(const Tensor& idx, int64_t flat, int64_t bound, std::string_view op, int64_t axis) {
  const int64_t raw = static_cast<int64_t>(get(idx, flat));
  const int64_t v = raw < 0 ? raw + bound : raw;
  SPORE_CHECK(v >= 0 && v < bound, ErrorCode::invalid_argument, "[{}] index {} is out of range for axis {} of size {}",
              op, raw, axis, bound);
  return v;
}

// out[i] = in[src(multi-index of i)], for every output element.
template <typename F>
void map_copy(const Tensor& in, const Tensor& out, F src_index) {
  for (int64_t i = 0; i < out.numel(); ++i) put(out, i, get(in, ravel(src_index(unravel(i, out.shape())), in.shape())));
}

// Reshape-like ops keep the row-major element order.
void same_order(KernelContext& k) {
  for (int64_t i = 0; i < k.out().numel(); ++i) put(k.out(), i, get(k.in(0), i));
}

void transpose(KernelContext& k) {
  const int r = k.in(0).rank();
  Ints perm = k.attrs.ints("perm");
  if (perm.empty())
    for (int d = r - 1; d >= 0; --d) perm.push_back(d);
  map_copy(k.in(0), k.out(), [&](const Ints& o) {
    Ints in(r);
    for (int d = 0; d < r; ++d) in[norm_axis(perm[d], r)] = o[d];
    return in;
  });
}

void concat(KernelContext& k) {
  const int64_t axis = norm_axis(k.attrs.i("axis"), k.out().rank());
  for (int64_t i = 0; i < k.out().numel(); ++i) {
    Ints o = unravel(i, k.out().shape());
    int j = 0;
    while (o[axis] >= k.in(j).shape()[axis]) o[axis] -= k.in(j++).shape()[axis];
    put(k.out(), i, get(k.in(j), ravel(o, k.in(j).shape())));
  }
}

void split(KernelContext& k) {
  const int64_t axis = norm_axis(k.attrs.i("axis"), k.in(0).rank());
  int64_t offset = 0;
  for (Tensor& out : k.outputs) {
    map_copy(k.in(0), out, [&](Ints o) {
      o[axis] += offset;
      return o;
    });
    offset += out.shape()[axis];
  }
}

// ONNX Slice per axis: clamp start/end for the step's direction.
void slice(KernelContext& k) {
  const Tensor& x = k.in(0);
  const int r = x.rank();
  const Ints& starts = k.attrs.ints("starts");
  Ints axes = k.attrs.ints("axes"), steps = k.attrs.ints("steps");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  Ints first(r, 0), step(r, 1);  // the output shape already holds each axis' length
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t a = norm_axis(axes[i], r), n = x.shape()[a];
    int64_t s = starts[i] < 0 ? starts[i] + n : starts[i];
    s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, n) : std::clamp<int64_t>(s, 0, std::max<int64_t>(n - 1, 0));
    first[a] = s;
    step[a] = steps[i];
  }
  map_copy(x, k.out(), [&](Ints o) {
    for (int d = 0; d < r; ++d) o[d] = first[d] + o[d] * step[d];
    return o;
  });
}

void gather(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& idx = k.in(1);
  const int64_t axis = norm_axis(k.attrs.i("axis"), x.rank());
  const int ir = idx.rank();
  for (int64_t i = 0; i < k.out().numel(); ++i) {
    const Ints o = unravel(i, k.out().shape());
    Ints in(o.begin(), o.begin() + axis);
    const Ints io(o.begin() + axis, o.begin() + axis + ir);
    in.push_back(index_at(idx, ravel(io, idx.shape()), x.shape()[axis], op_name(k.op), axis));
    in.insert(in.end(), o.begin() + axis + ir, o.end());
    put(k.out(), i, get(x, ravel(in, x.shape())));
  }
}

// resample: each output element sums its taps in tap order, in double, rounded once to the dtype.
void resample(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& idx = k.in(1);
  const Tensor& w = k.in(2);
  const int64_t axis = norm_axis(k.attrs.i("axis"), x.rank()), taps = idx.shape()[1];
  for (int64_t i = 0; i < k.out().numel(); ++i) {
    Ints o = unravel(i, k.out().shape());
    const int64_t oa = o[static_cast<size_t>(axis)];
    double acc = 0;
    for (int64_t t = 0; t < taps; ++t) {
      o[static_cast<size_t>(axis)] = index_at(idx, oa * taps + t, x.shape()[axis], "resample", axis);
      acc += get(w, oa * taps + t) * get(x, ravel(o, x.shape()));
    }
    put(k.out(), i, acc);
  }
}

void embedding(KernelContext& k) {
  const Tensor& table = k.in(0);
  const int64_t d = table.shape()[1];
  for (int64_t i = 0; i < k.out().numel(); ++i) {
    const int64_t row = index_at(k.in(1), i / d, table.shape()[0], "embedding", 0);
    put(k.out(), i, get(table, row * d + i % d));
  }
}

void gather_elements(KernelContext& k) {
  const Tensor& x = k.in(0);
  const int64_t axis = norm_axis(k.attrs.i("axis"), x.rank());
  for (int64_t i = 0; i < k.out().numel(); ++i) {
    Ints o = unravel(i, k.out().shape());
    o[axis] = index_at(k.in(1), i, x.shape()[axis], "gather_elements", axis);
    put(k.out(), i, get(x, ravel(o, x.shape())));
  }
}

// Updates apply in row-major order, so with repeated indices and reduction "none" the last one wins.
void scatter(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& upd = k.in(2);
  const int64_t axis = norm_axis(k.attrs.i("axis"), x.rank());
  const std::string& red = k.attrs.s("reduction");
  const bool is_bool = x.dtype() == DType::boolean;
  for (int64_t i = 0; i < x.numel(); ++i) put(k.out(), i, get(x, i));
  for (int64_t i = 0; i < upd.numel(); ++i) {
    Ints o = unravel(i, upd.shape());
    o[axis] = index_at(k.in(1), i, x.shape()[axis], "scatter", axis);
    const int64_t dst = ravel(o, x.shape());
    const double cur = get(k.out(), dst), u = get(upd, i);
    double v = u;
    if (red == "add")
      v = is_bool ? double(cur != 0 || u != 0) : cur + u;
    else if (red == "mul")
      v = is_bool ? double(cur != 0 && u != 0) : cur * u;
    else if (red == "max") v = std::max(cur, u);
    else if (red == "min") v = std::min(cur, u);
    put(k.out(), dst, v);
  }
}

void pad(KernelContext& k) {
  const Tensor& x = k.in(0);
  const int r = x.rank();
  const Ints& pads = k.attrs.ints("pads");
  const PadMode pm = pad_mode(k.attrs.s("mode"));
  const double value = k.attrs.f("value");
  for (int64_t i = 0; i < k.out().numel(); ++i) {
    Ints o = unravel(i, k.out().shape());
    bool inside = true;
    for (int d = 0; d < r && inside; ++d) {
      o[d] = pad_source(o[d], x.shape()[d], pads[d], pm);
      inside = o[d] >= 0;
    }
    put(k.out(), i, inside ? get(x, ravel(o, x.shape())) : value);
  }
}

void expand(KernelContext& k) {
  for (int64_t i = 0; i < k.out().numel(); ++i)
    put(k.out(), i, get(k.in(0), broadcast_index(unravel(i, k.out().shape()), k.in(0).shape())));
}

void tile(KernelContext& k) {
  const Shape& xs = k.in(0).shape();
  map_copy(k.in(0), k.out(), [&](Ints o) {
    for (size_t d = 0; d < o.size(); ++d) o[d] %= xs[d];
    return o;
  });
}

void one_hot(KernelContext& k) {
  const Tensor& idx = k.in(0);
  const int64_t depth = k.attrs.i("depth");
  const int64_t axis = norm_axis(k.attrs.i("axis"), k.out().rank());
  const double on = k.attrs.f("on_value"), off = k.attrs.f("off_value");
  for (int64_t i = 0; i < k.out().numel(); ++i) {
    Ints o = unravel(i, k.out().shape());
    const int64_t pos = o[axis];
    o.erase(o.begin() + axis);
    int64_t v = static_cast<int64_t>(get(idx, ravel(o, idx.shape())));
    if (v < 0) v += depth;
    put(k.out(), i, v == pos ? on : off);
  }
}

void arange(KernelContext& k) {
  const double start = k.attrs.f("start"), step = k.attrs.f("step");
  for (int64_t i = 0; i < k.out().numel(); ++i) put(k.out(), i, start + static_cast<double>(i) * step);
}

void full(KernelContext& k) {
  const double v = k.attrs.f("value");
  for (int64_t i = 0; i < k.out().numel(); ++i) put(k.out(), i, v);
}

}  // namespace

void register_shape(KernelRegistry& r) {
  const auto add = [&](OpId op, DTypeSet s, KernelFn fn) { r.add(Backend::reference, op, s, fn, "scalar"); };
  for (OpId op : {"reshape"_op, "squeeze"_op, "unsqueeze"_op, "flatten"_op}) add(op, dtypes::all, same_order);
  add("transpose"_op, dtypes::all, transpose);
  add("concat"_op, dtypes::all, concat);
  add("split"_op, dtypes::all, split);
  add("slice"_op, dtypes::all, slice);
  add("gather"_op, dtypes::all, gather);
  add("index_select"_op, dtypes::all, gather);
  add("resample"_op, dtypes::floating, resample);
  add("embedding"_op, dtypes::all, embedding);
  add("gather_elements"_op, dtypes::all, gather_elements);
  add("scatter"_op, dtypes::all, scatter);
  add("pad"_op, dtypes::all, pad);
  add("expand"_op, dtypes::all, expand);
  add("tile"_op, dtypes::all, tile);
  add("one_hot"_op, dtypes::index, one_hot);
  add("arange"_op, dtypes::numeric, arange);
  add("full"_op, dtypes::numeric, full);
}

}  // namespace spore::reference
