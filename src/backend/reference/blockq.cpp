// Reference kernels of linear_blockq and embed_blockq (ops/llm_ops.h): plain loops, the definition the cpu
// kernels are checked against.
//
// linear_blockq, per row x of [..., K] and weight row n:
//   q8_0 / q4_0  x is first quantized to Q8_0 blocks as llama.cpp's quantize_row_q8_0 does: per 32 values
//                amax = max |x|, d = amax / 127 (f32), id = amax ? 127 / amax : 0, q = x * id rounded to nearest, ties
//                to even (llama.cpp's x86 code, which is what it runs here), d stored as f16. Then y = sum over blocks b of f32(dw_b) * f32(dx_b) * (sum of the 32
//                integer products qw * qx), Q4_0 weights being nibble - 8.
//   f16 / bf16   x is rounded to the weight dtype (nearest even), y = sum of the products.
//   f32          y = sum of x * w.
// Sums run in double (exact integer dots, exact products of the rounded values) and are rounded to f32 once, after
// adding the bias: the cpu kernel differs from this only by its f32 summation.
// embed_blockq: rows of the table dequantized to f32 (d * q, d * (nibble - 8), the f16/bf16 value); exact in f32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/reference/families.h"
#include "base/half.h"
#include "ops/llm_ops.h"

