// Shape, data-movement and creation ops: reshape ... tile, the index ops (gather, scatter, embedding, one_hot)
// and arange/full. View ops (reshape, transpose, squeeze, unsqueeze, flatten, expand, slice with positive steps)
// return views in eager mode; graph mode runs every op as a copy kernel.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"
#include "ops/pad_index.h"

namespace spore {
namespace {

using Ints = std::vector<int64_t>;
constexpr TraitSet view_traits = Trait::injective | Trait::view;

Dim add_dims(const Dim& a, const Dim& b) {
  if (a.is_static() && b.is_static()) return Dim(a.size + b.size);
  if (b.is_static() && b.size == 0) return a;
  if (a.is_static() && a.size == 0) return b;
  if (b.is_static() && b.size < 0) return Dim::symbol(a.str() + std::to_string(b.size));
  return Dim::symbol(a.str() + "+" + b.str());
}

void check_index_dtype(const InferContext& c, int i) {
  const DType t = c.in(i).dtype;
  if (!(dtypes::index.has(t))) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("input '{}' holds indices and must be i32 or i64, got {}",
                                                  c.def.input_names.at(i), dtype_name(t)));
}

// Keeps the gradient rules short: the first output gradient, or undefined.
const Tensor& grad0(const GradContext& g) { return g.output_grads[0]; }

// ---- reshape

std::vector<TensorType> infer_reshape(const InferContext& c) {
  const TensorType& x = c.in(0);
  const Ints& shape = c.attrs.ints("shape");
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (!(infer_at < 0)) [[unlikely]]
        c.fail(ErrorCode::invalid_argument, fmt::format("shape {} has more than one -1", shape_str(shape)));
      infer_at = static_cast<int>(i);
    } else {
      if (!(shape[i] >= 0)) [[unlikely]]
        c.fail(ErrorCode::invalid_argument,
               fmt::format("shape {} has a negative size {} (only -1 is allowed)", shape_str(shape), shape[i]));
      known *= shape[i];
    }
  }
  int64_t in_static = 1;
  Dim sym_part(1);
  bool symbolic = false;
  for (const Dim& d : x.dims) {
    if (d.is_static()) {
      in_static *= d.size;
    } else {
      sym_part = infer::mul_dims(sym_part, d);
      symbolic = true;
    }
  }
  std::vector<Dim> out(shape.begin(), shape.end());
  if (!symbolic) {
    if (infer_at >= 0) {
      if (!(known != 0 && in_static % known == 0)) [[unlikely]]
        c.fail(ErrorCode::shape_mismatch,
               fmt::format("cannot reshape {} ({} elements) to {}", x.str(), in_static, shape_str(shape)));
      out[infer_at] = Dim(in_static / known);
    } else {
      if (!(known == in_static)) [[unlikely]]
        c.fail(ErrorCode::shape_mismatch, fmt::format("cannot reshape {} ({} elements) to {} ({} elements)", x.str(),
                                                      in_static, shape_str(shape), known));
    }
  } else {
    // The -1 takes the symbolic factors and whatever static factor is left over.
    if (!(infer_at >= 0 && known != 0)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("cannot reshape {} (symbolic dims) to {}: use -1 for the symbolic part", x.str(),
                         shape_str(shape)));
    out[infer_at] = in_static % known == 0 ? infer::mul_dims(sym_part, Dim(in_static / known))
                                           : Dim::symbol(fmt::format("({}*{})/{}", sym_part.str(), in_static, known));
  }
  return {TensorType(x.dtype, std::move(out))};
}

// A view when `out` only adds or drops size-1 dims of x (any strides), else undefined.
Tensor view_dropping_ones(const Tensor& x, const Shape& out) {
  std::vector<std::pair<int64_t, int64_t>> kept;  // (size, stride) of x's non-1 dims
  for (int i = 0; i < x.rank(); ++i)
    if (x.shape()[i] != 1) kept.emplace_back(x.shape()[i], x.strides()[i]);
  Strides st(out.size(), 1);
  size_t k = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 1) continue;
    if (k >= kept.size() || kept[k].first != out[i]) return {};
    st[i] = kept[k++].second;
  }
  if (k != kept.size()) return {};
  return x.as_strided(out, std::move(st), x.offset());
}

Tensor view_reshape(std::span<const Tensor> in, const Attrs&, const TensorType& out) {
  const Tensor& x = in[0];
  const Shape s = out.shape();
  if (x.is_contiguous()) return x.as_strided(s, contiguous_strides(s), x.offset());
  return view_dropping_ones(x, s);
}

Tensor grad_reshape(const GradContext& g) {
  if (!grad0(g).defined()) return {};
  return ops::reshape(grad0(g), g.inputs[0].shape());
}

// ---- transpose

Ints resolve_perm(const InferContext& c, int rank) {
  Ints p = c.attrs.ints("perm");
  if (p.empty()) {
    for (int i = rank - 1; i >= 0; --i) p.push_back(i);
    return p;
  }
  if (!(static_cast<int>(p.size()) == rank)) [[unlikely]]
    c.fail(ErrorCode::invalid_argument,
           fmt::format("perm {} has {} entries for rank {}", shape_str(p), p.size(), rank));
  std::vector<bool> seen(rank, false);
  for (int64_t& a : p) {
    if (!(a >= -rank && a < rank && !seen[a < 0 ? a + rank : a])) [[unlikely]]
      c.fail(ErrorCode::invalid_argument,
             fmt::format("perm {} is not a permutation of 0..{}", shape_str(c.attrs.ints("perm")), rank - 1));
    if (a < 0) a += rank;
    seen[a] = true;
  }
  return p;
}

