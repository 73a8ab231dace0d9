// Devices and backends outside the built-in three: a test device (host memory behind a DeviceMemory that counts
// its copies) and a test backend on it, registered at run time. A plan for that backend keeps every tensor its
// kernels see on the device (the kernels check) and copies inputs in and outputs out as steps of its own.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ops/backend.h"
#include "ops/graph_ops.h"
#include "runtime/plan.h"
#include "runtime/runtime.h"

namespace spore {
namespace {

struct CountingMemory final : DeviceMemory {
  std::atomic<int64_t> live{0}, from_host{0}, to_host{0}, within{0};
  void* allocate(size_t bytes) override {
    live += static_cast<int64_t>(bytes);
    return std::aligned_alloc(64, bytes);
  }
  void release(void* p, size_t bytes) override {
    live -= static_cast<int64_t>(bytes);
    std::free(p);
  }
  void copy_from_host(void* d, const void* s, size_t n) override {
    ++from_host;
    std::memcpy(d, s, n);
  }
  void copy_to_host(void* d, const void* s, size_t n) override {
    ++to_host;
    std::memcpy(d, s, n);
  }
  void copy_within(void* d, const void* s, size_t n) override {
    ++within;
    std::memcpy(d, s, n);
  }
};

struct TestDevice {
  CountingMemory* memory = nullptr;
  Device device;
  Backend backend{};
};

// Every tensor a kernel of the test backend sees must be on the test device.
void check_on_device(const KernelContext& k) {
  for (const Tensor& t : k.inputs)
    SPORE_CHECK(device_name(t.device()) == "test_mem", ErrorCode::internal, "a test kernel got a tensor on {}",
                device_name(t.device()));
  for (const Tensor& t : k.outputs)
    SPORE_CHECK(device_name(t.device()) == "test_mem", ErrorCode::internal, "a test kernel wrote a tensor on {}",
                device_name(t.device()));
}
void k_add(KernelContext& k) {
  check_on_device(k);
  const float *a = k.in(0).data<float>(), *b = k.in(1).data<float>();
  for (int64_t i = 0; i < k.out(0).numel(); ++i) k.out(0).data<float>()[i] = a[i] + b[i];
}
void k_relu(KernelContext& k) {
  check_on_device(k);
  const float* a = k.in(0).data<float>();
  for (int64_t i = 0; i < k.out(0).numel(); ++i) k.out(0).data<float>()[i] = a[i] > 0 ? a[i] : 0;
}
void k_neg(KernelContext& k) {
  check_on_device(k);
  const float* a = k.in(0).data<float>();
  for (int64_t i = 0; i < k.out(0).numel(); ++i) k.out(0).data<float>()[i] = -a[i];
}
void k_copy(KernelContext& k) {
  check_on_device(k);
  std::memcpy(k.out(0).raw_data(), k.in(0).raw_data(), k.in(0).nbytes());
}

class TestBackend final : public BackendImpl {
 public:
  TestBackend(Backend id, Device d) : id_(id), dev_(d) {}
  Backend id() const override { return id_; }
  Device device() const override { return dev_; }
  void register_kernels(KernelRegistry& r) override {
    r.add(id_, "add"_op, DTypeSet{DType::f32}, k_add, "test");
    r.add(id_, "relu"_op, DTypeSet{DType::f32}, k_relu, "test");
    r.add(id_, "neg"_op, DTypeSet{DType::f32}, k_neg, "test");
    r.add(id_, "reshape"_op, DTypeSet{DType::f32}, k_copy, "test");
  }

