// The LLM ops (ops/llm_ops.h): schemas, shape inference, cost; ids in ir/op_list.inc like every op.
#include "ops/llm_ops.h"

#include <algorithm>
#include <cmath>

#include "ops/autocast.h"
#include "ops/dispatch.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {

namespace llm_ops {

std::optional<WeightFormat> parse_format(std::string_view s) {
  if (s == "f32") return WeightFormat::f32;
  if (s == "f16") return WeightFormat::f16;
  if (s == "bf16") return WeightFormat::bf16;
  if (s == "q8_0") return WeightFormat::q8_0;
  if (s == "q4_0") return WeightFormat::q4_0;
  return std::nullopt;
}

WeightFormat format_of(const Attrs& a) {
  const std::string& s = a.s("format");
  auto f = parse_format(s);
  SPORE_CHECK(f.has_value(), ErrorCode::invalid_argument, "format '{}' is not one of f32, f16, bf16, q8_0, q4_0", s);
  return *f;
}

std::string_view format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::f32: return "f32";
    case WeightFormat::f16: return "f16";
    case WeightFormat::bf16: return "bf16";
    case WeightFormat::q8_0: return "q8_0";
    case WeightFormat::q4_0: return "q4_0";
  }
  return "?";
}

int64_t row_bytes(WeightFormat f, int64_t k) {
  switch (f) {
    case WeightFormat::f32: return 4 * k;
    case WeightFormat::f16:
    case WeightFormat::bf16: return 2 * k;
    case WeightFormat::q8_0: return k / qk * q8_0_block_bytes;
    case WeightFormat::q4_0: return k / qk * q4_0_block_bytes;
  }
  return 0;
}

DType weight_dtype(WeightFormat f) {
  switch (f) {
    case WeightFormat::f32: return DType::f32;
    case WeightFormat::f16: return DType::f16;
    case WeightFormat::bf16: return DType::bf16;
    default: return DType::u8;
  }
}

std::optional<int64_t> row_values(WeightFormat f, int64_t bytes) {
  switch (f) {
    case WeightFormat::q8_0:
      if (bytes % q8_0_block_bytes) return std::nullopt;
      return bytes / q8_0_block_bytes * qk;
    case WeightFormat::q4_0:
      if (bytes % q4_0_block_bytes) return std::nullopt;
      return bytes / q4_0_block_bytes * qk;
    default: return bytes;  // typed weights: the last dim is K already
  }
}

}  // namespace llm_ops

namespace {
using infer::dims_compatible;
using infer::dims_str;
using llm_ops::WeightFormat;

WeightFormat format_attr(const InferContext& c) {
  const std::string& s = c.attrs.s("format");
  auto f = llm_ops::parse_format(s);
  c.check(f.has_value(), ErrorCode::invalid_argument, "format '{}' is not one of f32, f16, bf16, q8_0, q4_0", s);
  return *f;
}

// K of a weight [rows, row] in format f, checked; symbolic row dims are not allowed (weights are constants).
int64_t weight_k(const InferContext& c, int w_index, WeightFormat f) {
  const TensorType& w = c.in(w_index);
  if (!(w.dims.size() == 2)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("weight must be 2-D [rows, row], got {}", dims_str(w.dims)));
  if (!(w.dtype == llm_ops::weight_dtype(f))) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("format {} needs a {} weight, got {}", llm_ops::format_name(f),
                                                  dtype_name(llm_ops::weight_dtype(f)), dtype_name(w.dtype)));
  if (!(w.dims[1].is_static())) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("weight row size must be static, got {}", dims_str(w.dims)));
  auto k = llm_ops::row_values(f, w.dims[1].size);
  if (!(k.has_value())) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("format {}: a weight row of {} bytes is not a whole number of blocks",
                                                  llm_ops::format_name(f), w.dims[1].size));
  return *k;
}