Ints perm_of(const Attrs& a, int rank) {
  Ints p = a.ints("perm");
  if (p.empty())
    for (int i = rank - 1; i >= 0; --i) p.push_back(i);
  for (int64_t& v : p)
    if (v < 0) v += rank;
  return p;
}

std::vector<TensorType> infer_transpose(const InferContext& c) {
  const TensorType& x = c.in(0);
  const Ints p = resolve_perm(c, x.rank());
  std::vector<Dim> out;
  for (int64_t a : p) out.push_back(x.dims[a]);
  return {TensorType(x.dtype, std::move(out))};
}

// ---- concat / split

std::vector<TensorType> infer_concat(const InferContext& c) {
  const DType t = infer::common_dtype(c);
  const TensorType& x0 = c.in(0);
  c.check(x0.rank() > 0, ErrorCode::shape_mismatch, "cannot concatenate rank-0 tensors");
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), x0.rank());
  std::vector<Dim> out = x0.dims;
  for (int i = 1; i < c.num_inputs(); ++i) {
    const TensorType& xi = c.in(i);
    if (!(xi.rank() == x0.rank())) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("all inputs need rank {}: input {} is {}", x0.rank(), i, xi.str()));
    for (int d = 0; d < x0.rank(); ++d) {
      if (d == axis) continue;
      if (!(xi.dims[d] == x0.dims[d])) [[unlikely]]
        c.fail(ErrorCode::shape_mismatch,
               fmt::format("inputs must match except on axis {}: input 0 is {}, input {} is {} (dim {})", axis,
                           x0.str(), i, xi.str(), d));
    }
    out[axis] = add_dims(out[axis], xi.dims[axis]);
  }
  return {TensorType(t, std::move(out))};
}

std::vector<TensorType> infer_split(const InferContext& c) {
  const TensorType& x = c.in(0);
  c.check(x.rank() > 0, ErrorCode::shape_mismatch, "cannot split a rank-0 tensor");
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), x.rank());
  const Ints& sizes = c.attrs.ints("sizes");
  c.check(!sizes.empty(), ErrorCode::invalid_argument, "sizes must not be empty");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (!(s >= 0)) [[unlikely]]
      c.fail(ErrorCode::invalid_argument, fmt::format("sizes {} has a negative entry", shape_str(sizes)));
    total += s;
  }
  const Dim& d = x.dims[axis];
  if (!(!d.is_static() || d.size == total)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("sizes {} sum to {}, expected {} (dim {} of {})", shape_str(sizes),
                                                  total, d.str(), axis, x.str()));
  std::vector<TensorType> outs;
  for (int64_t s : sizes) {
    std::vector<Dim> dims = x.dims;
    dims[axis] = Dim(s);
    outs.emplace_back(x.dtype, std::move(dims));
  }
  return outs;
}

// ---- slice

struct SliceAxis {
  int axis;
  int64_t start, step, len;
};

// ONNX Slice: negative indices count from the end, then start/end clamp into range for the step's direction.
SliceAxis resolve_slice_axis(int axis, int64_t n, int64_t start, int64_t end, int64_t step) {
  if (n == 0) return {axis, 0, step, 0};
  if (start < 0) start += n;
  if (end < 0) end += n;
  int64_t len = 0;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, n);
    end = std::clamp<int64_t>(end, 0, n);
    len = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, n - 1);
    end = std::clamp<int64_t>(end, -1, n - 1);
    len = start > end ? (start - end - step - 1) / -step : 0;
  }
  return {axis, start, step, len};
}

// Resolves the slice attributes against static dims; symbolic dims may only be taken whole.
std::vector<SliceAxis> resolve_slice(const InferContext* c, const std::vector<Dim>& dims, const Attrs& a) {
  auto fail = [&](ErrorCode code, const std::string& msg) {
    if (c) c->fail(code, msg);
    SPORE_FAIL(code, "[slice] {}", msg);
  };
  const Ints& starts = a.ints("starts");
  const Ints& ends = a.ints("ends");
  Ints axes = a.ints("axes");
  Ints steps = a.ints("steps");
  const int rank = static_cast<int>(dims.size());
  if (starts.size() != ends.size())
    fail(ErrorCode::invalid_argument, fmt::format("starts has {} entries, ends has {}", starts.size(), ends.size()));
  if (axes.empty()) {
    if (static_cast<int>(starts.size()) > rank)
      fail(ErrorCode::invalid_argument, fmt::format("{} starts for rank {}", starts.size(), rank));
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    fail(ErrorCode::invalid_argument,
         fmt::format("starts, ends, axes and steps need the same length, got {}, {}, {}, {}", starts.size(),
                     ends.size(), axes.size(), steps.size()));
  std::vector<bool> seen(rank, false);
  std::vector<SliceAxis> out;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t ax = axes[i];
    if (ax < -rank || ax >= rank)
      fail(ErrorCode::invalid_argument, fmt::format("axis {} is out of range for rank {}", ax, rank));
    if (ax < 0) ax += rank;
    if (seen[ax]) fail(ErrorCode::invalid_argument, fmt::format("axis {} appears twice in axes", ax));
    seen[ax] = true;
    if (steps[i] == 0) fail(ErrorCode::invalid_argument, fmt::format("step for axis {} is 0", ax));
    const Dim& d = dims[ax];
    if (!d.is_static()) {
      if (starts[i] == 0 && steps[i] == 1 && ends[i] >= std::numeric_limits<int32_t>::max()) continue;  // whole dim
      fail(ErrorCode::unsupported, fmt::format("cannot slice the symbolic dim {} of axis {}", d.str(), ax));
    }
    out.push_back(resolve_slice_axis(static_cast<int>(ax), d.size, starts[i], ends[i], steps[i]));
  }
  return out;
}

