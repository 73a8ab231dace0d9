// rnn_sequence on the cpu (ops/rnn.h): the recurrence of ONNX's LSTM / GRU / RNN over the whole sequence in one
// kernel call. The input projections of every step arrive precomputed (xw, one matmul before the op); each step is
// one [rows, H] x [H, G*H] product on r packed once into gemm_linear's panels (kept for plan constants,
// constant_cache.h) and the gate math over contiguous gate rows (Highway sigmoid/tanh).
//
// Tasks: (direction, block of batch rows), each running all its steps alone - rows and directions never exchange
// anything, so no step waits for another thread, and because gemm_linear's tiles compute every row alone in a fixed
// order and the gate math is per row, the bits do not depend on the blocks, the thread count or the batch.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/constant_cache.h"
#include "backend/cpu/elementwise_simd.h"
#include "backend/cpu/families.h"
#include "backend/cpu/gemm_linear.h"
#include "base/thread_pool.h"
#include "ops/rnn.h"

namespace spore::cpu {
namespace {

using rnn::Act;
using rnn::Activation;
using rnn::Cell;

void activate(const Activation& a, float* x, int64_t n) {
  const size_t un = static_cast<size_t>(n);
  switch (a.kind) {
    case Act::sigmoid: return unary_f32(UnaryOp::sigmoid, x, x, un, {});
    case Act::tanh: return unary_f32(UnaryOp::tanh, x, x, un, {});
    case Act::relu: return unary_f32(UnaryOp::relu, x, x, un, {});
    default:
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(rnn::apply(a, x[i]));
  }
}

inline void clip_to(float* x, int64_t n, float c) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], -c), c);
}

struct Problem {
  Cell cell;
  int64_t G, D, S, B, H, GH;
  float clip;
  bool lbr, input_forget, reverse_only;
  std::vector<Activation> acts;
  int na;
  const float* xw;
  const float* rb;  // [D, GH] or null
  const float* p;   // [D, 3H] or null
  const float* h0;
  const float* c0;  // or null
  std::vector<int64_t> len;
  float *y, *yh, *yc;
  int64_t nr;
  std::vector<const float*> panels;    // per direction: r (gru without lbr: its z and r rows)
  std::vector<const float*> panels_h;  // gru without lbr: the h rows of r, per direction
};

