#pragma once
// The fused recurrent op (ops/rnn.cpp defines it; the ONNX importer makes it from LSTM, GRU and RNN nodes):
//   rnn_sequence(xw [S, B, D*G*H], r [D, G*H, H], h0 [D, B, H], rb? [D, G*H], seq_lens? [B], c0? [D, B, H],
//                p? [D, 3*H]) {cell, direction, activations, activation_alpha, activation_beta, clip,
//                linear_before_reset, input_forget} -> y [S, D, B, H], y_h [D, B, H] (, y_c [D, B, H] for lstm)
// xw is the input projection of every step and direction, x @ W^T + bias, made by one matmul outside the op (W of
// all directions stacked: [D*G*H, I]); the op runs the recurrence h_t = cell(xw_t, h_{t-1} @ r^T + rb, ...) with
// ONNX's gate order and formulas (LSTM i o f c, GRU z r h, G = 4 / 3 / 1). D = 2 for "bidirectional" (direction 0
// forward, 1 reverse). rb (GRU with linear_before_reset: Rb, added inside r's product) may be zeros otherwise;
// seq_lens: row b runs its steps t < seq_lens[b] (forward or backward) and keeps its state and writes zeros to y
// after them; p: LSTM peepholes (i, o, f). A trailing optional input may be left out, a middle one given as zeros.
// Activations are ONNX's (G=4: f g h per direction; G=3: f g; G=1: f), names comma-separated with one
// alpha/beta per name ("" = the cell's defaults); clip > 0 clips every activation's input to [-clip, clip].
#include <cstdint>
#include <string>
#include <vector>

namespace spore {
class Attrs;
}

namespace spore::rnn {

enum class Cell : uint8_t { lstm, gru, rnn };
enum class Act : uint8_t {
  sigmoid,
  tanh,
  relu,
  leaky_relu,
  hard_sigmoid,
  affine,
  scaled_tanh,
  elu,
  softsign,
  softplus,
  thresholded_relu
};
struct Activation {
  Act kind = Act::tanh;
  double alpha = 0, beta = 0;
};

// The gates per cell (4, 3, 1) and activations per direction (3, 2, 1).
int gates(Cell c);
int activations_per_direction(Cell c);
Cell cell_of(const Attrs& a);
int directions_of(const Attrs& a);
// ONNX's name ("Sigmoid", any case) of an activation; false when unknown.
bool activation_from_name(const std::string& name, Act& out);
const char* activation_name(Act a);
// The attributes' activations, activations_per_direction * D of them (defaults filled in); throws naming the
// attribute when a name is unknown or the count is wrong.
std::vector<Activation> activations_of(const Attrs& a);
// The activation on one value (the definition; kernels in float do the same steps).
double apply(const Activation& a, double x);

}  // namespace spore::rnn
