// The fused recurrent op rnn_sequence (ops/rnn.h): schema, shape inference (errors name the node), the activations'
// definitions, the decomposition into per-step ops (the fallback on backends and dtypes without a kernel: the
// unrolled graph the ONNX importer used to emit) and the gradient, which runs that decomposition's steps again
// and walks them backward (backpropagation through time written with ops::).
#include "ops/rnn.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"

namespace spore {
namespace rnn {

int gates(Cell c) { return c == Cell::lstm ? 4 : c == Cell::gru ? 3 : 1; }
int activations_per_direction(Cell c) { return c == Cell::lstm ? 3 : c == Cell::gru ? 2 : 1; }
Cell cell_of(const Attrs& a) {
  const std::string& s = a.s("cell");
  return s == "lstm" ? Cell::lstm : s == "gru" ? Cell::gru : Cell::rnn;
}
int directions_of(const Attrs& a) { return a.s("direction") == "bidirectional" ? 2 : 1; }

namespace {
constexpr const char* kActNames[] = {"Sigmoid",    "Tanh", "Relu",     "LeakyRelu", "HardSigmoid",    "Affine",
                                     "ScaledTanh", "Elu",  "Softsign", "Softplus",  "ThresholdedRelu"};
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}
}  // namespace

bool activation_from_name(const std::string& name, Act& out) {
  const std::string l = lower(name);
  for (size_t i = 0; i < std::size(kActNames); ++i)
    if (l == lower(kActNames[i])) {
      out = static_cast<Act>(i);
      return true;
    }
  return false;
}
const char* activation_name(Act a) { return kActNames[static_cast<size_t>(a)]; }

std::vector<Activation> activations_of(const Attrs& a) {
  const Cell cell = cell_of(a);
  const int na = activations_per_direction(cell), dirs = directions_of(a);
  const std::string& names = a.s("activations");
  std::vector<Activation> out;
  if (names.empty()) {
    for (int d = 0; d < dirs; ++d) {
      if (cell != Cell::rnn) out.push_back({Act::sigmoid});
      for (int k = cell == Cell::rnn ? 0 : 1; k < na; ++k) out.push_back({Act::tanh});
    }
    return out;
  }
  size_t pos = 0;
  while (pos <= names.size()) {
    const size_t comma = std::min(names.find(',', pos), names.size());
    const std::string name = names.substr(pos, comma - pos);
    Activation act;
    SPORE_CHECK(activation_from_name(name, act.kind), ErrorCode::unsupported,
                "rnn_sequence: activation '{}' is not one of ONNX's (Sigmoid, Tanh, Relu, LeakyRelu, HardSigmoid, "
                "Affine, ScaledTanh, Elu, Softsign, Softplus, ThresholdedRelu)",
                name);
    out.push_back(act);
    pos = comma + 1;
  }
  SPORE_CHECK(static_cast<int>(out.size()) == na * dirs, ErrorCode::invalid_argument,
              "rnn_sequence: {} activations given ('{}'), a {} cell with {} direction(s) takes {}", out.size(), names,
              a.s("cell"), dirs, na * dirs);
  const std::vector<double> al = a.floats("activation_alpha"), be = a.floats("activation_beta");
  SPORE_CHECK((al.empty() || al.size() == out.size()) && (be.empty() || be.size() == out.size()),
              ErrorCode::invalid_argument,
              "rnn_sequence: activation_alpha ({}) and activation_beta ({}) must be empty or one per activation ({})",
              al.size(), be.size(), out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (!al.empty()) out[i].alpha = al[i];
    if (!be.empty()) out[i].beta = be[i];
  }
  return out;
}

double apply(const Activation& a, double x) {
  switch (a.kind) {
    case Act::sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Act::tanh: return std::tanh(x);
    case Act::relu: return x > 0 ? x : 0.0;
    case Act::leaky_relu: return x >= 0 ? x : a.alpha * x;
    case Act::hard_sigmoid: return std::clamp(a.alpha * x + a.beta, 0.0, 1.0);
    case Act::affine: return a.alpha * x + a.beta;
    case Act::scaled_tanh: return a.alpha * std::tanh(a.beta * x);
    case Act::elu: return x >= 0 ? x : a.alpha * (std::exp(x) - 1.0);
    case Act::softsign: return x / (1.0 + std::fabs(x));
    case Act::softplus: return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    case Act::thresholded_relu: return x > a.alpha ? x : 0.0;
  }
  return x;
}

}  // namespace rnn

