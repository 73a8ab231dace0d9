// CPU kernels of the conv family. f32 convolution and deconvolution run oneDNN (primitives cached per shape) where
// spore's own kernels do not apply; f64 runs plain loops parallel over (image, channel) planes. f16/bf16 are
// staged through f32 (or run natively in bf16 where the CPU supports it). Pooling is spore's own: 2x2 max pooling
// (AVX2), every other window on 8-channel blocks (nchw8c, or plain planes transposed 8 at a time; AVX-512 where
// present), global average pooling.
// Own AVX2 kernels: a direct stride-1 conv and weight gradient for few input channels; with AVX-512,
// conv2d_fused's conv + relu + 2x2 max pool of those geometries in one pass (direct_conv_pool).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include <immintrin.h>

#include <oneapi/dnnl/dnnl.h>

#include "backend/cpu/constant_cache.h"
#include "backend/cpu/conv_epilogue.h"
#include "backend/cpu/depthwise_blocked.h"
#include "backend/cpu/direct_blocked.h"
#include "backend/cpu/families.h"
#include "backend/cpu/onednn_util.h"
#include "backend/cpu/pointwise_nchw.h"
#include "backend/cpu/pool_blocked.h"
#include "backend/cpu/transpose8.h"
#include "backend/cpu/winograd.h"
#include "base/thread_pool.h"

namespace spore::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// Begin/end padding of spatial axis i (0 = H, 1 = W), resolved exactly as shape inference does.
struct AxisPad {
  int64_t begin, end;
};
AxisPad axis_pad(const Attrs& a, int i, int64_t in, int64_t eff, int64_t stride) {
  const AttrValue* mode_attr = a.find("pad_mode");
  const std::string mode = mode_attr ? std::get<std::string>(*mode_attr) : "pad";
  if (mode == "valid") return {0, 0};
  if (mode == "same") {  // SAME_UPPER: the odd pad goes at the end
    const int64_t out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride + eff - in);
    return {total / 2, total - total / 2};
  }
  const auto& p = a.ints("padding");
  return {p[i], p[2 + i]};
}

memory::data_type dnnl_type(DType t) { return t == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32; }

// A conv-like primitive with the layouts it chose; user buffers are reordered in and out when they differ.
struct ConvPrim {
  memory::desc user_src, user_wei, user_dst, src, wei, dst, bias;
  dnnl::primitive prim;
  const char* impl = "onednn";  // "onednn:<oneDNN's implementation name>" (note_kernel_impl)
};

// w_owner: w's storage when w is a plan constant (KernelContext::constant_inputs): its reordered copy is then kept
// (constant_cache.h) under `key` (the primitive's) instead of reordered on every call.
void exec_conv(const ConvPrim& p, const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y,
               const std::shared_ptr<Storage>& w_owner = nullptr, std::string_view key = {}) {
  note_kernel_impl(p.impl);
  dnnl::stream& s = dnnl_stream();
  thread_local std::vector<char> src_buf, wei_buf, dst_buf;  // reorder buffers (onednn_util.h scratch_memory)
  memory xs = user_memory(p.user_src, x), ws = user_memory(p.user_wei, w), ys = user_memory(p.user_dst, y);
  memory xm = xs, wm = ws, ym = ys;
  if (p.src != p.user_src) {
    xm = scratch_memory(p.src, src_buf);
    dnnl::reorder(xs, xm).execute(s, xs, xm);
  }
  std::shared_ptr<Storage> kept;  // the cached reordered weights, alive for this call
  if (p.wei != p.user_wei) {
    kept = constant_derived(w_owner, w.raw_data(), fmt::format("onednn_conv_weights:{}", key), p.wei.get_size(),
                            [&](void* buf) {
                              memory dst(p.wei, dnnl_engine(), buf);
                              dnnl::reorder(ws, dst).execute(s, ws, dst);
                              s.wait();
                            });
    if (kept) {
      wm = memory(p.wei, dnnl_engine(), kept->data());
    } else {
      wm = scratch_memory(p.wei, wei_buf);
      dnnl::reorder(ws, wm).execute(s, ws, wm);
    }
  }
  if (p.dst != p.user_dst) ym = scratch_memory(p.dst, dst_buf);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, ym}};
  if (b) args.emplace(DNNL_ARG_BIAS, user_memory(p.bias, *b));
  p.prim.execute(s, args);
  if (p.dst != p.user_dst) dnnl::reorder(ym, ys).execute(s, ym, ys);
  s.wait();
}

struct ConvGeom {
  int64_t n, c, h, w, o, kh, kw, oh, ow, groups;
  int64_t sh, sw, dh, dw;
  AxisPad ph, pw;
};

// xs and ys are the logical [N, C, H, W] shapes (whatever the buffers' layout).
ConvGeom conv_geom(const Shape& xs, const Shape& ws, const Shape& ys, const Attrs& a, bool transpose) {
  const auto& stride = a.ints("stride");
  const auto& dil = a.ints("dilation");
  ConvGeom g{xs[0],     xs[1],     xs[2],  xs[3],  ys[1], ws[2], ws[3], ys[2], ys[3], a.i("groups"),
             stride[0], stride[1], dil[0], dil[1], {},    {}};
  if (transpose) {
    const auto& p = a.ints("padding");
    g.ph = {p[0], p[2]};
    g.pw = {p[1], p[3]};
  } else {
    g.ph = axis_pad(a, 0, g.h, (g.kh - 1) * g.dh + 1, g.sh);
    g.pw = axis_pad(a, 1, g.w, (g.kw - 1) * g.dw + 1, g.sw);
  }
  return g;
}

ConvGeom conv_geom(const KernelContext& k, bool transpose) {
  return conv_geom(k.in(0).shape(), k.in(1).shape(), k.out(0).shape(), k.attrs, transpose);
}

std::string geom_key(const ConvGeom& g, DType t, bool bias) {
  return fmt::format("{}:{},{},{},{},{},{},{},{},{},{}:{},{},{},{}:{},{},{},{}:{}", static_cast<int>(t), g.n, g.c, g.h,
                     g.w, g.o, g.kh, g.kw, g.oh, g.ow, g.groups, g.sh, g.sw, g.dh, g.dw, g.ph.begin, g.ph.end,
                     g.pw.begin, g.pw.end, bias);
}

// Weights as oneDNN's logical (g,)oc,ic,kh,kw over our buffer: conv w is [O, C/g, kH, kW]; transposed
// conv w is [C, O/g, kH, kW], i.e. ic before oc, described by strides so nothing is copied.
memory::desc weights_md(const ConvGeom& g, memory::data_type dt, bool transpose) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups, ks = g.kh * g.kw;
  const int64_t oc_stride = transpose ? ks : cg * ks, ic_stride = transpose ? og * ks : ks;
  if (g.groups == 1) return memory::desc({og, cg, g.kh, g.kw}, dt, {oc_stride, ic_stride, g.kw, 1});
  return memory::desc({g.groups, og, cg, g.kh, g.kw}, dt, {og * cg * ks, oc_stride, ic_stride, g.kw, 1});
}

ConvPrim make_conv_prim(const ConvGeom& g, DType t, bool bias, bool transpose, const Attrs& a, bool src_blocked = false,
                        bool dst_blocked = false) {
  const memory::data_type dt = dnnl_type(t);
  ConvPrim p;
  p.user_src = memory::desc({g.n, g.c, g.h, g.w}, dt, src_blocked ? tag::nChw8c : tag::nchw);
  p.user_dst = memory::desc({g.n, g.o, g.oh, g.ow}, dt, dst_blocked ? tag::nChw8c : tag::nchw);
  p.user_wei = weights_md(g, dt, transpose);
  if (bias) p.bias = memory::desc({g.o}, dt, tag::x);
  const memory::desc src_any({g.n, g.c, g.h, g.w}, dt, tag::any), dst_any({g.n, g.o, g.oh, g.ow}, dt, tag::any);
  const memory::desc wei_any(p.user_wei.dims(), dt, tag::any);
  const memory::dims strides{g.sh, g.sw}, dilation{g.dh - 1, g.dw - 1}, pad_l{g.ph.begin, g.pw.begin};
  const auto prop = dnnl::prop_kind::forward_inference;
  if (transpose) {
    // oneDNN's output size formula has no output_padding: it goes into (possibly negative) end padding.
    const auto& op = a.ints("output_padding");
    const memory::dims pad_r{g.ph.end - op[0], g.pw.end - op[1]};
    const auto d = bias ? dnnl::deconvolution_forward::desc(prop, dnnl::algorithm::deconvolution_direct, src_any,
                                                            wei_any, p.bias, dst_any, strides, dilation, pad_l, pad_r)
                        : dnnl::deconvolution_forward::desc(prop, dnnl::algorithm::deconvolution_direct, src_any,
                                                            wei_any, dst_any, strides, dilation, pad_l, pad_r);
    const dnnl::deconvolution_forward::primitive_desc pd(d, dnnl_engine());
    p.impl = onednn_impl_name(pd.impl_info_str());
    p.src = pd.src_desc();
    p.wei = pd.weights_desc();
    p.dst = pd.dst_desc();
    p.prim = dnnl::deconvolution_forward(pd);
  } else {
    const memory::dims pad_r{g.ph.end, g.pw.end};
    const auto d = bias ? dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, src_any, wei_any,
                                                          p.bias, dst_any, strides, dilation, pad_l, pad_r)
                        : dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, src_any, wei_any,
                                                          dst_any, strides, dilation, pad_l, pad_r);
    const dnnl::convolution_forward::primitive_desc pd(d, dnnl_engine());
    p.impl = onednn_impl_name(pd.impl_info_str());
    p.src = pd.src_desc();
    p.wei = pd.weights_desc();
    p.dst = pd.dst_desc();
    p.prim = dnnl::convolution_forward(pd);
  }
  return p;
}

// Direct loops (f64, and f32 if oneDNN declines a geometry): one task per output (image, channel) plane,
// each summing in a fixed order.
template <typename T>
void loops_conv(const ConvGeom& g, const T* x, const T* w, const T* b, T* y) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups;
  parallel_for(g.n * g.o, [&](int64_t plane) {
    const int64_t n = plane / g.o, oc = plane % g.o, grp = oc / og;
    T* out = y + plane * g.oh * g.ow;
    for (int64_t i = 0; i < g.oh * g.ow; ++i) out[i] = b ? b[oc] : T(0);
    for (int64_t ic = 0; ic < cg; ++ic) {
      const T* in = x + (n * g.c + grp * cg + ic) * g.h * g.w;
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const T wv = w[((oc * cg + ic) * g.kh + i) * g.kw + j];
          for (int64_t yy = 0; yy < g.oh; ++yy) {
            const int64_t iy = yy * g.sh - g.ph.begin + i * g.dh;
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t xx = 0; xx < g.ow; ++xx) {
              const int64_t ix = xx * g.sw - g.pw.begin + j * g.dw;
              if (ix >= 0 && ix < g.w) out[yy * g.ow + xx] += in[iy * g.w + ix] * wv;
            }
          }
        }
    }
  });
}

// Gather form of the transposed conv, one task per output plane.
template <typename T>
void loops_conv_transpose(const ConvGeom& g, const T* x, const T* w, const T* b, T* y) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups;
  parallel_for(g.n * g.o, [&](int64_t plane) {
    const int64_t n = plane / g.o, oc = plane % g.o, grp = oc / og, ocg = oc % og;
    T* out = y + plane * g.oh * g.ow;
    for (int64_t i = 0; i < g.oh * g.ow; ++i) out[i] = b ? b[oc] : T(0);
    for (int64_t ic = grp * cg; ic < (grp + 1) * cg; ++ic) {
      const T* in = x + (n * g.c + ic) * g.h * g.w;
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const T wv = w[((ic * og + ocg) * g.kh + i) * g.kw + j];
          for (int64_t yy = 0; yy < g.oh; ++yy) {
            const int64_t ty = yy + g.ph.begin - i * g.dh;
            if (ty < 0 || ty % g.sh || ty / g.sh >= g.h) continue;
            for (int64_t xx = 0; xx < g.ow; ++xx) {
              const int64_t tx = xx + g.pw.begin - j * g.dw;
              if (tx < 0 || tx % g.sw || tx / g.sw >= g.w) continue;
              out[yy * g.ow + xx] += in[ty / g.sh * g.w + tx / g.sw] * wv;
            }
          }
        }
    }
  });
}

