#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "io/file_util.h"
#include "io/model_file.h"
#include "io/spore_file.h"
#include "ops/graph_ops.h"
#include "runtime/plan.h"
#include "test_util.h"

namespace spore::io {
namespace {

using testing::error_of;
namespace L = spore_layout;

std::string temp_path(const std::string& name) { return (testing::temp_dir("spore_file") / name).string(); }

constexpr DType kAllDtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16,   DType::i64,
                                DType::i32, DType::i8,  DType::u8,  DType::boolean};

// An MLP on a symbolic batch (matmul + bias + relu + matmul) that also returns constants of every dtype,
// a scalar, an empty tensor and one whose payload is a strided view (the writer must pack it).
std::unique_ptr<Graph> make_graph() {
  auto g = std::make_unique<Graph>("net/v1");
  Value* x = g->add_input(TensorType(DType::f32, {Dim::symbol("batch"), 8}), "x");
  Value* w1 = g->add_constant(testing::patterned_tensor({8, 16}, DType::f32, 1), "fc1/weight:0");
  Value* b1 = g->add_constant(testing::patterned_tensor({16}, DType::f32, 2), "fc1.bias");
  Value* w2 = g->add_constant(testing::patterned_tensor({32, 4}, DType::f32, 3).slice(0, 0, 32, 2), "fc2.weight");
  Value* h = build_node(*g, "matmul"_op, {x, w1}, {}, "fc1")->output();
  h = build_node(*g, "add"_op, {h, b1}, {}, "fc1/bias")->output();
  h = build_node(*g, "relu"_op, {h}, {}, "act")->output();
  Value* y = build_node(*g, "matmul"_op, {h, w2}, {}, "fc2")->output();
  std::vector<Value*> outs{y};
  int salt = 10;
  for (DType dt : kAllDtypes) {
    outs.push_back(g->add_constant(testing::patterned_tensor({3, 5}, dt, ++salt), "c_" + std::string(dtype_name(dt))));
  }
  outs.push_back(g->add_constant(Tensor::scalar(-2.5, DType::f64), "scalar"));
  outs.push_back(g->add_constant(Tensor::empty({0, 5}, DType::i32), "empty"));
  g->set_outputs(outs);
  verify_graph(*g);
  return g;
}

// Header fields and the first tensor index entry of an encoded file, for targeted corruption.
uint64_t get_u64(const std::string& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}
void set_u64(std::string& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<char>(v >> (8 * i));
}
void set_u32(std::string& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>(v >> (8 * i));
}
uint64_t section_offset(const std::string& b, int s) { return get_u64(b, L::off_sections + 16 * s); }
uint64_t section_size(const std::string& b, int s) { return get_u64(b, L::off_sections + 16 * s + 8); }
void reseal(std::string& b) {
  set_u64(b, L::off_checksum, L::file_checksum({reinterpret_cast<const uint8_t*>(b.data()), b.size()}));
}

struct EntryPos {
  size_t dtype, rank, dims, offset, size;
};
// File positions of tensor index entry k's fields.
EntryPos entry_pos(const std::string& b, int k) {
  size_t at = section_offset(b, 1) + 8;
  for (int i = 0;; ++i) {
    const uint32_t name = static_cast<uint32_t>(get_u64(b, at) & 0xffffffffu);
    EntryPos e;
    e.dtype = at + 4 + name;
    e.rank = e.dtype + 1;
    e.dims = e.dtype + 4;
    e.offset = e.dims + 8 * static_cast<unsigned char>(b[e.rank]);
    e.size = e.offset + 8;
    if (i == k) return e;
    at = e.size + 8;
  }
}

std::string parse_error(const std::string& bytes) {
  return error_of([&] { parse_spore({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "m.spore"); });
}

TEST(SporeFile, Xxhash64KnownVectors) {
  // Values from the reference implementation (libxxhash 0.8).
  EXPECT_EQ(L::xxhash64("", 0, 0), 0xef46db3751d8e999ull);
  EXPECT_EQ(L::xxhash64("a", 1, 0), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(L::xxhash64("abc", 3, 0), 0x44bc2cf5ad770999ull);
  EXPECT_EQ(L::xxhash64("Nobody inspects the spammish repetition", 39, 0), 0xfbcea83c8a378bf1ull);
  EXPECT_EQ(L::xxhash64("xxhash", 6, 20141025), 0xb559b98d844e0635ull);
  std::string long_input;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 256; ++i) long_input += static_cast<char>(i);
  long_input += "12345";
  EXPECT_EQ(L::xxhash64(long_input.data(), long_input.size(), 7), 0xfb465e947de73939ull);
}

TEST(SporeFile, RoundTripIsBitExact) {
  auto g = make_graph();
  const std::string path = temp_path("rt.spore");
  save_spore(*g, path, {{"precision", "force_fp32"}, {"source", "unit test \"quoted\""}});
  SporeFileInfo info;
  auto back = load_spore(path, &info);
  // The canonical text holds every name, type, attribute and (as hex) every constant byte.
  EXPECT_EQ(print_graph(*back), print_graph(*g));
  EXPECT_EQ(back->name(), "net/v1");
  EXPECT_FALSE(back->inputs()[0]->type.dims[0].is_static());
  EXPECT_EQ(info.format_version, 1u);
  EXPECT_EQ(info.producer, "spore " SPORE_VERSION);
  EXPECT_EQ(info.metadata, (std::map<std::string, std::string>{{"precision", "force_fp32"}, {"source", "unit test \"quoted\""}}));
  EXPECT_EQ(info.num_tensors, 14);
  EXPECT_EQ(info.file_bytes, static_cast<int64_t>(std::filesystem::file_size(path)));
  int64_t weight_bytes = 0;
  for (const Node* n : g->nodes())
    if (n->op == "constant"_op) weight_bytes += static_cast<int64_t>(n->payload.nbytes());
  EXPECT_EQ(info.weight_bytes, weight_bytes);

  // In-memory parse of the same bytes gives the same graph; save -> load -> save is byte-identical.
  const std::string bytes = read_file_bytes(path);
  EXPECT_EQ(bytes, encode_spore(*g, info.metadata));
  auto again = parse_spore({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "rt.spore");
  EXPECT_EQ(print_graph(*again), print_graph(*g));
  EXPECT_EQ(encode_spore(*back, info.metadata), bytes);
  // load_model picks the format from the magic.
  EXPECT_EQ(print_graph(*load_model(path)), print_graph(*g));
}

TEST(SporeFile, ExternalConstantsInTextIr) {
  auto g = make_graph();
  std::vector<const Node*> consts;
  const std::string text = print_graph(*g, PrintOptions{.external_constants = &consts});
  EXPECT_NE(text.find("= tensor<0>"), std::string::npos);
  EXPECT_EQ(text.find("hex\""), std::string::npos);
  std::vector<Tensor> data;
  for (const Node* n : consts) data.push_back(n->payload.contiguous());
  auto back = parse_graph(text, "t", ParseOptions{.external_constants = data});
  EXPECT_EQ(print_graph(*back), print_graph(*g));
  // The constant shares the given tensor's storage (no copy).
  EXPECT_EQ(back->find_value("fc1.bias")->producer->payload.raw_data(), data[1].raw_data());
  // Without external tensors, or with a wrong one, the error points at the reference.
  EXPECT_NE(error_of([&] { parse_graph(text, "t"); }).find("no external tensors were given"), std::string::npos);
  std::vector<Tensor> wrong = data;
  wrong[0] = Tensor::zeros({16, 8}, DType::f32);
  const std::string e = error_of([&] { parse_graph(text, "t", ParseOptions{.external_constants = wrong}); });
  EXPECT_NE(e.find("t:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor<0> is f32[16,8] but the constant's type is f32[8,16]"), std::string::npos) << e;
  wrong[0] = data[0];
  wrong.resize(3);
  EXPECT_NE(error_of([&] { parse_graph(text, "t", ParseOptions{.external_constants = wrong}); })
                .find("tensor<3> does not exist (the tensor index has 3 entries)"),
            std::string::npos);
}

// Address ranges of the mappings of `path` in this process.
std::vector<std::pair<uintptr_t, uintptr_t>> mappings_of(const std::string& path) {
  std::vector<std::pair<uintptr_t, uintptr_t>> out;
  std::ifstream maps("/proc/self/maps");
  const std::string canonical = std::filesystem::canonical(path).string();
  for (std::string line; std::getline(maps, line);) {
    if (line.size() < canonical.size() || line.compare(line.size() - canonical.size(), canonical.size(), canonical) != 0)
      continue;
    std::istringstream ls(line);
    std::string range;
    ls >> range;
    const size_t dash = range.find('-');
    out.emplace_back(std::stoull(range.substr(0, dash), nullptr, 16), std::stoull(range.substr(dash + 1), nullptr, 16));
  }
  return out;
}

TEST(SporeFile, ConstantsAliasTheMapping) {
  const std::string path = temp_path("mapped.spore");
  save_spore(*make_graph(), path);
  ASSERT_TRUE(mappings_of(path).empty());
  Tensor keep;
  {
    auto g = load_spore(path);
    const auto maps = mappings_of(path);
    ASSERT_EQ(maps.size(), 1u) << "the file is mapped once";
    int checked = 0;
    for (const Node* n : g->nodes()) {
      if (n->op != "constant"_op || n->payload.nbytes() == 0) continue;
      const auto p = reinterpret_cast<uintptr_t>(n->payload.raw_data());
      EXPECT_EQ(p % 64, 0u) << n->label();
      EXPECT_TRUE(p >= maps[0].first && p + n->payload.nbytes() <= maps[0].second) << n->label();
      EXPECT_EQ(n->payload.storage()->data(), reinterpret_cast<void*>(maps[0].first)) << "one storage: the mapping";
      ++checked;
    }
    EXPECT_EQ(checked, 13);
    keep = g->find_value("fc1.bias")->producer->payload;
  }
  // A constant outliving the graph keeps the mapping; the last one unmaps it.
  EXPECT_EQ(mappings_of(path).size(), 1u);
  const Tensor expected = testing::patterned_tensor({16}, DType::f32, 2);
  EXPECT_TRUE(keep.bit_equal(expected));
  keep = Tensor();
  EXPECT_TRUE(mappings_of(path).empty());
}

TEST(SporeFile, ParsedBytesAreCopiedIntoAlignedStorage) {
  auto g = make_graph();
  std::string bytes = " ";  // misaligned source buffer
  bytes += encode_spore(*g);
  auto back = parse_spore({reinterpret_cast<const uint8_t*>(bytes.data() + 1), bytes.size() - 1}, "mem");
  for (const Node* n : back->nodes()) {
    if (n->op != "constant"_op || n->payload.nbytes() == 0) continue;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(n->payload.raw_data()) % 64, 0u) << n->label();
    EXPECT_FALSE(n->payload.raw_data() >= bytes.data() && n->payload.raw_data() < bytes.data() + bytes.size());
  }
  bytes.assign(bytes.size(), '\0');  // the graph does not depend on the caller's buffer
  EXPECT_EQ(print_graph(*back), print_graph(*g));
}

TEST(SporeFile, CompiledPlanOfLoadedGraphMatchesOriginal) {
  auto g = make_graph();
  const std::string path = temp_path("plan.spore");
  save_spore(*g, path);
  auto back = load_spore(path);
  const Tensor x = Tensor::from_doubles(
      [] {
        std::vector<double> v(3 * 8);
        for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(1.0 + static_cast<double>(i)) * 2;
        return v;
      }(),
      {3, 8}, DType::f32);
  auto run = [&](const Graph& src) {
    auto copy = src.clone();
    specialize_inputs(*copy, {{3, 8}});
    Plan plan = compile_plan(std::move(copy), {});
    return plan.run(std::span<const Tensor>(&x, 1));
  };
  const auto want = run(*g), got = run(*back);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(got[i].bit_equal(want[i])) << "output " << i;
  EXPECT_FALSE(want[0].bit_equal(Tensor::zeros(want[0].shape(), DType::f32)));
  // Running twice gives the same result (nothing wrote into the read-only mapping).
  const auto got2 = run(*back);
  EXPECT_TRUE(got2[0].bit_equal(want[0]));
}

TEST(SporeFile, EveryTruncationIsReported) {
  const std::string bytes = encode_spore(*make_graph());
  for (size_t n = 0; n < bytes.size(); n += (n < 200 ? 1 : 37)) {
    const std::string e = parse_error(bytes.substr(0, n));
    EXPECT_NE(e.find("is truncated"), std::string::npos) << "at " << n << ": " << e;
  }
  EXPECT_NE(parse_error(bytes.substr(0, 1000)).find(fmt::format("expected {} bytes, got 1000", bytes.size())),
            std::string::npos);
  EXPECT_NE(parse_error(bytes + "x").find("trailing data"), std::string::npos);
  EXPECT_NE(error_of([] { load_spore(temp_path("no-such-file.spore")); }).find("cannot open"), std::string::npos);
  std::ofstream(temp_path("empty.spore")).flush();
  EXPECT_NE(error_of([] { load_spore(temp_path("empty.spore")); }).find("is truncated"), std::string::npos);
  EXPECT_NE(error_of([] { load_spore(testing::temp_dir("spore_file").string()); }).find("not a regular file"),
            std::string::npos);
}

TEST(SporeFile, EverySingleByteFlipIsAnError) {
  const std::string bytes = encode_spore(*make_graph());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string b = bytes;
    b[i] = static_cast<char>(b[i] ^ (1 << (i % 8)));
    EXPECT_NE(parse_error(b), "") << "flipping byte " << i << " went unnoticed";
  }
}

TEST(SporeFile, HeaderCorruptionsNameTheProblem) {
  const std::string good = encode_spore(*make_graph());
  auto expect = [&](std::string b, const std::string& part) {
    const std::string e = parse_error(b);
    EXPECT_NE(e.find(part), std::string::npos) << "expected '" << part << "' in: " << e;
  };
  std::string b = good;
  b[3] = 'X';
  expect(b, "is not a .spore file: bad magic 'SPOXEMDL'");
  b = good;
  set_u32(b, L::off_version, 2);
  expect(b, "spore file 'm.spore': format version 2 is newer than this spore (reads <= 1); upgrade spore");
  set_u32(b, L::off_version, 0);
  expect(b, "bad format version 0");
  b = good;
  set_u32(b, L::off_header_size, 64);
  expect(b, "header size 64");
  b = good;
  b[200] ^= 1;
  expect(b, fmt::format("checksum mismatch: the header (byte offset 120) says {:016x}", get_u64(good, L::off_checksum)));
  b = good;
  b[L::off_checksum] ^= 1;
  expect(b, "checksum mismatch");
  // Section table: out of range, overlapping, misaligned (checked before the checksum).
  b = good;
  set_u64(b, L::off_sections + 8, good.size());
  expect(b, "graph section [128, +" + std::to_string(good.size()) + ") (header byte offset 24) lies outside the file body");
  b = good;
  set_u64(b, L::off_sections + 16, 64);
  expect(b, "tensor index section [64, +");
  b = good;
  set_u64(b, L::off_sections + 16 * 2, section_offset(good, 1));
  expect(b, "tensor index section [");
  expect(b, "overlaps metadata section");
  b = good;
  set_u64(b, L::off_sections + 16 * 3, section_offset(good, 3) + 8);
  set_u64(b, L::off_sections + 16 * 3 + 8, section_size(good, 3) - 8);
  expect(b, "weights section offset " + std::to_string(section_offset(good, 3) + 8) + " is not 64-byte aligned");
  // Overflowing offset + size.
  b = good;
  set_u64(b, L::off_sections + 16 * 3 + 8, ~uint64_t{0} - 8);
  expect(b, "weights section");
}

TEST(SporeFile, SectionContentCorruptionsNameTheProblem) {
  const std::string good = encode_spore(*make_graph());
  auto expect = [&](std::string b, const std::string& part) {
    reseal(b);  // get past the checksum to the content checks
    const std::string e = parse_error(b);
    EXPECT_NE(e.find(part), std::string::npos) << "expected '" << part << "' in: " << e;
  };
  const EntryPos e0 = entry_pos(good, 0), e1 = entry_pos(good, 1);
  std::string b = good;
  b[e0.dtype] = 9;
  expect(b, "tensor index entry 0 ('fc1/weight:0') at byte offset " + std::to_string(section_offset(good, 1) + 8) +
                ": bad dtype code 9");
  b = good;
  b[e0.dtype] = static_cast<char>(DType::i32);  // same size, different type: the graph disagrees
  expect(b, "graph:2:");
  expect(b, "tensor<0> is i32[8,16] but the constant's type is f32[8,16]");
  b = good;
  set_u64(b, e0.size, get_u64(good, e0.size) - 4);
  expect(b, "size 508 bytes, but shape [8,16] of f32 needs 512");
  b = good;
  set_u64(b, e0.dims, 9);
  expect(b, "shape [9,16] of f32 needs 576");
  b = good;
  set_u64(b, e0.dims, uint64_t{1} << 60);
  expect(b, "impossibly large");
  b = good;
  set_u64(b, e1.offset, 32);
  expect(b, "data offset 32 is not a multiple of 64");
  b = good;
  set_u64(b, e1.offset, 0);
  expect(b, "tensor<1> 'fc1.bias' (weights bytes [0, 64)) overlaps tensor<0> 'fc1/weight:0' (weights bytes [0, 512))");
  b = good;
  set_u64(b, e1.offset, section_size(good, 3));
  expect(b, "runs past the end of the weights section");
  b = good;
  set_u64(b, section_offset(good, 1), 1000);
  expect(b, "claims 1000 tensors");
  b = good;
  set_u64(b, section_offset(good, 1), 3);
  expect(b, "unexpected bytes after the last tensor index entry");
  b = good;
  b[e0.rank] = 40;
  expect(b, "tensor index");
  b = good;
  b[section_offset(good, 2)] = 'x';
  expect(b, "metadata section at byte offset " + std::to_string(section_offset(good, 2)) + " is not valid JSON");
  // Graph text: a reference to a tensor that does not exist, a parse error, a semantic error.
  const size_t g0 = section_offset(good, 0);
  const std::string text = good.substr(g0, section_size(good, 0));
  b = good;
  b.replace(g0 + text.find("tensor<13>"), 10, "tensor<99>");  // same length
  expect(b, "tensor<99> does not exist (the tensor index has 14 entries)");
  b = good;
  b.replace(g0 + text.find("tensor<1>"), 9, "tensor<7>");
  expect(b, "tensor<7> is ");
  b = good;
  b.replace(g0 + text.find("relu("), 5, "rélu");
  expect(b, "spore file 'm.spore': graph section (byte offset 128): graph:");
  b = good;
  b.replace(g0 + text.find("relu("), 5, "cast(");  // parses; cast needs a 'to' attribute
  expect(b, "graph section (byte offset 128)");
  expect(b, "'act'");
}

TEST(SporeFile, SaveModelAndLoadModelDispatch) {
  auto g = make_graph();
  const std::string path = temp_path("dispatch.spore");
  save_model(*g, path, {{"k", "v"}});
  EXPECT_EQ(print_graph(*load_model(path)), print_graph(*g));
}

}  // namespace
}  // namespace spore::io
