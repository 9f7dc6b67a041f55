// The model repository `ipj serve` reads: DIR/<model>/config.json + DIR/<model>/<version>/model.pt
// (TorchScript, ipj checkpoint or ipj int8 file). config.json follows Triton's KServe-facing shape (see
// docs/SERVING.md); every error names the file and the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/serve/dynamic_batcher.hpp"

namespace ipj::serve {

struct TensorSpec {
  std::string name;
  std::string datatype = "FP32";  // KServe v2 datatype; ipj models take and return FP32
  std::vector<std::int64_t>
      shape;  // with -1 for variable dims; the first is the batch when max_batch_size > 0
};

struct ModelConfig {
  std::string name;
  std::vector<std::string> versions;  // numeric folders holding model.pt, ascending
  std::string directory;              // DIR/<model>
  TensorSpec input;                   // one input, one output (the models ipj serves)
  TensorSpec output;
  BatcherOptions batching;
  std::string variant = "file";  // fp32 | bf16 | jit | int8-dynamic | int8-static | file (as stored)
  // int8: "auto" (the file's engine; static int8 may run batch 1 on XNNPACK's int8 runtime) or one of this
  // build's quantized engines, which then runs every batch size
  std::string engine = "auto";
  // what the fp32 engine choice weighs (infer::RunOptions::prefer): "joules" (default) or "latency"
  infer::Preference prefer = infer::Preference::joules;
  std::vector<float> mean, std;    // preprocessing for TorchScript models
  bool energy_in_response = true;  // "energy_in_response": each reply's parameters carry energy_j + source
  Json raw;                        // config.json as given

  std::string latest_version() const { return versions.back(); }
  std::string model_path(const std::string& version) const;
  // Per-sample shape (the input shape without its batch dim), for models that need it.
  std::vector<std::int64_t> sample_shape() const;
};

// Parses one config; `name` is the folder name. Throws ipj::Error(invalid_input) naming `path` and the key.
ModelConfig parse_model_config(const Json& config, const std::string& name, const std::string& path);
// Scans the repository; throws ipj::Error(invalid_input / io) when it holds no servable model.
std::vector<ModelConfig> read_model_repository(const std::string& directory);

}  // namespace ipj::serve
