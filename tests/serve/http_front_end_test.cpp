// The Beast front end alone (a toy handler, no model): pipelining in order, keep-alive, the connection bound
// and its fast 503, header / body / idle deadlines against silent and trickling clients, 413 / 431 / 400,
// Expect: 100-continue, drain (idle connections closed at once, in-flight ones finished or cut at the
// deadline), a port in use and out-of-range ports.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "ipj/core/error.hpp"
#include "ipj/serve/http_front_end.hpp"
#include "raw_http.hpp"
#include "support/test_support.hpp"

namespace ipj::serve {
namespace {

using testing::RawConnection;
using Clock = std::chrono::steady_clock;

using testing::seconds_since;

// GET /echo/... answers its target; POST /echo answers its body; GET /slow/N answers after N ms from another
// thread (as a batcher worker would).
struct FrontEndUnderTest {
  std::unique_ptr<HttpFrontEnd> front;
  std::thread runner;
  int port = 0;
  std::mutex mutex;
  std::vector<std::thread> repliers;

  explicit FrontEndUnderTest(HttpLimits limits = {}) {
    front = std::make_unique<HttpFrontEnd>(limits, [this](HttpRequest&& request, const HttpReply& reply) {
      HttpResponse response;
      response.content_type = "text/plain";
      if (request.target.rfind("/slow/", 0) == 0) {
        const int milliseconds = std::stoi(request.target.substr(6));
        std::lock_guard<std::mutex> lock(mutex);
        repliers.emplace_back([reply, milliseconds, target = request.target] {
          std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
          reply(HttpResponse{200, target, "text/plain", {}});
        });
        return;
      }
      response.body = request.method == HttpMethod::post ? request.body : request.target;
      reply(std::move(response));
    });
    port = front->bind("127.0.0.1", 0);
    runner = std::thread([this] { front->run(); });
  }
  ~FrontEndUnderTest() {
    front->stop();
    runner.join();
    for (std::thread& replier : repliers)
      replier.join();
    front.reset();
  }
};

TEST(HttpFrontEnd, PipelinedRequestsAreAnsweredInOrderOnOneConnection) {
  FrontEndUnderTest server;
  RawConnection client(server.port);
  ASSERT_TRUE(client.connected());
  // Three requests in one write, the first one slow: the answers still come in request order.
  ASSERT_TRUE(client.send(testing::get_request("/slow/150") + testing::post_request("/echo", "second") +
                          testing::get_request("/echo/third")));
  const std::string first = client.read_response(), second = client.read_response(),
                    third = client.read_response();
  EXPECT_EQ(testing::status_of(first), 200) << first;
  EXPECT_EQ(testing::body_of(first), "/slow/150");
  EXPECT_EQ(testing::body_of(second), "second");
  EXPECT_EQ(testing::body_of(third), "/echo/third");
  // Keep-alive: the same connection goes on serving.
  for (int index = 0; index < 100; ++index) {
    ASSERT_TRUE(client.send(testing::get_request("/echo/" + std::to_string(index))));
    ASSERT_EQ(testing::body_of(client.read_response()), "/echo/" + std::to_string(index));
  }
  EXPECT_EQ(server.front->counters().accepted_total, 1);
}

TEST(HttpFrontEnd, ConnectionsOverTheLimitAre503AndClosedAtOnce) {
  HttpLimits limits;
  limits.max_connections = 4;
  FrontEndUnderTest server(limits);
  std::vector<RawConnection> held;
  for (int index = 0; index < 4; ++index) {
    held.emplace_back(server.port);
    ASSERT_TRUE(held.back().send(testing::get_request("/echo/held")));
    ASSERT_EQ(testing::status_of(held.back().read_response()), 200);  // accepted and counted
  }
  const auto start = Clock::now();
  RawConnection extra(server.port);
  ASSERT_TRUE(extra.connected());
  extra.send(testing::get_request("/echo/extra"));
  const std::string refused = extra.read_response(2.0);
  EXPECT_EQ(testing::status_of(refused), 503) << refused;
  EXPECT_NE(refused.find("Connection: close"), std::string::npos);
  EXPECT_NE(refused.find("Retry-After"), std::string::npos);
  EXPECT_TRUE(extra.closed_within(2.0));
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_EQ(server.front->counters().refused_total, 1);
  held.pop_back();  // one leaves: a new client gets in
  for (int attempt = 0; attempt < 100 && server.front->counters().open_connections >= 4; ++attempt)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  RawConnection next(server.port);
  next.send(testing::get_request("/echo/next"));
  EXPECT_EQ(testing::status_of(next.read_response()), 200);
}

TEST(HttpFrontEnd, TricklingHeadersCannotExtendTheHeaderDeadline) {
  HttpLimits limits;
  limits.header_timeout_s = 0.5;
  limits.idle_timeout_s = 30.0;
  FrontEndUnderTest server(limits);
  RawConnection client(server.port);
  const std::string request = testing::get_request("/echo/slowly") + "X-Padding: " + std::string(200, 'p');
  const auto start = Clock::now();
  bool closed = false;
  for (std::size_t index = 0; index < request.size() && !closed; ++index) {
    closed = !client.send(request.substr(index, 1)) || client.closed_within(0.05);  // a byte every 50 ms
    if (seconds_since(start) > 3.0) break;
  }
  EXPECT_TRUE(closed || client.closed_within(1.0)) << "a trickling client kept its connection";
  EXPECT_LT(seconds_since(start), 2.0);  // 0.5 s deadline + scheduling slack on a loaded machine
  // The socket closes before the timed-out read's handler counts it: give the IO thread a moment.
  for (int attempt = 0; attempt < 100 && server.front->counters().timeouts_total == 0; ++attempt)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(server.front->counters().timeouts_total, 1);
}

TEST(HttpFrontEnd, SilentAndSlowBodyClientsAreClosedByTheirDeadlines) {
  HttpLimits limits;
  limits.idle_timeout_s = 0.4;
  limits.body_timeout_s = 0.4;
  FrontEndUnderTest server(limits);
  RawConnection silent(server.port);
  RawConnection slow_body(server.port);
  const auto start = Clock::now();
  ASSERT_TRUE(slow_body.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc"));
  bool slow_closed = false;
  for (int index = 0; index < 40 && !slow_closed; ++index)  // a byte every 50 ms: never enough
    slow_closed = !slow_body.send("d") || slow_body.closed_within(0.05);
  EXPECT_TRUE(slow_closed || slow_body.closed_within(1.0));
  EXPECT_TRUE(silent.closed_within(2.0));
  EXPECT_LT(seconds_since(start), 2.5);
  for (int attempt = 0; attempt < 100 && server.front->counters().timeouts_total < 2; ++attempt)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // counted just after the close
  EXPECT_GE(server.front->counters().timeouts_total, 2);
}

TEST(HttpFrontEnd, OversizedAndMalformedRequestsGet4xxWithoutReadingTheRest) {
  HttpLimits limits;
  limits.max_body_bytes = 1000;
  limits.max_header_bytes = 4096;
  FrontEndUnderTest server(limits);
  {
    RawConnection client(server.port);
    client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n");  // no body follows
    const std::string answer = client.read_response(2.0);
    EXPECT_EQ(testing::status_of(answer), 413) << answer;
    EXPECT_TRUE(client.closed_within(3.0));
  }
  {
    RawConnection client(server.port);  // chunked: the limit applies as the body arrives
    client.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" +
                std::string(0x800, 'a') + "\r\n");
    EXPECT_EQ(testing::status_of(client.read_response(2.0)), 413);
  }
  {
    RawConnection client(server.port);
    client.send("GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8192, 'h') + "\r\n\r\n");
    EXPECT_EQ(testing::status_of(client.read_response(2.0)), 431);
  }
  {
    RawConnection client(server.port);
    client.send("GARBAGE\r\n\r\n");
    EXPECT_EQ(testing::status_of(client.read_response(2.0)), 400);
  }
  {
    RawConnection client(server.port);  // curl's Expect: 100-continue for larger bodies
    client.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    EXPECT_EQ(testing::status_of(client.read_response(2.0)), 100);
    client.send("hello");
    const std::string answer = client.read_response(2.0);
    EXPECT_EQ(testing::status_of(answer), 200);
    EXPECT_EQ(testing::body_of(answer), "hello");
  }
  RawConnection after(server.port);
  after.send(testing::get_request("/echo/alive"));
  EXPECT_EQ(testing::status_of(after.read_response()), 200);
}

TEST(HttpFrontEnd, DrainClosesIdleConnectionsAtOnceAndFinishesInFlightOnes) {
  FrontEndUnderTest server;
  std::vector<RawConnection> idle;
  for (int index = 0; index < 20; ++index)
    idle.emplace_back(server.port);
  RawConnection busy(server.port);
  busy.send(testing::get_request("/slow/600"));
  for (int attempt = 0; attempt < 200 && server.front->counters().in_flight == 0; ++attempt)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(server.front->counters().in_flight, 1);
  const auto start = Clock::now();
  std::thread drainer([&] { server.front->drain(5.0); });
  for (RawConnection& connection : idle)
    EXPECT_TRUE(connection.closed_within(0.5)) << "an idle connection stayed open during the drain";
  EXPECT_LT(seconds_since(start), 0.5);
  const std::string answer = busy.read_response(3.0);
  EXPECT_EQ(testing::status_of(answer), 200) << "the in-flight request was dropped";
  EXPECT_NE(answer.find("Connection: close"), std::string::npos);
  drainer.join();
  server.runner.join();  // run() returned
  server.runner = std::thread([] {});
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(HttpFrontEnd, DrainStopsAtItsDeadlineWhenARequestDoesNotFinish) {
  FrontEndUnderTest server;
  RawConnection busy(server.port);
  busy.send(testing::get_request("/slow/1500"));
  for (int attempt = 0; attempt < 200 && server.front->counters().in_flight == 0; ++attempt)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto start = Clock::now();
  server.front->drain(0.3);
  server.runner.join();
  server.runner = std::thread([] {});
  EXPECT_LT(seconds_since(start), 1.5);
  EXPECT_GE(seconds_since(start), 0.25);
}

TEST(HttpFrontEnd, APortInUseAndOutOfRangePortsAreClearErrors) {
  FrontEndUnderTest first;
  HttpFrontEnd second(HttpLimits{}, [](HttpRequest&&, const HttpReply&) {});
  try {
    second.bind("127.0.0.1", first.port);
    FAIL() << "a second server bound a port in use";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::io);
    EXPECT_NE(std::string(error.what()).find(std::to_string(first.port)), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("in use"), std::string::npos) << error.what();
  }
  for (const int port : {-1, 65536, 99999}) {
    HttpFrontEnd bad(HttpLimits{}, [](HttpRequest&&, const HttpReply&) {});
    try {
      bad.bind("127.0.0.1", port);
      FAIL() << "port " << port << " accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::usage);
      EXPECT_NE(std::string(error.what()).find("--port"), std::string::npos);
    }
  }
  HttpLimits nan_limits;
  nan_limits.idle_timeout_s = std::nan("");
  EXPECT_THROW(HttpFrontEnd(nan_limits, [](HttpRequest&&, const HttpReply&) {}), Error);
}

TEST(HttpFrontEnd, AProbeIsAnsweredFastWith300IdleConnectionsOpen) {
  FrontEndUnderTest server;
  std::vector<RawConnection> idle;
  for (int index = 0; index < 300; ++index) {
    idle.emplace_back(server.port);
    ASSERT_TRUE(idle.back().connected());
  }
  for (int probe = 0; probe < 5; ++probe) {
    const auto start = Clock::now();
    RawConnection client(server.port);
    client.send(testing::get_request("/echo/health"));
    EXPECT_EQ(testing::status_of(client.read_response(1.0)), 200);
    EXPECT_LT(seconds_since(start), 1.0);
  }
}

}  // namespace
}  // namespace ipj::serve
