// The tanhcustom plugin (examples/custom_ops/tanhcustom), loaded with dlopen and called through the C ABI with
// a kernel context filled here: special values, ULP bounds against f64 tanh (strided sweep of every f32 bit
// pattern, every f16 and bf16 pattern), v1/v2/v3 agreement, the gradient, bad calls, and bit-identical results
// whatever order and thread the chunks of parallel_for run on.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/half.h"
#include "ops/ops.h"
#include "runtime/runtime.h"
#include "tensor/tensor.h"
#include "spore/custom_op_abi.h"
#include "spore/kernels/tanh_f32.h"

#ifndef TANHCUSTOM_PLUGIN_PATH
#error "TANHCUSTOM_PLUGIN_PATH must name libtanhcustom.so (tests/CMakeLists.txt sets it)"
#endif

namespace {

const spore_plugin* plugin() {
  static const spore_plugin* p = [] {
    void* h = dlopen(TANHCUSTOM_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!h) return static_cast<const spore_plugin*>(nullptr);
    auto entry = reinterpret_cast<spore_plugin_entry_fn>(dlsym(h, SPORE_PLUGIN_ENTRY_SYMBOL));
    return entry ? entry() : nullptr;
  }();
  return p;
}

const spore_custom_op* find_op(const std::string& name) {
  const spore_plugin* p = plugin();
  for (int32_t i = 0; p && i < p->num_ops; ++i)
    if (name == p->ops[i].name) return &p->ops[i];
  return nullptr;
}

spore_kernel_fn find_kernel(const std::string& op, int32_t dtype) {
  const spore_custom_op* o = find_op(op);
  for (int32_t i = 0; o && i < o->num_kernels; ++i)
    if (o->kernels[i].dtype == dtype) return o->kernels[i].fn;
  return nullptr;
}

// parallel_for services. Serial: chunks in order on this thread.
void serial_for(void*, int64_t n, int64_t grain, spore_range_fn fn, void* user) {
  for (int64_t b = 0; b < n; b += grain) fn(user, b, std::min(n, b + grain));
}
// Shuffled: the same chunks in a random order, taken by 3 threads.
void shuffled_for(void* host, int64_t n, int64_t grain, spore_range_fn fn, void* user) {
  std::vector<int64_t> starts;
  for (int64_t b = 0; b < n; b += grain) starts.push_back(b);
  std::mt19937 rng(*static_cast<uint32_t*>(host));
  std::shuffle(starts.begin(), starts.end(), rng);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < starts.size();) fn(user, starts[i], std::min(n, starts[i] + grain));
  };
  std::thread t1(work), t2(work);
  work();
  t1.join();
  t2.join();
}

spore_tensor tensor(int32_t dtype, int64_t n, const void* data) {
  spore_tensor t{};
  t.type.dtype = dtype;
  t.type.ndim = 1;
  t.type.shape[0] = n;
  t.data = const_cast<void*>(data);
  return t;
}

enum class Pool { serial, shuffled, none };

// Calls `op`'s kernel for dtype on the given inputs (all of n elements) into out; returns the kernel's status
// and its message.
int call(const std::string& op, int32_t dtype, std::vector<const void*> ins, void* out, int64_t n,
         Pool pool = Pool::serial, std::string* msg = nullptr) {
  spore_kernel_fn fn = find_kernel(op, dtype);
  EXPECT_NE(fn, nullptr) << op << " has no kernel for dtype " << dtype;
  if (!fn) return -1;
  std::vector<spore_tensor> inputs;
  for (const void* p : ins) inputs.push_back(tensor(dtype, n, p));
  spore_tensor output = tensor(dtype, n, out);
  static uint32_t seed = 1;
  ++seed;
  spore_kernel_context ctx{};
  ctx.num_inputs = static_cast<int32_t>(inputs.size());
  ctx.inputs = inputs.data();
  ctx.num_outputs = 1;
  ctx.outputs = &output;
  ctx.num_threads = pool == Pool::shuffled ? 3 : 1;
  ctx.parallel_for = pool == Pool::serial ? serial_for : pool == Pool::shuffled ? shuffled_for : nullptr;
  ctx.host = &seed;
  char err[256] = "";
  const int rc = fn(&ctx, err, sizeof err);
  if (msg) *msg = err;
  return rc;
}

std::vector<float> run_f32(const std::string& op, const std::vector<float>& x, Pool pool = Pool::serial) {
  std::vector<float> y(x.size(), -7.0f);
  EXPECT_EQ(call(op, SPORE_F32, {x.data()}, y.data(), static_cast<int64_t>(x.size()), pool), 0);
  return y;
}

