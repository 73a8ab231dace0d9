// Indexing ops that ONNX exports contain beyond gather/scatter: scatter_nd and gather_nd (ONNX ScatterND / GatherND),
// grid_sample (GridSample, with the grid_sample_grad kernel its gradient calls), roi_align (RoiAlign, with
// roi_align_grad) and einsum (decomposed into transpose / reshape / matmul / reduce_sum; the reference backend runs
// it as a plain sum over every label assignment).
#include <algorithm>
#include <numeric>

#include "ops/einsum.h"
#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace {

using Ints = std::vector<int64_t>;
using Grads = std::vector<Tensor>;

void check_index_input(const InferContext& c, int i) {
  const DType t = c.in(i).dtype;
  if (!dtypes::index.has(t)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("input '{}' holds indices and must be i32 or i64, got {}",
                                                  c.def.input_names.at(static_cast<size_t>(i)), dtype_name(t)));
}

// The index depth k: the static last dim of indices.
int64_t index_depth(const InferContext& c, const TensorType& idx, int64_t max_depth) {
  c.check(idx.rank() >= 1, ErrorCode::shape_mismatch, "indices must have rank >= 1, got {}", idx.str());
  const Dim& kd = idx.dims.back();
  c.check(kd.is_static(), ErrorCode::unsupported, "the last dim of indices (the index depth) must be static, got {}",
          idx.str());
  c.check(kd.size <= max_depth, ErrorCode::shape_mismatch, "index depth {} exceeds the {} indexable dims of data",
          kd.size, max_depth);
  return kd.size;
}

// ---- scatter_nd / gather_nd

std::vector<TensorType> infer_scatter_nd(const InferContext& c) {
  const TensorType &x = c.in(0), &idx = c.in(1), &upd = c.in(2);
  check_index_input(c, 1);
  c.check(upd.dtype == x.dtype, ErrorCode::dtype_mismatch, "updates must have x's dtype {}, got {}",
          dtype_name(x.dtype), dtype_name(upd.dtype));
  c.check(x.rank() > 0, ErrorCode::shape_mismatch, "cannot scatter into a rank-0 tensor");
  const int64_t k = index_depth(c, idx, x.rank());
  std::vector<Dim> want(idx.dims.begin(), idx.dims.end() - 1);
  want.insert(want.end(), x.dims.begin() + k, x.dims.end());
  bool ok = upd.rank() == static_cast<int>(want.size());
  for (size_t i = 0; ok && i < want.size(); ++i) ok = infer::dims_compatible(upd.dims[i], want[i]);
  c.check(ok, ErrorCode::shape_mismatch, "updates must be indices.shape[:-1] + x.shape[{}:] = {}, got {}", k,
          infer::dims_str(want), upd.str());
  return {x};
}

std::vector<TensorType> infer_gather_nd(const InferContext& c) {
  const TensorType &x = c.in(0), &idx = c.in(1);
  check_index_input(c, 1);
  const int64_t b = c.attrs.i("batch_dims");
  c.check(b >= 0 && b < idx.rank() && b <= x.rank(), ErrorCode::invalid_argument,
          "batch_dims {} must be in [0, min(rank of x {}, rank of indices {} - 1)]", b, x.rank(), idx.rank());
  for (int64_t d = 0; d < b; ++d)
    c.check(infer::dims_compatible(x.dims[d], idx.dims[d]), ErrorCode::shape_mismatch,
            "batch dim {} differs: x {} vs indices {}", d, x.str(), idx.str());
  const int64_t k = index_depth(c, idx, x.rank() - b);
  std::vector<Dim> out(idx.dims.begin(), idx.dims.end() - 1);
  out.insert(out.end(), x.dims.begin() + b + k, x.dims.end());
  return {TensorType(x.dtype, std::move(out))};
}

// indices [B..., M..., k] with the batch coordinates put in front of each tuple: [B..., M..., b + k], i64. Lets
// scatter_nd (which has no batch_dims) address what gather_nd with batch_dims read.
Tensor with_batch_coords(const Tensor& idx, int64_t b) {
  Tensor i64 = idx.dtype() == DType::i64 ? idx : ops::cast(idx, DType::i64);
  if (b == 0) return i64;
  const Shape& s = idx.shape();
  Ints lead(s.begin(), s.end() - 1);
  lead.push_back(1);
  std::vector<Tensor> parts;
  for (int64_t d = 0; d < b; ++d) {
    Ints shape(lead.size(), 1);
    shape[static_cast<size_t>(d)] = s[static_cast<size_t>(d)];
    parts.push_back(ops::expand(ops::reshape(ops::arange(0, static_cast<double>(s[d]), 1, DType::i64), shape), lead));
  }
  parts.push_back(i64);
  return ops::concat(parts, -1);
}