// ---- im2col: the unfolded input that sgemm-based kernels multiply (conv geometry with resolved padding).
struct WeightGradGeom {  // also the forward conv's, built by im2col_geom
  int64_t n, c, h, w, o, oh, ow, kh, kw, groups, sh, sw, dh, dw, pt, pl, pb, pr;
};

// Rows (c, i, j) of one image's unfolded input for group `grp`: col[(c*kh + i)*kw + j][y*ow + x] =
// x[grp*cg + c][y*sh - pt + i*dh][x*sw - pl + j*dw], zero outside the image; rows are `ld` apart.
// Unit stride (the common case) goes through a zero-padded copy of each channel plane, so every output
// row segment is a plain copy with no bounds logic (the bounds-checked form cost ~2 cycles per float).
void im2col(const WeightGradGeom& g, const float* img, int64_t grp, float* col, int64_t ld) {
  const int64_t cg = g.c / g.groups;
  if (g.sh == 1 && g.sw == 1 && g.pt >= 0 && g.pl >= 0 && g.pb >= 0 && g.pr >= 0) {
    const int64_t hp = g.h + g.pt + g.pb, wp = g.w + g.pl + g.pr;
    thread_local std::vector<float> padded;
    if (padded.size() < static_cast<size_t>(hp * wp)) padded.resize(static_cast<size_t>(hp * wp));
    float* __restrict pad = padded.data();
    for (int64_t c = 0; c < cg; ++c) {
      const float* __restrict plane = img + (grp * cg + c) * g.h * g.w;
      std::fill(pad, pad + g.pt * wp, 0.0f);
      for (int64_t y = 0; y < g.h; ++y) {
        float* __restrict r = pad + (g.pt + y) * wp;
        for (int64_t x = 0; x < g.pl; ++x) r[x] = 0.0f;
        for (int64_t x = 0; x < g.w; ++x) r[g.pl + x] = plane[y * g.w + x];
        for (int64_t x = g.pl + g.w; x < wp; ++x) r[x] = 0.0f;
      }
      std::fill(pad + (g.pt + g.h) * wp, pad + hp * wp, 0.0f);
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          float* __restrict row = col + ((c * g.kh + i) * g.kw + j) * ld;
          const float* __restrict src = pad + i * g.dh * wp + j * g.dw;
          for (int64_t y = 0; y < g.oh; ++y)
            for (int64_t x = 0; x < g.ow; ++x) row[y * g.ow + x] = src[y * wp + x];
        }
    }
    return;
  }
  for (int64_t c = 0; c < cg; ++c) {
    const float* plane = img + (grp * cg + c) * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        float* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        for (int64_t y = 0; y < g.oh; ++y) {
          float* out = row + y * g.ow;
          const int64_t iy = y * g.sh - g.pt + i * g.dh;
          if (iy < 0 || iy >= g.h) {
            std::fill(out, out + g.ow, 0.0f);
            continue;
          }
          const float* in = plane + iy * g.w;
          const int64_t x0 = j * g.dw - g.pl;
          for (int64_t x = 0; x < g.ow; ++x) {
            const int64_t ix = x * g.sw + x0;
            out[x] = ix >= 0 && ix < g.w ? in[ix] : 0.0f;
          }
        }
      }
  }
}

WeightGradGeom im2col_geom(const ConvGeom& g) {
  return {g.n,  g.c,  g.h,  g.w,  g.o,        g.oh,       g.ow,       g.kh,      g.kw,
          g.groups, g.sh, g.sw, g.dh, g.dw, g.ph.begin, g.pw.begin, g.ph.end, g.pw.end};
}

// Forward conv for inputs with few channels per group (first layers: 1-3 channels): per image,
// y_n,grp [O/g, P] = W_grp [O/g, K] x col_n,grp [K, P], written straight into NCHW. oneDNN's blocked-layout
// kernel plus the reorder of its output back to NCHW ran at ~10 GFLOP/s on these. Each image is one task
// and one sgemm per group, so results do not depend on the thread count or on the batch.
// Also convs with few output channels per group (optical flow's heads: 128 -> 2 channels, 3x3): oneDNN pads the
// outputs to a 16-channel block and reorders, ~1 GFLOP/s on RAFT's [1,128,16,16] -> [1,2,16,16] (1.2 MFLOP, 24 per
// run); the unfolded image of those (1152 x 256 floats) is cheap. Capped at 4M floats of col per image, so a
// large image with few outputs stays on oneDNN.
bool use_im2col_forward(const ConvGeom& g) {
  const int64_t col = g.c / g.groups * g.kh * g.kw * g.oh * g.ow;
  return g.c / g.groups <= 4 || (g.o / g.groups <= 4 && col <= (int64_t{1} << 22));
}

void im2col_conv_forward(const ConvGeom& cg, const float* x, const float* w, const float* b, float* y,
                         const ConvEpilogue* epi = nullptr) {
  const WeightGradGeom g = im2col_geom(cg);
  const int64_t og = g.o / g.groups, kk = g.c / g.groups * g.kh * g.kw, p = g.oh * g.ow;
  run_onednn_tasks(g.n, [&](int64_t n) {
    thread_local std::vector<float> col;
    if (col.size() < static_cast<size_t>(kk * p)) col.resize(static_cast<size_t>(kk * p));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col(g, x + n * g.c * g.h * g.w, grp, col.data(), p);
      float* out = y + (n * g.o + grp * og) * p;
      if (b)
        for (int64_t o = 0; o < og; ++o) std::fill(out + o * p, out + (o + 1) * p, b[grp * og + o]);
      const dnnl_status_t st = dnnl_sgemm('N', 'N', og, p, kk, 1.0f, w + grp * og * kk, kk, col.data(), p,
                                          b ? 1.0f : 0.0f, out, p);
      SPORE_CHECK(st == dnnl_success, ErrorCode::internal, "[conv2d] dnnl_sgemm failed with status {}",
                  static_cast<int>(st));
    }
    if (epi) epi->fn(n * g.o * p, g.o * p);
  });
}

// ---- Direct stride-1 kernels on a flat padded grid (f32, AVX2+FMA; the baseline ISA is x86-64-v3).
// Each input plane is copied into a zero-padded buffer of width wp = W + pad_l + pad_r. Output (y, x) is
// then grid position q = y*wp + x and tap (i, j) reads pad[q + i*dh*wp + j*dw]: every tap is one
// contiguous stream over q, so 8 outputs are one unaligned load per tap with no bounds logic and no
// im2col buffer. Grid columns x >= Wo are computed and dropped (forward) or meet a zero dy (weight
// gradient), a (wp - Wo)/wp waste that is small for the first CNN layers these serve.
struct FlatGeom {
  int64_t c, o, h, w, kh, kw, dh, dw, pt, pl;
  int64_t hp, wp, oh, ow;
  int64_t len;    // oh*wp rounded up to whole vectors: the grid positions computed per plane
  int64_t plane;  // floats per padded plane, covering every read of the last vector's last tap
};

FlatGeom flat_geom(int64_t c, int64_t o, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t dh, int64_t dw,
                   int64_t pt, int64_t pl, int64_t pb, int64_t pr) {
  FlatGeom f{c, o, h, w, kh, kw, dh, dw, pt, pl, h + pt + pb, w + pl + pr, 0, 0, 0, 0};
  f.oh = f.hp - (kh - 1) * dh;
  f.ow = f.wp - (kw - 1) * dw;
  f.len = (f.oh * f.wp + 7) / 8 * 8;
  f.plane = (f.len + (kh - 1) * dh * f.wp + (kw - 1) * dw + 7) / 8 * 8;
  return f;
}

// Per-thread scratch kept between calls (a fresh buffer this size is a fresh mmap whose pages fault in on
// every call), 32-byte aligned so that grid rows (whole vectors long) are aligned too.
float* aligned_scratch(std::vector<float>& v, int64_t floats) {
  if (v.size() < static_cast<size_t>(floats + 8)) v.resize(static_cast<size_t>(floats + 8));
  const auto a = reinterpret_cast<uintptr_t>(v.data());
  return v.data() + ((32 - a % 32) % 32) / sizeof(float);
}

// Copies the C planes of one image into zero-padded planes `f.plane` floats apart.
void pad_planes(const FlatGeom& f, const float* img, float* dst) {
  for (int64_t c = 0; c < f.c; ++c) {
    const float* __restrict src = img + c * f.h * f.w;
    float* __restrict d = dst + c * f.plane;
    std::fill(d, d + f.pt * f.wp, 0.0f);
    for (int64_t y = 0; y < f.h; ++y) {
      float* __restrict r = d + (f.pt + y) * f.wp;
      std::fill(r, r + f.pl, 0.0f);
      std::copy(src + y * f.w, src + (y + 1) * f.w, r + f.pl);
      std::fill(r + f.pl + f.w, r + f.wp, 0.0f);
    }
    std::fill(d + (f.pt + f.h) * f.wp, d + f.plane, 0.0f);
  }
}

// OB output channels x NV vectors of 8 outputs; vector v covers grid positions q[v].. and output offsets
// d[v].. (one output row each). Accumulators start at the bias, then add taps in (c, i, j) order, so each
// output's sum order is fixed. w rows are `wld` apart ([O][C*kH*kW]); outputs are `out_ld` apart.
template <int OB, int NV>
inline void direct_fwd_tile(const float* in, const int64_t* off, int64_t taps, const float* w, int64_t wld,
                            const float* bias, float* out, int64_t out_ld, const int64_t* q, const int64_t* d) {
  __m256 acc[OB][NV];
#pragma GCC unroll 16
  for (int ob = 0; ob < OB; ++ob)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[ob][v] = bias ? _mm256_broadcast_ss(bias + ob) : _mm256_setzero_ps();
  const float* base[NV];
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) base[v] = in + q[v];
  // One flat loop over the (c, i, j) taps: with nested loops GCC stored the accumulators every iteration.
  for (int64_t t = 0; t < taps; ++t) {
    __m256 x[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) x[v] = _mm256_loadu_ps(base[v] + off[t]);
#pragma GCC unroll 16
    for (int ob = 0; ob < OB; ++ob) {
      const __m256 wv = _mm256_broadcast_ss(w + ob * wld + t);
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) acc[ob][v] = _mm256_fmadd_ps(wv, x[v], acc[ob][v]);
    }
  }
#pragma GCC unroll 16
  for (int ob = 0; ob < OB; ++ob)
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(out + ob * out_ld + d[v], acc[ob][v]);
}

template <int OB>
void direct_fwd_block(const FlatGeom& f, const float* in, const std::vector<int64_t>& off,
                      const std::vector<int64_t>& vq, const std::vector<int64_t>& vd, const float* w,
                      const float* bias, float* out) {
  const auto taps = static_cast<int64_t>(off.size()), nv = static_cast<int64_t>(vq.size());
  const int64_t out_ld = f.oh * f.ow;
  int64_t v = 0;
  for (; v + 2 <= nv; v += 2) direct_fwd_tile<OB, 2>(in, off.data(), taps, w, taps, bias, out, out_ld, &vq[v], &vd[v]);
  if (v < nv) direct_fwd_tile<OB, 1>(in, off.data(), taps, w, taps, bias, out, out_ld, &vq[v], &vd[v]);
}

constexpr int64_t kFwdMaxBlock = 6;  // 6 channels x 2 vectors = 12 accumulators + 2 inputs + 1 weight

// Splits n items into `blocks` blocks of near-equal size; returns the start of block b.
int64_t block_start(int64_t n, int64_t blocks, int64_t b) { return b * (n / blocks) + std::min(b, n % blocks); }