// Distance in representable values between two floats of the same format, given as sign-magnitude bits.
int64_t ordered(uint32_t bits, int width) {
  const uint32_t sign = 1u << (width - 1);
  return (bits & sign) ? -static_cast<int64_t>(bits & (sign - 1)) : static_cast<int64_t>(bits);
}
int64_t ulp_f32(float a, float b) {
  return std::llabs(ordered(std::bit_cast<uint32_t>(a), 32) - ordered(std::bit_cast<uint32_t>(b), 32));
}
uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// The correctly rounded 16-bit value of r: the nearest of the neighbours of a first rounding (ties: even).
template <class ToBits, class ToFloat>
uint16_t round16(double r, ToBits to_bits, ToFloat to_float) {
  const uint16_t h = to_bits(static_cast<float>(r));
  const int64_t o = ordered(h, 16);
  uint16_t best = h;
  double best_d = std::fabs(static_cast<double>(to_float(h)) - r);
  for (int64_t c : {o - 1, o + 1}) {
    if (c <= -0x7c00 || c >= 0x7c00) continue;
    const uint16_t cb = c < 0 ? static_cast<uint16_t>(0x8000 | -c) : static_cast<uint16_t>(c);
    const double v = to_float(cb);
    if (std::isnan(v) || std::isinf(v)) continue;
    const double d = std::fabs(v - r);
    if (d < best_d || (d == best_d && (cb & 1) == 0)) best = cb, best_d = d;
  }
  return best;
}

std::vector<float> random_f32(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class Tanhcustom : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(plugin(), nullptr) << "cannot load " << TANHCUSTOM_PLUGIN_PATH << ": " << dlerror(); }
};

TEST_F(Tanhcustom, ExposesFourOpsThroughAbi1) {
  const spore_plugin* p = plugin();
  EXPECT_EQ(p->abi_version, SPORE_CUSTOM_OP_ABI_VERSION);
  EXPECT_EQ(p->struct_size, sizeof(spore_plugin));
  EXPECT_STREQ(p->name, "tanhcustom");
  ASSERT_EQ(p->num_ops, 4);
  for (const char* name : {"tanhcustom_v1", "tanhcustom_v2", "tanhcustom_v3"}) {
    const spore_custom_op* op = find_op(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_EQ(op->num_inputs, 1);
    EXPECT_EQ(op->num_outputs, 1);
    EXPECT_TRUE(op->traits & SPORE_TRAIT_ELEMENTWISE);
    EXPECT_STREQ(op->grad_op, "tanhcustom_grad");
    EXPECT_NE(find_kernel(name, SPORE_F32), nullptr);
  }
  EXPECT_NE(find_kernel("tanhcustom_v3", SPORE_F16), nullptr);
  EXPECT_NE(find_kernel("tanhcustom_v3", SPORE_BF16), nullptr);
  const spore_custom_op* g = find_op("tanhcustom_grad");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->num_inputs, 3);
  EXPECT_EQ(g->grad_op, nullptr);
}

TEST_F(Tanhcustom, SpecialValuesAreExact) {
  const float inf = std::numeric_limits<float>::infinity();
  const float den_min = std::numeric_limits<float>::denorm_min();
  const float sub_max = std::bit_cast<float>(0x007fffffu);
  const std::vector<float> x = {0.0f, -0.0f, inf, -inf, den_min, -den_min, sub_max, -sub_max,
                                std::numeric_limits<float>::min(), 9.02f, -9.02f, 20.0f, 88.8f, -1e30f,
                                std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                                std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                                std::bit_cast<float>(0x7f800001u)};  // signalling nan
  for (const char* op : {"tanhcustom_v1", "tanhcustom_v3"}) {
    const std::vector<float> y = run_f32(op, x);
    SCOPED_TRACE(op);
    EXPECT_EQ(bits(y[0]), bits(0.0f));
    EXPECT_EQ(bits(y[1]), bits(-0.0f));
    EXPECT_EQ(y[2], 1.0f);
    EXPECT_EQ(y[3], -1.0f);
    for (int i = 4; i <= 8; ++i) EXPECT_EQ(bits(y[i]), bits(x[i])) << "subnormal/tiny x = " << x[i];
    for (int i = 9; i <= 15; ++i) EXPECT_EQ(y[i], x[i] > 0 ? 1.0f : -1.0f) << "x = " << x[i];
    for (int i = 16; i <= 18; ++i) EXPECT_TRUE(std::isnan(y[i])) << "x = nan #" << i;
  }
}

