// Issue-5 acceptance for the whole default pipeline on three inference models built with spore's own cells:
// SimpleNet, a ResNet-style CNN (conv-BN-ReLU blocks with skip connections) and a 6-layer transformer encoder.
// Each is traced in eval mode and compiled for inference twice: opt_level 0 (dce, constant folding and memory
// planning only) and the default level. On the null backend (which counts kernels and the bytes each kernel
// reads and writes) the pipeline must cut kernels by at least 30% and move fewer bytes; on the CPU the optimized
// plan must give the same outputs within f32 tolerance (batch-norm folding, fused norms and attention change
// rounding).
#include <gtest/gtest.h>

#include <random>

#include "backend/null/null_backend.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "runtime/plan.h"
#include "runtime/trace.h"
#include "train/models.h"

namespace spore {
namespace {

class BasicBlock : public nn::Cell {
 public:
  BasicBlock(int64_t cin, int64_t cout, int64_t stride)
      : c1(cin, cout, 3, nn::Conv2dConfig{.stride = stride, .padding = 1, .has_bias = false}),
        b1(cout),
        c2(cout, cout, 3, nn::Conv2dConfig{.padding = 1, .has_bias = false}),
        b2(cout),
        down(stride != 1 || cin != cout),
        cs(cin, cout, 1, nn::Conv2dConfig{.stride = stride, .has_bias = false}),
        bs(cout) {
    register_cell("c1", c1);
    register_cell("b1", b1);
    register_cell("c2", c2);
    register_cell("b2", b2);
    if (down) {
      register_cell("cs", cs);
      register_cell("bs", bs);
    }
  }
  Tensor construct(const Tensor& x) override {
    Tensor y = ops::relu(b1(c1(x)));
    y = b2(c2(y));
    return ops::relu(ops::add(y, down ? bs(cs(x)) : x));
  }

