#include "io/gguf/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "base/half.h"
#include "io/file_util.h"
#include "io/gguf/gguf_writer.h"
#include "test_util.h"

namespace spore::io {
namespace {

using testing::error_of;

std::string temp_path(const std::string& name) { return (testing::temp_dir("gguf") / name).string(); }

float f16_round(float x) { return static_cast<float>(f16(x)); }

// ---- a raw byte builder, for files the writer refuses to produce ----
struct Raw {
  std::string b;
  template <class T>
  Raw& put(T v) {
    char c[sizeof(T)];
    std::memcpy(c, &v, sizeof(T));
    b.append(c, sizeof(T));
    return *this;
  }
  Raw& str(const std::string& s) {
    put<uint64_t>(s.size());
    b += s;
    return *this;
  }
  Raw& kv_u32(const std::string& k, uint32_t v) { return str(k).put<uint32_t>(4).put<uint32_t>(v); }
  Raw& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) put<uint64_t>(n);
    return put<uint32_t>(type).put<uint64_t>(offset);
  }
  Raw& pad(size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, '\0');
    return *this;
  }
  Raw& data(size_t n) {
    b.append(n, '\x11');
    return *this;
  }
};
Raw header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Raw r;
  r.put<uint32_t>(0x46554747).put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  return r;
}

std::string parse_error(const std::string& bytes) {
  return error_of([&] { GgufFile::parse(bytes.data(), bytes.size(), "bad.gguf"); });
}

// Every metadata type, arrays of each element type, and tensors of several types.
GgufWriter full_writer(uint32_t version, uint64_t alignment) {
  GgufWriter w(version, alignment);
  w.add_string("general.architecture", "llama");
  w.add_int("t.u8", 200, GgufValueType::u8);
  w.add_int("t.i8", -100, GgufValueType::i8);
  w.add_int("t.u16", 60000, GgufValueType::u16);
  w.add_int("t.i16", -30000, GgufValueType::i16);
  w.add_int("t.u32", 4000000000, GgufValueType::u32);
  w.add_int("t.i32", -2000000000, GgufValueType::i32);
  w.add_int("t.u64", int64_t{1} << 40, GgufValueType::u64);
  w.add_int("t.i64", -(int64_t{1} << 50), GgufValueType::i64);
  w.add_float("t.f32", 0.25, GgufValueType::f32);
  w.add_float("t.f64", 1e-300, GgufValueType::f64);
  w.add_bool("t.bool", true);
  w.add_string("t.utf8", "h\xc3\xa9llo\n\0x");
  w.add_strings("t.strings", {"a", "", "\xe2\x96\x81the"});
  w.add_ints("t.ints.u8", {0, 255}, GgufValueType::u8);
  w.add_ints("t.ints.i16", {-5, 7}, GgufValueType::i16);
  w.add_ints("t.ints.u32", {1, 2, 3}, GgufValueType::u32);
  w.add_ints("t.ints.i64", {-(int64_t{1} << 60)}, GgufValueType::i64);
  w.add_ints("t.bools", {1, 0, 1}, GgufValueType::boolean);
  w.add_floats("t.floats", {0.5, -1.5}, GgufValueType::f32);
  w.add_floats("t.doubles", {1e100}, GgufValueType::f64);
  w.add_ints("t.empty", {}, GgufValueType::i32);
  std::vector<double> v(64 * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i)) * 3;
  Tensor t = Tensor::from_doubles(v, {3, 64}, DType::f32);
  w.add_tensor("w.f32", t, GgmlType::f32);
  w.add_tensor("w.f16", t, GgmlType::f16);
  w.add_tensor("w.bf16", t, GgmlType::bf16);
  w.add_tensor("w.q8_0", t, GgmlType::q8_0);
  w.add_tensor("w.q4_0", t, GgmlType::q4_0);
  w.add_tensor("w.vec", Tensor::from_doubles({1, 2, 3}, {3}, DType::f32));
  w.add_tensor("w.4d", Tensor::from_doubles(std::vector<double>(2 * 3 * 4 * 5, 0.5), {2, 3, 4, 5}, DType::f32),
               GgmlType::f16);
  std::string ints(5 * 4, '\0');
  for (int i = 0; i < 5; ++i) ints[4 * i] = static_cast<char>(i + 1);
  w.add_tensor_bytes("w.i32", GgmlType::i32, {5}, ints);
  return w;
}