namespace {
using infer::dims_compatible;
using infer::dims_str;
using rnn::Act;
using rnn::Activation;
using rnn::Cell;

std::vector<TensorType> infer_rnn(const InferContext& c) {
  const Cell cell = rnn::cell_of(c.attrs);
  const int64_t G = rnn::gates(cell), D = rnn::directions_of(c.attrs);
  (void)rnn::activations_of(c.attrs);  // names and counts
  const double clip = c.attrs.f("clip");
  c.check(std::isfinite(clip) && clip >= 0, ErrorCode::invalid_argument, "clip must be finite and >= 0, got {}", clip);
  c.check(!c.attrs.b("input_forget") || cell == Cell::lstm, ErrorCode::invalid_argument,
          "input_forget applies to lstm cells only");
  c.check(!c.attrs.b("linear_before_reset") || cell == Cell::gru, ErrorCode::invalid_argument,
          "linear_before_reset applies to gru cells only");
  const DType t = c.in(0).dtype;
  const auto& xw = c.in(0).dims;
  const auto& r = c.in(1).dims;
  if (r.size() != 3 || !dims_compatible(r[0], D) || !r[2].is_static() || !r[1].is_static() ||
      r[1].size != G * r[2].size) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("r must be [{}, {}*H, H] (a {} cell, direction {}), got {}", D, G,
                                                  c.attrs.s("cell"), c.attrs.s("direction"), dims_str(r)));
  const int64_t H = r[2].size;
  if (xw.size() != 3 || !dims_compatible(xw[2], D * G * H)) [[unlikely]]
    c.fail(ErrorCode::shape_mismatch, fmt::format("xw (the input projection) must be [S, B, {}] for r {}, got {}",
                                                  D * G * H, dims_str(r), dims_str(xw)));
  const Dim& S = xw[0];
  const Dim& B = xw[1];
  auto expect = [&](int i, const std::vector<Dim>& want, const char* what) {
    const auto& got = c.in(i).dims;
    bool ok = got.size() == want.size();
    for (size_t k = 0; ok && k < want.size(); ++k) ok = dims_compatible(got[k], want[k]);
    if (!ok) [[unlikely]]
      c.fail(ErrorCode::shape_mismatch, fmt::format("{} must be {}, got {}", what, dims_str(want), dims_str(got)));
    if (i != 4 && c.in(i).dtype != t) [[unlikely]]
      c.fail(ErrorCode::dtype_mismatch,
             fmt::format("{} is {} but xw is {}", what, dtype_name(c.in(i).dtype), dtype_name(t)));
  };
  expect(1, r, "r");
  expect(2, {D, B, H}, "h0");
  if (c.num_inputs() > 3) expect(3, {D, G * H}, "rb");
  if (c.num_inputs() > 4) {
    expect(4, {B}, "seq_lens");
    const DType st = c.in(4).dtype;
    if (st != DType::i32 && st != DType::i64) [[unlikely]]
      c.fail(ErrorCode::dtype_mismatch, fmt::format("seq_lens must be i32 or i64, got {}", dtype_name(st)));
  }
  if (c.num_inputs() > 5) {
    c.check(cell == Cell::lstm, ErrorCode::invalid_argument, "c0 and p are inputs of lstm cells only");
    expect(5, {D, B, H}, "c0");
  }
  if (c.num_inputs() > 6) expect(6, {D, 3 * H}, "p (peepholes)");
  std::vector<TensorType> out{TensorType(t, {S, D, B, H}), TensorType(t, {D, B, H})};
  if (cell == Cell::lstm) out.push_back(TensorType(t, {D, B, H}));
  return out;
}