std::vector<TensorType> infer_linear_blockq(const InferContext& c) {
  const WeightFormat f = format_attr(c);
  const TensorType& x = c.in(0);
  if (!(x.dtype == DType::f32)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("x must be f32, got {}", dtype_name(x.dtype)));
  c.check(!x.dims.empty(), ErrorCode::shape_mismatch, "x must be [..., K], got a scalar");
  const int64_t k = weight_k(c, 1, f);
  if (!(dims_compatible(x.dims.back(), Dim(k)))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("x {} has K={} but the {} weight {} holds rows of {} values", dims_str(x.dims),
                       x.dims.back().str(), llm_ops::format_name(f), dims_str(c.in(1).dims), k));
  const Dim n = c.in(1).dims[0];
  if (c.num_inputs() > 2) {
    const TensorType& b = c.in(2);
    if (!(b.dtype == DType::f32 && b.dims.size() == 1 && dims_compatible(b.dims[0], n))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("bias must be f32 [{}], got {} {}", n.str(), dtype_name(b.dtype), dims_str(b.dims)));
  }
  std::vector<Dim> out(x.dims.begin(), x.dims.end() - 1);
  out.push_back(n);
  return {TensorType(DType::f32, out)};
}

// linear_blockq_multi: x, w_0..w_{count-1}, then optionally bias_0..bias_{count-1} -> y_i [..., N_i]. Every weight
// must take x's K; the outputs are what linear_blockq(x, w_i, bias_i) gives, bit for bit.
std::vector<TensorType> infer_linear_blockq_multi(const InferContext& c) {
  const WeightFormat f = format_attr(c);
  const int64_t count = c.attrs.i("count");
  c.check(count >= 1 && count <= llm_ops::max_multi_weights, ErrorCode::invalid_argument,
          "count must be 1 to {}, got {}", llm_ops::max_multi_weights, count);
  const int n_in = c.num_inputs();
  c.check(n_in == 1 + count || n_in == 1 + 2 * count, ErrorCode::invalid_argument,
          "count {} needs {} inputs (x and the weights) or {} (and a bias each), got {}", count, 1 + count,
          1 + 2 * count, n_in);
  const TensorType& x = c.in(0);
  if (!(x.dtype == DType::f32)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("x must be f32, got {}", dtype_name(x.dtype)));
  c.check(!x.dims.empty(), ErrorCode::shape_mismatch, "x must be [..., K], got a scalar");
  const std::string& epi = c.attrs.s("epilogue");
  c.check(epi.empty() || epi == "silu_mul", ErrorCode::invalid_argument, "epilogue '{}' is not one of '', silu_mul", epi);
  c.check(epi.empty() || count == 2, ErrorCode::invalid_argument, "epilogue silu_mul needs count 2 (gate, up), got {}",
          count);
  std::vector<TensorType> outs;
  for (int i = 0; i < count; ++i) {
    const int64_t k = weight_k(c, 1 + i, f);
    if (!(dims_compatible(x.dims.back(), Dim(k)))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("x {} has K={} but {} weight {} (input {}) holds rows of {} values", dims_str(x.dims),
                         x.dims.back().str(), llm_ops::format_name(f), dims_str(c.in(1 + i).dims), 1 + i, k));
    const Dim n = c.in(1 + i).dims[0];
    if (n_in > 1 + count) {
      const TensorType& b = c.in(static_cast<int>(1 + count + i));
      if (!(b.dtype == DType::f32 && b.dims.size() == 1 && dims_compatible(b.dims[0], n))) [[unlikely]]
        c.fail(ErrorCode::shape_mismatch,
               fmt::format("bias {} must be f32 [{}], got {} {}", i, n.str(), dtype_name(b.dtype), dims_str(b.dims)));
    }
    std::vector<Dim> out(x.dims.begin(), x.dims.end() - 1);
    out.push_back(n);
    outs.emplace_back(DType::f32, out);
  }
  if (!epi.empty()) {
    if (!(outs[0].dims.back() == outs[1].dims.back())) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("epilogue silu_mul needs gate and up of one size, got {} and {} rows",
                         outs[0].dims.back().str(), outs[1].dims.back().str()));
    outs.resize(1);
  }
  return outs;
}