void check_full(const GgufFile& f, uint32_t version, uint64_t alignment) {
  EXPECT_EQ(f.version(), version);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(f.get_int("t.u16"), 60000);
  EXPECT_EQ(f.get_int("t.i16"), -30000);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.get_int("t.u64"), int64_t{1} << 40);
  EXPECT_EQ(f.get_int("t.i64"), -(int64_t{1} << 50));
  EXPECT_EQ(f.get_float("t.f32"), 0.25);
  EXPECT_EQ(f.get_float("t.f64"), 1e-300);
  EXPECT_EQ(f.get_float("t.u8"), 200.0);  // integers are accepted as floats
  EXPECT_EQ(f.get_int("t.bool"), 1);
  EXPECT_EQ(f.find("t.bool")->type, GgufValueType::boolean);
  EXPECT_EQ(f.get_string("t.utf8"), "h\xc3\xa9llo\n");  // the C string literal stops at \0
  EXPECT_EQ(f.get_strings("t.strings"), (std::vector<std::string>{"a", "", "\xe2\x96\x81the"}));
  EXPECT_EQ(f.get_ints("t.ints.u8"), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(f.get_ints("t.ints.i16"), (std::vector<int64_t>{-5, 7}));
  EXPECT_EQ(f.get_ints("t.ints.u32"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(f.get_ints("t.ints.i64"), (std::vector<int64_t>{-(int64_t{1} << 60)}));
  EXPECT_EQ(f.get_ints("t.bools"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(f.get_floats("t.floats"), (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(f.get_floats("t.doubles"), (std::vector<double>{1e100}));
  EXPECT_TRUE(f.get_ints("t.empty").empty());
  EXPECT_EQ(f.find("t.empty")->elem_type, GgufValueType::i32);
  EXPECT_EQ(f.get_int_or("missing", 7), 7);
  EXPECT_EQ(f.get_float_or("missing", 1.5), 1.5);
  EXPECT_EQ(f.get_string_or("missing", "x"), "x");
  EXPECT_EQ(f.get_int_or("t.i8", 7), -100);

  ASSERT_EQ(f.tensors().size(), 8u);
  for (const auto& t : f.tensors()) {
    EXPECT_EQ(t.offset % alignment, 0u) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % alignment, 0u) << t.name << " (buffer is 64-byte aligned)";
  }
  EXPECT_EQ(f.tensor("w.q8_0").type, GgmlType::q8_0);
  EXPECT_EQ(f.tensor("w.q8_0").shape, (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(f.tensor("w.q8_0").nbytes, 3u * 2 * 34);
  EXPECT_EQ(f.tensor("w.4d").shape, (std::vector<int64_t>{2, 3, 4, 5}));
  Tensor f32 = f.view("w.f32");
  EXPECT_EQ(f32.shape(), (Shape{3, 64}));
  EXPECT_EQ(f32.raw_data(), f.tensor("w.f32").data) << "F32 view must alias the file, not copy";
  for (int64_t i = 0; i < 192; ++i) {
    const float x = static_cast<float>(std::sin(static_cast<double>(i)) * 3);
    ASSERT_EQ(f32.data<float>()[i], x);
    ASSERT_EQ(f.view("w.f16").data<f16>()[i].bits, f16(x).bits);
    ASSERT_EQ(f.dequantize_f32("w.f16").data<float>()[i], f16_round(x));
    ASSERT_EQ(f.dequantize_f32("w.bf16").data<float>()[i], static_cast<float>(bf16(x)));
    ASSERT_NEAR(f.dequantize_f32("w.q8_0").data<float>()[i], x, 3.0 / 127);
    ASSERT_NEAR(f.dequantize_f32("w.q4_0").data<float>()[i], x, 3.0 / 8 + 1e-3);
  }
  EXPECT_EQ(f.view("w.i32").dtype(), DType::i32);
  EXPECT_EQ(f.view("w.i32").to_doubles(), (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_EQ(f.dequantize_f32("w.vec").to_doubles(), (std::vector<double>{1, 2, 3}));
}

TEST(Gguf, EveryMetadataTypeVersionsAndAlignments) {
  for (uint32_t version : {2u, 3u})
    for (uint64_t alignment : {32u, 8u, 64u}) {
      SCOPED_TRACE(fmt::format("v{} alignment {}", version, alignment));
      std::string bytes = full_writer(version, alignment).encode();
      // Copied into 64-byte aligned memory, like a mapping is.
      Tensor buf = Tensor::empty({static_cast<int64_t>(bytes.size())}, DType::u8);
      std::memcpy(buf.raw_data(), bytes.data(), bytes.size());
      GgufFile f = GgufFile::parse(buf.raw_data(), bytes.size(), "mem.gguf");
      check_full(f, version, alignment);
      EXPECT_EQ(f.has("general.alignment"), alignment != 32);
    }
}

TEST(Gguf, OpenMapsTheFileAndViewsOutliveIt) {
  const std::string path = temp_path("full.gguf");
  full_writer(3, 32).write(path);
  Tensor view;
  {
    GgufFile f = GgufFile::open(path);
    EXPECT_EQ(f.path(), path);
    check_full(f, 3, 32);
    view = f.view("w.f32");
  }
  // The GgufFile is gone; the view keeps the mapping alive.
  EXPECT_EQ(view.data<float>()[1], static_cast<float>(std::sin(1.0) * 3));
  EXPECT_NE(error_of([&] { GgufFile::open(temp_path("nope.gguf")); }).find("nope.gguf"), std::string::npos);
  write_file_atomic(temp_path("empty.gguf"), "");
  EXPECT_NE(error_of([&] { GgufFile::open(temp_path("empty.gguf")); }).find("empty"), std::string::npos);
}

TEST(Gguf, GetterAndTensorErrorsNameTheKey) {
  std::string bytes = full_writer(3, 32).encode();
  GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "x.gguf");
  EXPECT_NE(error_of([&] { f.get_string("no.such.key"); }).find("'no.such.key'"), std::string::npos);
  EXPECT_NE(error_of([&] { f.get_string("t.u8"); }).find("'t.u8' has type u8, expected string"), std::string::npos);
  EXPECT_NE(error_of([&] { f.get_int("t.f32"); }).find("'t.f32'"), std::string::npos);
  EXPECT_NE(error_of([&] { f.get_strings("t.floats"); }).find("array of f32"), std::string::npos);
  EXPECT_NE(error_of([&] { f.get_floats("t.ints.u8"); }).find("'t.ints.u8'"), std::string::npos);
  EXPECT_NE(error_of([&] { f.get_ints("t.u8"); }).find("'t.u8'"), std::string::npos);
  EXPECT_NE(error_of([&] { f.tensor("blk.9.attn_q.weight"); }).find("missing tensor 'blk.9.attn_q.weight'"),
            std::string::npos);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  EXPECT_EQ(f.tensor("w.q8_0", {3, 64}).nbytes, 204u);
  std::string e = error_of([&] { f.tensor("w.q8_0", {64, 3}); });
  EXPECT_NE(e.find("tensor 'w.q8_0' (Q8_0) has shape [3,64], expected [64,3]"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { f.view("w.q8_0"); }).find("tensor 'w.q8_0' has type Q8_0"), std::string::npos);
}

TEST(Gguf, UnsupportedQuantTypeIsNamed) {
  GgufWriter w;
  w.add_tensor_bytes("blk.0.ffn_down.weight", GgmlType::q2_k, {2, 256}, std::string(2 * 84, '\x01'));
  std::string bytes = w.encode();
  GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "q2.gguf");
  EXPECT_EQ(f.tensor("blk.0.ffn_down.weight").nbytes, 168u);
  std::string e = error_of([&] { f.dequantize_f32("blk.0.ffn_down.weight"); });
  EXPECT_NE(e.find("'blk.0.ffn_down.weight' has type Q2_K"), std::string::npos) << e;
  EXPECT_EQ(ggml_type_name(GgmlType::q6_k), "Q6_K");
  EXPECT_EQ(ggml_type_name(static_cast<GgmlType>(99)), "type 99");
  EXPECT_FALSE(ggml_block_layout(static_cast<GgmlType>(99)));
  EXPECT_EQ(*ggml_block_layout(GgmlType::q8_0), std::make_pair(int64_t{32}, int64_t{34}));
}

TEST(Gguf, MalformedFilesGiveErrorsNamingOffsetAndThing) {
  struct Case {
    const char* what;
    std::string bytes;
    std::string expect;
  };
  const uint32_t q8 = 8, f32 = 0;
  std::vector<Case> cases;
  auto one_tensor = [](Raw r, size_t data) { return r.pad(32).data(data).b; };
  {
    Raw r = header(0, 0);
    r.b[0] = 'X';
    cases.push_back({"magic", r.b, "bad magic"});
  }
  cases.push_back({"v1", header(0, 0, 1).b, "version 1 is unsupported"});
  cases.push_back({"v4", header(0, 0, 4).b, "unsupported GGUF version 4"});
  cases.push_back({"tensor count", header(uint64_t{1} << 40, 0).b, "tensor count 1099511627776"});
  cases.push_back({"kv count", header(0, uint64_t{1} << 60).b, "metadata count"});
  cases.push_back({"key length", header(0, 1).put<uint64_t>(uint64_t{1} << 62).data(20).b, "past the end"});
  cases.push_back({"string value length", header(0, 1).str("k").put<uint32_t>(8).put<uint64_t>(1000).data(10).b,
                   "value of key 'k' has length 1000"});
  cases.push_back({"array count", header(0, 1).str("arr").put<uint32_t>(9).put<uint32_t>(5).put<uint64_t>(1u << 30).b,
                   "key 'arr': array of 1073741824 i32"});
  cases.push_back({"nested array",
                   header(0, 1).str("nest").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(1).data(16).b,
                   "key 'nest': arrays of arrays"});
  cases.push_back({"value type", header(0, 1).str("k").put<uint32_t>(13).data(8).b, "unknown value type 13"});
  cases.push_back({"bool", header(0, 1).str("flag").put<uint32_t>(7).put<uint8_t>(2).b, "bool value 2"});
  cases.push_back({"duplicate key", header(0, 2).kv_u32("a", 1).kv_u32("a", 2).b, "duplicate key 'a'"});
  cases.push_back({"alignment", header(0, 1).kv_u32("general.alignment", 48).b, "'general.alignment' = 48"});
  cases.push_back({"alignment type", header(0, 1).str("general.alignment").put<uint32_t>(8).str("x").b,
                   "'general.alignment' has type string"});
  cases.push_back({"duplicate tensor",
                   one_tensor(header(2, 0).tensor("t", {32}, f32, 0).tensor("t", {32}, f32, 128), 256),
                   "duplicate tensor 't'"});
  cases.push_back({"n_dims", one_tensor(header(1, 0).tensor("t5", {1, 1, 1, 1, 1}, f32, 0), 4), "'t5' has 5 dims"});
  cases.push_back({"zero dim", one_tensor(header(1, 0).tensor("z", {4, 0}, f32, 0), 16), "'z': dim 1 = 0"});
  cases.push_back({"overflow", one_tensor(header(1, 0).tensor("big", {1u << 31, 1u << 31, 1u << 31}, f32, 0), 16),
                   "'big': dim 1"});
  cases.push_back({"block multiple", one_tensor(header(1, 0).tensor("q", {16, 2}, q8, 0), 68),
                   "'q': row length 16 is not a multiple of the Q8_0 block size 32"});
  cases.push_back({"unknown type", one_tensor(header(1, 0).tensor("u", {4}, 99, 0), 16), "'u' has unknown ggml type 99"});
  cases.push_back({"misaligned", one_tensor(header(1, 0).tensor("m", {4}, f32, 4), 32),
                   "'m': data offset 4 is not a multiple of the alignment 32"});
  cases.push_back({"past end", one_tensor(header(1, 0).tensor("e", {64}, f32, 0), 255),
                   "tensor 'e' (F32 [64], 256 bytes) at data offset 0 runs past the end"});
  cases.push_back({"offset past end", one_tensor(header(1, 0).tensor("o", {4}, f32, uint64_t{1} << 62), 64),
                   "tensor 'o'"});
  cases.push_back({"overlap", one_tensor(header(2, 0).tensor("a", {64}, f32, 0).tensor("b", {8}, f32, 224), 256),
                   "tensor 'b' at data offset 224 overlaps tensor 'a'"});
  cases.push_back({"data start", header(1, 0).tensor("d", {4}, f32, 0).b, "data section would start"});
  for (const auto& c : cases) {
    std::string e = parse_error(c.bytes);
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": " << e;
    EXPECT_NE(e.find("'bad.gguf'"), std::string::npos) << c.what << ": " << e;
    EXPECT_NE(e.find("byte offset"), std::string::npos) << c.what << ": " << e;
  }
  // The same valid layouts parse (the cases above fail for the reason named, not for another).
  EXPECT_EQ(parse_error(one_tensor(header(2, 0).tensor("a", {56}, f32, 0).tensor("b", {8}, f32, 224), 256)), "");
  EXPECT_EQ(parse_error(header(0, 2).kv_u32("a", 1).kv_u32("general.alignment", 64).b), "");
}

TEST(Gguf, EveryTruncationIsAnError) {
  std::string bytes = full_writer(3, 32).encode();
  ASSERT_EQ(parse_error(bytes), "");
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string prefix = bytes.substr(0, n);  // its own allocation, so ASan sees reads past the end
    std::string e = parse_error(prefix);
    ASSERT_NE(e, "") << "prefix of " << n << " bytes parsed";
    ASSERT_NE(e.find("byte offset"), std::string::npos) << e;
  }
}

TEST(Gguf, RandomCorruptionNeverCrashes) {
  const std::string good = full_writer(2, 16).encode();
  std::mt19937 rng(1234);
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % bytes.size();
      bytes[at] = static_cast<char>(rng() % 3 == 0 ? 0xff : rng());
    }
    try {
      GgufFile f = GgufFile::parse(bytes.data(), bytes.size(), "fuzz.gguf");
      for (const auto& t : f.tensors()) {
        try {
          f.dequantize_f32(t.name);
        } catch (const Error&) {
        }
      }
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 100);  // most corruptions hit a checked field
}

// ---- quantization: references written from the block layouts, in the encoding direction ----

struct Q8Ref {
  std::string bytes;
  std::vector<float> values;  // what dequantization must give, exactly
};
Q8Ref ref_q8_0(const std::vector<float>& x) {
  Q8Ref r;
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / 127;
    const uint16_t dh = f16(d).bits;
    r.bytes.append(reinterpret_cast<const char*>(&dh), 2);
    for (int j = 0; j < 32; ++j) {
      const int q = d == 0 ? 0 : static_cast<int>(std::lround(x[b + j] * (1.0f / d)));
      r.bytes.push_back(static_cast<char>(static_cast<int8_t>(q)));
      r.values.push_back(f16_round(d) * static_cast<float>(q));
    }
  }
  return r;
}
Q8Ref ref_q4_0(const std::vector<float>& x) {
  Q8Ref r;
  for (size_t b = 0; b < x.size(); b += 32) {
    float m = 0;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[b + j]) > std::fabs(m)) m = x[b + j];
    const float d = m / -8;
    const uint16_t dh = f16(d).bits;
    r.bytes.append(reinterpret_cast<const char*>(&dh), 2);
    int q[32];
    for (int j = 0; j < 32; ++j)
      q[j] = std::min(15, static_cast<int>(x[b + j] * (d == 0 ? 0.0f : 1.0f / d) + 8.5f));
    for (int j = 0; j < 16; ++j) r.bytes.push_back(static_cast<char>(q[j] | (q[j + 16] << 4)));
    for (int j = 0; j < 32; ++j) r.values.push_back(f16_round(d) * static_cast<float>(q[j] - 8));
  }
  return r;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = dist(rng);
  return x;
}

std::vector<float> dequant(GgmlType t, const std::string& bytes, size_t n) {
  std::vector<float> y(n);
  dequantize_row(t, bytes.data(), y.data(), static_cast<int64_t>(n));
  return y;
}

TEST(GgufQuant, Q8_0AndQ4_0MatchTheReferenceExactly) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::vector<float> x = random_floats(32 * 40, seed, seed == 3 ? 1e-3f : 2.0f);
    for (int j = 0; j < 32; ++j) x[32 * 5 + j] = 0;  // an all-zero block: scale 0
    Q8Ref r8 = ref_q8_0(x), r4 = ref_q4_0(x);
    EXPECT_EQ(quantize_row(GgmlType::q8_0, x.data(), static_cast<int64_t>(x.size())), r8.bytes);
    EXPECT_EQ(quantize_row(GgmlType::q4_0, x.data(), static_cast<int64_t>(x.size())), r4.bytes);
    EXPECT_EQ(dequant(GgmlType::q8_0, r8.bytes, x.size()), r8.values);
    EXPECT_EQ(dequant(GgmlType::q4_0, r4.bytes, x.size()), r4.values);
    double err8 = 0, err4 = 0, amax = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err8 = std::max(err8, std::fabs(static_cast<double>(r8.values[i] - x[i])));
      err4 = std::max(err4, std::fabs(static_cast<double>(r4.values[i] - x[i])));
      amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
    }
    EXPECT_LT(err8, amax / 127 * 0.6);
    EXPECT_LT(err4, amax / 8 * 1.01);
  }
  std::vector<float> y(31);
  EXPECT_NE(error_of([&] { dequantize_row(GgmlType::q8_0, y.data(), y.data(), 31); }).find("block size 32"),
            std::string::npos);
}

