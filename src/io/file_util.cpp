#include "io/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace spore::io {

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPORE_CHECK(in.good(), ErrorCode::io_error, "cannot open '{}' for reading: {}", path, std::strerror(errno));
  // A regular file: one read into a string of its size (a stringstream copied a 100 MB model about three times
  // while growing). Anything else (a pipe): read to the end.
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size >= 0 && in.good()) {
    in.seekg(0, std::ios::beg);
    std::string bytes(static_cast<size_t>(size), '\0');
    in.read(bytes.data(), size);
    SPORE_CHECK(!in.bad() && in.gcount() == size, ErrorCode::io_error, "error reading '{}': got {} of {} bytes", path,
                static_cast<int64_t>(in.gcount()), static_cast<int64_t>(size));
    return bytes;
  }
  in.clear();
  in.seekg(0, std::ios::beg);
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

std::shared_ptr<void> load_file(const std::string& path, size_t& size, bool use_mmap, std::string_view what) {
  const std::string w = what.empty() ? std::string() : std::string(what) + ": ";
  size = 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SPORE_CHECK(fd >= 0, ErrorCode::io_error, "{}cannot open '{}' for reading: {}", w, path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    SPORE_FAIL(ErrorCode::io_error, "{}cannot stat '{}': {}", w, path, std::strerror(err));
  }
  const auto n = static_cast<size_t>(st.st_size);
  if (n == 0) {  // nothing to map; the parsers report the truncation
    ::close(fd);
    return nullptr;
  }
  void* addr = use_mmap ? ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0)
                        : ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  const int err = errno;
  if (addr == MAP_FAILED) {
    ::close(fd);
    SPORE_FAIL(use_mmap ? ErrorCode::io_error : ErrorCode::out_of_memory, "{}cannot {} '{}' ({} bytes): {}", w,
               use_mmap ? "mmap" : "allocate memory to read", path, n, std::strerror(err));
  }
  std::shared_ptr<void> bytes(addr, [n](void* p) { ::munmap(p, n); });
  if (!use_mmap) {
#ifdef MADV_HUGEPAGE
    ::madvise(addr, n, MADV_HUGEPAGE);  // a hint: fewer TLB misses while the weights stream; failure is harmless
#endif
    auto* dst = static_cast<char*>(addr);
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::read(fd, dst + done, std::min<size_t>(n - done, size_t{1} << 30));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        const int rerr = got < 0 ? errno : 0;
        ::close(fd);
        SPORE_FAIL(ErrorCode::io_error, "{}reading '{}' failed at byte offset {} of {}: {}", w, path, done, n,
                   rerr ? std::strerror(rerr) : "unexpected end of file (the file shrank while being read)");
      }
      done += static_cast<size_t>(got);
    }
    ::mprotect(addr, n, PROT_READ);  // the weights are never written: keep it that way
  }
  ::close(fd);  // a mapping stays valid after close
  size = n;
  return bytes;
}

}  // namespace spore::io