std::vector<TensorType> infer_slice(const InferContext& c) {
  TensorType t = c.in(0);
  for (const SliceAxis& s : resolve_slice(&c, t.dims, c.attrs)) t.dims[s.axis] = Dim(s.len);
  return {t};
}

Tensor view_slice(std::span<const Tensor> in, const Attrs& a, const TensorType& out) {
  const Tensor& x = in[0];
  const auto axes = resolve_slice(nullptr, TensorType::of(x.dtype(), x.shape()).dims, a);
  Strides st = x.strides();
  int64_t off = x.offset();
  for (const SliceAxis& s : axes) {
    if (s.step < 0) return {};  // negative strides stay out of views: the copy kernel handles them
    if (s.len > 0) off += s.start * x.strides()[s.axis];
    st[s.axis] *= s.step;
  }
  return x.as_strided(out.shape(), std::move(st), off);
}

// Scatters g back into zeros of x's shape, axis by axis: spread by the step, then pad to place it.
Tensor grad_slice(const GradContext& gc) {
  Tensor g = grad0(gc);
  if (!g.defined()) return {};
  const Tensor& x = gc.inputs[0];
  for (const SliceAxis& s : resolve_slice(nullptr, TensorType::of(x.dtype(), x.shape()).dims, gc.attrs)) {
    const int r = x.rank();
    int64_t start = s.start, step = s.step;
    if (step < 0) {
      g = ops::slice(g, {-1}, {std::numeric_limits<int64_t>::min()}, {s.axis}, {-1});
      start = s.len > 0 ? s.start + (s.len - 1) * step : 0;
      step = -step;
    }
    int64_t covered = s.len;
    if (step > 1 && s.len > 0) {
      Shape sh = g.shape();
      g = ops::unsqueeze(g, {s.axis + 1});
      Ints pads(2 * (r + 1), 0);
      pads[r + 1 + s.axis + 1] = step - 1;
      g = ops::pad(g, pads);
      sh[s.axis] = s.len * step;
      g = ops::reshape(g, sh);
      covered = s.len * step;
    }
    Ints pads(2 * r, 0);
    pads[s.axis] = start;
    pads[r + s.axis] = x.shape()[s.axis] - start - covered;
    g = ops::pad(g, pads);
  }
  return g;
}

// ---- gather family

std::vector<TensorType> infer_gather(const InferContext& c) {
  const TensorType& x = c.in(0);
  check_index_dtype(c, 1);
  c.check(x.rank() > 0, ErrorCode::shape_mismatch, "cannot gather from a rank-0 tensor");
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), x.rank());
  std::vector<Dim> out(x.dims.begin(), x.dims.begin() + axis);
  out.insert(out.end(), c.in(1).dims.begin(), c.in(1).dims.end());
  out.insert(out.end(), x.dims.begin() + axis + 1, x.dims.end());
  return {TensorType(x.dtype, std::move(out))};
}

// Checks that `idx` fits in x along `axis` (same rank, dims no larger except on the axis).
void check_elementwise_indices(const InferContext& c, const TensorType& x, const TensorType& idx, int64_t axis) {
  if (!(idx.rank() == x.rank())) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("indices must have the rank of x ({}), got {}", x.str(), idx.str()));
  for (int d = 0; d < x.rank(); ++d) {
    if (d == axis || !x.dims[d].is_static() || !idx.dims[d].is_static()) continue;
    if (!(idx.dims[d].size <= x.dims[d].size)) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("indices {} exceed x {} on dim {}", idx.str(), x.str(), d));
  }
}

std::vector<TensorType> infer_gather_elements(const InferContext& c) {
  const TensorType& x = c.in(0);
  check_index_dtype(c, 1);
  c.check(x.rank() > 0, ErrorCode::shape_mismatch, "cannot gather from a rank-0 tensor");
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), x.rank());
  check_elementwise_indices(c, x, c.in(1), axis);
  return {TensorType(x.dtype, c.in(1).dims)};
}

std::vector<TensorType> infer_scatter(const InferContext& c) {
  const TensorType& x = c.in(0);
  check_index_dtype(c, 1);
  if (!(c.in(2).dtype == x.dtype)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch,
           fmt::format("updates must have x's dtype {}, got {}", dtype_name(x.dtype), dtype_name(c.in(2).dtype)));
  c.check(x.rank() > 0, ErrorCode::shape_mismatch, "cannot scatter into a rank-0 tensor");
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), x.rank());
  if (!(c.in(1).dims == c.in(2).dims)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("indices {} and updates {} must have the same shape", c.in(1).str(), c.in(2).str()));
  check_elementwise_indices(c, x, c.in(1), axis);
  return {x};
}

std::vector<TensorType> infer_index_select(const InferContext& c) {
  check_index_dtype(c, 1);
  if (!(c.in(1).rank() == 1)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("indices must be 1-D, got {}", c.in(1).str()));
  return infer_gather(c);
}

