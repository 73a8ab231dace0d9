#pragma once
// The program of a `fused_elementwise` node (made by passes/fuse_elementwise.cpp), decoded for kernels.
//
// Attributes:
//   program: i64s, 4 per instruction: op id, then up to 3 operand slots (-1 = unused)
//   params:  f64s, 2 per instruction: leaky_relu alpha; clip min, max; gelu 1 = "tanh" form, 0 = "none"
//   results: i64s, the slot each output takes
// Slots 0..N-1 are the node's inputs, slot N+j is instruction j's result. Every output has the
// broadcast shape of all inputs; intermediates have the broadcast shape of their operands.
#include <vector>

#include "base/attrs.h"
#include "ir/op_id.h"

namespace spore::fused {

inline constexpr int kInstrWidth = 4;
inline constexpr int kParamWidth = 2;

struct Instr {
  OpId op{};
  int args[3] = {-1, -1, -1};
  int arity = 0;
  double p0 = 0, p1 = 0;
};

struct Program {
  int num_inputs = 0;
  std::vector<Instr> instrs;
  std::vector<int> results;  // slot per output
};

// Whether `op` may appear in a program, and its operand count (0 when it may not). The cpu kernel
// computes each of them with the same vector functions as the op's own kernel.
int fusable_arity(OpId op);
// Program parameters for one op's normalized attributes, and back.
void encode_params(OpId op, const Attrs& attrs, double& p0, double& p1);
Attrs op_attrs(const Instr& ins);
// Decodes and validates the attributes; errors name `where` (the node) and the bad instruction.
Program decode(const Attrs& attrs, int num_inputs, std::string_view where = {});

}  // namespace spore::fused