OpCost linear_blockq_cost(std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs& attrs) {
  OpCost c;
  for (const auto& t : ins) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  for (const auto& t : outs) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  // 2 * rows * K per weight row: from the weights, since the silu_mul epilogue's one output stands for two of them.
  const auto& xd = ins[0].dims;
  if (!xd.empty() && xd.back().is_static() && xd.back().size > 0 && ins[0].numel() > 0) {
    const double rows = static_cast<double>(ins[0].numel() / xd.back().size);
    const size_t count = attrs.has("count") ? static_cast<size_t>(attrs.i("count")) : 1;
    for (size_t i = 1; i <= count && i < ins.size(); ++i)
      if (!ins[i].dims.empty() && ins[i].dims[0].is_static())
        c.flops += 2.0 * rows * static_cast<double>(xd.back().size) * static_cast<double>(ins[i].dims[0].size);
  }
  return c;
}

std::vector<TensorType> infer_embed_blockq(const InferContext& c) {
  const WeightFormat f = format_attr(c);
  const int64_t k = weight_k(c, 0, f);
  const TensorType& ids = c.in(1);
  if (!(ids.dtype == DType::i64 || ids.dtype == DType::i32)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("ids must be i64 or i32, got {}", dtype_name(ids.dtype)));
  std::vector<Dim> out = ids.dims;
  out.push_back(k);
  return {TensorType(DType::f32, out)};
}

std::vector<TensorType> infer_rope(const InferContext& c) {
  const TensorType& x = c.in(0);
  const TensorType& p = c.in(1);
  if (!(x.dtype == DType::f32)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("x must be f32, got {}", dtype_name(x.dtype)));
  if (!(x.dims.size() == 3)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("x must be [T, heads, head_dim], got {}", dims_str(x.dims)));
  if (!(p.dtype == DType::i64 && p.dims.size() == 1 && dims_compatible(p.dims[0], x.dims[0]))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("positions must be i64 [{}], got {} {}", x.dims[0].str(),
                                                  dtype_name(p.dtype), dims_str(p.dims)));
  const double theta = c.attrs.f("theta");
  c.check(std::isfinite(theta) && theta > 0, ErrorCode::invalid_argument, "theta must be > 0, got {}", theta);
  const double fs = c.attrs.f("freq_scale");
  c.check(std::isfinite(fs) && fs > 0, ErrorCode::invalid_argument, "freq_scale must be > 0, got {}", fs);
  const int64_t dim = c.attrs.i("dim");
  if (!(x.dims[2].is_static())) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("head_dim must be static, got {}", dims_str(x.dims)));
  const int64_t d = x.dims[2].size;
  const int64_t rd = dim == 0 ? d : dim;
  c.check(rd > 0 && rd <= d && rd % 2 == 0, ErrorCode::invalid_argument,
          "dim {} must be even and in (0, head_dim={}] (0 = head_dim)", dim, d);
  if (c.num_inputs() > 2) {
    const TensorType& ff = c.in(2);
    if (!(ff.dtype == DType::f32 && ff.dims.size() == 1 && dims_compatible(ff.dims[0], Dim(rd / 2)))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("freq_factors must be f32 [{}], got {} {}", rd / 2, dtype_name(ff.dtype), dims_str(ff.dims)));
  }
  return {x};
}