// Direction d, batch rows [b0, b1).
void run_block(const Problem& pb, int64_t d, int64_t b0, int64_t b1) {
  const int64_t nb = b1 - b0, H = pb.H, GH = pb.GH, D = pb.D, B = pb.B;
  const Activation* a = &pb.acts[static_cast<size_t>(d * pb.na)];
  const bool reverse = pb.reverse_only || d == 1;
  const bool split = pb.cell == Cell::gru && !pb.lbr;
  const int64_t n1 = split ? 2 * H : GH;  // columns of the first product
  std::vector<float> h(static_cast<size_t>(nb * H)), c, gates(static_cast<size_t>(nb * n1)),
      tmp(static_cast<size_t>(H)), rh, gh;
  if (pb.cell == Cell::lstm) c.resize(static_cast<size_t>(nb * H));
  if (split) {
    rh.resize(static_cast<size_t>(nb * H));
    gh.resize(static_cast<size_t>(nb * H));
  }
  for (int64_t b = 0; b < nb; ++b) {
    std::memcpy(&h[b * H], pb.h0 + (d * B + b0 + b) * H, sizeof(float) * H);
    if (pb.cell == Cell::lstm) {
      if (pb.c0) std::memcpy(&c[b * H], pb.c0 + (d * B + b0 + b) * H, sizeof(float) * H);
    }
  }
  const float* rb = pb.rb ? pb.rb + d * GH : nullptr;
  const float* P = pb.p ? pb.p + d * 3 * H : nullptr;
  const detail::GemmJob job{nb, H, n1, h.data(), pb.panels[static_cast<size_t>(d)], rb, gates.data()};
  const float clip = pb.clip;
  for (int64_t step = 0; step < pb.S; ++step) {
    const int64_t t = reverse ? pb.S - 1 - step : step;
    gemm_packed_rows(job, 0, nb, pb.nr);
    auto active = [&](int64_t b) { return t < pb.len[static_cast<size_t>(b0 + b)]; };
    auto xrow = [&](int64_t b) { return pb.xw + (t * B + b0 + b) * D * GH + d * GH; };
    for (int64_t b = 0; b < nb; ++b) {
      if (!active(b)) continue;
      float* g = &gates[b * n1];
      const float* x = xrow(b);
      float* hb = &h[b * H];
      if (pb.cell == Cell::lstm) {
        float* cb = &c[b * H];
        float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
        for (int64_t q = 0; q < GH; ++q) g[q] += x[q];
        if (P) {
          for (int64_t q = 0; q < H; ++q) {
            gi[q] += P[q] * cb[q];
            gf[q] += P[2 * H + q] * cb[q];
          }
          if (clip > 0) {
            clip_to(gi, H, clip);
            clip_to(gf, 2 * H, clip);
          }
          activate(a[0], gi, H);
          if (!pb.input_forget) activate(a[0], gf, H);
        } else {
          if (clip > 0) clip_to(g, GH, clip);
          activate(a[0], g, pb.input_forget ? 2 * H : 3 * H);
        }
        if (pb.input_forget)
          for (int64_t q = 0; q < H; ++q) gf[q] = 1.0f - gi[q];
        activate(a[1], gc, H);
        for (int64_t q = 0; q < H; ++q) cb[q] = gf[q] * cb[q] + gi[q] * gc[q];
        if (P) {
          for (int64_t q = 0; q < H; ++q) go[q] += P[H + q] * cb[q];
          if (clip > 0) clip_to(go, H, clip);
          activate(a[0], go, H);
        }
        std::memcpy(tmp.data(), cb, sizeof(float) * H);
        activate(a[2], tmp.data(), H);
        for (int64_t q = 0; q < H; ++q) hb[q] = go[q] * tmp[q];
      } else if (pb.cell == Cell::gru) {
        for (int64_t q = 0; q < 2 * H; ++q) g[q] += x[q];
        if (clip > 0) clip_to(g, 2 * H, clip);
        activate(a[0], g, 2 * H);
        if (split) {
          for (int64_t q = 0; q < H; ++q) rh[b * H + q] = g[H + q] * hb[q];
          continue;  // the h gate after the second product
        }
        float* hh = g + 2 * H;
        for (int64_t q = 0; q < H; ++q) hh[q] = x[2 * H + q] + g[H + q] * hh[q];
        if (clip > 0) clip_to(hh, H, clip);
        activate(a[1], hh, H);
        for (int64_t q = 0; q < H; ++q) hb[q] = hh[q] + g[q] * (hb[q] - hh[q]);
      } else {
        for (int64_t q = 0; q < H; ++q) g[q] += x[q];
        if (clip > 0) clip_to(g, H, clip);
        activate(a[0], g, H);
        std::memcpy(hb, g, sizeof(float) * H);
      }
    }
    if (split) {  // hh = act(x_h + (r * h) @ R_h^T + rb_h); h = hh + z * (h - hh)
      const detail::GemmJob jh{
          nb, H, H, rh.data(), pb.panels_h[static_cast<size_t>(d)], rb ? rb + 2 * H : nullptr, gh.data()};
      gemm_packed_rows(jh, 0, nb, pb.nr);
      for (int64_t b = 0; b < nb; ++b) {
        if (!active(b)) continue;
        const float* x = xrow(b);
        const float* z = &gates[b * n1];
        float* hh = &gh[b * H];
        float* hb = &h[b * H];
        for (int64_t q = 0; q < H; ++q) hh[q] += x[2 * H + q];
        if (clip > 0) clip_to(hh, H, clip);
        activate(a[1], hh, H);
        for (int64_t q = 0; q < H; ++q) hb[q] = hh[q] + z[q] * (hb[q] - hh[q]);
      }
    }
    for (int64_t b = 0; b < nb; ++b)
      if (active(b)) std::memcpy(pb.y + ((t * D + d) * B + b0 + b) * H, &h[b * H], sizeof(float) * H);
  }
  for (int64_t b = 0; b < nb; ++b) {
    std::memcpy(pb.yh + (d * B + b0 + b) * H, &h[b * H], sizeof(float) * H);
    if (pb.yc) std::memcpy(pb.yc + (d * B + b0 + b) * H, &c[b * H], sizeof(float) * H);
  }
}

