#include "base/error.h"

namespace spore {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::shape_mismatch: return "shape_mismatch";
    case ErrorCode::dtype_mismatch: return "dtype_mismatch";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::parse_error: return "parse_error";
    case ErrorCode::io_error: return "io_error";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::unavailable: return "unavailable";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

void throw_error(ErrorCode code, std::string message) { throw Error(code, std::move(message)); }

void throw_internal(const char* file, int line, std::string message) {
  throw Error(ErrorCode::internal, fmt::format("internal error at {}:{}: {}", file, line, message));
}

}  // namespace spore
