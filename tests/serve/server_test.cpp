// `ipj serve` over real HTTP on loopback: every KServe v2 / Triton endpoint, JSON and binary tensors, nested
// data, id echo, 4xx for bad input (with a fuzz of thousands of malformed bodies), 503 on overload, batching
// under concurrent load, energy in /metrics and in every answer (and /metrics' joules per inference equal to
// the answers' mean), the issue-15 request reproductions, a NaN-weight model answered 500 instead of nulls,
// and SIGTERM drain of a real `ipj serve` process.
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
#include "support/test_cache.hpp"
#include "support/user_models.hpp"

namespace ipj::serve {
namespace {

const char* kContractConfig =
    R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
  "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 64,
  "dynamic_batching": {"preferred_batch_sizes": [16, 32, 64], "max_queue_delay_us": 2000, "max_queue_size": 1024}})";

// DIR/mlp/config.json + DIR/mlp/1/model.pt: `model_file`, or the trained mlp checkpoint.
void write_repository(const std::string& root, const std::string& config,
                      const std::string& model_file = "") {
  std::filesystem::create_directories(root + "/mlp/1");
  std::filesystem::copy_file(model_file.empty() ? testing::trained_checkpoint("mlp") : model_file,
                             root + "/mlp/1/model.pt");
  std::ofstream(root + "/mlp/config.json") << config;
}

struct RunningServer {
  testing::TempDir repo;
  std::unique_ptr<InferenceServer> server;
  std::thread thread;
  int port = 0;
  explicit RunningServer(const std::string& config = kContractConfig, ServeOptions options = {},
                         const std::string& model_file = "") {
    write_repository(repo.path(), config, model_file);
    options.model_repository = repo.path();
    options.port = 0;
    server = std::make_unique<InferenceServer>(options);
    port = server->bind();
    thread = std::thread([this] { server->serve(); });
    httplib::Client probe("127.0.0.1", port);
    for (int attempt = 0; attempt < 500; ++attempt) {
      auto ready = probe.Get("/v2/health/ready");
      if (ready && ready->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("server never became ready");
  }
  ~RunningServer() {
    server->drain();
    thread.join();
  }
  httplib::Client client() const { return httplib::Client("127.0.0.1", port); }
};

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

Json request_body(const torch::Tensor& input, bool nested) {
  const torch::Tensor values = input.contiguous();
  Json data;
  if (nested) {
    data = Json::array();
    for (std::int64_t row = 0; row < values.size(0); ++row) {
      Json image = Json::array({Json::array()});
      for (std::int64_t y = 0; y < 28; ++y) {
        Json line = Json::array();
        for (std::int64_t x = 0; x < 28; ++x)
          line.push_back(values[row][0][y][x].item<float>());
        image[0].push_back(line);
      }
      data.push_back(image);
    }
  } else {
    data = std::vector<float>(values.data_ptr<float>(), values.data_ptr<float>() + values.numel());
  }
  return {
      {"id", "req-42"},
      {"inputs",
       Json::array(
           {{{"name", "input__0"}, {"datatype", "FP32"}, {"shape", values.sizes().vec()}, {"data", data}}})}};
}

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

// A TorchScript file that reshapes every input to a batch of one: one sample works, batches cannot. The
// server loads it (single requests are answered) and warns at load that batched requests will fail, with the
// fix.
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

}  // namespace
}  // namespace ipj::serve