// The ids 0..n-1 of the index tuples, broadcast over each tuple's slice: [M..., S...] like updates.
Tensor tuple_ids(const Tensor& idx, const Shape& upd_shape) {
  const Shape& s = idx.shape();
  const Ints lead(s.begin(), s.end() - 1);
  int64_t m = 1;
  for (int64_t v : lead) m *= v;
  Ints shape = lead;
  shape.resize(upd_shape.size(), 1);
  return ops::expand(ops::reshape(ops::arange(0, static_cast<double>(m), 1, DType::i64), shape), upd_shape);
}

// Gradients of scatter_nd, by reduction (the same rules as scatter's, see ops/shape.cpp): "none" gives x no gradient
// where it was overwritten and, of repeated tuples, only the update that won (the last); "mul" multiplies by the other
// factors; "max"/"min" share the gradient evenly among x and the updates that equal the result (PyTorch's
// scatter_reduce amax/amin).
Grads scatter_nd_grad(const GradContext& c) {
  Grads gs(3);
  const Tensor& g = c.output_grads[0];
  if (!g.defined()) return gs;
  const std::string& red = c.attrs.s("reduction");
  const Tensor &x = c.inputs[0], &idx = c.inputs[1], &upd = c.inputs[2];
  const DType dt = upd.dtype();
  if (red == "add") {
    gs[0] = g;
    gs[2] = ops::gather_nd(g, idx);
  } else if (red == "none") {
    gs[0] = ops::scatter_nd(g, idx, ops::zeros(upd.shape(), dt));
    const Tensor ids = tuple_ids(idx, upd.shape());
    const Tensor winner = ops::scatter_nd(ops::full(x.shape(), -1.0, DType::i64), idx, ids);
    gs[2] = ops::where(ops::eq(ops::gather_nd(winner, idx), ids), ops::gather_nd(g, idx), ops::zeros(upd.shape(), dt));
  } else if (red == "mul") {
    gs[0] = ops::mul(g, ops::scatter_nd(ops::ones(x.shape(), dt), idx, upd, "mul"));
    const Tensor zero = ops::zeros(upd.shape(), dt), one = ops::ones(upd.shape(), dt);
    const Tensor is_zero = ops::eq(upd, zero);
    const Tensor safe_upd = ops::where(is_zero, one, upd);
    const Tensor prod_nz = ops::gather_nd(ops::scatter_nd(ops::ones(x.shape(), dt), idx, safe_upd, "mul"), idx);
    const Tensor zeros_at =
        ops::gather_nd(ops::scatter_nd(ops::zeros(x.shape(), dt), idx, ops::cast(is_zero, dt), "add"), idx);
    const Tensor others = ops::where(is_zero, ops::where(ops::eq(zeros_at, one), prod_nz, zero),
                                     ops::where(ops::eq(zeros_at, zero), ops::div(prod_nz, safe_upd), zero));
    gs[2] = ops::mul(ops::gather_nd(ops::mul(g, x), idx), others);
  } else {  // max, min
    const Tensor& out = c.outputs[0];
    const Tensor hit_x = ops::cast(ops::eq(x, out), dt);
    const Tensor hit_u = ops::cast(ops::eq(upd, ops::gather_nd(out, idx)), dt);
    const Tensor count = ops::add(hit_x, ops::scatter_nd(ops::zeros(x.shape(), dt), idx, hit_u, "add"));
    const Tensor share = ops::div(g, ops::maximum(count, ops::ones(x.shape(), dt)));
    gs[0] = ops::mul(share, hit_x);
    gs[2] = ops::mul(ops::gather_nd(share, idx), hit_u);
  }
  return gs;
}

Grads gather_nd_grad(const GradContext& c) {
  const Tensor& g = c.output_grads[0];
  if (!g.defined()) return {Tensor(), Tensor()};
  const Tensor& x = c.inputs[0];
  const Tensor full = with_batch_coords(c.inputs[1], c.attrs.i("batch_dims"));
  return {ops::scatter_nd(ops::zeros(x.shape(), x.dtype()), full, g, "add"), Tensor()};
}

