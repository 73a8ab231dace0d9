// Conformance cases of rnn_sequence (ops/rnn.h): every cell (lstm, gru with and without linear_before_reset, rnn)
// forward, reverse and bidirectional; initial states, R's bias, sequence lengths (0 to S, drawn per row), clip,
// non-default activations with alpha/beta, LSTM peepholes and input_forget; hidden sizes that fill part of a gemm
// panel (5), several panels (40) and batches that split into row blocks. The cpu kernel (f32) and the
// decomposition (f64, f16, bf16) against the double reference; the gradient (BPTT) against finite differences.
#include "conformance/harness.h"

namespace spore::conformance {

namespace {
struct RnnShape {
  const char* cell;
  const char* direction;
  int64_t S, B, H;
};
int64_t gates_of(const std::string& cell) { return cell == "lstm" ? 4 : cell == "gru" ? 3 : 1; }
}  // namespace

void add_rnn_cases(CaseList& c, ErrorList& e) {
  const OpId op = "rnn_sequence"_op;
  const DType f = DType::f32;
  // Inputs up to `n` (3: xw r h0; 4: + rb; 5: + seq_lens; 6: + c0; 7: + p).
  auto rnn_case = [&](const std::string& name, RnnShape s, int n) {
    const int64_t D = std::string(s.direction) == "bidirectional" ? 2 : 1, GH = gates_of(s.cell) * s.H;
    std::vector<Shape> shapes{{s.S, s.B, D * GH}, {D, GH, s.H}, {D, s.B, s.H}, {D, GH}, {s.B},
                              {D, s.B, s.H},      {D, 3 * s.H}};
    shapes.resize(static_cast<size_t>(n));
    OpCase k("rnn_sequence/" + name, op, shapes);
    k.attr("cell", std::string(s.cell)).attr("direction", std::string(s.direction)).gen(1, Gen::uniform(-0.7, 0.7));
    if (n > 4) k.input_dtype(4, DType::i32).gen(4, Gen::integers(0, s.S + 1));
    return k.tol(8);
  };
  for (const char* dir : {"forward", "reverse", "bidirectional"}) {
    const std::string d = dir;
    c.push_back(rnn_case("lstm_" + d, {"lstm", dir, 5, 3, 5}, 3));
    c.push_back(rnn_case("gru_" + d, {"gru", dir, 5, 3, 5}, 3));
    c.push_back(rnn_case("gru_lbr_" + d, {"gru", dir, 5, 3, 5}, 4).attr("linear_before_reset", true));
    c.push_back(rnn_case("rnn_" + d, {"rnn", dir, 5, 3, 5}, 3));
    c.push_back(rnn_case("lstm_seq_lens_" + d, {"lstm", dir, 6, 4, 5}, 6));
    c.push_back(rnn_case("gru_seq_lens_" + d, {"gru", dir, 6, 4, 5}, 5).attr("linear_before_reset", true));
    c.push_back(rnn_case("rnn_seq_lens_" + d, {"rnn", dir, 6, 4, 5}, 5));
  }
  c.push_back(rnn_case("lstm_peepholes", {"lstm", "bidirectional", 4, 2, 5}, 7));
  c.push_back(rnn_case("lstm_peepholes_input_forget", {"lstm", "forward", 4, 2, 5}, 7).attr("input_forget", true));
  c.push_back(rnn_case("lstm_input_forget", {"lstm", "reverse", 4, 2, 5}, 6).attr("input_forget", true));
  c.push_back(rnn_case("lstm_clip", {"lstm", "forward", 4, 2, 5}, 7).attr("clip", 0.8));
  c.push_back(rnn_case("gru_clip", {"gru", "bidirectional", 4, 2, 5}, 4).attr("clip", 0.8));
  c.push_back(
      rnn_case("gru_lbr_clip", {"gru", "forward", 4, 2, 5}, 4).attr("clip", 0.8).attr("linear_before_reset", true));
  c.push_back(rnn_case("rnn_clip", {"rnn", "reverse", 4, 2, 5}, 3).attr("clip", 0.5));
  c.push_back(rnn_case("rnn_relu", {"rnn", "forward", 4, 2, 5}, 4).attr("activations", std::string("Relu")));
  c.push_back(rnn_case("gru_hardsigmoid_affine", {"gru", "forward", 4, 2, 5}, 3)
                  .attr("activations", std::string("HardSigmoid,Affine"))
                  .attr("activation_alpha", std::vector<double>{0.3, 0.7})
                  .attr("activation_beta", std::vector<double>{0.4, 0.1}));
  c.push_back(rnn_case("lstm_leaky_scaledtanh_softsign", {"lstm", "bidirectional", 3, 2, 5}, 3)
                  .attr("activations", std::string("LeakyRelu,ScaledTanh,Softsign,Sigmoid,Tanh,Elu"))
                  .attr("activation_alpha", std::vector<double>{0.1, 0.9, 0, 0, 0, 0.8})
                  .attr("activation_beta", std::vector<double>{0, 1.3, 0, 0, 0, 0}));
  c.push_back(rnn_case("rnn_softplus", {"rnn", "forward", 4, 2, 5}, 3).attr("activations", std::string("softplus")));
  // Sizes: several gemm panels (G*H = 160 / 120), batches of 1 and 9 (row blocks), one step.
  c.push_back(rnn_case("lstm_h40_b9", {"lstm", "bidirectional", 3, 9, 40}, 6).gen(1, Gen::uniform(-0.2, 0.2)));
  c.push_back(rnn_case("gru_h40_b1", {"gru", "forward", 4, 1, 40}, 3).gen(1, Gen::uniform(-0.2, 0.2)));
  c.push_back(rnn_case("gru_lbr_h40_b9", {"gru", "bidirectional", 3, 9, 40}, 4)
                  .attr("linear_before_reset", true)
                  .gen(1, Gen::uniform(-0.2, 0.2)));
  c.push_back(rnn_case("rnn_one_step", {"rnn", "bidirectional", 1, 2, 3}, 3));

  auto err = [&](const std::string& name, std::vector<Shape> shapes, Attrs attrs, ErrorCode code,
                 std::vector<DType> dts = {}) {
    if (dts.empty()) dts.assign(shapes.size(), f);
    attrs.set("cell", attrs.has("cell") ? attrs.s("cell") : std::string("gru"));
    e.push_back({"rnn_sequence/" + name, op, std::move(shapes), std::move(dts), std::move(attrs), code});
  };
  err("r_not_gates_h", {{4, 2, 15}, {1, 14, 5}, {1, 2, 5}}, {}, ErrorCode::shape_mismatch);
  err("r_directions", {{4, 2, 15}, {2, 15, 5}, {1, 2, 5}}, {}, ErrorCode::shape_mismatch);
  err("xw_width", {{4, 2, 14}, {1, 15, 5}, {1, 2, 5}}, {}, ErrorCode::shape_mismatch);
  err("h0_batch", {{4, 2, 15}, {1, 15, 5}, {1, 3, 5}}, {}, ErrorCode::shape_mismatch);
  err("rb_shape", {{4, 2, 15}, {1, 15, 5}, {1, 2, 5}, {15}}, {}, ErrorCode::shape_mismatch);
  err("seq_lens_float", {{4, 2, 15}, {1, 15, 5}, {1, 2, 5}, {1, 15}, {2}}, {}, ErrorCode::dtype_mismatch,
      {f, f, f, f, f});
  err("c0_for_gru", {{4, 2, 15}, {1, 15, 5}, {1, 2, 5}, {1, 15}, {2}, {1, 2, 5}}, {}, ErrorCode::invalid_argument,
      {f, f, f, f, DType::i32, f});
  err("input_forget_gru", {{4, 2, 15}, {1, 15, 5}, {1, 2, 5}}, {{"input_forget", true}}, ErrorCode::invalid_argument);
  err("unknown_activation", {{4, 2, 15}, {1, 15, 5}, {1, 2, 5}}, {{"activations", std::string("Sigmoid,Swish")}},
      ErrorCode::unsupported);
  err("activation_count", {{4, 2, 15}, {1, 15, 5}, {1, 2, 5}}, {{"activations", std::string("Sigmoid")}},
      ErrorCode::invalid_argument);
  err("dtype_mismatch", {{4, 2, 15}, {1, 15, 5}, {1, 2, 5}}, {}, ErrorCode::dtype_mismatch, {f, DType::f64, f});
  err("negative_clip", {{4, 2, 15}, {1, 15, 5}, {1, 2, 5}}, {{"clip", -1.0}}, ErrorCode::invalid_argument);
}

}  // namespace spore::conformance
