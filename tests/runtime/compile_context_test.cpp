// set_context() reaches graph-mode compiles: memory_optimize_level, max_device_memory, recompute and
// save_graphs (one numbered dump directory per compile).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "ops/ops.h"
#include "runtime/jit.h"
#include "runtime/runtime.h"
#include "test_util.h"

namespace spore {
namespace {

// Puts the process-wide context back after each test.
class CompileContext : public ::testing::Test {
 protected:
  void SetUp() override {
    init();
    saved_ = context();
  }
  void TearDown() override { set_context(saved_); }
  static void set(const std::function<void(ContextOptions&)>& edit) {
    ContextOptions o = context();
    edit(o);
    set_context(o);
  }

 private:
  ContextOptions saved_;
};

Tensor random_tensor(Shape shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& f : v) f = nd(rng);
  return Tensor::from_vector<float>(v, shape);
}

// Matmuls with elementwise ops between them: every intermediate dies at the next op, so O1/O2 reuse a few
// buffers where O0 gives each its own.
std::vector<Tensor> chain(std::span<const Tensor> in) {
  Tensor a = ops::tanh(ops::matmul(in[0], in[1]));
  Tensor b = ops::sigmoid(ops::add(ops::matmul(a, in[1]), in[0]));
  Tensor c = ops::exp(ops::neg(ops::matmul(b, in[1])));
  Tensor d = ops::relu(ops::mul(ops::matmul(c, in[1]), c));
  return {ops::matmul(d, in[1])};
}

TEST_F(CompileContext, MaxDeviceMemoryBelowTheNeedFailsGraphModeAtCompileTime) {
  set([](ContextOptions& o) {
    o.mode = ExecMode::graph;
    o.max_device_memory = 4096;
  });
  CompiledFunction f(chain);
  const Tensor x = random_tensor({32, 32}, 1), w = random_tensor({32, 32}, 2);
  try {
    f({x, w});
    FAIL() << "expected out_of_memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    const std::string m = e.what();
    EXPECT_NE(m.find("max_device_memory is 4096 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("largest live buffers at the peak"), std::string::npos) << m;
  }
  EXPECT_EQ(f.cache_size(), 0u);
  // Raising the cap in the context lets the same function compile: the cap is read at each compile.
  set([](ContextOptions& o) { o.max_device_memory = 1 << 20; });
  EXPECT_EQ(f({x, w})[0].shape(), (Shape{32, 32}));
  // Explicit options keep their own level but still get the context's cap where they set none.
  set([](ContextOptions& o) { o.max_device_memory = 4096; });
  CompiledFunction g(chain, CompileOptions{});
  EXPECT_EQ(g.effective_options().max_memory, 4096u);
  EXPECT_THROW(g({x, w}), Error);
}

TEST_F(CompileContext, Level2GivesASmallerArenaThanLevel0AndTheSameBits) {
  CompiledFunction f(chain);
  const Tensor x = random_tensor({64, 64}, 3), w = random_tensor({64, 64}, 4);
  set([](ContextOptions& o) { o.memory_optimize_level = 0; });
  const Tensor y0 = f({x, w})[0];
  const int64_t arena0 = f.last_plan()->arena_bytes();
  set([](ContextOptions& o) { o.memory_optimize_level = 2; });
  const Tensor y2 = f({x, w})[0];
  const int64_t arena2 = f.last_plan()->arena_bytes();
  EXPECT_EQ(f.cache_size(), 2u);  // the level is part of the cache key: no stale plan is replayed
  EXPECT_LT(arena2, arena0);
  EXPECT_LE(arena2 * 2, arena0) << "O0 " << arena0 << " bytes, O2 " << arena2;
  ASSERT_EQ(y0.nbytes(), y2.nbytes());
  EXPECT_EQ(std::memcmp(y0.contiguous().raw_data(), y2.contiguous().raw_data(), y0.nbytes()), 0);
  // Back at level 0 the first plan is replayed, not recompiled.
  set([](ContextOptions& o) { o.memory_optimize_level = 0; });
  f({x, w});
  EXPECT_EQ(f.cache_size(), 2u);
  EXPECT_EQ(f.last_plan()->arena_bytes(), arena0);
}

TEST_F(CompileContext, RecomputeAndInferenceReachTheCompileOptions) {
  set([](ContextOptions& o) { o.recompute = true; });
  CompiledFunction train_fn(chain);
  CompiledFunction eval_fn(chain, CompileRole{.name = "eval", .inference = true});
  EXPECT_TRUE(train_fn.effective_options().recompute);
  EXPECT_FALSE(train_fn.effective_options().inference);
  EXPECT_TRUE(eval_fn.effective_options().inference);
  set([](ContextOptions& o) { o.recompute = false; });
  EXPECT_FALSE(train_fn.effective_options().recompute);
}

// The numbered dump files of one compile directory, e.g. {"00_input.ir", "01_dce.ir", ...}.
std::vector<std::string> ir_files(const std::filesystem::path& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".ir") names.insert(e.path().filename().string());
  return {names.begin(), names.end()};
}

TEST_F(CompileContext, SaveGraphsWritesNumberedFilesIntoOneDirectoryPerCompile) {
  const std::filesystem::path root = testing::temp_dir("save_graphs") / "dumps";
  set([&](ContextOptions& o) { o.save_graphs = root.string(); });
  CompiledFunction f(chain, CompileRole{.name = "chain"});
  CompiledFunction g([](std::span<const Tensor> in) { return std::vector<Tensor>{ops::relu(ops::neg(in[0]))}; },
                     CompileRole{.name = "small"});
  const Tensor x = random_tensor({8, 8}, 5), w = random_tensor({8, 8}, 6);
  f({x, w});
  f({x, w});                                             // replayed: no new compile, no new directory
  f({random_tensor({4, 8}, 7), random_tensor({8, 8}, 8)});  // a second signature: a second compile
  g({x});
  std::vector<std::filesystem::path> dirs;
  for (const auto& e : std::filesystem::directory_iterator(root)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  ASSERT_EQ(dirs.size(), 3u);
  int chain_dirs = 0, small_dirs = 0;
  for (const auto& d : dirs) {
    const std::string name = d.filename().string();
    chain_dirs += name.rfind("chain_", 0) == 0;
    small_dirs += name.rfind("small_", 0) == 0;
    const std::vector<std::string> files = ir_files(d);
    ASSERT_GE(files.size(), 3u) << name;
    // Numbered in pass order from 00 (the input graph), ending with memory planning.
    for (size_t i = 1; i < files.size(); ++i) EXPECT_LT(std::stoi(files[i - 1].substr(0, 2)), std::stoi(files[i].substr(0, 2))) << name;
    EXPECT_EQ(files.front(), "00_input.ir");
    EXPECT_EQ(files.back().substr(3), "memory_plan.ir") << name;
    for (const std::string& fname : files) {
      std::ifstream in(d / fname);
      std::stringstream text;
      text << in.rdbuf();
      EXPECT_NE(text.str().find("graph @"), std::string::npos) << name << "/" << fname;
      EXPECT_TRUE(std::filesystem::exists(d / (fname.substr(0, fname.size() - 3) + ".dot"))) << name << "/" << fname;
    }
  }
  EXPECT_EQ(chain_dirs, 2);
  EXPECT_EQ(small_dirs, 1);
  // The plan's pass records match the dumps: one file per pass that ran plus the input.
  size_t ran = 0;
  for (const PassRecord& r : g.last_plan()->pass_records()) ran += !r.skipped;
  EXPECT_EQ(ir_files(dirs.back()).size(), ran + 1);
}

}  // namespace
}  // namespace spore