// Stride-1 conv of `n` images x [N, C, H, W] with w [O, C, kH, kW] (groups 1) into y [N, O, Ho, Wo], Wo >= 8.
// Each output row is covered by vectors at x = 0, 8, ... and a last one ending at Wo (overlapping the one
// before when 8 does not divide Wo: the overlap is computed twice, identically), stored straight into y.
// One task per image, so results do not depend on the thread count or on the rest of the batch.
void direct_conv_forward(const FlatGeom& f, int64_t n, const float* x, const float* w, const float* b, float* y,
                         const ConvEpilogue* epi = nullptr) {
  std::vector<int64_t> off, vq, vd;  // off: the (c, i, j) taps' offsets into the padded planes
  for (int64_t c = 0; c < f.c; ++c)
    for (int64_t i = 0; i < f.kh; ++i)
      for (int64_t j = 0; j < f.kw; ++j) off.push_back(c * f.plane + i * f.dh * f.wp + j * f.dw);
  for (int64_t r = 0; r < f.oh; ++r)
    for (int64_t x0 = 0; x0 < f.ow; x0 += 8) {
      const int64_t xs = std::min(x0, f.ow - 8);
      vq.push_back(r * f.wp + xs);
      vd.push_back(r * f.ow + xs);
    }
  const int64_t blocks = (f.o + kFwdMaxBlock - 1) / kFwdMaxBlock, wld = f.c * f.kh * f.kw;
  parallel_for(n, [&](int64_t img) {
    thread_local std::vector<float> scratch;
    float* const pad = aligned_scratch(scratch, f.c * f.plane);
    pad_planes(f, x + img * f.c * f.h * f.w, pad);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t o0 = block_start(f.o, blocks, blk), ob = block_start(f.o, blocks, blk + 1) - o0;
      const float* wb = w + o0 * wld;
      const float* bb = b ? b + o0 : nullptr;
      float* out = y + (img * f.o + o0) * f.oh * f.ow;
      switch (ob) {
        case 1: direct_fwd_block<1>(f, pad, off, vq, vd, wb, bb, out); break;
        case 2: direct_fwd_block<2>(f, pad, off, vq, vd, wb, bb, out); break;
        case 3: direct_fwd_block<3>(f, pad, off, vq, vd, wb, bb, out); break;
        case 4: direct_fwd_block<4>(f, pad, off, vq, vd, wb, bb, out); break;
        case 5: direct_fwd_block<5>(f, pad, off, vq, vd, wb, bb, out); break;
        default: direct_fwd_block<6>(f, pad, off, vq, vd, wb, bb, out); break;
      }
    }
    if (epi) epi->fn(img * f.o * f.oh * f.ow, f.o * f.oh * f.ow);
  });
}

// ---- conv2d_fused's conv + relu + 2x2 max pooling in registers (AVX-512), for the direct kernels' geometries.
// The 2x2 windows' four conv outputs are computed side by side, 16 windows per vector: each padded input row is
// split into its even and odd columns, so output columns 2k and 2k+1 both read contiguous runs of k. Every conv
// output is still bias + the (c, i, j) taps in order by fma, as direct_fwd_tile computes it; relu and the window
// order (top-left, top-right, bottom-left, bottom-right; NaN wins, else strictly larger) are unary_f32's and
// max_pool_2x2_rows's, so the result has the unfused bits without writing the conv output. That pays most on
// first layers (few input channels), where writing and re-reading the conv output dominates.

// AVX-512 where the CPU has it; SPORE_CONV_AVX512=0 turns the fused path off (read per call, for tests).
bool conv_pool_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  const char* e = std::getenv("SPORE_CONV_AVX512");
  return has && !(e && e[0] == '0' && e[1] == 0);
}

struct SplitGeom {
  int64_t ph, pw;  // pooled rows and columns
  int64_t len;     // floats per split row (even or odd columns, zero-padded to whole vectors and every read)
  int64_t nvec;    // 16-window vectors per pooled row (the last one ends at pw, or is masked when pw < 16)
};

SplitGeom split_geom(const FlatGeom& f) {
  SplitGeom s{f.oh / 2, f.ow / 2, 0, 0};
  s.nvec = (s.pw + 15) / 16;
  s.len = (std::max<int64_t>(s.pw, 16) + ((f.kw - 1) * f.dw + 1) / 2 + 1 + 15) / 16 * 16;
  return s;
}

// The C zero-padded planes of one image as rows [c][r][even, odd][len]: even[k] = padded[r][2k], odd[k] =
// padded[r][2k + 1].
void split_planes(const FlatGeom& f, const SplitGeom& s, const float* img, float* dst) {
  std::fill(dst, dst + f.c * f.hp * 2 * s.len, 0.0f);
  for (int64_t c = 0; c < f.c; ++c)
    for (int64_t y = 0; y < f.h; ++y) {
      const float* src = img + (c * f.h + y) * f.w;
      float* row = dst + (c * f.hp + f.pt + y) * 2 * s.len;
      for (int64_t x = 0; x < f.w; ++x) {
        const int64_t p = f.pl + x;
        row[(p & 1) * s.len + p / 2] = src[x];
      }
    }
}

// OB output channels of pooled rows [0, ph) of one image. off0/off1: each tap's offset (from a pooled row's
// base) of the even / odd output column's input; the bottom row of a window reads 2*len further.
template <int OB>
__attribute__((target("avx512f"))) void pool_fwd_block(const FlatGeom& f, const SplitGeom& s, const float* split,
                                                       const int64_t* off0, const int64_t* off1, int64_t taps,
                                                       const float* w, const float* bias, bool relu, float* out) {
  const int64_t plane_out = s.ph * s.pw, down = 2 * s.len;
  const __mmask16 tail = s.pw < 16 ? static_cast<__mmask16>((1u << s.pw) - 1) : static_cast<__mmask16>(0xFFFF);
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t py = 0; py < s.ph; ++py)
    for (int64_t v = 0; v < s.nvec; ++v) {
      const int64_t k0 = s.pw < 16 ? 0 : std::min(v * 16, s.pw - 16);
      const float* base = split + 2 * py * down + k0;
      __m512 acc[OB][4];
#pragma GCC unroll 8
      for (int ob = 0; ob < OB; ++ob) {
        const __m512 b = bias ? _mm512_set1_ps(bias[ob]) : zero;
#pragma GCC unroll 4
        for (int a = 0; a < 4; ++a) acc[ob][a] = b;
      }
      for (int64_t t = 0; t < taps; ++t) {
        const __m512 x0 = _mm512_loadu_ps(base + off0[t]), x1 = _mm512_loadu_ps(base + off1[t]);
        const __m512 x2 = _mm512_loadu_ps(base + off0[t] + down), x3 = _mm512_loadu_ps(base + off1[t] + down);
#pragma GCC unroll 8
        for (int ob = 0; ob < OB; ++ob) {
          const __m512 wv = _mm512_set1_ps(w[ob * taps + t]);
          acc[ob][0] = _mm512_fmadd_ps(wv, x0, acc[ob][0]);
          acc[ob][1] = _mm512_fmadd_ps(wv, x1, acc[ob][1]);
          acc[ob][2] = _mm512_fmadd_ps(wv, x2, acc[ob][2]);
          acc[ob][3] = _mm512_fmadd_ps(wv, x3, acc[ob][3]);
        }
      }
#pragma GCC unroll 8
      for (int ob = 0; ob < OB; ++ob) {
        // relu: vmaxps(0, y) returns y unless 0 > y, i.e. y < 0 ? 0 : y with NaN and -0 kept (unary_f32's relu);
        // the all-ones mask only avoids GCC 12's -Wmaybe-uninitialized inside _mm512_max_ps.
        __m512 y[4];
#pragma GCC unroll 4
        for (int a = 0; a < 4; ++a) y[a] = relu ? _mm512_maskz_max_ps(0xFFFF, zero, acc[ob][a]) : acc[ob][a];
        __m512 m = y[0];
        const __mmask16 nan = _mm512_cmp_ps_mask(y[0], y[1], _CMP_UNORD_Q) | _mm512_cmp_ps_mask(y[2], y[3], _CMP_UNORD_Q);
        if (nan == 0) {  // no NaN among the 4 x 16 values: "strictly larger replaces" is the whole rule
#pragma GCC unroll 4
          for (int a = 1; a < 4; ++a) m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(y[a], m, _CMP_GT_OQ), y[a]);
        } else {
#pragma GCC unroll 4
          for (int a = 1; a < 4; ++a) {
            const __mmask16 take = _mm512_cmp_ps_mask(y[a], y[a], _CMP_UNORD_Q) | _mm512_cmp_ps_mask(y[a], m, _CMP_GT_OQ);
            m = _mm512_mask_mov_ps(m, take, y[a]);
          }
        }
        _mm512_mask_storeu_ps(out + ob * plane_out + py * s.pw + k0, tail, m);
      }
    }
}

constexpr int64_t kPoolMaxBlock = 6;  // 6 channels x 4 window positions = 24 accumulators + 4 inputs + 1 weight

// conv (stride 1, FlatGeom) + optional relu + 2x2 max pool of n images into y [N, O, Ho/2, Wo/2].
void direct_conv_pool(const FlatGeom& f, int64_t n, const float* x, const float* w, const float* b, float* y,
                      bool relu) {
  const SplitGeom s = split_geom(f);
  if (s.ph == 0 || s.pw == 0 || n == 0) return;
  std::vector<int64_t> off0, off1;
  for (int64_t c = 0; c < f.c; ++c)
    for (int64_t i = 0; i < f.kh; ++i)
      for (int64_t j = 0; j < f.kw; ++j) {
        const int64_t row = (c * f.hp + i * f.dh) * 2 * s.len, d = j * f.dw;
        off0.push_back(row + (d & 1) * s.len + d / 2);              // column 2k + d
        off1.push_back(row + ((d + 1) & 1) * s.len + (d + 1) / 2);  // column 2k + 1 + d
      }
  const auto taps = static_cast<int64_t>(off0.size());
  const int64_t blocks = (f.o + kPoolMaxBlock - 1) / kPoolMaxBlock;
  // Tasks: whole images, or a few channel groups per image when the batch is small (any split gives the same bits).
  const int64_t groups = std::clamp<int64_t>((8 + n - 1) / n, 1, blocks);
  parallel_for(n * groups, [&](int64_t task) {
    const int64_t img = task / groups, grp = task % groups;
    thread_local std::vector<float> scratch;
    float* const split = aligned_scratch(scratch, f.c * f.hp * 2 * s.len);
    split_planes(f, s, x + img * f.c * f.h * f.w, split);
    for (int64_t blk = block_start(blocks, groups, grp); blk < block_start(blocks, groups, grp + 1); ++blk) {
      const int64_t o0 = block_start(f.o, blocks, blk), ob = block_start(f.o, blocks, blk + 1) - o0;
      const float* wb = w + o0 * taps;
      const float* bb = b ? b + o0 : nullptr;
      float* out = y + (img * f.o + o0) * s.ph * s.pw;
      switch (ob) {
        case 1: pool_fwd_block<1>(f, s, split, off0.data(), off1.data(), taps, wb, bb, relu, out); break;
        case 2: pool_fwd_block<2>(f, s, split, off0.data(), off1.data(), taps, wb, bb, relu, out); break;
        case 3: pool_fwd_block<3>(f, s, split, off0.data(), off1.data(), taps, wb, bb, relu, out); break;
        case 4: pool_fwd_block<4>(f, s, split, off0.data(), off1.data(), taps, wb, bb, relu, out); break;
        case 5: pool_fwd_block<5>(f, s, split, off0.data(), off1.data(), taps, wb, bb, relu, out); break;
        default: pool_fwd_block<6>(f, s, split, off0.data(), off1.data(), taps, wb, bb, relu, out); break;
      }
    }
  });
}

