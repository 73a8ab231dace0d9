#pragma once
// Random tiny decoder LLMs written as GGUF files, for the LLM tests (model_test.cpp, engine_test.cpp).
#include <cmath>
#include <map>
#include <random>
#include <string>

#include "io/gguf/gguf_writer.h"
#include "tensor/tensor.h"

namespace spore::llm::tiny {

struct Spec {
  std::string arch = "llama";
  int64_t E = 64, H = 4, Hkv = 2, D = 16, F = 96, L = 2, V = 97;
  bool bias = false, tied = false;
  io::GgmlType wtype = io::GgmlType::f32;
  double theta = 10000.0, eps = 1e-5;
};

using Weights = std::map<std::string, Tensor>;  // f32, HF naming-free: GGUF names, unpermuted ("HF order")

inline Tensor rnd(Shape s, std::mt19937& g, float scale) {
  Tensor t = Tensor::empty(s, DType::f32);
  std::normal_distribution<float> n(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(g);
  return t;
}

inline Weights make_weights(const Spec& s, uint32_t seed) {
  std::mt19937 g(seed);
  Weights w;
  const float ws = 1.0f / std::sqrt(static_cast<float>(s.E));
  w["token_embd.weight"] = rnd({s.V, s.E}, g, 1.0f);
  w["output_norm.weight"] = rnd({s.E}, g, 0.2f);
  for (int64_t i = 0; i < s.E; ++i) w["output_norm.weight"].data<float>()[i] += 1.0f;
  if (!s.tied) w["output.weight"] = rnd({s.V, s.E}, g, ws);
  for (int64_t l = 0; l < s.L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* n : {"attn_norm.weight", "ffn_norm.weight"}) {
      w[p + n] = rnd({s.E}, g, 0.2f);
      for (int64_t i = 0; i < s.E; ++i) w[p + n].data<float>()[i] += 1.0f;
    }
    w[p + "attn_q.weight"] = rnd({s.H * s.D, s.E}, g, ws);
    w[p + "attn_k.weight"] = rnd({s.Hkv * s.D, s.E}, g, ws);
    w[p + "attn_v.weight"] = rnd({s.Hkv * s.D, s.E}, g, ws);
    w[p + "attn_output.weight"] = rnd({s.E, s.H * s.D}, g, ws);
    w[p + "ffn_gate.weight"] = rnd({s.F, s.E}, g, ws);
    w[p + "ffn_up.weight"] = rnd({s.F, s.E}, g, ws);
    w[p + "ffn_down.weight"] = rnd({s.E, s.F}, g, 1.0f / std::sqrt(static_cast<float>(s.F)));
    if (s.bias) {
      w[p + "attn_q.bias"] = rnd({s.H * s.D}, g, 0.3f);
      w[p + "attn_k.bias"] = rnd({s.Hkv * s.D}, g, 0.3f);
      w[p + "attn_v.bias"] = rnd({s.Hkv * s.D}, g, 0.3f);
    }
  }
  return w;
}

// llama.cpp's converter permutes Q/K rows of Llama checkpoints so that "normal" rope (adjacent pairs) computes what
// HF's rotate_half computes: per head, rows (i, i + D/2) become rows (2i, 2i+1).
inline Tensor permute_qk(const Tensor& w, int64_t heads) {
  const int64_t rows = w.shape()[0], cols = w.shape()[1], d = rows / heads;
  Tensor out = Tensor::empty(w.shape(), DType::f32);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int two = 0; two < 2; ++two) {
        const float* src = w.data<float>() + (h * d + two * (d / 2) + i) * cols;
        std::copy(src, src + cols, out.data<float>() + (h * d + 2 * i + two) * cols);
      }
  return out;
}

inline void write_gguf(const Spec& s, const Weights& w, const std::string& path, bool permute) {
  io::GgufWriter g;
  const std::string a = s.arch;
  g.add_string("general.architecture", a);
  g.add_int(a + ".block_count", s.L, io::GgufValueType::u32);
  g.add_int(a + ".embedding_length", s.E, io::GgufValueType::u32);
  g.add_int(a + ".feed_forward_length", s.F, io::GgufValueType::u32);
  g.add_int(a + ".attention.head_count", s.H, io::GgufValueType::u32);
  g.add_int(a + ".attention.head_count_kv", s.Hkv, io::GgufValueType::u32);
  g.add_int(a + ".attention.key_length", s.D, io::GgufValueType::u32);
  g.add_int(a + ".context_length", 4096, io::GgufValueType::u32);
  g.add_float(a + ".attention.layer_norm_rms_epsilon", s.eps);
  g.add_float(a + ".rope.freq_base", s.theta);
  for (const auto& [name, t] : w) {
    Tensor v = t;
    if (permute && name.find("attn_q.weight") != std::string::npos) v = permute_qk(t, s.H);
    if (permute && name.find("attn_k.weight") != std::string::npos) v = permute_qk(t, s.Hkv);
    const bool matrix = t.shape().size() == 2;
    g.add_tensor(name, v, matrix ? s.wtype : io::GgmlType::f32);
  }
  g.write(path);
}

}  // namespace spore::llm::tiny
