// CPU kernels of the quantization family.
// quantize_linear: Highway vectors (elementwise_simd.h quantize_f32), dequantize_linear: loops; chunk boundaries
// depend only on the size.
// qconv2d / qlinear: oneDNN int8 convolution / matmul (src u8|s8, weights s8, s32 accumulation, f32 dst) with
// the per-output-channel scales x_scale * w_scale[o] as output scales and the activation zero point as a src
// zero point; the bias is added afterwards in our own loop (y = acc * scale + bias, the reference's formula,
// whatever oneDNN's order of bias and scaling). Primitives are cached per geometry, scales and zero point.
// Integer accumulation is exact, so the result does not depend on how oneDNN splits work across threads.
// qconv2d with few input channels runs the f32 conv on integer values, which is exact there (use_exact_f32).
// Geometries oneDNN declines, and inputs its kernels would saturate on (see onednn_exact), run int32 loops.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "backend/cpu/constant_cache.h"
#include "backend/cpu/elementwise_simd.h"
#include "backend/cpu/families.h"
#include "backend/cpu/onednn_util.h"
#include "backend/cpu/transpose8.h"
#include "base/thread_pool.h"

namespace spore::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

constexpr int64_t quant_grain = 1 << 15;

// Per-axis parameter index of element i: (i / inner) % channels; per-tensor: channels == 1.
struct ParamIndex {
  int64_t inner = 1, channels = 1;
};
ParamIndex param_index(const Tensor& x, const Tensor& scale, int64_t axis) {
  ParamIndex p;
  if (scale.numel() <= 1 || x.rank() == 0) return p;
  if (axis < 0) axis += x.rank();
  p.channels = x.dim(static_cast<int>(axis));
  for (int i = static_cast<int>(axis) + 1; i < x.rank(); ++i) p.inner *= x.dim(i);
  return p;
}

// The zero point as int32 (0 when absent), entry c.
int32_t zero_point_at(const KernelContext& k, int input, int64_t c) {
  if (k.num_inputs() <= input) return 0;
  const Tensor& z = k.in(input);
  switch (z.dtype()) {
    case DType::u8: return z.data<uint8_t>()[c];
    case DType::i8: return z.data<int8_t>()[c];
    case DType::i32: return z.data<int32_t>()[c];
    default: SPORE_FAIL(ErrorCode::dtype_mismatch, "[{}] unsupported zero point dtype {}", op_name(k.op), dtype_name(z.dtype()));
  }
}

template <typename Q>
void quantize_loop(KernelContext& k, const ParamIndex& pi) {
  constexpr float lo = std::is_same_v<Q, uint8_t> ? 0.0f : -128.0f, hi = std::is_same_v<Q, uint8_t> ? 255.0f : 127.0f;
  const float* x = k.in(0).data<float>();
  const float* s = k.in(1).data<float>();
  Q* y = k.out(0).data<Q>();
  const int64_t n = k.in(0).numel();
  std::vector<float> zps(static_cast<size_t>(pi.channels));
  for (int64_t c = 0; c < pi.channels; ++c) zps[c] = static_cast<float>(zero_point_at(k, 2, c));
  if (pi.channels == 1) {
    parallel_for(num_chunks(n, quant_grain), [&](int64_t chunk) {
      const int64_t b = chunk * quant_grain, e = std::min(n, b + quant_grain);
      quantize_f32(x + b, y + b, static_cast<size_t>(e - b), s[0], zps[0], lo, hi);
    });
    return;
  }
  // Per axis: one task per run of `inner` elements sharing a channel (rows of a [.., C, inner] view).
  const int64_t rows = pi.inner ? n / pi.inner : 0;
  const int64_t per_task = std::max<int64_t>(1, quant_grain / std::max<int64_t>(pi.inner, 1));
  parallel_for(num_chunks(rows, per_task), [&](int64_t t) {
    for (int64_t r = t * per_task; r < std::min(rows, (t + 1) * per_task); ++r) {
      const int64_t c = r % pi.channels;
      quantize_f32(x + r * pi.inner, y + r * pi.inner, static_cast<size_t>(pi.inner), s[c], zps[c], lo, hi);
    }
  });
}