// resample: indices and weights [out, taps], weights in x's dtype; y is x with dim axis = out.
std::vector<TensorType> infer_resample(const InferContext& c) {
  const TensorType& x = c.in(0);
  check_index_dtype(c, 1);
  c.check(x.rank() > 0, ErrorCode::shape_mismatch, "cannot resample a rank-0 tensor");
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), x.rank());
  if (!(c.in(1).rank() == 2)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("indices must be [out, taps], got {}", c.in(1).str()));
  if (!(c.in(2).dims == c.in(1).dims)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("weights {} must have the shape of indices {}", c.in(2).str(), c.in(1).str()));
  if (!(c.in(2).dtype == x.dtype)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch,
           fmt::format("weights must have x's dtype {}, got {}", dtype_name(x.dtype), dtype_name(c.in(2).dtype)));
  std::vector<Dim> out = x.dims;
  out[static_cast<size_t>(axis)] = c.in(1).dims[0];
  return {TensorType(x.dtype, std::move(out))};
}

std::vector<TensorType> infer_embedding(const InferContext& c) {
  const TensorType& table = c.in(0);
  check_index_dtype(c, 1);
  if (!(table.rank() == 2)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("table must be [V, D], got {}", table.str()));
  std::vector<Dim> out = c.in(1).dims;
  out.push_back(table.dims[1]);
  return {TensorType(table.dtype, std::move(out))};
}

// Zeros of `shape` with g added at the gathered rows: gather = take along `axis` with flattened indices.
Tensor scatter_rows_add(const Shape& shape, DType dtype, const Tensor& idx, const Tensor& g, int64_t axis) {
  const int r = static_cast<int>(shape.size());
  if (axis < 0) axis += r;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (int d = static_cast<int>(axis) + 1; d < r; ++d) inner *= shape[d];
  const int64_t n = idx.numel();
  Tensor g3 = ops::reshape(g, {outer, n, inner});
  Tensor i3 = ops::expand(ops::reshape(idx, {1, n, 1}), {outer, n, inner});
  Tensor z = ops::zeros({outer, shape[axis], inner}, dtype);
  return ops::reshape(ops::scatter(z, i3, g3, 1, "add"), shape);
}

Tensor scatter_rows_grad(const Tensor& x, const Tensor& idx, const Tensor& g, int64_t axis) {
  return scatter_rows_add(x.shape(), x.dtype(), idx, g, axis);
}

// resample, tap by tap: dx += rows of dy * w[:, t] added at indices[:, t]; dw[:, t] = the sum over every dim but
// axis of dy * x[.., indices[:, t], ..].
std::vector<Tensor> resample_grad(const Tensor& x, const Tensor& idx, const Tensor& w, const Tensor& dy, int64_t axis) {
  const int r = x.rank();
  if (axis < 0) axis += r;
  const int64_t out = idx.shape()[0], taps = idx.shape()[1];
  Ints wshape(static_cast<size_t>(r), 1), others;
  wshape[static_cast<size_t>(axis)] = out;
  for (int d = 0; d < r; ++d)
    if (d != axis) others.push_back(d);
  Tensor dx;
  std::vector<Tensor> dw;
  for (int64_t t = 0; t < taps; ++t) {
    const Tensor it = ops::reshape(ops::slice(idx, {t}, {t + 1}, {1}), {out});
    const Tensor wt = ops::reshape(ops::slice(w, {t}, {t + 1}, {1}), wshape);
    const Tensor s = scatter_rows_add(x.shape(), x.dtype(), it, ops::mul(dy, wt), axis);
    dx = dx.defined() ? ops::add(dx, s) : s;
    Tensor prod = ops::mul(dy, ops::index_select(x, it, axis));
    if (!others.empty()) prod = ops::reduce_sum(prod, others);
    dw.push_back(ops::reshape(prod, {out, 1}));
  }
  return {dx, Tensor(), ops::concat(dw, 1)};
}

// pad: constant mode crops the gradient back; in reflect/edge mode every output element reads one input element
// (pad_source), so each padded dim adds the gradient at each output position into its source, one dim at a time.
Tensor pad_grad(const Tensor& x, const Tensor& g, const Ints& pads, PadMode mode) {
  const int r = x.rank();
  if (mode == PadMode::constant) {
    Ints crop = pads;
    for (int64_t& p : crop) p = -p;
    return ops::pad(g, crop);
  }
  Tensor acc = g;
  for (int d = 0; d < r; ++d) {
    const int64_t n = x.shape()[d], b = pads[d], e = pads[r + d];
    if (b == 0 && e == 0) continue;
    const int64_t m = n + b + e;
    std::vector<int64_t> src(static_cast<size_t>(m));
    for (int64_t o = 0; o < m; ++o) src[o] = pad_source(o, n, b, mode);
    Shape s = acc.shape();
    s[d] = n;
    acc = scatter_rows_add(s, acc.dtype(), Tensor::from_vector<int64_t>(src, {m}), acc, d);
  }
  return acc;
}