namespace spore::reference {
namespace {

using llm_ops::WeightFormat;
using llm_ops::qk;

WeightFormat format_of(const KernelContext& k) { return llm_ops::format_of(k.attrs); }

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Value j (0..31) of the weight block at p, as an integer, and the block scale.
int block_value(WeightFormat f, const uint8_t* p, int j) {
  if (f == WeightFormat::q8_0) return static_cast<int8_t>(p[2 + j]);
  const uint8_t b = p[2 + (j & 15)];
  return (j < 16 ? (b & 0x0f) : (b >> 4)) - 8;
}

// One row of K values quantized to Q8_0: q[K] and the f32 value of each block's f16 scale.
void quantize_row_q8_0(const float* x, int64_t k, int8_t* q, float* d) {
  for (int64_t b = 0; b < k / qk; ++b) {
    const float* xb = x + b * qk;
    float amax = 0.0f;
    for (int j = 0; j < qk; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float db = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < qk; ++j) q[b * qk + j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));  // ties to even
    d[b] = half_bits_to_float(float_to_half_bits(db));
  }
}

// y = x w^T (+ bias) for one weight.
void linear_one(WeightFormat f, const Tensor& x, const Tensor& w, const float* bias, Tensor& out) {
  const int64_t n_out = w.dim(0);
  const int64_t kk = x.dim(-1);
  int64_t m = 1;
  for (int i = 0; i + 1 < x.rank(); ++i) m *= x.dim(i);
  const float* xp = x.data<float>();
  float* y = out.data<float>();
  const auto* wp = static_cast<const uint8_t*>(w.raw_data());
  const int64_t wrow = llm_ops::row_bytes(f, kk);
  std::vector<int8_t> xq(static_cast<size_t>(kk));
  std::vector<float> xd(static_cast<size_t>(kk / qk));
  std::vector<float> xr(static_cast<size_t>(kk));
  for (int64_t r = 0; r < m; ++r) {
    const float* xrow = xp + r * kk;
    const bool quant = f == WeightFormat::q8_0 || f == WeightFormat::q4_0;
    if (quant) quantize_row_q8_0(xrow, kk, xq.data(), xd.data());
    for (int64_t i = 0; i < kk; ++i)
      xr[i] = f == WeightFormat::f16 ? static_cast<float>(f16(xrow[i]))
              : f == WeightFormat::bf16 ? static_cast<float>(bf16(xrow[i]))
                                        : xrow[i];
    for (int64_t n = 0; n < n_out; ++n) {
      const uint8_t* wr = wp + n * wrow;
      double s = 0.0;
      if (quant) {
        const int64_t bb = f == WeightFormat::q8_0 ? llm_ops::q8_0_block_bytes : llm_ops::q4_0_block_bytes;
        for (int64_t b = 0; b < kk / qk; ++b) {
          const uint8_t* blk = wr + b * bb;
          int64_t dot = 0;
          for (int j = 0; j < qk; ++j) dot += static_cast<int64_t>(block_value(f, blk, j)) * xq[b * qk + j];
          s += static_cast<double>(half_bits_to_float(load_u16(blk))) * static_cast<double>(xd[b]) *
               static_cast<double>(dot);
        }
      } else {
        for (int64_t i = 0; i < kk; ++i) {
          float wv;
          if (f == WeightFormat::f32) std::memcpy(&wv, wr + 4 * i, 4);
          else if (f == WeightFormat::f16) wv = half_bits_to_float(load_u16(wr + 2 * i));
          else wv = bf16_bits_to_float(load_u16(wr + 2 * i));
          s += static_cast<double>(xr[i]) * static_cast<double>(wv);
        }
      }
      if (bias) s += static_cast<double>(bias[n]);
      y[r * n_out + n] = static_cast<float>(s);
    }
  }
}

void linear_blockq_kernel(KernelContext& k) {
  linear_one(format_of(k), k.in(0), k.in(1), k.num_inputs() > 2 ? k.in(2).data<float>() : nullptr, k.out(0));
}

// linear_blockq_multi is linear_blockq per weight (its definition); epilogue silu_mul is then the reference
// backend's silu (double, rounded to f32) and mul of the two.
void linear_blockq_multi_kernel(KernelContext& k) {
  const int count = static_cast<int>(k.attrs.i("count"));
  const bool bias = k.num_inputs() > 1 + count;
  const bool glu = !k.attrs.s("epilogue").empty();
  std::vector<Tensor> ys;
  for (int i = 0; i < count; ++i) {
    Tensor y = glu ? Tensor::empty(k.out(0).shape(), DType::f32) : k.out(i);
    linear_one(format_of(k), k.in(0), k.in(1 + i), bias ? k.in(1 + count + i).data<float>() : nullptr, y);
    ys.push_back(y);
  }
  if (!glu) return;
  const float* g = ys[0].data<float>();
  const float* u = ys[1].data<float>();
  float* y = k.out(0).data<float>();
  for (int64_t i = 0; i < k.out(0).numel(); ++i) {
    const double gd = g[i];
    const auto s = static_cast<float>(gd / (1.0 + std::exp(-gd)));
    y[i] = static_cast<float>(static_cast<double>(s) * static_cast<double>(u[i]));
  }
}

void embed_blockq_kernel(KernelContext& k) {
  const WeightFormat f = format_of(k);
  const Tensor& w = k.in(0);
  const Tensor& ids = k.in(1);
  const int64_t v = w.dim(0);
  const int64_t kk = k.out(0).dim(-1);
  const int64_t wrow = llm_ops::row_bytes(f, kk);
  const auto* wp = static_cast<const uint8_t*>(w.raw_data());
  float* y = k.out(0).data<float>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const int64_t id = ids.dtype() == DType::i64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i];
    SPORE_CHECK(id >= 0 && id < v, ErrorCode::invalid_argument,
                "embed_blockq: id {} at index {} is out of range for a table of {} rows", id, i, v);
    const uint8_t* wr = wp + id * wrow;
    float* yr = y + i * kk;
    switch (f) {
      case WeightFormat::f32: std::memcpy(yr, wr, static_cast<size_t>(kk) * 4); break;
      case WeightFormat::f16:
        for (int64_t j = 0; j < kk; ++j) yr[j] = half_bits_to_float(load_u16(wr + 2 * j));
        break;
      case WeightFormat::bf16:
        for (int64_t j = 0; j < kk; ++j) yr[j] = bf16_bits_to_float(load_u16(wr + 2 * j));
        break;
      case WeightFormat::q8_0:
      case WeightFormat::q4_0: {
        const int64_t bb = f == WeightFormat::q8_0 ? llm_ops::q8_0_block_bytes : llm_ops::q4_0_block_bytes;
        for (int64_t b = 0; b < kk / qk; ++b) {
          const uint8_t* blk = wr + b * bb;
          const float d = half_bits_to_float(load_u16(blk));
          for (int j = 0; j < qk; ++j) yr[b * qk + j] = d * static_cast<float>(block_value(f, blk, j));
        }
        break;
      }
    }
  }
}

}  // namespace

void register_blockq(KernelRegistry& r) {
  r.add(Backend::reference, "linear_blockq"_op, DTypeSet{DType::f32}, linear_blockq_kernel);
  r.add(Backend::reference, "linear_blockq_multi"_op, DTypeSet{DType::f32}, linear_blockq_multi_kernel);
  r.add(Backend::reference, "embed_blockq"_op, DTypeSet{DType::f32, DType::f16, DType::bf16, DType::u8},
        embed_blockq_kernel);
}

}  // namespace spore::reference
