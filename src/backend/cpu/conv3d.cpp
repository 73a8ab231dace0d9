// CPU kernels of the 3-D conv family (ops/conv3d.h) over NCDHW. f32 convolution, deconvolution and the weight
// gradient run oneDNN's 3-D primitives (cached per shape; constant weights reordered once, as conv.cpp does for
// 2-D); f64 runs plain loops parallel over output planes; f16/bf16 are staged through f32. Pooling is plain loops
// parallel over (image, channel) planes, with each window's bounds clipped once per axis. None of this touches the
// 2-D kernels (conv.cpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include <omp.h>

#include "backend/cpu/constant_cache.h"
#include "backend/cpu/families.h"
#include "backend/cpu/onednn_util.h"
#include "base/thread_pool.h"

namespace spore::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// One axis of a sliding window: input and output sizes, kernel, stride, dilation, begin/end pads (resolved).
struct Axis {
  int64_t in, out, k, s, d, pb, pe;
};

struct Geom3 {
  int64_t n, c, o, groups;
  Axis ax[3];
};

// Pads as shape inference resolves them ("same": SAME_UPPER; "valid": none); transposed convs take them as given.
Geom3 geom3(const Shape& xs, const Shape& ys, const int64_t* kernel, const Attrs& a, bool dilated, bool resolve) {
  Geom3 g{};
  g.n = xs[0];
  g.c = xs[1];
  g.o = ys[1];
  g.groups = a.has("groups") ? a.i("groups") : 1;
  const auto& stride = a.ints("stride");
  const auto& p = a.ints("padding");
  const AttrValue* mode_attr = a.find("pad_mode");
  const std::string mode = resolve && mode_attr ? std::get<std::string>(*mode_attr) : "pad";
  for (int i = 0; i < 3; ++i) {
    Axis& x = g.ax[i];
    x = {xs[2 + i], ys[2 + i], kernel[i], stride.empty() ? kernel[i] : stride[i], dilated ? a.ints("dilation")[i] : 1,
         p[i],      p[3 + i]};
    if (mode == "valid") {
      x.pb = x.pe = 0;
    } else if (mode == "same") {
      const int64_t eff = (x.k - 1) * x.d + 1, out = (x.in + x.s - 1) / x.s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * x.s + eff - x.in);
      x.pb = total / 2;
      x.pe = total - total / 2;
    }
  }
  return g;
}

const int64_t* spatial(const Shape& s) { return s.data() + 2; }

std::string geom_key(const Geom3& g, DType t, bool bias, char kind) {
  std::string k = fmt::format("{}{}:{},{},{},{},{}", kind, static_cast<int>(t), g.n, g.c, g.o, g.groups, bias);
  for (const Axis& a : g.ax) k += fmt::format(":{},{},{},{},{},{},{}", a.in, a.out, a.k, a.s, a.d, a.pb, a.pe);
  return k;
}

memory::dims dims5(int64_t n, int64_t c, const Geom3& g, bool out) {
  return {n, c, out ? g.ax[0].out : g.ax[0].in, out ? g.ax[1].out : g.ax[1].in, out ? g.ax[2].out : g.ax[2].in};
}

// Weights as oneDNN's logical (g,)oc,ic,kd,kh,kw over our buffer (conv: [O, C/g, k...]; transposed conv:
// [C, O/g, k...], ic before oc), described by strides so nothing is copied.
memory::desc weights_md(const Geom3& g, memory::data_type dt, bool transpose) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups;
  const int64_t kd = g.ax[0].k, kh = g.ax[1].k, kw = g.ax[2].k, ks = kd * kh * kw;
  const int64_t oc_stride = transpose ? ks : cg * ks, ic_stride = transpose ? og * ks : ks;
  if (g.groups == 1) return memory::desc({og, cg, kd, kh, kw}, dt, {oc_stride, ic_stride, kh * kw, kw, 1});
  return memory::desc({g.groups, og, cg, kd, kh, kw}, dt, {og * cg * ks, oc_stride, ic_stride, kh * kw, kw, 1});
}

struct Prim {
  memory::desc user_src, user_wei, user_dst, src, wei, dst, bias;
  dnnl::primitive prim;
  const char* impl = "onednn";
};