// ----------------------------------------------------------------------------------- decomposition (per-step ops)

Tensor act_op(const Activation& a, const Tensor& x) {
  const DType dt = x.dtype();
  switch (a.kind) {
    case Act::sigmoid: return ops::sigmoid(x);
    case Act::tanh: return ops::tanh(x);
    case Act::relu: return ops::relu(x);
    case Act::leaky_relu: return ops::leaky_relu(x, a.alpha);
    case Act::hard_sigmoid: return ops::hardsigmoid(x, a.alpha, a.beta);
    case Act::affine: return ops::add(ops::mul(x, a.alpha), a.beta);
    case Act::scaled_tanh: return ops::mul(ops::tanh(ops::mul(x, a.beta)), a.alpha);
    case Act::elu:
      return ops::where(ops::ge(x, Tensor::scalar(0, dt)), x, ops::mul(ops::sub(ops::exp(x), 1.0), a.alpha));
    case Act::softsign: return ops::div(x, ops::add(ops::abs(x), 1.0));
    case Act::softplus: return ops::softplus(x);
    case Act::thresholded_relu: return ops::where(ops::gt(x, Tensor::scalar(a.alpha, dt)), x, ops::mul(x, 0.0));
  }
  return x;
}

// d act(x) / dx as a tensor, from the input x and the output y.
Tensor act_grad(const Activation& a, const Tensor& x, const Tensor& y) {
  const DType dt = x.dtype();
  const Tensor zero = Tensor::scalar(0, dt), one = Tensor::scalar(1, dt);
  switch (a.kind) {
    case Act::sigmoid: return ops::mul(y, ops::sub(one, y));
    case Act::tanh: return ops::sub(one, ops::mul(y, y));
    case Act::relu: return ops::where(ops::gt(x, zero), ops::add(ops::mul(x, 0.0), 1.0), ops::mul(x, 0.0));
    case Act::leaky_relu:
      return ops::where(ops::ge(x, zero), ops::add(ops::mul(x, 0.0), 1.0), ops::add(ops::mul(x, 0.0), a.alpha));
    case Act::hard_sigmoid: {
      const Tensor v = ops::add(ops::mul(x, a.alpha), a.beta);
      const Tensor inside = ops::mul(ops::cast(ops::gt(v, zero), dt), ops::cast(ops::lt(v, one), dt));
      return ops::mul(inside, a.alpha);
    }
    case Act::affine: return ops::add(ops::mul(x, 0.0), a.alpha);
    case Act::scaled_tanh: {
      const Tensor t = ops::tanh(ops::mul(x, a.beta));
      return ops::mul(ops::sub(one, ops::mul(t, t)), a.alpha * a.beta);
    }
    case Act::elu: return ops::where(ops::ge(x, zero), ops::add(ops::mul(x, 0.0), 1.0), ops::add(y, a.alpha));
    case Act::softsign: {
      const Tensor d = ops::add(ops::abs(x), 1.0);
      return ops::div(one, ops::mul(d, d));
    }
    case Act::softplus: return ops::sigmoid(x);
    case Act::thresholded_relu:
      return ops::where(ops::gt(x, Tensor::scalar(a.alpha, dt)), ops::add(ops::mul(x, 0.0), 1.0), ops::mul(x, 0.0));
  }
  return one;
}

Tensor take(const Tensor& v, int64_t d) { return ops::squeeze(ops::slice(v, {d}, {d + 1}, {0}), {0}); }
Tensor cols(const Tensor& v, int64_t k, int64_t H) { return ops::slice(v, {k * H}, {(k + 1) * H}, {-1}); }