// ---- grid_sample

std::vector<TensorType> infer_grid_sample(const InferContext& c) {
  const TensorType &x = c.in(0), &grid = c.in(1);
  c.check(x.rank() == 4, ErrorCode::unsupported,
          "x must be [N, C, H, W] (4-D; volumetric grid_sample is not supported), got {}", x.str());
  c.check(grid.dtype == x.dtype, ErrorCode::dtype_mismatch, "grid must have x's dtype {}, got {}", dtype_name(x.dtype),
          dtype_name(grid.dtype));
  const bool ok = grid.rank() == 4 && infer::dims_compatible(grid.dims[0], x.dims[0]) && grid.dims[3].is_static() &&
                  grid.dims[3].size == 2;
  c.check(ok, ErrorCode::shape_mismatch, "grid must be [N, Ho, Wo, 2] with x's N ({}), got {}", x.dims[0].str(),
          grid.str());
  return {TensorType(x.dtype, {x.dims[0], x.dims[1], grid.dims[1], grid.dims[2]})};
}

std::vector<TensorType> infer_grid_sample_grad(const InferContext& c) {
  const TensorType y = infer_grid_sample(c)[0];
  const TensorType& dy = c.in(2);
  bool ok = dy.dtype == y.dtype && dy.rank() == 4;
  for (int i = 0; ok && i < 4; ++i)
    ok = infer::dims_compatible(dy.dims[static_cast<size_t>(i)], y.dims[static_cast<size_t>(i)]);
  c.check(ok, ErrorCode::shape_mismatch, "dy must be grid_sample's output {}, got {}", y.str(), dy.str());
  return {c.in(0), c.in(1)};
}

Attrs grid_attrs(const Attrs& a) {
  return {{"mode", a.s("mode")}, {"padding_mode", a.s("padding_mode")}, {"align_corners", a.b("align_corners")}};
}

// ---- roi_align

std::vector<TensorType> infer_roi_align(const InferContext& c) {
  const TensorType &x = c.in(0), &rois = c.in(1), &bi = c.in(2);
  c.check(x.rank() == 4, ErrorCode::shape_mismatch, "x must be [N, C, H, W], got {}", x.str());
  c.check(rois.dtype == x.dtype, ErrorCode::dtype_mismatch, "rois must have x's dtype {}, got {}", dtype_name(x.dtype),
          dtype_name(rois.dtype));
  c.check(rois.rank() == 2 && rois.dims[1].is_static() && rois.dims[1].size == 4, ErrorCode::shape_mismatch,
          "rois must be [R, 4], got {}", rois.str());
  check_index_input(c, 2);
  c.check(bi.rank() == 1 && infer::dims_compatible(bi.dims[0], rois.dims[0]), ErrorCode::shape_mismatch,
          "batch_indices must be [R] with R = {}, got {}", rois.dims[0].str(), bi.str());
  const int64_t oh = c.attrs.i("output_height"), ow = c.attrs.i("output_width");
  c.check(oh > 0 && ow > 0, ErrorCode::invalid_argument, "output_height and output_width must be > 0, got {} and {}",
          oh, ow);
  c.check(c.attrs.i("sampling_ratio") >= 0, ErrorCode::invalid_argument, "sampling_ratio must be >= 0, got {}",
          c.attrs.i("sampling_ratio"));
  return {TensorType(x.dtype, {rois.dims[0], x.dims[1], Dim(oh), Dim(ow)})};
}

std::vector<TensorType> infer_roi_align_grad(const InferContext& c) {
  const TensorType y = infer_roi_align(c)[0];
  const TensorType& dy = c.in(3);
  bool ok = dy.dtype == y.dtype && dy.rank() == 4;
  for (int i = 0; ok && i < 4; ++i)
    ok = infer::dims_compatible(dy.dims[static_cast<size_t>(i)], y.dims[static_cast<size_t>(i)]);
  c.check(ok, ErrorCode::shape_mismatch, "dy must be roi_align's output {}, got {}", y.str(), dy.str());
  return {c.in(0)};
}

// ---- einsum

EinsumSpec spec_for(const InferContext& c) {
  std::vector<int> ranks;
  for (int i = 0; i < c.num_inputs(); ++i) ranks.push_back(c.in(i).rank());
  try {
    return parse_einsum(c.attrs.s("equation"), ranks);
  } catch (const Error& e) {
    c.fail(e.code(), e.what());
  }
}