// Forward conv (transpose = false) or deconvolution over plain NCDHW buffers; oneDNN picks its layouts.
Prim make_fwd(const Geom3& g, bool bias, bool transpose) {
  const memory::data_type dt = memory::data_type::f32;
  Prim p;
  p.user_src = memory::desc(dims5(g.n, g.c, g, false), dt, tag::ncdhw);
  p.user_dst = memory::desc(dims5(g.n, g.o, g, true), dt, tag::ncdhw);
  p.user_wei = weights_md(g, dt, transpose);
  if (bias) p.bias = memory::desc({g.o}, dt, tag::x);
  const memory::desc src_any(p.user_src.dims(), dt, tag::any), dst_any(p.user_dst.dims(), dt, tag::any),
      wei_any(p.user_wei.dims(), dt, tag::any);
  memory::dims strides, dilation, pad_l, pad_r;
  for (const Axis& a : g.ax) {
    strides.push_back(a.s);
    dilation.push_back(a.d - 1);
    pad_l.push_back(a.pb);
    pad_r.push_back(a.pe);
  }
  const auto prop = dnnl::prop_kind::forward_inference;
  const auto finish = [&](const auto& pd) {
    p.impl = onednn_impl_name(pd.impl_info_str());
    p.src = pd.src_desc();
    p.wei = pd.weights_desc();
    p.dst = pd.dst_desc();
  };
  if (transpose) {
    const auto d = bias ? dnnl::deconvolution_forward::desc(prop, dnnl::algorithm::deconvolution_direct, src_any,
                                                            wei_any, p.bias, dst_any, strides, dilation, pad_l, pad_r)
                        : dnnl::deconvolution_forward::desc(prop, dnnl::algorithm::deconvolution_direct, src_any,
                                                            wei_any, dst_any, strides, dilation, pad_l, pad_r);
    const dnnl::deconvolution_forward::primitive_desc pd(d, dnnl_engine());
    finish(pd);
    p.prim = dnnl::deconvolution_forward(pd);
  } else {
    const auto d = bias ? dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, src_any, wei_any,
                                                          p.bias, dst_any, strides, dilation, pad_l, pad_r)
                        : dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, src_any, wei_any,
                                                          dst_any, strides, dilation, pad_l, pad_r);
    const dnnl::convolution_forward::primitive_desc pd(d, dnnl_engine());
    finish(pd);
    p.prim = dnnl::convolution_forward(pd);
  }
  return p;
}

std::optional<Prim> fwd_prim(const Geom3& g, bool bias, bool transpose, const std::string& key) {
  static PrimitiveCache<std::optional<Prim>> cache;
  return cache.get(key, [&]() -> std::optional<Prim> {
    try {
      return make_fwd(g, bias, transpose);
    } catch (const dnnl::error& e) {
      onednn_declined(e, transpose ? "conv_transpose3d" : "conv3d");
      return std::nullopt;
    }
  });
}