// Every 61st f32 bit pattern (70 M inputs, all exponents and signs): v3 within 2 ULP of the correctly
// rounded f64 tanh, nan for nan, and the same bits as the scalar spore::kernels::tanh_f32.
TEST_F(Tanhcustom, V3F32WithinTwoUlpOnStridedSweepOfAllPatterns) {
  constexpr uint64_t kStride = 61;
  constexpr size_t kBatch = 1 << 20;
  std::vector<float> x, y(kBatch);
  x.reserve(kBatch);
  int64_t max_ulp = 0;
  float worst = 0;
  uint64_t checked = 0, scalar_mismatch = 0;
  auto flush = [&] {
    y.resize(x.size());
    ASSERT_EQ(call("tanhcustom_v3", SPORE_F32, {x.data()}, y.data(), static_cast<int64_t>(x.size())), 0);
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(y[i]));
        continue;
      }
      const int64_t u = ulp_f32(y[i], static_cast<float>(std::tanh(static_cast<double>(x[i]))));
      if (u > max_ulp) max_ulp = u, worst = x[i];
      scalar_mismatch += bits(y[i]) != bits(spore::kernels::tanh_f32(x[i]));
      ++checked;
    }
    x.clear();
  };
  for (uint64_t b = 0; b <= 0xffffffffull; b += kStride) {
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
    if (x.size() == kBatch) flush();
  }
  flush();
  EXPECT_LE(max_ulp, 2) << "worst input " << worst;
  EXPECT_EQ(scalar_mismatch, 0u);
  EXPECT_GT(checked, 60'000'000u);
}

template <class ToBits, class ToFloat>
void exhaustive16(int32_t dtype, ToBits to_bits, ToFloat to_float, int64_t* max_ulp, int* wrong) {
  std::vector<uint16_t> x(65536), y(65536);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = static_cast<uint16_t>(i);
  ASSERT_EQ(call("tanhcustom_v3", dtype, {x.data()}, y.data(), 65536), 0);
  *max_ulp = 0;
  *wrong = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const double xf = to_float(x[i]);
    if (std::isnan(xf)) {
      *wrong += !std::isnan(to_float(y[i]));
      continue;
    }
    const uint16_t ref = round16(std::tanh(xf), to_bits, to_float);
    const int64_t u = std::llabs(ordered(y[i], 16) - ordered(ref, 16));
    *max_ulp = std::max(*max_ulp, u);
    if (xf == 0) *wrong += y[i] != x[i];  // +-0 keeps its sign
  }
}

TEST_F(Tanhcustom, V3F16ExhaustiveWithinOneUlp) {
  int64_t max_ulp;
  int wrong;
  exhaustive16(SPORE_F16, spore::float_to_half_bits, spore::half_bits_to_float, &max_ulp, &wrong);
  EXPECT_LE(max_ulp, 1);
  EXPECT_EQ(wrong, 0);
}

TEST_F(Tanhcustom, V3BF16ExhaustiveWithinOneUlp) {
  int64_t max_ulp;
  int wrong;
  exhaustive16(SPORE_BF16, spore::float_to_bf16_bits, spore::bf16_bits_to_float, &max_ulp, &wrong);
  EXPECT_LE(max_ulp, 1);
  EXPECT_EQ(wrong, 0);
}

