#pragma once
// What a service hands back to the HTTP layer: a whole body, or a stream the HTTP layer drains into a chunked
// response. Kept free of the HTTP library so services are tested without sockets.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "serve/access_log.h"

namespace spore::serve {

class ReplyStream {
 public:
  virtual ~ReplyStream() = default;
  // Appends the next piece of the body to `out`; returns false once the body is complete (`out` may still have
  // received a last piece). Blocks until there is something to send, calling `alive()` now and then: when it turns
  // false (the client left) the stream cancels its work and returns false.
  virtual bool next(std::string& out, const std::function<bool()>& alive) = 0;
  // Called exactly once when the response is over: `completed` false when the client went away or a write failed
  // (the stream then cancels what it still runs). Logs the request.
  virtual void close(bool completed) = 0;
  // The access-log fields the stream knows (id, model, tokens, timings); called after close().
  virtual void fill_log(AccessRecord& log) { (void)log; }
};

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<ReplyStream> stream;  // set: the body is streamed (chunked), `body` unused
  // Filled by the service for the access log (the HTTP layer fills method, route, status, remote, total_ms).
  AccessRecord log;
  bool logged = false;  // the stream logs itself when it closes
};

}  // namespace spore::serve
