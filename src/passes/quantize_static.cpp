// Static post-training int8 quantization (quantize_static_int8, passes/quantize.h).
//
// Each conv2d / linear (and matmul whose B is a constant 2-D matrix) whose activation input has a calibrated
// range and whose weight is a constant f32 becomes
//     x -> clip(lo, hi) -> quantize_linear(scale, zp: u8) -> qconv2d / qlinear(w: i8 constant, w_scale [O], bias)
// with an f32 output, so everything around it (relu, pooling, softmax) stays float. Choices:
//  - Activations: u8, asymmetric (a zero point when the range crosses 0; ReLU outputs get zp 0), 8-bit [0, 255] by
//    default. Without VNNI, oneDNN's int8 kernels sum pairs of u8 x s8 products in int16 and saturate; the kernel
//    then runs exact int32 loops instead (slow), so models meant for such CPUs are converted with 7-bit
//    activations [0, 127] (StaticQuantOptions::activation_bits; PyTorch's fbgemm "reduce_range" for the same
//    reason), which keep every pair in range. On resnet18 8-bit halves the logits' error of 7-bit (rel. L2 0.039 ->
//    0.029). The clip makes values outside the calibrated range saturate at its ends (percentile / entropy ranges
//    clip on purpose) and keeps the codes within [0, levels].
//  - Ranges always include 0, so zero (and conv zero padding) is represented exactly.
//  - Weights: i8 symmetric per output channel, scale = max|w_o| / 127 (codes in [-127, 127]).
//  - One quantize_linear per activation value, shared by every consumer.
//  - Convs with <= 4 input channels per group (RGB stems, depthwise convs) stay f32 (few_channel_convs_stay_f32):
//    on resnet18 keeping the stem f32 raised int8-vs-f32 top-1 agreement 85 -> 92 %.
#include <cmath>
#include <map>

#include "ops/graph_ops.h"
#include "passes/quantize.h"

namespace spore {
namespace {

constexpr int64_t few_channels_per_group = 4;

int64_t constant_bytes(const Graph& g) {
  int64_t b = 0;
  for (const Node* n : g.nodes())
    if (n->is_constant()) b += n->payload.numel() * static_cast<int64_t>(dtype_size(n->payload.dtype()));
  return b;
}

bool is_f32_constant(const Value* v) { return v->producer->is_constant() && v->type.dtype == DType::f32; }

// Per-row symmetric int8 of a 2-D view [rows, cols] of `w` (contiguous f32).
struct QuantizedWeight {
  Tensor q, scale;
};
QuantizedWeight quantize_rows(const Tensor& w, int64_t rows, bool transpose) {
  const Tensor wc = w.contiguous();
  const float* p = wc.data<float>();
  const int64_t cols = rows ? w.numel() / rows : 0;
  // transpose: w is [cols, rows] (a matmul's B) and row o is column o of it.
  const auto at = [&](int64_t r, int64_t c) { return transpose ? p[c * rows + r] : p[r * cols + c]; };
  std::vector<int8_t> q(static_cast<size_t>(rows * cols));
  std::vector<float> scales(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(at(r, c)));
    const float s = amax > 0 ? amax / 127.0f : 1.0f;  // an all-zero row quantizes to zeros under any scale
    scales[r] = s;
    for (int64_t c = 0; c < cols; ++c)
      q[r * cols + c] = static_cast<int8_t>(std::clamp(std::nearbyint(at(r, c) / s), -127.0f, 127.0f));
  }
  Shape qshape = transpose ? Shape{rows, cols} : w.shape();
  return {Tensor::from_vector(q, qshape), Tensor::from_vector(scales, {rows})};
}

struct ActQuant {
  Value *q, *scale, *zero_point;
};

class StaticQuantizer {
 public:
  StaticQuantizer(Graph& g, const CalibrationTable& t, const StaticQuantOptions& o, QuantReport& r)
      : g_(g), table_(t), opts_(o), act_levels_((1 << o.activation_bits) - 1), report_(r) {}

  void run() {
    for (Node* n : std::vector<Node*>(g_.nodes())) {
      if (n->dead) continue;
      const bool matmul = n->op == "matmul"_op;
      if (n->op != "conv2d"_op && n->op != "linear"_op && !matmul) continue;
      if (const std::string why = rewrite(n, matmul); !why.empty()) report_.skipped.push_back(n->label() + ": " + why);
    }
    // Weights the rewritten nodes no longer use.
    for (Node* n : std::vector<Node*>(g_.nodes()))
      if (n->is_constant() && n->output(0)->uses.empty() && !g_.is_output(n->output(0))) g_.erase_node(n);
    g_.topo_sort();
  }