std::vector<TensorType> infer_einsum(const InferContext& c) {
  const DType t = infer::common_dtype(c);
  const EinsumSpec s = spec_for(c);
  // Each label's size: equal wherever it appears, except that the ellipsis dims broadcast (1 against n).
  std::vector<Dim> size(static_cast<size_t>(s.num_labels), Dim(-2));
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    for (size_t j = 0; j < s.inputs[i].size(); ++j) {
      const int id = s.inputs[i][j];
      const Dim& d = c.in(static_cast<int>(i)).dims[j];
      Dim& cur = size[static_cast<size_t>(id)];
      const bool ellipsis = id >= 52;
      if (cur.is_static() && cur.size == -2) {
        cur = d;
      } else if (ellipsis && d.is_static() && d.size == 1) {
      } else if (ellipsis && cur.is_static() && cur.size == 1) {
        cur = d;
      } else {
        c.check(infer::dims_compatible(cur, d), ErrorCode::shape_mismatch,
                "label '{}' has size {} in input {} but {} elsewhere", einsum_label_name(id), d.str(), i, cur.str());
      }
    }
  }
  std::vector<Dim> out;
  for (int id : s.output) out.push_back(size[static_cast<size_t>(id)]);
  return {TensorType(t, std::move(out))};
}

// An operand during the decomposition: a tensor and the label of each of its dims.
struct Operand {
  Tensor t;
  std::vector<int> labels;
};

int64_t position(const std::vector<int>& v, int id) {
  return static_cast<int64_t>(std::find(v.begin(), v.end(), id) - v.begin());
}
bool has(const std::vector<int>& v, int id) { return std::find(v.begin(), v.end(), id) != v.end(); }

// Repeated labels (a diagonal): move the two dims last, merge them and take every (n + 1)-th element.
void take_diagonals(Operand& o) {
  for (bool again = true; again;) {
    again = false;
    for (size_t p = 0; p < o.labels.size() && !again; ++p) {
      for (size_t q = p + 1; q < o.labels.size() && !again; ++q) {
        if (o.labels[p] != o.labels[q]) continue;
        const int64_t r = static_cast<int64_t>(o.labels.size());
        Ints perm;
        std::vector<int> labels;
        for (int64_t d = 0; d < r; ++d)
          if (d != static_cast<int64_t>(p) && d != static_cast<int64_t>(q)) {
            perm.push_back(d);
            labels.push_back(o.labels[static_cast<size_t>(d)]);
          }
        perm.push_back(static_cast<int64_t>(p));
        perm.push_back(static_cast<int64_t>(q));
        const int64_t n = o.t.shape()[p];
        Tensor t = ops::transpose(o.t, perm);
        Ints shape(t.shape().begin(), t.shape().end() - 2);
        shape.push_back(n * n);
        t = ops::reshape(t, shape);
        t = ops::slice(t, {0}, {n * n}, {-1}, {n + 1});
        labels.push_back(o.labels[p]);
        o = {t, labels};
        again = true;
      }
    }
  }
}

// Sums the dims whose labels `keep` does not hold.
void sum_unused(Operand& o, const std::vector<int>& keep) {
  Ints axes;
  std::vector<int> labels;
  for (size_t d = 0; d < o.labels.size(); ++d) {
    if (has(keep, o.labels[d])) labels.push_back(o.labels[d]);
    else axes.push_back(static_cast<int64_t>(d));
  }
  if (axes.empty()) return;
  o = {ops::reduce_sum(o.t, axes, false), labels};
}

// a x b over their shared labels: the labels `keep` holds stay as batch dims, the others are contracted by a
// batched matmul [B, M, K] x [B, K, N].
Operand contract(const Operand& a, const Operand& b, const std::vector<int>& keep, const std::vector<int64_t>& size) {
  std::vector<int> batch, contracted, a_only, b_only;
  for (int id : a.labels) {
    if (has(b.labels, id)) (has(keep, id) ? batch : contracted).push_back(id);
    else a_only.push_back(id);
  }
  for (int id : b.labels)
    if (!has(a.labels, id)) b_only.push_back(id);
  const auto prod = [&](const std::vector<int>& ids) {
    int64_t p = 1;
    for (int id : ids) p *= size[static_cast<size_t>(id)];
    return p;
  };
  const auto arrange = [&](const Operand& o, std::initializer_list<const std::vector<int>*> groups) {
    Ints perm;
    for (const auto* g : groups)
      for (int id : *g) perm.push_back(position(o.labels, id));
    Tensor t = ops::transpose(o.t, perm);
    Ints shape;
    for (const auto* g : groups) shape.push_back(prod(*g));
    return ops::reshape(t, shape);
  };
  const Tensor am = arrange(a, {&batch, &a_only, &contracted});
  const Tensor bm = arrange(b, {&batch, &contracted, &b_only});
  Tensor r = ops::matmul(am, bm);
  std::vector<int> labels = batch;
  labels.insert(labels.end(), a_only.begin(), a_only.end());
  labels.insert(labels.end(), b_only.begin(), b_only.end());
  Ints shape;
  for (int id : labels) shape.push_back(size[static_cast<size_t>(id)]);
  return {ops::reshape(r, shape), labels};
}

