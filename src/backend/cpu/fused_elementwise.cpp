// CPU kernel of fused_elementwise (f32). The output is walked in blocks of kBlock elements: each input
// block is read once (full-size inputs in place, scalars as scalars, other broadcast inputs expanded
// into a block buffer), each instruction runs the same Highway function the unfused op's kernel runs
// (unary_f32 / simd_binary, whose per-element results do not depend on where a run starts or how
// long it is), and outputs are written once. So the bits equal the unfused ops' bits, and tasks of a
// fixed number of blocks make them independent of the thread count.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/elementwise_simd.h"
#include "backend/cpu/families.h"
#include "base/thread_pool.h"
#include "ops/fused_elementwise.h"

namespace spore::cpu {

// binary_simd.cpp. op: 0 add, 1 sub, 2 mul, 3 div, 4 max, 5 min; mode: 0 both vectors, 1 b scalar, 2 a scalar.
void simd_binary(int op, const float* a, const float* b, float* out, size_t n, int mode);

namespace {

constexpr int64_t kBlock = 1024;          // elements per block: a few block buffers stay in L1/L2
constexpr int64_t kBlocksPerTask = 16;    // fixed task size (independent of the thread count)

UnaryOp unary_code(const fused::Instr& ins) {
  const auto op = unary_op_for(ins.op, ins.p0 != 0);
  SPORE_CHECK(op.has_value(), ErrorCode::internal, "fused_elementwise: {} is not a unary op", op_name(ins.op));
  return *op;
}

// A bound as the unfused clip kernel holds it: rounded through one f32 element.
float f32_bound(double v) {
  float r;
  store_from_double(&r, DType::f32, v);
  return r;
}

struct Step {
  bool binary = false;
  int code = 0;  // simd_binary op code
  UnaryOp unary{};
  UnaryParams params;
  int a = -1, b = -1;
};

// How an input is read: in place (full size), as one scalar, or expanded through `dims`/`strides`
// (the output dims, collapsed where the input is contiguous across neighbours; stride 0 = broadcast).
struct InputAccess {
  enum Kind { full, scalar, broadcast } kind = full;
  const float* data = nullptr;
  std::vector<int64_t> dims, strides;
};

InputAccess make_access(const Tensor& t, const Shape& out) {
  InputAccess a;
  a.data = t.data<float>();
  const int64_t numel = shape_numel(out);
  if (t.numel() == numel) return a;
  if (t.numel() == 1) {
    a.kind = InputAccess::scalar;
    return a;
  }
  a.kind = InputAccess::broadcast;
  const Shape& s = t.shape();
  const int r = static_cast<int>(out.size()), lead = r - static_cast<int>(s.size());
  std::vector<int64_t> st(r, 0);
  for (int64_t i = static_cast<int64_t>(s.size()) - 1, acc = 1; i >= 0; --i) {
    st[lead + i] = s[i] == 1 ? 0 : acc;
    acc *= s[i];
  }
  for (int i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    if (!a.dims.empty() && a.strides.back() == st[i] * out[i]) {
      a.dims.back() *= out[i];
      a.strides.back() = st[i];
    } else {
      a.dims.push_back(out[i]);
      a.strides.push_back(st[i]);
    }
  }
  return a;
}

// Writes elements [pos, pos + len) of the broadcast input into dst, inner runs at a time.
void expand_block(const InputAccess& a, int64_t pos, int64_t len, float* dst) {
  const int r = static_cast<int>(a.dims.size());
  int64_t idx[16] = {};
  int64_t rem = pos;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % a.dims[d];
    rem /= a.dims[d];
  }
  const int64_t inner = a.dims[r - 1], inner_stride = a.strides[r - 1];
  int64_t done = 0;
  while (done < len) {
    int64_t off = 0;
    for (int d = 0; d < r - 1; ++d) off += idx[d] * a.strides[d];
    const int64_t run = std::min(inner - idx[r - 1], len - done);
    if (inner_stride == 0) {
      std::fill(dst + done, dst + done + run, a.data[off]);
    } else {
      std::memcpy(dst + done, a.data + off + idx[r - 1] * inner_stride, static_cast<size_t>(run) * sizeof(float));
    }
    done += run;
    idx[r - 1] += run;
    for (int d = r - 1; d > 0 && idx[d] == a.dims[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

void fused_f32_kernel(KernelContext& k) {
  const fused::Program prog = fused::decode(k.attrs, k.num_inputs());
  const int n_in = k.num_inputs();
  const int n_slots = n_in + static_cast<int>(prog.instrs.size());
  const Shape& out_shape = k.out(0).shape();
  const int64_t numel = k.out(0).numel();
  if (numel == 0) return;
  SPORE_CHECK(out_shape.size() <= 16, ErrorCode::unsupported, "[fused_elementwise] rank {} above 16", out_shape.size());

  std::vector<InputAccess> access;
  for (int i = 0; i < n_in; ++i) access.push_back(make_access(k.in(i), out_shape));
  std::vector<Step> steps;
  for (const fused::Instr& ins : prog.instrs) {
    Step s;
    s.a = ins.args[0];
    if (ins.arity == 2) {
      s.binary = true;
      s.code = simd_binary_code(ins.op);
      s.b = ins.args[1];
    } else {
      s.unary = unary_code(ins);
      if (ins.op == "leaky_relu"_op) s.params.a = static_cast<float>(ins.p0);
      if (ins.op == "hardsigmoid"_op) {
        s.params.a = static_cast<float>(ins.p0);
        s.params.b = static_cast<float>(ins.p1);
      }
      if (ins.op == "clip"_op) {
        s.params.a = f32_bound(ins.p0);
        s.params.b = f32_bound(ins.p1);
      }
    }
    steps.push_back(s);
  }
  // Which output a slot's block is computed straight into (-1: a block buffer), so most outputs cost no copy.
  std::vector<int> direct(n_slots, -1);
  for (size_t o = 0; o < prog.results.size(); ++o) {
    const int s = prog.results[o];
    if (s >= n_in && direct[s] < 0) direct[s] = static_cast<int>(o);
  }
  std::vector<float*> outs;
  for (size_t o = 0; o < prog.results.size(); ++o) outs.push_back(k.out(static_cast<int>(o)).data<float>());

  const auto run_task = [&](int64_t task) {
    const int64_t begin = task * kBlocksPerTask * kBlock, end = std::min(numel, begin + kBlocksPerTask * kBlock);
    // Per-task buffers: one block per slot (unused for slots read in place or computed into an output), no longer
    // than the task's elements and not zeroed: every slot is written before it is read. (Zeroing n_slots full
    // blocks was most of a small tensor's time.)
    const int64_t stride = std::min<int64_t>(kBlock, end - begin);
    const std::unique_ptr<float[]> buf(new float[static_cast<size_t>(n_slots * stride)]);
    std::vector<const float*> ptr(n_slots);
    std::vector<uint8_t> is_scalar(n_slots);
    for (int64_t pos = begin; pos < end; pos += kBlock) {
      const int64_t len = std::min(kBlock, end - pos);
      for (int i = 0; i < n_in; ++i) {
        const InputAccess& a = access[i];
        is_scalar[i] = a.kind == InputAccess::scalar;
        if (a.kind == InputAccess::full) ptr[i] = a.data + pos;
        else if (a.kind == InputAccess::scalar) ptr[i] = a.data;
        else {
          float* dst = buf.get() + i * stride;
          expand_block(a, pos, len, dst);
          ptr[i] = dst;
        }
      }
      for (size_t j = 0; j < steps.size(); ++j) {
        const Step& s = steps[j];
        const int slot = n_in + static_cast<int>(j);
        const bool sa = is_scalar[s.a], sb = s.binary && is_scalar[s.b];
        // All operands scalar: one element, and the result stays a scalar (same value the unfused op gives).
        const bool scalar = sa && (!s.binary || sb);
        float* dst = direct[slot] >= 0 && !scalar ? outs[direct[slot]] + pos : buf.get() + slot * stride;
        const auto n = static_cast<size_t>(scalar ? 1 : len);
        if (s.binary) simd_binary(s.code, ptr[s.a], ptr[s.b], dst, n, scalar ? 0 : sb ? 1 : sa ? 2 : 0);
        else unary_f32(s.unary, ptr[s.a], dst, n, s.params);
        ptr[slot] = dst;
        is_scalar[slot] = scalar;
      }
      for (size_t o = 0; o < prog.results.size(); ++o) {
        const int s = prog.results[o];
        float* dst = outs[o] + pos;
        if (ptr[s] == dst) continue;
        if (is_scalar[s]) std::fill(dst, dst + len, *ptr[s]);
        else std::memcpy(dst, ptr[s], static_cast<size_t>(len) * sizeof(float));
      }
    }
  };
  const int64_t tasks = num_chunks(numel, kBlocksPerTask * kBlock);
  if (tasks == 1) run_task(0);
  else parallel_for(tasks, run_task);
}

}  // namespace

void register_fused_elementwise(KernelRegistry& r) {
  r.add(Backend::cpu, "fused_elementwise"_op, {DType::f32}, fused_f32_kernel, "hwy");
}

}  // namespace spore::cpu
