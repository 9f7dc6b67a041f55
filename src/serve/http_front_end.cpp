// The Beast front end's server side: limits validation, bind (SO_REUSEADDR only), the accept loop with the
// connection bounds (in all and per client address) and their fast 503 refusal, the IO threads, drain (503 to
// what is unanswered at its deadline) and stop.
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "http_internal.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"

namespace ipj::serve {
namespace {

// 0.3 -> "0.3", 10 -> "10": seconds as a user typed them.
std::string format_seconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

void check_seconds(double value, const char* flag) {
  if (!std::isfinite(value) || value <= 0.0 || value > 86400.0)
    fail(ErrorCategory::usage,
         std::string(flag) + " must be a number of seconds in (0, 86400], got " + std::to_string(value));
}

std::string refusal_answer(const std::string& message) {
  const std::string body = Json{{"error", message}}.dump();
  return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
         "Connection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The per-client bound in force: 0 = max_connections / 8 but at least 8, never above max_connections.
int resolve_per_client(const HttpLimits& limits) {
  const int wanted = limits.max_connections_per_client > 0 ? limits.max_connections_per_client
                                                           : std::max(8, limits.max_connections / 8);
  return std::min(wanted, limits.max_connections);
}

// Answers one connection over a limit with a fixed 503 and closes it: no parsing, a 2 s bound on all of it.
class Refusal : public std::enable_shared_from_this<Refusal> {
 public:
  Refusal(HttpFrontEnd::Impl& server, tcp::socket socket, const std::string& answer)
      : server_(server), stream_(std::move(socket)), answer_(answer) {
    server_.refusing += 1;
  }
  ~Refusal() { server_.refusing -= 1; }
  void start() {
    stream_.expires_after(std::chrono::seconds(2));
    asio::async_write(stream_, asio::buffer(answer_),
                      [self = shared_from_this()](boost::system::error_code error, std::size_t) {
                        if (error) return self->close();
                        boost::system::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                        self->discard();
                      });
  }

 private:
  void discard() {  // until the client closes: it then reads the 503 instead of a reset
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](boost::system::error_code error, std::size_t) {
                              if (error) return self->close();
                              self->discard();
                            });
  }
  void close() { stream_.close(); }

  HttpFrontEnd::Impl& server_;
  beast::tcp_stream stream_;
  const std::string& answer_;  // one of the server's fixed refusals
  char scratch_[2048];
};

}  // namespace

void validate(const HttpLimits& limits) {
  if (limits.max_connections < 1 || limits.max_connections > 1000000)
    fail(ErrorCategory::usage,
         "--max-connections must be in [1, 1000000], got " + std::to_string(limits.max_connections));
  if (limits.max_connections_per_client < 0 || limits.max_connections_per_client > 1000000)
    fail(
        ErrorCategory::usage,
        "--max-connections-per-client must be in [0, 1000000] (0 = --max-connections / 8, at least 8), got " +
            std::to_string(limits.max_connections_per_client));
  if (limits.io_threads < 1 || limits.io_threads > 64)
    fail(ErrorCategory::usage, "--io-threads must be in [1, 64], got " + std::to_string(limits.io_threads));
  check_seconds(limits.header_timeout_s, "--header-timeout-s");
  check_seconds(limits.body_timeout_s, "--body-timeout-s");
  check_seconds(limits.idle_timeout_s, "--idle-timeout-s");
  check_seconds(limits.write_timeout_s, "--write-timeout-s");
  if (limits.max_body_bytes < 1 || limits.max_body_bytes > (std::size_t{1} << 32))
    fail(ErrorCategory::usage, "--max-body-bytes must be in [1, 4 GiB]");
  if (limits.max_header_bytes < 1024 || limits.max_header_bytes > (1 << 20))
    fail(ErrorCategory::usage, "the header limit must be in [1 KiB, 1 MiB]");
}

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (beast::iequals(key, name)) return &value;
  return nullptr;
}

HttpFrontEnd::Impl::Impl(HttpLimits limits_in, HttpHandler handler_in)
    : limits(limits_in), handler(std::move(handler_in)) {
  work.emplace(io.get_executor());
  refusal = refusal_answer("too many connections (--max-connections " +
                           std::to_string(limits.max_connections) + "); retry later");
  per_client_limit = resolve_per_client(limits);
  per_client_refusal =
      refusal_answer("too many connections from your address (--max-connections-per-client " +
                     std::to_string(per_client_limit) + "); close idle ones or retry later");
}

