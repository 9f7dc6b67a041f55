// Real `ipj serve` processes on loopback, for the issue-15 contract: a health probe within 1 s with 300 idle
// connections open, a second server on a taken port failing within 5 s naming it, SIGTERM with idle and
// trickling connections, two 60 MB bodies at once, the serve-side CLI errors, and a soak of 10,000 mixed good
// and malformed requests with 300 idle connections (RSS, threads and probe latency bounded throughout); and
// for issue 22: 503 + Retry-After at the drain deadline, and one client's idle sockets locking nobody out;
// for issue 25: a neighbour arriving beside the server shrinks its thread plan.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "inference_fixture.hpp"
#include "ipj/core/json_io.hpp"
#include "raw_http.hpp"
#include "serve/process_fixture.hpp"

namespace ipj::serve {
namespace {

using testing::RawConnection;
using Clock = std::chrono::steady_clock;
using process_fixture::kBatchedConfig;
using process_fixture::make_repository;

using testing::seconds_since;

// One GET /v2/health/ready on a fresh connection: its latency in seconds, or 99 when it failed.
double probe_ready(int port) {
  const auto start = Clock::now();
  RawConnection probe(port);
  if (!probe.connected() || !probe.send(testing::get_request("/v2/health/ready"))) return 99.0;
  const std::string answer = probe.read_response(3.0);
  return testing::status_of(answer) == 200 ? seconds_since(start) : 99.0;
}

std::string image_body() {
  std::string data;
  for (int index = 0; index < 784; ++index)
    data += (index ? "," : "") + std::to_string((index % 17) / 17.0);
  return R"({"id": "soak", "inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": [)" +
         data + "]}]}";
}

TEST(ServeContract, HealthAnswersWithinOneSecondWith300IdleConnectionsOpen) {
  testing::TempDir work;
  testing::ServeProcess server("--model-repo " + make_repository(work) + " --port 0", work.path());
  ASSERT_GT(server.port(), 0) << server.error_output();
  std::vector<RawConnection> idle;
  for (int index = 0; index < 300; ++index) {  // five client addresses, 60 each (under the per-client bound)
    idle.emplace_back(server.port(), "127.0.0." + std::to_string(2 + index % 5));
    ASSERT_TRUE(idle.back().connected()) << index;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all accepted and waiting
  double slowest = 0.0;
  for (int probe = 0; probe < 10; ++probe)
    slowest = std::max(slowest, probe_ready(server.port()));
  EXPECT_LT(slowest, 1.0);
  // The idle ones are still served when they speak.
  ASSERT_TRUE(idle[150].send(testing::get_request("/v2/health/live")));
  EXPECT_EQ(testing::status_of(idle[150].read_response()), 200);
}

TEST(ServeContract, ASecondServerOnATakenPortExitsNonZeroWithinFiveSecondsNamingThePort) {
  testing::TempDir work;
  const std::string repository = make_repository(work);
  testing::ServeProcess first("--model-repo " + repository + " --port 0", work.path());
  ASSERT_GT(first.port(), 0) << first.error_output();
  const auto start = Clock::now();
  const auto second = testing::run_process(testing::ipj_binary() + " serve --model-repo " + repository +
                                           " --port " + std::to_string(first.port()));
  EXPECT_LT(seconds_since(start), 5.0);
  EXPECT_EQ(second.exit_code, 4) << second.err;
  EXPECT_NE(second.err.find("port " + std::to_string(first.port())), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("in use"), std::string::npos) << second.err;
  EXPECT_EQ(probe_ready(first.port()) < 1.0, true) << "the first server must keep its port";
}

TEST(ServeContract, SigtermClosesIdleAndTricklingConnectionsAtOnceAndExitsZero) {
  testing::TempDir work;
  testing::ServeProcess server("--model-repo " + make_repository(work) + " --port 0 --drain-s 20",
                               work.path());
  ASSERT_GT(server.port(), 0) << server.error_output();
  std::vector<RawConnection> idle;
  for (int index = 0; index < 20; ++index) {
    idle.emplace_back(server.port());
    idle.back().send(testing::get_request("/v2/health/live"));
    ASSERT_EQ(testing::status_of(idle.back().read_response()), 200);  // keep-alive, now idle
  }
  RawConnection trickling(server.port());
  trickling.send("POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{\"inp");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  const int exit_code = server.signal_and_wait(SIGTERM, 10.0);
  EXPECT_EQ(exit_code, 0) << server.error_output();
  EXPECT_LT(seconds_since(start), 2.0) << "idle connections held the drain (it has --drain-s 20)";
  for (RawConnection& connection : idle)
    EXPECT_TRUE(connection.closed_within(1.0));
}

// Issue 22: on SIGTERM, a request still queued at the --drain-s deadline is answered 503 + Retry-After (the
// model's 3 s queue delay keeps it there), not closed without an answer; the server still exits 0.
TEST(ServeContract, SigtermAnswers503WithRetryAfterToWhatCannotBeServedBeforeTheDrainDeadline) {
  testing::TempDir work;
  const std::string repository = make_repository(
      work, R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
  "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 16,
  "dynamic_batching": {"preferred_batch_sizes": [16], "max_queue_delay_us": 3000000}})");
  testing::ServeProcess server("--model-repo " + repository + " --port 0 --drain-s 0.3", work.path());
  ASSERT_GT(server.port(), 0) << server.error_output();
  std::vector<RawConnection> queued;
  for (int index = 0; index < 3; ++index) {
    queued.emplace_back(server.port());
    ASSERT_TRUE(queued.back().send(testing::post_request("/v2/models/mlp/infer", image_body())));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // all three wait in the batcher's queue
  const auto start = Clock::now();
  ::kill(server.pid(), SIGTERM);
  for (RawConnection& connection : queued) {
    const std::string answer = connection.read_response(5.0);
    EXPECT_EQ(testing::status_of(answer), 503) << "closed without an answer: '" << answer << "'";
    EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos) << answer;
    EXPECT_NE(testing::body_of(answer).find("--drain-s 0.3"), std::string::npos) << answer;
  }
  EXPECT_LT(seconds_since(start), 2.5) << "answered long after the 0.3 s drain deadline";
  EXPECT_EQ(server.signal_and_wait(SIGTERM, 10.0), 0) << server.error_output();
}

// Issue 22: one client address holding many idle sockets cannot lock the others out (its connections beyond
// --max-connections-per-client get a fast 503, counted in /metrics), and its silent connections are closed at
// the header deadline instead of being held for the idle timeout.
TEST(ServeContract, OneClientsIdleSocketsCannotLockOthersOutAndSilentOnesCloseAtTheHeaderDeadline) {
  testing::TempDir work;
  testing::ServeProcess server("--model-repo " + make_repository(work) +
                                   " --port 0 --max-connections-per-client 16 --header-timeout-s 1.5",
                               work.path());
  ASSERT_GT(server.port(), 0) << server.error_output();
  const auto start = Clock::now();
  std::vector<RawConnection> hog;
  for (int index = 0; index < 40; ++index) {
    hog.emplace_back(server.port(), "127.0.0.2");
    ASSERT_TRUE(hog.back().connected()) << index;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // accepted or refused by now
  int refused = 0;
  for (RawConnection& connection : hog)
    refused += testing::status_of(connection.read_response(0.02)) == 503 ? 1 : 0;
  EXPECT_EQ(refused, 24);
  for (const char* other : {"127.0.0.3", "127.0.0.4"}) {
    const auto probe_start = Clock::now();
    RawConnection probe(server.port(), other);
    ASSERT_TRUE(probe.send(testing::get_request("/v2/health/ready")));
    EXPECT_EQ(testing::status_of(probe.read_response(1.0)), 200) << other;
    EXPECT_LT(seconds_since(probe_start), 1.0);
  }
  int closed = 0;  // the 16 silent ones: closed at the 1.5 s header deadline, not after the 30 s idle timeout
  for (RawConnection& connection : hog)
    closed += connection.closed_within(std::max(0.05, 4.0 - seconds_since(start))) ? 1 : 0;
  EXPECT_EQ(closed, 40);
  EXPECT_LT(seconds_since(start), 4.5);
  RawConnection metrics(server.port(), "127.0.0.3");
  ASSERT_TRUE(metrics.send(testing::get_request("/metrics")));
  const std::string text = testing::body_of(metrics.read_response());
  EXPECT_NE(text.find("\nipj_http_refused_per_client_connections_total 24\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nipj_http_refused_connections_total 0\n"), std::string::npos);
}

TEST(ServeContract, TwoSixtyMegabyteBodiesAtOnceCostTheirBytesNotGigabytes) {
  testing::TempDir work;
  testing::ServeProcess server("--model-repo " + make_repository(work) + " --port 0", work.path());
  ASSERT_GT(server.port(), 0) << server.error_output();
  const long before = testing::process_figures(server.pid()).rss_kib;
  // 60 MB of numbers in inputs[0].data for a one-image shape, and 60 MB in an unknown key: both refused
  // as soon as they break a limit, with no DOM of 60 MB of numbers behind them.
  std::string numbers;
  numbers.reserve(61 << 20);
  while (numbers.size() < (std::size_t{60} << 20))
    numbers += "0.123456,";
  numbers += "1";
  const std::string data_body =
      R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": [)" + numbers +
      "]}]}";
  const std::string unknown_body = R"({"extra": [)" + numbers + "], " + image_body().substr(1);
  std::atomic<int> answered{0};
  std::vector<std::thread> senders;
  for (const std::string* body : {&data_body, &unknown_body})
    senders.emplace_back([&, body] {
      httplib::Client client("127.0.0.1", server.port());
      client.set_read_timeout(60, 0);
      auto reply = client.Post("/v2/models/mlp/infer", *body, "application/json");
      if (reply && reply->status == 400) ++answered;
    });
  for (std::thread& sender : senders)
    sender.join();
  EXPECT_EQ(answered.load(), 2);
  const long peak = testing::process_figures(server.pid()).peak_rss_kib;
  EXPECT_LT(peak - before, 400 * 1024) << "peak RSS grew by " << (peak - before) / 1024 << " MB";
  EXPECT_LT(probe_ready(server.port()), 1.0);
}

TEST(ServeCli, ServeSideErrorsNameTheFlagOrFileAndAreNeverInternal) {
  testing::TempDir work;
  struct Case {
    std::string name, command;
    int exit_code;
    std::string fragment;
  };
  const std::string repository = make_repository(work);
  testing::TempDir typed;
  const std::string string_batch = make_repository(
      typed, R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
      "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": "64"})");
  testing::TempDir versioned;
  const std::string huge_version = make_repository(versioned, kBatchedConfig, "99999999999999999999");
  // Variable height and width for a model that takes 28x28 only (a hostile pass found exit 70 here): a config
  // error naming the shape tried, for the fp32 engine and for int8.
  const auto variable_sizes = [](const std::string& variant) {
    return R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, -1, -1]}],
      "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 8,
      "variant": ")" +
           variant + "\"}";
  };
  testing::TempDir bogus_engine_dir;
  const std::string bogus_engine = make_repository(
      bogus_engine_dir, R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
      "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 8,
      "variant": "int8-static", "engine": "fastest"})");
  testing::TempDir bogus_prefer_dir;
  const std::string bogus_prefer = make_repository(
      bogus_prefer_dir, R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
      "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 8,
      "prefer": "speed"})");
  testing::TempDir variable_fp32_dir, variable_int8_dir;
  const std::string variable_fp32 = make_repository(variable_fp32_dir, variable_sizes("fp32"));
  const std::string variable_int8 = make_repository(variable_int8_dir, variable_sizes("int8-static"));
  const std::string ipj = testing::ipj_binary();
  const std::vector<Case> cases = {
      {"string max_batch_size", ipj + " serve --model-repo " + string_batch, 3,
       "\"max_batch_size\" must be an integer"},
      {"huge version folder", ipj + " serve --model-repo " + huge_version, 3, "99999999999999999999"},
      {"port out of range", ipj + " serve --model-repo " + repository + " --port 99999", 2, "--port"},
      {"drain nan", ipj + " serve --model-repo " + repository + " --drain-s nan", 2, "--drain-s"},
      {"drain negative", ipj + " serve --model-repo " + repository + " --drain-s -1", 2, "--drain-s"},
      {"idle timeout zero", ipj + " serve --model-repo " + repository + " --idle-timeout-s 0", 2,
       "--idle-timeout-s"},
      {"per-client bound too large",
       ipj + " serve --model-repo " + repository + " --max-connections-per-client 2000000", 2,
       "--max-connections-per-client"},
      {"variable sizes, fp32", ipj + " --log-level error serve --model-repo " + variable_fp32, 3,
       "shape [-1, 1, -1, -1] (tried as [1, 1, 1, 1])"},
      {"variable sizes, int8", ipj + " --log-level error serve --model-repo " + variable_int8, 3,
       "give the sizes the model needs in config.json"},
      {"unknown int8 engine", ipj + " serve --model-repo " + bogus_engine, 3,
       "\"engine\" 'fastest' is not a quantized engine of this build: use \"auto\""},
      {"unknown preference", ipj + " serve --model-repo " + bogus_prefer, 3,
       "\"prefer\" must be joules or latency, got 'speed'"},
      {"load ftp url", ipj + " load --url ftp://x --model mlp", 2, "--url"},
      {"load url without host", ipj + " load --url http:// --model mlp", 2, "--url"},
      {"load huge batch", ipj + " load --url http://127.0.0.1:1 --model mlp --batch 100000000", 2, "--batch"},
  };
  for (const Case& test : cases) {
    const auto start = Clock::now();
    const auto result = testing::run_process(test.command);
    EXPECT_EQ(result.exit_code, test.exit_code) << test.name << ": " << result.err;
    EXPECT_NE(result.err.find(test.fragment), std::string::npos) << test.name << ": " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << test.name << ": one line\n"
                                                                         << result.err;
    EXPECT_LT(seconds_since(start), 10.0) << test.name;
  }
}