// One step's values, kept for the backward walk.
struct StepVals {
  Tensor h_prev, c_prev;  // state before the step
  Tensor pre[4];          // activation inputs (after clip) per gate; gru: z r hh; lstm: i o f c(g)
  Tensor raw[4];          // before clip (for the clip mask)
  Tensor act[4];          // activation outputs (lstm: i o f g; gru: z r hh)
  Tensor hr;              // gru: h @ R^T + rb ([B, 3H]); lbr: its h-part is multiplied by r
  Tensor rh;              // gru without linear_before_reset: r * h_prev
  Tensor nc, c_act;       // lstm: the new c (before the mask) and its h-activation
  Tensor mask;            // [B, 1] in the dtype: 1 where the row runs this step (seq_lens), undefined when all run
  Tensor h, c;            // state after the step (masked)
};

struct Setup {
  Cell cell;
  int64_t G, D, S, B, H;
  double clip;
  bool lbr, input_forget;
  std::vector<Activation> acts;
  int na;
};

Setup setup_of(std::span<const Tensor> in, const Attrs& a) {
  Setup s;
  s.cell = rnn::cell_of(a);
  s.G = rnn::gates(s.cell);
  s.D = rnn::directions_of(a);
  s.S = in[0].dim(0);
  s.B = in[0].dim(1);
  s.H = in[1].dim(2);
  s.clip = a.f("clip");
  s.lbr = a.b("linear_before_reset");
  s.input_forget = a.b("input_forget");
  s.acts = rnn::activations_of(a);
  s.na = rnn::activations_per_direction(s.cell);
  return s;
}