  nn::Conv2d c1;
  nn::BatchNorm2d b1;
  nn::Conv2d c2;
  nn::BatchNorm2d b2;
  bool down;
  nn::Conv2d cs;
  nn::BatchNorm2d bs;
};

class ResNetLike : public nn::Cell {
 public:
  ResNetLike()
      : stem(3, 16, 3, nn::Conv2dConfig{.padding = 1, .has_bias = false}),
        bn(16),
        l1(16, 16, 1),
        l2(16, 32, 2),
        l3(32, 32, 1),
        l4(32, 64, 2),
        fc(64, 10) {
    register_cell("stem", stem);
    register_cell("bn", bn);
    register_cell("l1", l1);
    register_cell("l2", l2);
    register_cell("l3", l3);
    register_cell("l4", l4);
    register_cell("fc", fc);
  }
  Tensor construct(const Tensor& x) override {
    Tensor y = ops::relu(bn(stem(x)));
    y = l4(l3(l2(l1(y))));
    return fc(ops::reduce_mean(y, {2, 3}));
  }
  nn::Conv2d stem;
  nn::BatchNorm2d bn;
  BasicBlock l1, l2, l3, l4;
  nn::Dense fc;
};

class Encoder6 : public nn::Cell {
 public:
  Encoder6() : fc(64, 10) {
    for (int i = 0; i < 6; ++i) {
      layers.push_back(std::make_unique<nn::TransformerEncoderLayer>(64, 4, 128, 0.1));
      register_cell("layer" + std::to_string(i), *layers.back());
    }
    register_cell("fc", fc);
  }
  Tensor construct(const Tensor& x) override {
    Tensor y = x;
    for (auto& l : layers) y = (*l)(y);
    return fc(ops::reduce_mean(y, {1}));
  }
  std::vector<std::unique_ptr<nn::TransformerEncoderLayer>> layers;
  nn::Dense fc;
};

// Non-trivial batch-norm statistics and affine parameters, as a trained model has (fresh ones make folding exact).
void randomize_batch_norm(nn::BatchNorm& bn, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (Tensor* t : {&bn.gamma(), &bn.beta(), &bn.moving_mean(), &bn.moving_variance()}) {
    const bool shifted = t == &bn.beta() || t == &bn.moving_mean();
    float* p = t->data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) p[i] = shifted ? u(rng) - 1.0f : u(rng);
  }
}

struct Counted {
  int64_t kernels = 0;
  int64_t bytes = 0;  // read + written by all kernels of one run
};

Counted count(const Graph& g, int opt_level, const Shape& in_shape) {
  CompileOptions o;
  o.backend = Backend::null;
  o.inference = true;
  o.opt_level = opt_level;
  Plan p = compile_plan(g.clone(), o);
  reset_null_backend_stats();
  const Tensor x = Tensor::zeros(in_shape, DType::f32);
  p.run(std::span<const Tensor>(&x, 1));
  const NullBackendStats s = null_backend_stats();
  EXPECT_EQ(s.kernels, p.num_kernels());
  return {s.kernels, s.bytes_read + s.bytes_written};
}

void check_model(nn::Cell& net, const Shape& in_shape, const char* what) {
  net.set_train(false);
  auto g = trace_function([&](std::span<const Tensor> in) { return std::vector<Tensor>{net(in[0])}; },
                          {TensorType::of(DType::f32, in_shape)}, {"x"});
  const Counted plain = count(*g, 0, in_shape), opt = count(*g, 1, in_shape);
  std::printf("%s: kernels %lld -> %lld (%.0f%% fewer), bytes moved %lld -> %lld (%.0f%% fewer)\n", what,
              static_cast<long long>(plain.kernels), static_cast<long long>(opt.kernels),
              100.0 * (1.0 - static_cast<double>(opt.kernels) / static_cast<double>(plain.kernels)),
              static_cast<long long>(plain.bytes), static_cast<long long>(opt.bytes),
              100.0 * (1.0 - static_cast<double>(opt.bytes) / static_cast<double>(plain.bytes)));
  EXPECT_LE(opt.kernels * 10, plain.kernels * 7) << what << ": the pipeline should cut kernels by at least 30%";
  EXPECT_LT(opt.bytes, plain.bytes) << what;

  // Same outputs on the CPU within f32 tolerance.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Tensor x = Tensor::empty(in_shape, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = nd(rng);
  CompileOptions o;
  o.inference = true;
  o.opt_level = 0;
  Plan p0 = compile_plan(g->clone(), o);
  o.opt_level = 1;
  Plan p1 = compile_plan(g->clone(), o);
  const Tensor want = p0.run(std::span<const Tensor>(&x, 1))[0];
  const Tensor got = p1.run(std::span<const Tensor>(&x, 1))[0];
  ASSERT_EQ(want.shape(), got.shape());
  const auto w = want.to_doubles(), v = got.to_doubles();
  double scale = 0;
  for (double d : w) scale = std::max(scale, std::abs(d));
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(v[i], w[i], 1e-4 * std::max(1.0, scale)) << what << " output " << i;
}

TEST(PipelineAcceptance, SimpleNetInference) {
  nn::set_seed(1);
  auto net = train::make_model("simplenet", {1, 28, 28});
  check_model(*net, {8, 1, 28, 28}, "SimpleNet");
}

TEST(PipelineAcceptance, ResNetStyleCnnInference) {
  nn::set_seed(2);
  ResNetLike net;
  std::mt19937 rng(5);
  randomize_batch_norm(net.bn, rng);
  for (BasicBlock* b : {&net.l1, &net.l2, &net.l3, &net.l4})
    for (nn::BatchNorm* bn : {&b->b1, &b->b2, &b->bs}) randomize_batch_norm(*bn, rng);
  check_model(net, {4, 3, 32, 32}, "ResNet-style CNN");
}

TEST(PipelineAcceptance, SixLayerTransformerEncoderInference) {
  nn::set_seed(3);
  Encoder6 net;
  check_model(net, {2, 16, 64}, "6-layer transformer encoder");
}

}  // namespace
}  // namespace spore