void quantize_kernel(KernelContext& k) {
  const ParamIndex pi = param_index(k.in(0), k.in(1), k.attrs.i("axis"));
  if (k.out(0).dtype() == DType::u8)
    quantize_loop<uint8_t>(k, pi);
  else
    quantize_loop<int8_t>(k, pi);
}

template <typename Q>
void dequantize_loop(KernelContext& k, const ParamIndex& pi) {
  const Q* q = k.in(0).data<Q>();
  const float* s = k.in(1).data<float>();
  float* y = k.out(0).data<float>();
  const int64_t n = k.in(0).numel();
  std::vector<int32_t> zps(static_cast<size_t>(pi.channels));
  for (int64_t c = 0; c < pi.channels; ++c) zps[c] = zero_point_at(k, 2, c);
  parallel_for(num_chunks(n, quant_grain), [&](int64_t chunk) {
    const int64_t b = chunk * quant_grain, e = std::min(n, b + quant_grain);
    for (int64_t i = b; i < e; ++i) {
      const int64_t c = pi.channels == 1 ? 0 : (i / pi.inner) % pi.channels;
      // (q - zp) in 64 bits: i32 inputs may overflow int32.
      y[i] = static_cast<float>(static_cast<int64_t>(q[i]) - zps[c]) * s[c];
    }
  });
}

void dequantize_kernel(KernelContext& k) {
  const ParamIndex pi = param_index(k.in(0), k.in(1), k.attrs.i("axis"));
  switch (k.in(0).dtype()) {
    case DType::u8: return dequantize_loop<uint8_t>(k, pi);
    case DType::i8: return dequantize_loop<int8_t>(k, pi);
    default: return dequantize_loop<int32_t>(k, pi);
  }
}

// ---- int8 compute ops

// Output scales x_scale * w_scale[o] (f32 products), one per output channel or one in all.
std::vector<float> output_scales(const KernelContext& k) {
  const float xs = k.in(1).data<float>()[0];
  const Tensor& ws = k.in(4);
  std::vector<float> s(static_cast<size_t>(ws.numel()));
  for (int64_t i = 0; i < ws.numel(); ++i) s[i] = xs * ws.data<float>()[i];
  return s;
}

std::string bytes_key(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Without VNNI, oneDNN's int8 kernels multiply u8 x s8 pairs with vpmaddubsw, whose int16 sum of two products
// saturates (s8 sources are first shifted to u8 by +128). Its result is exact only when every pair fits:
// |w| <= 64 with any source, or u8 sources <= 127 (the 7-bit activations quantize_static_int8 emits).
// Other inputs run the int32 loops.
bool has_vnni() {
  static const bool yes = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    return (isa & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni ||
           (isa & dnnl_cpu_isa_avx2_vnni) == dnnl_cpu_isa_avx2_vnni;
  }();
  return yes;
}

bool onednn_exact(const Tensor& x, const Tensor& w) {
  if (has_vnni()) return true;
  const int8_t* wp = w.data<int8_t>();
  const int64_t nw = w.numel(), nx = x.numel();
  int wmax = 0;
  for (int64_t i = 0; i < nw; ++i) wmax = std::max(wmax, std::abs(static_cast<int>(wp[i])));
  if (wmax <= 64) return true;
  if (x.dtype() != DType::u8) return false;
  const uint8_t* xp = x.data<uint8_t>();
  uint8_t xmax = 0;
  for (int64_t i = 0; i < nx; ++i) xmax = std::max(xmax, xp[i]);
  return xmax <= 127;
}

dnnl::primitive_attr int8_attr(const std::vector<float>& scales, int32_t zp, int channel_mask) {
  dnnl::primitive_attr a;
  a.set_output_scales(scales.size() > 1 ? channel_mask : 0, scales);
  if (zp != 0) a.set_zero_points(DNNL_ARG_SRC, 0, {zp});
  return a;
}

struct AxisPad {
  int64_t begin, end;
};
AxisPad axis_pad(const Attrs& a, int i, int64_t in, int64_t eff, int64_t stride) {
  const std::string& mode = a.s("pad_mode");
  if (mode == "valid") return {0, 0};
  if (mode == "same") {  // SAME_UPPER, as conv2d's inference
    const int64_t out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride + eff - in);
    return {total / 2, total - total / 2};
  }
  const auto& p = a.ints("padding");
  return {p[i], p[2 + i]};
}

