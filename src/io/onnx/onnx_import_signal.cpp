// ONNX signal-processing ops (opset 17): HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix, DFT, STFT.
// The windows and MelWeightMatrix depend only on scalar inputs, so they become constants computed here in double
// (a deployed session binds such scalar inputs by value). DFT and STFT are one matmul by a constant DFT matrix
// (computed in double, stored in the signal's dtype; f16/bf16 signals run the matmul in f32): O(n * bins) per
// transformed row, which is what the exports that carry these ops (spectrogram front ends with n <= a few
// thousand) need; an FFT kernel would pay only for long transforms.
#include <cmath>
#include <numbers>
#include <numeric>

#include <fmt/format.h>

#include "base/error.h"
#include "io/onnx/onnx_import_internal.h"

namespace spore::io::onnx_import {

namespace {

using V = std::vector<Value*>;
using Ints = std::vector<int64_t>;

DType output_dtype(NodeCtx& c) {
  const auto code = static_cast<int32_t>(c.attr_i("output_datatype", onnx::TensorProto::FLOAT));
  const auto dt = dtype_from_onnx(code);
  if (!dt) c.fail(ErrorCode::unsupported, "output_datatype {}, which spore lacks", onnx_type_name(code));
  return *dt;
}

int64_t scalar_int(NodeCtx& c, int i, const char* what) {
  const Ints v = c.ints_in(i);
  if (v.size() != 1)
    c.fail(ErrorCode::invalid_argument, "{} (input {}) must be one integer, has {} elements", what, i, v.size());
  return v[0];
}

// Generalized cosine window w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N = size (periodic) or size - 1.
EmitFn cosine_window(double a0, double a1, double a2) {
  return [a0, a1, a2](NodeCtx& c) -> V {
    const int64_t size = scalar_int(c, 0, "size");
    if (size < 0) c.fail(ErrorCode::invalid_argument, "size is {}, must be >= 0", size);
    const bool periodic = c.attr_i("periodic", 1) != 0;
    const double n_den = static_cast<double>(periodic ? size : size - 1);
    std::vector<double> w(static_cast<size_t>(size));
    for (int64_t n = 0; n < size; ++n) {
      if (n_den == 0) {  // a symmetric window of one sample: 1 (numpy, PyTorch); the formula would divide by 0
        w[static_cast<size_t>(n)] = 1.0;
        continue;
      }
      const double t = 2 * std::numbers::pi * static_cast<double>(n) / n_den;
      w[static_cast<size_t>(n)] = a0 - a1 * std::cos(t) + a2 * std::cos(2 * t);
    }
    return {c.konst(Tensor::from_doubles(w, {size}, output_dtype(c)))};
  };
}

// MelWeightMatrix as the ONNX reference computes it: num_mel_bins + 2 points evenly spaced on the mel scale
// (the step is (high - low) / (num_mel_bins + 2), and the mel edges are f32 as the reference's are), converted to
// FFT bins floor((dft_length + 1) * hz / sample_rate), then a triangle per mel bin over [left, center, right].
V emit_mel_weight_matrix(NodeCtx& c) {
  const int64_t bins = scalar_int(c, 0, "num_mel_bins"), dft_length = scalar_int(c, 1, "dft_length"),
                rate = scalar_int(c, 2, "sample_rate");
  const std::vector<double> lo_v = c.floats_in(3), hi_v = c.floats_in(4);
  if (lo_v.size() != 1 || hi_v.size() != 1)
    c.fail(ErrorCode::invalid_argument, "lower_edge_hertz and upper_edge_hertz must be scalars");
  if (bins <= 0 || dft_length <= 0 || rate <= 0)
    c.fail(ErrorCode::invalid_argument, "num_mel_bins {}, dft_length {} and sample_rate {} must be positive", bins,
           dft_length, rate);
  const float lo = static_cast<float>(lo_v[0]), hi = static_cast<float>(hi_v[0]);
  if (!(lo >= 0 && lo <= hi))
    c.fail(ErrorCode::invalid_argument, "lower_edge_hertz {} and upper_edge_hertz {} must satisfy 0 <= lower <= upper",
           lo, hi);
  const int64_t spec_bins = dft_length / 2 + 1;
  const float lo_mel = 2595.0f * std::log10(1.0f + lo / 700.0f), hi_mel = 2595.0f * std::log10(1.0f + hi / 700.0f);
  const float step = (hi_mel - lo_mel) / static_cast<float>(bins + 2);
  Ints fb(static_cast<size_t>(bins + 2));
  for (int64_t i = 0; i < bins + 2; ++i) {
    const double mel = static_cast<double>(i) * step + lo_mel;
    const double hz = 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
    fb[static_cast<size_t>(i)] =
        static_cast<int64_t>(std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(rate)));
    if (fb[static_cast<size_t>(i)] < 0 || fb[static_cast<size_t>(i)] >= spec_bins)
      c.fail(ErrorCode::invalid_argument,
             "mel point {} falls in FFT bin {}, outside the {} bins of a {}-point DFT (upper_edge_hertz {} above the "
             "Nyquist frequency of sample_rate {}?)",
             i, fb[static_cast<size_t>(i)], spec_bins, dft_length, hi, rate);
  }
  std::vector<double> m(static_cast<size_t>(spec_bins * bins), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double& { return m[static_cast<size_t>(j * bins + i)]; };
  for (int64_t i = 0; i < bins; ++i) {
    const int64_t left = fb[static_cast<size_t>(i)], center = fb[static_cast<size_t>(i + 1)],
                  right = fb[static_cast<size_t>(i + 2)];
    if (center == left) {
      at(center, i) = 1;
    } else {
      for (int64_t j = left; j <= center; ++j)
        at(j, i) = static_cast<double>(j - left) / static_cast<double>(center - left);
    }
    for (int64_t j = center; j < right; ++j)
      at(j, i) = static_cast<double>(right - j) / static_cast<double>(right - center);
  }
  return {c.konst(Tensor::from_doubles(m, {spec_bins, bins}, output_dtype(c)))};
}

// The DFT as a matrix W [n_in * parts, 2 * bins]: row n * parts + p (p = 0 real, 1 imaginary part of input sample
// n), column 2k + q (q = 0 real, 1 imaginary part of bin k). Samples n >= len are dropped (dft_length truncates;
// a longer dft_length zero-pads, which adds nothing to the sums). The angle uses (k n mod len) so it stays exact.
Tensor dft_matrix(int64_t n_in, int64_t parts, int64_t len, int64_t bins, bool inverse, DType dt) {
  std::vector<double> w(static_cast<size_t>(n_in * parts * 2 * bins), 0.0);
  const double sg = inverse ? -1.0 : 1.0, scale = inverse ? 1.0 / static_cast<double>(len) : 1.0;
  const int64_t cols = 2 * bins;
  for (int64_t n = 0; n < std::min(n_in, len); ++n)
    for (int64_t k = 0; k < bins; ++k) {
      const double t = 2 * std::numbers::pi * static_cast<double>((k * n) % len) / static_cast<double>(len);
      const double cs = std::cos(t) * scale, sn = std::sin(t) * scale;
      // forward: re = xr cos + xi sin, im = xi cos - xr sin; the inverse flips the sines' signs.
      w[static_cast<size_t>((n * parts) * cols + 2 * k)] = cs;
      w[static_cast<size_t>((n * parts) * cols + 2 * k + 1)] = -sg * sn;
      if (parts == 2) {
        w[static_cast<size_t>((n * parts + 1) * cols + 2 * k)] = sg * sn;
        w[static_cast<size_t>((n * parts + 1) * cols + 2 * k + 1)] = cs;
      }
    }
  return Tensor::from_doubles(w, {n_in * parts, cols}, dt);
}

// DFT of x [..., n (at `axis`), ..., parts] along `axis`: [..., bins, ..., 2].
Value* dft_along(NodeCtx& c, Value* x, int64_t axis, int64_t len, int64_t bins, bool inverse) {
  const Shape s = c.static_shape(x, "the signal");
  const int r = static_cast<int>(s.size());
  const int64_t n = s[static_cast<size_t>(axis)], parts = s.back();
  Ints perm, others;
  for (int i = 0; i < r - 1; ++i)
    if (i != axis) {
      perm.push_back(i);
      others.push_back(s[static_cast<size_t>(i)]);
    }
  perm.push_back(axis);
  perm.push_back(r - 1);
  const DType dt = c.dtype(x);
  const DType ct = dt == DType::f64 ? DType::f64 : DType::f32;
  Value* xt = c.cast(x, ct);
  if (axis != r - 2) xt = c.op("transpose"_op, {xt}, {{"perm", perm}});
  const int64_t rows = std::accumulate(others.begin(), others.end(), int64_t{1}, std::multiplies<>());
  xt = c.reshape(xt, {rows, n * parts});
  Value* y = c.op("matmul"_op, {xt, c.konst(dft_matrix(n, parts, len, bins, inverse, ct))});
  Ints ys = others;
  ys.push_back(bins);
  ys.push_back(2);
  y = c.reshape(y, ys);
  if (axis != r - 2) {  // bins back to `axis`
    Ints inv(static_cast<size_t>(r));
    for (int i = 0; i < r; ++i) inv[static_cast<size_t>(perm[static_cast<size_t>(i)])] = i;
    y = c.op("transpose"_op, {y}, {{"perm", inv}});
  }
  return c.cast(y, dt);
}

V emit_dft(NodeCtx& c) {
  Value* x = c.in(0);
  const int r = c.rank(x);
  if (!is_floating(c.dtype(x)))
    c.fail(ErrorCode::invalid_argument, "input is {}, must be floating-point", dtype_name(c.dtype(x)));
  if (r < 2) c.fail(ErrorCode::invalid_argument, "input has rank {}; it must be [batch, ..., 1 or 2]", r);
  const Shape s = c.static_shape(x, "input");
  if (s.back() != 1 && s.back() != 2)
    c.fail(ErrorCode::invalid_argument, "the last dim of the input is {}; it must be 1 (real) or 2 (complex)",
           s.back());
  int64_t axis = c.since >= 20 ? -2 : 1;
  if (c.since >= 20) {
    if (c.has_input(2)) axis = scalar_int(c, 2, "axis");
  } else {
    axis = c.attr_i("axis", 1);
  }
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r - 1)
    c.fail(ErrorCode::invalid_argument,
           "axis {} is not a signal dim of the rank-{} input (the last dim holds the "
           "real/imaginary parts)",
           axis, r);
  const int64_t n = s[static_cast<size_t>(axis)];
  int64_t len = n;
  if (c.has_input(1) && c.const_in(1).numel() > 0) len = scalar_int(c, 1, "dft_length");
  if (len <= 0) c.fail(ErrorCode::invalid_argument, "dft_length is {}, must be positive", len);
  const bool inverse = c.attr_i("inverse", 0) != 0, onesided = c.attr_i("onesided", 0) != 0;
  return {dft_along(c, x, axis, len, onesided ? len / 2 + 1 : len, inverse)};
}

// STFT: frames gathered by a constant index [frames, frame_length], times the window, then the DFT of each frame.
V emit_stft(NodeCtx& c) {
  Value* x = c.in(0);
  if (!is_floating(c.dtype(x)))
    c.fail(ErrorCode::invalid_argument, "signal is {}, must be floating-point", dtype_name(c.dtype(x)));
  const Shape s = c.static_shape(x, "signal");
  if (s.size() != 3 || (s[2] != 1 && s[2] != 2))
    c.fail(ErrorCode::invalid_argument, "signal is {}; it must be [batch, length, 1 or 2]", shape_str(s));
  const int64_t step = scalar_int(c, 1, "frame_step");
  if (step <= 0) c.fail(ErrorCode::invalid_argument, "frame_step is {}, must be positive", step);
  Value* window = c.has_input(2) ? c.in(2) : nullptr;
  int64_t frame_length = -1;
  if (c.has_input(3)) frame_length = scalar_int(c, 3, "frame_length");
  if (window) {
    const Shape ws = c.static_shape(window, "window");
    if (ws.size() != 1) c.fail(ErrorCode::invalid_argument, "window is {}, must be 1-D", shape_str(ws));
    if (frame_length < 0) frame_length = ws[0];
    if (ws[0] != frame_length)
      c.fail(ErrorCode::invalid_argument, "window has {} samples, frame_length is {}", ws[0], frame_length);
  }
  if (frame_length < 0) c.fail(ErrorCode::invalid_argument, "needs a window or a frame_length");
  if (frame_length <= 0 || frame_length > s[1])
    c.fail(ErrorCode::invalid_argument, "frame_length {} for a signal of {} samples", frame_length, s[1]);
  const int64_t frames = (s[1] - frame_length) / step + 1;
  std::vector<int64_t> idx(static_cast<size_t>(frames * frame_length));
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t j = 0; j < frame_length; ++j) idx[static_cast<size_t>(f * frame_length + j)] = f * step + j;
  Value* fr = c.op("gather"_op, {x, c.konst(Tensor::from_vector(idx, {frames, frame_length}))}, {{"axis", int64_t{1}}});
  if (window) fr = c.op("mul"_op, {fr, c.reshape(c.cast(window, c.dtype(x)), {1, 1, frame_length, 1})});
  const bool onesided = c.attr_i("onesided", 1) != 0;
  return {dft_along(c, fr, 2, frame_length, onesided ? frame_length / 2 + 1 : frame_length, false)};
}

}  // namespace

void add_signal_ops(std::map<std::string, OpMapping>& t) {
  auto add = [&](const std::string& name, int min_since, const std::string& note, EmitFn emit) {
    t[name] = OpMapping{min_since, true, note, nullptr, std::move(emit)};
  };
  add("HannWindow", 17, "constant (size bound by value)", cosine_window(0.5, 0.5, 0.0));
  add("HammingWindow", 17, "constant (size bound by value)", cosine_window(25.0 / 46.0, 21.0 / 46.0, 0.0));
  add("BlackmanWindow", 17, "constant (size bound by value)", cosine_window(0.42, 0.5, 0.08));
  add("MelWeightMatrix", 17, "constant (scalar inputs bound by value)", emit_mel_weight_matrix);
  add("DFT", 17, "matmul by a constant DFT matrix", emit_dft);
  add("STFT", 17, "gather frames, window, matmul by a constant DFT matrix", emit_stft);
}

}  // namespace spore::io::onnx_import