// v1 is the accurate scalar reference, v2 the fast textbook formula (absolute accuracy only), v3 both.
TEST_F(Tanhcustom, VersionsAgreeWithF64Tanh) {
  std::vector<float> x = random_f32(100'000, -12.0f, 12.0f, 7);
  const std::vector<float> small = random_f32(10'000, -0.01f, 0.01f, 8);
  x.insert(x.end(), small.begin(), small.end());
  const std::vector<float> y1 = run_f32("tanhcustom_v1", x), y2 = run_f32("tanhcustom_v2", x),
                           y3 = run_f32("tanhcustom_v3", x);
  int64_t max1 = 0, max3 = 0;
  double max_abs2 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = std::tanh(static_cast<double>(x[i]));
    max1 = std::max(max1, ulp_f32(y1[i], static_cast<float>(r)));
    max3 = std::max(max3, ulp_f32(y3[i], static_cast<float>(r)));
    max_abs2 = std::max(max_abs2, std::fabs(y2[i] - r));
  }
  EXPECT_LE(max1, 1);
  EXPECT_LE(max3, 2);
  EXPECT_LT(max_abs2, 2e-7);
}

// The chunks of parallel_for in any order, on any thread, or no pool at all: the same bits.
TEST_F(Tanhcustom, ResultsDoNotDependOnChunkOrderOrThreads) {
  const int64_t n = 3 * 16384 + 77;  // several chunks and a ragged tail
  const std::vector<float> x = random_f32(n, -6.0f, 6.0f, 11), dy = random_f32(n, -2.0f, 2.0f, 12);
  std::vector<uint16_t> xh(n), xb(n), dyh(n), dyb(n);
  for (int64_t i = 0; i < n; ++i) {
    xh[i] = spore::float_to_half_bits(x[i]), xb[i] = spore::float_to_bf16_bits(x[i]);
    dyh[i] = spore::float_to_half_bits(dy[i]), dyb[i] = spore::float_to_bf16_bits(dy[i]);
  }
  struct Case {
    const char* op;
    int32_t dtype;
    std::vector<const void*> ins;
    size_t elem;
  };
  const std::vector<Case> cases = {
      {"tanhcustom_v2", SPORE_F32, {x.data()}, 4},
      {"tanhcustom_v3", SPORE_F32, {x.data()}, 4},
      {"tanhcustom_v3", SPORE_F16, {xh.data()}, 2},
      {"tanhcustom_v3", SPORE_BF16, {xb.data()}, 2},
      {"tanhcustom_grad", SPORE_F32, {x.data(), x.data(), dy.data()}, 4},
      {"tanhcustom_grad", SPORE_F16, {xh.data(), xh.data(), dyh.data()}, 2},
      {"tanhcustom_grad", SPORE_BF16, {xb.data(), xb.data(), dyb.data()}, 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.op) + " dtype " + std::to_string(c.dtype));
    std::vector<uint8_t> serial(n * c.elem), shuffled(n * c.elem, 0xAB), nopool(n * c.elem, 0xCD);
    ASSERT_EQ(call(c.op, c.dtype, c.ins, serial.data(), n, Pool::serial), 0);
    for (int rep = 0; rep < 3; ++rep) {
      ASSERT_EQ(call(c.op, c.dtype, c.ins, shuffled.data(), n, Pool::shuffled), 0);
      EXPECT_EQ(serial, shuffled);
    }
    ASSERT_EQ(call(c.op, c.dtype, c.ins, nopool.data(), n, Pool::none), 0);
    EXPECT_EQ(serial, nopool);
  }
  // In place (output aliases the input) gives the same bits too.
  std::vector<float> inplace = x;
  ASSERT_EQ(call("tanhcustom_v3", SPORE_F32, {inplace.data()}, inplace.data(), n, Pool::shuffled), 0);
  EXPECT_EQ(inplace, run_f32("tanhcustom_v3", x));
}

TEST_F(Tanhcustom, GradientIsDyTimesOneMinusYSquared) {
  const int64_t n = 1000;
  const std::vector<float> x = random_f32(n, -3.0f, 3.0f, 21), dy = random_f32(n, -2.0f, 2.0f, 22);
  const std::vector<float> y = run_f32("tanhcustom_v3", x);
  std::vector<float> dx(n);
  ASSERT_EQ(call("tanhcustom_grad", SPORE_F32, {x.data(), y.data(), dy.data()}, dx.data(), n), 0);
  std::vector<uint16_t> yh(n), dyh(n), dxh(n), yb(n), dyb(n), dxb(n);
  for (int64_t i = 0; i < n; ++i) {
    yh[i] = spore::float_to_half_bits(y[i]), dyh[i] = spore::float_to_half_bits(dy[i]);
    yb[i] = spore::float_to_bf16_bits(y[i]), dyb[i] = spore::float_to_bf16_bits(dy[i]);
  }
  ASSERT_EQ(call("tanhcustom_grad", SPORE_F16, {yh.data(), yh.data(), dyh.data()}, dxh.data(), n), 0);
  ASSERT_EQ(call("tanhcustom_grad", SPORE_BF16, {yb.data(), yb.data(), dyb.data()}, dxb.data(), n), 0);
  for (int64_t i = 0; i < n; ++i) {
    const double t = std::tanh(static_cast<double>(x[i]));
    const double ref = dy[i] * (1.0 - t * t);
    EXPECT_NEAR(dx[i], ref, 1e-6 * (1.0 + std::fabs(dy[i]))) << "x = " << x[i];
    const double yhf = spore::half_bits_to_float(yh[i]), dyhf = spore::half_bits_to_float(dyh[i]);
    EXPECT_NEAR(spore::half_bits_to_float(dxh[i]), dyhf * (1.0 - yhf * yhf), 2e-3 * (1.0 + std::fabs(dyhf)));
    const double ybf = spore::bf16_bits_to_float(yb[i]), dybf = spore::bf16_bits_to_float(dyb[i]);
    EXPECT_NEAR(spore::bf16_bits_to_float(dxb[i]), dybf * (1.0 - ybf * ybf), 1.6e-2 * (1.0 + std::fabs(dybf)));
  }
}