std::vector<TensorType> infer_attention_kv(const InferContext& c) {
  const auto& q = c.in(0);
  const auto& kc = c.in(1);
  const auto& vc = c.in(2);
  const auto& kn = c.in(3);
  const auto& vn = c.in(4);
  const auto& p = c.in(5);
  const double scale = c.attrs.f("scale");
  c.check(std::isfinite(scale), ErrorCode::invalid_argument, "scale must be finite, got {}", scale);
  if (!(q.dtype == DType::f32 && kn.dtype == DType::f32 && vn.dtype == DType::f32)) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch, fmt::format("q, k_new and v_new must be f32, got {}, {}, {}", dtype_name(q.dtype),
                                                  dtype_name(kn.dtype), dtype_name(vn.dtype)));
  if (!(kc.dtype == vc.dtype && (kc.dtype == DType::f32 || kc.dtype == DType::f16 || kc.dtype == DType::bf16 ||
                                 kc.dtype == DType::i8))) [[unlikely]]
    c.fail(ErrorCode::dtype_mismatch,
           fmt::format("k_cache and v_cache must share a dtype of f32, f16, bf16 or i8, got {} and {}",
                       dtype_name(kc.dtype), dtype_name(vc.dtype)));
  // A pooled cache [S, Hkv, C, D] (one [Hkv, C, D] cache per sequence slot) comes with `slots` i64 [T], the last
  // input; a single cache [Hkv, C, D] without it.
  if (!(kc.dims.size() == 3 || kc.dims.size() == 4)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch,
           fmt::format("k_cache must be [kv_heads, ctx, head_dim] or, pooled, [slots, kv_heads, ctx, head_dim], got {}",
                       dims_str(kc.dims)));
  const bool pooled = kc.dims.size() == 4;
  const size_t lead = pooled ? 1 : 0;  // dims before [Hkv, C, D]
  const int n_extra = c.num_inputs() - 6 - (pooled ? 1 : 0);  // row scales
  // Row scales: exactly with an i8 cache, f32 [(S,) Hkv, C] like the cache's leading dims.
  const bool i8 = kc.dtype == DType::i8;
  if (!(i8 || n_extra == 0)) [[unlikely]]
    c.fail(ErrorCode::invalid_argument,
           fmt::format("k_scale / v_scale are only for an i8 cache, but the cache is {}", dtype_name(kc.dtype)));
  c.check(!i8 || n_extra == 2, ErrorCode::invalid_argument,
          "an i8 cache needs k_scale and v_scale f32 [{}kv_heads, ctx], got {} of them", pooled ? "slots, " : "",
          n_extra);
  if (i8)
    for (int i = 6; i < 8; ++i) {
      const TensorType& s = c.in(i);
      bool ok = s.dtype == DType::f32 && s.dims.size() == lead + 2;
      for (size_t e = 0; ok && e < lead + 2; ++e) ok = dims_compatible(s.dims[e], kc.dims[e]);
      std::string want;
      for (size_t e = 0; e < lead + 2; ++e) want += (e ? ", " : "") + kc.dims[e].str();
      if (!(ok)) [[unlikely]]
        c.fail(ErrorCode::shape_mismatch, fmt::format("{} must be f32 [{}] ({}kv_heads, ctx of the cache), got {} {}",
                                                      i == 6 ? "k_scale" : "v_scale", want, pooled ? "slots, " : "",
                                                      dtype_name(s.dtype), dims_str(s.dims)));
    }
  if (!(q.dims.size() == 3)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("q must be [T, heads, head_dim], got {}", dims_str(q.dims)));
  if (!(vc.dims.size() == kc.dims.size())) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("k_cache and v_cache must have the same rank, got {} and {}",
                                                  dims_str(kc.dims), dims_str(vc.dims)));
  if (!(kn.dims.size() == 3 && vn.dims.size() == 3)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("k_new and v_new must be [T, kv_heads, head_dim], got {} and {}",
                                                  dims_str(kn.dims), dims_str(vn.dims)));
  bool ok = true;
  for (size_t i = 0; i < kc.dims.size(); ++i) ok = ok && dims_compatible(kc.dims[i], vc.dims[i]);
  for (int i = 0; i < 3; ++i) ok = ok && dims_compatible(kn.dims[i], vn.dims[i]);
  const Dim& hkv = kc.dims[lead];
  ok = ok && dims_compatible(kn.dims[0], q.dims[0]) && dims_compatible(kn.dims[1], hkv) &&
       dims_compatible(kn.dims[2], q.dims[2]) && dims_compatible(kc.dims[lead + 2], q.dims[2]);
  if (!(ok)) [[unlikely]]
    c.fail(
        ErrorCode::shape_mismatch,
        fmt::format(
            "shapes disagree: q {} [T, Hq, D], k_cache {} / v_cache {} [{}Hkv, C, D], k_new {} / v_new {} [T, Hkv, D]",
            dims_str(q.dims), dims_str(kc.dims), dims_str(vc.dims), pooled ? "S, " : "", dims_str(kn.dims),
            dims_str(vn.dims)));
  if (q.dims[1].is_static() && hkv.is_static())
    c.check(hkv.size > 0 && q.dims[1].size % hkv.size == 0, ErrorCode::shape_mismatch,
            "q heads {} must be a multiple of kv heads {}", q.dims[1].size, hkv.size);
  if (!(p.dtype == DType::i64 && p.dims.size() == 1 && dims_compatible(p.dims[0], q.dims[0]))) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("positions must be i64 [{}], got {} {}", q.dims[0].str(),
                                                  dtype_name(p.dtype), dims_str(p.dims)));
  if (pooled) {
    const TensorType& sl = c.in(c.num_inputs() - 1);
    if (!(sl.dtype == DType::i64 && sl.dims.size() == 1 && dims_compatible(sl.dims[0], q.dims[0]))) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch,
             fmt::format("slots (with a pooled cache, the last input) must be i64 [{}], got {} {}", q.dims[0].str(),
                         dtype_name(sl.dtype), dims_str(sl.dims)));
  }
  return {q};
}