// Lane sum in a fixed order.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Weight gradient of OB output channels x JB kernel columns (one input channel, one kernel row) over m
// images: acc[ob][j] += dy'[ob][q] * pad[q + j*dw] over the grid, lanes summed at the end. dy' is dy on the
// grid with zeros in the dropped columns. Results go to out[ob*out_ld + j].
template <int OB, int JB>
void wgrad_block(const float* dyp, int64_t dy_img, const float* in, int64_t in_img, int64_t m, int64_t len,
                 int64_t dw, float* out, int64_t out_ld) {
  __m256 acc[OB][JB];
#pragma GCC unroll 16
  for (int ob = 0; ob < OB; ++ob)
#pragma GCC unroll 16
    for (int j = 0; j < JB; ++j) acc[ob][j] = _mm256_setzero_ps();
  for (int64_t img = 0; img < m; ++img) {
    const float* d = dyp + img * dy_img;
    const float* p = in + img * in_img;
    for (int64_t q = 0; q < len; q += 8) {
      __m256 dv[OB];
#pragma GCC unroll 16
      for (int ob = 0; ob < OB; ++ob) dv[ob] = _mm256_load_ps(d + ob * len + q);
#pragma GCC unroll 16
      for (int j = 0; j < JB; ++j) {
        const __m256 xv = _mm256_loadu_ps(p + q + j * dw);
#pragma GCC unroll 16
        for (int ob = 0; ob < OB; ++ob) acc[ob][j] = _mm256_fmadd_ps(dv[ob], xv, acc[ob][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int ob = 0; ob < OB; ++ob)
#pragma GCC unroll 16
    for (int j = 0; j < JB; ++j) out[ob * out_ld + j] = hsum(acc[ob][j]);
}

using WgradFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
template <int OB>
WgradFn wgrad_fn(int64_t jb) {
  switch (jb) {
    case 1: return wgrad_block<OB, 1>;
    case 2: return wgrad_block<OB, 2>;
    case 3: return wgrad_block<OB, 3>;
    case 4: return wgrad_block<OB, 4>;
    case 5: return wgrad_block<OB, 5>;
    default: return wgrad_block<OB, 6>;
  }
}
WgradFn wgrad_fn(int64_t ob, int64_t jb) {
  switch (ob) {
    case 1: return wgrad_fn<1>(jb);
    case 2: return wgrad_fn<2>(jb);
    case 3: return wgrad_fn<3>(jb);
    default: return wgrad_fn<4>(jb);
  }
}
// Channels per block for JB kernel columns: OB*JB accumulators + OB dy vectors + 1 input stay in registers.
int64_t wgrad_max_block(int64_t jb) { return jb >= 5 ? 2 : jb >= 3 ? 3 : 4; }

// dW [O, C, kH, kW] += over images [n0, n0+m) into `out` (overwritten). Scratch: padded inputs, dy on the grid.
void direct_weight_grad_slice(const FlatGeom& f, const float* x, const float* dy, int64_t n0, int64_t m, float* out) {
  thread_local std::vector<float> scratch;
  const int64_t in_img = f.c * f.plane, dy_img = f.o * f.len;
  float* const pad = aligned_scratch(scratch, m * (in_img + dy_img));
  float* const dyp = pad + m * in_img;
  for (int64_t img = 0; img < m; ++img) {
    pad_planes(f, x + (n0 + img) * f.c * f.h * f.w, pad + img * in_img);
    for (int64_t o = 0; o < f.o; ++o) {
      const float* src = dy + ((n0 + img) * f.o + o) * f.oh * f.ow;
      float* d = dyp + img * dy_img + o * f.len;
      for (int64_t r = 0; r < f.oh; ++r) {
        std::copy(src + r * f.ow, src + (r + 1) * f.ow, d + r * f.wp);
        std::fill(d + r * f.wp + f.ow, d + (r + 1) * f.wp, 0.0f);
      }
      std::fill(d + f.oh * f.wp, d + f.len, 0.0f);
    }
  }
  const int64_t out_ld = f.c * f.kh * f.kw;
  for (int64_t j0 = 0; j0 < f.kw; j0 += 6) {
    const int64_t jb = std::min<int64_t>(6, f.kw - j0), maxb = wgrad_max_block(jb);
    const int64_t blocks = (f.o + maxb - 1) / maxb;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t o0 = block_start(f.o, blocks, blk), ob = block_start(f.o, blocks, blk + 1) - o0;
      const WgradFn fn = wgrad_fn(ob, jb);
      for (int64_t c = 0; c < f.c; ++c)
        for (int64_t i = 0; i < f.kh; ++i)
          fn(dyp + o0 * f.len, dy_img, pad + c * f.plane + i * f.dh * f.wp + j0 * f.dw, in_img, m, f.len, f.dw,
             out + ((o0 * f.c + c) * f.kh + i) * f.kw + j0, out_ld);
    }
  }
}

// Where the direct kernels serve a conv (or a transposed conv, as the conv of its input with the flipped,
// transposed weights): stride 1, groups 1, padding that is not negative, few input channels (where
// im2col/oneDNN's reorders dominate) and a grid that wastes little. Measured with bench/conv_train_bench.
std::optional<FlatGeom> direct_geom(const ConvGeom& g, bool transpose) {
  if (g.sh != 1 || g.sw != 1 || g.groups != 1) return std::nullopt;
  int64_t pt = g.ph.begin, pl = g.pw.begin, pb = g.ph.end, pr = g.pw.end;
  if (transpose) {
    pt = g.dh * (g.kh - 1) - g.ph.begin;
    pl = g.dw * (g.kw - 1) - g.pw.begin;
    pb = g.oh + g.dh * (g.kh - 1) - g.h - pt;
    pr = g.ow + g.dw * (g.kw - 1) - g.w - pl;
  }
  if (std::min({pt, pl, pb, pr}) < 0) return std::nullopt;
  const FlatGeom f = flat_geom(g.c, g.o, g.h, g.w, g.kh, g.kw, g.dh, g.dw, pt, pl, pb, pr);
  if (f.oh != g.oh || f.ow != g.ow || f.ow < 8) return std::nullopt;
  // The direct kernel wins on first layers (LeNet conv1; SimpleNet's conv ties with im2col, bound by writing y);
  // with more input channels (LeNet conv2, C=6, and its data gradient, C=16) oneDNN stays faster.
  if (g.c > 4 || 10 * f.ow < 6 * f.wp) return std::nullopt;
  return f;
}

void direct_conv(const FlatGeom& f, bool transpose, int64_t n, const float* x, const float* w, const float* b,
                 float* y, const ConvEpilogue* epi = nullptr) {
  if (!transpose) return direct_conv_forward(f, n, x, w, b, y, epi);
  // conv_transpose2d weights are [C, O, kH, kW]; the equivalent conv takes [O, C, kH, kW], flipped in space.
  std::vector<float> wt(static_cast<size_t>(f.o * f.c * f.kh * f.kw));
  for (int64_t o = 0; o < f.o; ++o)
    for (int64_t c = 0; c < f.c; ++c)
      for (int64_t i = 0; i < f.kh; ++i)
        for (int64_t j = 0; j < f.kw; ++j)
          wt[((o * f.c + c) * f.kh + i) * f.kw + j] =
              w[((c * f.o + o) * f.kh + (f.kh - 1 - i)) * f.kw + (f.kw - 1 - j)];
  direct_conv_forward(f, n, x, wt.data(), b, y);
}

// oneDNN's primitive for this geometry and dtype (cached), or nullopt where oneDNN implements none.
std::optional<ConvPrim> onednn_conv_prim(const ConvGeom& g, DType t, bool bias, bool transpose, const Attrs& attrs,
                                         const std::string& key) {
  static PrimitiveCache<std::optional<ConvPrim>> cache;
  return cache.get(key, [&]() -> std::optional<ConvPrim> {
    try {
      return make_conv_prim(g, t, bias, transpose, attrs);
    } catch (const dnnl::error& e) {
      onednn_declined(e, transpose ? "conv_transpose2d" : "conv2d");
      return std::nullopt;  // a geometry oneDNN does not implement
    }
  });
}

// A 1x1 conv over one pixel (squeeze-excite's FCs, [N, C, 1, 1] -> [N, O, 1, 1]) is a linear layer: x [N, C] @ w
// [O, C]^T + bias, computed here with double sums (dot8_f64), whose bits depend on C alone. A oneDNN primitive call
// cost ~9-50 us for these few thousand multiply-adds (efficientnet_b0's 32 SE FCs: ~0.4 ms of a 9 ms run). The blocked
// layout [N, C/8, 1, 1, 8] of one pixel is [N, C] already, so either layout qualifies.
bool is_one_pixel_linear(const ConvGeom& g) {
  return g.groups == 1 && g.kh == 1 && g.kw == 1 && g.h == 1 && g.w == 1 && g.oh == 1 && g.ow == 1;
}

// Each output in double: 8 lanes (lane l sums the products of c = l mod 8 in increasing c by fma), the lanes added
// pairwise ((0+4)+(2+6))+((1+5)+(3+7)), then the bias, rounded to f32 once. The squeeze-excite scale multiplies whole
// feature maps, so its error reaches every output of the block; these FCs are a few thousand multiply-adds.
double dot8_f64(const float* w, const float* x, int64_t c) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();  // lanes 0-3, 4-7
  int64_t i = 0;
  for (; i + 8 <= c; i += 8) {
    const __m256 wv = _mm256_loadu_ps(w + i), xv = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(wv)), _mm256_cvtps_pd(_mm256_castps256_ps128(xv)), a0);
    a1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(wv, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1)), a1);
  }
  alignas(32) double l[8];
  _mm256_store_pd(l, a0);
  _mm256_store_pd(l + 4, a1);
  for (; i < c; ++i) l[i % 8] = std::fma(static_cast<double>(w[i]), static_cast<double>(x[i]), l[i % 8]);
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

void one_pixel_linear(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  note_kernel_impl("dot_f64");
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const float* bp = bias ? bias->data<float>() : nullptr;
  float* yp = y.data<float>();
  constexpr int64_t kPer = 32;  // outputs per task
  const int64_t chunks = num_chunks(g.o, kPer);
  parallel_for(g.n * chunks, [&](int64_t t) {
    const int64_t n = t / chunks, o0 = t % chunks * kPer, o1 = std::min(g.o, o0 + kPer);
    for (int64_t o = o0; o < o1; ++o) {
      const double d = dot8_f64(wp + o * g.c, xp + n * g.c, g.c);
      yp[n * g.o + o] = static_cast<float>(bp ? d + static_cast<double>(bp[o]) : d);
    }
  });
}

bool pointwise_on() {
  const char* e = std::getenv("SPORE_CONV_POINTWISE");
  return !(e && std::string_view(e) == "0");
}

bool plain_f32_operands(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  return x.dtype() == DType::f32 && w.dtype() == DType::f32 && y.dtype() == DType::f32 && x.is_contiguous() &&
         w.is_contiguous() && y.is_contiguous() && (!bias || (bias->dtype() == DType::f32 && bias->is_contiguous()));
}

