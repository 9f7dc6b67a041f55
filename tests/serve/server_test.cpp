// `ipj serve` over real HTTP on loopback: every KServe v2 / Triton endpoint, JSON and binary tensors, nested
// data, id echo, 4xx for bad input (with a fuzz of thousands of malformed bodies), 503 on overload, batching
// under concurrent load, the latency histogram, bad repositories, SIGTERM drain of a real `ipj serve` process
// and TorchScript files that do not batch. Energy, threads and hostile requests: server_scenarios_test.cpp.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "inference_fixture.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/inference_model.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/serve/inference_server.hpp"
#include "ipj/serve/serve_threads.hpp"
#include "ipj/train/checkpoint.hpp"
#include "raw_http.hpp"
#include "running_server.hpp"
#include "support/test_cache.hpp"
#include "support/user_models.hpp"

namespace ipj::serve {
namespace {

// The request-latency histogram of /metrics: cumulative buckets ending in +Inf = _count = `successes`, a
// positive _sum, and promtool's linter accepts the family (so histogram_quantile can compute a p99 from it).
void expect_latency_histogram(const std::string& metrics, int successes) {
  const std::string labels = "{model=\"mlp\",version=\"1\"";
  std::istringstream lines(metrics);
  std::string family_text;
  std::vector<std::string> bounds;
  long previous = -1, count = -1;
  double sum = -1.0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("ipj_request_duration_seconds") == std::string::npos) continue;
    family_text += line + "\n";
    if (line.rfind("ipj_request_duration_seconds_bucket" + labels + ",le=\"", 0) == 0) {
      const std::size_t bound_start = line.find("le=\"") + 4;
      bounds.push_back(line.substr(bound_start, line.find('"', bound_start) - bound_start));
      const long cumulative = std::stol(line.substr(line.rfind(' ') + 1));
      EXPECT_GE(cumulative, previous) << line;
      previous = cumulative;
    } else if (line.rfind("ipj_request_duration_seconds_count" + labels + "}", 0) == 0) {
      count = std::stol(line.substr(line.rfind(' ') + 1));
    } else if (line.rfind("ipj_request_duration_seconds_sum" + labels + "}", 0) == 0) {
      sum = std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  ASSERT_EQ(bounds.size(), kLatencyBucketsS.size() + 1) << family_text;
  EXPECT_EQ(bounds.front(), "0.00025");
  EXPECT_EQ(bounds.back(), "+Inf");
  EXPECT_EQ(previous, successes);
  EXPECT_EQ(count, successes);
  EXPECT_GT(sum, 0.0);
  EXPECT_NE(family_text.find("# TYPE ipj_request_duration_seconds histogram\n"), std::string::npos)
      << family_text;
  testing::TempDir work;
  const std::string path = work.path() + "/histogram.prom";
  std::ofstream(path) << family_text;
  EXPECT_EQ(
      std::system(("promtool check metrics < " + path + " > " + work.path() + "/lint.txt 2>&1").c_str()), 0)
      << std::ifstream(work.path() + "/lint.txt").rdbuf();
}

using testing::sample_value;

torch::Tensor reference_output(const torch::Tensor& input) {
  return infer::load_inference_model(testing::trained_checkpoint("mlp"))->forward(input);
}

TEST(Serve, HealthMetadataConfigAndStatsEndpoints) {
  RunningServer running;
  auto client = running.client();
  auto root = client.Get("/v2");
  ASSERT_TRUE(root);
  EXPECT_EQ(root->status, 200);
  EXPECT_EQ(Json::parse(root->body)["name"], "ipj");
  EXPECT_EQ(client.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(client.Get("/v2/health/ready")->status, 200);
  const Json metadata = Json::parse(client.Get("/v2/models/mlp")->body);
  EXPECT_EQ(metadata["inputs"][0]["name"], "input__0");
  EXPECT_EQ(metadata["inputs"][0]["shape"], Json::parse("[-1, 1, 28, 28]"));
  EXPECT_EQ(metadata["versions"], Json::parse(R"(["1"])"));
  EXPECT_EQ(client.Get("/v2/models/mlp/versions/1")->status, 200);
  EXPECT_EQ(client.Get("/v2/models/mlp/ready")->status, 200);
  EXPECT_EQ(client.Get("/v2/models/mlp/versions/1/ready")->status, 200);
  auto missing_version = client.Get("/v2/models/mlp/versions/7");
  EXPECT_EQ(missing_version->status, 404);
  EXPECT_TRUE(Json::parse(missing_version->body).contains("error"));
  EXPECT_EQ(client.Get("/v2/models/nope")->status, 404);
  const Json config = Json::parse(client.Get("/v2/models/mlp/config")->body);
  EXPECT_EQ(config["max_batch_size"], 64);
  EXPECT_EQ(config["input"][0]["dims"], Json::parse("[1, 28, 28]"));  // Triton: without the batch dim
  EXPECT_EQ(config["dynamic_batching"]["max_queue_delay_microseconds"], 2000);
  const Json stats = Json::parse(client.Get("/v2/models/mlp/stats")->body);
  EXPECT_EQ(stats["model_stats"][0]["name"], "mlp");
  EXPECT_EQ(Json::parse(client.Get("/v2/models/stats")->body)["model_stats"].size(), 1u);
  auto unknown = client.Get("/v3/whatever");
  EXPECT_EQ(unknown->status, 404);
  EXPECT_TRUE(Json::parse(unknown->body).contains("error"));
}

TEST(Serve, JsonInferenceFlatAndNestedMatchTheModelAndEchoTheId) {
  RunningServer running;
  auto client = running.client();
  torch::manual_seed(1);
  const torch::Tensor input = torch::rand({3, 1, 28, 28});
  const torch::Tensor expected = reference_output(input);  // [3, 10]
  for (bool nested : {false, true}) {
    auto reply = client.Post("/v2/models/mlp/infer", request_body(input, nested).dump(), "application/json");
    ASSERT_TRUE(reply);
    ASSERT_EQ(reply->status, 200) << reply->body;
    const Json response = Json::parse(reply->body);
    EXPECT_EQ(response["id"], "req-42");
    EXPECT_EQ(response["model_name"], "mlp");
    EXPECT_EQ(response["model_version"], "1");
    const Json& output = response["outputs"][0];
    EXPECT_EQ(output["name"], "output__0");
    EXPECT_EQ(output["datatype"], "FP32");
    EXPECT_EQ(output["shape"], Json::parse("[3, 10]"));
    const auto values = output["data"].get<std::vector<float>>();
    ASSERT_EQ(values.size(), 30u);
    for (std::size_t index = 0; index < values.size(); ++index)
      EXPECT_NEAR(values[index], expected.flatten()[static_cast<std::int64_t>(index)].item<float>(), 1e-5);
  }
  // versioned path and an explicit outputs list
  Json body = request_body(input, false);
  body["outputs"] = Json::parse(R"([{"name": "output__0"}])");
  EXPECT_EQ(client.Post("/v2/models/mlp/versions/1/infer", body.dump(), "application/json")->status, 200);
}

TEST(Serve, BinaryTensorExtensionBothWays) {
  RunningServer running;
  auto client = running.client();
  torch::manual_seed(2);
  const torch::Tensor input = torch::rand({2, 1, 28, 28});
  const torch::Tensor expected = reference_output(input);
  const Json header = {
      {"inputs", Json::array({{{"name", "input__0"},
                               {"datatype", "FP32"},
                               {"shape", {2, 1, 28, 28}},
                               {"parameters", {{"binary_data_size", 2 * 784 * 4}}}}})},
      {"outputs", Json::array({{{"name", "output__0"}, {"parameters", {{"binary_data", true}}}}})}};
  std::string body = header.dump();
  const std::size_t header_length = body.size();
  body.append(reinterpret_cast<const char*>(input.data_ptr<float>()), 2 * 784 * 4);
  httplib::Headers headers{{"Inference-Header-Content-Length", std::to_string(header_length)}};
  auto reply = client.Post("/v2/models/mlp/infer", headers, body, "application/octet-stream");
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->status, 200) << reply->body;
  const std::size_t json_length = std::stoul(reply->get_header_value("Inference-Header-Content-Length"));
  const Json response = Json::parse(reply->body.substr(0, json_length));
  EXPECT_EQ(response["outputs"][0]["parameters"]["binary_data_size"], 80);
  ASSERT_EQ(reply->body.size() - json_length, 80u);
  std::vector<float> values(20);  // the bytes follow the JSON at any offset: copy, do not cast (alignment)
  std::memcpy(values.data(), reply->body.data() + json_length, 80);
  for (int index = 0; index < 20; ++index)
    EXPECT_NEAR(values[index], expected.flatten()[index].item<float>(), 1e-5);
}

TEST(Serve, BadRequestsGet4xxWithJsonErrorsAndTheServerKeepsServing) {
  ServeOptions options;
  options.http.max_body_bytes = 1 << 20;
  RunningServer running(kContractConfig, options);
  auto client = running.client();
  const Json good = request_body(torch::rand({1, 1, 28, 28}), false);
  auto with = [&](const std::function<void(Json&)>& change) {
    Json body = good;
    change(body);
    return body.dump();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not json", "{\"inputs\": [1, 2"},
      {"wrong dtype", with([](Json& b) { b["inputs"][0]["datatype"] = "INT64"; })},
      {"wrong shape", with([](Json& b) {
         b["inputs"][0]["shape"] = {1, 1, 27, 28};
       })},
      {"too few values", with([](Json& b) {
         b["inputs"][0]["data"] = {1.0, 2.0};
       })},
      {"string data", with([](Json& b) { b["inputs"][0]["data"][5] = "x"; })},
      {"unknown input", with([](Json& b) { b["inputs"][0]["name"] = "pixels"; })},
      {"unknown output", with([](Json& b) { b["outputs"] = Json::parse(R"([{"name": "logits"}])"); })},
      {"batch over max", with([](Json& b) {
         b["inputs"][0]["shape"] = {65, 1, 28, 28};
       })},
      {"name not a string", with([](Json& b) { b["inputs"][0]["name"] = 5; })},
      {"inputs missing", with([](Json& b) { b.erase("inputs"); })},
  };
  for (const auto& [name, body] : cases) {
    auto reply = client.Post("/v2/models/mlp/infer", body, "application/json");
    ASSERT_TRUE(reply) << name;
    EXPECT_EQ(reply->status, 400) << name << ": " << reply->body;
    EXPECT_TRUE(Json::parse(reply->body).contains("error")) << name;
  }
  httplib::Headers lying{{"Inference-Header-Content-Length", "999999"}};
  EXPECT_EQ(client.Post("/v2/models/mlp/infer", lying, good.dump(), "application/json")->status, 400);
  auto huge = client.Post("/v2/models/mlp/infer", std::string(2 << 20, ' '), "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  EXPECT_EQ(client.Post("/v2/models/other/infer", good.dump(), "application/json")->status, 404);
  EXPECT_EQ(client.Post("/v2/models/mlp/infer", good.dump(), "application/json")->status, 200);
  const std::string metrics = client.Get("/metrics")->body;
  EXPECT_NE(metrics.find("ipj_request_failure_total{model=\"mlp\",version=\"1\",reason=\"bad_input\"} 11"),
            std::string::npos)
      << metrics;
}

TEST(Serve, FuzzedMalformedBodiesNeverCrashOrGet5xx) {
  RunningServer running;
  auto client = running.client();
  const std::string good = request_body(torch::rand({1, 1, 28, 28}), false).dump();
  std::mt19937 random(1234);
  const std::string alphabet = "{}[]\",:0123456789.-eE truefalsnul\\\x01\xff";
  int answered = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string body = good;
    switch (iteration % 4) {
      case 0:
        body.resize(random() % body.size());
        break;  // truncated
      case 1:
        for (int edit = 0; edit < 5; ++edit)
          body[random() % body.size()] = alphabet[random() % alphabet.size()];
        break;
      case 2:
        body.insert(random() % body.size(),
                    std::string(1 + random() % 8, alphabet[random() % alphabet.size()]));
        break;
      case 3:
        body = body.substr(random() % 64, 40 + random() % 200);
        break;  // a random slice
    }
    httplib::Headers headers;
    if (iteration % 7 == 0)
      headers.emplace("Inference-Header-Content-Length", std::to_string(random() % 2000));
    auto reply = client.Post("/v2/models/mlp/infer", headers, body, "application/json");
    ASSERT_TRUE(reply) << "connection failed at iteration " << iteration;
    ASSERT_LT(reply->status, 500) << body.substr(0, 200) << " -> " << reply->body;
    if (reply->status == 200) continue;  // a mutation may keep the body valid (e.g. a digit changed)
    ASSERT_GE(reply->status, 400);
    ++answered;
  }
  EXPECT_GT(answered, 2500);
  EXPECT_EQ(client.Post("/v2/models/mlp/infer", good, "application/json")->status, 200);
}

TEST(Serve, ConcurrentLoadFormsBatchesAndOverloadAnswers503) {
  {
    RunningServer running(R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
      "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 32,
      "dynamic_batching": {"preferred_batch_sizes": [32], "max_queue_delay_us": 20000}})");
    const std::string body = request_body(torch::rand({1, 1, 28, 28}), false).dump();
    std::atomic<int> ok{0};
    std::vector<std::thread> clients;
    for (int thread = 0; thread < 24; ++thread)
      clients.emplace_back([&] {
        auto client = running.client();
        for (int index = 0; index < 10; ++index) {
          auto reply = client.Post("/v2/models/mlp/infer", body, "application/json");
          if (reply && reply->status == 200)
            ++ok;
          else
            ADD_FAILURE() << (reply ? reply->body : httplib::to_string(reply.error()));
        }
      });
    for (auto& client : clients)
      client.join();
    EXPECT_EQ(ok.load(), 240);
    const Json stats = Json::parse(running.client().Get("/v2/models/mlp/stats")->body)["model_stats"][0];
    EXPECT_EQ(stats["inference_count"], 240);
    EXPECT_LT(stats["execution_count"].get<int>(), 240 / 3);  // average batch above 3 requests
    const std::string metrics = running.client().Get("/metrics")->body;
    EXPECT_NE(metrics.find("ipj_model_energy_joules_total{model=\"mlp\",version=\"1\",source=\"" +
                           testing::machine_energy_source() + "\"}"),
              std::string::npos)
        << metrics;
    EXPECT_NE(metrics.find("ipj_model_energy_per_inference_joules"), std::string::npos);
    // Prometheus text format: each metric family is declared once
    std::set<std::string> families;
    std::istringstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("# TYPE ", 0) != 0) continue;
      const std::string family = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(families.insert(family).second) << "declared twice: " << family;
    }
    expect_latency_histogram(metrics, 240);
  }
  // A queue of 2 and a long delay: 16 simultaneous requests must overflow it. Overload answers 503 +
  // Retry-After.
  RunningServer small(R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
    "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 64,
    "dynamic_batching": {"preferred_batch_sizes": [64], "max_queue_delay_us": 300000, "max_queue_size": 2}})");
  const std::string body = request_body(torch::rand({1, 1, 28, 28}), false).dump();
  std::atomic<int> ok{0}, overloaded{0}, other{0};
  std::vector<std::thread> clients;
  for (int thread = 0; thread < 16; ++thread)
    clients.emplace_back([&] {
      auto client = small.client();
      auto reply = client.Post("/v2/models/mlp/infer", body, "application/json");
      if (reply && reply->status == 200)
        ++ok;
      else if (reply && reply->status == 503 && reply->has_header("Retry-After"))
        ++overloaded;
      else {
        ++other;
        ADD_FAILURE() << (reply ? std::to_string(reply->status) + reply->body
                                : httplib::to_string(reply.error()));
      }
    });
  for (auto& client : clients)
    client.join();
  EXPECT_GE(ok.load(), 1);
  EXPECT_GE(overloaded.load(), 1);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(small.client().Post("/v2/models/mlp/infer", body, "application/json")->status, 200);
}