void rnn_sequence_f32(KernelContext& k) {
  Problem pb;
  pb.cell = rnn::cell_of(k.attrs);
  pb.G = rnn::gates(pb.cell);
  pb.D = rnn::directions_of(k.attrs);
  const Tensor& r = k.in(1);
  pb.S = k.in(0).dim(0);
  pb.B = k.in(0).dim(1);
  pb.H = r.dim(2);
  pb.GH = pb.G * pb.H;
  pb.clip = static_cast<float>(k.attrs.f("clip"));
  pb.lbr = k.attrs.b("linear_before_reset");
  pb.input_forget = k.attrs.b("input_forget");
  pb.reverse_only = k.attrs.s("direction") == "reverse";
  pb.acts = rnn::activations_of(k.attrs);
  pb.na = rnn::activations_per_direction(pb.cell);
  pb.xw = k.in(0).data<float>();
  pb.h0 = k.in(2).data<float>();
  pb.rb = k.num_inputs() > 3 ? k.in(3).data<float>() : nullptr;
  pb.c0 = k.num_inputs() > 5 ? k.in(5).data<float>() : nullptr;
  pb.p = k.num_inputs() > 6 ? k.in(6).data<float>() : nullptr;
  pb.y = k.out(0).data<float>();
  pb.yh = k.out(1).data<float>();
  pb.yc = pb.cell == Cell::lstm ? k.out(2).data<float>() : nullptr;
  const int64_t S = pb.S, B = pb.B, H = pb.H, D = pb.D, GH = pb.GH;
  pb.len.assign(static_cast<size_t>(B), S);
  if (k.num_inputs() > 4) {
    const Tensor& l = k.in(4);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t v = l.dtype() == DType::i32 ? l.data<int32_t>()[b] : l.data<int64_t>()[b];
      SPORE_CHECK(v >= 0 && v <= S, ErrorCode::invalid_argument,
                  "rnn_sequence: seq_lens[{}] = {} is outside [0, {}] (the sequence length)", b, v, S);
      pb.len[static_cast<size_t>(b)] = v;
    }
  }
  // Steps a row does not run leave zeros in y.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = pb.len[static_cast<size_t>(b)]; t < S; ++t)
      for (int64_t d = 0; d < D; ++d) std::memset(pb.y + ((t * D + d) * B + b) * H, 0, sizeof(float) * H);
  if (S == 0) {
    std::memcpy(pb.yh, pb.h0, sizeof(float) * D * B * H);
    if (pb.yc) {
      if (pb.c0) std::memcpy(pb.yc, pb.c0, sizeof(float) * D * B * H);
      else std::memset(pb.yc, 0, sizeof(float) * D * B * H);
    }
    return;
  }
  // r packed per direction (and, for gru without linear_before_reset, its h rows apart: their product takes r * h).
  pb.nr = gemm_panel_width();
  const bool split = pb.cell == Cell::gru && !pb.lbr;
  const int64_t n1 = split ? 2 * H : GH;
  const std::shared_ptr<Storage> owner = (k.constant_inputs >> 1) & 1 ? r.storage() : nullptr;
  const float* rp = r.data<float>();
  const int64_t f1 = gemm_panels_floats(H, n1, pb.nr), fh = split ? gemm_panels_floats(H, H, pb.nr) : 0;
  const size_t floats = static_cast<size_t>(D * (f1 + fh));
  std::shared_ptr<Storage> kept;
  std::vector<float> local;
  const std::string key = owner ? fmt::format("rnn_sequence:{}:{}x{}x{}:{}", pb.nr, D, GH, H, split) : std::string();
  const float* packed = derived_floats(
      owner, rp, key, floats,
      [&](float* buf) {
        for (int64_t d = 0; d < D; ++d) {
          gemm_pack(H, n1, rp + d * GH * H, buf + d * (f1 + fh), pb.nr);
          if (split) gemm_pack(H, H, rp + (d * GH + 2 * H) * H, buf + d * (f1 + fh) + f1, pb.nr);
        }
      },
      kept, local);
  for (int64_t d = 0; d < D; ++d) {
    pb.panels.push_back(packed + d * (f1 + fh));
    pb.panels_h.push_back(split ? packed + d * (f1 + fh) + f1 : nullptr);
  }
  // Blocks of rows: as few as keep every thread busy (a product over more rows reads r once for all of them).
  const int64_t threads = std::max(1, num_threads());
  const int64_t blocks_per_dir = std::min<int64_t>(B, std::max<int64_t>(1, (threads + D - 1) / D));
  const int64_t rows_per = num_chunks(B, blocks_per_dir);
  const int64_t blocks = num_chunks(B, rows_per);
  parallel_for(D * blocks, [&](int64_t task) {
    const int64_t d = task / blocks, bl = task % blocks;
    run_block(pb, d, bl * rows_per, std::min(B, (bl + 1) * rows_per));
  });
}

}  // namespace

void register_rnn(KernelRegistry& r) {
  r.add(Backend::cpu, "rnn_sequence"_op, {DType::f32}, rnn_sequence_f32, "gemm_linear");
}

}  // namespace spore::cpu
