// One keep-alive HTTP/1.1 connection: wait (idle deadline) -> headers (header deadline from the first byte)
// -> body (body deadline) -> answer (no deadline: the batcher bounds it; a drain cuts it with a 503) -> write
// (write deadline) -> wait. A new connection's first request has the header deadline from the accept: a
// client that connects and stays silent is closed then. One request at a time: pipelined requests wait in the
// buffer and are answered in order.
#include <boost/asio/dispatch.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <chrono>

#include "http_internal.hpp"
#include "ipj/core/json_io.hpp"

namespace ipj::serve {
namespace {

std::chrono::steady_clock::duration seconds(double value) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(value));
}

std::string error_body(const std::string& message) {
  return Json{{"error", message}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool is_disconnect(const boost::system::error_code& error) {
  return error == http::error::end_of_stream || error == asio::error::eof ||
         error == asio::error::connection_reset || error == asio::error::operation_aborted ||
         error == asio::error::broken_pipe || error == beast::error::timeout;
}

}  // namespace

HttpConnection::HttpConnection(HttpFrontEnd::Impl& server, tcp::socket socket, asio::ip::address client)
    : server_(server),
      stream_(std::move(socket)),
      client_(std::move(client)),
      buffer_(server.limits.max_header_bytes + 65536) {
  server_.open += 1;
  boost::system::error_code ignored;
  stream_.socket().set_option(tcp::no_delay(true), ignored);
}

HttpConnection::~HttpConnection() {
  if (answering_counted_) server_.in_flight -= 1;
  server_.leave(entry_);
  server_.release_client(client_);
  server_.open -= 1;
}

void HttpConnection::start() {
  entry_ = server_.enroll(shared_from_this());
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->wait_for_request(); });
}

void HttpConnection::post_close_if_idle() {
  asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->close_if_idle(); });
}

void HttpConnection::post_abandon(std::shared_ptr<const HttpResponse> answer) {
  asio::dispatch(stream_.get_executor(),
                 [self = shared_from_this(), answer = std::move(answer)] { self->abandon(*answer); });
}

void HttpConnection::abandon(const HttpResponse& answer) {
  if (state_ != State::answering) return;  // answered meanwhile, or not answering at all
  HttpResponse copy = answer;
  send(std::move(copy), false);  // the model's answer, if it still comes, finds the state changed
}

void HttpConnection::close_if_idle() {
  if (state_ == State::waiting || state_ == State::reading_header || state_ == State::reading_body)
    close_now();
}

void HttpConnection::count_error(const boost::system::error_code& error) {
  if (error == beast::error::timeout) server_.timeouts += 1;
}

void HttpConnection::wait_for_request() {
  state_ = State::waiting;
  if (server_.draining) return close_now();
  if (buffer_.size() > 0) return read_header();  // a pipelined request is already here
  buffer_.shrink_to_fit();                       // idle connections keep no large buffers
  if (first_request_) {                          // silence after connecting is not keep-alive idling
    first_deadline_ = std::chrono::steady_clock::now() + seconds(server_.limits.header_timeout_s);
    stream_.expires_at(first_deadline_);
  } else {
    stream_.expires_after(seconds(server_.limits.idle_timeout_s));
  }
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](boost::system::error_code error, std::size_t bytes) {
                            if (error) {
                              self->count_error(error);
                              return self->close_now();
                            }
                            self->buffer_.commit(bytes);
                            self->read_header();
                          });
}

void HttpConnection::read_header() {
  if (state_ == State::closed) return;  // closed (a drain) while the bytes that led here were read
  state_ = State::reading_header;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(server_.limits.max_header_bytes));
  parser_->body_limit(server_.limits.max_body_bytes);
  // From the first byte (the accept for a new connection): trickling cannot extend it.
  if (first_request_ && first_deadline_ != std::chrono::steady_clock::time_point{})
    stream_.expires_at(first_deadline_);
  else
    stream_.expires_after(seconds(server_.limits.header_timeout_s));
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](boost::system::error_code error, std::size_t) { self->on_header(error); });
}

void HttpConnection::on_header(const boost::system::error_code& error) {
  if (state_ == State::closed) return;  // closed while the read was pending: nothing more to do
  if (error == http::error::body_limit)
    return fail_request(413, "request body too large (over " + std::to_string(server_.limits.max_body_bytes) +
                                 " bytes: --max-body-bytes)");
  if (error == http::error::header_limit || error == http::error::buffer_overflow)
    return fail_request(431, "request headers too large (over " +
                                 std::to_string(server_.limits.max_header_bytes) + " bytes)");
  if (is_disconnect(error)) {
    count_error(error);
    return close_now();
  }
  if (error) return fail_request(400, "malformed HTTP request: " + error.message());
  const auto& request = parser_->get();
  request_keep_alive_ = request.keep_alive();
  request_version_ = request.version();
  const auto length = parser_->content_length();
  if (length && *length > server_.limits.max_body_bytes) return fail_request(413, "request body too large");
  if (beast::iequals(request[http::field::expect], "100-continue") && !parser_->is_done()) {
    continue_ = http::response<http::empty_body>(http::status::continue_, request.version());
    stream_.expires_after(seconds(server_.limits.write_timeout_s));
    http::async_write(stream_, continue_,
                      [self = shared_from_this()](boost::system::error_code error, std::size_t) {
                        if (error) {
                          self->count_error(error);
                          return self->close_now();
                        }
                        self->read_body();
                      });
    return;
  }
  read_body();
}