// Runs a forward primitive, reordering user buffers in and out where oneDNN chose other layouts. Constant weights
// (w_owner set) keep their reordered copy in the constant cache under the primitive's key.
void exec_fwd(const Prim& p, const Tensor& x, const Tensor& w, const Tensor* b, const Tensor& y,
              const std::shared_ptr<Storage>& w_owner, const std::string& key) {
  note_kernel_impl(p.impl);
  dnnl::stream& s = dnnl_stream();
  thread_local std::vector<char> src_buf, wei_buf, dst_buf;
  memory xs = user_memory(p.user_src, x), ws = user_memory(p.user_wei, w), ys = user_memory(p.user_dst, y);
  memory xm = xs, wm = ws, ym = ys;
  if (p.src != p.user_src) {
    xm = scratch_memory(p.src, src_buf);
    dnnl::reorder(xs, xm).execute(s, xs, xm);
  }
  std::shared_ptr<Storage> kept;
  if (p.wei != p.user_wei) {
    kept = constant_derived(w_owner, w.raw_data(), fmt::format("onednn_conv3d_weights:{}", key), p.wei.get_size(),
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

// f64 (and f32 where oneDNN declines): one task per output (image, channel) plane, taps added in (c, kd, kh, kw)
// order. transpose: the gather form, out[z] takes x[iz] wherever z + pad - a*dil == iz*stride.
template <typename T>
void loops_conv(const Geom3& g, bool transpose, const T* x, const T* w, const T* b, T* y) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups;
  const int64_t in_vol = g.ax[0].in * g.ax[1].in * g.ax[2].in, out_vol = g.ax[0].out * g.ax[1].out * g.ax[2].out;
  const int64_t ks = g.ax[0].k * g.ax[1].k * g.ax[2].k;
  parallel_for(g.n * g.o, [&](int64_t plane) {
    const int64_t n = plane / g.o, oc = plane % g.o, grp = oc / og;
    T* out = y + plane * out_vol;
    for (int64_t i = 0; i < out_vol; ++i) out[i] = b ? b[oc] : T(0);
    for (int64_t ic = 0; ic < cg; ++ic) {
      const int64_t xc = grp * cg + ic;
      const T* in = x + (n * g.c + xc) * in_vol;
      const T* wk = transpose ? w + (xc * og + oc % og) * ks : w + (oc * cg + ic) * ks;
      for (int64_t t = 0; t < ks; ++t) {
        const int64_t tap[3] = {t / (g.ax[1].k * g.ax[2].k), t / g.ax[2].k % g.ax[1].k, t % g.ax[2].k};
        const T wv = wk[t];
        int64_t o3[3];
        for (o3[0] = 0; o3[0] < g.ax[0].out; ++o3[0])
          for (o3[1] = 0; o3[1] < g.ax[1].out; ++o3[1])
            for (o3[2] = 0; o3[2] < g.ax[2].out; ++o3[2]) {
              int64_t src = 0;
              bool ok = true;
              for (int e = 0; ok && e < 3; ++e) {
                const Axis& a = g.ax[e];
                int64_t i;
                if (transpose) {
                  const int64_t u = o3[e] + a.pb - tap[e] * a.d;
                  ok = u >= 0 && u % a.s == 0;
                  i = u / a.s;
                } else {
                  i = o3[e] * a.s - a.pb + tap[e] * a.d;
                }
                ok = ok && i >= 0 && i < a.in;
                src = src * a.in + i;
              }
              if (ok) out[(o3[0] * g.ax[1].out + o3[1]) * g.ax[2].out + o3[2]] += in[src] * wv;
            }
      }
    }
  });
}

template <bool transpose>
void conv3d_kernel(KernelContext& k) {
  const Shape& ws = k.in(1).shape();
  const Geom3 g = geom3(k.in(0).shape(), k.out(0).shape(), spatial(ws), k.attrs, true, !transpose);
  const Tensor* bias = k.num_inputs() > 2 ? &k.in(2) : nullptr;
  if (k.out(0).numel() == 0) return;
  if (k.out(0).dtype() == DType::f64) {
    loops_conv(g, transpose, k.in(0).data<double>(), k.in(1).data<double>(), bias ? bias->data<double>() : nullptr,
               k.out(0).data<double>());
    return;
  }
  Geom3 dg = g;
  if (transpose) {  // oneDNN's output size has no output_padding: it goes into (possibly negative) end padding
    const auto& op = k.attrs.ints("output_padding");
    for (int i = 0; i < 3; ++i) dg.ax[i].pe -= op[i];
  }
  const std::string key = geom_key(dg, DType::f32, bias != nullptr, transpose ? 't' : 'c');
  if (const auto p = fwd_prim(dg, bias != nullptr, transpose, key)) {
    exec_fwd(*p, k.in(0), k.in(1), bias, k.out(0), (k.constant_inputs >> 1) & 1 ? k.in(1).storage() : nullptr, key);
    return;
  }
  note_kernel_impl("loops");
  loops_conv(g, transpose, k.in(0).data<float>(), k.in(1).data<float>(), bias ? bias->data<float>() : nullptr,
             k.out(0).data<float>());
}
template <bool transpose>
void conv3d_low(KernelContext& k) {
  run_in_f32(k, conv3d_kernel<transpose>);
}

// ---- weight gradient
// f32: oneDNN's backward-weights primitive, run on fixed batch slices (their number depends on N alone), each
// slice single-threaded inside one task (run_onednn_tasks) into its own partial dW; the partials are added in
// slice order, so the bits do not depend on the thread count. Slices of one size share a primitive and run at the
// same time, so its scratchpad is the caller's (scratchpad_mode::user): a library-managed one is shared by concurrent
// executions of one primitive.
struct WgradPrim {
  memory::desc src, dst, wei;  // plain user layouts of one slice
  dnnl::primitive prim;
  memory::desc src_p, dst_p, wei_p, scratch;  // the primitive's
};

WgradPrim make_wgrad(const Geom3& g, int64_t m) {
  const memory::data_type dt = memory::data_type::f32;
  WgradPrim p;
  p.src = memory::desc(dims5(m, g.c, g, false), dt, tag::ncdhw);
  p.dst = memory::desc(dims5(m, g.o, g, true), dt, tag::ncdhw);
  p.wei = weights_md(g, dt, false);
  const memory::desc src_any(p.src.dims(), dt, tag::any), dst_any(p.dst.dims(), dt, tag::any),
      wei_any(p.wei.dims(), dt, tag::any);
  memory::dims strides, dilation, pad_l, pad_r;
  for (const Axis& a : g.ax) {
    strides.push_back(a.s);
    dilation.push_back(a.d - 1);
    pad_l.push_back(a.pb);
    pad_r.push_back(a.pe);
  }
  const dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                           src_any, wei_any, dst_any, strides, dilation, pad_l, pad_r);
  const dnnl::convolution_forward::primitive_desc fpd(fd, dnnl_engine());
  const dnnl::convolution_backward_weights::desc bd(dnnl::algorithm::convolution_direct, src_any, wei_any, dst_any,
                                                    strides, dilation, pad_l, pad_r);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::convolution_backward_weights::primitive_desc pd(bd, attr, dnnl_engine(), fpd);
  p.scratch = pd.scratchpad_desc();
  p.src_p = pd.src_desc();
  p.dst_p = pd.diff_dst_desc();
  p.wei_p = pd.diff_weights_desc();
  p.prim = dnnl::convolution_backward_weights(pd);
  return p;
}

template <typename T>
void loops_weight_grad(const Geom3& g, const T* x, const T* dy, T* dw) {
  const int64_t og = g.o / g.groups, cg = g.c / g.groups;
  const int64_t in_vol = g.ax[0].in * g.ax[1].in * g.ax[2].in, out_vol = g.ax[0].out * g.ax[1].out * g.ax[2].out;
  const int64_t ks = g.ax[0].k * g.ax[1].k * g.ax[2].k;
  parallel_for(g.o * cg, [&](int64_t row) {
    const int64_t oc = row / cg, ic = row % cg, xc = (oc / og) * cg + ic;
    for (int64_t t = 0; t < ks; ++t) {
      const int64_t tap[3] = {t / (g.ax[1].k * g.ax[2].k), t / g.ax[2].k % g.ax[1].k, t % g.ax[2].k};
      T s = 0;
      for (int64_t n = 0; n < g.n; ++n) {
        const T* in = x + (n * g.c + xc) * in_vol;
        const T* d = dy + (n * g.o + oc) * out_vol;
        int64_t o3[3];
        for (o3[0] = 0; o3[0] < g.ax[0].out; ++o3[0])
          for (o3[1] = 0; o3[1] < g.ax[1].out; ++o3[1])
            for (o3[2] = 0; o3[2] < g.ax[2].out; ++o3[2]) {
              int64_t src = 0;
              bool ok = true;
              for (int e = 0; ok && e < 3; ++e) {
                const int64_t i = o3[e] * g.ax[e].s - g.ax[e].pb + tap[e] * g.ax[e].d;
                ok = i >= 0 && i < g.ax[e].in;
                src = src * g.ax[e].in + i;
              }
              if (ok) s += d[(o3[0] * g.ax[1].out + o3[1]) * g.ax[2].out + o3[2]] * in[src];
            }
      }
      dw[row * ks + t] = s;
    }
  });
}

void conv3d_weight_grad_kernel(KernelContext& k) {
  const Shape& ws = k.out(0).shape();
  const Geom3 g = geom3(k.in(0).shape(), k.in(1).shape(), spatial(ws), k.attrs, true, false);
  if (k.out(0).numel() == 0) return;
  if (k.out(0).dtype() == DType::f64) {
    loops_weight_grad(g, k.in(0).data<double>(), k.in(1).data<double>(), k.out(0).data<double>());
    return;
  }
  float* dw = k.out(0).data<float>();
  const int64_t wsize = k.out(0).numel();
  if (g.n == 0) {
    std::fill(dw, dw + wsize, 0.0f);
    return;
  }
  const int64_t slices = std::min<int64_t>(g.n, 8);
  const auto slice_start = [&](int64_t s) { return s * (g.n / slices) + std::min(s, g.n % slices); };
  // Slices differ in size by at most one image: at most two primitives.
  static PrimitiveCache<std::optional<WgradPrim>> cache;
  const auto prim_for = [&](int64_t m) {
    return cache.get(geom_key(g, DType::f32, false, 'w') + fmt::format(":m{}", m), [&]() -> std::optional<WgradPrim> {
      // Made for one thread, as it runs (inside a task): oneDNN sizes its thread partition (and barriers) when the
      // primitive is created, and one made for the whole team hung waiting for threads a task does not have.
      const int saved = omp_get_max_threads();
      omp_set_num_threads(1);
      std::optional<WgradPrim> made;
      try {
        made = make_wgrad(g, m);
      } catch (const dnnl::error& e) {
        omp_set_num_threads(saved);
        onednn_declined(e, "conv3d_weight_grad");
        return std::nullopt;
      }
      omp_set_num_threads(saved);
      return made;
    });
  };
  const auto p0 = prim_for(slice_start(1) - slice_start(0));
  const auto p1 = prim_for(slice_start(slices) - slice_start(slices - 1));
  if (!p0 || !p1) {
    note_kernel_impl("loops");
    loops_weight_grad(g, k.in(0).data<float>(), k.in(1).data<float>(), dw);
    return;
  }
  note_kernel_impl("onednn:conv_bwd_weights");
  std::vector<float> partial(static_cast<size_t>(wsize * slices));
  const float* x = k.in(0).data<float>();
  const float* dy = k.in(1).data<float>();
  const int64_t in_img = g.c * g.ax[0].in * g.ax[1].in * g.ax[2].in;
  const int64_t out_img = g.o * g.ax[0].out * g.ax[1].out * g.ax[2].out;
  run_onednn_tasks(slices, [&](int64_t s) {
    const int64_t n0 = slice_start(s), m = slice_start(s + 1) - n0;
    const WgradPrim& p = m == slice_start(1) - slice_start(0) ? *p0 : *p1;
    dnnl::stream& st = dnnl_stream();
    std::vector<char> sb, db, wb, pb;
    memory xs(p.src, dnnl_engine(), const_cast<float*>(x + n0 * in_img));
    memory ds(p.dst, dnnl_engine(), const_cast<float*>(dy + n0 * out_img));
    memory wsm(p.wei, dnnl_engine(), partial.data() + s * wsize);
    memory xm = xs, dm = ds, wm = wsm;
    if (p.src_p != p.src) {
      xm = scratch_memory(p.src_p, sb);
      dnnl::reorder(xs, xm).execute(st, xs, xm);
    }
    if (p.dst_p != p.dst) {
      dm = scratch_memory(p.dst_p, db);
      dnnl::reorder(ds, dm).execute(st, ds, dm);
    }
    if (p.wei_p != p.wei) wm = scratch_memory(p.wei_p, wb);
    p.prim.execute(st, {{DNNL_ARG_SRC, xm},
                        {DNNL_ARG_DIFF_DST, dm},
                        {DNNL_ARG_DIFF_WEIGHTS, wm},
                        {DNNL_ARG_SCRATCHPAD, scratch_memory(p.scratch, pb)}});
    if (p.wei_p != p.wei) dnnl::reorder(wm, wsm).execute(st, wm, wsm);
    st.wait();
  });
  for (int64_t i = 0; i < wsize; ++i) {
    float s = partial[static_cast<size_t>(i)];
    for (int64_t sl = 1; sl < slices; ++sl) s += partial[static_cast<size_t>(sl * wsize + i)];
    dw[i] = s;
  }
}
void conv3d_weight_grad_low(KernelContext& k) { run_in_f32(k, conv3d_weight_grad_kernel); }

// ---- pooling: one task per chunk of (image, channel) planes. Each window is clipped to the input once per axis
// (padded positions never count), and folded in (kd, kh, kw) order: max by the 2-D rule (NaN wins, else strictly
// larger), average summed in double and divided once.
struct Clip {
  int64_t lo, hi;  // the window's first and past-the-last tap inside the input
  int64_t base;    // input index of tap 0
  int64_t div;     // count_include_pad's extent: the window clipped to the padded input
};

Clip clip(const Axis& a, int64_t o) {
  const int64_t b0 = o * a.s - a.pb;
  Clip c{0, a.k, b0, std::min(b0 + a.k, a.in + a.pe) - b0};
  while (c.lo < c.hi && b0 + c.lo * a.d < 0) ++c.lo;
  while (c.hi > c.lo && b0 + (c.hi - 1) * a.d >= a.in) --c.hi;
  return c;
}

template <typename T, bool is_max>
void loops_pool(const Geom3& g, bool include_pad, const T* x, T* y) {
  const Axis &A = g.ax[0], &B = g.ax[1], &C = g.ax[2];
  const int64_t in_vol = A.in * B.in * C.in, out_vol = A.out * B.out * C.out;
  std::vector<Clip> cz, cy, cx;
  for (int64_t o = 0; o < A.out; ++o) cz.push_back(clip(A, o));
  for (int64_t o = 0; o < B.out; ++o) cy.push_back(clip(B, o));
  for (int64_t o = 0; o < C.out; ++o) cx.push_back(clip(C, o));
  const int64_t planes = g.n * g.c;
  parallel_for(num_chunks(planes, 4), [&](int64_t chunk) {
    for (int64_t p = chunk * 4; p < std::min(planes, chunk * 4 + 4); ++p) {
      const T* in = x + p * in_vol;
      T* out = y + p * out_vol;
      for (int64_t z = 0; z < A.out; ++z)
        for (int64_t r = 0; r < B.out; ++r)
          for (int64_t v = 0; v < C.out; ++v) {
            const Clip &a = cz[z], &b = cy[r], &c = cx[v];
            if constexpr (is_max) {
              T acc = -std::numeric_limits<T>::infinity();
              for (int64_t i = a.lo; i < a.hi; ++i)
                for (int64_t j = b.lo; j < b.hi; ++j) {
                  const T* row = in + ((a.base + i * A.d) * B.in + b.base + j * B.d) * C.in + c.base;
                  for (int64_t l = c.lo; l < c.hi; ++l) {
                    const T val = row[l * C.d];
                    acc = (val != val || val > acc) ? val : acc;
                  }
                }
              *out++ = acc;
            } else {
              double acc = 0;
              for (int64_t i = a.lo; i < a.hi; ++i)
                for (int64_t j = b.lo; j < b.hi; ++j) {
                  const T* row = in + ((a.base + i) * B.in + b.base + j) * C.in + c.base;
                  for (int64_t l = c.lo; l < c.hi; ++l) acc += static_cast<double>(row[l]);
                }
              const int64_t n = include_pad ? a.div * b.div * c.div : (a.hi - a.lo) * (b.hi - b.lo) * (c.hi - c.lo);
              *out++ = static_cast<T>(acc / static_cast<double>(n));
            }
          }
    }
  });
}

template <bool is_max>
void pool3d_kernel(KernelContext& k) {
  const Geom3 g = geom3(k.in(0).shape(), k.out(0).shape(), k.attrs.ints("kernel").data(), k.attrs, is_max, true);
  const bool include_pad = !is_max && k.attrs.b("count_include_pad");
  if (k.out(0).dtype() == DType::f64)
    loops_pool<double, is_max>(g, include_pad, k.in(0).data<double>(), k.out(0).data<double>());
  else loops_pool<float, is_max>(g, include_pad, k.in(0).data<float>(), k.out(0).data<float>());
}
template <bool is_max>
void pool3d_low(KernelContext& k) {
  run_in_f32(k, pool3d_kernel<is_max>);
}

// dx: one task per plane; windows scanned in output order, each dy added to the element its window selected.
template <typename T>
void loops_max_pool_grad(const Geom3& g, const T* x, const T* dy, T* dx) {
  const Axis &A = g.ax[0], &B = g.ax[1], &C = g.ax[2];
  const int64_t in_vol = A.in * B.in * C.in, out_vol = A.out * B.out * C.out;
  std::vector<Clip> cz, cy, cx;
  for (int64_t o = 0; o < A.out; ++o) cz.push_back(clip(A, o));
  for (int64_t o = 0; o < B.out; ++o) cy.push_back(clip(B, o));
  for (int64_t o = 0; o < C.out; ++o) cx.push_back(clip(C, o));
  parallel_for(g.n * g.c, [&](int64_t p) {
    const T* in = x + p * in_vol;
    const T* d = dy + p * out_vol;
    T* out = dx + p * in_vol;
    std::fill(out, out + in_vol, T(0));
    for (int64_t z = 0; z < A.out; ++z)
      for (int64_t r = 0; r < B.out; ++r)
        for (int64_t v = 0; v < C.out; ++v, ++d) {
          const Clip &a = cz[z], &b = cy[r], &c = cx[v];
          int64_t arg = -1;
          for (int64_t i = a.lo; i < a.hi; ++i)
            for (int64_t j = b.lo; j < b.hi; ++j)
              for (int64_t l = c.lo; l < c.hi; ++l) {
                const int64_t at = ((a.base + i * A.d) * B.in + b.base + j * B.d) * C.in + c.base + l * C.d;
                if (arg < 0 || in[at] != in[at] || in[at] > in[arg]) arg = at;
              }
          if (arg >= 0) out[arg] += *d;
        }
  });
}

void max_pool3d_grad_kernel(KernelContext& k) {
  const Geom3 g = geom3(k.in(0).shape(), k.in(1).shape(), k.attrs.ints("kernel").data(), k.attrs, true, true);
  if (k.out(0).dtype() == DType::f64)
    loops_max_pool_grad(g, k.in(0).data<double>(), k.in(1).data<double>(), k.out(0).data<double>());
  else loops_max_pool_grad(g, k.in(0).data<float>(), k.in(1).data<float>(), k.out(0).data<float>());
}
void max_pool3d_grad_low(KernelContext& k) { run_in_f32(k, max_pool3d_grad_kernel); }

}  // namespace