// scatter's gradients. "none": positions written get no gradient to x, and of repeated indices only the update
// that won (the last, as the kernels apply them in order) gets one. "mul": out[t] = x[t] * prod of the updates at t,
// so x gets g * that product and update k gets g * x[t] * the product of the other updates at t (zeros counted,
// as PyTorch's scatter_reduce "prod" does, without dividing by a zero). "max"/"min": as PyTorch's amax/amin.
std::vector<Tensor> scatter_grad(const GradContext& c) {
  std::vector<Tensor> gs(3);
  const Tensor& g = c.output_grads[0];
  if (!g.defined()) return gs;
  const std::string& red = c.attrs.s("reduction");
  const int64_t axis = c.attrs.i("axis");
  const Tensor &x = c.inputs[0], &idx = c.inputs[1], &upd = c.inputs[2];
  const DType dt = upd.dtype();
  if (red == "add") {
    gs[0] = g;
    gs[2] = ops::gather_elements(g, idx, axis);
  } else if (red == "none") {
    gs[0] = ops::scatter(g, idx, ops::zeros(upd.shape(), dt), axis, "none");
    std::vector<int64_t> iota(static_cast<size_t>(upd.numel()));
    for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<int64_t>(i);
    const Tensor ids = Tensor::from_vector<int64_t>(iota, upd.shape());
    const Tensor winner = ops::scatter(ops::full(x.shape(), -1.0, DType::i64), idx, ids, axis, "none");
    const Tensor won = ops::eq(ops::gather_elements(winner, idx, axis), ids);
    gs[2] = ops::where(won, ops::gather_elements(g, idx, axis), ops::zeros(upd.shape(), dt));
  } else if (red == "max" || red == "min") {  // shared evenly by x and the updates that equal the result (PyTorch)
    const Tensor& out = c.outputs[0];
    const Tensor hit_x = ops::cast(ops::eq(x, out), dt);
    const Tensor hit_u = ops::cast(ops::eq(upd, ops::gather_elements(out, idx, axis)), dt);
    const Tensor count = ops::add(hit_x, ops::scatter(ops::zeros(x.shape(), dt), idx, hit_u, axis, "add"));
    const Tensor share = ops::div(g, ops::maximum(count, ops::ones(x.shape(), dt)));
    gs[0] = ops::mul(share, hit_x);
    gs[2] = ops::mul(ops::gather_elements(share, idx, axis), hit_u);
  } else {  // mul
    gs[0] = ops::mul(g, ops::scatter(ops::ones(x.shape(), dt), idx, upd, axis, "mul"));
    const Tensor zero = ops::zeros(upd.shape(), dt), one = ops::ones(upd.shape(), dt);
    const Tensor is_zero = ops::eq(upd, zero);
    const Tensor safe_upd = ops::where(is_zero, one, upd);
    // Per update, at its target: the product of the nonzero updates there, and how many updates there are zero.
    const Tensor prod_nz = ops::gather_elements(
        ops::scatter(ops::ones(x.shape(), dt), idx, safe_upd, axis, "mul"), idx, axis);
    const Tensor zeros_at = ops::gather_elements(
        ops::scatter(ops::zeros(x.shape(), dt), idx, ops::cast(is_zero, dt), axis, "add"), idx, axis);
    const Tensor others = ops::where(is_zero, ops::where(ops::eq(zeros_at, one), prod_nz, zero),
                                     ops::where(ops::eq(zeros_at, zero), ops::div(prod_nz, safe_upd), zero));
    gs[2] = ops::mul(ops::gather_elements(ops::mul(g, x), idx, axis), others);
  }
  return gs;
}

// ---- pad

std::vector<TensorType> infer_pad(const InferContext& c) {
  TensorType t = c.in(0);
  const Ints& pads = c.attrs.ints("pads");
  const int r = t.rank();
  if (!(static_cast<int>(pads.size()) == 2 * r)) [[unlikely]]
    c.fail(ErrorCode::invalid_argument,
           fmt::format("pads needs 2*rank = {} entries (begins, then ends), got {}", 2 * r, pads.size()));
  const std::string& mode = c.attrs.s("mode");  // one of the schema's choices (normalize)
  for (int d = 0; d < r; ++d) {
    const int64_t b = pads[d], e = pads[r + d];
    Dim& dim = t.dims[d];
    if (dim.is_static()) {
      if (!(dim.size + b + e >= 0)) [[unlikely]]
        c.fail(ErrorCode::shape_mismatch,
               fmt::format("pads {} crop dim {} (size {}) below 0", shape_str(pads), d, dim.size));
      c.check(mode == "constant" || dim.size > 0 || (b <= 0 && e <= 0), ErrorCode::invalid_argument,
              "{} padding of the empty dim {}", mode, d);
    }
    dim = add_dims(dim, Dim(b + e));
  }
  return {t};
}

// ---- expand, squeeze, unsqueeze, flatten, tile

std::vector<TensorType> infer_expand(const InferContext& c) {
  const Ints& shape = c.attrs.ints("shape");
  for (int64_t s : shape)
    if (!(s >= 0)) [[unlikely]]
      c.fail(ErrorCode::invalid_argument, fmt::format("shape {} has a negative size", shape_str(shape)));
  const std::vector<Dim> target(shape.begin(), shape.end());
  return {TensorType(c.in(0).dtype, infer::broadcast_dims(c, c.in(0).dims, target))};
}

Tensor view_expand(std::span<const Tensor> in, const Attrs&, const TensorType& out) {
  return in[0].expand(out.shape());
}

