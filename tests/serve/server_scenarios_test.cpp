// `ipj serve` over real HTTP on loopback, continued from server_test.cpp: `ipj load` against a running
// server, a user's TorchScript file answering PyTorch's own outputs, the thread plan batches run on, energy
// in every answer and in /metrics, the issue-15 request reproductions and a NaN-weight model answered 500.
#include <gtest/gtest.h>
#include <httplib.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "inference_fixture.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/inference_model.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/serve/inference_server.hpp"
#include "ipj/serve/serve_threads.hpp"
#include "ipj/train/checkpoint.hpp"
#include "raw_http.hpp"
#include "running_server.hpp"
#include "support/test_cache.hpp"

namespace ipj::serve {
namespace {
using testing::sample_value;
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
  const double onednn_calls_before = static_cast<double>(infer::onednn_runtime_calls());
  const std::string metrics = client.Get("/metrics")->body;
  // the process's count of calls XNNPACK runtimes answered, as it stood when the page was written
  const double xnnpack_calls = sample_value(metrics, "ipj_xnnpack_runtime_calls_total");
  EXPECT_GE(xnnpack_calls, xnnpack_calls_before);
  EXPECT_LE(xnnpack_calls, static_cast<double>(infer::xnnpack_runtime_calls()));
  EXPECT_NE(metrics.find("# TYPE ipj_xnnpack_runtime_calls_total counter"), std::string::npos);
  const double onednn_calls = sample_value(metrics, "ipj_onednn_runtime_calls_total");  // oneDNN's, the same
  EXPECT_GE(onednn_calls, onednn_calls_before);
  EXPECT_LE(onednn_calls, static_cast<double>(infer::onednn_runtime_calls()));
  EXPECT_NE(metrics.find("# TYPE ipj_onednn_runtime_calls_total counter"), std::string::npos);
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
