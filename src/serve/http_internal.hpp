// Internals of the Beast front end shared by its two files: the server state (io_context, acceptor,
// registry of connections, connections per client address, counters) and one keep-alive connection's state
// machine. Each connection runs on
// its own strand, so its handlers never run concurrently even with several IO threads.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "ipj/serve/http_front_end.hpp"

namespace ipj::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

class HttpConnection;

struct HttpFrontEnd::Impl {
  Impl(HttpLimits limits_in, HttpHandler handler_in);

  void accept_next();
  void on_accept(const boost::system::error_code& error, tcp::socket socket);
  // 503 + close with `answer` (refusal or per_client_refusal), without reading the request.
  void refuse(tcp::socket socket, const std::string& answer);
  // Counts a connection from `client`; false (nothing counted) when it already holds per_client_limit.
  bool admit_client(const asio::ip::address& client);
  void release_client(const asio::ip::address& client);
  // The drain deadline passed: every request still unanswered is answered 503 + Retry-After (2 s at most).
  void abandon_in_flight(double seconds);
  // The registry holds every open connection so drain() can reach the idle ones.
  std::list<std::weak_ptr<HttpConnection>>::iterator enroll(
      const std::shared_ptr<HttpConnection>& connection);
  void leave(std::list<std::weak_ptr<HttpConnection>>::iterator entry);

  HttpLimits limits;
  HttpHandler handler;
  std::atomic<std::int64_t> open{0}, accepted{0}, refused{0}, refused_per_client{0}, timeouts{0},
      in_flight{0}, refusing{0};
  int per_client_limit = 1;  // limits.max_connections_per_client resolved
  std::mutex clients_mutex;
  std::map<asio::ip::address, int> clients;  // open connections per client address (none at 0)
  std::atomic<bool> draining{false};
  std::mutex registry_mutex;
  std::list<std::weak_ptr<HttpConnection>> registry;
  // Declared after the registry: destroyed first, so connections still held by handlers can leave it.
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  asio::strand<asio::io_context::executor_type> accept_strand{asio::make_strand(io)};
  tcp::acceptor acceptor{accept_strand};  // touched only on accept_strand once run() started
  asio::steady_timer accept_retry{accept_strand};
  std::string refusal;             // the whole 503 answer to a connection over max_connections
  std::string per_client_refusal;  // ... and to one over max_connections_per_client
  std::mutex lifecycle_mutex;      // orders run() against drain() / stop()
  bool running = false, stopped = false;
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  // `client`: the peer address, counted by admit_client() and released by the destructor.
  HttpConnection(HttpFrontEnd::Impl& server, tcp::socket socket, asio::ip::address client);
  ~HttpConnection();
  void start();
  // Closes the connection on its strand unless a request is being answered (drain). Any thread.
  void post_close_if_idle();
  // Drain deadline: a request still being answered gets `answer` (a 503) now, then the connection closes;
  // the model's late answer is dropped. Any thread.
  void post_abandon(std::shared_ptr<const HttpResponse> answer);

 private:
  enum class State { waiting, reading_header, reading_body, answering, writing, closing, closed };

  void wait_for_request();
  void read_header();
  void on_header(const boost::system::error_code& error);
  void read_body();
  void on_body(const boost::system::error_code& error);
  void dispatch_request();
  void send(HttpResponse&& response, bool keep_alive);
  void on_written(const boost::system::error_code& error, bool keep_alive);
  // A protocol error: answers `status` with a JSON error and closes after the write.
  void fail_request(int status, const std::string& message);
  // Half-closes, discards what the client still sends (at most 2 s), then closes.
  void linger_and_close();
  void discard();
  void close_if_idle();
  void abandon(const HttpResponse& answer);
  void close_now();
  void count_error(const boost::system::error_code& error);

  HttpFrontEnd::Impl& server_;
  beast::tcp_stream stream_;
  asio::ip::address client_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
  http::response<http::empty_body> continue_;
  bool request_keep_alive_ = true;
  unsigned request_version_ = 11;
  bool answering_counted_ = false;
  bool first_request_ = true;  // its header deadline runs from the accept, so silence cannot hold a slot
  std::chrono::steady_clock::time_point first_deadline_{};
  State state_ = State::waiting;
  std::list<std::weak_ptr<HttpConnection>>::iterator entry_;
};

}  // namespace ipj::serve
