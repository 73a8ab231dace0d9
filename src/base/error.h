#pragma once
// Errors: every failure a user can cause is a spore::Error with a code and a message that names the
// thing (node, tensor, file offset). Internal invariants use SPORE_ASSERT, which also throws (never
// aborts), so a bug in one request cannot take down a server process.
#include <exception>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace spore {

enum class ErrorCode {
  invalid_argument,
  shape_mismatch,
  dtype_mismatch,
  unsupported,
  out_of_memory,
  parse_error,
  io_error,
  not_found,
  unavailable,  // the service cannot take it now (a full queue, shutting down): retry later
  internal,
};

std::string_view error_code_name(ErrorCode code);

class Error : public std::exception {
 public:
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  ErrorCode code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

[[noreturn]] void throw_error(ErrorCode code, std::string message);
[[noreturn]] void throw_internal(const char* file, int line, std::string message);

}  // namespace spore

// User-reachable check: SPORE_CHECK(ok, ErrorCode::shape_mismatch, "[matmul] K mismatch: {} vs {}", a, b)
#define SPORE_CHECK(cond, code, ...)                                   \
  do {                                                                 \
    if (!(cond)) [[unlikely]]                                          \
      ::spore::throw_error((code), ::fmt::format(__VA_ARGS__));        \
  } while (0)

#define SPORE_FAIL(code, ...) ::spore::throw_error((code), ::fmt::format(__VA_ARGS__))

// Internal invariant; stays on in release builds (cheap checks only).
#define SPORE_ASSERT(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::spore::throw_internal(__FILE__, __LINE__, "assertion '" #cond "' failed: " +     \
                                                      ::fmt::format(__VA_ARGS__));       \
  } while (0)
