#pragma once
// GGUF files (llama.cpp's model format, versions 2 and 3): a header, typed key/value metadata, tensor infos, then
// the tensor data at `general.alignment` (default 32). The file is mmap'd read-only and tensors alias the mapping
// (no copy); the mapping lives as long as any Tensor or GgufFile that uses it.
//
//   auto f = io::GgufFile::open("model.gguf");
//   std::string arch = f.get_string("general.architecture");
//   const io::GgufTensorInfo& t = f.tensor("blk.0.attn_q.weight");   // error names a missing tensor
//   Tensor w = f.dequantize_f32("token_embd.weight");                  // any supported type -> f32, row-major
//
// Shapes: GGUF lists dims fastest-first (ne[0] = columns); `shape` here is row-major (reversed), as spore's.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace spore::io {

// ggml tensor types (values as in the file).
enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_k = 10, q3_k = 11, q4_k = 12, q5_k = 13, q6_k = 14, q8_k = 15, i8 = 24, i16 = 25, i32 = 26, i64 = 27,
  f64 = 28, bf16 = 30,
};
std::string_view ggml_type_name(GgmlType t);  // "Q8_0"; "type 99" for unknown values
// Elements per block and bytes per block (f32: 1 and 4; q8_0: 32 and 34). nullopt for types spore cannot read.
std::optional<std::pair<int64_t, int64_t>> ggml_block_layout(GgmlType t);

enum class GgufValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9, u64 = 10,
  i64 = 11, f64 = 12,
};

// One metadata value. Scalars fill `i` (all integer types and bool), `f` or `s`; arrays fill the vector that matches
// their element type (`ints`, `floats` or `strings`); arrays of arrays are rejected at load.
struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  GgufValueType elem_type = GgufValueType::u8;  // arrays only
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::f32;
  std::vector<int64_t> shape;  // row-major (reversed from the file's ne[])
  uint64_t offset = 0;         // from the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping
};

class GgufFile {
 public:
  // mmaps and parses; every error names the file, the byte offset and the key / tensor involved (truncated file,
  // bad magic, unsupported version, string or array length past the end, duplicate key or tensor, tensor data out
  // of range or misaligned, unknown tensor type). use_mmap = false reads the file into anonymous memory instead
  // (io::load_file).
  static GgufFile open(const std::string& path, bool use_mmap = true);
  // Parses bytes that the caller keeps alive (tests, fuzzing); `name` is used in errors.
  static GgufFile parse(const void* data, size_t size, const std::string& name);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::string& path() const { return path_; }

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  const GgufValue* find(const std::string& key) const;
  // Typed getters: a missing key or wrong type is an error naming the key; the *_or forms return `def` when missing.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // accepts integer values too
  const std::vector<std::string>& get_strings(const std::string& key) const;
  const std::vector<int64_t>& get_ints(const std::string& key) const;
  const std::vector<double>& get_floats(const std::string& key) const;
  std::string get_string_or(const std::string& key, std::string def) const;
  int64_t get_int_or(const std::string& key, int64_t def) const;
  double get_float_or(const std::string& key, double def) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  const GgufTensorInfo& tensor(const std::string& name) const;  // error names the tensor and the file
  // The tensor, checked against a row-major `shape` (error names the tensor, its shape and the expected one).
  const GgufTensorInfo& tensor(const std::string& name, const std::vector<int64_t>& shape) const;

  // F32 / F16 / BF16 (and I8/I32/I64/F64) tensors as spore Tensors aliasing the mapping (read-only: do not write).
  // Quantized types are an error naming the tensor and its type (use dequantize_f32 or the raw bytes).
  Tensor view(const std::string& name) const;
  // Any supported type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K) converted to a new f32 Tensor.
  Tensor dequantize_f32(const std::string& name) const;

 private:
  std::shared_ptr<void> mapping_;  // keeps the mmap alive
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Dequantizes `n` elements (a multiple of the block size) of type `t` from `src` into `dst`. The reference for the
// quantized kernels.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace spore::io
