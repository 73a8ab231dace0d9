#include "io/safetensors.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>

#include "io/file_util.h"

namespace spore::io {
namespace {

std::filesystem::path temp_dir() { return testing::temp_dir("safetensors"); }

std::string temp_path(const std::string& name) { return (temp_dir() / name).string(); }

using testing::error_of;

Tensor random_tensor(Shape shape, DType dtype, int salt) { return testing::patterned_tensor(std::move(shape), dtype, salt); }

// A file from a raw header string and data bytes.
std::string make_file(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return s + header + std::string(data_bytes, '\x01');
}

TEST(Safetensors, RoundTripEveryDtypeWithMetadata) {
  std::map<std::string, Tensor> ts;
  const DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16,   DType::i64,
                          DType::i32, DType::i8,  DType::u8,  DType::boolean};
  int salt = 0;
  for (DType dt : dtypes) {
    ts["w." + std::string(dtype_name(dt))] = random_tensor({3, 7}, dt, ++salt);
    ts["s." + std::string(dtype_name(dt))] = random_tensor({}, dt, ++salt);
  }
  ts["big"] = random_tensor({1000, 33}, DType::f32, 5);
  ts["empty"] = Tensor::empty({0, 5}, DType::f32);
  ts["strided"] = random_tensor({6, 4}, DType::f32, 9).slice(0, 0, 6, 2);
  std::string path = temp_path("rt.safetensors");
  write_safetensors(path, ts, {{"format", "pt"}});
  SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(f.tensors.size(), ts.size());
  for (const auto& [name, t] : ts) EXPECT_TRUE(f.tensors.at(name).bit_equal(t)) << name;
  std::string bytes = read_file_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "data section must be 8-byte aligned";
}

TEST(Safetensors, RealSampleFiles) {
  SPORE_SHARED_DATA_DIR(dir, "safetensors-samples");
  // Each sample holds values -3..2 cast to the dtype (unsigned ones wrap).
  const std::pair<const char*, DType> supported[] = {{"b", DType::i8},  {"i", DType::i32}, {"B", DType::u8},
                                                     {"e", DType::f16}, {"f", DType::f32}, {"d", DType::f64}};
  for (auto [name, dt] : supported) {
    SafetensorsFile f = read_safetensors(dir + "/" + name + ".safetensors");
    ASSERT_EQ(f.tensors.count(name), 1u) << name;
    const Tensor& t = f.tensors.at(name);
    EXPECT_EQ(t.dtype(), dt) << name;
    EXPECT_EQ(t.shape(), (Shape{6}));
    std::vector<double> want{-3, -2, -1, 0, 1, 2};
    if (dt == DType::u8) want = {253, 254, 255, 0, 1, 2};
    EXPECT_EQ(t.to_doubles(), want) << name;
    EXPECT_EQ(f.metadata.at("test"), "a");
  }
  // I16 / U16 / U32 have no spore dtype: a clear error naming the tensor, or skipped on request.
  std::string e = error_of([&] { read_safetensors(dir + "/h.safetensors"); });
  EXPECT_NE(e.find("'h'"), std::string::npos) << e;
  EXPECT_NE(e.find("I16"), std::string::npos) << e;
  SafetensorsFile all = read_safetensors(dir + "/overall.safetensors", /*skip_unsupported=*/true);
  EXPECT_EQ(all.tensors.size(), 6u);
  EXPECT_EQ(all.skipped.size(), 3u);
  EXPECT_EQ(all.tensors.at("f").to_doubles(), (std::vector<double>{-3, -2, -1, 0, 1, 2}));
}

TEST(Safetensors, MalformedFilesNameTensorAndOffset) {
  auto err = [](const std::string& bytes) {
    return error_of([&] { parse_safetensors(bytes.data(), bytes.size(), "m.safetensors"); });
  };
  std::string e = err(std::string("\x05\x00", 2));
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  e = err(make_file("{\"a\":{\"dtype\":\"F32\"", 0));
  EXPECT_NE(e.find("bad header JSON at byte offset"), std::string::npos) << e;
  std::string huge = make_file("{}", 0);
  huge[0] = '\x7f';
  e = err(huge);
  EXPECT_NE(e.find("runs past the end"), std::string::npos) << e;
  e = err(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8));
  EXPECT_NE(e.find("tensor 'a'"), std::string::npos) << e;
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
  e = err(make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(e.find("needs 12"), std::string::npos) << e;
  e = err(make_file(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
      8));
  EXPECT_NE(e.find("overlaps"), std::string::npos) << e;
  EXPECT_NE(e.find("'b' at data offset 4"), std::string::npos) << e;
  e = err(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8));
  EXPECT_NE(e.find("hole"), std::string::npos) << e;
  e = err(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8));
  EXPECT_NE(e.find("trailing"), std::string::npos) << e;
  e = err(make_file(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1));
  EXPECT_NE(e.find("unsupported dtype 'Q4'"), std::string::npos) << e;
  e = err(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4));
  EXPECT_NE(e.find("shape"), std::string::npos) << e;
  e = err(make_file(R"({"a":{"dtype":"F32","shape":[1]}})", 4));
  EXPECT_NE(e.find("data_offsets"), std::string::npos) << e;
  e = err(make_file(R"({"a":{"dtype":"F64","shape":[1099511627776,1099511627776],"data_offsets":[0,0]}})", 0));
  EXPECT_NE(e.find("too large"), std::string::npos) << e;
  e = err(make_file("[1,2]", 0));
  EXPECT_NE(e.find("not a JSON object"), std::string::npos) << e;
  // Truncating a real file anywhere past the header is caught.
  std::string good = encode_safetensors({{"w", random_tensor({5, 7}, DType::f32, 1)}});
  e = err(good.substr(0, good.size() - 3));
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
}

