#pragma once
// The registry-driven conformance harness (docs/ARCHITECTURE.md, "Defining an op").
//
// Adding an op's test is one entry in cases_<family>.cpp:
//
//   c.push_back(OpCase("add/broadcast", "add"_op, {{2, 3}, {3}}));
//   c.push_back(OpCase("log", "log"_op, {{4, 5}}).gen(0, Gen::positive()));
//   c.push_back(OpCase("gather", "gather"_op, {{5, 3}, {4}}).attr("axis", 0).input_dtype(1, DType::i64)
//                   .gen(1, Gen::index(5)));
//
// From each entry the harness derives, for every dtype the case covers (default: every dtype the
// op accepts): cpu backend vs reference backend within the dtype's tolerance, eager == graph mode
// bit-for-bit, and 1 == 2 == 4 threads bit-for-bit. Inputs are random (Philox, seeded by the
// case name), never all zeros. A coverage test fails if an op or one of its dtypes has no case.
#include <optional>
#include <string>
#include <vector>

#include "base/attrs.h"
#include "ir/op_id.h"
#include "tensor/tensor.h"

namespace spore::conformance {

struct Gen {
  enum class Kind { uniform, index, boolean, integers, consecutive, q8_0_blocks, q4_0_blocks } kind = Kind::uniform;
  double lo = -2.0, hi = 2.0;
  static Gen uniform(double lo, double hi) { return {Kind::uniform, lo, hi}; }
  static Gen positive(double lo = 0.1, double hi = 3.0) { return {Kind::uniform, lo, hi}; }
  // Integers in [lo, hi) (as the input's dtype).
  static Gen integers(int64_t lo, int64_t hi) { return {Kind::integers, static_cast<double>(lo), static_cast<double>(hi)}; }
  // Valid indices for an axis of size n, including negative ones when `negative`.
  static Gen index(int64_t n, bool negative = false) { return {Kind::index, negative ? static_cast<double>(-n) : 0.0, static_cast<double>(n)}; }
  static Gen boolean() { return {Kind::boolean, 0, 1}; }
  // first, first + 1, ... (positions of consecutive tokens).
  static Gen consecutive(int64_t first) { return {Kind::consecutive, static_cast<double>(first), 0}; }
  // u8 rows of valid GGUF Q8_0 / Q4_0 blocks (ops/llm_ops.h): f16 scales in [lo, hi), random quants.
  static Gen q8_0_blocks(double lo = 0.002, double hi = 0.02) { return {Kind::q8_0_blocks, lo, hi}; }
  static Gen q4_0_blocks(double lo = 0.002, double hi = 0.02) { return {Kind::q4_0_blocks, lo, hi}; }
};

struct OpCase {
  std::string name;
  OpId op;
  std::vector<Shape> shapes;
  std::vector<Gen> gens;
  std::vector<std::optional<DType>> fixed_dtypes;  // per input; nullopt: the case's dtype
  Attrs attrs;
  std::optional<DTypeSet> dtypes;  // default: the op's dtypes
  double tol_scale = 1.0;          // widens the default tolerance (e.g. long reductions)
  bool graph = true;               // also check eager == graph

  OpCase(std::string n, OpId o, std::vector<Shape> s) : name(std::move(n)), op(o), shapes(std::move(s)) {
    gens.resize(shapes.size());
    fixed_dtypes.resize(shapes.size());
  }
  OpCase& attr(const std::string& k, AttrValue v) { attrs.set(k, std::move(v)); return *this; }
  OpCase& gen(int input, Gen g) { gens.at(input) = g; return *this; }
  OpCase& input_dtype(int input, DType t) { fixed_dtypes.at(input) = t; return *this; }
  OpCase& only(DTypeSet s) { dtypes = s; return *this; }
  OpCase& tol(double scale) { tol_scale = scale; return *this; }
  OpCase& no_graph() { graph = false; return *this; }
};

// Bad input that must be rejected by shape/dtype inference with `code`.
struct ErrorCase {
  std::string name;
  OpId op;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  Attrs attrs;
  ErrorCode code;
};

using CaseList = std::vector<OpCase>;
using ErrorList = std::vector<ErrorCase>;

// One pair per family file (cases_<family>.cpp).
void add_structure_cases(CaseList& c, ErrorList& e);
void add_elementwise_cases(CaseList& c, ErrorList& e);
void add_binary_cases(CaseList& c, ErrorList& e);
void add_reduce_cases(CaseList& c, ErrorList& e);
void add_linalg_cases(CaseList& c, ErrorList& e);
void add_conv_cases(CaseList& c, ErrorList& e);
void add_norm_cases(CaseList& c, ErrorList& e);
void add_shape_cases(CaseList& c, ErrorList& e);
void add_quant_cases(CaseList& c, ErrorList& e);
void add_fused_elementwise_cases(CaseList& c, ErrorList& e);
void add_fused_cases(CaseList& c, ErrorList& e);  // cases_fused.cpp: conv2d_fused, linear_fused
void add_attention_cases(CaseList& c, ErrorList& e);  // cases_attention.cpp: attention
void add_rnn_cases(CaseList& c, ErrorList& e);        // cases_rnn.cpp: rnn_sequence
void add_llm_cases(CaseList& c, ErrorList& e);        // cases_llm.cpp: linear_blockq(_multi), embed_blockq, rope, attention_kv
void add_index_cases(CaseList& c, ErrorList& e);      // cases_index.cpp: scatter_nd ... einsum
void add_dynamic_cases(CaseList& c, ErrorList& e);    // cases_dynamic.cpp: nonzero ... topk_dynamic

// Tolerance for comparing cpu results to the reference: |a-b| <= atol + rtol*|ref|.
struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance_for(DType t, double scale);

// Random inputs for a case at a dtype (deterministic per case name and input index).
std::vector<Tensor> make_inputs(const OpCase& c, DType dtype);

}  // namespace spore::conformance
