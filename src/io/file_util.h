#pragma once
// Whole-file reads and atomic writes shared by the io formats.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace spore::io {

// Reads a whole file; throws io_error naming the file.
std::string read_file_bytes(const std::string& path);
// Writes via a temp file in the same directory, fsync, rename, then fsync of the directory, so a crash
// leaves either the old file or the new one, never a torn one.
void write_file_atomic(const std::string& path, std::string_view bytes);

// A whole file's bytes, read-only, for the model readers (GGUF, safetensors). use_mmap: a private read-only mapping
// (no copy; pages come from the page cache). Otherwise the bytes are read into anonymous memory (2 MB pages where
// the kernel gives them) made read-only afterwards: one copy at load, but page-cache management (reclaim, access
// sampling) never touches the weights while they run. Sets `size`; an empty file gives nullptr and size 0. Errors
// (io_error) name the file, and for a short read the byte offset. `what` prefixes the messages ("gguf").
std::shared_ptr<void> load_file(const std::string& path, size_t& size, bool use_mmap, std::string_view what);

}  // namespace spore::io