// Requests of the soak: good JSON, good binary, and malformed ones at the HTTP and the KServe level.
struct SoakTraffic {
  std::string good_json = image_body();
  std::string good_binary, binary_header;
  std::vector<std::string> malformed_bodies;
  std::vector<std::string> malformed_http;

  SoakTraffic() {
    const Json header = {{"inputs", Json::array({{{"name", "input__0"},
                                                  {"datatype", "FP32"},
                                                  {"shape", {1, 1, 28, 28}},
                                                  {"parameters", {{"binary_data_size", 784 * 4}}}}})}};
    binary_header = header.dump();
    good_binary = binary_header + std::string(784 * 4, '\0');
    malformed_bodies = {
        "{\"inputs\": [1, 2",
        R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": )" +
            std::string(20000, '[') + std::string(20000, ']') + "}]}",
        R"({"id": )" + std::string(30000, '[') + std::string(30000, ']') + "}",
        R"({"id": ")" + std::string(5000, 'i') + R"(", "inputs": []})",
        R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [99, 1, 28, 28], "data": [1]}]})",
        R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": [NaN]}]})",
        "not json at all",
        "",
    };
    malformed_http = {
        "GARBAGE\r\n\r\n",
        "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n",
        "GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'h') + "\r\n\r\n",
    };
  }
};

