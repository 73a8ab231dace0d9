#pragma once
// One JSON line per request on stderr (or any FILE*), written whole under a mutex so lines from concurrent requests
// never interleave:
//   {"ts":"2025-01-01T12:00:00.123Z","id":"chatcmpl-1a2b","method":"POST","route":"/v1/chat/completions",
//    "model":"tiny","status":200,"prompt_tokens":12,"completion_tokens":16,"cached_tokens":0,"queue_ms":0.4,
//    "ttft_ms":12.1,"total_ms":80.3,"finish_reason":"stop","remote":"127.0.0.1"}
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace spore::serve {

struct AccessRecord {
  std::string id, method, route, model, remote, finish_reason, error;
  int status = 0;
  int64_t prompt_tokens = -1, completion_tokens = -1, cached_tokens = -1;  // -1: not an LLM request (left out)
  double queue_ms = -1, ttft_ms = -1, total_ms = 0;                          // -1: not measured (left out)
};

nlohmann::ordered_json access_json(const AccessRecord& r);  // keys in the order above

class AccessLog {
 public:
  explicit AccessLog(FILE* out = stderr, bool enabled = true) : out_(out), enabled_(enabled) {}
  void write(const AccessRecord& r);

 private:
  FILE* out_;
  bool enabled_;
  std::mutex mu_;
};

}  // namespace spore::serve