namespace ipj::serve {
namespace {

TEST(ServeLoad, LoadCommandDrivesTheServerAtEachConcurrency) {
  RunningServer running;
  const auto result = testing::run_process(
      testing::ipj_binary() + " load --url http://127.0.0.1:" + std::to_string(running.port) +
      " --model mlp --concurrency 1,4 --duration 0.6 --max-windows 3 --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json report = Json::parse(result.out);
  ASSERT_EQ(report["levels"].size(), 2u);
  for (const Json& level : report["levels"]) {
    EXPECT_GT(level["requests"].get<int>(), 0);
    EXPECT_EQ(level["energy_requests"], level["requests"]);               // every answer carried its joules
    EXPECT_EQ(level["energy_source"], testing::machine_energy_source());  // the server's meters, in-process
    EXPECT_GE(level["energy_p99_j"].get<double>(), level["energy_p50_j"].get<double>());
    EXPECT_GT(level["energy_mean_j"].get<double>(), 0.0);
    EXPECT_EQ(level["errors"], 0);
    EXPECT_GT(level["requests_per_s"].get<double>(), 0.0);
    EXPECT_LE(level["p50_ms"].get<double>(), level["p99_ms"].get<double>());
  }
  EXPECT_EQ(report["levels"][1]["concurrency"], 4);
  const auto unknown = testing::run_process(testing::ipj_binary() + " load --url http://127.0.0.1:" +
                                            std::to_string(running.port) + " --model nope --duration 0.3");
  EXPECT_EQ(unknown.exit_code, 3) << unknown.err;
  const auto unreachable = testing::run_process(testing::ipj_binary() +
                                                " load --url http://127.0.0.1:1 --model mlp --duration 0.3");
  EXPECT_EQ(unreachable.exit_code, 4) << unreachable.err;
}

}  // namespace
}  // namespace ipj::serve

namespace ipj::serve {
namespace {

TEST(ServeTorchScript, AUserTorchScriptModelServesPyTorchsOwnOutputs) {
  testing::TempDir work;
  const std::string script = testing::test_source_dir() + "/infer/make_torchscript_golden.py";
  const auto made =
      testing::run_cached_maker(testing::python_path() + " " + script, work.path(), "", {script});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::filesystem::create_directories(work.file("repo/small/3"));
  std::filesystem::copy_file(work.file("scripted.pt"), work.file("repo/small/3/model.pt"));
  std::ofstream(work.file("repo/small/config.json"))
      << R"({"inputs": [{"name": "images", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
            "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 8,
            "dynamic_batching": {"max_queue_delay_us": 500}})";
  ServeOptions options;
  options.model_repository = work.file("repo");
  options.port = 0;
  InferenceServer server(options);
  const int port = server.bind();
  std::thread thread([&] { server.serve(); });
  torch::jit::Module holder = torch::jit::load(work.file("golden.pt"));
  const torch::Tensor input = holder.attr("input").toTensor();        // [5, 1, 28, 28]
  const torch::Tensor expected = holder.attr("expected").toTensor();  // [5, 10], computed by PyTorch
  httplib::Client client("127.0.0.1", port);
  for (int attempt = 0; attempt < 200; ++attempt) {
    auto ready = client.Get("/v2/health/ready");
    if (ready && ready->status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const Json metadata = Json::parse(client.Get("/v2/models/small")->body);
  EXPECT_EQ(metadata["platform"], "pytorch_libtorch");
  EXPECT_EQ(metadata["versions"], Json::parse(R"(["3"])"));
  const torch::Tensor values = input.contiguous();
  Json body = {
      {"inputs", Json::array({{{"name", "images"},
                               {"datatype", "FP32"},
                               {"shape", {5, 1, 28, 28}},
                               {"data", std::vector<float>(values.data_ptr<float>(),
                                                           values.data_ptr<float>() + values.numel())}}})}};
  auto reply = client.Post("/v2/models/small/versions/3/infer", body.dump(), "application/json");
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->status, 200) << reply->body;
  const auto output = Json::parse(reply->body)["outputs"][0]["data"].get<std::vector<float>>();
  ASSERT_EQ(output.size(), 50u);
  for (std::size_t index = 0; index < output.size(); ++index)
    EXPECT_NEAR(output[index], expected.flatten()[static_cast<std::int64_t>(index)].item<float>(), 1e-5);
  server.drain();
  thread.join();
}

}  // namespace
}  // namespace ipj::serve