// The einsum of operands with the given labels into `out` labels, with ops:: (also the gradient's form).
Tensor einsum_labels(std::vector<Operand> ops_in, const std::vector<int>& out, int num_labels) {
  std::vector<int64_t> size(static_cast<size_t>(num_labels), 1);
  for (const Operand& o : ops_in)
    for (size_t d = 0; d < o.labels.size(); ++d)
      size[static_cast<size_t>(o.labels[d])] = std::max(size[static_cast<size_t>(o.labels[d])], o.t.shape()[d]);
  const auto keep_after = [&](size_t i) {  // labels still needed after operand i: the output's and later operands'
    std::vector<int> keep = out;
    for (size_t j = i + 1; j < ops_in.size(); ++j)
      keep.insert(keep.end(), ops_in[j].labels.begin(), ops_in[j].labels.end());
    return keep;
  };
  for (size_t i = 0; i < ops_in.size(); ++i) {
    Operand& o = ops_in[i];
    take_diagonals(o);
    std::vector<int> keep = out;  // labels any other operand or the output needs
    for (size_t j = 0; j < ops_in.size(); ++j)
      if (j != i) keep.insert(keep.end(), ops_in[j].labels.begin(), ops_in[j].labels.end());
    sum_unused(o, keep);
    Ints full;  // ellipsis dims of size 1 broadcast
    bool grow = false;
    for (size_t d = 0; d < o.labels.size(); ++d) {
      full.push_back(size[static_cast<size_t>(o.labels[d])]);
      grow |= full.back() != o.t.shape()[d];
    }
    if (grow) o.t = ops::expand(o.t, full);
  }
  Operand acc = ops_in[0];
  for (size_t i = 1; i < ops_in.size(); ++i) {
    const std::vector<int> keep = keep_after(i);
    sum_unused(acc, [&] {
      std::vector<int> k = keep;
      k.insert(k.end(), ops_in[i].labels.begin(), ops_in[i].labels.end());
      return k;
    }());
    acc = contract(acc, ops_in[i], keep, size);
  }
  sum_unused(acc, out);
  Ints perm;
  for (int id : out) perm.push_back(position(acc.labels, id));
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  return identity ? acc.t : ops::transpose(acc.t, perm);
}

EinsumSpec spec_of(std::span<const Tensor> in, const std::string& equation) {
  std::vector<int> ranks;
  for (const Tensor& t : in) ranks.push_back(t.rank());
  return parse_einsum(equation, ranks);
}

std::vector<Tensor> decompose_einsum(std::span<const Tensor> in, const Attrs& a) {
  const EinsumSpec s = spec_of(in, a.s("equation"));
  std::vector<Operand> operands;
  for (size_t i = 0; i < in.size(); ++i) operands.push_back({in[i], s.inputs[i]});
  return {einsum_labels(std::move(operands), s.output, s.num_labels)};
}

