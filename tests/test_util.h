#pragma once
// Helpers shared by the unit tests: a per-process temp directory, error-message capture, and the
// shared-data rule (a test needing ../shared/data SKIPS when it is absent, but FAILS when CI=true).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "base/error.h"
#include "tensor/tensor.h"

namespace spore::testing {

// A directory unique to this process and `tag`, removed at exit.
inline std::filesystem::path temp_dir(const std::string& tag) {
  struct Dir {
    std::filesystem::path path;
    explicit Dir(std::filesystem::path p) : path(std::move(p)) { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir(std::filesystem::temp_directory_path() / ("spore_test_" + tag + "_" + std::to_string(::getpid())));
  return dir.path;
}

// The message of the spore::Error that fn throws, or "" if it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline std::string shared_data_dir(const std::string& sub) {
  const char* env = std::getenv("SPORE_SHARED_DATA");
  return env ? std::string(env) + "/" + sub : std::string("$SPORE_SHARED_DATA/") + sub;
}
inline bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

// A tensor of any dtype with a fixed, never-all-zero pattern (varied by `salt`), for I/O round trips.
inline Tensor patterned_tensor(Shape shape, DType dtype, int salt) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = static_cast<double>((i * 2654435761u + static_cast<size_t>(salt) * 97) % 251) - 100;
    v[i] = dtype == DType::boolean ? (x > 0) : dtype == DType::u8 ? x + 100 : is_floating(dtype) ? x / 8 : x;
  }
  return Tensor::from_doubles(v, shape, dtype);
}

// The repository root: the source directory CMake configured (tests/CMakeLists.txt, compiled into test_main.cpp
// only), not __FILE__, which is relative when ccache rewrites paths (CCACHE_BASEDIR).
const char* source_dir();
inline std::string repo_root() { return source_dir(); }

}  // namespace spore::testing

// Declares `var` = the shared data subdirectory `sub`; skips the test if it is missing (fails under CI=true).
#define SPORE_SHARED_DATA_DIR(var, sub)                                                             \
  const std::string var = ::spore::testing::shared_data_dir(sub);                                  \
  if (!std::filesystem::is_directory(var)) {                                                        \
    if (::spore::testing::running_in_ci()) FAIL() << "shared data dir missing under CI=true: '" << var << "'"; \
    GTEST_SKIP() << "shared data dir missing: '" << var << "'";                                     \
  }
