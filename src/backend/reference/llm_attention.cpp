// Reference kernels of rope and attention_kv (ops/llm_ops.h): the definitions written out as plain loops in double,
// each result rounded to f32 once. The CPU kernels (backend/cpu/llm_attention.cpp) are checked against these.
#include <cmath>
#include <vector>

#include "backend/reference/families.h"
#include "base/half.h"
#include "ops/llm_kv_quant.h"
#include "ops/llm_ops.h"

namespace spore::reference {
namespace {

// rope: y = x with the first `dim` values of every [T, H, D] row rotated pairwise by p * freq_scale *
// theta^(-2i/dim) / freq_factors[i]; the angle, its cosine and sine and the rotation are all computed in double.
void rope_kernel(KernelContext& k) {
  const Tensor& x = k.in(0);
  const Tensor& pos = k.in(1);
  const float* ff = k.num_inputs() > 2 ? k.in(2).data<float>() : nullptr;
  const int64_t t_n = x.shape()[0], h_n = x.shape()[1], d = x.shape()[2];
  const int64_t rd = k.attrs.i("dim") == 0 ? d : k.attrs.i("dim"), half = rd / 2;
  const bool neox = k.attrs.s("mode") == "neox";
  const double theta = k.attrs.f("theta"), freq_scale = k.attrs.f("freq_scale");
  const float* xs = x.data<float>();
  const int64_t* ps = pos.data<int64_t>();
  float* ys = k.out(0).data<float>();
  for (int64_t t = 0; t < t_n; ++t)
    SPORE_CHECK(ps[t] >= 0, ErrorCode::invalid_argument, "rope: positions[{}] = {} is negative", t, ps[t]);
  for (int64_t t = 0; t < t_n; ++t) {
    for (int64_t h = 0; h < h_n; ++h) {
      const float* xr = xs + (t * h_n + h) * d;
      float* yr = ys + (t * h_n + h) * d;
      for (int64_t e = rd; e < d; ++e) yr[e] = xr[e];
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(ps[t]) * freq_scale *
                             std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rd)) /
                             (ff ? static_cast<double>(ff[i]) : 1.0);
        const int64_t ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        const double a = xr[ia], b = xr[ib], c = std::cos(angle), s = std::sin(angle);
        yr[ia] = static_cast<float>(a * c - b * s);
        yr[ib] = static_cast<float>(a * s + b * c);
      }
    }
  }
}

// attention_kv: splits the tokens into sequences (llm_ops::attention_runs checks the positions and slots), then per
// (token, q head) the causal softmax attention over its slot's cache rows [0, p0) and its sequence's new rows up to
// itself, new rows rounded to the cache dtype. An i8 element stands for llm_ops::kv_dequantize(q, its row's scale);
// new rows are quantized with kv_quantize_row. Padding rows (slot -1) give 0.
void attention_kv_kernel(KernelContext& k) {
  const Tensor& q = k.in(0);
  const Tensor& kc = k.in(1);
  const Tensor& vc = k.in(2);
  const Tensor& kn = k.in(3);
  const Tensor& vn = k.in(4);
  const Tensor& pos = k.in(5);
  const bool pooled = kc.shape().size() == 4;
  const size_t lead = pooled ? 1 : 0;
  const int64_t t_n = q.shape()[0], hq = q.shape()[1], d = q.shape()[2];
  const int64_t hkv = kc.shape()[lead], ctx = kc.shape()[lead + 1];
  if (t_n == 0) return;
  const auto runs = llm_ops::attention_runs(pos.data<int64_t>(),
                                            pooled ? k.in(k.num_inputs() - 1).data<int64_t>() : nullptr, t_n,
                                            pooled ? kc.shape()[0] : 1, ctx);
  const int64_t group = hq / hkv;
  const double scale = k.attrs.f("scale");
  const DType cdt = kc.dtype();
  // An element of the cache, or of a new row rounded to the cache dtype, as double.
  const void* caches[2] = {kc.raw_data(), vc.raw_data()};
  const float* cache_scales[2] = {nullptr, nullptr};
  if (cdt == DType::i8) cache_scales[0] = k.in(6).data<float>(), cache_scales[1] = k.in(7).data<float>();
  const float* news[2] = {kn.data<float>(), vn.data<float>()};
  // i8: the new rows quantized, and their scales.
  std::vector<int8_t> new_q[2];
  std::vector<float> new_scale[2];
  if (cdt == DType::i8)
    for (int w = 0; w < 2; ++w) {
      new_q[w].resize(static_cast<size_t>(t_n * hkv * d));
      new_scale[w].resize(static_cast<size_t>(t_n * hkv));
      for (int64_t r = 0; r < t_n * hkv; ++r)
        new_scale[w][r] = llm_ops::kv_quantize_row(news[w] + r * d, d, new_q[w].data() + r * d);
    }
  const auto cache_at = [&](int which, int64_t i) -> double {
    switch (cdt) {
      case DType::f16: return static_cast<float>(f16::from_bits(static_cast<const uint16_t*>(caches[which])[i]));
      case DType::bf16: return static_cast<float>(bf16::from_bits(static_cast<const uint16_t*>(caches[which])[i]));
      case DType::i8:
        return llm_ops::kv_dequantize(static_cast<const int8_t*>(caches[which])[i], cache_scales[which][i / d]);
      default: return static_cast<const float*>(caches[which])[i];
    }
  };
  const auto new_at = [&](int which, int64_t i) -> double {
    const float v = news[which][i];
    switch (cdt) {
      case DType::f16: return static_cast<float>(f16(v));
      case DType::bf16: return static_cast<float>(bf16(v));
      case DType::i8: return llm_ops::kv_dequantize(new_q[which][i], new_scale[which][i / d]);
      default: return v;
    }
  };
  const float* qs = q.data<float>();
  float* ys = k.out(0).data<float>();
  std::vector<double> s;
  for (const llm_ops::AttentionRun& run : runs) {
    if (run.slot < 0) {
      for (int64_t i = run.first * hq * d; i < (run.first + run.count) * hq * d; ++i) ys[i] = 0.0f;
      continue;
    }
    const int64_t p0 = run.p0;
    // Element e of key (which = 0) or value (which = 1) row j of kv head g, in this run's slot.
    const auto row_at = [&](int which, int64_t g, int64_t j, int64_t e) {
      return j < p0 ? cache_at(which, ((run.slot * hkv + g) * ctx + j) * d + e)
                    : new_at(which, ((run.first + j - p0) * hkv + g) * d + e);
    };
    for (int64_t t = run.first; t < run.first + run.count; ++t) {
      const int64_t n = p0 + (t - run.first) + 1;  // keys 0..P
      s.assign(static_cast<size_t>(n), 0.0);
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / group;
        const float* qr = qs + (t * hq + h) * d;
        double mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(qr[e]) * row_at(0, g, j, e);
          s[j] = scale * dot;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t e = 0; e < d; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += s[j] * row_at(1, g, j, e);
          ys[(t * hq + h) * d + e] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

}  // namespace

void register_llm_attention(KernelRegistry& r) {
  r.add(Backend::reference, "rope"_op, DTypeSet{DType::f32}, rope_kernel);
  r.add(Backend::reference, "attention_kv"_op, DTypeSet{DType::f32}, attention_kv_kernel);
}

}  // namespace spore::reference