// Runs direction d forward with ops::, filling `steps` (indexed by time) when asked.
void run_direction(const Setup& s, std::span<const Tensor> in, const std::string& direction, int64_t d,
                   std::vector<StepVals>* steps, std::vector<Tensor>& ys, Tensor& h_out, Tensor& c_out) {
  const DType dt = in[0].dtype();
  const int64_t H = s.H, G = s.G;
  const bool reverse = direction == "reverse" || d == 1;
  const Activation* a = &s.acts[static_cast<size_t>(d * s.na)];
  const Tensor xw = cols(in[0], d, G * H);  // [S, B, G*H] (slice of the last axis by direction)
  const Tensor R = take(in[1], d);          // [G*H, H]
  const Tensor rb = in.size() > 3 ? take(in[3], d) : Tensor();
  const Tensor P = in.size() > 6 ? take(in[6], d) : Tensor();
  Tensor h = take(in[2], d);
  Tensor c = s.cell == Cell::lstm ? (in.size() > 5 ? take(in[5], d) : ops::zeros({s.B, H}, dt)) : Tensor();
  auto clipv = [&](const Tensor& v) { return s.clip > 0 ? ops::clip(v, -s.clip, s.clip) : v; };
  ys.assign(static_cast<size_t>(s.S), Tensor());
  if (steps) steps->assign(static_cast<size_t>(s.S), StepVals());
  for (int64_t k = 0; k < s.S; ++k) {
    const int64_t t = reverse ? s.S - 1 - k : k;
    StepVals v;
    v.h_prev = h;
    v.c_prev = c;
    if (in.size() > 4) {
      const Tensor tt = Tensor::scalar(static_cast<double>(t), in[4].dtype());
      v.mask = ops::reshape(ops::cast(ops::lt(tt, in[4]), dt), {s.B, 1});
    }
    const Tensor xt = ops::squeeze(ops::slice(xw, {t}, {t + 1}, {0}), {0});  // [B, G*H]
    Tensor hr = ops::matmul(h, R, false, true);                              // [B, G*H]
    if (rb.defined()) hr = ops::add(hr, rb);
    Tensor nh, nc;
    if (s.cell == Cell::lstm) {
      const Tensor g = ops::add(xt, hr);
      Tensor gi = cols(g, 0, H), go = cols(g, 1, H), gf = cols(g, 2, H), gc = cols(g, 3, H);
      if (P.defined()) {
        gi = ops::add(gi, ops::mul(cols(P, 0, H), c));
        gf = ops::add(gf, ops::mul(cols(P, 2, H), c));
      }
      v.raw[0] = gi, v.raw[2] = gf, v.raw[3] = gc;
      v.pre[0] = clipv(gi), v.pre[2] = clipv(gf), v.pre[3] = clipv(gc);
      v.act[0] = act_op(a[0], v.pre[0]);
      v.act[2] = s.input_forget ? ops::sub(Tensor::scalar(1, dt), v.act[0]) : act_op(a[0], v.pre[2]);
      v.act[3] = act_op(a[1], v.pre[3]);
      nc = ops::add(ops::mul(v.act[2], c), ops::mul(v.act[0], v.act[3]));
      if (P.defined()) go = ops::add(go, ops::mul(cols(P, 1, H), nc));
      v.raw[1] = go;
      v.pre[1] = clipv(go);
      v.act[1] = act_op(a[0], v.pre[1]);
      v.nc = nc;
      v.c_act = act_op(a[2], nc);
      nh = ops::mul(v.act[1], v.c_act);
    } else if (s.cell == Cell::gru) {
      v.hr = hr;
      v.raw[0] = ops::add(cols(xt, 0, H), cols(hr, 0, H));
      v.raw[1] = ops::add(cols(xt, 1, H), cols(hr, 1, H));
      v.pre[0] = clipv(v.raw[0]), v.pre[1] = clipv(v.raw[1]);
      v.act[0] = act_op(a[0], v.pre[0]);
      v.act[1] = act_op(a[0], v.pre[1]);
      if (s.lbr) {
        v.raw[2] = ops::add(cols(xt, 2, H), ops::mul(v.act[1], cols(hr, 2, H)));
      } else {
        v.rh = ops::mul(v.act[1], h);
        Tensor hh = ops::matmul(v.rh, cols(ops::transpose(R, {1, 0}), 2, H), false, false);
        if (rb.defined()) hh = ops::add(hh, cols(rb, 2, H));
        v.raw[2] = ops::add(cols(xt, 2, H), hh);
      }
      v.pre[2] = clipv(v.raw[2]);
      v.act[2] = act_op(a[1], v.pre[2]);
      // h = (1 - z) * hh + z * h
      nh = ops::add(v.act[2], ops::mul(v.act[0], ops::sub(h, v.act[2])));
    } else {
      v.raw[0] = ops::add(xt, hr);
      v.pre[0] = clipv(v.raw[0]);
      v.act[0] = act_op(a[0], v.pre[0]);
      nh = v.act[0];
    }
    Tensor y = nh;
    if (v.mask.defined()) {
      y = ops::mul(nh, v.mask);
      nh = ops::add(y, ops::mul(h, ops::sub(Tensor::scalar(1, dt), v.mask)));
      if (nc.defined()) nc = ops::add(ops::mul(nc, v.mask), ops::mul(c, ops::sub(Tensor::scalar(1, dt), v.mask)));
    }
    h = nh;
    c = nc;
    v.h = h;
    v.c = c;
    ys[static_cast<size_t>(t)] = y;
    if (steps) (*steps)[static_cast<size_t>(t)] = std::move(v);
  }
  h_out = h;
  c_out = c;
}

Tensor stack(const std::vector<Tensor>& parts, int64_t axis) {
  std::vector<Tensor> us;
  for (const Tensor& p : parts) us.push_back(ops::unsqueeze(p, {axis}));
  return us.size() == 1 ? us[0] : ops::concat(us, axis);
}

std::vector<Tensor> decompose_rnn(std::span<const Tensor> in, const Attrs& a) {
  const Setup s = setup_of(in, a);
  std::vector<Tensor> ys, hs, cs;
  for (int64_t d = 0; d < s.D; ++d) {
    std::vector<Tensor> y;
    Tensor h, c;
    run_direction(s, in, a.s("direction"), d, nullptr, y, h, c);
    ys.push_back(stack(y, 0));  // [S, B, H]
    hs.push_back(h);
    if (c.defined()) cs.push_back(c);
  }
  std::vector<Tensor> out{stack(ys, 1), stack(hs, 0)};
  if (s.cell == Cell::lstm) out.push_back(stack(cs, 0));
  return out;
}