namespace ipj::serve {
namespace {

// --threads N: the fp32 engines are timed, and a batch runtime built, on N threads, the pool batches run on
// (a runtime on every CPU would never run under a smaller fixed plan while the log said it did).
TEST(ServeThreads, FixedThreadsAreThePoolTheEnginesAreTimedOn) {
  if (!infer::xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  testing::TempDir repo;
  write_repository(repo.path(), kContractConfig);
  ServeOptions options;
  options.model_repository = repo.path();
  options.port = 0;
  options.threads = 3;  // not this machine's CPU count (1 or 2 where the tests run)
  const InferenceServer server(options);
  ASSERT_EQ(server.models().size(), 1u);
  const auto& choice = server.models()[0]->model().fp32_engine;
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->batch, 64);
  EXPECT_EQ(choice->batch_xnnpack_threads, 3) << choice->reason;
}

// Batches running at once share the plan's ATen threads (plan / the most batches running at once in the last
// 0.2 s, at least 1); --threads N gives each N.
TEST(ServeThreads, BatchesRunningAtOnceShareThePlansThreads) {
  for (const int fixed : {0, 2}) {
    ServeThreads threads(fixed);
    threads.start({device::ThreadWorkload::onednn});
    std::optional<ServeThreads::BatchScope> first(threads.enter_batch());
    const int alone = device::caller_openmp_threads();
    if (fixed == 0 && alone < 2)
      GTEST_SKIP() << "the plan has one ATen thread here (one CPU, or a busy machine)";
    EXPECT_EQ(alone, fixed == 0 ? alone : 2);
    int beside = 0;
    std::thread other([&] {
      const ServeThreads::BatchScope second = threads.enter_batch();
      beside = device::caller_openmp_threads();
    });
    other.join();
    EXPECT_EQ(beside, fixed == 0 ? std::max(1, alone / 2) : 2) << "--threads " << fixed;
    first.reset();
    int soon_after = 0, later = 0;
    std::thread next([&] {
      {
        const ServeThreads::BatchScope third = threads.enter_batch();
        soon_after = device::caller_openmp_threads();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const ServeThreads::BatchScope fourth = threads.enter_batch();
      later = device::caller_openmp_threads();
    });
    next.join();
    // alone within 0.2 s of two at once: still its share; alone after that: the plan
    EXPECT_EQ(soon_after, fixed == 0 ? std::max(1, alone / 2) : 2) << "--threads " << fixed;
    EXPECT_EQ(later, fixed == 0 ? alone : 2) << "--threads " << fixed;
  }
}

TEST(ServeLifecycle, ASignalDuringLoadingMeansServeReturnsAtOnce) {
  testing::TempDir repo;
  write_repository(repo.path(), kContractConfig);
  ServeOptions options;
  options.model_repository = repo.path();
  options.port = 0;
  InferenceServer server(options);
  server.bind();
  server.drain();  // what the signal thread does when SIGTERM arrives before serve()
  const auto start = std::chrono::steady_clock::now();
  server.serve();  // must not block
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  EXPECT_FALSE(server.ready());
}

}  // namespace
}  // namespace ipj::serve

namespace ipj::serve {
namespace {

TEST(ServeEnergy, EveryAnswerCarriesItsShareOfTheBatchEnergyUnlessSwitchedOff) {
  RunningServer running;
  auto client = running.client();
  const torch::Tensor input = torch::rand({2, 1, 28, 28});
  const std::string source = testing::machine_energy_source();
  double total = 0.0;
  // At least 20 answers and 0.5 s: the meters sample at 10 Hz.
  const auto start = std::chrono::steady_clock::now();
  for (int index = 0; index < 20 || std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500);
       ++index) {
    auto reply = client.Post("/v2/models/mlp/infer", request_body(input, false).dump(), "application/json");
    ASSERT_EQ(reply->status, 200) << reply->body;
    const Json answer = Json::parse(reply->body);
    ASSERT_TRUE(answer.contains("parameters")) << reply->body;
    EXPECT_EQ(answer["parameters"]["energy_source"], source);  // "estimated" without a sensor: it says so
    const double joules = answer["parameters"]["energy_j"].get<double>();
    EXPECT_GE(joules, 0.0);
    EXPECT_LT(joules, 1.0) << "one 2-image batch of an MLP is far below a joule: idle time leaked in";
    total += joules;
  }
  EXPECT_GT(total, 0.0);
  // Binary answers carry it in their JSON header.
  const Json header = {{"inputs", Json::array({{{"name", "input__0"},
                                                {"datatype", "FP32"},
                                                {"shape", {1, 1, 28, 28}},
                                                {"parameters", {{"binary_data_size", 784 * 4}}}}})},
                       {"parameters", {{"binary_data_output", true}}}};
  const std::string body = header.dump() + std::string(784 * 4, '\0');
  auto binary =
      client.Post("/v2/models/mlp/infer",
                  httplib::Headers{{"Inference-Header-Content-Length", std::to_string(header.dump().size())}},
                  body, "application/octet-stream");
  ASSERT_EQ(binary->status, 200) << binary->body;
  const std::size_t length = std::stoul(binary->get_header_value("Inference-Header-Content-Length"));
  EXPECT_TRUE(Json::parse(binary->body.substr(0, length))["parameters"].contains("energy_j"));

