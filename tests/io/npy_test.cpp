#include "io/npy.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "io/file_util.h"

namespace spore::io {
namespace {

std::filesystem::path temp_dir() { return testing::temp_dir("npy"); }

std::string temp_path(const std::string& name) { return (temp_dir() / name).string(); }

using testing::error_of;

Tensor random_tensor(Shape shape, DType dtype, int salt) { return testing::patterned_tensor(std::move(shape), dtype, salt); }

TEST(Npy, RoundTripEveryDtypeAndShape) {
  const DType dtypes[] = {DType::f64, DType::f32, DType::f16, DType::i64,
                          DType::i32, DType::i8,  DType::u8,  DType::boolean};
  const Shape shapes[] = {{}, {1}, {7}, {3, 33}, {2, 3, 5}, {1000}, {0, 4}};
  int salt = 0;
  for (DType dt : dtypes)
    for (const Shape& s : shapes) {
      Tensor t = random_tensor(s, dt, ++salt);
      std::string bytes = encode_npy(t);
      Tensor back = parse_npy(bytes.data(), bytes.size(), "mem");
      EXPECT_TRUE(back.bit_equal(t)) << dtype_name(dt) << " " << shape_str(s);
      EXPECT_EQ(bytes.size() % 64, t.nbytes() % 64) << "data must start 64-aligned";
    }
  // Through a file (atomic write) once per dtype.
  for (DType dt : dtypes) {
    Tensor t = random_tensor({5, 9}, dt, ++salt);
    std::string path = temp_path("rt.npy");
    write_npy(path, t);
    EXPECT_TRUE(read_npy(path).bit_equal(t)) << dtype_name(dt);
  }
}

TEST(Npy, StridedInputWrittenInLogicalOrder) {
  Tensor t = random_tensor({4, 6}, DType::f32, 3);
  std::vector<int64_t> perm{1, 0};
  Tensor tr = t.permute(perm);
  Tensor back = parse_npy(encode_npy(tr).data(), encode_npy(tr).size(), "mem");
  EXPECT_TRUE(back.bit_equal(tr.contiguous()));
}

TEST(Npy, ReadsNumpyHeadersIncludingFortranAndV2) {
  // What numpy 1.x writes for np.arange(6, dtype='<i4').reshape(2, 3, order='F'): data is column-major.
  auto make = [](int version, const std::string& dict, const std::string& data) {
    std::string h = dict;
    size_t prefix = version == 1 ? 10 : 12;
    while ((prefix + h.size() + 1) % 64) h += ' ';
    h += '\n';
    std::string s = std::string("\x93NUMPY", 6) + static_cast<char>(version) + '\0';
    s += static_cast<char>(h.size() & 0xff);
    s += static_cast<char>(h.size() >> 8);
    if (version != 1) s += std::string(2, '\0');
    return s + h + data;
  };
  std::string data;
  for (int32_t v : {0, 3, 1, 4, 2, 5}) data.append(reinterpret_cast<const char*>(&v), 4);
  std::string f = make(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", data);
  Tensor t = parse_npy(f.data(), f.size(), "f.npy");
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  std::string v2 = make(2, "{\"descr\": \"|u1\", \"shape\": (3,), \"fortran_order\": False}", "abc");
  EXPECT_EQ(parse_npy(v2.data(), v2.size(), "v2").to_doubles(), (std::vector<double>{97, 98, 99}));
  std::string huge = make(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", "");
  EXPECT_NE(error_of([&] { parse_npy(huge.data(), huge.size(), "huge.npy"); }).find("too large"), std::string::npos);
  std::string be = make(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd");
  std::string e = error_of([&] { parse_npy(be.data(), be.size(), "be.npy"); });
  EXPECT_NE(e.find("'>f4'"), std::string::npos) << e;
  EXPECT_NE(e.find("be.npy"), std::string::npos) << e;
}

TEST(Npy, MalformedFilesNameFileAndOffset) {
  std::string good = encode_npy(random_tensor({3, 4}, DType::f32, 1));
  std::string e = error_of([&] { parse_npy(good.data(), good.size() - 5, "t.npy"); });
  EXPECT_NE(e.find("t.npy"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated data"), std::string::npos) << e;
  EXPECT_NE(e.find("from byte offset 128"), std::string::npos) << e;  // header padded to 64-byte multiple
  std::string bad = good;
  bad[1] = 'X';
  e = error_of([&] { parse_npy(bad.data(), bad.size(), "m.npy"); });
  EXPECT_NE(e.find("bad magic at byte offset 0"), std::string::npos) << e;
  bad = good;
  bad[bad.find("shape") + 9] = 'x';
  e = error_of([&] { parse_npy(bad.data(), bad.size(), "h.npy"); });
  EXPECT_NE(e.find("bad header at byte offset"), std::string::npos) << e;
  e = error_of([&] { parse_npy(good.data(), 30, "short.npy"); });
  EXPECT_NE(e.find("truncated at byte offset 30"), std::string::npos) << e;
  e = error_of([&] { read_npy(temp_path("does_not_exist.npy")); });
  EXPECT_NE(e.find("does_not_exist.npy"), std::string::npos) << e;
  std::string extra = good + "zz";
  EXPECT_NE(error_of([&] { parse_npy(extra.data(), extra.size(), "x"); }).find("trailing"), std::string::npos);
}

TEST(Npy, Bf16IsRefused) {
  Tensor t = Tensor::from_doubles({1.5, -2}, {2}, DType::bf16);
  std::string e = error_of([&] { write_npy(temp_path("bf.npy"), t); });
  EXPECT_NE(e.find("bf16"), std::string::npos) << e;
  EXPECT_FALSE(std::filesystem::exists(temp_path("bf.npy")));
}

TEST(FileUtil, AtomicWriteReplacesAndLeavesNoTemp) {
  std::string p = temp_path("atomic.bin");
  write_file_atomic(p, "first");
  write_file_atomic(p, "second");
  EXPECT_EQ(read_file_bytes(p), "second");
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(p).parent_path()))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  EXPECT_THROW(write_file_atomic("/nonexistent_dir_spore/x.bin", "a"), Error);
}

}  // namespace
}  // namespace spore::io
