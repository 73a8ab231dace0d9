// CPU kernels of the binary family. Broadcasting is reduced to contiguous runs: the output's dims
// are collapsed (size-1 dims dropped, neighbours merged where every input is contiguous across them),
// so the innermost dim is a run in which each input is either a vector (stride 1) or a scalar
// (stride 0). Same shape, scalar operand, [N,C]+[C] and [N,C,H,W]+[C,1,1] all become long runs.
// Work is split into fixed-size chunks of the flat output (independent of the thread count); each
// chunk writes only its own outputs, and elements do not depend on where a chunk starts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/families.h"
#include "base/thread_pool.h"

namespace spore::cpu {

int simd_binary_code(OpId op) {
  switch (op) {
    case "add"_op: return 0;
    case "sub"_op: return 1;
    case "mul"_op: return 2;
    case "div"_op: return 3;
    case "maximum"_op: return 4;
    case "minimum"_op: return 5;
    default: return -1;
  }
}

// Highway loops from binary_simd.cpp. op: 0 add, 1 sub, 2 mul, 3 div, 4 max, 5 min;
// mode: 0 both vectors, 1 b scalar, 2 a scalar.
void simd_binary(int op, const float* a, const float* b, float* out, size_t n, int mode);
void simd_binary(int op, const double* a, const double* b, double* out, size_t n, int mode);
void simd_binary(int op, const f16* a, const f16* b, f16* out, size_t n, int mode);
void simd_binary(int op, const bf16* a, const bf16* b, bf16* out, size_t n, int mode);

namespace {

constexpr int kMaxInputs = 3;
constexpr int64_t kGrainCheap = 1 << 16;   // elements per task for memory-bound loops
constexpr int64_t kGrainCostly = 1 << 12;  // pow, fmod, and scalar f16/bf16 conversions

// One contiguous run: `in[k]` points at input k's first element; bit k of `scalar_mask` says input
// k is a scalar for the whole run (stride 0). `user` carries per-op data (e.g. the simd op code).
using RunFn = void (*)(const void* user, char* out, const char* const* in, int64_t len, unsigned scalar_mask);

struct Plan {
  std::vector<int64_t> shape;                // collapsed output dims (at least one)
  std::vector<int64_t> strides[kMaxInputs];  // per input, in elements; 0 on broadcast dims
};

Plan make_plan(const Shape& out, std::span<const Tensor> ins) {
  const int r = static_cast<int>(out.size());
  const int n_in = static_cast<int>(ins.size());
  std::vector<int64_t> st[kMaxInputs];
  for (int k = 0; k < n_in; ++k) {
    const Shape& s = ins[k].shape();
    const int lead = r - static_cast<int>(s.size());
    st[k].assign(r, 0);
    int64_t acc = 1;
    for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
      st[k][lead + i] = s[i] == 1 ? 0 : acc;
      acc *= s[i];
    }
  }
  Plan p;
  for (int i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    bool merge = !p.shape.empty();
    for (int k = 0; k < n_in && merge; ++k) merge = p.strides[k].back() == st[k][i] * out[i];
    if (merge) {
      p.shape.back() *= out[i];
      for (int k = 0; k < n_in; ++k) p.strides[k].back() = st[k][i];
    } else {
      p.shape.push_back(out[i]);
      for (int k = 0; k < n_in; ++k) p.strides[k].push_back(st[k][i]);
    }
  }
  if (p.shape.empty()) {  // a single element
    p.shape.push_back(1);
    for (int k = 0; k < n_in; ++k) p.strides[k].push_back(0);
  }
  return p;
}

// Short innermost runs where an input repeats its run along the next dim (squeeze-excite's x * s on the blocked
// layout: [N, C/8, H*W, 8] * [N, C/8, 1, 8], runs of 8): that input's run is copied `rows` times into a buffer
// once per outer index, so each call covers rows * inner elements instead of one call (and one offset
// computation) per 8. Elementwise, so the same values as one run at a time. False when the pattern does not apply.
bool for_each_tiled_run(const KernelContext& k, const Plan& p, RunFn fn, const void* user) {
  const int r = static_cast<int>(p.shape.size());
  const int n_in = k.num_inputs();
  if (r < 2) return false;
  const int64_t inner = p.shape[r - 1], m = p.shape[r - 2];
  if (inner >= 256 || m < 2) return false;
  unsigned scalar = 0, tiled = 0;
  for (int i = 0; i < n_in; ++i) {
    const int64_t t = p.strides[i][r - 1], s = p.strides[i][r - 2];
    if (t == 0 && s == 0) scalar |= 1u << i;
    else if (t == 1 && s == 0) tiled |= 1u << i;
    else if (!(t == 1 && s == inner)) return false;
  }
  if (tiled == 0) return false;
  const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(m, 4096 / inner));
  const int64_t chunks_per = (m + rows - 1) / rows;
  int64_t outer = 1;
  for (int d = 0; d < r - 2; ++d) outer *= p.shape[d];
  const char* base[kMaxInputs] = {};
  int64_t es[kMaxInputs] = {};
  for (int i = 0; i < n_in; ++i) {
    base[i] = static_cast<const char*>(k.in(i).raw_data());
    es[i] = static_cast<int64_t>(dtype_size(k.in(i).dtype()));
  }
  char* obase = static_cast<char*>(k.out().raw_data());
  const int64_t oes = static_cast<int64_t>(dtype_size(k.out().dtype()));
  parallel_for(outer * chunks_per, [&](int64_t task) {
    const int64_t o = task / chunks_per, r0 = task % chunks_per * rows, nr = std::min(rows, m - r0);
    thread_local std::vector<char> buf[kMaxInputs];
    const char* ptrs[kMaxInputs] = {};
    for (int i = 0; i < n_in; ++i) {
      int64_t off = 0;
      for (int d = r - 3, rem = o; d >= 0; --d) {
        off += rem % p.shape[d] * p.strides[i][d];
        rem /= p.shape[d];
      }
      const char* at = base[i] + off * es[i];
      if (tiled >> i & 1u) {
        const size_t row_bytes = static_cast<size_t>(inner * es[i]);
        buf[i].resize(row_bytes * static_cast<size_t>(nr));
        std::memcpy(buf[i].data(), at, row_bytes);
        for (size_t done = row_bytes, total = row_bytes * static_cast<size_t>(nr); done < total; done *= 2)
          std::memcpy(buf[i].data() + done, buf[i].data(), std::min(done, total - done));  // doubling copies
        ptrs[i] = buf[i].data();
      } else {
        ptrs[i] = (scalar >> i & 1u) ? at : at + r0 * inner * es[i];
      }
    }
    fn(user, obase + (o * m + r0) * inner * oes, ptrs, nr * inner, scalar);
  });
  return true;
}

