// Weight-only int8 quantization (quantize.h): every constant f32 weight of a conv / linear / matmul is stored as
// int8 with one f32 scale per output channel (symmetric: scale = max|w| / 127, no zero point) and read through a
// dequantize_linear, so every kernel still computes in float and only the file shrinks (~4x for the weights).
//
// The dequantize_linear nodes stay in the saved file: a model-file pipeline runs fold_constants with
// PassOptions::fold_keeps_size (folding them would write the f32 weights back). compile_plan folds them as usual,
// so a loaded model dequantizes once at compile time and runs at f32 speed.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "base/error.h"
#include "ops/graph_ops.h"
#include "ops/registry.h"
#include "passes/quantize.h"

namespace spore {
namespace {

int64_t constant_bytes(const Graph& g) {
  int64_t b = 0;
  for (const Node* n : g.nodes())
    if (n->is_constant()) b += n->payload.numel() * static_cast<int64_t>(dtype_size(n->payload.dtype()));
  return b;
}

struct Quantized {
  Tensor q;      // i8, the weight's shape
  Tensor scale;  // f32 [C]
};

// Per-channel symmetric quantization along `axis` of a contiguous f32 tensor. Empty when a value is not finite
// (no scale represents it).
std::optional<Quantized> quantize_per_channel(const Tensor& w, int axis) {
  const Shape& s = w.shape();
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t channels = s[axis];
  const Tensor src = w.contiguous();
  const float* x = src.data<float>();
  std::vector<float> amax(static_cast<size_t>(channels), 0.f);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c) {
      const float* p = x + (o * channels + c) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        if (!std::isfinite(p[i])) return std::nullopt;
        amax[c] = std::max(amax[c], std::fabs(p[i]));
      }
    }
  Quantized r{Tensor::empty(s, DType::i8), Tensor::empty(Shape{channels}, DType::f32)};
  float* scale = r.scale.data<float>();
  for (int64_t c = 0; c < channels; ++c) scale[c] = amax[c] > 0.f ? amax[c] / 127.f : 1.f;  // all-zero channel: any
  int8_t* q = r.q.data<int8_t>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t base = (o * channels + c) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        // x / scale in f32 then round half to even, as quantize_linear computes it.
        const float v = std::nearbyint(x[base + i] / scale[c]);
        q[base + i] = static_cast<int8_t>(std::clamp(v, -127.f, 127.f));
      }
    }
  return r;
}

}  // namespace

QuantReport quantize_weights_int8(Graph& g) {
  QuantReport r;
  r.bytes_before = constant_bytes(g);
  std::map<std::pair<Value*, int64_t>, Value*> done;  // (weight, axis) -> its dequantized value (shared weights)
  std::vector<Value*> replaced;
  for (Node* n : std::vector<Node*>(g.nodes())) {
    const WeightOperand& wo = op_registry().get(n->op).weight;  // which input is the weight, its channel axis
    if (!wo.defined() || wo.input >= static_cast<int>(n->inputs.size())) continue;
    Value* w = n->inputs[static_cast<size_t>(wo.input)];
    auto skip = [&](const std::string& why) { r.skipped.push_back(fmt::format("{}: {}", n->label(), why)); };
    if (!w->producer->is_constant()) {
      skip(fmt::format("weight %{} is not a constant", w->name));
      continue;
    }
    if (w->type.dtype != DType::f32) {
      skip(fmt::format("weight %{} is {}, not f32", w->name, dtype_name(w->type.dtype)));
      continue;
    }
    const int rank = w->type.rank();
    if (rank < 2) {
      skip(fmt::format("weight %{} is {}: no output-channel axis", w->name, w->type.str()));
      continue;
    }
    const int64_t axis = wo.channel_axis_for(n->attrs, rank);
    auto it = done.find({w, axis});
    if (it == done.end()) {
      const std::optional<Quantized> qw = quantize_per_channel(w->producer->payload, static_cast<int>(axis));
      if (!qw) {
        skip(fmt::format("weight %{} has a non-finite value", w->name));
        continue;
      }
      Value* q = g.add_constant(qw->q, w->name + "_quantized");
      Value* scale = g.add_constant(qw->scale, w->name + "_scale");
      Node* dq = build_node(g, "dequantize_linear"_op, {q, scale}, Attrs{{"axis", axis}}, w->name + "_dequantized");
      it = done.emplace(std::make_pair(w, axis), dq->outputs[0]).first;
      replaced.push_back(w);
      ++r.weights_quantized;
    }
    g.set_input(n, wo.input, it->second);
  }
  for (Value* w : replaced)
    if (w->uses.empty() && !g.is_output(w)) g.erase_node(w->producer);
  g.topo_sort();
  r.bytes_after = constant_bytes(g);
  return r;
}

}  // namespace spore