// Q4_1, Q5_0, Q5_1, Q4_K and Q6_K blocks packed from chosen integer codes and scales; dequantization must return
// exactly scale * code (+ min).
TEST(GgufQuant, OtherTypesDecodePackedCodes) {
  std::mt19937 rng(77);
  auto code = [&](int bits) { return static_cast<int>(rng() % (1u << bits)); };
  auto put_f16 = [](std::string& s, float v) {
    const uint16_t h = f16(v).bits;
    s.append(reinterpret_cast<const char*>(&h), 2);
  };
  const int nblocks = 3;
  for (GgmlType t : {GgmlType::q4_1, GgmlType::q5_0, GgmlType::q5_1}) {
    SCOPED_TRACE(std::string(ggml_type_name(t)));
    std::string bytes;
    std::vector<float> want;
    const bool five = t != GgmlType::q4_1, has_min = t != GgmlType::q5_0;
    for (int b = 0; b < nblocks; ++b) {
      const float d = f16_round(0.01f * static_cast<float>(b + 1)), m = f16_round(-0.3f * static_cast<float>(b));
      int q[32];
      for (int& v : q) v = code(five ? 5 : 4);
      put_f16(bytes, d);
      if (has_min) put_f16(bytes, m);
      if (five) {
        uint32_t qh = 0;
        for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>(q[j] >> 4) << j;
        bytes.append(reinterpret_cast<const char*>(&qh), 4);
      }
      for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<char>((q[j] & 15) | ((q[j + 16] & 15) << 4)));
      for (int j = 0; j < 32; ++j)
        want.push_back(has_min ? d * static_cast<float>(q[j]) + m : d * static_cast<float>(q[j] - 16));
    }
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), nblocks * ggml_block_layout(t)->second);
    EXPECT_EQ(dequant(t, bytes, want.size()), want);
  }
  {  // Q4_K: 8 sub-blocks of 32 with 6-bit scale and min each
    std::string bytes;
    std::vector<float> want;
    for (int b = 0; b < nblocks; ++b) {
      const float d = f16_round(0.02f * static_cast<float>(b + 1)), dmin = f16_round(0.005f);
      int sc[8], mn[8];
      for (int j = 0; j < 8; ++j) {
        sc[j] = code(6);
        mn[j] = code(6);
      }
      uint8_t s[12] = {};
      for (int j = 0; j < 4; ++j) {
        s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
      }
      put_f16(bytes, d);
      put_f16(bytes, dmin);
      bytes.append(reinterpret_cast<const char*>(s), 12);
      int q[256];
      for (int& v : q) v = code(4);
      // 64 elements per 32 bytes: sub-block 2g in the low nibbles, 2g+1 in the high nibbles.
      for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 32; ++l) bytes.push_back(static_cast<char>(q[64 * g + l] | (q[64 * g + 32 + l] << 4)));
      for (int i = 0; i < 256; ++i)
        want.push_back(d * static_cast<float>(sc[i / 32]) * static_cast<float>(q[i]) -
                       dmin * static_cast<float>(mn[i / 32]));
    }
    // The decoder computes (d*sc)*q - dmin*m; allow the one-ulp difference of the other association.
    std::vector<float> got = dequant(GgmlType::q4_k, bytes, want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << i;
  }
  {  // Q6_K: 16 sub-blocks of 16 with int8 scales, 6-bit codes offset by 32
    std::string bytes;
    std::vector<float> want;
    for (int b = 0; b < nblocks; ++b) {
      const float d = f16_round(0.001f * static_cast<float>(b + 1));
      int q[256], sc[16];
      for (int& v : q) v = code(6);
      for (int& v : sc) v = static_cast<int>(rng() % 256) - 128;
      uint8_t ql[128] = {}, qh[64] = {};
      // Element i of each half of 128: 32-element group g = i/32, lane l = i%32. Groups 0/1 use the low nibbles of
      // ql[l] / ql[l+32], groups 2/3 the high nibbles; qh[l] holds the top 2 bits of groups 0-3 at bits 0,2,4,6.
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 128; ++i) {
          const int v = q[128 * h + i], g = i / 32, l = i % 32;
          uint8_t& lo = ql[64 * h + l + (g % 2) * 32];
          lo = static_cast<uint8_t>(lo | ((v & 15) << (g >= 2 ? 4 : 0)));
          qh[32 * h + l] = static_cast<uint8_t>(qh[32 * h + l] | ((v >> 4) << (2 * g)));
        }
      bytes.append(reinterpret_cast<const char*>(ql), 128);
      bytes.append(reinterpret_cast<const char*>(qh), 64);
      for (int v : sc) bytes.push_back(static_cast<char>(static_cast<int8_t>(v)));
      put_f16(bytes, d);
      for (int i = 0; i < 256; ++i)
        want.push_back(d * static_cast<float>(sc[i / 16]) * static_cast<float>(q[i] - 32));
    }
    ASSERT_EQ(bytes.size(), 3u * 210);
    EXPECT_EQ(dequant(GgmlType::q6_k, bytes, want.size()), want);
  }
}

