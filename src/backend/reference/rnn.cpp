// Reference kernel of rnn_sequence (ops/rnn.h): ONNX's LSTM / GRU / RNN step formulas written out in double, one
// (direction, batch row) at a time; results rounded to the output dtype once.
#include <algorithm>
#include <vector>

#include "backend/reference/families.h"
#include "backend/reference/util.h"
#include "ops/rnn.h"

namespace spore::reference {
namespace {

void rnn_sequence_kernel(KernelContext& k) {
  using rnn::Cell;
  const Cell cell = rnn::cell_of(k.attrs);
  const int64_t G = rnn::gates(cell), D = rnn::directions_of(k.attrs);
  const Tensor& xw = k.in(0);
  const Tensor& r = k.in(1);
  const int64_t S = xw.dim(0), B = xw.dim(1), H = r.dim(2), GH = G * H;
  const bool has_rb = k.num_inputs() > 3, has_len = k.num_inputs() > 4, has_c0 = k.num_inputs() > 5,
             has_p = k.num_inputs() > 6;
  const double clip = k.attrs.f("clip");
  const bool lbr = k.attrs.b("linear_before_reset"), input_forget = k.attrs.b("input_forget");
  const bool reverse_only = k.attrs.s("direction") == "reverse";
  const std::vector<rnn::Activation> acts = rnn::activations_of(k.attrs);
  const int na = rnn::activations_per_direction(cell);
  auto clipv = [&](double v) { return clip > 0 ? std::min(std::max(v, -clip), clip) : v; };
  for (int64_t i = 0; i < S * D * B * H; ++i) put(k.out(0), i, 0.0);
  std::vector<double> h(static_cast<size_t>(H)), c(static_cast<size_t>(H)), pre(static_cast<size_t>(GH)),
      rh(static_cast<size_t>(H));
  for (int64_t d = 0; d < D; ++d) {
    const rnn::Activation* a = &acts[static_cast<size_t>(d * na)];
    const bool reverse = reverse_only || d == 1;
    auto R = [&](int64_t j, int64_t q) { return get(r, (d * GH + j) * H + q); };
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = has_len ? static_cast<int64_t>(get(k.in(4), b)) : S;
      SPORE_CHECK(len >= 0 && len <= S, ErrorCode::invalid_argument,
                  "rnn_sequence: seq_lens[{}] = {} is outside [0, {}] (the sequence length)", b, len, S);
      for (int64_t q = 0; q < H; ++q) {
        h[q] = get(k.in(2), (d * B + b) * H + q);
        c[q] = has_c0 ? get(k.in(5), (d * B + b) * H + q) : 0.0;
      }
      for (int64_t step = 0; step < S; ++step) {
        const int64_t t = reverse ? S - 1 - step : step;
        if (t >= len) continue;
        for (int64_t j = 0; j < GH; ++j) {
          const bool h_gate_later = cell == Cell::gru && !lbr && j >= 2 * H;
          double acc = 0;
          if (!h_gate_later)
            for (int64_t q = 0; q < H; ++q) acc += h[q] * R(j, q);
          pre[j] = acc + (has_rb ? get(k.in(3), d * GH + j) : 0.0);
        }
        auto x = [&](int64_t j) { return get(xw, (t * B + b) * D * GH + d * GH + j); };
        if (cell == Cell::lstm) {
          auto peep = [&](int64_t gate, int64_t q) { return has_p ? get(k.in(6), d * 3 * H + gate * H + q) : 0.0; };
          for (int64_t q = 0; q < H; ++q) {
            const double i = rnn::apply(a[0], clipv(x(q) + pre[q] + peep(0, q) * c[q]));
            const double f =
                input_forget ? 1.0 - i : rnn::apply(a[0], clipv(x(2 * H + q) + pre[2 * H + q] + peep(2, q) * c[q]));
            const double g = rnn::apply(a[1], clipv(x(3 * H + q) + pre[3 * H + q]));
            c[q] = f * c[q] + i * g;
            const double o = rnn::apply(a[0], clipv(x(H + q) + pre[H + q] + peep(1, q) * c[q]));
            h[q] = o * rnn::apply(a[2], c[q]);
          }
        } else if (cell == Cell::gru) {
          std::vector<double> z(static_cast<size_t>(H)), rr(static_cast<size_t>(H));
          for (int64_t q = 0; q < H; ++q) {
            z[q] = rnn::apply(a[0], clipv(x(q) + pre[q]));
            rr[q] = rnn::apply(a[0], clipv(x(H + q) + pre[H + q]));
            rh[q] = rr[q] * h[q];
          }
          for (int64_t q = 0; q < H; ++q) {
            double hv;
            if (lbr) {
              hv = x(2 * H + q) + rr[q] * pre[2 * H + q];
            } else {
              double acc = 0;
              for (int64_t p = 0; p < H; ++p) acc += rh[p] * R(2 * H + q, p);
              hv = x(2 * H + q) + acc + pre[2 * H + q];
            }
            pre[2 * H + q] = rnn::apply(a[1], clipv(hv));  // hh, kept until every q is done with h
          }
          for (int64_t q = 0; q < H; ++q) h[q] = (1.0 - z[q]) * pre[2 * H + q] + z[q] * h[q];
        } else {
          for (int64_t q = 0; q < H; ++q) h[q] = rnn::apply(a[0], clipv(x(q) + pre[q]));
        }
        for (int64_t q = 0; q < H; ++q) put(k.out(0), ((t * D + d) * B + b) * H + q, h[q]);
      }
      for (int64_t q = 0; q < H; ++q) {
        put(k.out(1), (d * B + b) * H + q, h[q]);
        if (cell == Cell::lstm) put(k.out(2), (d * B + b) * H + q, c[q]);
      }
    }
  }
}

}  // namespace

void register_rnn(KernelRegistry& r) {
  r.add(Backend::reference, "rnn_sequence"_op, dtypes::floating, rnn_sequence_kernel);
}

}  // namespace spore::reference
