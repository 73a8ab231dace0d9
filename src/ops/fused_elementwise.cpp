// fused_elementwise: a chain or tree of elementwise/broadcast ops run as one kernel (made by the
// fuse_elementwise pass; the program format is in ops/fused_elementwise.h). Backends without a kernel
// for a dtype get the decomposition: the program replayed with the unfused ops.
#include "ops/fused_elementwise.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/families.h"
#include "ops/infer.h"
#include "ops/ops.h"
#include "ops/registry.h"

namespace spore {

namespace fused {

int fusable_arity(OpId op) {
  // The OpDefs' FusedForm arities by op index, read once: decode asks for every instruction of every call.
  static const std::vector<int8_t> builtin = [] {
    std::vector<int8_t> t(static_cast<size_t>(num_builtin_ops()));
    for (int i = 0; i < num_builtin_ops(); ++i) {
      const OpDef* d = op_registry().find(op_at(i));
      t[static_cast<size_t>(i)] = static_cast<int8_t>(d ? d->fused.arity : 0);
    }
    return t;
  }();
  const int i = op_index(op);
  if (i >= 0 && i < static_cast<int>(builtin.size())) return builtin[static_cast<size_t>(i)];
  const OpDef* d = i < 0 ? nullptr : op_registry().find(op);  // a custom op
  return d ? d->fused.arity : 0;
}

// The instruction parameters are the attributes the OpDef names (FusedForm::params): a number as itself, a
// choice as its index among the choices.
void encode_params(OpId op, const Attrs& attrs, double& p0, double& p1) {
  p0 = p1 = 0;
  const OpDef& d = op_registry().get(op);
  double* out[2] = {&p0, &p1};
  for (size_t i = 0; i < d.fused.params.size(); ++i) {
    const AttrSpec& a = *d.find_attr(d.fused.params[i]);
    if (a.choices.empty()) {
      *out[i] = attrs.f(a.name);
    } else {
      const auto it = std::find(a.choices.begin(), a.choices.end(), attrs.s(a.name));
      *out[i] = static_cast<double>(it - a.choices.begin());
    }
  }
}

Attrs op_attrs(const Instr& ins) {
  const OpDef& d = op_registry().get(ins.op);
  Attrs out;
  const double p[2] = {ins.p0, ins.p1};
  for (size_t i = 0; i < d.fused.params.size(); ++i) {
    const AttrSpec& a = *d.find_attr(d.fused.params[i]);
    if (a.choices.empty()) {
      out.set(a.name, p[i]);
    } else {
      const auto k = static_cast<size_t>(p[i]);
      out.set(a.name, a.choices.at(k < a.choices.size() ? k : 0));
    }
  }
  return out;
}

Program decode(const Attrs& attrs, int num_inputs, std::string_view where) {
  const std::vector<int64_t>& prog = attrs.ints("program");
  const std::vector<double> params = attrs.floats("params");
  const std::vector<int64_t>& results = attrs.ints("results");
  const auto fail = [&](const std::string& msg) {
    SPORE_FAIL(ErrorCode::invalid_argument, "[fused_elementwise] {}{}{}", msg, where.empty() ? "" : " (node ",
               where.empty() ? std::string() : std::string(where) + ")");
  };
  if (prog.size() % kInstrWidth != 0) fail(fmt::format("program has {} entries, not a multiple of {}", prog.size(), kInstrWidth));
  const size_t n = prog.size() / kInstrWidth;
  if (n == 0) fail("program is empty");
  if (params.size() != n * kParamWidth)
    fail(fmt::format("params has {} entries, expected {} ({} per instruction)", params.size(), n * kParamWidth, kParamWidth));
  if (results.empty()) fail("results is empty");
  Program p;
  p.num_inputs = num_inputs;
  p.instrs.resize(n);
  for (size_t j = 0; j < n; ++j) {
    Instr& ins = p.instrs[j];
    const int64_t op = prog[j * kInstrWidth];
    ins.arity = op < 0 || op > UINT32_MAX ? 0 : fusable_arity(static_cast<OpId>(op));
    if (ins.arity == 0)  // 0 for any other id
      fail(fmt::format("instruction {}: op id {} is not an op a program may contain", j, op));
    ins.op = static_cast<OpId>(op);
    const int64_t slots = num_inputs + static_cast<int64_t>(j);
    for (int a = 0; a < 3; ++a) {
      const int64_t s = prog[j * kInstrWidth + 1 + a];
      if (a < ins.arity) {
        if (s < 0 || s >= slots)
          fail(fmt::format("instruction {} ({}): operand {} is slot {}, expected 0..{}", j, op_name(ins.op), a, s, slots - 1));
        ins.args[a] = static_cast<int>(s);
      } else if (s != -1) {
        fail(fmt::format("instruction {} ({}): operand {} must be -1, got {}", j, op_name(ins.op), a, s));
      }
    }
    ins.p0 = params[j * kParamWidth];
    ins.p1 = params[j * kParamWidth + 1];
  }
  const int64_t total = num_inputs + static_cast<int64_t>(n);
  for (int64_t r : results) {
    if (r < 0 || r >= total) fail(fmt::format("result slot {} out of range 0..{}", r, total - 1));
    p.results.push_back(static_cast<int>(r));
  }
  return p;
}

}  // namespace fused

namespace {

std::vector<TensorType> infer_fused(const InferContext& c) {
  const DType t = infer::common_dtype(c);
  const fused::Program p = fused::decode(c.attrs, c.num_inputs(), c.where);
  std::vector<Dim> dims = c.in(0).dims;
  for (int i = 1; i < c.num_inputs(); ++i) dims = infer::broadcast_dims(c, dims, c.in(i).dims);
  return std::vector<TensorType>(p.results.size(), TensorType(t, dims));
}

// Replays the program with the unfused ops (the fallback for dtypes and backends without a kernel).
std::vector<Tensor> decompose_fused(std::span<const Tensor> inputs, const Attrs& attrs) {
  const fused::Program p = fused::decode(attrs, static_cast<int>(inputs.size()));
  std::vector<Tensor> slots(inputs.begin(), inputs.end());
  for (const fused::Instr& ins : p.instrs) {
    std::vector<Tensor> args;
    for (int a = 0; a < ins.arity; ++a) args.push_back(slots[ins.args[a]]);
    slots.push_back(ops::call1(ins.op, args, fused::op_attrs(ins)));
  }
  Shape full = inputs[0].shape();
  for (size_t i = 1; i < inputs.size(); ++i) {
    const Shape& s = inputs[i].shape();
    if (s.size() > full.size()) full.insert(full.begin(), s.size() - full.size(), 1);
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& f = full[full.size() - s.size() + d];
      if (f == 1) f = s[d];
    }
  }
  std::vector<Tensor> outs;
  for (int r : p.results) outs.push_back(slots[r].shape() == full ? slots[r] : ops::expand(slots[r], full));
  return outs;
}

}  // namespace

void register_fused_elementwise_ops(OpRegistry& r) {
  // Opaque to other passes: a fused node has many inputs and outputs, so no pass that matches single
  // elementwise ops (activation fusion, in-place reuse) should take it for one.
  r.def("fused_elementwise"_op)
      .doc("Runs a program of elementwise/broadcast ops over the broadcast output shape in one pass "
           "(attributes: program, params, results; see ops/fused_elementwise.h).")
      .variadic_inputs("x", 1)
      .attr("program", AttrKind::i64s)
      .attr("params", AttrKind::f64s, std::vector<double>{})
      .attr("results", AttrKind::i64s)
      .dtypes(dtypes::floating)
      .traits(TraitSet{}, FusionKind::opaque, AmpPolicy::follow)
      .infer(infer_fused)
      .decompose(decompose_fused);
}

}  // namespace spore
