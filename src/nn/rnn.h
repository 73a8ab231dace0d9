#pragma once
// Multi-layer LSTM and GRU (PyTorch parameter layout and gate order). Inference: each layer one input-projection
// matmul and one fused rnn_sequence op (ops/rnn.h), the op ONNX's LSTM/GRU import as. While a gradient tape records
// (training), the steps unrolled with ops:: instead, whose backward is cheaper (rnn.cpp). Sequences are [T, N, in], or
// [N, T, in] with batch_first.
// Parameters per layer k: weight_ih_l{k} [G*H, in], weight_hh_l{k} [G*H, H], bias_ih_l{k}, bias_hh_l{k}
// [G*H] (G = 4 for LSTM: i, f, g, o; G = 3 for GRU: r, z, n), all U(+-1/sqrt(H)).
#include <cstdint>
#include <vector>

#include "nn/cell.h"

namespace spore::nn {

struct RnnOutput {
  Tensor output;  // [T, N, H] (or [N, T, H] with batch_first): the last layer's hidden state at each step
  Tensor h_n;     // [num_layers, N, H]
  Tensor c_n;     // [num_layers, N, H]; LSTM only
};

class RnnBase : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return forward(x).output; }
  // h0 / c0: [num_layers, N, H]; undefined tensors mean zeros.
  virtual RnnOutput forward(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) = 0;

 protected:
  RnnBase(const char* name, int gates, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool has_bias,
          bool batch_first, DType dtype);
  // Checks x and the initial states; returns x as [T, N, in] and per-layer initial states (zeros if absent).
  Tensor prepare(const Tensor& x, const Tensor& h0, const Tensor& c0, std::vector<Tensor>& h, std::vector<Tensor>& c);
  // Every layer through rnn_sequence (LSTM or GRU); the output [T, N, H] (transposed back for batch_first).
  RnnOutput run_layers(const Tensor& x, const Tensor& h0, const Tensor& c0, bool lstm);
  Tensor steps_output(const std::vector<Tensor>& steps) const;  // the unrolled path's [T, N, H]

  const char* name_;
  int64_t input_size_, hidden_size_, num_layers_;
  bool batch_first_;
  struct Layer {
    Tensor *w_ih, *w_hh, *b_ih = nullptr, *b_hh = nullptr;
  };
  std::vector<Layer> layers_;
};

class LSTM : public RnnBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool has_bias = true,
       bool batch_first = false, DType dtype = DType::f32)
      : RnnBase("LSTM", 4, input_size, hidden_size, num_layers, has_bias, batch_first, dtype) {}
  RnnOutput forward(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) override;

 private:
  RnnOutput forward_steps(const Tensor& x, const Tensor& h0, const Tensor& c0);
};

class GRU : public RnnBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool has_bias = true, bool batch_first = false,
      DType dtype = DType::f32)
      : RnnBase("GRU", 3, input_size, hidden_size, num_layers, has_bias, batch_first, dtype) {}
  RnnOutput forward(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) override;

 private:
  RnnOutput forward_steps(const Tensor& x, const Tensor& h0);
};

}  // namespace spore::nn