 private:
  Backend id_;
  Device dev_;
};

const TestDevice& test_device() {
  static const TestDevice t = [] {
    init();
    TestDevice d;
    auto mem = std::make_unique<CountingMemory>();
    d.memory = mem.get();
    d.device = register_device("test_mem", std::move(mem));
    d.backend = register_backend_id("test_backend");
    register_backend(std::make_unique<TestBackend>(d.backend, d.device));
    backend_impl(d.backend).register_kernels(kernel_registry());
    return d;
  }();
  return t;
}

TEST(Devices, RegistriesAreOpenAndRefuseTakenNames) {
  const TestDevice& t = test_device();
  EXPECT_FALSE(t.device.is_host());
  EXPECT_EQ(device_name(t.device), "test_mem");
  EXPECT_EQ(device_name(host_device), "host");
  EXPECT_EQ(backend_name(t.backend), "test_backend");
  EXPECT_GE(num_backends(), 4);
  EXPECT_TRUE(backend_impl(t.backend).device() == t.device);
  EXPECT_TRUE(backend_impl(Backend::cpu).device().is_host());
  EXPECT_THROW(register_device("test_mem", std::make_unique<CountingMemory>()), Error);
  EXPECT_THROW(register_backend_id("cpu"), Error);
  EXPECT_THROW(register_backend_id("test_backend"), Error);
}

TEST(Devices, TensorsKnowTheirDeviceAndHostReadsAreRefused) {
  const TestDevice& t = test_device();
  const Tensor h = Tensor::from_doubles({1, -2, 3, 4.5}, {2, 2}, DType::f32);
  EXPECT_TRUE(h.device().is_host());
  const int64_t up0 = t.memory->from_host, down0 = t.memory->to_host;
  const Tensor d = h.to(t.device);
  EXPECT_EQ(d.device(), t.device);
  EXPECT_EQ(t.memory->from_host - up0, 1);
  try {
    (void)d.item_at(0);
    FAIL() << "item_at read device memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("on device test_mem"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)d.to_doubles(), Error);
  const Tensor back = d.to(host_device);
  EXPECT_EQ(t.memory->to_host - down0, 1);
  EXPECT_TRUE(back.device().is_host());
  EXPECT_TRUE(back.bit_equal(h));
  EXPECT_TRUE(d.clone().device() == t.device);  // a packed copy stays on its device
}

TEST(Devices, PlanCopiesInputsInAndOutputsOutAsSteps) {
  const TestDevice& t = test_device();
  const int64_t live0 = t.memory->live;
  {
    const std::vector<double> xs = {1, -2, 3, -0.5, 4, -6};
    const std::vector<double> ws = {0.5, -1, 2, -3, 0.25, 1};
    auto g = std::make_unique<Graph>();
    Value* x0 = g->add_input(TensorType(DType::f32, {2, 3}), "x");
    Value* w = g->add_constant(Tensor::from_doubles(ws, {3, 2}, DType::f32), "w");
    Value* r = build_node(*g, "reshape"_op, {x0}, Attrs{{"shape", std::vector<int64_t>{3, 2}}}, "r")->output(0);
    Value* a = build_node(*g, "add"_op, {r, w}, {}, "a")->output(0);
    Value* b = build_node(*g, "relu"_op, {a}, {}, "b")->output(0);
    Value* c = build_node(*g, "neg"_op, {b}, {}, "c")->output(0);
    g->rename_value(a, "a");
    g->rename_value(c, "c");
    g->set_outputs({c, a});
    verify_graph(*g);
    CompileOptions o;
    o.backend = t.backend;
    o.opt_level = 0;
    const int64_t up0 = t.memory->from_host;
    Plan plan = compile_plan(std::move(g), o);
    EXPECT_EQ(t.memory->from_host - up0, 1) << "the constant is uploaded once, at compile time";
    EXPECT_GT(t.memory->live, live0) << "arena, constants and input/output buffers live on the device";
    const std::string d = plan.describe();
    EXPECT_NE(d.find("copy [copy to device] x"), std::string::npos) << d;
    EXPECT_NE(d.find("copy [copy to host] c"), std::string::npos) << d;
    EXPECT_NE(d.find("copy [copy to host] a"), std::string::npos) << d;
    const Tensor x = Tensor::from_doubles(xs, {2, 3}, DType::f32);
    for (int run = 0; run < 2; ++run) {
      const int64_t in0 = t.memory->from_host, out0 = t.memory->to_host;
      std::vector<Tensor> y = plan.run({&x, 1});
      EXPECT_EQ(t.memory->from_host - in0, 1);  // x
      EXPECT_EQ(t.memory->to_host - out0, 2);   // c and a
      ASSERT_EQ(y.size(), 2u);
      EXPECT_TRUE(y[0].device().is_host());
      EXPECT_TRUE(y[1].device().is_host());
      const std::vector<double> c = y[0].to_doubles(), a = y[1].to_doubles();
      for (size_t i = 0; i < xs.size(); ++i) {
        const float sum = static_cast<float>(xs[i]) + static_cast<float>(ws[i]);
        EXPECT_EQ(a[i], sum) << i;
        EXPECT_EQ(c[i], sum > 0 ? -sum : -0.0f) << i;
      }
    }
    // An input already on the device is copied within it.
    const Tensor xd = x.to(t.device);
    const int64_t w0 = t.memory->within;
    std::vector<Tensor> y = plan.run({&xd, 1});
    EXPECT_EQ(t.memory->within - w0, 1);
    EXPECT_EQ(y[1].to_doubles()[0], 1.5);
  }
  EXPECT_EQ(t.memory->live, live0) << "the plan's device memory goes with the plan";
}

TEST(Devices, OpsWithoutAKernelOnTheBackendAreACompileError) {
  const TestDevice& t = test_device();
  auto g = parse_graph("graph @m(%x: f32[4]) {\n  %y = sigmoid(%x) : f32[4]\n  %z = matmul(%x, %x) {transpose_a=false, transpose_b=false} : f32[]\n  return %y, %z\n}");
  CompileOptions o;
  o.backend = t.backend;
  o.opt_level = 0;
  try {
    compile_plan(std::move(g), o);
    FAIL() << "compiled ops the backend has no kernel for";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("test_backend"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spore