OpCost attention_kv_cost(std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs&) {
  OpCost c;
  for (const auto& t : ins) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  for (const auto& t : outs) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  // Upper bound: every query over the whole cache (the real work depends on the positions at run time).
  if (ins[0].is_static() && ins[1].is_static()) {
    const auto q = ins[0].shape();
    const auto kc = ins[1].shape();
    c.flops = 4.0 * static_cast<double>(q[0] * q[1] * q[2]) * static_cast<double>(kc[kc.size() - 2]);
  }
  return c;
}

// The adjoint of a rotation is the rotation by minus the angle, and F R(a) F = R(-a) where F negates the second
// element of each rotated pair. So dx = F rope(F dy): the same kernel at the same positions, exact (multiplying by
// +-1 rounds nothing). positions and freq_factors get no gradient.
std::vector<Tensor> rope_grad(const GradContext& g) {
  std::vector<Tensor> out(g.inputs.size());
  const Tensor& dy = g.output_grads[0];
  if (!dy.defined() || !g.wants(0)) return out;
  const int64_t d = g.inputs[0].shape()[2];
  const int64_t rd = g.attrs.i("dim") == 0 ? d : g.attrs.i("dim");
  const bool neox = g.attrs.s("mode") == "neox";
  std::vector<double> sign(static_cast<size_t>(d), 1.0);
  for (int64_t e = 0; e < rd; ++e)
    if (neox ? e >= rd / 2 : (e & 1) != 0) sign[static_cast<size_t>(e)] = -1.0;
  const Tensor f = Tensor::from_doubles(sign, {d}, DType::f32);
  // rope is f32 and autocast leaves it alone; so does its rule (under O2 the sign flips would run in the low dtype).
  const ops::AutocastScope f32_only(ops::AmpLevel::O0, DType::bf16);
  std::vector<Tensor> ins(g.inputs.begin(), g.inputs.end());
  ins[0] = ops::mul(dy.dtype() == DType::f32 ? dy : ops::cast(dy, DType::f32), f);
  out[0] = ops::mul(ops::call1("rope"_op, ins, g.attrs), f);
  return out;
}

}  // namespace

