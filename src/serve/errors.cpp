#include "serve/errors.h"

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace spore::serve {

nlohmann::json HttpError::body() const {
  nlohmann::json err = {{"message", message},
                        {"type", type.empty() ? error_type_for_status(status) : type},
                        {"param", nullptr},
                        {"code", nullptr}};
  if (!param.empty()) err["param"] = param;
  if (!code.empty()) err["code"] = code;
  return nlohmann::json{{"error", std::move(err)}};
}

std::string error_type_for_status(int status) { return status < 500 ? "invalid_request_error" : "server_error"; }

void bad_request(const std::string& param, const std::string& message, const std::string& code) {
  HttpError e;
  e.status = 400;
  e.param = param;
  e.message = param.empty() ? message : param + ": " + message;
  e.code = code;
  throw RequestError(std::move(e));
}

void not_found(const std::string& message, const std::string& code, const std::string& param) {
  HttpError e;
  e.status = 404;
  e.message = message;
  e.code = code;
  e.param = param;
  throw RequestError(std::move(e));
}

HttpError error_from_exception(std::exception_ptr ep) {
  HttpError e;
  try {
    std::rethrow_exception(ep);
  } catch (const RequestError& r) {
    e = r.error();
  } catch (const Error& err) {
    e.message = err.message();
    switch (err.code()) {
      case ErrorCode::invalid_argument:
      case ErrorCode::shape_mismatch:
      case ErrorCode::dtype_mismatch:
      case ErrorCode::parse_error:
      case ErrorCode::unsupported: e.status = 400; break;
      case ErrorCode::not_found: e.status = 404; break;
      case ErrorCode::unavailable:
        e.status = 503;
        e.code = "server_overloaded";
        e.retry_after_s = 1;
        break;
      case ErrorCode::out_of_memory:
        e.status = 507;
        e.code = "insufficient_storage";
        break;
      case ErrorCode::io_error:
      case ErrorCode::internal: e.status = 500; break;
    }
  } catch (const nlohmann::json::exception& j) {
    // type_error / out_of_range / parse_error from reading a request body: the client sent something malformed.
    e.status = 400;
    e.message = std::string("malformed request: ") + j.what();
  } catch (const std::bad_alloc&) {
    e.status = 507;
    e.message = "out of memory while handling the request";
    e.code = "insufficient_storage";
  } catch (const std::exception& x) {
    e.status = 500;
    e.message = std::string("internal error: ") + x.what();
  } catch (...) {
    e.status = 500;
    e.message = "internal error";
  }
  if (e.type.empty()) e.type = error_type_for_status(e.status);
  return e;
}

}  // namespace spore::serve