struct QConvGeom {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups, sh, sw, dh, dw;
  AxisPad ph, pw;
};

QConvGeom qconv_geom(const KernelContext& k) {
  const Shape &xs = k.in(0).shape(), &ws = k.in(3).shape(), &ys = k.out(0).shape();
  const auto& st = k.attrs.ints("stride");
  const auto& dl = k.attrs.ints("dilation");
  QConvGeom g{xs[0], xs[1], xs[2], xs[3], ys[1], ws[2], ws[3], ys[2], ys[3], k.attrs.i("groups"),
              st[0], st[1], dl[0], dl[1], {}, {}};
  g.ph = axis_pad(k.attrs, 0, g.h, (g.kh - 1) * g.dh + 1, g.sh);
  g.pw = axis_pad(k.attrs, 1, g.w, (g.kw - 1) * g.dw + 1, g.sw);
  return g;
}

// `user` reordered to `want`: kept in the constant cache for a plan constant (owner non-null), else into `buf`.
memory reordered_weights(memory& user, const memory::desc& want, const std::shared_ptr<Storage>& owner, const void* src,
                         std::string_view key, std::shared_ptr<Storage>& kept, std::vector<char>& buf) {
  dnnl::stream& s = dnnl_stream();
  kept = constant_derived(owner, src, key, want.get_size(), [&](void* b) {
    memory dst(want, dnnl_engine(), b);
    dnnl::reorder(user, dst).execute(s, user, dst);
    s.wait();
  });
  if (kept) return memory(want, dnnl_engine(), kept->data());
  memory m = scratch_memory(want, buf);
  dnnl::reorder(user, m).execute(s, user, m);
  return m;
}

struct QConvPrim {
  memory::desc user_src, user_wei, user_dst, src, wei, dst;
  dnnl::primitive prim;
  const char* impl = "onednn";
};

QConvPrim make_qconv_prim(const QConvGeom& g, memory::data_type src_dt, const dnnl::primitive_attr& attr) {
  QConvPrim p;
  const int64_t og = g.o / g.groups, cg = g.c / g.groups;
  p.user_src = memory::desc({g.n, g.c, g.h, g.w}, src_dt, tag::nchw);
  p.user_dst = memory::desc({g.n, g.o, g.oh, g.ow}, memory::data_type::f32, tag::nchw);
  p.user_wei = g.groups == 1 ? memory::desc({og, cg, g.kh, g.kw}, memory::data_type::s8, tag::oihw)
                             : memory::desc({g.groups, og, cg, g.kh, g.kw}, memory::data_type::s8, tag::goihw);
  const memory::desc src_any({g.n, g.c, g.h, g.w}, src_dt, tag::any);
  const memory::desc dst_any({g.n, g.o, g.oh, g.ow}, memory::data_type::f32, tag::any);
  const memory::desc wei_any(p.user_wei.dims(), memory::data_type::s8, tag::any);
  const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                          src_any, wei_any, dst_any, {g.sh, g.sw}, {g.dh - 1, g.dw - 1},
                                          {g.ph.begin, g.pw.begin}, {g.ph.end, g.pw.end});
  const dnnl::convolution_forward::primitive_desc pd(d, attr, dnnl_engine());
  p.impl = onednn_impl_name(pd.impl_info_str());
  p.src = pd.src_desc();
  p.wei = pd.weights_desc();
  p.dst = pd.dst_desc();
  p.prim = dnnl::convolution_forward(pd);
  return p;
}

