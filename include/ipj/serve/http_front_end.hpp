// The HTTP/1.1 front end of `ipj serve`: an event-driven server (Boost.Beast/Asio, a few IO threads) with a
// bounded number of connections, in all and per client address (the excess is answered 503 and closed at
// once), header / body / idle / write deadlines that slow, trickling or silent clients cannot extend,
// keep-alive, pipelined requests answered in order, and a drain that closes idle connections at once and
// answers 503 to what is still unanswered at its deadline. Handlers run on IO threads and must not block:
// they answer through HttpReply from any thread (e.g. a batcher worker). Beast types stay out of this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ipj::serve {

struct HttpLimits {
  int max_connections = 1024;  // open connections; more are answered 503 + close
  // Open connections from one client IP address; more from it are answered 503 + close. 0 = max_connections /
  // 8 but at least 8; above max_connections it is max_connections.
  int max_connections_per_client = 0;
  double header_timeout_s = 10.0;  // a request's first byte (a new connection: its accept) -> end of headers
  double body_timeout_s = 60.0;    // the end of the headers -> the end of the body
  double idle_timeout_s = 30.0;    // keep-alive: the end of a response -> the next request's first byte
  double write_timeout_s = 30.0;   // one response, written to a client that must read it
  std::size_t max_header_bytes = 16 << 10;  // request line + headers (431 above)
  std::size_t max_body_bytes = 64 << 20;    // request body (413 above)
  int io_threads = 2;
};

// Throws ipj::Error(usage) naming the flag behind each limit that is out of range (NaN included).
void validate(const HttpLimits& limits);

enum class HttpMethod { get, post, other };

struct HttpRequest {
  HttpMethod method = HttpMethod::other;
  std::string target;  // path and query as sent
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // The value of a header (case-insensitive name), or null.
  const std::string* header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

// The answer channel of one request: use it exactly once, from any thread.
class HttpReply {
 public:
  using Builder = std::function<HttpResponse()>;
  explicit HttpReply(std::function<void(Builder)> deliver) : deliver_(std::move(deliver)) {}
  // Sends `response`.
  void operator()(HttpResponse response) const {
    deliver_([response = std::move(response)]() mutable { return std::move(response); });
  }
  // Runs `build` on the connection's IO thread and sends what it returns (keeps encoding off the caller's
  // thread, e.g. a batcher worker); an exception from `build` becomes a 500.
  void build_on_io_thread(Builder build) const { deliver_(std::move(build)); }

 private:
  std::function<void(Builder)> deliver_;
};
using HttpHandler = std::function<void(HttpRequest&& request, const HttpReply& reply)>;

struct HttpCounters {
  std::int64_t open_connections = 0;
  std::int64_t accepted_total = 0;
  std::int64_t refused_total = 0;             // over max_connections
  std::int64_t refused_per_client_total = 0;  // over max_connections_per_client
  std::int64_t timeouts_total = 0;            // connections closed by a header / body / idle / write deadline
  std::int64_t in_flight = 0;                 // requests read and not yet answered
};

class HttpFrontEnd {
 public:
  HttpFrontEnd(HttpLimits limits, HttpHandler handler);
  ~HttpFrontEnd();
  HttpFrontEnd(const HttpFrontEnd&) = delete;
  HttpFrontEnd& operator=(const HttpFrontEnd&) = delete;

  // Binds and listens (SO_REUSEADDR, never SO_REUSEPORT): a port in use throws ipj::Error(io) naming it;
  // a port outside 0..65535 throws Error(usage). Returns the bound port (0 picks a free one).
  int bind(const std::string& host, int port);
  // Accepts and serves on io_threads threads (the caller's among them) until drain() or stop().
  void run();
  // Stops accepting, closes idle and half-read connections at once, lets in-flight requests finish for at
  // most `seconds`, answers those still unanswered then 503 + Retry-After (the answer written within 2 s at
  // most), then stops run(). Thread-safe; a no-op before run() starts serving.
  void drain(double seconds);
  // Stops at once (in-flight requests are dropped). Thread-safe.
  void stop();
  HttpCounters counters() const;
  // The per-client bound in force (max_connections_per_client resolved).
  int max_connections_per_client() const;

  struct Impl;  // defined in src/serve/http_internal.hpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ipj::serve
