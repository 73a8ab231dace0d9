#include "io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace spore::io {

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPORE_CHECK(in.good(), ErrorCode::io_error, "cannot open '{}' for reading: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  SPORE_CHECK(!in.bad(), ErrorCode::io_error, "error reading '{}'", path);
  return std::move(ss).str();
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  std::string dir = ".";
  if (auto slash = path.rfind('/'); slash != std::string::npos) dir = slash == 0 ? "/" : path.substr(0, slash);
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  SPORE_CHECK(fd >= 0, ErrorCode::io_error, "cannot create temp file for '{}': {}", path, std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      SPORE_FAIL(ErrorCode::io_error, "error writing '{}': {}", tmp, std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  // mkstemp creates 0600; give the file the usual permissions.
  ::fchmod(fd, 0644);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    SPORE_FAIL(ErrorCode::io_error, "error flushing '{}': {}", tmp, std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    SPORE_FAIL(ErrorCode::io_error, "cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err));
  }
  // Persist the rename itself; failure here is not fatal for correctness of the content.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace spore::io