// y[n, o, p] = src[n, p, o] + bias[o] (bias may be null): oneDNN's nhwc int8 conv output back to NCHW with the bias
// added in the same pass (the values y = acc * scale + bias of a reorder followed by scale_bias, one pass over y
// fewer). 8x8 blocks transposed in AVX2 registers; tasks of 8 channels x 512 pixels of an image.
void nhwc_to_nchw_bias(const float* src, float* y, const float* bias, int64_t n, int64_t o, int64_t hw) {
  constexpr int64_t kPix = 512;
  const int64_t ob = num_chunks(o, 8), pb = num_chunks(hw, kPix);
  parallel_for(n * ob * pb, [&](int64_t t) {
    const int64_t img = t / (ob * pb), o0 = t / pb % ob * 8, p0 = t % pb * kPix;
    const int64_t p1 = std::min(hw, p0 + kPix), oc = std::min<int64_t>(8, o - o0);
    const float* s = src + img * hw * o;
    float* d = y + img * o * hw;
    int64_t p = p0;
    if (oc == 8)
      for (; p + 8 <= p1; p += 8) {
        __m256 c[8];
        for (int k = 0; k < 8; ++k) c[k] = _mm256_loadu_ps(s + (p + k) * o + o0);
        transpose8(c);
        for (int k = 0; k < 8; ++k) {
          const __m256 v = bias ? _mm256_add_ps(c[k], _mm256_set1_ps(bias[o0 + k])) : c[k];
          _mm256_storeu_ps(d + (o0 + k) * hw + p, v);
        }
      }
    for (; p < p1; ++p)
      for (int64_t k = 0; k < oc; ++k) {
        const float v = s[p * o + o0 + k];
        d[(o0 + k) * hw + p] = bias ? v + bias[o0 + k] : v;
      }
  });
}

// w_owner: w's storage when it is a plan constant; its reordered copy (with the compensation) is then kept
// (constant_cache.h) under `key` instead of reordered on every call. Returns whether the bias was added (the nhwc
// output's reorder adds it; otherwise the caller does).
bool exec_qconv(const QConvPrim& p, const Tensor& x, const Tensor& w, const Tensor& y,
                const std::shared_ptr<Storage>& w_owner, std::string_view key, const float* bias) {
  note_kernel_impl(p.impl);
  dnnl::stream& s = dnnl_stream();
  memory xs = user_memory(p.user_src, x), ws = user_memory(p.user_wei, w), ys = user_memory(p.user_dst, y);
  memory xm = xs, wm = ws, ym = ys;
  thread_local std::vector<char> src_buf, wei_buf, dst_buf;
  if (p.src != p.user_src) {
    xm = scratch_memory(p.src, src_buf);
    dnnl::reorder(xs, xm).execute(s, xs, xm);
  }
  std::shared_ptr<Storage> kept;
  if (p.wei != p.user_wei)  // also computes the compensation oneDNN needs for s8 / zero-point sources
    wm = reordered_weights(ws, p.wei, w_owner, w.raw_data(), fmt::format("onednn_qconv_weights:{}", key), kept, wei_buf);
  if (p.dst != p.user_dst) ym = scratch_memory(p.dst, dst_buf);
  p.prim.execute(s, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}});
  const memory::dims& d = p.user_dst.dims();
  if (p.dst != p.user_dst && p.dst == memory::desc(d, memory::data_type::f32, tag::nhwc)) {
    s.wait();
    nhwc_to_nchw_bias(static_cast<const float*>(ym.get_data_handle()), y.data<float>(), bias, d[0], d[1], d[2] * d[3]);
    return true;
  }
  if (p.dst != p.user_dst) dnnl::reorder(ym, ys).execute(s, ym, ys);
  s.wait();
  return false;
}

