#include "data/sources.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

namespace spore::data {
namespace {


using testing::repo_root;

std::filesystem::path temp_dir() { return testing::temp_dir("sources"); }

std::string temp_path(const std::string& name) { return (temp_dir() / name).string(); }

void write_bytes(const std::string& path, const std::string& b) { std::ofstream(path, std::ios::binary) << b; }

std::string idx_header(int code, std::vector<uint32_t> dims) {
  std::string s = {0, 0, static_cast<char>(code), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((d >> (8 * k)) & 0xff));
  return s;
}

using testing::error_of;

TEST(Idx, ParsesU8AndBigEndianTypes) {
  Tensor t = parse_idx(idx_header(0x08, {2, 3}) + std::string("\x01\x02\x03\x04\x05\xff", 6), "m");
  EXPECT_EQ(t.dtype(), DType::u8);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{1, 2, 3, 4, 5, 255}));
  Tensor i = parse_idx(idx_header(0x0C, {2}) + std::string("\x00\x00\x01\x00\xff\xff\xff\xfe", 8), "m");
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.to_doubles(), (std::vector<double>{256, -2}));
  Tensor s = parse_idx(idx_header(0x0B, {1}) + std::string("\xff\xfd", 2), "m");
  EXPECT_EQ(s.to_doubles(), (std::vector<double>{-3}));
  Tensor f = parse_idx(idx_header(0x0D, {1}) + std::string("\x3f\xc0\x00\x00", 4), "m");
  EXPECT_EQ(f.to_doubles(), (std::vector<double>{1.5}));
}