TEST(ServeSoak, TenThousandMixedRequestsWith300IdleConnectionsStayBoundedFor15Seconds) {
  testing::TempDir work;
  testing::ServeProcess server("--model-repo " + make_repository(work) + " --port 0 --idle-timeout-s 120",
                               work.path());
  ASSERT_GT(server.port(), 0) << server.error_output();
  const int port = server.port();
  std::vector<RawConnection> idle;
  for (int index = 0; index < 300;
       ++index) {  // keep-alive connections of five clients, idle after one answer
    idle.emplace_back(port, "127.0.0." + std::to_string(2 + index % 5));
    ASSERT_TRUE(idle.back().send(testing::get_request("/v2/health/live")));
    ASSERT_EQ(testing::status_of(idle.back().read_response()), 200) << index;
  }
  const SoakTraffic traffic;
  // Warm-up, then the baseline figures.
  for (int index = 0; index < 50; ++index) {
    httplib::Client client("127.0.0.1", port);
    ASSERT_EQ(client.Post("/v2/models/mlp/infer", traffic.good_json, "application/json")->status, 200);
  }
  const testing::ProcessFigures baseline = testing::process_figures(server.pid());
  std::atomic<bool> done{false};
  std::atomic<int> requests{0}, performed{0}, wrong{0};
  std::mutex mutex;
  double slowest_probe = 0.0;
  long highest_rss = 0, most_threads = 0;
  std::string first_wrong;
  std::thread watcher([&] {
    while (!done) {
      const double latency = probe_ready(port);
      const testing::ProcessFigures figures = testing::process_figures(server.pid());
      {
        std::lock_guard<std::mutex> lock(mutex);
        slowest_probe = std::max(slowest_probe, latency);
        highest_rss = std::max(highest_rss, figures.rss_kib);
        most_threads = std::max(most_threads, figures.threads);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  auto note_wrong = [&](const std::string& what) {
    ++wrong;
    std::lock_guard<std::mutex> lock(mutex);
    if (first_wrong.empty()) first_wrong = what;
  };
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  auto run_client = [&](int client_index) {
    std::mt19937 random(static_cast<unsigned>(client_index));
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(10, 0);
    httplib::Headers binary_headers{
        {"Inference-Header-Content-Length", std::to_string(traffic.binary_header.size())}};
    for (;;) {  // at least 10,000 requests and 15 s (a soak), at most 60 s
      const int index = requests.fetch_add(1);
      if ((index >= 10000 && seconds_since(start) >= 15.0) || seconds_since(start) >= 60.0) break;
      ++performed;
      const unsigned kind = random() % 10;
      if (kind < 4) {
        auto reply = client.Post("/v2/models/mlp/infer", traffic.good_json, "application/json");
        if (!reply || reply->status != 200)
          note_wrong("good JSON got " + (reply ? reply->body : std::string("no answer")));
      } else if (kind < 6) {
        auto reply = client.Post("/v2/models/mlp/infer", binary_headers, traffic.good_binary,
                                 "application/octet-stream");
        if (!reply || reply->status != 200)
          note_wrong("good binary got " + (reply ? reply->body : std::string("no answer")));
      } else if (kind < 9) {
        const std::string& body = traffic.malformed_bodies[random() % traffic.malformed_bodies.size()];
        auto reply = client.Post("/v2/models/mlp/infer", body, "application/json");
        if (!reply || reply->status < 400 || reply->status >= 500)
          note_wrong("malformed body got " +
                     (reply ? std::to_string(reply->status) : std::string("no answer")));
      } else {  // HTTP-level garbage, pipelined pairs, abandoned half requests (raw sockets)
        RawConnection raw(port);
        const unsigned variant = random() % 5;
        if (variant < 3) {
          raw.send(traffic.malformed_http[variant]);
          const int status = testing::status_of(raw.read_response(5.0));
          if (status < 400 || status >= 500) note_wrong("malformed HTTP got " + std::to_string(status));
        } else if (variant == 3) {
          raw.send(testing::get_request("/v2/health/live") +
                   testing::post_request("/v2/models/mlp/infer", traffic.good_json));
          const int first = testing::status_of(raw.read_response(5.0));
          const int second = testing::status_of(raw.read_response(5.0));
          if (first != 200 || second != 200)
            note_wrong("pipelined pair got " + std::to_string(first) + "/" + std::to_string(second));
        } else {
          // A half request, then gone.
          raw.send("POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\n{\"in");
        }
      }
    }
  };
  for (int client_index = 0; client_index < 4; ++client_index)
    clients.emplace_back(run_client, client_index);
  for (std::thread& client : clients)
    client.join();
  const double elapsed = seconds_since(start);
  done = true;
  watcher.join();
  EXPECT_GE(performed.load(), 10000) << "only " << performed.load() << " requests in " << elapsed << " s";
  EXPECT_EQ(wrong.load(), 0) << first_wrong;
  EXPECT_LT(slowest_probe, 1.0);
  EXPECT_LT(highest_rss - baseline.rss_kib, 150 * 1024)
      << "RSS grew by " << (highest_rss - baseline.rss_kib) / 1024 << " MB";
  EXPECT_LE(most_threads, baseline.threads + 2) << "threads grew from " << baseline.threads;
  EXPECT_LT(probe_ready(port), 1.0);
  for (int index = 0; index < 300; index += 50) {  // the idle connections survived all of it
    ASSERT_TRUE(idle[static_cast<std::size_t>(index)].send(testing::get_request("/v2/health/live")));
    EXPECT_EQ(testing::status_of(idle[static_cast<std::size_t>(index)].read_response()), 200);
  }
  std::printf("soak: %d requests in %.1f s, slowest probe %.3f s, RSS %ld -> %ld MB, threads %ld -> %ld\n",
              performed.load(), elapsed, slowest_probe, baseline.rss_kib / 1024, highest_rss / 1024,
              baseline.threads, most_threads);
}

// A neighbour that arrives beside a running server (a busy loop on one of the server's two CPUs): the
// server's thread plan shrinks while it serves (OpenBLAS 2 -> 1 for the GEMM-bound mlp), as /metrics and the
// log say. Where other work already ran beside the start, the plan starts small and must stay so.
TEST(ServeThreads, ANeighbourArrivingBesideTheServerShrinksItsThreadPlan) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  testing::TempDir work;
  const std::string pinned = std::to_string(cpus[0]) + "," + std::to_string(cpus[1]);
  testing::ServeProcess server("--model-repo " + make_repository(work) + " --port 0 --no-energy", work.path(),
                               60.0, "env -u IPJ_STATIC_THREADS taskset -c " + pinned + " ");
  ASSERT_GT(server.port(), 0) << server.error_output();
  const auto metrics = [&] {
    RawConnection connection(server.port());
    if (!connection.connected() || !connection.send(testing::get_request("/metrics"))) return std::string();
    return connection.read_response(5.0);
  };
  const std::string at_start = metrics();
  EXPECT_GE(testing::sample_value(at_start, "ipj_threads{pool=\"openblas\"}"), 1.0) << at_start;
  // the load's timings and the warm-up answered no request
  EXPECT_EQ(testing::sample_value(at_start, "ipj_xnnpack_runtime_calls_total"), 0.0) << at_start;
  const bool busy_start = server.error_output().find("busy: other work") != std::string::npos;
  const pid_t neighbour = ::fork();
  if (neighbour == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[0], &one);
    ::sched_setaffinity(0, sizeof one, &one);
    for (volatile std::uint64_t spin = 0;; spin = spin + 1) {
    }
  }
  ASSERT_GT(neighbour, 0);
  std::string seen;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  RawConnection client(server.port());
  while (Clock::now() < deadline) {  // requests keep coming: a plan changes between batches
    ASSERT_TRUE(client.send(testing::post_request("/v2/models/mlp/infer", image_body())));
    ASSERT_EQ(testing::status_of(client.read_response(10.0)), 200);
    seen = metrics();
    if (testing::sample_value(seen, "ipj_threads{pool=\"openblas\"}") == 1.0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(neighbour, SIGKILL);
  ::waitpid(neighbour, nullptr, 0);
  EXPECT_EQ(testing::sample_value(seen, "ipj_threads{pool=\"openblas\"}"), 1.0)
      << seen << server.error_output();
  EXPECT_EQ(testing::sample_value(seen, "ipj_threads{pool=\"aten\"}"), 1.0) << seen;
  EXPECT_GE(testing::sample_value(seen, "ipj_other_cpus"), 0.0) << seen;
  // batches XNNPACK answered: some of those the server ran (a runtime built for the shrunk plan is timed on
  // its own thread, not counted)
  EXPECT_LE(testing::sample_value(seen, "ipj_xnnpack_runtime_calls_total"),
            testing::sample_value(seen, "ipj_execution_count_total{model=\"mlp\",version=\"1\"}"))
      << seen;
  if (!busy_start) {
    EXPECT_GE(testing::sample_value(seen, "ipj_thread_replans_total{action=\"shrink\"}"), 1.0) << seen;
    EXPECT_NE(server.error_output().find("threads re-planned (shrink)"), std::string::npos)
        << server.error_output();
  }
  // No traffic now: once the machine has been quiet for four sampler intervals the plan grows back without
  // waiting for a batch (a hostile pass, 12-07: an idle server stayed shrunk until traffic came). Asserted
  // where the polls saw 3 s of quiet in a row (CI runs other tests beside this one).
  const double quiet_blas = testing::sample_value(at_start, "ipj_threads{pool=\"openblas\"}");
  if (!busy_start && quiet_blas > 1.0) {
    int quiet_polls = 0, longest_quiet = 0;
    std::string idle;
    for (int poll = 0; poll < 60; ++poll) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      idle = metrics();
      if (testing::sample_value(idle, "ipj_threads{pool=\"openblas\"}") == quiet_blas) break;
      quiet_polls = testing::sample_value(idle, "ipj_other_cpus") < 0.25 ? quiet_polls + 1 : 0;
      longest_quiet = std::max(longest_quiet, quiet_polls);
    }
    if (longest_quiet >= 12) {
      EXPECT_EQ(testing::sample_value(idle, "ipj_threads{pool=\"openblas\"}"), quiet_blas)
          << idle << server.error_output();
    }
  }
  EXPECT_EQ(server.signal_and_wait(SIGTERM, 30.0), 0) << server.error_output();
}

// Under OMP_PROC_BIND libgomp pins the main thread to one place at load and every later thread inherits it:
// the server's threads (HTTP, batching, OpenBLAS) ran on one CPU of two. Now they run on every place's CPU
// (OpenMP's own workers keep their places), and after ipj's second start no thread is named "exe".
TEST(ServeThreads, UnderOpenMpBindingTheServersThreadsUseEveryPlaceAndNoneIsNamedExe) {
  const auto line_of = [](const std::filesystem::path& file, const std::string& key) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(key, 0) == 0) return line.substr(key.size());
    return std::string();
  };
  const std::string allowed = line_of("/proc/self/status", "Cpus_allowed_list:\t");
  testing::TempDir work;
  testing::ServeProcess server("--model-repo " + make_repository(work) + " --port 0 --no-energy", work.path(),
                               60.0, "env OMP_PROC_BIND=true OMP_PLACES=threads ");
  ASSERT_GT(server.port(), 0) << server.error_output();
  RawConnection client(server.port());
  ASSERT_TRUE(client.send(testing::post_request("/v2/models/mlp/infer", image_body())));
  ASSERT_EQ(testing::status_of(client.read_response(10.0)), 200);
  const std::filesystem::path tasks = "/proc/" + std::to_string(server.pid()) + "/task";
  int threads = 0, on_every_cpu = 0;
  for (const auto& task : std::filesystem::directory_iterator(tasks)) {
    std::string name;
    std::getline(std::ifstream(task.path() / "comm"), name);
    EXPECT_NE(name, "exe") << task.path();
    ++threads;
    on_every_cpu += line_of(task.path() / "status", "Cpus_allowed_list:\t") == allowed ? 1 : 0;
  }
  EXPECT_EQ(line_of(tasks / std::to_string(server.pid()) / "status", "Cpus_allowed_list:\t"), allowed);
  EXPECT_GE(on_every_cpu, threads / 2) << on_every_cpu << " of " << threads << " threads on " << allowed;
  EXPECT_EQ(server.signal_and_wait(SIGTERM, 30.0), 0) << server.error_output();
}

}  // namespace
}  // namespace ipj::serve