// ---- real third-party files ----

TEST(GgufReal, LlamaTinyRandom) {
  SPORE_SHARED_DATA_DIR(dir, "gguf-models");
  GgufFile f = GgufFile::open(dir + "/llama-2-tiny-random.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 1);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 8);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), 32);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 2);
  EXPECT_NEAR(f.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens").size(), 32000u);
  EXPECT_EQ(f.get_floats("tokenizer.ggml.scores").size(), 32000u);
  EXPECT_EQ(f.get_ints("tokenizer.ggml.token_type").size(), 32000u);
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens")[1], "<s>");
  ASSERT_EQ(f.tensors().size(), 12u);
  EXPECT_EQ(f.tensor("token_embd.weight").shape, (std::vector<int64_t>{32000, 8}));
  EXPECT_EQ(f.tensor("token_embd.weight").type, GgmlType::f16);
  EXPECT_EQ(f.tensor("blk.0.ffn_down.weight").shape, (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(f.tensor("blk.0.ffn_gate.weight").shape, (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(f.tensor("output_norm.weight").type, GgmlType::f32);
  for (const auto& t : f.tensors()) {
    Tensor v = f.dequantize_f32(t.name);
    EXPECT_EQ(v.shape(), t.shape) << t.name;
    double sumsq = 0;
    const float* p = v.data<float>();
    for (int64_t i = 0; i < v.numel(); ++i) {
      ASSERT_TRUE(std::isfinite(p[i])) << t.name << "[" << i << "]";
      sumsq += static_cast<double>(p[i]) * p[i];
    }
    EXPECT_GT(sumsq, 0) << t.name << " is all zeros";
    Tensor view = f.view(t.name);  // F16/F32: aliases the mapping
    EXPECT_EQ(view.raw_data(), t.data) << t.name;
  }
}

TEST(GgufReal, VocabOnlyFiles) {
  SPORE_SHARED_DATA_DIR(dir, "tokenizer-tests/llama.cpp-vocab");
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".gguf") continue;
    SCOPED_TRACE(entry.path().string());
    GgufFile f = GgufFile::open(entry.path().string());
    ++n;
    EXPECT_TRUE(f.tensors().empty());
    const std::string arch = f.get_string("general.architecture");
    EXPECT_FALSE(arch.empty());
    EXPECT_TRUE(f.has(arch + ".block_count") || f.has(arch + ".context_length"));
    const size_t n_tokens = f.get_strings("tokenizer.ggml.tokens").size();
    EXPECT_GT(n_tokens, 1000u);
    if (f.has("tokenizer.ggml.scores")) {
      EXPECT_EQ(f.get_floats("tokenizer.ggml.scores").size(), n_tokens);
    }
    if (f.has("tokenizer.ggml.token_type")) {
      EXPECT_EQ(f.get_ints("tokenizer.ggml.token_type").size(), n_tokens);
    }
    if (f.has("tokenizer.ggml.merges")) {
      EXPECT_GT(f.get_strings("tokenizer.ggml.merges").size(), 0u);
    }
    for (const char* k : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
      if (f.has(k)) {
        EXPECT_LT(f.get_int(k), static_cast<int64_t>(n_tokens)) << k;
      }
    }
  }
  EXPECT_GE(n, 10);
}


// bench/peers/make_llm_gguf.py writes models spore must open: llama.cpp's tensor names and metadata, real vocabularies.
TEST(GgufReal, MakeLlmGgufScriptOutputOpens) {
  SPORE_SHARED_DATA_DIR(data, "tokenizer-tests");
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
  const std::string script = testing::repo_root() + "/bench/peers/make_llm_gguf.py";
  auto make = [&](const std::string& args, const std::string& out) {
    const std::string cmd = "/usr/bin/python3 '" + script + "' " + args + " --data '" + data + "/..' -o '" + out +
                            "' >/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  };
  const std::string llama = temp_path("llama-q8.gguf"), qwen = temp_path("qwen2-f16.gguf");
  make("--arch llama --shape tiny --dtype q8_0 --layers 1 --seed 3", llama);
  make("--arch qwen2 --shape tiny --dtype f16 --layers 1", qwen);
  {
    GgufFile f = GgufFile::open(llama);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_int("llama.block_count"), 1);
    EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
    EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 2);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens").size(), 32000u);
    EXPECT_EQ(f.get_floats("tokenizer.ggml.scores").size(), 32000u);
    EXPECT_EQ(f.tensors().size(), 12u);
    const GgufTensorInfo& wk = f.tensor("blk.0.attn_k.weight");
    EXPECT_EQ(wk.type, GgmlType::q8_0);
    EXPECT_EQ(wk.shape, (std::vector<int64_t>{32, 64}));
    EXPECT_EQ(f.tensor("output.weight").shape, (std::vector<int64_t>{32000, 64}));
    EXPECT_EQ(f.tensor("blk.0.ffn_norm.weight").type, GgmlType::f32);
    // The script's Q8_0 encoding is spore's: requantizing the decoded values gives the file's bytes back.
    Tensor w = f.dequantize_f32("blk.0.ffn_down.weight");
    EXPECT_EQ(quantize_row(GgmlType::q8_0, w.data<float>(), w.numel()),
              std::string(reinterpret_cast<const char*>(f.tensor("blk.0.ffn_down.weight").data),
                          f.tensor("blk.0.ffn_down.weight").nbytes));
    double sum = 0, sumsq = 0;
    for (double v : w.to_doubles()) {
      sum += v;
      sumsq += v * v;
    }
    const double n = static_cast<double>(w.numel());
    EXPECT_NEAR(sum / n, 0, 0.003);
    EXPECT_NEAR(std::sqrt(sumsq / n), 0.02, 0.002);
    EXPECT_NEAR(f.dequantize_f32("output_norm.weight").to_doubles()[0], 1.0, 0.1);
  }
  {
    GgufFile f = GgufFile::open(qwen);
    EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
    const auto& tokens = f.get_strings("tokenizer.ggml.tokens");
    ASSERT_EQ(tokens.size(), 151936u);
    EXPECT_EQ(f.get_ints("tokenizer.ggml.token_type").size(), tokens.size());
    EXPECT_EQ(tokens[static_cast<size_t>(f.get_int("tokenizer.ggml.eos_token_id"))], "<|endoftext|>");
    EXPECT_GT(f.get_strings("tokenizer.ggml.merges").size(), 100000u);
    EXPECT_EQ(f.find_tensor("output.weight"), nullptr) << "Qwen2 ties the output to the embedding";
    EXPECT_EQ(f.tensor("blk.0.attn_k.bias").shape, (std::vector<int64_t>{32}));
    EXPECT_EQ(f.tensor("token_embd.weight").type, GgmlType::f16);
    EXPECT_EQ(f.view("token_embd.weight").shape(), (Shape{151936, 64}));
  }
}

}  // namespace
}  // namespace spore::io
