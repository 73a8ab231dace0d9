#pragma once
// Helpers shared by the unit tests: a per-process temp directory, error-message capture, and the
// shared-data rule (a test needing ../shared/data SKIPS when it is absent, but FAILS when CI=true).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "base/error.h"

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

// The repository root, from this header's own path.
inline std::string repo_root() {
  std::string root = std::filesystem::path(__FILE__).parent_path().parent_path().string();
  return root.empty() ? "." : root;
}

}  // namespace spore::testing

// Declares `var` = the shared data subdirectory `sub`; skips the test if it is missing (fails under CI=true).
#define SPORE_SHARED_DATA_DIR(var, sub)                                                             \
  const std::string var = ::spore::testing::shared_data_dir(sub);                                  \
  if (!std::filesystem::is_directory(var)) {                                                        \
    if (::spore::testing::running_in_ci()) FAIL() << "shared data dir missing under CI=true: '" << var << "'"; \
    GTEST_SKIP() << "shared data dir missing: '" << var << "'";                                     \
  }