// Real requests, then /metrics: each success lands in the bucket of its latency (a lone request waits the
// whole 30 ms queue delay, so none is at or below 25 ms), refusals are not counted, and _sum matches the
// microsecond total.
TEST(ServeMetrics, LatencyHistogramCountsEachSuccessInTheBucketOfItsLatency) {
  RunningServer running(R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
    "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 32,
    "dynamic_batching": {"preferred_batch_sizes": [32], "max_queue_delay_us": 30000}})");
  auto client = running.client();
  const std::string series = "ipj_request_duration_seconds";
  const std::string labels = "{model=\"mlp\",version=\"1\"";
  const std::string before = client.Get("/metrics")->body;
  EXPECT_EQ(sample_value(before, series + "_count" + labels + "}"), 0.0) << before;
  EXPECT_EQ(sample_value(before, series + "_bucket" + labels + ",le=\"+Inf\"}"), 0.0);
  const std::string body = request_body(torch::rand({1, 1, 28, 28}), false).dump();
  for (int index = 0; index < 3; ++index)
    ASSERT_EQ(client.Post("/v2/models/mlp/infer", body, "application/json")->status, 200);
  ASSERT_EQ(client.Post("/v2/models/mlp/infer", "{\"inputs\": []}", "application/json")->status, 400);
  const std::string metrics = client.Get("/metrics")->body;
  EXPECT_EQ(sample_value(metrics, series + "_bucket" + labels + ",le=\"0.00025\"}"), 0.0) << metrics;
  EXPECT_EQ(sample_value(metrics, series + "_bucket" + labels + ",le=\"0.025\"}"), 0.0) << metrics;
  EXPECT_EQ(sample_value(metrics, series + "_bucket" + labels + ",le=\"10\"}"), 3.0) << metrics;
  EXPECT_EQ(sample_value(metrics, series + "_bucket" + labels + ",le=\"+Inf\"}"), 3.0);
  EXPECT_EQ(sample_value(metrics, series + "_count" + labels + "}"), 3.0);
  const double sum_s = sample_value(metrics, series + "_sum" + labels + "}");
  EXPECT_GE(sum_s, 3 * 0.030);
  EXPECT_NEAR(sum_s, sample_value(metrics, "ipj_request_duration_us_total" + labels + "}") * 1e-6, 1e-6);
  expect_latency_histogram(metrics, 3);
}