void HttpConnection::read_body() {
  if (state_ == State::closed) return;
  state_ = State::reading_body;
  if (parser_->is_done()) return dispatch_request();
  stream_.expires_after(seconds(server_.limits.body_timeout_s));
  http::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](boost::system::error_code error, std::size_t) { self->on_body(error); });
}

void HttpConnection::on_body(const boost::system::error_code& error) {
  if (state_ == State::closed) return;
  if (error == http::error::body_limit)
    return fail_request(413, "request body too large (over " + std::to_string(server_.limits.max_body_bytes) +
                                 " bytes: --max-body-bytes)");
  if (is_disconnect(error)) {
    count_error(error);
    return close_now();
  }
  if (error) return fail_request(400, "malformed HTTP request body: " + error.message());
  dispatch_request();
}

void HttpConnection::dispatch_request() {
  state_ = State::answering;
  first_request_ = false;
  stream_.expires_never();  // the batcher's queue and the request's timeout bound this phase
  server_.in_flight += 1;
  answering_counted_ = true;
  http::request<http::string_body> message = parser_->release();
  parser_.reset();
  HttpRequest request;
  request.method = message.method() == http::verb::get    ? HttpMethod::get
                   : message.method() == http::verb::post ? HttpMethod::post
                                                          : HttpMethod::other;
  request.target = std::string(message.target());
  request.body = std::move(message.body());
  for (const auto& field : message)
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  auto self = shared_from_this();
  HttpReply reply([self](HttpReply::Builder build) {
    asio::dispatch(self->stream_.get_executor(), [self, build = std::move(build)] {
      if (self->state_ != State::answering) return;  // answered 503 by a drain, or closed: not built
      HttpResponse response;
      try {
        response = build();
      } catch (const std::exception& error) {
        response = HttpResponse{
            500, error_body(std::string("internal error: ") + error.what()), "application/json", {}};
      }
      self->send(std::move(response), self->request_keep_alive_);
    });
  });
  try {
    server_.handler(std::move(request), reply);  // last: the reply may already have run
  } catch (const std::exception& error) {
    reply(HttpResponse{
        500, error_body(std::string("internal error: ") + error.what()), "application/json", {}});
  }
}

void HttpConnection::send(HttpResponse&& response, bool keep_alive) {
  if (state_ != State::answering) return;  // closed by stop(), or answered twice
  state_ = State::writing;
  keep_alive = keep_alive && !server_.draining;
  response_ = http::response<http::string_body>();
  response_.version(request_version_);
  response_.result(static_cast<unsigned>(response.status));
  response_.set(http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers)
    response_.set(name, value);
  response_.body() = std::move(response.body);
  response_.keep_alive(keep_alive);
  response_.prepare_payload();
  stream_.expires_after(seconds(server_.limits.write_timeout_s));
  http::async_write(stream_, response_,
                    [self = shared_from_this(), keep_alive](boost::system::error_code error, std::size_t) {
                      self->on_written(error, keep_alive);
                    });
}

void HttpConnection::on_written(const boost::system::error_code& error, bool keep_alive) {
  if (answering_counted_) {
    server_.in_flight -= 1;
    answering_counted_ = false;
  }
  response_ = http::response<http::string_body>();  // frees the body
  if (error) {
    count_error(error);
    return close_now();
  }
  if (!keep_alive) return linger_and_close();
  wait_for_request();
}

void HttpConnection::fail_request(int status, const std::string& message) {
  state_ = State::answering;
  HttpResponse response;
  response.status = status;
  response.body = error_body(message);
  send(std::move(response), false);
}

void HttpConnection::linger_and_close() {
  state_ = State::closing;
  boost::system::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  // Reading what the client still sends lets it see the answer instead of a reset; 2 s at most.
  stream_.expires_after(std::chrono::seconds(2));
  buffer_.clear();
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](boost::system::error_code error, std::size_t) {
                            if (error) return self->close_now();
                            self->discard();
                          });
}

void HttpConnection::discard() {
  stream_.async_read_some(buffer_.prepare(4096),
                          [self = shared_from_this()](boost::system::error_code error, std::size_t) {
                            if (error) return self->close_now();
                            self->discard();
                          });
}

void HttpConnection::close_now() {
  if (state_ == State::closed) return;
  state_ = State::closed;
  // The parser stays: a read still pending on it (a drain closes connections in the middle of a request)
  // completes after this, aborted or with bytes already queued, and Beast then feeds those to the parser.
  // Destroying it here was a use after free ("pure virtual method called", SIGABRT or SIGSEGV during drains).
  // It goes with the connection, once the last handler holding the connection has run.
  boost::system::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

}  // namespace ipj::serve