template <bool transpose>
void conv_kernel(KernelContext& k) {
  const ConvGeom g = conv_geom(k, transpose);
  const Tensor* bias = k.num_inputs() > 2 ? &k.in(2) : nullptr;
  const DType t = k.out(0).dtype();
  // conv2d_fused's epilogue (conv_epilogue.h), taken here so that no nested call sees it.
  ConvEpilogue* const epi = transpose ? nullptr : std::exchange(pending_conv_epilogue(), nullptr);
  if (k.out(0).numel() == 0) return;
  if (t == DType::f64) {
    const double* b = bias ? bias->data<double>() : nullptr;
    if (transpose)
      loops_conv_transpose(g, k.in(0).data<double>(), k.in(1).data<double>(), b, k.out(0).data<double>());
    else
      loops_conv(g, k.in(0).data<double>(), k.in(1).data<double>(), b, k.out(0).data<double>());
    return;
  }
  if (t == DType::f32) {
    if (const auto f = direct_geom(g, transpose)) {
      if (epi && epi->pooled && conv_pool_avx512()) {
        direct_conv_pool(*f, g.n, k.in(0).data<float>(), k.in(1).data<float>(), bias ? bias->data<float>() : nullptr,
                         epi->pooled, epi->pooled_relu);
        epi->applied = true;
        return;
      }
      note_kernel_impl("direct_avx2");
      direct_conv(*f, transpose, g.n, k.in(0).data<float>(), k.in(1).data<float>(),
                  bias ? bias->data<float>() : nullptr, k.out(0).data<float>(), epi);
      if (epi) epi->applied = true;
      return;
    }
  }
  if (!transpose && t == DType::f32 && is_one_pixel_linear(g) && (!epi || !epi->pooled) &&
      plain_f32_operands(k.in(0), k.in(1), bias, k.out(0))) {
    one_pixel_linear(g, k.in(0), k.in(1), bias, k.out(0));
    if (epi) {
      epi->fn(0, k.out(0).numel());
      epi->applied = true;
    }
    return;
  }
  // A 1x1 stride-1 conv on NCHW (outside a blocked chain: ShuffleNet's convs over 58/116 channels, DenseNet's
  // transitions): pointwise_nchw.h, pixels in the lanes. Measured per layer against oneDNN's brgconv (1 / 2 threads):
  // shufflenet's 58 -> 58 at 28x28 0.45 / 0.36 of its time, 24 -> 58 at 56x56 0.33 / 0.29, 116 -> 116 at 28x28 0.61 /
  // 0.48, densenet's 256 -> 128 at 56x56 0.70, 1024 -> 512 at 14x14 0.98; at 7x7 (49 pixels in 4 vectors of 16) the
  // 464 -> 1024 took 1.22 / 0.73, so images under 128 pixels keep oneDNN unless the conv is small.
  // SPORE_CONV_POINTWISE=0 keeps oneDNN everywhere (A/B runs).
  if (!transpose && t == DType::f32 && g.groups == 1 && g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 &&
      (g.oh * g.ow >= 128 || g.c * g.o <= (int64_t{1} << 17)) &&
      g.ph.begin == 0 && g.ph.end == 0 && g.pw.begin == 0 && g.pw.end == 0 && (!epi || !epi->pooled) &&
      pointwise_on() && plain_f32_operands(k.in(0), k.in(1), bias, k.out(0))) {
    note_kernel_impl("pointwise_nchw");
    pointwise_nchw_conv(PointwiseConv{g.n, g.c, g.o, g.oh * g.ow}, k.in(0).data<float>(), k.in(1).data<float>(),
                        bias ? bias->data<float>() : nullptr, k.out(0).data<float>(), epi ? &epi->fn : nullptr);
    if (epi) epi->applied = true;
    return;
  }
  // Depthwise (groups = C = O) outside a blocked chain: depthwise_blocked.h's kernel between two reorders.
  if (!transpose && t == DType::f32 && g.groups > 1 && g.groups == g.c && g.o == g.c) {
    const DepthwiseBlockedConv dwg{g.n,  g.c,  g.h,  g.w,  g.oh, g.ow,       g.kh,
                                   g.kw, g.sh, g.sw, g.dh, g.dw, g.ph.begin, g.pw.begin};
    DepthwiseBlockedConv padded = dwg;  // what depthwise_plain_conv runs
    padded.c = (g.c + 7) / 8 * 8;
    padded.wc = g.c;
    if (depthwise_blocked_supported(padded) && k.in(0).is_contiguous() && k.in(1).is_contiguous() &&
        k.out(0).is_contiguous() && (!bias || bias->is_contiguous())) {
      note_kernel_impl("depthwise_nchw8c(reordered)");
      depthwise_plain_conv(dwg, k.in(0).data<float>(), k.in(1).data<float>(), bias ? bias->data<float>() : nullptr,
                           k.out(0).data<float>(), (k.constant_inputs >> 1) & 1 ? k.in(1).storage() : nullptr);
      return;
    }
  }
  if (!transpose && t == DType::f32 && use_im2col_forward(g)) {
    note_kernel_impl("im2col+sgemm");
    im2col_conv_forward(g, k.in(0).data<float>(), k.in(1).data<float>(), bias ? bias->data<float>() : nullptr,
                        k.out(0).data<float>(), epi);
    if (epi) epi->applied = true;
    return;
  }
  const std::string key = geom_key(g, t, bias != nullptr) + (transpose ? "t" : "c");
  const auto p = onednn_conv_prim(g, t, bias != nullptr, transpose, k.attrs, key);
  if (p)
    return exec_conv(*p, k.in(0), k.in(1), bias, k.out(0), (k.constant_inputs >> 1) & 1 ? k.in(1).storage() : nullptr,
                     key);
  SPORE_CHECK(t == DType::f32, ErrorCode::unsupported, "[{}] oneDNN has no {} kernel for this geometry", op_name(k.op),
              dtype_name(t));
  const float* b = bias ? bias->data<float>() : nullptr;
  if (transpose)
    loops_conv_transpose(g, k.in(0).data<float>(), k.in(1).data<float>(), b, k.out(0).data<float>());
  else
    loops_conv(g, k.in(0).data<float>(), k.in(1).data<float>(), b, k.out(0).data<float>());
}

}  // namespace

bool conv2d_blocked(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, const Attrs& a, bool src_blocked,
                    bool dst_blocked, bool weights_constant,
                    const std::function<void(int64_t offset, int64_t count)>* epilogue,
                    const StoreEpilogue* fused) {
  const auto logical = [](const Shape& s, bool blocked) {
    return blocked ? Shape{s[0], s[1] * s[4], s[2], s[3]} : s;
  };
  const ConvGeom g = conv_geom(logical(x.shape(), src_blocked), w.shape(), logical(y.shape(), dst_blocked), a, false);
  SPORE_CHECK(y.dtype() == DType::f32, ErrorCode::unsupported, "[conv2d_fused] blocked layouts are f32 only, got {}",
              dtype_name(y.dtype()));
  if (y.numel() == 0) return true;
  if (is_one_pixel_linear(g) && plain_f32_operands(x, w, bias, y)) {
    one_pixel_linear(g, x, w, bias, y);
    if (epilogue) (*epilogue)(0, y.numel());
    return true;
  }
  // Winograd F(2x2,3x3) / F(4x4,3x3) (winograd.h) where it is measured to beat oneDNN (the rule depends on oneDNN's ISA cap,
  // onednn_util.cpp); SPORE_CONV_WINOGRAD=0 keeps oneDNN (A/B benchmarks).
  static const bool winograd_on = [] {
    const char* e = std::getenv("SPORE_CONV_WINOGRAD");
    return !(e && std::string_view(e) == "0");
  }();
  static const WinogradRule rule = dnnl::get_effective_cpu_isa() <= dnnl::cpu_isa::avx2
                                       ? WinogradRule::beats_onednn_avx2
                                       : WinogradRule::beats_onednn_avx512;
  const WinogradConv wg{g.n,  g.c,  g.h,  g.w,      g.o,        g.oh,       g.ow,     g.kh,     g.kw,
                        g.sh, g.sw, g.dh, g.dw, g.groups, g.ph.begin, g.pw.begin, g.ph.end, g.pw.end};
  if (winograd_on && src_blocked && dst_blocked && w.dtype() == DType::f32 && x.is_contiguous() &&
      w.is_contiguous() && y.is_contiguous() && (!bias || (bias->dtype() == DType::f32 && bias->is_contiguous())) &&
      winograd_qualifies(wg, rule)) {
    // conv_algo=precise (the default) keeps F(2x2): F(4x4)'s f32 error against float64 is ~3x ORT's on resnet50 and
    // fcn_resnet50 (docs/PERFORMANCE.md); conv_algo=fast (--fast-conv) allows it.
    const int max_tile = a.has("conv_algo") && a.s("conv_algo") == "fast" ? 4 : 2;
    note_kernel_impl(winograd_tile(wg, max_tile) == 4 ? "winograd_f4x4" : "winograd_f2x2");
    winograd_conv2d_nchw8c(wg, x.data<float>(), w.data<float>(), bias ? bias->data<float>() : nullptr,
                           y.data<float>(), weights_constant ? w.storage() : nullptr, epilogue, fused, max_tile);
    return true;
  }
  // Depthwise convs of a chain (groups = C = O: the mobile nets): depthwise_blocked.h.
  const DepthwiseBlockedConv dwg{g.n,  g.c,  g.h,  g.w,  g.oh, g.ow,       g.kh,
                                 g.kw, g.sh, g.sw, g.dh, g.dw, g.ph.begin, g.pw.begin};
  if (src_blocked && dst_blocked && g.groups == g.c && g.o == g.c && w.dtype() == DType::f32 && x.is_contiguous() &&
      w.is_contiguous() && y.is_contiguous() && (!bias || (bias->dtype() == DType::f32 && bias->is_contiguous())) &&
      depthwise_blocked_supported(dwg)) {
    note_kernel_impl("depthwise_nchw8c");
    depthwise_blocked_conv(dwg, x.data<float>(), w.data<float>(), bias ? bias->data<float>() : nullptr,
                           y.data<float>(), weights_constant ? w.storage() : nullptr, epilogue, fused);
    return true;
  }
  // The other convs of a blocked chain (strided, 1x1, the stem from NCHW): spore's direct kernel (direct_blocked.h;
  // same bits with AVX2 and AVX-512), SPORE_CONV_DIRECT=0 keeps oneDNN.
  const DirectBlockedConv dg{g.n,  g.c,  g.h,          g.w,          g.o,         g.oh, g.ow,
                             g.kh, g.kw, g.sh,         g.sw,         g.ph.begin,  g.pw.begin, !src_blocked,
                             g.groups};
  // Against oneDNN's AVX-512 kernels (brgconv) the direct kernel wins where a conv is small enough for per-call
  // overhead to dominate, or where its reduction is short. Measured per layer on a Zen 5 (1 thread, every conv of 14
  // torchvision exports at batch 1 and 8, SPORE_CONV_DIRECT=1 against the rule): direct won up to ~5M multiply-adds
  // per image ([32->192] 1x1 at 28x28: 61 vs 96 us), and at any size when C*kH*kW <= 72 (the mobile nets' expand
  // 1x1s: mobilenet_v2's 16->96 at 112x112, batch 8, 9.0 -> 3.4 ms; 37 of 40 such layers won), and with <= 40
  // output channels (oneDNN pads them to 16-lane blocks: efficientnet's 144->24 at 56x56 from a blocked source, batch
  // 8, 5.7 vs 2.9 ms; 30 GFLOP/s); above all three it lost
  // (resnet18's 512-channel 3x3 at 7x7: 2.97 vs 4.96 ms; regnet's 440->440 1x1 at 7x7: 0.87 vs 1.62 ms). Against
  // AVX2 oneDNN (SPORE_PORTABLE_NUMERICS) it wins everywhere. The rule reads one image, so the choice never depends
  // on the batch. SPORE_CONV_DIRECT=1 takes the direct kernel wherever it can run (A/B measurements), =0 never.
  static const bool onednn_avx512 = dnnl::get_effective_cpu_isa() > dnnl::cpu_isa::avx2 &&
                                    dnnl::get_effective_cpu_isa() != dnnl::cpu_isa::avx2_vnni;
  // Also every stride-1 1x1 conv over <= 256 input channels: with the output-channel task split, the rows tiled as
  // one run of pixels and summation groups outermost (direct_blocked.h), measured per layer on resnet50 at batch 1
  // and 8: 256->64 at 56x56 0.70-0.77 of oneDNN's time, 256->128 0.84-0.91, 128->512 at 28x28 0.89-1.01, 256->1024
  // at 14x14 1.00-1.02; with 512 input channels 1.05-1.10, 1024-2048 1.04-1.3 (those stay on oneDNN).
  // Since the 4-block tiles (session 23, per layer on 9 exports, 1 thread / 2 threads): every 1x1 whose weights are
  // at most 1M floats - mnasnet's and mobilenet_v2's 480-1152 -> 80-320 projections 0.85-1.0 / 0.54-0.89, googlenet's
  // 480-832-channel 1x1s 0.72-1.02 / 0.49-0.80, resnet50's 1024 -> 256, 512 -> 2048 and 2048 -> 512 0.99-1.03 /
  // 0.75-0.89 (oneDNN's 1x1s gain 1.1-1.3x from a second thread at 7x7-14x14, the direct kernel 1.6-2x); resnet50's
  // 1024 -> 2048 (2M) 1.13 / 1.0 stays on oneDNN.
  const bool direct_pays = !onednn_avx512 || dg.plain_src || g.c * g.kh * g.kw <= 72 || g.o <= 40 ||
                           g.oh * g.ow * g.c * g.o * g.kh * g.kw <= (int64_t{5} << 20) ||
                           (g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.c <= 256) ||
                           (g.kh == 1 && g.kw == 1 && g.c * g.o <= (int64_t{1} << 20)) || g.groups > 1;
  const char* direct_env = std::getenv("SPORE_CONV_DIRECT");
  const bool direct_forced = direct_env && std::string_view(direct_env) == "1";
  if (!(direct_env && std::string_view(direct_env) == "0") && (direct_pays || direct_forced) && dst_blocked &&
      g.dh == 1 && g.dw == 1 && w.dtype() == DType::f32 && x.is_contiguous() && w.is_contiguous() &&
      y.is_contiguous() && (!bias || (bias->dtype() == DType::f32 && bias->is_contiguous())) &&
      direct_blocked_supported(dg)) {
    note_kernel_impl("direct_nchw8c");
    direct_blocked_conv(dg, x.data<float>(), w.data<float>(), bias ? bias->data<float>() : nullptr,
                        y.data<float>(), weights_constant ? w.storage() : nullptr, epilogue, fused);
    return true;
  }
  static PrimitiveCache<ConvPrim> cache;
  const std::string key = geom_key(g, DType::f32, bias != nullptr) + (src_blocked ? "b" : "p") + (dst_blocked ? "b" : "p");
  const ConvPrim& p = cache.get(key, [&] { return make_conv_prim(g, DType::f32, bias != nullptr, false, a, src_blocked, dst_blocked); });
  exec_conv(p, x, w, bias, y, weights_constant ? w.storage() : nullptr, key);
  return false;
}