TEST(Serve, BadRepositoriesFailAtStartNamingTheProblem) {
  testing::TempDir repo;
  write_repository(repo.path(), R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 11]}], "max_batch_size": 8})");
  ServeOptions options;
  options.model_repository = repo.path();
  try {
    InferenceServer server(options);
    FAIL() << "an output shape that does not fit the model was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
    EXPECT_NE(std::string(error.what()).find("output"), std::string::npos) << error.what();
  }
  std::ofstream(repo.file("mlp/config.json")) << "{\"inputs\": ";
  EXPECT_THROW(InferenceServer{options}, Error);
  options.model_repository = repo.file("absent");
  EXPECT_THROW(InferenceServer{options}, Error);
}

TEST(ServeProcess, SigtermDrainsInFlightRequestsAndExitsZero) {
  testing::TempDir work;
  // A long queue delay keeps one request in flight while the signal arrives.
  write_repository(work.file("repo"),
                   R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
    "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 64,
    "dynamic_batching": {"preferred_batch_sizes": [64], "max_queue_delay_us": 700000}})");
  const std::string command = "(" + testing::ipj_binary() + " serve --model-repo " + work.file("repo") +
                              " --port 0 --drain-s 5 > " + work.file("out") + " 2>" + work.file("err") +
                              " & echo $! > " + work.file("pid") + "; wait $!; echo $? > " + work.file("rc") +
                              ") &";
  ASSERT_EQ(std::system(command.c_str()), 0);
  int port = 0;
  for (int attempt = 0; attempt < 600 && port == 0; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream out(work.file("out"));
    std::string word, address;
    if (out >> word >> word >> address) port = std::stoi(address.substr(address.rfind(':') + 1));
  }
  ASSERT_GT(port, 0) << "server did not start: " << read_file(work.file("err"));
  int pid = 0;
  std::ifstream(work.file("pid")) >> pid;
  ASSERT_GT(pid, 0);
  httplib::Client client("127.0.0.1", port);
  ASSERT_EQ(client.Get("/v2/health/ready")->status, 200);
  const std::string body = request_body(torch::rand({1, 1, 28, 28}), false).dump();
  std::atomic<int> in_flight_status{-1};
  std::thread request([&] {
    httplib::Client own("127.0.0.1", port);
    auto reply = own.Post("/v2/models/mlp/infer", body, "application/json");
    in_flight_status = reply ? reply->status : 0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the request now waits in the batcher
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  // Draining: readiness answers 503, or no connection is served at all (the listener is closed: refused; or a
  // connection the kernel queued is closed unanswered: a failed write or read); never 200 again. Polled for
  // up to 2 s: the signal thread needs a moment.
  httplib::Result ready = client.Get("/v2/health/ready");
  for (int attempt = 0; attempt < 40 && ready && ready->status == 200; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ready = client.Get("/v2/health/ready");
  }
  if (ready)
    EXPECT_EQ(ready->status, 503) << "still ready 2 s after SIGTERM: " << ready->body;
  else
    EXPECT_TRUE(ready.error() == httplib::Error::Connection || ready.error() == httplib::Error::Write ||
                ready.error() == httplib::Error::Read)
        << "not a refused or closed connection: " << httplib::to_string(ready.error());
  request.join();
  EXPECT_EQ(in_flight_status.load(), 200);
  std::string rc;
  for (int attempt = 0; attempt < 200 && rc.empty(); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream(work.file("rc")) >> rc;
  }
  EXPECT_EQ(rc, "0") << read_file(work.file("err"));
}

// What a server starting on `repository` logs (energy off, any free port).
std::string log_of_server_start(const std::string& repository) {
  std::ostringstream log;
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  ServeOptions options;
  options.model_repository = repository;
  options.port = 0;
  options.measure_energy = false;
  try {
    InferenceServer server(options);
  } catch (...) {
    spdlog::set_default_logger(previous);
    throw;
  }
  spdlog::set_default_logger(previous);
  return log.str();
}

// A TorchScript file that reshapes every input to a batch of one: one sample works, batches cannot. The
// server loads it (single requests are answered) and warns at load that batched requests will fail, with the
// fix.
TEST(ServeTorchScript, AModelThatFailsOnBatchesLoadsWithAWarningThatSaysTheFix) {
  testing::TempDir work;
  std::filesystem::create_directories(work.file("repo/one/1"));
  testing::save_batch_one_model(work.file("repo/one/1/model.pt"));
  std::ofstream(work.file("repo/one/config.json"))
      << R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 1, 2, 2]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}], "max_batch_size": 8})";
  const std::string text = log_of_server_start(work.file("repo"));
  EXPECT_NE(text.find("fails on a batch of 8"), std::string::npos) << text;
  EXPECT_NE(text.find("max_batch_size to 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("frame #"), std::string::npos) << "a C++ backtrace in the log:\n" << text;
}

// A model that does not batch (max_batch_size 0) declared as [-1, 1, 12, 12]: the leading -1 is each
// request's batch, so the fp32 engines are checked and timed on [B, 1, 12, 12], not on a 5-D
// [B, 1, 1, 12, 12] that fails and leaves eager running (a hostile pass, 2026-12-05).
TEST(ServeTorchScript, AModelThatDoesNotBatchHasItsEnginesTimedOnItsOwnShape) {
  testing::TempDir work;
  std::filesystem::create_directories(work.file("repo/conv/1"));
  torch::jit::Module module("SmallConv");
  module.register_parameter("w", torch::randn({4, 1, 3, 3}), false);
  module.register_parameter("fc", torch::randn({3, 4}), false);
  module.define(R"(
def forward(self, x: Tensor) -> Tensor:
    x = torch.relu(torch.conv2d(x, self.w, None, [1, 1], [1, 1]))
    return torch.linear(torch.adaptive_avg_pool2d(x, [1, 1]).flatten(1), self.fc)
)");
  module.save(work.file("repo/conv/1/model.pt"));
  std::ofstream(work.file("repo/conv/config.json"))
      << R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 1, 12, 12]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}], "max_batch_size": 0})";
  const std::string text = log_of_server_start(work.file("repo"));
  EXPECT_NE(text.find("fastest exact engine measured: eager"), std::string::npos) << text;
  EXPECT_EQ(text.find("fails on a random"), std::string::npos) << text;
}