void for_each_run(const KernelContext& k, RunFn fn, const void* user, int64_t grain) {
  const Tensor& out = k.out();
  const int64_t numel = out.numel();
  if (numel == 0) return;
  const int n_in = k.num_inputs();
  // Fast path, no plan: every input is full-size (then its layout matches the output's) or a scalar.
  // Covers same-shape and tensor-scalar ops, and keeps small ops cheap (no allocations).
  bool flat = true;
  for (int i = 0; i < n_in; ++i) flat &= k.in(i).numel() == numel || k.in(i).numel() == 1;
  if (flat) {
    unsigned fmask = 0;
    const char* fbase[kMaxInputs] = {};
    int64_t fes[kMaxInputs] = {};
    for (int i = 0; i < n_in; ++i) {
      if (k.in(i).numel() == 1 && numel != 1) fmask |= 1u << i;
      fbase[i] = static_cast<const char*>(k.in(i).raw_data());
      fes[i] = static_cast<int64_t>(dtype_size(k.in(i).dtype()));
    }
    char* fout = static_cast<char*>(out.raw_data());
    const int64_t foes = static_cast<int64_t>(dtype_size(out.dtype()));
    const auto run_chunk = [=](int64_t c) {
      const int64_t pos = c * grain, len = std::min(grain, numel - pos);
      const char* ptrs[kMaxInputs] = {};
      for (int i = 0; i < n_in; ++i) ptrs[i] = (fmask >> i & 1u) ? fbase[i] : fbase[i] + pos * fes[i];
      fn(user, fout + pos * foes, ptrs, len, fmask);
    };
    const int64_t chunks = num_chunks(numel, grain);
    if (chunks == 1) run_chunk(0);
    else parallel_for(chunks, run_chunk);
    return;
  }
  const Plan p = make_plan(out.shape(), k.inputs);
  if (for_each_tiled_run(k, p, fn, user)) return;
  const int r = static_cast<int>(p.shape.size());
  const int64_t inner = p.shape.back();
  unsigned mask = 0;
  const char* base[kMaxInputs] = {};
  int64_t esize[kMaxInputs] = {};
  for (int i = 0; i < n_in; ++i) {
    if (p.strides[i].back() == 0) mask |= 1u << i;
    base[i] = static_cast<const char*>(k.in(i).raw_data());
    esize[i] = static_cast<int64_t>(dtype_size(k.in(i).dtype()));
  }
  char* obase = static_cast<char*>(out.raw_data());
  const int64_t oesize = static_cast<int64_t>(dtype_size(out.dtype()));
  parallel_for(num_chunks(numel, grain), [&](int64_t c) {
    int64_t pos = c * grain;
    const int64_t end = std::min(pos + grain, numel);
    std::vector<int64_t> idx(r);
    for (int64_t d = r - 1, rem = pos; d >= 0; --d) {
      idx[d] = rem % p.shape[d];
      rem /= p.shape[d];
    }
    while (pos < end) {
      const int64_t len = std::min(inner - idx[r - 1], end - pos);
      const char* ptrs[kMaxInputs] = {};
      for (int i = 0; i < n_in; ++i) {
        int64_t off = 0;
        for (int d = 0; d < r; ++d) off += idx[d] * p.strides[i][d];
        ptrs[i] = base[i] + off * esize[i];
      }
      fn(user, obase + pos * oesize, ptrs, len, mask);
      pos += len;
      idx[r - 1] += len;
      for (int d = r - 1; d > 0 && idx[d] == p.shape[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

// ---- Highway-backed floating arithmetic

template <typename T>
void run_simd(const void* user, char* out, const char* const* in, int64_t len, unsigned mask) {
  const int mode = (mask & 2u) ? 1 : (mask & 1u) ? 2 : 0;  // both scalar only when len == 1
  simd_binary(*static_cast<const int*>(user), reinterpret_cast<const T*>(in[0]), reinterpret_cast<const T*>(in[1]),
              reinterpret_cast<T*>(out), static_cast<size_t>(len), mode);
}

// ---- scalar loops: integers, comparisons, pow/mod, logical. C is the compute type.

template <typename T> using Unsigned = std::make_unsigned_t<T>;
// Integer arithmetic wraps (two's complement, like NumPy) without signed-overflow UB.
struct IAdd { template <class T> static T f(T a, T b) { return static_cast<T>(Unsigned<T>(a) + Unsigned<T>(b)); } };
struct ISub { template <class T> static T f(T a, T b) { return static_cast<T>(Unsigned<T>(a) - Unsigned<T>(b)); } };
struct IMul { template <class T> static T f(T a, T b) { return static_cast<T>(Unsigned<T>(a) * Unsigned<T>(b)); } };
// Zero divisors are rejected before the loop; MIN / -1 would trap on x86, so -1 is negation.
struct IDiv {
  template <class T> static T f(T a, T b) {
    if constexpr (std::is_signed_v<T>) if (b == -1) return static_cast<T>(Unsigned<T>(0) - Unsigned<T>(a));
    return static_cast<T>(a / b);
  }
};
struct IModPy {
  template <class T> static T f(T a, T b) {
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return 0;
      T r = static_cast<T>(a % b);
      if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
      return r;
    } else {
      return static_cast<T>(a % b);
    }
  }
};
struct IModC {
  template <class T> static T f(T a, T b) {
    if constexpr (std::is_signed_v<T>) if (b == -1) return 0;
    return static_cast<T>(a % b);
  }
};
struct Max { template <class T> static T f(T a, T b) { return std::max(a, b); } };
struct Min { template <class T> static T f(T a, T b) { return std::min(a, b); } };
struct FPow { template <class T> static T f(T a, T b) { return std::pow(a, b); } };
struct FModC { template <class T> static T f(T a, T b) { return std::fmod(a, b); } };
struct FModPy {
  template <class T> static T f(T a, T b) {
    T r = std::fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
};
struct Eq { template <class T> static bool f(T a, T b) { return a == b; } };
struct Ne { template <class T> static bool f(T a, T b) { return a != b; } };
struct Lt { template <class T> static bool f(T a, T b) { return a < b; } };
struct Le { template <class T> static bool f(T a, T b) { return a <= b; } };
struct Gt { template <class T> static bool f(T a, T b) { return a > b; } };
struct Ge { template <class T> static bool f(T a, T b) { return a >= b; } };
struct And { template <class T> static bool f(T a, T b) { return a && b; } };
struct Or { template <class T> static bool f(T a, T b) { return a || b; } };

// T: stored input type, C: compute type (float for f16/bf16), R: stored output type.
template <typename T, typename C, typename R, class F>
void run_loop(const void*, char* out, const char* const* in, int64_t len, unsigned mask) {
  const T* a = reinterpret_cast<const T*>(in[0]);
  const T* b = reinterpret_cast<const T*>(in[1]);
  R* o = reinterpret_cast<R*>(out);
  const auto res = [](C x, C y) { return static_cast<R>(F::f(x, y)); };
  if (mask == 0) {
    for (int64_t j = 0; j < len; ++j) o[j] = res(static_cast<C>(a[j]), static_cast<C>(b[j]));
  } else if (mask == 2u) {
    const C y = static_cast<C>(b[0]);
    for (int64_t j = 0; j < len; ++j) o[j] = res(static_cast<C>(a[j]), y);
  } else if (mask == 1u) {
    const C x = static_cast<C>(a[0]);
    for (int64_t j = 0; j < len; ++j) o[j] = res(x, static_cast<C>(b[j]));
  } else {
    const R v = res(static_cast<C>(a[0]), static_cast<C>(b[0]));
    for (int64_t j = 0; j < len; ++j) o[j] = v;
  }
}

template <typename T> using ComputeOf = std::conditional_t<std::is_same_v<T, f16> || std::is_same_v<T, bf16>, float, T>;

template <typename T, class F>
RunFn loop_same() { return run_loop<T, ComputeOf<T>, T, F>; }
template <typename T, class F>
RunFn loop_bool() { return run_loop<T, ComputeOf<T>, bool, F>; }

struct Choice {
  RunFn fn = nullptr;
  int64_t grain = kGrainCheap;
};

template <class F>
Choice integer_loop(DType t) {
  switch (t) {
    case DType::i64: return {loop_same<int64_t, F>()};
    case DType::i32: return {loop_same<int32_t, F>()};
    case DType::i8: return {loop_same<int8_t, F>()};
    case DType::u8: return {loop_same<uint8_t, F>()};
    default: return {};
  }
}

template <class F>
Choice floating_loop(DType t) {
  switch (t) {
    case DType::f64: return {loop_same<double, F>(), kGrainCostly};
    case DType::f32: return {loop_same<float, F>(), kGrainCostly};
    case DType::f16: return {loop_same<f16, F>(), kGrainCostly};
    case DType::bf16: return {loop_same<bf16, F>(), kGrainCostly};
    default: return {};
  }
}

template <class F>
Choice compare_loop(DType t) {
  switch (t) {
    case DType::f64: return {loop_bool<double, F>()};
    case DType::f32: return {loop_bool<float, F>()};
    case DType::f16: return {loop_bool<f16, F>(), kGrainCostly};
    case DType::bf16: return {loop_bool<bf16, F>(), kGrainCostly};
    case DType::i64: return {loop_bool<int64_t, F>()};
    case DType::i32: return {loop_bool<int32_t, F>()};
    case DType::i8: return {loop_bool<int8_t, F>()};
    case DType::u8: return {loop_bool<uint8_t, F>()};
    case DType::boolean: return {loop_bool<bool, F>()};
  }
  return {};
}

Choice simd_choice(DType t) {
  switch (t) {
    case DType::f64: return {run_simd<double>};
    case DType::f32: return {run_simd<float>};
    case DType::f16: return {run_simd<f16>};
    case DType::bf16: return {run_simd<bf16>};
    default: return {};
  }
}

template <typename T>
bool any_zero(const Tensor& t) {
  const T* p = t.data<T>();
  const int64_t n = t.numel();
  bool zero = false;
  for (int64_t i = 0; i < n; ++i) zero |= p[i] == 0;
  return zero;
}

void check_divisor(const KernelContext& k) {
  const Tensor& b = k.in(1);
  bool zero = false;
  switch (b.dtype()) {
    case DType::i64: zero = any_zero<int64_t>(b); break;
    case DType::i32: zero = any_zero<int32_t>(b); break;
    case DType::i8: zero = any_zero<int8_t>(b); break;
    case DType::u8: zero = any_zero<uint8_t>(b); break;
    default: return;
  }
  SPORE_CHECK(!zero, ErrorCode::invalid_argument, "[{}] integer division by zero: divisor b ({}{}) has a zero element",
              op_name(k.op), dtype_name(b.dtype()), shape_str(b.shape()));
}

Choice integer_arith(OpId op, DType t, bool fmod) {
  switch (op) {
    case "add"_op: return integer_loop<IAdd>(t);
    case "sub"_op: return integer_loop<ISub>(t);
    case "mul"_op: return integer_loop<IMul>(t);
    case "div"_op: return integer_loop<IDiv>(t);
    case "maximum"_op: return integer_loop<Max>(t);
    case "minimum"_op: return integer_loop<Min>(t);
    case "mod"_op: return fmod ? integer_loop<IModC>(t) : integer_loop<IModPy>(t);
    default: return {};
  }
}

Choice pick(const KernelContext& k) {
  const DType t = k.in(0).dtype();
  switch (k.op) {
    case "pow"_op: return floating_loop<FPow>(t);
    case "mod"_op:
      if (is_floating(t)) return k.attrs.b("fmod") ? floating_loop<FModC>(t) : floating_loop<FModPy>(t);
      return integer_arith(k.op, t, k.attrs.b("fmod"));
    case "eq"_op: return compare_loop<Eq>(t);
    case "ne"_op: return compare_loop<Ne>(t);
    case "lt"_op: return compare_loop<Lt>(t);
    case "le"_op: return compare_loop<Le>(t);
    case "gt"_op: return compare_loop<Gt>(t);
    case "ge"_op: return compare_loop<Ge>(t);
    case "logical_and"_op: return {loop_same<bool, And>()};
    case "logical_or"_op: return {loop_same<bool, Or>()};
    default: return is_floating(t) ? simd_choice(t) : integer_arith(k.op, t, false);
  }
}

void binary_kernel(KernelContext& k) {
  if (k.op == "div"_op || k.op == "mod"_op) check_divisor(k);
  const Choice c = pick(k);
  SPORE_ASSERT(c.fn != nullptr, "no cpu loop for {} on {}", op_name(k.op), dtype_name(k.in(0).dtype()));
  const int code = simd_binary_code(k.op);
  for_each_run(k, c.fn, &code, c.grain);
}

// where selects bytes, so one loop per element size serves every dtype. Each broadcast pattern (which of
// cond, a, b is a scalar run) gets its own loop with constant strides, so the compiler vectorizes it
// (e.g. relu's gradient, where(x > 0, dy, 0), has a scalar b).
template <typename U, unsigned M>
void where_loop(char* out, const char* const* in, int64_t len) {
  const bool* c = reinterpret_cast<const bool*>(in[0]);
  const U* a = reinterpret_cast<const U*>(in[1]);
  const U* b = reinterpret_cast<const U*>(in[2]);
  U* o = reinterpret_cast<U*>(out);
  constexpr int64_t sc = (M & 1u) ? 0 : 1, sa = (M & 2u) ? 0 : 1, sb = (M & 4u) ? 0 : 1;
  for (int64_t j = 0; j < len; ++j) {
    const U m = static_cast<U>(0) - static_cast<U>(c[j * sc]);  // all ones when true: a branch-free select
    o[j] = static_cast<U>((a[j * sa] & m) | (b[j * sb] & ~m));
  }
}

template <typename U>
void run_where(const void*, char* out, const char* const* in, int64_t len, unsigned mask) {
  switch (mask & 7u) {
    case 0: return where_loop<U, 0>(out, in, len);
    case 1: return where_loop<U, 1>(out, in, len);
    case 2: return where_loop<U, 2>(out, in, len);
    case 3: return where_loop<U, 3>(out, in, len);
    case 4: return where_loop<U, 4>(out, in, len);
    case 5: return where_loop<U, 5>(out, in, len);
    case 6: return where_loop<U, 6>(out, in, len);
    default: return where_loop<U, 7>(out, in, len);
  }
}

void where_kernel(KernelContext& k) {
  RunFn fn = nullptr;
  switch (dtype_size(k.out().dtype())) {
    case 1: fn = run_where<uint8_t>; break;
    case 2: fn = run_where<uint16_t>; break;
    case 4: fn = run_where<uint32_t>; break;
    default: fn = run_where<uint64_t>; break;
  }
  for_each_run(k, fn, nullptr, kGrainCheap);
}

}  // namespace

void register_binary(KernelRegistry& r) {
  const DTypeSet num = dtypes::numeric;
  for (OpId op : {"add"_op, "sub"_op, "mul"_op, "div"_op, "maximum"_op, "minimum"_op})
    r.add(Backend::cpu, op, num, binary_kernel, "hwy");
  for (OpId op : {"mod"_op, "lt"_op, "le"_op, "gt"_op, "ge"_op}) r.add(Backend::cpu, op, num, binary_kernel, "scalar");
  r.add(Backend::cpu, "pow"_op, dtypes::floating, binary_kernel, "scalar");
  r.add(Backend::cpu, "eq"_op, num | dtypes::boolean, binary_kernel, "scalar");
  r.add(Backend::cpu, "ne"_op, num | dtypes::boolean, binary_kernel, "scalar");
  r.add(Backend::cpu, "logical_and"_op, dtypes::boolean, binary_kernel, "scalar");
  r.add(Backend::cpu, "logical_or"_op, dtypes::boolean, binary_kernel, "scalar");
  r.add(Backend::cpu, "where"_op, dtypes::all, where_kernel, "scalar");
}

}  // namespace spore::cpu