// Plain loops: one task per output (image, channel) plane, int32 sums; padded taps contribute nothing.
template <typename Q>
void qconv_loops(const QConvGeom& g, const Q* x, int32_t zp, const int8_t* w, const std::vector<float>& scales, float* y) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups;
  parallel_for(g.n * g.o, [&](int64_t plane) {
    const int64_t n = plane / g.o, oc = plane % g.o, grp = oc / og;
    const float sc = scales[scales.size() == 1 ? 0 : oc];
    for (int64_t yy = 0; yy < g.oh; ++yy)
      for (int64_t xx = 0; xx < g.ow; ++xx) {
        int32_t acc = 0;
        for (int64_t ic = 0; ic < cg; ++ic) {
          const Q* in = x + (n * g.c + grp * cg + ic) * g.h * g.w;
          const int8_t* wr = w + (oc * cg + ic) * g.kh * g.kw;
          for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t iy = yy * g.sh - g.ph.begin + i * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t ix = xx * g.sw - g.pw.begin + j * g.dw;
              if (ix >= 0 && ix < g.w) acc += (static_cast<int32_t>(in[iy * g.w + ix]) - zp) * wr[i * g.kw + j];
            }
          }
        }
        y[plane * g.oh * g.ow + yy * g.ow + xx] = static_cast<float>(acc) * sc;
      }
  });
}

// y[r, o, p] = y[r, o, p] * scale[o] + bias[o] (either may be absent).
void scale_bias(float* y, const float* scale, const float* bias, int64_t rows, int64_t o, int64_t plane) {
  const int64_t planes = rows * o;
  const int64_t per_task = std::max<int64_t>(1, quant_grain / std::max<int64_t>(plane, 1));
  parallel_for(num_chunks(planes, per_task), [&](int64_t t) {
    for (int64_t pl = t * per_task; pl < std::min(planes, (t + 1) * per_task); ++pl) {
      const float s = scale ? scale[pl % o] : 1.0f, b = bias ? bias[pl % o] : 0.0f;
      float* p = y + pl * plane;
      for (int64_t i = 0; i < plane; ++i) p[i] = p[i] * s + b;
    }
  });
}

// Few input channels per group (first layers): oneDNN's int8 kernels do poorly there, far slower than the f32
// conv. With K = C/groups*kH*kW <= 514, every partial sum of (x - zp) * w is an integer of magnitude below
// 255*128*K < 2^24, exact in f32 whatever the order, so the f32 conv kernel on the integer values computes the
// int32 result exactly.
bool use_exact_f32(const QConvGeom& g) {
  const int64_t cg = g.c / g.groups;
  return cg <= 4 && cg * g.kh * g.kw <= 514;
}

template <typename Q>
void qconv_via_f32(KernelContext& k, const Q* x, int32_t zp) {
  const KernelInfo* conv = kernel_registry().find(Backend::cpu, "conv2d"_op, DType::f32);
  SPORE_CHECK(conv != nullptr, ErrorCode::internal, "[qconv2d] no f32 conv2d kernel on cpu");
  Tensor xf = Tensor::empty(k.in(0).shape(), DType::f32), wf = Tensor::empty(k.in(3).shape(), DType::f32);
  float* xp = xf.data<float>();
  const int64_t n = xf.numel();
  parallel_for(num_chunks(n, quant_grain), [&](int64_t c) {
    for (int64_t i = c * quant_grain; i < std::min(n, (c + 1) * quant_grain); ++i)
      xp[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zp);
  });
  const int8_t* w = k.in(3).data<int8_t>();
  float* wp = wf.data<float>();
  for (int64_t i = 0, nw = wf.numel(); i < nw; ++i) wp[i] = static_cast<float>(w[i]);
  const Tensor ins[] = {xf, wf};
  KernelContext sub{ins, k.outputs, k.attrs, "conv2d"_op, {}};
  conv->fn(sub);
}