TEST(Idx, ErrorsNameFileAndOffset) {
  std::string e = error_of([] { parse_idx(std::string("\x01\x00\x08\x01", 4) + std::string(8, '\0'), "bad.idx"); });
  EXPECT_NE(e.find("bad.idx"), std::string::npos) << e;
  EXPECT_NE(e.find("magic"), std::string::npos) << e;
  e = error_of([] { parse_idx(idx_header(0x08, {10, 10}) + std::string(50, 'a'), "short.idx"); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("byte offset 12"), std::string::npos) << e;
  e = error_of([] { parse_idx(idx_header(0x08, {3}) + std::string(5, 'a'), "long.idx"); });
  EXPECT_NE(e.find("extra bytes"), std::string::npos) << e;
  e = error_of([] { parse_idx(idx_header(0x08, {3, 4}).substr(0, 9), "hdr.idx"); });
  EXPECT_NE(e.find("truncated at byte offset 9"), std::string::npos) << e;
  e = error_of([] { parse_idx(idx_header(0x0E, {0xffffffffu, 0xffffffffu, 0xffffffffu}), "huge.idx"); });
  EXPECT_NE(e.find("dims too large at byte offset"), std::string::npos) << e;
  e = error_of([] { parse_idx(idx_header(0x07, {1}) + "a", "type.idx"); });
  EXPECT_NE(e.find("element type 0x07"), std::string::npos) << e;
}

TEST(Idx, LoadMnistFromFilesAndCountMismatch) {
  std::string dir = temp_path("mnist_small");
  std::filesystem::create_directories(dir);
  write_bytes(dir + "/t10k-images-idx3-ubyte",
              idx_header(0x08, {2, 2, 2}) + std::string("\x00\xff\x00\xff\x33\x33\x33\x33", 8));
  write_bytes(dir + "/t10k-labels-idx1-ubyte", idx_header(0x08, {2}) + std::string("\x07\x02", 2));
  LabeledData d = load_mnist(dir);
  EXPECT_EQ(d.x.shape(), (Shape{2, 1, 2, 2}));
  EXPECT_EQ(d.x.dtype(), DType::f32);
  EXPECT_FLOAT_EQ(d.x.item_at(1), 1.0f);
  EXPECT_FLOAT_EQ(d.x.item_at(4), 0x33 / 255.0f);
  EXPECT_EQ(d.y.to_doubles(), (std::vector<double>{7, 2}));
  write_bytes(dir + "/t10k-labels-idx1-ubyte", idx_header(0x08, {3}) + std::string("\x07\x02\x01", 3));
  std::string e = error_of([&] { load_mnist(dir); });
  EXPECT_NE(e.find("2 images"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { load_mnist(dir, "train"); }).find("not found"), std::string::npos);
}

TEST(Idx, RealMnistTestSplit) {
  SPORE_SHARED_DATA_DIR(dir, "mnist");
  LabeledData d = load_mnist(dir, "t10k");
  ASSERT_EQ(d.x.shape(), (Shape{10000, 1, 28, 28}));
  ASSERT_EQ(d.y.shape(), (Shape{10000}));
  std::vector<int64_t> hist(10);
  for (double v : d.y.to_doubles()) hist.at(static_cast<size_t>(v))++;
  EXPECT_EQ(hist, (std::vector<int64_t>{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}));
  std::vector<double> labels_all = d.y.to_doubles();
  std::vector<double> first(labels_all.begin(), labels_all.begin() + 5);
  EXPECT_EQ(first, (std::vector<double>{7, 2, 1, 0, 4}));
  Tensor labels = read_idx(dir + "/train-labels-idx1-ubyte.gz");
  EXPECT_EQ(labels.shape(), (Shape{60000}));
  EXPECT_EQ(labels.dtype(), DType::u8);
}

TEST(Idx, RealFashionMnistTestSplit) {
  SPORE_SHARED_DATA_DIR(dir, "fashion-mnist");
  LabeledData d = load_mnist(dir, "t10k");
  ASSERT_EQ(d.x.shape(), (Shape{10000, 1, 28, 28}));
  std::vector<int64_t> hist(10);
  for (double v : d.y.to_doubles()) hist.at(static_cast<size_t>(v))++;
  EXPECT_EQ(hist, std::vector<int64_t>(10, 1000));
  double mx = 0;
  for (double v : d.x.slice(0, 0, 10).to_doubles()) mx = std::max(mx, v);
  EXPECT_LE(mx, 1.0);
  EXPECT_GT(mx, 0.5);
}

TEST(Csv, HeaderLabelColumnAndErrors) {
  std::string p = temp_path("a.csv");
  write_bytes(p, "a,b,label,c\n1,2,3,4\r\n5, 6.5 ,7,-8\n\n");
  CsvOptions opt;
  opt.header = true;
  opt.label_column = 2;
  LabeledData d = read_csv(p, opt);
  EXPECT_EQ(d.x.shape(), (Shape{2, 3}));
  EXPECT_EQ(d.x.to_doubles(), (std::vector<double>{1, 2, 4, 5, 6.5, -8}));
  EXPECT_EQ(d.y.dtype(), DType::i64);
  EXPECT_EQ(d.y.to_doubles(), (std::vector<double>{3, 7}));
  LabeledData nolabel = read_csv(p, CsvOptions{.header = true, .dtype = DType::f64});
  EXPECT_EQ(nolabel.x.shape(), (Shape{2, 4}));
  EXPECT_FALSE(nolabel.y.defined());
  std::string e = error_of([&] { read_csv(p); });  // header read as data
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  EXPECT_NE(e.find("'a'"), std::string::npos) << e;
  write_bytes(p, "1,2\n3\n");
  e = error_of([&] { read_csv(p); });
  EXPECT_NE(e.find("line 2 has 1 columns, expected 2"), std::string::npos) << e;
  write_bytes(p, "1,2.5\n");
  e = error_of([&] { read_csv(p, CsvOptions{.label_column = -1}); });
  EXPECT_NE(e.find("not an integer"), std::string::npos) << e;
  e = error_of([&] { read_csv(p, CsvOptions{.label_column = 5}); });
  EXPECT_NE(e.find("out of range"), std::string::npos) << e;
}

TEST(Csv, BundledDigits) {
  LabeledData d = load_digits(repo_root() + "/data/digits.csv.gz");
  ASSERT_EQ(d.x.shape(), (Shape{1797, 1, 8, 8}));
  std::vector<int64_t> hist(10);
  for (double v : d.y.to_doubles()) hist.at(static_cast<size_t>(v))++;
  EXPECT_EQ(hist, (std::vector<int64_t>{178, 182, 177, 183, 181, 182, 181, 179, 174, 180}));
  EXPECT_FLOAT_EQ(d.x.item_at(2), 5.0f / 16);
  EXPECT_EQ(d.y.item_at(0), 0);
}

TEST(Csv, SharedDigitsMatchBundled) {
  SPORE_SHARED_DATA_DIR(dir, "digits-sklearn");
  LabeledData a = load_digits(dir + "/digits.csv.gz");
  LabeledData b = load_digits(repo_root() + "/data/digits.csv.gz");
  EXPECT_TRUE(a.x.bit_equal(b.x));
  EXPECT_TRUE(a.y.bit_equal(b.y));
}

}  // namespace
}  // namespace spore::data
