#pragma once
// NumPy .npy files (format v1/v2/v3 read, v1 or v2 written): little-endian, C order.
// Supported dtypes: f64 f32 f16 i64 i32 i8 u8 bool. bf16 has no NumPy dtype, so writing it is refused
// (convert to f32 first) rather than inventing a '<V2' that other tools would misread.
#include <string>

#include "tensor/tensor.h"

namespace spore::io {

// Reads a .npy file into a new contiguous tensor. Errors name the file and the byte offset.
Tensor read_npy(const std::string& path);
// Parses .npy bytes already in memory; `name` is used in error messages.
Tensor parse_npy(const void* data, size_t size, const std::string& name);
// Writes `t` (any strides) as .npy; the header version is 1 unless the header needs v2.
void write_npy(const std::string& path, const Tensor& t);
std::string encode_npy(const Tensor& t);

}  // namespace spore::io
