// The Beast front end's server side: limits validation, bind (SO_REUSEADDR only), the accept loop with the
// connection bound and its fast 503 refusal, the IO threads, drain and stop.
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <chrono>
#include <cmath>
#include <thread>

#include "http_internal.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"

namespace ipj::serve {
namespace {

void check_seconds(double value, const char* flag) {
  if (!std::isfinite(value) || value <= 0.0 || value > 86400.0)
    fail(ErrorCategory::usage,
         std::string(flag) + " must be a number of seconds in (0, 86400], got " + std::to_string(value));
}

// Answers one connection over the limit with a fixed 503 and closes it: no parsing, a 2 s bound on all of it.
class Refusal : public std::enable_shared_from_this<Refusal> {
 public:
  Refusal(HttpFrontEnd::Impl& server, tcp::socket socket) : server_(server), stream_(std::move(socket)) {
    server_.refusing += 1;
  }
  ~Refusal() { server_.refusing -= 1; }
  void start() {
    stream_.expires_after(std::chrono::seconds(2));
    asio::async_write(stream_, asio::buffer(server_.refusal),
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
  char scratch_[2048];
};

}  // namespace

void validate(const HttpLimits& limits) {
  if (limits.max_connections < 1 || limits.max_connections > 1000000)
    fail(ErrorCategory::usage,
         "--max-connections must be in [1, 1000000], got " + std::to_string(limits.max_connections));
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
  const std::string body = Json{
      {"error",
       "too many connections (--max-connections " + std::to_string(limits.max_connections) +
           "); retry later"}}.dump();
  refusal =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
      "Connection: close\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
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
  if (draining) {
    boost::system::error_code ignored;
    socket.close(ignored);
  } else if (open.load() >= limits.max_connections) {
    refuse(std::move(socket));
  } else {
    std::make_shared<HttpConnection>(*this, std::move(socket))->start();
  }
  accept_next();
}

void HttpFrontEnd::Impl::refuse(tcp::socket socket) {
  refused += 1;
  if (refusing.load() >= 256) {  // a flood: do not even answer
    boost::system::error_code ignored;
    socket.close(ignored);
    return;
  }
  std::make_shared<Refusal>(*this, std::move(socket))->start();
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
  if (impl.in_flight.load() > 0)
    spdlog::warn("drain: {} request(s) still running after {} s; closing", impl.in_flight.load(), seconds);
  stop();
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
  return {impl.open.load(), impl.accepted.load(), impl.refused.load(), impl.timeouts.load(),
          impl.in_flight.load()};
}

}  // namespace ipj::serve
