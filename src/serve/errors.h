#pragma once
// Errors as the server answers them: an HTTP status plus OpenAI's envelope
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "messages[2].content", "code": null}}
// Client mistakes are 4xx (never 500: OpenAI clients retry 5xx, and a request that can never succeed must not be
// retried); a full queue is 503 with Retry-After, which clients do retry.
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace spore::serve {

struct HttpError {
  int status = 500;
  std::string message;
  std::string type;   // OpenAI's error type: invalid_request_error, server_error, ...
  std::string param;  // JSON path of the offending field ("" = null)
  std::string code;   // machine-readable code ("" = null): model_not_found, context_length_exceeded, ...
  int64_t retry_after_s = 0;  // > 0: sent as Retry-After

  nlohmann::json body() const;  // the envelope
};

// Thrown by request parsing and the services; carries the status it maps to. `param` names the JSON path.
class RequestError : public std::exception {
 public:
  explicit RequestError(HttpError e) : e_(std::move(e)) {}
  const char* what() const noexcept override { return e_.message.c_str(); }
  const HttpError& error() const { return e_; }

 private:
  HttpError e_;
};

// Shorthands for the common statuses. `param` is the JSON path of the field at fault.
[[noreturn]] void bad_request(const std::string& param, const std::string& message, const std::string& code = "");
[[noreturn]] void not_found(const std::string& message, const std::string& code = "", const std::string& param = "");

// Maps whatever a handler threw: RequestError as is; spore::Error by code (invalid_argument / shape_mismatch /
// dtype_mismatch / parse_error / unsupported -> 400, not_found -> 404, unavailable -> 503, out_of_memory -> 507,
// io_error / internal -> 500); nlohmann type and parse errors -> 400; anything else -> 500.
HttpError error_from_exception(std::exception_ptr e);

// "invalid_request_error" for 4xx, "server_error" for 5xx (as OpenAI names them).
std::string error_type_for_status(int status);

}  // namespace spore::serve