// A model that answers a tuple or a dict ran on the configured shape: the error says what it returned, and
// not "check config.json's inputs shape" (a hostile pass, 2026-12-07).
TEST(ServeTorchScript, AModelThatReturnsATupleOrADictIsRefusedForThatNotForItsShape) {
  for (const std::string& answer : {std::string("(y, y)"), std::string("{'logits': y}")}) {
    SCOPED_TRACE(answer);
    testing::TempDir work;
    std::filesystem::create_directories(work.file("repo/two/1"));
    torch::jit::Module module("TwoAnswers");
    module.register_parameter("fc", torch::randn({3, 4}), false);
    const std::string type = answer[0] == '(' ? "Tuple[Tensor, Tensor]" : "Dict[str, Tensor]";
    module.define("def forward(self, x: Tensor) -> " + type +
                  ":\n    y = torch.linear(x, self.fc)\n    return " + answer + "\n");
    module.save(work.file("repo/two/1/model.pt"));
    std::ofstream(work.file("repo/two/config.json"))
        << R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
              "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}], "max_batch_size": 8})";
    try {
      log_of_server_start(work.file("repo"));
      ADD_FAILURE() << "a server started on a model that returns " << answer;
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << message;
      EXPECT_NE(message.find("model 'two': the TorchScript model returned a " +
                             std::string(answer[0] == '(' ? "Tuple" : "GenericDict") +
                             ", ipj serves models that return one tensor"),
                std::string::npos)
          << message;
      EXPECT_EQ(message.find("config.json"), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace ipj::serve