  Json off = Json::parse(kContractConfig);
  off["energy_in_response"] = false;
  RunningServer quiet(off.dump());
  auto answer =
      quiet.client().Post("/v2/models/mlp/infer", request_body(input, false).dump(), "application/json");
  ASSERT_EQ(answer->status, 200);
  EXPECT_FALSE(Json::parse(answer->body).contains("parameters")) << answer->body;
  ServeOptions no_energy;
  no_energy.measure_energy = false;
  RunningServer unmeasured(kContractConfig, no_energy);
  answer =
      unmeasured.client().Post("/v2/models/mlp/infer", request_body(input, false).dump(), "application/json");
  EXPECT_FALSE(Json::parse(answer->body).contains("parameters")) << answer->body;
}

TEST(ServeHostile, IssueReproductionsGet4xxOr200AndTheServerKeepsServing) {
  ServeOptions options;
  options.request.max_tensor_bytes = 1 << 20;
  RunningServer running(R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
      "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 512})",
                        options);
  auto client = running.client();
  const Json good = request_body(torch::rand({1, 1, 28, 28}), false);
  auto post = [&](const std::string& body, const std::string& content_type = "application/json") {
    auto reply = client.Post("/v2/models/mlp/infer", body, content_type.c_str());
    return reply ? reply->status : 0;
  };
  std::string deep_data = good.dump();
  const std::size_t data_at = deep_data.find("\"data\":") + 7;
  deep_data.replace(data_at, deep_data.find(']', data_at) + 1 - data_at,
                    std::string(80000, '[') + std::string(80000, ']'));
  EXPECT_EQ(post(deep_data), 400);
  EXPECT_EQ(
      post("{\"id\": " + std::string(300000, '[') + std::string(300000, ']') + "," + good.dump().substr(1)),
      400);
  Json timeout = good;
  timeout["parameters"] = {{"timeout", 9.3e15}};
  EXPECT_EQ(post(timeout.dump()), 200);   // clamped, not an overflowed deadline in the past
  const std::string small = good.dump();  // ~9 KB without a JSON content type: accepted
  ASSERT_GT(small.size(), 9000u);
  EXPECT_EQ(post(small, "application/x-www-form-urlencoded"), 200);
  EXPECT_EQ(post(small, "text/plain"), 200);
  // 400 images: within max_batch_size, over the 1 MiB tensor cap -> 413 before allocating.
  Json too_big = good;
  too_big["inputs"][0]["shape"] = {400, 1, 28, 28};
  EXPECT_EQ(post(too_big.dump()), 413);
  Json over_batch = good;
  over_batch["inputs"][0]["shape"] = {513, 1, 28, 28};
  EXPECT_EQ(post(over_batch.dump()), 400);
  // Two pipelined inference requests on one connection: both answered, in order.
  testing::RawConnection raw(running.port);
  Json first = good, second = good;
  first["id"] = "first";
  second["id"] = "second";
  raw.send(testing::post_request("/v2/models/mlp/infer", first.dump()) +
           testing::post_request("/v2/models/mlp/infer", second.dump()));
  EXPECT_EQ(Json::parse(testing::body_of(raw.read_response()))["id"], "first");
  EXPECT_EQ(Json::parse(testing::body_of(raw.read_response()))["id"], "second");
  EXPECT_EQ(post(good.dump()), 200);
  EXPECT_EQ(client.Get("/v2/models/mlp/infer")->status, 405);
  const std::string metrics = client.Get("/metrics")->body;
  EXPECT_NE(metrics.find("reason=\"too_large\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("ipj_http_open_connections"), std::string::npos);
}

}  // namespace
}  // namespace ipj::serve

namespace ipj::serve {
namespace {

// The trained mlp checkpoint with every weight NaN (a diverged training run), sealed like any checkpoint.
std::string nan_weight_checkpoint(const testing::TempDir& work) {
  train::TrainedModel trained = train::load_trained_model(testing::trained_checkpoint("mlp"));
  {
    torch::NoGradGuard no_grad;
    for (torch::Tensor& parameter : trained.model->parameters())
      parameter.fill_(std::numeric_limits<float>::quiet_NaN());
  }
  torch::optim::SGD optimizer(trained.model->parameters(), torch::optim::SGDOptions(0.1));
  const std::string path = work.file("nan/checkpoint.pt");
  std::filesystem::create_directories(work.file("nan"));
  train::save_checkpoint(path, *trained.model, optimizer, trained.state);
  return path;
}

// Issue 22: a damaged model's NaN outputs never leave as a 200 of nulls: 500 with a KServe error naming the
// model, on the JSON and the binary path, counted per model in /metrics; the server keeps serving.
TEST(ServeHostile, NonFiniteOutputsAreAnswered500AndCountedNeverSentAsNull) {
  testing::TempDir work;
  RunningServer running(kContractConfig, {}, nan_weight_checkpoint(work));
  auto client = running.client();
  const torch::Tensor input = torch::rand({2, 1, 28, 28});
  auto reply = client.Post("/v2/models/mlp/infer", request_body(input, false).dump(), "application/json");
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, 500) << reply->body;
  EXPECT_EQ(reply->body.find("null"), std::string::npos) << reply->body;
  const Json error = Json::parse(reply->body);
  ASSERT_TRUE(error.contains("error")) << reply->body;
  const std::string message = error["error"].get<std::string>();
  EXPECT_NE(message.find("model 'mlp'"), std::string::npos) << message;
  EXPECT_NE(message.find("non-finite"), std::string::npos) << message;
  EXPECT_NE(message.find("20 non-finite output value(s)"), std::string::npos) << message;
  const Json header = {{"inputs", Json::array({{{"name", "input__0"},
                                                {"datatype", "FP32"},
                                                {"shape", {1, 1, 28, 28}},
                                                {"parameters", {{"binary_data_size", 784 * 4}}}}})},
                       {"parameters", {{"binary_data_output", true}}}};
  auto binary =
      client.Post("/v2/models/mlp/infer",
                  httplib::Headers{{"Inference-Header-Content-Length", std::to_string(header.dump().size())}},
                  header.dump() + std::string(784 * 4, '\0'), "application/octet-stream");
  ASSERT_TRUE(binary);
  EXPECT_EQ(binary->status, 500) << binary->body;
  EXPECT_EQ(client.Get("/v2/health/ready")->status, 200);
  const std::string metrics = client.Get("/metrics")->body;
  EXPECT_EQ(
      sample_value(metrics,
                   "ipj_request_failure_total{model=\"mlp\",version=\"1\",reason=\"non_finite_output\"}"),
      2.0)
      << metrics;
  EXPECT_EQ(sample_value(metrics, "ipj_request_success_total{model=\"mlp\",version=\"1\"}"), 0.0);
  const Json stats = Json::parse(client.Get("/v2/models/mlp/stats")->body)["model_stats"][0];
  EXPECT_EQ(stats["inference_stats"]["fail"]["count"], 2);
}

// Issue 22: /metrics' joules per inference is what the answers said (the mean of their energy_j), not the
// answers plus the idle time between them; the idle energy is a series of its own.
TEST(ServeEnergy, MetricsEnergyPerInferenceIsTheMeanOfTheAnswersAndIdleIsApart) {
  RunningServer running;
  auto client = running.client();
  const std::string body = request_body(torch::rand({1, 1, 28, 28}), false).dump();
  const std::string source = testing::machine_energy_source();
  double answered_j = 0.0;
  const int requests = 12;
  for (int index = 0; index < requests; ++index) {
    if (index % 4 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(150));  // idle between batches
    auto reply = client.Post("/v2/models/mlp/infer", body, "application/json");
    ASSERT_EQ(reply->status, 200) << reply->body;
    answered_j += Json::parse(reply->body)["parameters"]["energy_j"].get<double>();
  }
  ASSERT_GT(answered_j, 0.0);
  const double xnnpack_calls_before = static_cast<double>(infer::xnnpack_runtime_calls());
  const std::string metrics = client.Get("/metrics")->body;
  // the process's count of calls XNNPACK runtimes answered, as it stood when the page was written
  const double xnnpack_calls = sample_value(metrics, "ipj_xnnpack_runtime_calls_total");
  EXPECT_GE(xnnpack_calls, xnnpack_calls_before);
  EXPECT_LE(xnnpack_calls, static_cast<double>(infer::xnnpack_runtime_calls()));
  EXPECT_NE(metrics.find("# TYPE ipj_xnnpack_runtime_calls_total counter"), std::string::npos);
  const std::string labels = "{model=\"mlp\",version=\"1\",source=\"" + source + "\"}";
  const double per_inference = sample_value(metrics, "ipj_model_energy_per_inference_joules" + labels);
  const double mean_j = answered_j / requests;
  EXPECT_NEAR(per_inference, mean_j, mean_j * 1e-9) << metrics;
  EXPECT_NEAR(sample_value(metrics, "ipj_model_energy_joules_total" + labels), answered_j, answered_j * 1e-9);
  const double idle_j = sample_value(metrics, "ipj_idle_energy_joules_total{source=\"" + source + "\"}");
  EXPECT_GT(idle_j, 0.0) << metrics;  // 0.6 s of pauses (and the warm-up) at the machine's idle power
  EXPECT_NE(metrics.find("# TYPE ipj_idle_energy_joules_total counter"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // idle only: the model's figures stay
  const std::string later = client.Get("/metrics")->body;
  EXPECT_EQ(sample_value(later, "ipj_model_energy_per_inference_joules" + labels), per_inference);
  EXPECT_GE(sample_value(later, "ipj_idle_energy_joules_total{source=\"" + source + "\"}"), idle_j);
}

}  // namespace
}  // namespace ipj::serve