// spore's built-in tanh includes the same kernel header (include/spore/kernels/tanh_f32.h): same bits.
TEST_F(Tanhcustom, V3MatchesBuiltinTanhBitForBit) {
  spore::init();
  std::vector<float> x;
  for (uint64_t b = 0; b <= 0xffffffffull; b += 4099) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  const std::vector<float> y3 = run_f32("tanhcustom_v3", x);
  const spore::Tensor yb = spore::ops::tanh(spore::Tensor::from_vector<float>(x, {static_cast<int64_t>(x.size())}));
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += bits(y3[i]) != bits(yb.data<float>()[i]) && !std::isnan(x[i]);
  EXPECT_EQ(differ, 0) << "of " << x.size();
  for (spore::DType dt : {spore::DType::f16, spore::DType::bf16}) {
    spore::Tensor xt = spore::Tensor::empty({65536}, dt);
    auto* xs = static_cast<uint16_t*>(xt.raw_data());
    for (uint32_t i = 0; i < 65536; ++i) xs[i] = static_cast<uint16_t>(i);
    std::vector<uint16_t> y(65536);
    ASSERT_EQ(call("tanhcustom_v3", dt == spore::DType::f16 ? SPORE_F16 : SPORE_BF16, {xs}, y.data(), 65536), 0);
    const spore::Tensor ybt = spore::ops::tanh(xt);
    const auto* yh = static_cast<const uint16_t*>(ybt.raw_data());
    int64_t d16 = 0;
    for (uint32_t i = 0; i < 65536; ++i) d16 += y[i] != yh[i] && (xs[i] & 0x7fff) <= (dt == spore::DType::f16 ? 0x7c00 : 0x7f80);
    EXPECT_EQ(d16, 0) << (dt == spore::DType::f16 ? "f16" : "bf16");
  }
}

TEST_F(Tanhcustom, BadCallsReturnClearErrors) {
  std::vector<float> x(8, 0.5f), y(8);
  std::vector<uint16_t> h(8);
  std::string msg;
  // f16 data through the f32 kernel's context: the kernel sees a dtype mismatch on its output/input.
  spore_kernel_fn f32 = find_kernel("tanhcustom_v3", SPORE_F32);
  ASSERT_NE(f32, nullptr);
  spore_tensor in = tensor(SPORE_F16, 8, h.data()), out = tensor(SPORE_F32, 8, y.data());
  spore_kernel_context ctx{};
  ctx.num_inputs = 1, ctx.inputs = &in, ctx.num_outputs = 1, ctx.outputs = &out, ctx.parallel_for = serial_for;
  char err[128] = "";
  EXPECT_NE(f32(&ctx, err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("tanhcustom_v3: input 0 is f16, expected f32"), std::string::npos) << err;
  // Element counts that differ.
  in = tensor(SPORE_F32, 7, x.data());
  EXPECT_NE(f32(&ctx, err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("7 elements"), std::string::npos) << err;
  // Wrong arity, and a negative dim.
  ctx.num_inputs = 2;
  EXPECT_NE(f32(&ctx, err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("expected 1 input(s)"), std::string::npos) << err;
  ctx.num_inputs = 1;
  out.type.shape[0] = -3;
  EXPECT_NE(f32(&ctx, err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("malformed shape"), std::string::npos) << err;
  // The grad op needs three inputs.
  EXPECT_NE(call("tanhcustom_grad", SPORE_F32, {x.data(), x.data()}, y.data(), 8, Pool::serial, &msg), 0);
  EXPECT_NE(msg.find("expected 3 input(s)"), std::string::npos) << msg;
  // Zero elements is fine and touches nothing.
  EXPECT_EQ(call("tanhcustom_v3", SPORE_F32, {nullptr}, nullptr, 0), 0);
}

}  // namespace
