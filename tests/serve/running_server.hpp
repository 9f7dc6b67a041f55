// An in-process `ipj serve` on a loopback port for the server tests: a one-model repository (the trained mlp
// or a given TorchScript file) under a temporary directory, ready when constructed, drained when destroyed.
// Limits: the model is always named "mlp", version 1.
#pragma once

#include <httplib.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <thread>

#include "ipj/core/json_io.hpp"
#include "ipj/serve/inference_server.hpp"
#include "support/test_cache.hpp"

namespace ipj::serve {

// A KServe config for the mlp: input__0 [-1, 1, 28, 28] -> output__0 [-1, 10], batches up to 64.
extern const char* const kContractConfig;

// DIR/mlp/config.json + DIR/mlp/1/model.pt: `model_file`, or the trained mlp checkpoint.
void write_repository(const std::string& root, const std::string& config, const std::string& model_file = "");

struct RunningServer {
  testing::TempDir repo;
  std::unique_ptr<InferenceServer> server;
  std::thread thread;
  int port = 0;
  // Throws std::runtime_error when the server is not ready within ~5 s.
  explicit RunningServer(const std::string& config = kContractConfig, ServeOptions options = {},
                         const std::string& model_file = "");
  ~RunningServer();
  RunningServer(const RunningServer&) = delete;
  RunningServer& operator=(const RunningServer&) = delete;
  httplib::Client client() const { return httplib::Client("127.0.0.1", port); }
};

// A v2 infer body {"id": "req-42", "inputs": [input__0]} for `input` [B, 1, 28, 28]: its data flat or nested
// [B][1][28][28].
Json request_body(const torch::Tensor& input, bool nested);

}  // namespace ipj::serve