void register_llm_ops(OpRegistry& r) {
  r.def("linear_blockq"_op)
      .doc("y = x @ w^T (+ bias) with w in a block format (f32, f16, bf16, q8_0, q4_0; ops/llm_ops.h); batch "
           "invariant: each y element is summed in one fixed order")
      .inputs({"x", "w", "bias?"})
      .attr("format", AttrKind::str, std::string("f32"))
      .dtypes(DTypeSet{DType::f32})
      .traits(TraitSet{Trait::no_grad}, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_linear_blockq)
      .cost(linear_blockq_cost);
  r.def("linear_blockq_multi"_op)
      .doc("y_i = x @ w_i^T (+ bias_i) for `count` weights sharing x (inputs x, w_0..w_{count-1}, then optionally "
           "bias_0..bias_{count-1}): what linear_blockq gives for each, bit for bit, in one kernel (activations "
           "prepared once, one parallel region); epilogue silu_mul (count 2): one output silu(y_0) * y_1, what "
           "mul(silu(y_0), y_1) gives, bit for bit; made by the group_linear_blockq pass")
      .variadic_inputs("x", 2)
      .attr("format", AttrKind::str, std::string("f32"))
      .attr("count", AttrKind::i64)
      .attr("epilogue", AttrKind::str, std::string())
      .dtypes(DTypeSet{DType::f32})
      .traits(TraitSet{Trait::no_grad}, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_linear_blockq_multi)
      .cost(linear_blockq_cost);
  r.def("embed_blockq"_op)
      .doc("rows of a weight table in a block format, as f32: w [V, row], ids [...] -> [..., K]")
      .inputs({"w", "ids"})
      .attr("format", AttrKind::str, std::string("f32"))
      .dtypes(DTypeSet{DType::f32, DType::f16, DType::bf16, DType::u8})
      .traits(TraitSet{Trait::no_grad}, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_embed_blockq);
  r.def("rope"_op)
      .doc(
          "rotary position embedding of x [T, H, D] at positions [T]; mode normal (pairs 2i, 2i+1) or neox "
          "(pairs i, i + dim/2)")
      .inputs({"x", "positions", "freq_factors?"})
      .attr("theta", AttrKind::f64, 10000.0)
      .choice("mode", {"normal", "neox"})
      .attr("dim", AttrKind::i64, int64_t{0})
      .attr("freq_scale", AttrKind::f64, 1.0)
      .dtypes(DTypeSet{DType::f32})
      .traits(TraitSet{}, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_rope)
      .grad(rope_grad);
  r.def("attention_kv"_op)
      .doc("causal GQA attention of q [T, Hq, D] over a KV cache [Hkv, C, D] (rows before positions[0]) and the "
           "new rows k_new/v_new [T, Hkv, D]; an i8 cache comes with row scales k_scale/v_scale [Hkv, C]; the cache "
           "is read, not written. Pooled: caches [S, Hkv, C, D] (scales [S, Hkv, C]) and slots i64 [T] as the last "
           "input; each run of tokens with the same slot is one sequence (consecutive positions), slot -1 a padding "
           "row (output 0)")
      .inputs({"q", "k_cache", "v_cache", "k_new", "v_new", "positions", "k_scale?", "v_scale?", "slots?"})
      .attr("scale", AttrKind::f64, 1.0)
      .dtypes(DTypeSet{DType::f32})
      .traits(TraitSet{Trait::no_grad}, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_attention_kv)
      .cost(attention_kv_cost);
}

