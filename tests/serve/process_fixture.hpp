// Shared by the tests that start real `ipj serve` processes: a repository holding the trained mlp under a
// config (a batched one by default).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "inference_fixture.hpp"

namespace ipj::serve::process_fixture {

inline const char* kBatchedConfig =
    R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
  "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 16,
  "dynamic_batching": {"preferred_batch_sizes": [16], "max_queue_delay_us": 1000, "max_queue_size": 256}})";

inline std::string make_repository(const testing::TempDir& work, const std::string& config = kBatchedConfig,
                                   const std::string& version = "1") {
  const std::string root = work.file("repo");
  std::filesystem::create_directories(root + "/mlp/" + version);
  std::filesystem::copy_file(testing::trained_checkpoint("mlp"), root + "/mlp/" + version + "/model.pt",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(root + "/mlp/config.json") << config;
  return root;
}

}  // namespace ipj::serve::process_fixture