TEST(Safetensors, LoadIntoReportsEveryProblemAtOnce) {
  std::map<std::string, Tensor> saved{{"fc.weight", random_tensor({4, 3}, DType::f32, 1)},
                                      {"fc.bias", random_tensor({4}, DType::f32, 2)},
                                      {"bn.scale", random_tensor({4}, DType::f16, 3)},
                                      {"extra.thing", random_tensor({2}, DType::f32, 4)}};
  std::string path = temp_path("ckpt.safetensors");
  write_safetensors(path, saved);
  std::map<std::string, Tensor> params{{"fc.weight", Tensor::zeros({4, 3}, DType::f32)},
                                       {"fc.bias", Tensor::zeros({5}, DType::f32)},
                                       {"bn.scale", Tensor::zeros({4}, DType::f32)},
                                       {"head.weight", Tensor::zeros({2, 2}, DType::f32)}};
  std::string e = error_of([&] { load_into(params, path); });
  EXPECT_NE(e.find("4 problem(s)"), std::string::npos) << e;
  EXPECT_NE(e.find("missing tensor 'head.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("unexpected tensor 'extra.thing'"), std::string::npos) << e;
  EXPECT_NE(e.find("'fc.bias' has shape [4], expected [5]"), std::string::npos) << e;
  EXPECT_NE(e.find("'bn.scale' has dtype f16, expected f32"), std::string::npos) << e;
  EXPECT_EQ(params.at("fc.weight").to_doubles(), std::vector<double>(12, 0.0)) << "nothing loaded on error";

  // A matching set loads in place: views of the parameters see the new values.
  std::map<std::string, Tensor> ok{{"fc.weight", Tensor::zeros({4, 3}, DType::f32)},
                                   {"fc.bias", Tensor::zeros({4}, DType::f32)},
                                   {"bn.scale", Tensor::zeros({4}, DType::f16)},
                                   {"extra.thing", Tensor::zeros({2}, DType::f32)}};
  Tensor alias = ok.at("fc.weight");
  load_into(ok, path);
  EXPECT_TRUE(alias.bit_equal(saved.at("fc.weight")));
  EXPECT_TRUE(ok.at("bn.scale").bit_equal(saved.at("bn.scale")));
}

TEST(Safetensors, WriteErrors) {
  std::string e = error_of([] { encode_safetensors({{"__metadata__", Tensor::zeros({1}, DType::f32)}}); });
  EXPECT_NE(e.find("reserved"), std::string::npos) << e;
  e = error_of([] { encode_safetensors({{"x", Tensor{}}}); });
  EXPECT_NE(e.find("'x'"), std::string::npos) << e;
}

}  // namespace
}  // namespace spore::io