bool HttpFrontEnd::Impl::admit_client(const asio::ip::address& client) {
  std::lock_guard<std::mutex> lock(clients_mutex);
  int& count = clients[client];
  if (count >= per_client_limit) {
    if (count == 0) clients.erase(client);
    return false;
  }
  count += 1;
  return true;
}

void HttpFrontEnd::Impl::release_client(const asio::ip::address& client) {
  std::lock_guard<std::mutex> lock(clients_mutex);
  const auto found = clients.find(client);
  if (found != clients.end() && --found->second <= 0) clients.erase(found);
}

std::list<std::weak_ptr<HttpConnection>>::iterator HttpFrontEnd::Impl::enroll(
    const std::shared_ptr<HttpConnection>& connection) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  return registry.insert(registry.end(), connection);
}

void HttpFrontEnd::Impl::leave(std::list<std::weak_ptr<HttpConnection>>::iterator entry) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry.erase(entry);
}

void HttpFrontEnd::Impl::accept_next() {
  acceptor.async_accept(asio::make_strand(io), [this](boost::system::error_code error, tcp::socket socket) {
    on_accept(error, std::move(socket));
  });
}

void HttpFrontEnd::Impl::on_accept(const boost::system::error_code& error, tcp::socket socket) {
  if (error == asio::error::operation_aborted || !acceptor.is_open()) return;
  if (error) {  // e.g. out of file descriptors: retry shortly instead of spinning
    spdlog::warn("accept failed: {}; retrying in 100 ms", error.message());
    accept_retry.expires_after(std::chrono::milliseconds(100));
    accept_retry.async_wait([this](boost::system::error_code wait_error) {
      if (!wait_error && acceptor.is_open()) accept_next();
    });
    return;
  }
  accepted += 1;
  boost::system::error_code peer_error;
  const tcp::endpoint peer = socket.remote_endpoint(peer_error);
  if (draining || peer_error) {  // draining, or the client already left
    boost::system::error_code ignored;
    socket.close(ignored);
  } else if (open.load() >= limits.max_connections) {
    refused += 1;
    refuse(std::move(socket), refusal);
  } else if (!admit_client(peer.address())) {
    refused_per_client += 1;
    refuse(std::move(socket), per_client_refusal);
  } else {
    std::make_shared<HttpConnection>(*this, std::move(socket), peer.address())->start();
  }
  accept_next();
}

void HttpFrontEnd::Impl::refuse(tcp::socket socket, const std::string& answer) {
  if (refusing.load() >= 256) {  // a flood: do not even answer
    boost::system::error_code ignored;
    socket.close(ignored);
    return;
  }
  std::make_shared<Refusal>(*this, std::move(socket), answer)->start();
}

HttpFrontEnd::HttpFrontEnd(HttpLimits limits, HttpHandler handler) {
  validate(limits);
  impl_ = std::make_unique<Impl>(limits, std::move(handler));
}

HttpFrontEnd::~HttpFrontEnd() {
  stop();
}

int HttpFrontEnd::bind(const std::string& host, int port) {
  if (port < 0 || port > 65535)
    fail(ErrorCategory::usage,
         "--port " + std::to_string(port) + " is not a TCP port (0..65535; 0 = any free port)");
  boost::system::error_code error;
  asio::ip::address address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, error);
  if (error)
    fail(ErrorCategory::usage, "--host '" + host + "' is not an IP address (e.g. 127.0.0.1, 0.0.0.0 or ::)");
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  const std::string where = host + ":" + std::to_string(port);
  tcp::acceptor& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), error);
  // SO_REUSEADDR only lets a port in TIME_WAIT be reused; without SO_REUSEPORT a second listener fails.
  if (!error) acceptor.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    if (error == asio::error::address_in_use)
      fail(ErrorCategory::io, "cannot listen on " + where + ": port " + std::to_string(port) +
                                  " is already in use (another server?); stop it or pick another --port");
    fail(ErrorCategory::io,
         "cannot listen on " + where + ": " + error.message() + " (check --host and --port)");
  }
  // Each connection holds a descriptor: make sure max_connections of them fit (raising the soft limit).
  rlimit files{};
  const rlim_t needed = static_cast<rlim_t>(impl_->limits.max_connections) + 300;  // + refusals, models, logs
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < needed) {
    files.rlim_cur = std::min(needed, files.rlim_max);
    setrlimit(RLIMIT_NOFILE, &files);
    if (files.rlim_cur < needed) {
      const int fitting = static_cast<int>(files.rlim_cur > 364 ? files.rlim_cur - 300 : 64);
      spdlog::warn("--max-connections {} lowered to {}: the file descriptor limit is {} (ulimit -n)",
                   impl_->limits.max_connections, fitting, files.rlim_cur);
      impl_->limits.max_connections = fitting;
      impl_->per_client_limit = std::min(impl_->per_client_limit, fitting);
    }
  }
  return acceptor.local_endpoint().port();
}