// ----------------------------------------------------------------------------------- gradient (BPTT)

// The clip's derivative: 1 where |raw| <= clip (where it passed through), else 0.
Tensor clip_pass(const Setup& s, const Tensor& g, const Tensor& raw) {
  if (s.clip <= 0) return g;
  const Tensor m = ops::cast(ops::le(ops::abs(raw), Tensor::scalar(s.clip, raw.dtype())), raw.dtype());
  return ops::mul(g, m);
}

Tensor add_maybe(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return ops::add(a, b);
}

// Backpropagation through time: the forward steps again (run_direction keeps each step's values), then from the
// last executed step back to the first. The recurrent products' gradients are summed over every step at once.
std::vector<Tensor> rnn_grad(const GradContext& g) {
  const auto& in = g.inputs;
  const Setup s = setup_of(in, g.attrs);
  const DType dt = in[0].dtype();
  const int64_t H = s.H, B = s.B;
  const Tensor one = Tensor::scalar(1, dt);
  std::vector<Tensor> out(in.size());
  const Tensor gy = g.output_grads[0];
  const Tensor gyh = g.output_grads.size() > 1 ? g.output_grads[1] : Tensor();
  const Tensor gyc = g.output_grads.size() > 2 ? g.output_grads[2] : Tensor();
  std::vector<Tensor> dxw_d, dr_d, dh0_d, drb_d, dc0_d, dp_d;
  for (int64_t d = 0; d < s.D; ++d) {
    std::vector<StepVals> steps;
    std::vector<Tensor> ys;
    Tensor hN, cN;
    run_direction(s, in, g.attrs.s("direction"), d, &steps, ys, hN, cN);
    const bool reverse = g.attrs.s("direction") == "reverse" || d == 1;
    const Activation* a = &s.acts[static_cast<size_t>(d * s.na)];
    const Tensor R = take(in[1], d);
    const Tensor P = in.size() > 6 ? take(in[6], d) : Tensor();
    Tensor dh = gyh.defined() ? take(gyh, d) : ops::zeros({B, H}, dt);
    Tensor dc = s.cell == Cell::lstm ? (gyc.defined() ? take(gyc, d) : ops::zeros({B, H}, dt)) : Tensor();
    std::vector<Tensor> dxt_all(static_cast<size_t>(s.S)), dhr_all(static_cast<size_t>(s.S)),
        lhs_all(static_cast<size_t>(s.S)), dhh_all, rh_all;
    Tensor dP;
    for (int64_t k = s.S - 1; k >= 0; --k) {
      const int64_t t = reverse ? s.S - 1 - k : k;
      const StepVals& v = steps[static_cast<size_t>(t)];
      Tensor dnh = dh;
      if (gy.defined()) dnh = ops::add(dnh, take(ops::squeeze(ops::slice(gy, {t}, {t + 1}, {0}), {0}), d));
      Tensor dh_prev, dc_prev;
      if (v.mask.defined()) {
        const Tensor inv = ops::sub(one, v.mask);
        dh_prev = ops::mul(dh, inv);
        dnh = ops::mul(dnh, v.mask);
        if (dc.defined()) {
          dc_prev = ops::mul(dc, inv);
          dc = ops::mul(dc, v.mask);
        }
      }
      Tensor dxt, dhr;
      if (s.cell == Cell::lstm) {
        const Tensor dact_o = ops::mul(dnh, v.c_act);
        Tensor dnc = ops::add(dc, ops::mul(ops::mul(dnh, v.act[1]), act_grad(a[2], v.nc, v.c_act)));
        const Tensor dgo = clip_pass(s, ops::mul(dact_o, act_grad(a[0], v.pre[1], v.act[1])), v.raw[1]);
        if (P.defined()) {
          dnc = ops::add(dnc, ops::mul(dgo, cols(P, 1, H)));
          dP = add_maybe(dP, ops::concat({ops::mul(dgo, 0.0), ops::mul(dgo, v.nc), ops::mul(dgo, 0.0)}, 1));
        }
        Tensor di = ops::mul(dnc, v.act[3]);
        const Tensor dg = ops::mul(dnc, v.act[0]);
        const Tensor df = ops::mul(dnc, v.c_prev);
        dc_prev = add_maybe(dc_prev, ops::mul(dnc, v.act[2]));
        Tensor dgf;
        if (s.input_forget) {
          di = ops::sub(di, df);
          dgf = ops::mul(df, 0.0);
        } else {
          dgf = clip_pass(s, ops::mul(df, act_grad(a[0], v.pre[2], v.act[2])), v.raw[2]);
        }
        const Tensor dgi = clip_pass(s, ops::mul(di, act_grad(a[0], v.pre[0], v.act[0])), v.raw[0]);
        const Tensor dgc = clip_pass(s, ops::mul(dg, act_grad(a[1], v.pre[3], v.act[3])), v.raw[3]);
        if (P.defined()) {
          dc_prev = ops::add(dc_prev, ops::add(ops::mul(dgi, cols(P, 0, H)), ops::mul(dgf, cols(P, 2, H))));
          dP = ops::add(dP, ops::concat({ops::mul(dgi, v.c_prev), ops::mul(dgi, 0.0), ops::mul(dgf, v.c_prev)}, 1));
        }
        dxt = ops::concat({dgi, dgo, dgf, dgc}, 1);
        dhr = dxt;
      } else if (s.cell == Cell::gru) {
        const Tensor z = v.act[0], r = v.act[1], hh = v.act[2];
        const Tensor dhh = ops::mul(dnh, ops::sub(one, z));
        const Tensor dz = ops::mul(dnh, ops::sub(v.h_prev, hh));
        dh_prev = add_maybe(dh_prev, ops::mul(dnh, z));
        const Tensor drh = clip_pass(s, ops::mul(dhh, act_grad(a[1], v.pre[2], hh)), v.raw[2]);
        Tensor dr, dhr_h;
        if (s.lbr) {
          dhr_h = ops::mul(drh, r);
          dr = ops::mul(drh, cols(v.hr, 2, H));
        } else {
          const Tensor d_rh = ops::matmul(drh, cols(ops::transpose(R, {1, 0}), 2, H), false, true);  // drh @ Rh
          dr = ops::mul(d_rh, v.h_prev);
          dh_prev = ops::add(dh_prev, ops::mul(d_rh, r));
          dhh_all.push_back(drh);
          rh_all.push_back(v.rh);
        }
        const Tensor dgz = clip_pass(s, ops::mul(dz, act_grad(a[0], v.pre[0], z)), v.raw[0]);
        const Tensor dgr = clip_pass(s, ops::mul(dr, act_grad(a[0], v.pre[1], r)), v.raw[1]);
        dxt = ops::concat({dgz, dgr, drh}, 1);
        dhr = s.lbr ? ops::concat({dgz, dgr, dhr_h}, 1) : ops::concat({dgz, dgr}, 1);
      } else {
        dxt = clip_pass(s, ops::mul(dnh, act_grad(a[0], v.pre[0], v.act[0])), v.raw[0]);
        dhr = dxt;
      }
      const Tensor Rpart = dhr.dim(1) == R.dim(0) ? R : ops::slice(R, {0}, {dhr.dim(1)}, {0});
      dh_prev = add_maybe(dh_prev, ops::matmul(dhr, Rpart));  // [B, H]
      dxt_all[static_cast<size_t>(t)] = dxt;
      dhr_all[static_cast<size_t>(t)] = dhr;
      lhs_all[static_cast<size_t>(t)] = v.h_prev;
      dh = dh_prev;
      if (s.cell == Cell::lstm) dc = dc_prev;
    }
    dxw_d.push_back(stack(dxt_all, 0));  // [S, B, G*H]
    const int64_t SB = s.S * B;
    const Tensor dhr2 = ops::reshape(stack(dhr_all, 0), {SB, -1});
    const Tensor lhs2 = ops::reshape(stack(lhs_all, 0), {SB, H});
    Tensor dR = ops::matmul(dhr2, lhs2, true, false);  // [G*H or 2H, H]
    Tensor drb = ops::reduce_sum(dhr2, {0});
    if (s.cell == Cell::gru && !s.lbr) {  // the h-gate's product takes r * h_prev; dhh_all runs backward in time
      std::reverse(dhh_all.begin(), dhh_all.end());
      std::reverse(rh_all.begin(), rh_all.end());
      const Tensor dh2 = ops::reshape(stack(dhh_all, 0), {SB, H});
      const Tensor rh2 = ops::reshape(stack(rh_all, 0), {SB, H});
      dR = ops::concat({dR, ops::matmul(dh2, rh2, true, false)}, 0);
      drb = ops::concat({drb, ops::reduce_sum(dh2, {0})}, 0);
    }
    dr_d.push_back(dR);
    drb_d.push_back(drb);
    dh0_d.push_back(dh);
    if (dc.defined()) dc0_d.push_back(dc);
    if (P.defined()) dp_d.push_back(ops::reduce_sum(dP, {0}));
  }
  out[0] = dxw_d.size() == 1 ? dxw_d[0] : ops::concat(dxw_d, 2);
  out[1] = stack(dr_d, 0);
  out[2] = stack(dh0_d, 0);
  if (in.size() > 3) out[3] = stack(drb_d, 0);
  if (in.size() > 5) out[5] = stack(dc0_d, 0);
  if (in.size() > 6) out[6] = stack(dp_d, 0);
  return out;
}