namespace {

// bf16 runs natively where oneDNN has a bf16 primitive for the geometry (decided before running, so no error is
// swallowed and conv2d_fused's pending epilogue reaches the kernel that runs); otherwise it is staged through f32.
template <bool transpose>
void conv_low(KernelContext& k) {
  if (native_bf16() && k.out(0).dtype() == DType::bf16) {
    const ConvGeom g = conv_geom(k, transpose);
    const bool bias = k.num_inputs() > 2;
    if (onednn_conv_prim(g, DType::bf16, bias, transpose, k.attrs,
                         geom_key(g, DType::bf16, bias) + (transpose ? "t" : "c")))
      return conv_kernel<transpose>(k);
  }
  run_in_f32(k, conv_kernel<transpose>);
}

// ---- pooling

struct PoolGeom {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, dh, dw;
  AxisPad ph, pw;
  bool is_max, include_pad;
};

PoolGeom pool_geom(const KernelContext& k, bool is_max, const Shape& ys) {
  const Shape& xs = k.in(0).shape();
  const auto& kernel = k.attrs.ints("kernel");
  std::vector<int64_t> stride = k.attrs.ints("stride");
  if (stride.empty()) stride = kernel;
  const std::vector<int64_t> dil = is_max ? k.attrs.ints("dilation") : std::vector<int64_t>{1, 1};
  PoolGeom g{xs[0] * xs[1], xs[2],     xs[3],     ys[2],     ys[3],
             kernel[0],     kernel[1], stride[0], stride[1], dil[0],
             dil[1],        {},        {},        is_max,    !is_max && k.attrs.b("count_include_pad")};
  g.ph = axis_pad(k.attrs, 0, g.h, (g.kh - 1) * g.dh + 1, g.sh);
  g.pw = axis_pad(k.attrs, 1, g.w, (g.kw - 1) * g.dw + 1, g.sw);
  return g;
}
PoolGeom pool_geom(const KernelContext& k, bool is_max) { return pool_geom(k, is_max, k.out(0).shape()); }

template <typename T>
void loops_pool(const PoolGeom& g, const T* x, T* y) {
  parallel_for(g.planes, [&](int64_t p) {
    const T* in = x + p * g.h * g.w;
    T* out = y + p * g.oh * g.ow;
    for (int64_t yy = 0; yy < g.oh; ++yy)
      for (int64_t xx = 0; xx < g.ow; ++xx) {
        const int64_t y0 = yy * g.sh - g.ph.begin, x0 = xx * g.sw - g.pw.begin;
        T acc = g.is_max ? -std::numeric_limits<T>::infinity() : T(0);
        int64_t count = 0;
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t iy = y0 + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t ix = x0 + j * g.dw;
            if (ix < 0 || ix >= g.w) continue;
            const T v = in[iy * g.w + ix];
            acc = g.is_max ? (std::isnan(v) || v > acc ? v : acc) : acc + v;
            ++count;
          }
        }
        if (!g.is_max) {
          const int64_t dh = std::min(y0 + g.kh, g.h + g.ph.end) - y0, dw = std::min(x0 + g.kw, g.w + g.pw.end) - x0;
          acc /= static_cast<T>(g.include_pad ? dh * dw : count);
        }
        out[yy * g.ow + xx] = acc;
      }
  });
}

// The common CNN pooling: 2x2 windows, stride 2, no padding or dilation (floor mode, so every window is
// whole). oneDNN's plain-NCHW pooling is far from memory speed here; this streams two input rows per output row.
bool is_2x2_tiling(const PoolGeom& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.dh == 1 && g.dw == 1 && g.ph.begin == 0 &&
         g.pw.begin == 0 && g.oh == g.h / 2 && g.ow == g.w / 2;
}

// The forward's selection rule: NaN wins, else a strictly larger value (ties keep the earlier element).
inline float take_max(float acc, float v) { return (v != v || v > acc) ? v : acc; }