 private:
  // Returns why `n` stays float, or "" after replacing it.
  std::string rewrite(Node* n, bool matmul) {
    Value* x = n->input(0);
    Value* w = n->input(1);
    if (x->type.dtype != DType::f32) return fmt::format("input %{} is {}, not f32", x->name, dtype_name(x->type.dtype));
    if (!is_f32_constant(w)) return fmt::format("weight %{} is not a constant f32 tensor", w->name);
    if (opts_.few_channel_convs_stay_f32 && n->op == "conv2d"_op && w->type.rank() == 4 &&
        w->type.dims[1].is_static() && w->type.dims[1].size <= few_channels_per_group)
      return fmt::format("{} input channel(s) per group: stays f32 (qconv2d would run the f32 conv on the integer "
                         "values; int8 would only add the input's quantization error)",
                         w->type.dims[1].size);
    if (matmul) {
      if (w->type.rank() != 2) return fmt::format("B %{} is not 2-D", w->name);
      if (n->attrs.b("transpose_a")) return "transpose_a is not supported";
    }
    // A value produced by an op this pass already rewrote was calibrated under the original op's output name.
    const auto orig = calibrated_as_.find(x);
    const std::string& cname = orig == calibrated_as_.end() ? x->name : orig->second;
    const auto it = table_.find(cname);
    if (it == table_.end()) return fmt::format("no calibration range for %{}", x->name);
    const float lo = std::min(it->second.min, 0.0f), hi = std::max(it->second.max, 0.0f);
    if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi))
      return fmt::format("calibration range [{}, {}] of %{} is empty", it->second.min, it->second.max, x->name);

    const std::string base = n->name.empty() ? n->output(0)->name : n->name;
    // matmul(a, B [K,N]) == linear(a, B^T); with transpose_b B is already [N, K].
    const bool transpose = matmul && !n->attrs.b("transpose_b");
    const int64_t rows = transpose ? w->type.dims[1].size : w->type.dims[0].size;
    const QuantizedWeight qw = quantize_rows(w->producer->payload, rows, transpose);
    Value* wq = g_.add_constant(qw.q, base + "/w_int8");
    Value* ws = g_.add_constant(qw.scale, base + "/w_scale");
    const ActQuant a = quantize_activation(x, lo, hi);
    std::vector<Value*> ins{a.q, a.scale, a.zero_point, wq, ws};
    if (n->inputs.size() > 2 && !matmul) ins.push_back(n->input(2));
    Node* q = n->op == "conv2d"_op ? build_node(g_, "qconv2d"_op, ins, n->attrs, n->name)
                                    : build_node(g_, "qlinear"_op, ins, {}, n->name);
    SPORE_CHECK(q->output(0)->type == n->output(0)->type, ErrorCode::internal,
                "[quantize_static_int8] {} became {} instead of {}", n->label(), q->output(0)->type.str(),
                n->output(0)->type.str());
    const auto was = calibrated_as_.find(n->output(0));
    calibrated_as_[q->output(0)] = was == calibrated_as_.end() ? n->output(0)->name : was->second;
    g_.replace_all_uses(n->output(0), q->output(0));
    g_.erase_node(n);
    ++report_.ops_quantized;
    ++report_.weights_quantized;
    return "";
  }

  ActQuant quantize_activation(Value* x, float lo, float hi) {
    if (auto it = acts_.find(x); it != acts_.end()) return it->second;
    const float scale = (hi - lo) / static_cast<float>(act_levels_);
    const float zp = std::clamp(std::nearbyint(-lo / scale), 0.0f, static_cast<float>(act_levels_));
    Value* s = g_.add_constant(Tensor::scalar(scale, DType::f32), x->name + "/scale");
    Value* z = g_.add_constant(Tensor::scalar(zp, DType::u8), x->name + "/zero_point");
    // Codes of the clip bounds are exactly 0 and the top level (x / scale lands within rounding of an integer).
    Node* clip = build_node(g_, "clip"_op, {x}, {{"min", static_cast<double>(-zp * scale)},
                                                  {"max", static_cast<double>((static_cast<float>(act_levels_) - zp) * scale)}},
                            x->name + "/clip");
    Node* q = build_node(g_, "quantize_linear"_op, {clip->output(0), s, z}, {}, x->name + "/quantize");
    const ActQuant a{q->output(0), s, z};
    acts_.emplace(x, a);
    return a;
  }

  Graph& g_;
  const CalibrationTable& table_;
  const StaticQuantOptions& opts_;
  const int act_levels_;
  QuantReport& report_;
  std::map<Value*, ActQuant> acts_;
  std::map<const Value*, std::string> calibrated_as_;  // rewritten op's output -> the name it was calibrated as
};

}  // namespace

QuantReport quantize_static_int8(Graph& g, const CalibrationTable& table, const StaticQuantOptions& opts) {
  SPORE_CHECK(opts.activation_bits == 7 || opts.activation_bits == 8, ErrorCode::invalid_argument,
              "quantize_static_int8: activation_bits {}: expected 7 or 8", opts.activation_bits);
  QuantReport r;
  r.bytes_before = constant_bytes(g);
  StaticQuantizer(g, table, opts, r).run();
  r.bytes_after = constant_bytes(g);
  verify_graph(g);
  return r;
}

}  // namespace spore
