#include "data/gzip.h"

#include <gtest/gtest.h>

#include "test_util.h"

#include <algorithm>
#include <filesystem>

#include "base/error.h"

namespace spore::data {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int v : b) s.push_back(static_cast<char>(v));
  return s;
}

// Made with Python: gzip.compress(b'hello hello hello hello, spore!', 9, mtime=0) (fixed Huffman block).
const std::string kFixed =
    bytes({0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0x57, 0xc8, 0x40,
           0x27, 0x75, 0x14, 0x8a, 0x0b, 0xf2, 0x8b, 0x52, 0x15, 0x01, 0x4a, 0x7a, 0x9e, 0x69, 0x1f, 0x00, 0x00, 0x00});
// gzip.compress(b'abc', 0, mtime=0) (stored block).
const std::string kStored = bytes({0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x03, 0x01, 0x03, 0x00,
                                   0xfc, 0xff, 0x61, 0x62, 0x63, 0xc2, 0x41, 0x24, 0x35, 0x03, 0x00, 0x00, 0x00});

TEST(Gzip, FixedHuffmanBlock) {
  EXPECT_TRUE(is_gzip(kFixed));
  EXPECT_EQ(gunzip(kFixed, "mem"), "hello hello hello hello, spore!");
}

TEST(Gzip, StoredBlockAndConcatenatedMembers) {
  EXPECT_EQ(gunzip(kStored, "mem"), "abc");
  EXPECT_EQ(gunzip(kStored + kFixed, "mem"), "abchello hello hello hello, spore!");
}

// The repository root, from this file's path (tests/data/gzip_test.cpp).
using testing::repo_root;

TEST(Gzip, DynamicBlocksFromBundledDigits) {
  std::string text = read_maybe_gzip(repo_root() + "/data/digits.csv.gz");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1797);
  EXPECT_EQ(text.substr(0, 8), "0,0,5,13");
}

TEST(Gzip, CorruptDataFailsWithOffset) {
  std::string bad = kFixed;
  bad[20] ^= 0x55;
  try {
    gunzip(bad, "bad.gz");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.gz"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gunzip(kFixed.substr(0, 25), "trunc.gz"), Error);
  std::string magic = kFixed;
  magic[1] = 0;
  EXPECT_THROW(gunzip(magic, "magic.gz"), Error);
}

}  // namespace
}  // namespace spore::data
