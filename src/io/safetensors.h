#pragma once
// safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the
// bytes. Dtypes: F64 F32 F16 BF16 I64 I32 I8 U8 BOOL. Writes are atomic (temp file, fsync, rename).
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace spore::io {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
  std::vector<std::string> skipped;  // tensors of dtypes spore lacks (I16, U32...) when skip_unsupported
};

// Reads every tensor. Offsets are validated (in range, size matching shape and dtype, no overlaps or
// holes) and errors name the file, the tensor and the offset. With skip_unsupported, tensors of
// dtypes spore has no equivalent for are listed in `skipped` instead of failing the whole read.
SafetensorsFile read_safetensors(const std::string& path, bool skip_unsupported = false);
SafetensorsFile parse_safetensors(const void* data, size_t size, const std::string& name,
                                  bool skip_unsupported = false);
// Like read_safetensors, but the file is mmap'd read-only and the tensors alias the mapping (no copy; a tensor
// whose data is misaligned for its dtype is copied). The mapping lives as long as any of the tensors. Do not write
// to them. use_mmap = false: the bytes are read into anonymous memory instead (io::load_file), same aliasing.
SafetensorsFile map_safetensors(const std::string& path, bool skip_unsupported = false, bool use_mmap = true);

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
std::string encode_safetensors(const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Copies the file's tensors into the existing `params` (in place, so views held elsewhere see the new
// values). Every missing, extra, wrongly-shaped or wrongly-typed tensor is named in one error.
void load_into(std::map<std::string, Tensor>& params, const std::string& path);

}  // namespace spore::io