void HttpFrontEnd::run() {
  Impl& impl = *impl_;
  {
    std::lock_guard<std::mutex> lock(impl.lifecycle_mutex);
    if (impl.stopped || !impl.acceptor.is_open()) return;
    impl.running = true;
  }
  asio::post(impl.accept_strand, [&impl] { impl.accept_next(); });
  auto run_loop = [&impl] {
    for (;;) {
      try {
        impl.io.run();
        return;
      } catch (const std::exception& error) {  // a handler threw (e.g. bad_alloc): log, keep serving
        spdlog::error("HTTP front end: {}", error.what());
      }
    }
  };
  std::vector<std::thread> threads;
  for (int index = 1; index < impl.limits.io_threads; ++index)
    threads.emplace_back(run_loop);
  run_loop();
  for (std::thread& thread : threads)
    thread.join();
}

void HttpFrontEnd::drain(double seconds) {
  Impl& impl = *impl_;
  {
    std::lock_guard<std::mutex> lock(impl.lifecycle_mutex);
    impl.draining = true;
    if (!impl.running) {
      impl.stopped = true;  // run() will return at once
      return;
    }
  }
  asio::post(impl.accept_strand, [&impl] {
    boost::system::error_code ignored;
    impl.acceptor.close(ignored);
    impl.accept_retry.cancel();
  });
  std::vector<std::shared_ptr<HttpConnection>> connections;
  {
    std::lock_guard<std::mutex> lock(impl.registry_mutex);
    for (const auto& entry : impl.registry)
      if (auto connection = entry.lock()) connections.push_back(std::move(connection));
  }
  for (const auto& connection : connections)
    connection->post_close_if_idle();
  connections.clear();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (impl.in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (impl.in_flight.load() > 0) impl.abandon_in_flight(seconds);
  stop();
}

void HttpFrontEnd::Impl::abandon_in_flight(double seconds) {
  Impl& impl = *this;
  spdlog::warn("drain: {} request(s) still unanswered after --drain-s {}; answering them 503",
               impl.in_flight.load(), seconds);
  auto answer = std::make_shared<HttpResponse>();
  answer->status = 503;
  answer->body = Json{{"error",
                       "the server is shutting down and could not answer this request within "
                       "--drain-s " +
                           format_seconds(seconds) + " s; retry (another replica)"}}
                     .dump();
  answer->headers.emplace_back("Retry-After", "1");
  std::vector<std::shared_ptr<HttpConnection>> connections;
  {
    std::lock_guard<std::mutex> lock(impl.registry_mutex);
    for (const auto& entry : impl.registry)
      if (auto connection = entry.lock()) connections.push_back(std::move(connection));
  }
  for (const auto& connection : connections)
    connection->post_abandon(answer);
  connections.clear();
  // The answers are small: written at once unless a client does not read (2 s at most, then cut).
  const auto written_by = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (impl.in_flight.load() > 0 && std::chrono::steady_clock::now() < written_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

void HttpFrontEnd::stop() {
  Impl& impl = *impl_;
  {
    std::lock_guard<std::mutex> lock(impl.lifecycle_mutex);
    impl.stopped = true;
  }
  impl.work.reset();
  impl.io.stop();
}

HttpCounters HttpFrontEnd::counters() const {
  const Impl& impl = *impl_;
  HttpCounters counters;
  counters.open_connections = impl.open.load();
  counters.accepted_total = impl.accepted.load();
  counters.refused_total = impl.refused.load();
  counters.refused_per_client_total = impl.refused_per_client.load();
  counters.timeouts_total = impl.timeouts.load();
  counters.in_flight = impl.in_flight.load();
  return counters;
}

int HttpFrontEnd::max_connections_per_client() const {
  return impl_->per_client_limit;
}

}  // namespace ipj::serve