// 8 windows at a time: a0/a1 (b0/b1) are 16 floats of the top (bottom) row. shuffle_ps splits even and odd
// columns with the windows in lane order 0,1,4,5 | 2,3,6,7; permuting 64-bit pairs (0,2,1,3) maps between
// that order and the natural one (it is its own inverse).
struct Win8 {
  __m256 v0, v1, v2, v3;  // the four elements of 8 windows in row-major window order, lanes 0,1,4,5,2,3,6,7
};
inline Win8 load_win8(const float* a, const float* b) {
  const __m256 a0 = _mm256_loadu_ps(a), a1 = _mm256_loadu_ps(a + 8);
  const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
  return {_mm256_shuffle_ps(a0, a1, 0x88), _mm256_shuffle_ps(a0, a1, 0xDD), _mm256_shuffle_ps(b0, b1, 0x88),
          _mm256_shuffle_ps(b0, b1, 0xDD)};
}
inline __m256 swap_pairs(__m256 v) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8));
}
// The scalar take_max step on 8 lanes: the mask where v replaces acc (v is NaN, or v > acc).
inline __m256 takes(__m256 acc, __m256 v) {
  return _mm256_or_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(v, acc, _CMP_GT_OQ));
}
// take_max on 8 lanes in three instructions instead of four: max(v, acc) is `v > acc ? v : acc` (MAXPS returns its
// second operand unless the first is greater: a NaN v gives acc, and so do ties, -0 against +0 included), then v
// wherever v is NaN.
inline __m256 take_max8(__m256 acc, __m256 v) {
  return _mm256_blendv_ps(_mm256_max_ps(v, acc), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

// One step of a pooling window's fold: take_max for max pooling, + for average pooling; the identity it starts from.
inline float pool_fold(bool is_max, float acc, float v) { return is_max ? take_max(acc, v) : acc + v; }
inline __m256 pool_fold(bool is_max, __m256 acc, __m256 v) {
  return is_max ? take_max8(acc, v) : _mm256_add_ps(acc, v);
}
inline float pool_identity(bool is_max) { return is_max ? -std::numeric_limits<float>::infinity() : 0.0f; }

// Output rows [r0, r1) (row r = plane r / oh, output row r % oh).
void max_pool_2x2_rows(const PoolGeom& g, const float* x, float* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = r / g.oh, yy = r % g.oh;
      const float* a = x + (p * g.h + 2 * yy) * g.w;
      const float* b = a + g.w;
      float* out = y + r * g.ow;
      // Vectors at 0, 8, ... and one ending at ow (recomputing a few windows identically).
      if (g.ow >= 8)
        for (int64_t x0 = 0; x0 < g.ow; x0 += 8) {
          const int64_t xs = std::min(x0, g.ow - 8);
          const Win8 w = load_win8(a + 2 * xs, b + 2 * xs);
          const __m256 m3 = take_max8(take_max8(take_max8(w.v0, w.v1), w.v2), w.v3);
          _mm256_storeu_ps(out + xs, swap_pairs(m3));
        }
      else
        for (int64_t xx = 0; xx < g.ow; ++xx)
          out[xx] = take_max(take_max(take_max(a[2 * xx], a[2 * xx + 1]), b[2 * xx]), b[2 * xx + 1]);
    }
}

void max_pool_2x2(const PoolGeom& g, const float* x, float* y) {
  parallel_for(num_chunks(g.planes * g.oh, 64), [&](int64_t chunk) {
    max_pool_2x2_rows(g, x, y, chunk * 64, std::min(g.planes * g.oh, (chunk + 1) * 64));
  });
}

// Its gradient: each window's dy goes to the selected element, the other three get 0 (rows and columns
// past the last whole window, when H or W is odd, get 0 too).
void max_pool_2x2_grad(const PoolGeom& g, const float* x, const float* dy, float* dx) {
  parallel_for(num_chunks(g.planes * g.oh, 64), [&](int64_t chunk) {
    const int64_t end = std::min(g.planes * g.oh, (chunk + 1) * 64);
    for (int64_t r = chunk * 64; r < end; ++r) {
      const int64_t p = r / g.oh, yy = r % g.oh;
      const float* a = x + (p * g.h + 2 * yy) * g.w;
      const float* b = a + g.w;
      float* da = dx + (p * g.h + 2 * yy) * g.w;
      float* db = da + g.w;
      const float* d = dy + r * g.ow;
      int64_t x_end = 0;  // windows before it are done by vectors
      if (g.ow >= 8)
        for (int64_t x0 = 0; x0 < g.ow; x0 += 8) {
          const int64_t xs = std::min(x0, g.ow - 8);
          const Win8 w = load_win8(a + 2 * xs, b + 2 * xs);
          const __m256 t1 = takes(w.v0, w.v1);
          const __m256 m1 = _mm256_blendv_ps(w.v0, w.v1, t1);
          const __m256 t2 = takes(m1, w.v2);
          const __m256 m2 = _mm256_blendv_ps(m1, w.v2, t2);
          const __m256 t3 = takes(m2, w.v3);
          const __m256 gv = swap_pairs(_mm256_loadu_ps(d + xs));
          // Element k is selected when t_k holds and no later t_j does (t_0 = true).
          const __m256 g3 = _mm256_and_ps(t3, gv);
          const __m256 g2 = _mm256_andnot_ps(t3, _mm256_and_ps(t2, gv));
          const __m256 g1 = _mm256_andnot_ps(_mm256_or_ps(t2, t3), _mm256_and_ps(t1, gv));
          const __m256 g0 = _mm256_andnot_ps(_mm256_or_ps(t1, _mm256_or_ps(t2, t3)), gv);
          // unpacklo/hi interleave (even, odd) back into columns 0-7 and 8-15 of the 8 windows.
          _mm256_storeu_ps(da + 2 * xs, _mm256_unpacklo_ps(g0, g1));
          _mm256_storeu_ps(da + 2 * xs + 8, _mm256_unpackhi_ps(g0, g1));
          _mm256_storeu_ps(db + 2 * xs, _mm256_unpacklo_ps(g2, g3));
          _mm256_storeu_ps(db + 2 * xs + 8, _mm256_unpackhi_ps(g2, g3));
          x_end = g.ow;
        }
      for (int64_t xx = x_end; xx < g.ow; ++xx) {
        const float v0 = a[2 * xx], v1 = a[2 * xx + 1], v2 = b[2 * xx], v3 = b[2 * xx + 1];
        // Replay the forward's scan to find the element it selected (selects, no branches: the choice is
        // data-dependent and mispredicts half the time).
        const bool t1 = v1 != v1 || v1 > v0;
        const float m1 = t1 ? v1 : v0;
        const bool t2 = v2 != v2 || v2 > m1;
        const float m2 = t2 ? v2 : m1;
        const bool t3 = v3 != v3 || v3 > m2;
        const int sel = t3 ? 3 : t2 ? 2 : t1 ? 1 : 0;
        const float gv = d[xx];
        da[2 * xx] = sel == 0 ? gv : 0.0f;
        da[2 * xx + 1] = sel == 1 ? gv : 0.0f;
        db[2 * xx] = sel == 2 ? gv : 0.0f;
        db[2 * xx + 1] = sel == 3 ? gv : 0.0f;
      }
      if (g.w > 2 * g.ow) da[g.w - 1] = db[g.w - 1] = 0.0f;
    }
  });
  if (g.h > 2 * g.oh)  // odd H: the last row of every plane is never selected
    for (int64_t p = 0; p < g.planes; ++p) std::fill(dx + (p * g.h + g.h - 1) * g.w, dx + (p * g.h + g.h) * g.w, 0.0f);
}

// Pooling on the blocked layout [N, C/8, H, W, 8] (layout "nchw8c", inside a conv chain: passes/layout.cpp): a
// pixel's 8 channels are one vector. Each lane follows one fixed sequence - the 2x2 tiling's row-major window, else
// column folds over the window's rows in order, then folds over its columns in order, from the identity - so the
// bits depend on nothing but the window (tests/backend/cpu/pool_blocked_test.cpp spells the sequence out).
struct PoolRows {
  const PoolGeom& g;
  bool wide;           // AVX-512 (pool_blocked.h)
  bool tiling;         // max 2x2/2 windows tiling the input
  int64_t x_lo, x_hi;  // output columns whose window lies inside the image (no column checks there)

  explicit PoolRows(const PoolGeom& geom)
      : g(geom), wide(detail::pool_use_avx512()), tiling(g.is_max && is_2x2_tiling(g)) {
    const int64_t span = (g.kw - 1) * g.dw;
    x_lo = std::min(g.ow, (g.pw.begin + g.sw - 1) / g.sw);
    const int64_t x_last = g.w - 1 - span + g.pw.begin;
    x_hi = x_last < 0 ? x_lo : std::max(x_lo, std::min(g.ow, x_last / g.sw + 1));
  }

  // Output row yy of one 8-channel plane: in is its [H, W, 8], out the row's [OW, 8]; c: W * 8 floats of scratch.
  void row(const float* in, float* out, int64_t yy, float* c) const {
    const __m256 vid = _mm256_set1_ps(pool_identity(g.is_max));
    const auto vfold = [&](__m256 acc, __m256 v) { return pool_fold(g.is_max, acc, v); };
    if (tiling) {
      const float* a = in + 2 * yy * g.w * 8;
      const float* b = a + g.w * 8;
      for (int64_t xx = 0; xx < g.ow; ++xx) {
        __m256 m = _mm256_loadu_ps(a + 2 * xx * 8);
        m = vfold(m, _mm256_loadu_ps(a + (2 * xx + 1) * 8));
        m = vfold(m, _mm256_loadu_ps(b + 2 * xx * 8));
        m = vfold(m, _mm256_loadu_ps(b + (2 * xx + 1) * 8));
        _mm256_storeu_ps(out + xx * 8, m);
      }
      return;
    }
    const int64_t y0 = yy * g.sh - g.ph.begin;
    // The column folds: c = row 0, then fold(c, row i) for the window's rows inside the image, in order - one pass
    // over the columns with the rows in registers (up to 4 at a time) instead of a copy and a pass per row.
    const float* src[4];
    int64_t valid_rows = 0, held = 0;
    const auto flush = [&] {
      if (wide) {
        detail::pool_column_folds_avx512(g.is_max, c, src, held, valid_rows == held, g.w * 8);
        held = 0;
        return;
      }
      for (int64_t j = 0; j < g.w * 8; j += 8) {
        __m256 v = valid_rows == held ? _mm256_loadu_ps(src[0] + j)
                                      : vfold(_mm256_loadu_ps(c + j), _mm256_loadu_ps(src[0] + j));
        for (int64_t q = 1; q < held; ++q) v = vfold(v, _mm256_loadu_ps(src[q] + j));
        _mm256_storeu_ps(c + j, v);
      }
      held = 0;
    };
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t iy = y0 + i * g.dh;
      if (iy < 0 || iy >= g.h) continue;
      src[held++] = in + iy * g.w * 8;
      ++valid_rows;
      if (held == 4) flush();
    }
    if (held > 0) flush();
    // The windows whose columns are all inside the row, [x_lo, done), without column checks: two pixels a vector
    // with AVX-512 (max and average), else one (max; averages take the loop below).
    int64_t done = x_lo;
    if (valid_rows > 0 && x_hi > x_lo) {
      if (wide) {
        const int64_t dh = std::min(y0 + g.kh, g.h + g.ph.end) - y0;  // as the loop below divides
        const float n = static_cast<float>(g.include_pad ? dh * g.kw : valid_rows * g.kw);
        done = detail::pool_row_interior_avx512(g.is_max, c, out, x_lo, x_hi, g.sw, g.pw.begin, g.kw, g.dw, n);
      }
      if (g.is_max)
        for (; done < x_hi; ++done) {
          const float* cx = c + (done * g.sw - g.pw.begin) * 8;
          __m256 acc = vid;
          for (int64_t j = 0; j < g.kw; ++j) acc = vfold(acc, _mm256_loadu_ps(cx + j * g.dw * 8));
          _mm256_storeu_ps(out + done * 8, acc);
        }
    }
    for (int64_t xx = 0; xx < g.ow; ++xx) {
      if (xx == x_lo && done > x_lo) {
        xx = done - 1;
        continue;
      }
      const int64_t x0 = xx * g.sw - g.pw.begin;
      __m256 acc = vid;
      int64_t valid_cols = 0;
      if (valid_rows > 0)
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t ix = x0 + j * g.dw;
          if (ix < 0 || ix >= g.w) continue;
          acc = vfold(acc, _mm256_loadu_ps(c + ix * 8));
          ++valid_cols;
        }
      if (!g.is_max) {
        const int64_t dh = std::min(y0 + g.kh, g.h + g.ph.end) - y0, dw = std::min(x0 + g.kw, g.w + g.pw.end) - x0;
        acc = _mm256_div_ps(acc, _mm256_set1_ps(static_cast<float>(g.include_pad ? dh * dw : valid_rows * valid_cols)));
      }
      _mm256_storeu_ps(out + xx * 8, acc);
    }
  }
};

// The calling thread's scratch of at least n floats, kept between calls (a fresh allocation per call would page-fault
// on every run). Slot: one buffer per use.
float* pool_scratch(int slot, int64_t n) {
  thread_local std::vector<float> buf[3];
  std::vector<float>& b = buf[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

void pool_blocked(const PoolGeom& g, const float* x, float* y) {
  const PoolRows pr(g);
  const int64_t rows = g.planes * g.oh;
  // ~2K window taps a task: with 512 task dispatch took a measurable part of small pools (googlenet b1's pool
  // kernels 98 -> 69 us a call with this and the one-pass column folds); far larger tasks balance two threads worse.
  const int64_t per = std::max<int64_t>(1, 2048 / std::max<int64_t>(g.ow * g.kh * g.kw, 1));
  parallel_for(num_chunks(rows, per), [&](int64_t chunk) {
    float* c = pool_scratch(0, g.w * 8);
    for (int64_t r = chunk * per; r < std::min(rows, (chunk + 1) * per); ++r) {
      const int64_t p = r / g.oh, yy = r % g.oh;
      pr.row(x + p * g.h * g.w * 8, y + (p * g.oh + yy) * g.ow * 8, yy, c);
    }
  });
}

// Pooling on plain NCHW planes through the blocked rows: each task takes 8 planes (zeros past the last), transposes
// them into [H, W, 8] (transpose8.h, 8 pixels at a time), pools them as pool_blocked does and transposes the result
// back, all in the task's cache. Each plane's lane has the blocked kernel's sequence, so the bits are the same. The
// separable NCHW kernel it replaces folded one plane's row at a time, 8 floats a vector and scalar tails: 3-10 GB/s
// on googlenet's 14x14 and 7x7 branch pools (20 % of its int8 model's time, whose pools run on NCHW between qconvs).
void pool_plain(const PoolGeom& g, const float* x, float* y) {
  const PoolRows pr(g);
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
  parallel_for(num_chunks(g.planes, 8), [&](int64_t t) {
    const int64_t p0 = t * 8, valid = std::min<int64_t>(8, g.planes - p0);
    float* xb = pool_scratch(0, in_plane * 8);
    float* yb = pool_scratch(1, out_plane * 8);
    float* c = pool_scratch(2, g.w * 8);
    planes_to_block8(x + p0 * in_plane, in_plane, valid, xb);
    for (int64_t yy = 0; yy < g.oh; ++yy) pr.row(xb, yb + yy * g.ow * 8, yy, c);
    block8_to_planes(yb, out_plane, valid, y + p0 * out_plane);
  });
}

template <bool is_max>
void pool_kernel(KernelContext& k) {
  const PoolGeom g = pool_geom(k, is_max);
  if (k.out(0).numel() == 0) return;
  const DType t = k.out(0).dtype();
  const bool blocked = k.attrs.has("layout") && k.attrs.s("layout") == "nchw8c";
  SPORE_CHECK(t == DType::f32 || !blocked, ErrorCode::unsupported, "[{}] layout nchw8c is f32 only, got {}",
              op_name(k.op), dtype_name(t));
  if (t == DType::f64) return loops_pool(g, k.in(0).data<double>(), k.out(0).data<double>());
  SPORE_CHECK(t == DType::f32, ErrorCode::unsupported, "[{}] no {} kernel", op_name(k.op), dtype_name(t));
  if (blocked) {
    note_kernel_impl("nchw8c");
    return pool_blocked(g, k.in(0).data<float>(), k.out(0).data<float>());
  }
  if (is_max && is_2x2_tiling(g)) return max_pool_2x2(g, k.in(0).data<float>(), k.out(0).data<float>());
  note_kernel_impl("planes8");
  pool_plain(g, k.in(0).data<float>(), k.out(0).data<float>());
}

template <bool is_max>
void pool_low(KernelContext& k) {
  run_in_f32(k, pool_kernel<is_max>);
}

// ---- backward kernels

// max_pool2d_grad: one task per (image, channel) plane; windows are scanned in output order, so
// overlapping windows add into dx in a fixed order. The selection rule is the forward's (NaN wins, else a
// strictly larger value, so ties keep the first element in row-major window order).
template <typename T>
void loops_max_pool_grad(const PoolGeom& g, const T* x, const T* dy, T* dx) {
  parallel_for(g.planes, [&](int64_t p) {
    const T* in = x + p * g.h * g.w;
    const T* d = dy + p * g.oh * g.ow;
    T* out = dx + p * g.h * g.w;
    std::fill(out, out + g.h * g.w, T(0));
    for (int64_t yy = 0; yy < g.oh; ++yy)
      for (int64_t xx = 0; xx < g.ow; ++xx) {
        const int64_t y0 = yy * g.sh - g.ph.begin, x0 = xx * g.sw - g.pw.begin;
        T best = T(0);
        int64_t arg = -1;
        for (int64_t i = 0; i < g.kh; ++i) {
          const int64_t iy = y0 + i * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t ix = x0 + j * g.dw;
            if (ix < 0 || ix >= g.w) continue;
            const T v = in[iy * g.w + ix];
            if (arg < 0 || std::isnan(v) || v > best) best = v, arg = iy * g.w + ix;
          }
        }
        if (arg >= 0) out[arg] += d[yy * g.ow + xx];
      }
  });
}

void max_pool2d_grad_kernel(KernelContext& k) {
  const PoolGeom g = pool_geom(k, true, k.in(1).shape());
  if (k.out(0).dtype() == DType::f32 && is_2x2_tiling(g))
    return max_pool_2x2_grad(g, k.in(0).data<float>(), k.in(1).data<float>(), k.out(0).data<float>());
  if (k.out(0).dtype() == DType::f64)
    loops_max_pool_grad(g, k.in(0).data<double>(), k.in(1).data<double>(), k.out(0).data<double>());
  else
    loops_max_pool_grad(g, k.in(0).data<float>(), k.in(1).data<float>(), k.out(0).data<float>());
}
void max_pool2d_grad_low(KernelContext& k) { run_in_f32(k, max_pool2d_grad_kernel); }

WeightGradGeom weight_grad_geom(const KernelContext& k) {
  const Shape& xs = k.in(0).shape();
  const Shape& ds = k.in(1).shape();
  const auto& st = k.attrs.ints("stride");
  const auto& dl = k.attrs.ints("dilation");
  const auto& p = k.attrs.ints("padding");
  const auto& kr = k.attrs.ints("kernel");
  return {xs[0], xs[1], xs[2], xs[3], ds[1], ds[2], ds[3], kr[0], kr[1], k.attrs.i("groups"),
          st[0], st[1], dl[0], dl[1], p[0],  p[1],  p[2],  p[3]};
}

// f64: one task per output channel, each summing over (n, y, x) in index order.
void loops_conv_weight_grad(const WeightGradGeom& g, const double* x, const double* dy, double* dw) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups;
  parallel_for(g.o, [&](int64_t oc) {
    for (int64_t ic = 0; ic < cg; ++ic)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          double s = 0;
          const int64_t xc = (oc / og) * cg + ic;
          for (int64_t b = 0; b < g.n; ++b) {
            const double* d = dy + (b * g.o + oc) * g.oh * g.ow;
            const double* in = x + (b * g.c + xc) * g.h * g.w;
            for (int64_t y = 0; y < g.oh; ++y) {
              const int64_t iy = y * g.sh - g.pt + i * g.dh;
              if (iy < 0 || iy >= g.h) continue;
              for (int64_t z = 0; z < g.ow; ++z) {
                const int64_t ix = z * g.sw - g.pl + j * g.dw;
                if (ix >= 0 && ix < g.w) s += d[y * g.ow + z] * in[iy * g.w + ix];
              }
            }
          }
          dw[((oc * cg + ic) * g.kh + i) * g.kw + j] = s;
        }
  });
}