// Sums g over the dims that broadcasting added or stretched, back to `shape`.
Tensor reduce_to_shape(const Tensor& g, const Shape& shape) {
  const int lead = g.rank() - static_cast<int>(shape.size());
  Ints axes;
  for (int d = 0; d < g.rank(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) axes.push_back(d);
  return ops::reshape(axes.empty() ? g : ops::reduce_sum(g, axes, true), shape);
}

// Squeezed axes: the given ones (each must be a static 1) or every static size-1 dim.
std::vector<bool> squeeze_mask(const InferContext* c, const std::vector<Dim>& dims, const Ints& axes) {
  const int r = static_cast<int>(dims.size());
  std::vector<bool> mask(r, false);
  if (axes.empty()) {
    for (int d = 0; d < r; ++d) mask[d] = dims[d].is_static() && dims[d].size == 1;
    return mask;
  }
  for (int64_t a : axes) {
    if (c)
      a = infer::normalize_axis(*c, a, r, "axes");
    else if (a < 0)
      a += r;
    if (c) {
      c->check(!mask[a], ErrorCode::invalid_argument, "axis {} appears twice in axes", a);
      c->check(dims[a].is_static() && dims[a].size == 1, ErrorCode::shape_mismatch,
               "cannot squeeze dim {} of size {} (only size-1 dims)", a, dims[a].str());
    }
    mask[a] = true;
  }
  return mask;
}

std::vector<TensorType> infer_squeeze(const InferContext& c) {
  const TensorType& x = c.in(0);
  const auto mask = squeeze_mask(&c, x.dims, c.attrs.ints("axes"));
  std::vector<Dim> out;
  for (int d = 0; d < x.rank(); ++d)
    if (!mask[d]) out.push_back(x.dims[d]);
  return {TensorType(x.dtype, std::move(out))};
}

std::vector<TensorType> infer_unsqueeze(const InferContext& c) {
  const TensorType& x = c.in(0);
  const Ints& axes = c.attrs.ints("axes");
  const int r = x.rank() + static_cast<int>(axes.size());
  std::vector<bool> inserted(r, false);
  for (int64_t a : axes) {
    a = infer::normalize_axis(c, a, r, "axes");
    c.check(!inserted[a], ErrorCode::invalid_argument, "axis {} appears twice in axes", a);
    inserted[a] = true;
  }
  std::vector<Dim> out;
  size_t k = 0;
  for (int d = 0; d < r; ++d) out.push_back(inserted[d] ? Dim(1) : x.dims[k++]);
  return {TensorType(x.dtype, std::move(out))};
}

std::vector<TensorType> infer_flatten(const InferContext& c) {
  const TensorType& x = c.in(0);
  int64_t axis = c.attrs.i("axis");
  if (!(axis >= -x.rank() && axis <= x.rank())) [[unlikely]]
    c.fail(ErrorCode::invalid_argument, fmt::format("axis={} is out of range for rank {}", axis, x.rank()));
  if (axis < 0) axis += x.rank();
  Dim a(1), b(1);
  for (int d = 0; d < x.rank(); ++d) (d < axis ? a : b) = infer::mul_dims(d < axis ? a : b, x.dims[d]);
  return {TensorType(x.dtype, {a, b})};
}

Tensor view_flatten(std::span<const Tensor> in, const Attrs&, const TensorType& out) {
  const Tensor& x = in[0];
  const Shape s = out.shape();
  if (x.is_contiguous()) return x.as_strided(s, contiguous_strides(s), x.offset());
  return view_dropping_ones(x, s);
}

std::vector<TensorType> infer_tile(const InferContext& c) {
  const TensorType& x = c.in(0);
  const Ints& reps = c.attrs.ints("repeats");
  if (!(static_cast<int>(reps.size()) == x.rank())) [[unlikely]]
    c.fail(ErrorCode::invalid_argument, fmt::format("repeats has {} entries for rank {}", reps.size(), x.rank()));
  std::vector<Dim> out;
  for (int d = 0; d < x.rank(); ++d) {
    if (!(reps[d] >= 0)) [[unlikely]]
      c.fail(ErrorCode::invalid_argument, fmt::format("repeats {} has a negative entry", shape_str(reps)));
    out.push_back(infer::mul_dims(x.dims[d], Dim(reps[d])));
  }
  return {TensorType(x.dtype, std::move(out))};
}

// ---- one_hot, arange, full

std::vector<TensorType> infer_one_hot(const InferContext& c) {
  const TensorType& idx = c.in(0);
  const int64_t depth = c.attrs.i("depth");
  c.check(depth > 0, ErrorCode::invalid_argument, "depth must be positive, got {}", depth);
  const int r = idx.rank() + 1;
  const int64_t axis = infer::normalize_axis(c, c.attrs.i("axis"), r);
  std::vector<Dim> out = idx.dims;
  out.insert(out.begin() + axis, Dim(depth));
  return {TensorType(c.attrs.dtype("dtype"), std::move(out))};
}

std::vector<TensorType> infer_arange(const InferContext& c) {
  const double start = c.attrs.f("start"), stop = c.attrs.f("stop"), step = c.attrs.f("step");
  c.check(step != 0, ErrorCode::invalid_argument, "step must not be 0");
  c.check(std::isfinite(start) && std::isfinite(stop) && std::isfinite(step), ErrorCode::invalid_argument,
          "start, stop and step must be finite, got {}, {}, {}", start, stop, step);
  const double n = std::max(0.0, std::ceil((stop - start) / step));
  c.check(n < 1e12, ErrorCode::invalid_argument,
          "arange({}, {}, {}) has too many elements", start, stop, step);
  return {TensorType(c.attrs.dtype("dtype"), {Dim(static_cast<int64_t>(n))})};
}

std::vector<TensorType> infer_full(const InferContext& c) {
  const Ints& shape = c.attrs.ints("shape");
  for (int64_t s : shape)
    if (!(s >= 0)) [[unlikely]]
      c.fail(ErrorCode::invalid_argument, fmt::format("shape {} has a negative size", shape_str(shape)));
  return {TensorType::of(c.attrs.dtype("dtype"), shape)};
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
  using K = AttrKind;
  const Ints none;
  r.def("reshape"_op)
      .doc("Reshapes x; one -1 takes the remaining size, 0 is a literal 0.")
      .inputs({"x"})
      .attr("shape", K::i64s)
      .dtypes(dtypes::all)
      .traits(view_traits | Trait::reshape, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_reshape)
      .view(view_reshape)
      .grad([](const GradContext& g) { return std::vector<Tensor>{grad_reshape(g)}; });

  r.def("transpose"_op)
      .doc("Permutes the dims of x (perm empty = reverse).")
      .inputs({"x"})
      .attr("perm", K::i64s, none)
      .dtypes(dtypes::all)
      .traits(view_traits, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_transpose)
      .view([](std::span<const Tensor> in, const Attrs& a, const TensorType&) {
        return in[0].permute(perm_of(a, in[0].rank()));
      })
      .grad([](const GradContext& g) {
        if (!grad0(g).defined()) return std::vector<Tensor>{Tensor()};
        const Ints p = perm_of(g.attrs, g.inputs[0].rank());
        Ints inv(p.size());
        for (size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<int64_t>(i);
        return std::vector<Tensor>{ops::transpose(grad0(g), inv)};
      });

  r.def("concat"_op)
      .doc("Joins tensors along an existing axis.")
      .variadic_inputs("xs", 1)
      .attr("axis", K::i64)
      .dtypes(dtypes::all)
      .traits(Trait::injective, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_concat)
      .grad([](const GradContext& g) {
        std::vector<Tensor> gs(g.inputs.size());
        if (!grad0(g).defined()) return gs;
        const int64_t axis = g.attrs.i("axis");
        Ints sizes;
        for (const Tensor& x : g.inputs) sizes.push_back(x.dim(static_cast<int>(axis)));
        return ops::split(grad0(g), sizes, axis);
      });

  r.def("split"_op)
      .doc("Splits x along axis into len(sizes) pieces.")
      .inputs({"x"})
      .attr("sizes", K::i64s)
      .attr("axis", K::i64)
      .dtypes(dtypes::all)
      .traits(Trait::injective, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_split)
      .grad([](const GradContext& g) {
        std::vector<Tensor> parts;
        bool any = false;
        for (size_t i = 0; i < g.outputs.size(); ++i) {
          any |= g.output_grads[i].defined();
          parts.push_back(g.output_grads[i].defined() ? g.output_grads[i]
                                                      : ops::zeros(g.outputs[i].shape(), g.outputs[i].dtype()));
        }
        return std::vector<Tensor>{any ? ops::concat(parts, g.attrs.i("axis")) : Tensor()};
      });

  r.def("slice"_op)
      .doc("ONNX Slice: negative indices, clamping, negative steps; axes empty = 0..n-1.")
      .inputs({"x"})
      .attr("starts", K::i64s)
      .attr("ends", K::i64s)
      .attr("axes", K::i64s, none)
      .attr("steps", K::i64s, none)
      .dtypes(dtypes::all)
      .traits(view_traits, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_slice)
      .view(view_slice)
      .grad([](const GradContext& g) { return std::vector<Tensor>{grad_slice(g)}; });

  r.def("gather"_op)
      .doc("numpy.take along axis; negative indices wrap.")
      .inputs({"x", "indices"})
      .attr("axis", K::i64, int64_t{0})
      .dtypes(dtypes::all)
      .traits(Trait::injective, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_gather)
      .grad([](const GradContext& g) {
        if (!grad0(g).defined()) return std::vector<Tensor>{Tensor(), Tensor()};
        return std::vector<Tensor>{scatter_rows_grad(g.inputs[0], g.inputs[1], grad0(g), g.attrs.i("axis")), Tensor()};
      });

  r.def("gather_elements"_op)
      .doc("ONNX GatherElements: out[i][j] = x[idx[i][j]][j] for axis 0.")
      .inputs({"x", "indices"})
      .attr("axis", K::i64)
      .dtypes(dtypes::all)
      .traits(Trait::injective, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_gather_elements)
      .grad([](const GradContext& g) {
        if (!grad0(g).defined()) return std::vector<Tensor>{Tensor(), Tensor()};
        const Tensor& x = g.inputs[0];
        Tensor z = ops::zeros(x.shape(), x.dtype());
        return std::vector<Tensor>{ops::scatter(z, g.inputs[1], grad0(g), g.attrs.i("axis"), "add"), Tensor()};
      });

  r.def("scatter"_op)
      .doc("ONNX ScatterElements: writes updates into a copy of x at indices along axis.")
      .inputs({"x", "indices", "updates"})
      .attr("axis", K::i64)
      .choice("reduction", {"none", "add", "mul", "max", "min"})
      .dtypes(dtypes::all)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_scatter)
      .grad(scatter_grad);

  r.def("index_select"_op)
      .doc("Selects entries of x along axis with 1-D indices.")
      .inputs({"x", "indices"})
      .attr("axis", K::i64)
      .dtypes(dtypes::all)
      .traits(Trait::injective, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_index_select)
      .grad([](const GradContext& g) {
        if (!grad0(g).defined()) return std::vector<Tensor>{Tensor(), Tensor()};
        return std::vector<Tensor>{scatter_rows_grad(g.inputs[0], g.inputs[1], grad0(g), g.attrs.i("axis")), Tensor()};
      });

  r.def("resample"_op)
      .doc("Weighted taps along axis: y[.., o, ..] = sum_t weights[o, t] * x[.., indices[o, t], ..] (Resize).")
      .inputs({"x", "indices", "weights"})
      .attr("axis", K::i64)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_resample)
      .grad([](const GradContext& g) {
        if (!grad0(g).defined()) return std::vector<Tensor>{Tensor(), Tensor(), Tensor()};
        return resample_grad(g.inputs[0], g.inputs[1], g.inputs[2], grad0(g), g.attrs.i("axis"));
      });

  r.def("embedding"_op)
      .doc("Rows of table [V, D] for ids of any shape -> [..., D].")
      .inputs({"table", "ids"})
      .dtypes(dtypes::all)
      .traits(Trait::injective, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_embedding)
      .grad([](const GradContext& g) {
        if (!grad0(g).defined()) return std::vector<Tensor>{Tensor(), Tensor()};
        return std::vector<Tensor>{scatter_rows_grad(g.inputs[0], g.inputs[1], grad0(g), 0), Tensor()};
      });

  r.def("pad"_op)
      .doc("Pads (or, with negative pads, crops) every dim; pads = begins then ends.")
      .inputs({"x"})
      .attr("pads", K::i64s)
      .choice("mode", {"constant", "reflect", "edge"})
      .attr("value", K::f64, 0.0)
      .dtypes(dtypes::all)
      .traits(Trait::injective, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_pad)
      .grad([](const GradContext& g) {
        if (!grad0(g).defined()) return std::vector<Tensor>{Tensor()};
        return std::vector<Tensor>{pad_grad(g.inputs[0], grad0(g), g.attrs.ints("pads"), pad_mode(g.attrs.s("mode")))};
      });

  r.def("expand"_op)
      .doc("Broadcasts x with shape (bidirectional, ONNX Expand).")
      .inputs({"x"})
      .attr("shape", K::i64s)
      .dtypes(dtypes::all)
      .traits(view_traits, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_expand)
      .view(view_expand)
      .grad([](const GradContext& g) {
        if (!grad0(g).defined()) return std::vector<Tensor>{Tensor()};
        return std::vector<Tensor>{reduce_to_shape(grad0(g), g.inputs[0].shape())};
      });

  r.def("squeeze"_op)
      .doc("Drops size-1 dims (axes empty = all of them).")
      .inputs({"x"})
      .attr("axes", K::i64s, none)
      .dtypes(dtypes::all)
      .traits(view_traits | Trait::reshape, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_squeeze)
      .view([](std::span<const Tensor> in, const Attrs&, const TensorType& out) {
        return view_dropping_ones(in[0], out.shape());
      })
      .grad([](const GradContext& g) { return std::vector<Tensor>{grad_reshape(g)}; });

  r.def("unsqueeze"_op)
      .doc("Inserts size-1 dims at axes (of the result).")
      .inputs({"x"})
      .attr("axes", K::i64s)
      .dtypes(dtypes::all)
      .traits(view_traits | Trait::reshape, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_unsqueeze)
      .view([](std::span<const Tensor> in, const Attrs&, const TensorType& out) {
        return view_dropping_ones(in[0], out.shape());
      })
      .grad([](const GradContext& g) { return std::vector<Tensor>{grad_reshape(g)}; });

  r.def("flatten"_op)
      .doc("-> [prod(dims[:axis]), prod(dims[axis:])].")
      .inputs({"x"})
      .attr("axis", K::i64, int64_t{1})
      .dtypes(dtypes::all)
      .traits(view_traits | Trait::reshape, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_flatten)
      .view(view_flatten)
      .grad([](const GradContext& g) { return std::vector<Tensor>{grad_reshape(g)}; });

  r.def("tile"_op)
      .doc("Repeats x repeats[d] times along every dim d.")
      .inputs({"x"})
      .attr("repeats", K::i64s)
      .dtypes(dtypes::all)
      .traits(Trait::injective, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_tile)
      .grad([](const GradContext& g) {
        if (!grad0(g).defined()) return std::vector<Tensor>{Tensor()};
        const Tensor& x = g.inputs[0];
        const Ints& reps = g.attrs.ints("repeats");
        Ints split_shape, axes;
        for (int d = 0; d < x.rank(); ++d) {
          axes.push_back(2 * d);
          split_shape.push_back(reps[d]);
          split_shape.push_back(x.shape()[d]);
        }
        Tensor s = ops::reduce_sum(ops::reshape(grad0(g), split_shape), axes, false);
        return std::vector<Tensor>{ops::reshape(s, x.shape())};
      });

  r.def("one_hot"_op)
      .doc(
          "on_value where index == position along axis, else off_value; negative indices count "
          "from depth, out-of-range ones give all off_value.")
      .inputs({"indices"})
      .attr("depth", K::i64)
      .attr("dtype", K::dtype, DType::f32)
      .attr("axis", K::i64, int64_t{-1})
      .attr("on_value", K::f64, 1.0)
      .attr("off_value", K::f64, 0.0)
      .dtypes(dtypes::index)
      .traits(Trait::no_grad, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_one_hot);

  r.def("arange"_op)
      .doc("start, start+step, ... up to (excluding) stop; length ceil((stop-start)/step).")
      .attr("start", K::f64)
      .attr("stop", K::f64)
      .attr("step", K::f64, 1.0)
      .attr("dtype", K::dtype, DType::f32)
      .dtypes(dtypes::numeric)
      .dispatch_on(-1)
      .traits(Trait::no_grad, FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_arange);

  r.def("full"_op)
      .doc("A tensor of the given shape filled with value.")
      .attr("shape", K::i64s)
      .attr("value", K::f64)
      .attr("dtype", K::dtype, DType::f32)
      .dtypes(dtypes::numeric)
      .dispatch_on(-1)
      .traits(Trait::no_grad, FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_full);
}

}  // namespace spore