OpCost rnn_cost(std::span<const TensorType> ins, std::span<const TensorType> outs, const Attrs&) {
  OpCost c;
  for (const auto& t : ins) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  for (const auto& t : outs) c.bytes += static_cast<double>(std::max<int64_t>(t.numel(), 0)) * dtype_size(t.dtype);
  if (!ins[0].is_static() || !ins[1].is_static()) return c;
  const auto& xw = ins[0].dims;
  const auto& r = ins[1].dims;
  // The recurrent products (2 flops per multiply-add) and ~8 flops of gate math per gate value.
  const double sb = static_cast<double>(xw[0].size * xw[1].size);
  c.flops = sb * static_cast<double>(r[0].size * r[1].size) * (2.0 * static_cast<double>(r[2].size) + 8.0);
  return c;
}
}  // namespace

void register_rnn_ops(OpRegistry& r) {
  r.def("rnn_sequence"_op)
      .doc(
          "the recurrence of ONNX's LSTM / GRU / RNN over a sequence, from the input projection xw [S, B, D*G*H] "
          "(x @ W^T + bias of every step, one matmul outside), r [D, G*H, H], h0 [D, B, H], rb? [D, G*H], "
          "seq_lens? [B], c0? [D, B, H], p? [D, 3H] -> y [S, D, B, H], y_h [D, B, H] (, y_c): ops/rnn.h")
      .inputs({"xw", "r", "h0", "rb?", "seq_lens?", "c0?", "p?"})
      .choice("cell", {"lstm", "gru", "rnn"})
      .choice("direction", {"forward", "reverse", "bidirectional"})
      .attr("activations", AttrKind::str, std::string())
      .attr("activation_alpha", AttrKind::f64s, std::vector<double>{})
      .attr("activation_beta", AttrKind::f64s, std::vector<double>{})
      .attr("clip", AttrKind::f64, 0.0)
      .attr("linear_before_reset", AttrKind::boolean, false)
      .attr("input_forget", AttrKind::boolean, false)
      .dtypes(dtypes::floating)
      .traits(TraitSet{}, FusionKind::opaque, AmpPolicy::keep_f32)
      .infer(infer_rnn)
      .decompose(decompose_rnn)
      .grad(rnn_grad)
      .cost(rnn_cost);
}

}  // namespace spore
