#include "serve/access_log.h"

#include <chrono>
#include <cmath>
#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>


namespace spore::serve {

namespace {
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(ms));
}
double round3(double v) { return std::round(v * 1000.0) / 1000.0; }
}  // namespace

nlohmann::ordered_json access_json(const AccessRecord& r) {
  nlohmann::ordered_json j;
  j["ts"] = utc_now();
  j["id"] = r.id;
  j["method"] = r.method;
  j["route"] = r.route;
  if (!r.model.empty()) j["model"] = r.model;
  j["status"] = r.status;
  if (r.prompt_tokens >= 0) j["prompt_tokens"] = r.prompt_tokens;
  if (r.completion_tokens >= 0) j["completion_tokens"] = r.completion_tokens;
  if (r.cached_tokens >= 0) j["cached_tokens"] = r.cached_tokens;
  if (r.queue_ms >= 0) j["queue_ms"] = round3(r.queue_ms);
  if (r.ttft_ms >= 0) j["ttft_ms"] = round3(r.ttft_ms);
  j["total_ms"] = round3(r.total_ms);
  if (!r.finish_reason.empty()) j["finish_reason"] = r.finish_reason;
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.remote.empty()) j["remote"] = r.remote;
  return j;
}

void AccessLog::write(const AccessRecord& r) {
  if (!enabled_) return;
  const std::string line =
      access_json(r).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace spore::serve