// Without VNNI, oneDNN's s8-source convolutions also halve the weights (rounding them), so s8 sources are
// shifted to u8 here instead: (x - zp) == ((x + 128) - (zp + 128)) exactly.
void qconv2d_kernel(KernelContext& k) {
  if (k.out(0).numel() == 0) return;
  const QConvGeom g = qconv_geom(k);
  Tensor x = k.in(0);
  int32_t zp = zero_point_at(k, 2, 0);
  const std::vector<float> scales = output_scales(k);
  const float* bias = k.num_inputs() > 5 ? k.in(5).data<float>() : nullptr;
  float* y = k.out(0).data<float>();
  if (use_exact_f32(g)) {
    if (x.dtype() == DType::u8)
      qconv_via_f32(k, x.data<uint8_t>(), zp);
    else
      qconv_via_f32(k, x.data<int8_t>(), zp);
    // Per-tensor scales go through the same loop as per-channel ones (one value per channel).
    const std::vector<float> per_channel = scales.size() == 1 ? std::vector<float>(g.o, scales[0]) : scales;
    return scale_bias(y, per_channel.data(), bias, g.n, g.o, g.oh * g.ow);
  }
  if (x.dtype() == DType::i8 && !has_vnni()) {
    Tensor shifted = Tensor::empty(x.shape(), DType::u8);
    const int8_t* src = x.data<int8_t>();
    uint8_t* dst = shifted.data<uint8_t>();
    const int64_t n = x.numel();
    parallel_for(num_chunks(n, quant_grain), [&](int64_t c) {
      for (int64_t i = c * quant_grain; i < std::min(n, (c + 1) * quant_grain); ++i)
        dst[i] = static_cast<uint8_t>(static_cast<int>(src[i]) + 128);
    });
    x = shifted;
    zp += 128;
  }
  const bool u8 = x.dtype() == DType::u8;
  static PrimitiveCache<std::optional<QConvPrim>> cache;
  const std::string key = fmt::format("{}:{},{},{},{},{},{},{},{},{},{}:{},{},{},{}:{},{},{},{}:{}:", u8, g.n, g.c, g.h,
                                      g.w, g.o, g.kh, g.kw, g.oh, g.ow, g.groups, g.sh, g.sw, g.dh, g.dw, g.ph.begin,
                                      g.ph.end, g.pw.begin, g.pw.end, zp) +
                          bytes_key(scales);
  const auto p = !onednn_exact(x, k.in(3)) ? std::nullopt : cache.get(key, [&]() -> std::optional<QConvPrim> {
    try {
      return make_qconv_prim(g, u8 ? memory::data_type::u8 : memory::data_type::s8, int8_attr(scales, zp, 1 << 1));
    } catch (const dnnl::error& e) {
      onednn_declined(e, "conv2d_int8");
      return std::nullopt;  // a geometry or zero point oneDNN does not implement here: the loops handle it
    }
  });
  bool biased = false;
  if (p)
    biased = exec_qconv(*p, x, k.in(3), k.out(0), (k.constant_inputs >> 3) & 1 ? k.in(3).storage() : nullptr, key, bias);
  else if (u8)
    qconv_loops(g, x.data<uint8_t>(), zp, k.in(3).data<int8_t>(), scales, y);
  else
    qconv_loops(g, x.data<int8_t>(), zp, k.in(3).data<int8_t>(), scales, y);
  if (bias && !biased) scale_bias(y, nullptr, bias, g.n, g.o, g.oh * g.ow);
}

struct QMatmulPrim {
  memory::desc src, user_wei, wei, dst;
  dnnl::matmul prim;
};

template <typename Q>
void qlinear_loops(int64_t m, int64_t kk, int64_t n, const Q* x, int32_t zp, const int8_t* w,
                   const std::vector<float>& scales, float* y) {
  parallel_for(m, [&](int64_t r) {
    for (int64_t o = 0; o < n; ++o) {
      int32_t acc = 0;
      for (int64_t p = 0; p < kk; ++p) acc += (static_cast<int32_t>(x[r * kk + p]) - zp) * w[o * kk + p];
      y[r * n + o] = static_cast<float>(acc) * scales[scales.size() == 1 ? 0 : o];
    }
  });
}

