#pragma once
// Whole-file reads and atomic writes shared by the io formats.
#include <string>
#include <string_view>

namespace spore::io {

// Reads a whole file; throws io_error naming the file.
std::string read_file_bytes(const std::string& path);
// Writes via a temp file in the same directory, fsync, rename, then fsync of the directory, so a crash
// leaves either the old file or the new one, never a torn one.
void write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace spore::io
