#pragma once
// Writes GGUF files (versions 2 and 3), for test models and converters. Keys and tensors are written in the order
// they are added; a general.alignment other than 32 is written as a u32 key automatically.
//
//   io::GgufWriter w;                                   // version 3, alignment 32
//   w.add_string("general.architecture", "llama");
//   w.add_int("llama.block_count", 2, io::GgufValueType::u32);
//   w.add_tensor("token_embd.weight", embedding, io::GgmlType::q8_0);  // f32 Tensor, quantized on the way
//   w.write("tiny.gguf");                               // atomic
#include <string>
#include <vector>

#include "io/gguf/gguf.h"

namespace spore::io {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32);

  // Any value (arrays of arrays are not supported, as by the reader). Replaces an earlier value of the same key.
  void add(const std::string& key, GgufValue value);
  void add_string(const std::string& key, std::string value);
  void add_int(const std::string& key, int64_t value, GgufValueType type = GgufValueType::i32);
  void add_float(const std::string& key, double value, GgufValueType type = GgufValueType::f32);
  void add_bool(const std::string& key, bool value);
  void add_strings(const std::string& key, std::vector<std::string> values);
  void add_ints(const std::string& key, std::vector<int64_t> values, GgufValueType elem = GgufValueType::i32);
  void add_floats(const std::string& key, std::vector<double> values, GgufValueType elem = GgufValueType::f32);

  // Raw bytes of an already-encoded tensor; `shape` is row-major (as spore's) and bytes must match type and shape.
  void add_tensor_bytes(const std::string& name, GgmlType type, std::vector<int64_t> shape, std::string bytes);
  // A float tensor (any float dtype) stored as F32, F16, BF16, Q8_0 or Q4_0.
  void add_tensor(const std::string& name, const Tensor& t, GgmlType as = GgmlType::f32);

  std::string encode() const;
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  uint32_t version_;
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Entry> tensors_;
};

// Encodes `n` floats (a multiple of the block size) as F32, F16, BF16, Q8_0 or Q4_0 with ggml's reference rules
// (Q8_0: scale max|x|/127; Q4_0: scale = the value of largest magnitude / -8). Returns the bytes.
std::string quantize_row(GgmlType t, const float* src, int64_t n);

}  // namespace spore::io