// The direct kernel's geometry for a weight gradient, under the same conditions as the forward's.
std::optional<FlatGeom> direct_weight_grad_geom(const WeightGradGeom& g) {
  if (g.sh != 1 || g.sw != 1 || g.groups != 1 || std::min({g.pt, g.pl, g.pb, g.pr}) < 0) return std::nullopt;
  const FlatGeom f = flat_geom(g.c, g.o, g.h, g.w, g.kh, g.kw, g.dh, g.dw, g.pt, g.pl, g.pb, g.pr);
  if (f.oh != g.oh || f.ow != g.ow) return std::nullopt;
  // For few input channels the direct kernel beats im2col + sgemm (LeNet conv1 and conv2, SimpleNet).
  if (g.c > 16 || 10 * f.ow < 6 * f.wp) return std::nullopt;
  return f;
}

// f32: im2col + sgemm (oneDNN's backward-weights ran at 5 GFLOP/s on single-channel inputs). The batch is
// cut into a fixed number of slices that depends only on N; a slice of m images lays its unfolded inputs
// side by side, col [K, m*P], and its dy as [O/g, m*P], so one sgemm per group reduces over the whole
// slice: dW_grp [O/g, K] = dy_grp x col^T (K = C/g*kH*kW, P = Ho*Wo). Slices run serially into their own
// partial dW and the partials are summed in slice order, so any thread count gives the same bits.
void conv2d_weight_grad_kernel(KernelContext& k) {
  const WeightGradGeom g = weight_grad_geom(k);
  if (k.out(0).numel() == 0) return;
  if (k.out(0).dtype() == DType::f64)
    return loops_conv_weight_grad(g, k.in(0).data<double>(), k.in(1).data<double>(), k.out(0).data<double>());
  float* dw = k.out(0).data<float>();
  const int64_t wsize = k.out(0).numel();
  if (g.n == 0) {
    std::fill(dw, dw + wsize, 0.0f);
    return;
  }
  constexpr int64_t max_slices = 8;
  const int64_t per = (g.n + max_slices - 1) / max_slices, slices = (g.n + per - 1) / per;
  const float* x = k.in(0).data<float>();
  const float* dy = k.in(1).data<float>();
  if (const auto f = direct_weight_grad_geom(g)) {
    std::vector<float> partial(static_cast<size_t>((slices - 1) * wsize));
    parallel_for(slices, [&](int64_t s) {
      const int64_t n0 = s * per;
      direct_weight_grad_slice(*f, x, dy, n0, std::min(g.n, n0 + per) - n0,
                               s == 0 ? dw : partial.data() + (s - 1) * wsize);
    });
    for (int64_t s = 1; s < slices; ++s) {
      const float* q = partial.data() + (s - 1) * wsize;
      for (int64_t i = 0; i < wsize; ++i) dw[i] += q[i];
    }
    return;
  }
  const int64_t og = g.o / g.groups, kk = g.c / g.groups * g.kh * g.kw, p = g.oh * g.ow;
  std::vector<float> partial(static_cast<size_t>((slices - 1) * wsize));
  run_onednn_tasks(slices, [&](int64_t s) {
    float* out = s == 0 ? dw : partial.data() + (s - 1) * wsize;
    const int64_t n0 = s * per, m = std::min(g.n, n0 + per) - n0, ld = m * p;
    // Per-thread scratch, kept between calls: a fresh buffer this size is a fresh mmap whose pages fault in
    // (zero-filled by the kernel) on every call. Every element is written before it is read.
    thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>((kk + og) * ld)) scratch.resize(static_cast<size_t>((kk + og) * ld));
    float* const col_p = scratch.data();
    float* const d_p = col_p + kk * ld;
    struct {
      float* p;
      float* get() const { return p; }
    } col{col_p}, d{d_p};
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      for (int64_t n = 0; n < m; ++n) {
        im2col(g, x + (n0 + n) * g.c * g.h * g.w, grp, col.get() + n * p, ld);
        for (int64_t o = 0; o < og; ++o) {
          const float* src = dy + ((n0 + n) * g.o + grp * og + o) * p;
          std::copy(src, src + p, d.get() + o * ld + n * p);
        }
      }
      const dnnl_status_t st =
          dnnl_sgemm('N', 'T', og, kk, ld, 1.0f, d.get(), ld, col.get(), ld, 0.0f, out + grp * og * kk, kk);
      SPORE_CHECK(st == dnnl_success, ErrorCode::internal, "[conv2d_weight_grad] dnnl_sgemm failed with status {}",
                  static_cast<int>(st));
    }
  });
  for (int64_t s = 1; s < slices; ++s) {
    const float* q = partial.data() + (s - 1) * wsize;
    for (int64_t i = 0; i < wsize; ++i) dw[i] += q[i];
  }
}
void conv2d_weight_grad_low(KernelContext& k) { run_in_f32(k, conv2d_weight_grad_kernel); }

// Plane sum in double: f32 planes in 16 double lanes (element i in lane i % 16, each lane in index order), the lanes
// added in a fixed tree, then the tail in order; f64 planes in index order. A fixed sequence, so independent of
// threads and batch; one double chain was bound by the add latency (squeezenet's 13x13x1000 head: 100 us).
double plane_sum(const float* x, int64_t size) {
  __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= size; i += 16)
    for (int k = 0; k < 4; ++k) a[k] = _mm256_add_pd(a[k], _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * k)));
  const __m256d v = _mm256_add_pd(_mm256_add_pd(a[0], a[1]), _mm256_add_pd(a[2], a[3]));
  alignas(32) double l[4];
  _mm256_store_pd(l, v);
  double s = (l[0] + l[1]) + (l[2] + l[3]);
  for (; i < size; ++i) s += static_cast<double>(x[i]);
  return s;
}
double plane_sum(const double* x, int64_t size) {
  double s = 0;
  for (int64_t i = 0; i < size; ++i) s += x[i];
  return s;
}

// Plane means, summed in double (plane_sum): exact enough for f32 and independent of threads.
template <typename T>
void global_avg_pool_loops(const T* x, T* y, int64_t planes, int64_t size) {
  parallel_for(num_chunks(planes, 16), [&](int64_t chunk) {
    for (int64_t p = chunk * 16; p < std::min(planes, chunk * 16 + 16); ++p)
      y[p] = static_cast<T>(plane_sum(x + p * size, size) / static_cast<double>(size));
  });
}

void global_avg_pool_kernel(KernelContext& k) {
  const int64_t planes = k.in(0).dim(0) * k.in(0).dim(1);
  const int64_t size = planes ? k.in(0).numel() / planes : 0;
  if (k.out(0).dtype() == DType::f64)
    global_avg_pool_loops(k.in(0).data<double>(), k.out(0).data<double>(), planes, size);
  else
    global_avg_pool_loops(k.in(0).data<float>(), k.out(0).data<float>(), planes, size);
}
void global_avg_pool_low(KernelContext& k) { run_in_f32(k, global_avg_pool_kernel); }

}  // namespace

void max_pool_2x2_planes(const float* x, float* y, int64_t planes, int64_t h, int64_t w) {
  PoolGeom g{planes, h, w, h / 2, w / 2, 2, 2, 2, 2, 1, 1, {}, {}, true, false};
  max_pool_2x2_rows(g, x, y, 0, planes * g.oh);  // the max_pool2d kernel's code, on this thread
}

ConvEpilogue*& pending_conv_epilogue() {
  thread_local ConvEpilogue* e = nullptr;
  return e;
}

void register_conv(KernelRegistry& r) {
  r.add(Backend::cpu, "conv2d"_op, {DType::f32, DType::f64}, conv_kernel<false>, "onednn");
  r.add(Backend::cpu, "conv2d"_op, {DType::f16, DType::bf16}, conv_low<false>, "onednn");
  r.add(Backend::cpu, "conv_transpose2d"_op, {DType::f32, DType::f64}, conv_kernel<true>, "onednn");
  r.add(Backend::cpu, "conv_transpose2d"_op, {DType::f16, DType::bf16}, conv_low<true>, "onednn");
  r.add(Backend::cpu, "max_pool2d"_op, {DType::f32, DType::f64}, pool_kernel<true>, "own");
  r.add(Backend::cpu, "max_pool2d"_op, {DType::f16, DType::bf16}, pool_low<true>, "own");
  r.add(Backend::cpu, "avg_pool2d"_op, {DType::f32, DType::f64}, pool_kernel<false>, "own");
  r.add(Backend::cpu, "max_pool2d_grad"_op, {DType::f32, DType::f64}, max_pool2d_grad_kernel, "loops");
  r.add(Backend::cpu, "max_pool2d_grad"_op, {DType::f16, DType::bf16}, max_pool2d_grad_low, "loops");
  r.add(Backend::cpu, "conv2d_weight_grad"_op, {DType::f32, DType::f64}, conv2d_weight_grad_kernel, "onednn");
  r.add(Backend::cpu, "conv2d_weight_grad"_op, {DType::f16, DType::bf16}, conv2d_weight_grad_low, "onednn");
  r.add(Backend::cpu, "avg_pool2d"_op, {DType::f16, DType::bf16}, pool_low<false>, "own");
  r.add(Backend::cpu, "global_avg_pool"_op, {DType::f32, DType::f64}, global_avg_pool_kernel, "loops");
  r.add(Backend::cpu, "global_avg_pool"_op, {DType::f16, DType::bf16}, global_avg_pool_low, "loops");
}

}  // namespace spore::cpu