// [rows, in] @ w^T: w [out, in] is the matmul's [K, N] weights in "ba" order, reordered to what oneDNN wants.
void qlinear_kernel(KernelContext& k) {
  const int64_t kk = k.in(3).dim(1), n = k.in(3).dim(0);
  const int64_t m = n ? k.out(0).numel() / n : 0;
  if (m == 0 || n == 0) return;
  float* y = k.out(0).data<float>();
  const bool u8 = k.in(0).dtype() == DType::u8;
  const int32_t zp = zero_point_at(k, 2, 0);
  const std::vector<float> scales = output_scales(k);
  if (kk == 0) {
    std::fill(y, y + m * n, 0.0f);
  } else {
    static PrimitiveCache<std::optional<QMatmulPrim>> cache;
    const std::string key = fmt::format("{}:{}x{}x{}:{}:", u8, m, kk, n, zp) + bytes_key(scales);
    const auto p = !onednn_exact(k.in(0), k.in(3)) ? std::nullopt : cache.get(key, [&]() -> std::optional<QMatmulPrim> {
      try {
        QMatmulPrim e;
        e.src = memory::desc({m, kk}, u8 ? memory::data_type::u8 : memory::data_type::s8, tag::ab);
        e.user_wei = memory::desc({kk, n}, memory::data_type::s8, tag::ba);
        e.dst = memory::desc({m, n}, memory::data_type::f32, tag::ab);
        const memory::desc wei_any({kk, n}, memory::data_type::s8, tag::any);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.src, wei_any, e.dst), int8_attr(scales, zp, 1 << 1),
                                              dnnl_engine());
        e.wei = pd.weights_desc();
        e.prim = dnnl::matmul(pd);
        return e;
      } catch (const dnnl::error& e) {
        onednn_declined(e, "matmul_int8");
        return std::nullopt;
      }
    });
    if (p) {
      dnnl::stream& s = dnnl_stream();
      memory ws = user_memory(p->user_wei, k.in(3)), wm = ws;
      thread_local std::vector<char> wei_buf;
      std::shared_ptr<Storage> kept;
      if (p->wei != p->user_wei)
        wm = reordered_weights(ws, p->wei, (k.constant_inputs >> 3) & 1 ? k.in(3).storage() : nullptr,
                               k.in(3).raw_data(), fmt::format("onednn_qlinear_weights:{}", key), kept, wei_buf);
      p->prim.execute(s, {{DNNL_ARG_SRC, user_memory(p->src, k.in(0))},
                          {DNNL_ARG_WEIGHTS, wm},
                          {DNNL_ARG_DST, user_memory(p->dst, k.out(0))}});
      s.wait();
    } else if (u8) {
      qlinear_loops(m, kk, n, k.in(0).data<uint8_t>(), zp, k.in(3).data<int8_t>(), scales, y);
    } else {
      qlinear_loops(m, kk, n, k.in(0).data<int8_t>(), zp, k.in(3).data<int8_t>(), scales, y);
    }
  }
  if (k.num_inputs() > 5) scale_bias(y, nullptr, k.in(5).data<float>(), m, n, 1);
}

}  // namespace

void register_quant(KernelRegistry& r) {
  r.add(Backend::cpu, "quantize_linear"_op, {DType::f32}, quantize_kernel, "hwy");
  r.add(Backend::cpu, "dequantize_linear"_op, {DType::i8, DType::u8, DType::i32}, dequantize_kernel, "loops");
  r.add(Backend::cpu, "qconv2d"_op, {DType::i8, DType::u8}, qconv2d_kernel, "onednn");
  r.add(Backend::cpu, "qlinear"_op, {DType::i8, DType::u8}, qlinear_kernel, "onednn");
}

}  // namespace spore::cpu
