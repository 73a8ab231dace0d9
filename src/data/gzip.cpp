// gzip via zlib's inflate (multi-member streams, as gzip(1) writes them for concatenated files).
#include "data/gzip.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace spore::data {

bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

std::string gunzip(std::string_view bytes, const std::string& name) {
  std::string out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    z_stream zs{};
    SPORE_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, ErrorCode::internal, "gzip '{}': zlib init failed", name);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + pos));
    zs.avail_in = static_cast<uInt>(std::min<size_t>(bytes.size() - pos, UINT32_MAX));
    char buf[1 << 16];
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      zs.next_out = reinterpret_cast<Bytef*>(buf);
      zs.avail_out = sizeof(buf);
      rc = inflate(&zs, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        const size_t at = pos + zs.total_in;
        const std::string why = zs.msg ? zs.msg : (rc == Z_BUF_ERROR ? "truncated stream" : "corrupt stream");
        inflateEnd(&zs);
        SPORE_FAIL(ErrorCode::parse_error, "gzip '{}': {} at compressed byte offset {}", name, why, at);
      }
      out.append(buf, sizeof(buf) - zs.avail_out);
    }
    pos += zs.total_in;
    inflateEnd(&zs);
    if (pos < bytes.size() && !is_gzip(bytes.substr(pos))) break;  // trailing padding after the last member
  }
  return out;
}

std::string read_maybe_gzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPORE_CHECK(in.good(), ErrorCode::io_error, "cannot open '{}' for reading: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string bytes = std::move(ss).str();
  return is_gzip(bytes) ? gunzip(bytes, path) : bytes;
}

}  // namespace spore::data