// d out / d input i is the einsum of the output gradient with the other operands into input i's labels. Labels only
// input i has are broadcast back (expand), ellipsis dims it broadcast (size 1) are summed, and a repeated label (a
// diagonal) puts the gradient on the diagonal: computed once per distinct label, then spread and masked.
Grads einsum_grad(const GradContext& c) {
  Grads gs(c.inputs.size());
  const Tensor& g = c.output_grads[0];
  if (!g.defined()) return gs;
  const EinsumSpec s = spec_of(c.inputs, c.attrs.s("equation"));
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.wants(i)) continue;
    const std::vector<int>& li = s.inputs[i];
    const Shape& xs = c.inputs[i].shape();
    std::vector<Operand> operands{{g, s.output}};
    std::vector<int> seen = s.output;
    for (size_t j = 0; j < c.inputs.size(); ++j)
      if (j != i) {
        operands.push_back({c.inputs[j], s.inputs[j]});
        seen.insert(seen.end(), s.inputs[j].begin(), s.inputs[j].end());
      }
    std::vector<int> reached;  // distinct labels of input i that the others or the output have, in order
    for (int id : li)
      if (has(seen, id) && !has(reached, id)) reached.push_back(id);
    Tensor r = einsum_labels(std::move(operands), reached, s.num_labels);
    // Onto input i's dims: each reached label at its first position, 1 elsewhere.
    Ints rs;
    std::vector<int> placed;
    for (size_t d = 0; d < li.size(); ++d) {
      const bool first = has(reached, li[d]) && !has(placed, li[d]);
      rs.push_back(first ? r.shape()[static_cast<size_t>(position(reached, li[d]))] : 1);
      if (first) placed.push_back(li[d]);
    }
    // (reached is in first-appearance order, so a reshape puts it in place)
    r = ops::reshape(r, rs);
    Ints sum_axes;
    for (size_t d = 0; d < li.size(); ++d)
      if (rs[d] != xs[d] && xs[d] == 1) sum_axes.push_back(static_cast<int64_t>(d));
    if (!sum_axes.empty()) r = ops::reduce_sum(r, sum_axes, true);
    const Ints full(xs.begin(), xs.end());
    if (r.shape() != xs) r = ops::expand(r, full);
    bool repeated = false;
    for (size_t d = 0; d < li.size(); ++d) repeated |= std::count(li.begin(), li.end(), li[d]) > 1;
    if (repeated) {  // 1 where every repeated label's positions agree
      std::vector<double> mask(static_cast<size_t>(shape_numel(xs)));
      std::vector<int64_t> at(xs.size(), 0);
      for (size_t f = 0; f < mask.size(); ++f) {
        bool on = true;
        for (size_t p = 0; p < li.size() && on; ++p)
          for (size_t q = p + 1; q < li.size() && on; ++q) on = li[p] != li[q] || at[p] == at[q];
        mask[f] = on ? 1.0 : 0.0;
        for (int d = static_cast<int>(xs.size()) - 1;
             d >= 0 && ++at[static_cast<size_t>(d)] == xs[static_cast<size_t>(d)]; --d)
          at[static_cast<size_t>(d)] = 0;
      }
      r = ops::mul(r, Tensor::from_doubles(mask, xs, r.dtype()));
    }
    gs[i] = r;
  }
  return gs;
}

}  // namespace

