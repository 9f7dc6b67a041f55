// The in-process server of the server tests (running_server.hpp).
#include "running_server.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace ipj::serve {

const char* const kContractConfig =
    R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
  "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 64,
  "dynamic_batching": {"preferred_batch_sizes": [16, 32, 64], "max_queue_delay_us": 2000, "max_queue_size": 1024}})";

// DIR/mlp/config.json + DIR/mlp/1/model.pt: `model_file`, or the trained mlp checkpoint.
void write_repository(const std::string& root, const std::string& config, const std::string& model_file) {
  std::filesystem::create_directories(root + "/mlp/1");
  std::filesystem::copy_file(model_file.empty() ? testing::trained_checkpoint("mlp") : model_file,
                             root + "/mlp/1/model.pt");
  std::ofstream(root + "/mlp/config.json") << config;
}

RunningServer::RunningServer(const std::string& config, ServeOptions options, const std::string& model_file) {
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
  server->drain();  // a joinable thread must not be destroyed
  thread.join();
  throw std::runtime_error("server never became ready");
}

RunningServer::~RunningServer() {
  server->drain();
  thread.join();
}

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

}  // namespace ipj::serve
