#pragma once
// gzip decompression (zlib) for dataset files such as MNIST's .gz distribution.
#include <string>
#include <string_view>

namespace spore::data {

bool is_gzip(std::string_view bytes);
// Decompresses every gzip member in `bytes`; errors name `name` and the compressed byte offset.
std::string gunzip(std::string_view bytes, const std::string& name);
// Reads a file, transparently decompressing it when it starts with the gzip magic.
std::string read_maybe_gzip(const std::string& path);

}  // namespace spore::data