void register_index_ops(OpRegistry& r) {
  using K = AttrKind;
  r.def("scatter_nd"_op)
      .doc(
          "ONNX ScatterND: a copy of x with updates written (or reduced) at the index tuples in the last dim of "
          "indices, applied in order; negative indices wrap.")
      .inputs({"x", "indices", "updates"})
      .choice("reduction", {"none", "add", "mul", "max", "min"})
      .dtypes(dtypes::all)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_scatter_nd)
      .grad(scatter_nd_grad);

  r.def("gather_nd"_op)
      .doc(
          "ONNX GatherND: the slices of x at the index tuples in the last dim of indices; the first batch_dims dims "
          "of x and indices are shared. Negative indices wrap.")
      .inputs({"x", "indices"})
      .attr("batch_dims", K::i64, int64_t{0})
      .dtypes(dtypes::all)
      .traits(Trait::injective, FusionKind::injective, AmpPolicy::follow)
      .infer(infer_gather_nd)
      .grad(gather_nd_grad);

  r.def("grid_sample"_op)
      .doc(
          "ONNX GridSample (opset 16) / PyTorch grid_sample: x [N, C, H, W] sampled at grid [N, Ho, Wo, 2] "
          "(x then y, -1..1) -> [N, C, Ho, Wo].")
      .inputs({"x", "grid"})
      .choice("mode", {"bilinear", "nearest", "bicubic"})
      .choice("padding_mode", {"zeros", "border", "reflection"})
      .attr("align_corners", K::boolean, false)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_grid_sample)
      .grad([](const GradContext& c) {
        if (!c.output_grads[0].defined()) return Grads{Tensor(), Tensor()};
        const std::vector<Tensor> ins{c.inputs[0], c.inputs[1], c.output_grads[0]};
        return ops::call("grid_sample_grad"_op, ins, grid_attrs(c.attrs));
      });

  r.def("grid_sample_grad"_op)
      .doc("Gradients of grid_sample (same attributes): x, grid, dy -> dx, dgrid (dgrid is 0 for nearest).")
      .inputs({"x", "grid", "dy"})
      .choice("mode", {"bilinear", "nearest", "bicubic"})
      .choice("padding_mode", {"zeros", "border", "reflection"})
      .attr("align_corners", K::boolean, false)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_grid_sample_grad);

  const auto roi_attrs = [&](OpDefBuilder b) {
    return b.attr("output_height", K::i64, int64_t{1})
        .attr("output_width", K::i64, int64_t{1})
        .attr("sampling_ratio", K::i64, int64_t{0})
        .attr("spatial_scale", K::f64, 1.0)
        .choice("mode", {"avg", "max"})
        .choice("coordinate_transformation_mode", {"half_pixel", "output_half_pixel"})
        .dtypes(dtypes::floating)
        .traits(TraitSet(), FusionKind::opaque, AmpPolicy::keep_f32);
  };
  roi_attrs(r.def("roi_align"_op)
                .doc("ONNX RoiAlign (opset 16): x [N, C, H, W], rois [R, 4] as (x1, y1, x2, y2), batch_indices [R] -> "
                     "[R, C, output_height, output_width]; \"max\" takes the largest weighted corner of any sample, "
                     "as ONNX Runtime does.")
                .inputs({"x", "rois", "batch_indices"}))
      .infer(infer_roi_align)
      .grad([](const GradContext& c) {
        if (!c.output_grads[0].defined()) return Grads{Tensor(), Tensor(), Tensor()};
        const std::vector<Tensor> ins{c.inputs[0], c.inputs[1], c.inputs[2], c.output_grads[0]};
        return Grads{ops::call1("roi_align_grad"_op, ins, c.attrs), Tensor(), Tensor()};
      });
  roi_attrs(r.def("roi_align_grad"_op)
                .doc("Input gradient of roi_align (same attributes): x, rois, batch_indices, dy -> dx (the rois get "
                     "none, as in torchvision).")
                .inputs({"x", "rois", "batch_indices", "dy"}))
      .infer(infer_roi_align_grad);

  r.def("einsum"_op)
      .doc(
          "numpy.einsum over the inputs by `equation` (\"ij,jk->ik\", \"...\" dims broadcast, implicit outputs). "
          "Decomposed into transpose, reshape, matmul and reduce_sum (diagonals by a strided slice).")
      .variadic_inputs("inputs", 1)
      .attr("equation", K::str)
      .dtypes(dtypes::floating)
      .traits(TraitSet(), FusionKind::opaque, AmpPolicy::low)
      .infer(infer_einsum)
      .decompose(decompose_einsum)
      .grad(einsum_grad);
}

namespace ops {
Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, const std::string& reduction) {
  const Tensor in[] = {x, indices, updates};
  return call1("scatter_nd"_op, in, {{"reduction", reduction}});
}
Tensor gather_nd(const Tensor& x, const Tensor& indices, int64_t batch_dims) {
  const Tensor in[] = {x, indices};
  return call1("gather_nd"_op, in, {{"batch_dims", batch_dims}});
}
Tensor grid_sample(const Tensor& x, const Tensor& grid, const std::string& mode, const std::string& padding_mode,
                   bool align_corners) {
  const Tensor in[] = {x, grid};
  return call1("grid_sample"_op, in,
               {{"mode", mode}, {"padding_mode", padding_mode}, {"align_corners", align_corners}});
}
Tensor roi_align(const Tensor& x, const Tensor& rois, const Tensor& batch_indices, int64_t output_height,
                 int64_t output_width, int64_t sampling_ratio, double spatial_scale, const std::string& mode,
                 const std::string& coordinate_transformation_mode) {
  const Tensor in[] = {x, rois, batch_indices};
  return call1("roi_align"_op, in,
               {{"output_height", output_height},
                {"output_width", output_width},
                {"sampling_ratio", sampling_ratio},
                {"spatial_scale", spatial_scale},
                {"mode", mode},
                {"coordinate_transformation_mode", coordinate_transformation_mode}});
}
Tensor einsum(const std::string& equation, const std::vector<Tensor>& inputs) {
  return call1("einsum"_op, inputs, {{"equation", equation}});
}
}  // namespace ops

}  // namespace spore