void register_conv3d(KernelRegistry& r) {
  r.add(Backend::cpu, "conv3d"_op, {DType::f32, DType::f64}, conv3d_kernel<false>, "onednn");
  r.add(Backend::cpu, "conv3d"_op, {DType::f16, DType::bf16}, conv3d_low<false>, "onednn");
  r.add(Backend::cpu, "conv_transpose3d"_op, {DType::f32, DType::f64}, conv3d_kernel<true>, "onednn");
  r.add(Backend::cpu, "conv_transpose3d"_op, {DType::f16, DType::bf16}, conv3d_low<true>, "onednn");
  r.add(Backend::cpu, "conv3d_weight_grad"_op, {DType::f32, DType::f64}, conv3d_weight_grad_kernel, "onednn");
  r.add(Backend::cpu, "conv3d_weight_grad"_op, {DType::f16, DType::bf16}, conv3d_weight_grad_low, "onednn");
  r.add(Backend::cpu, "max_pool3d"_op, {DType::f32, DType::f64}, pool3d_kernel<true>, "loops");
  r.add(Backend::cpu, "max_pool3d"_op, {DType::f16, DType::bf16}, pool3d_low<true>, "loops");
  r.add(Backend::cpu, "avg_pool3d"_op, {DType::f32, DType::f64}, pool3d_kernel<false>, "loops");
  r.add(Backend::cpu, "avg_pool3d"_op, {DType::f16, DType::bf16}, pool3d_low<false>, "loops");
  r.add(Backend::cpu, "max_pool3d_grad"_op, {DType::f32, DType::f64}, max_pool3d_grad_kernel, "loops");
  r.add(Backend::cpu, "max_pool3d_grad"_op, {DType::f16, DType::bf16}, max_pool3d_grad_low, "loops");
}

}  // namespace spore::cpu