namespace llm_ops {

std::vector<AttentionRun> attention_runs(const int64_t* positions, const int64_t* slots, int64_t t_n,
                                         int64_t n_slots, int64_t ctx) {
  std::vector<AttentionRun> runs;
  std::vector<char> seen(static_cast<size_t>(std::max<int64_t>(n_slots, 0)), 0);
  for (int64_t t = 0; t < t_n;) {
    const int64_t slot = slots ? slots[t] : 0;
    SPORE_CHECK(slot >= -1 && slot < n_slots, ErrorCode::invalid_argument,
                "attention_kv: slots[{}] = {} is outside the pool of {} slots (-1 marks padding)", t, slot, n_slots);
    int64_t end = t + 1;
    while (end < t_n && (slots ? slots[end] : 0) == slot) ++end;
    AttentionRun r{slot, positions[t], t, end - t};
    if (slot >= 0) {
      SPORE_CHECK(!seen[static_cast<size_t>(slot)], ErrorCode::invalid_argument,
                  "attention_kv: slot {} appears in two separate runs of tokens (again at token {})", slot, t);
      seen[static_cast<size_t>(slot)] = 1;
      SPORE_CHECK(r.p0 >= 0 && r.p0 <= ctx, ErrorCode::invalid_argument,
                  "attention_kv: positions[{}] = {} is outside the cache of {} rows", t, r.p0, ctx);
      for (int64_t u = t + 1; u < end; ++u)
        SPORE_CHECK(positions[u] == r.p0 + (u - t), ErrorCode::invalid_argument,
                    "attention_kv: positions must be consecutive within a sequence: positions[{}] = {} but "
                    "positions[{}] = {}", u, positions[u], t, r.p0);
      SPORE_CHECK(r.p0 + r.count <= ctx, ErrorCode::invalid_argument,
                  "attention_kv: positions {}..{} run past the cache of {} rows, where the new keys could not be "
                  "stored", r.p0, r.p0 + r.count - 1, ctx);
    }
    runs.push_back(r);
    t = end;
  }
  return runs;
}

}  // namespace llm_ops

namespace ops {

Tensor linear_blockq(const Tensor& x, const Tensor& w, std::string_view format, const std::optional<Tensor>& bias) {
  Attrs a{{"format", std::string(format)}};
  if (bias) return call1("linear_blockq"_op, std::vector<Tensor>{x, w, *bias}, a);
  return call1("linear_blockq"_op, std::vector<Tensor>{x, w}, a);
}

std::vector<Tensor> linear_blockq_multi(const Tensor& x, const std::vector<Tensor>& ws, std::string_view format,
                                        const std::vector<Tensor>& biases, std::string_view epilogue) {
  Attrs a{{"format", std::string(format)}, {"count", static_cast<int64_t>(ws.size())},
          {"epilogue", std::string(epilogue)}};
  std::vector<Tensor> ins{x};
  ins.insert(ins.end(), ws.begin(), ws.end());
  ins.insert(ins.end(), biases.begin(), biases.end());
  return call("linear_blockq_multi"_op, ins, a);
}

Tensor embed_blockq(const Tensor& w, const Tensor& ids, std::string_view format) {
  return call1("embed_blockq"_op, std::vector<Tensor>{w, ids}, Attrs{{"format", std::string(format)}});
}

Tensor rope(const Tensor& x, const Tensor& positions, double theta, std::string_view mode, int64_t dim,
            double freq_scale, const std::optional<Tensor>& freq_factors) {
  Attrs a{{"theta", theta}, {"mode", std::string(mode)}, {"dim", dim}, {"freq_scale", freq_scale}};
  if (freq_factors) return call1("rope"_op, std::vector<Tensor>{x, positions, *freq_factors}, a);
  return call1("rope"_op, std::vector<Tensor>{x, positions}, a);
}

Tensor attention_kv(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& k_new,
                    const Tensor& v_new, const Tensor& positions, double scale, const std::optional<Tensor>& k_scale,
                    const std::optional<Tensor>& v_scale, const std::optional<Tensor>& slots) {
  std::vector<Tensor> in{q, k_cache, v_cache, k_new, v_new, positions};
  SPORE_CHECK(k_scale.has_value() == v_scale.has_value(), ErrorCode::invalid_argument,
              "attention_kv: give both k_scale and v_scale or neither (got only {})", k_scale ? "k_scale" : "v_scale");
  if (k_scale) {
    in.push_back(*k_scale);
    in.push_back(*v_scale);
  }
  if (slots) in.push_back(*slots);
  return call1("attention_kv"_op, in, Attrs{{"scale", scale}});
}

}  // namespace ops
}  // namespace spore
