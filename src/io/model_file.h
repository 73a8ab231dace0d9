#pragma once
// Deployable model files. A model is a Graph whose weights are `constant` nodes; inputs may have
// symbolic dims. Two containers: the native `.spore` file (docs/FORMAT.md: header, text-IR graph,
// tensor index, 64-byte aligned weights used straight from mmap, checksum) and ONNX (io/onnx/onnx.h).
//
//   auto g = io::load_model("net.onnx");          // or "net.spore": chosen by the file's first bytes
//   io::save_model(*g, "net.spore");              // chosen by extension (.spore / .onnx)
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "ir/graph.h"

namespace spore::io {

// Current .spore format version; readers accept versions <= this and reject newer ones by name.
inline constexpr uint32_t spore_format_version = 1;

struct SporeFileInfo {
  uint32_t format_version = 0;
  std::string producer;                         // "spore 0.1.0"
  std::map<std::string, std::string> metadata;  // free-form key/values (precision mode, source file...)
  int64_t file_bytes = 0;
  int64_t weight_bytes = 0;
  int64_t num_tensors = 0;
};

// Writes `g` as a .spore file (atomically). Every constant's bytes go to the weights section.
void save_spore(const Graph& g, const std::string& path, const std::map<std::string, std::string>& metadata = {});
std::string encode_spore(const Graph& g, const std::map<std::string, std::string>& metadata = {});

// Reads a .spore file through mmap: constants alias the mapped weights (no copy; the mapping lives as long
// as any tensor uses it). Every malformed input (bad magic, newer version, truncation, offsets out of range
// or overlapping, checksum mismatch, unparsable graph) throws spore::Error naming what and where.
std::unique_ptr<Graph> load_spore(const std::string& path, SporeFileInfo* info = nullptr);
// Same checks on bytes in memory (copied into aligned storage); `name` is used in error messages.
std::unique_ptr<Graph> parse_spore(std::span<const uint8_t> bytes, const std::string& name, SporeFileInfo* info = nullptr);

// By content: .spore magic, an ONNX protobuf or text IR. Errors name the file. `input_dims` (optional) fixes
// input dims while importing ONNX (so shape computations on a dynamic batch import); other formats ignore it.
std::unique_ptr<Graph> load_model(const std::string& path,
                                  const std::map<std::string, std::vector<Dim>>& input_dims = {});
// By extension: .spore or .onnx.
void save_model(const Graph& g, const std::string& path, const std::map<std::string, std::string>& metadata = {});

}  // namespace spore::io
