// The settings of one training run (`ipj train` flags), their validation and their JSON form.
// LibTorch-free: the CLI and results code use it without LibTorch headers.
#pragma once

#include <cstdint>
#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/models/model_source.hpp"

namespace ipj::train {

struct TrainConfig {
  // A zoo name (`config.model = "cnn"`) or a user's TorchScript file (models::parse_model_source at the CLI).
  models::ModelSource model = "mlp";
  std::string data_dir = data::kDefaultDataDirectory;
  int epochs = 1;
  std::int64_t batch_size = 128;
  double learning_rate = 0.01;
  std::string optimizer = "sgd";  // sgd | adamw
  double momentum = 0.9;          // sgd only
  double weight_decay = 0.0;
  std::string schedule = "none";  // none | step | cosine
  int step_size = 0;              // step schedule: epochs per decay (0 = max(1, epochs/3))
  double step_gamma = 0.1;
  std::uint64_t seed = 0;
  int threads = 0;                  // cores to use (0 = all)
  bool tune_threads = true;         // false: Python torch's default thread settings (the seed recipe)
  std::string allocator = "tuned";  // tuned | system: glibc malloc settings (device/allocator.hpp)
  std::int64_t limit = 0;           // first N training samples (0 = all)
  std::int64_t test_limit = 0;      // first N test samples (0 = all)
  bool augment = false;
  int prefetch_batches = 4;  // background loader depth (0 = load on the training thread)
  std::int64_t eval_batch_size = 1000;
  std::string device = "cpu";       // cpu | cuda | cuda:N
  std::string precision = "fp32";   // fp32 | bf16 | fp16 | auto
  std::string loss_scale = "auto";  // none | dynamic | auto (dynamic for fp16, none otherwise)
  int accumulation_steps = 1;       // micro-batches per optimizer step (--accum)
  // contiguous | channels_last: 4-D weights and input batches in NHWC, oneDNN's fast layout for convolutions
  // and pooling on the CPU (no effect on models without 4-D weights).
  std::string memory_format = "contiguous";
  // fused | torch: SGD through CapturableSgd (one-pass momentum, gradients set to none) or torch::optim::SGD.
  std::string optimizer_impl = "fused";
  std::string compile = "none";  // none | jit (frozen TorchScript evaluation) | graphs (CUDA graphs)
  double target_acc = 0.0;       // stop once test accuracy reaches it (0 = train all epochs)
  bool measure_energy = true;    // false: no meters (for overhead comparisons); energy_source "none"
  int energy_interval_ms = 100;  // energy meter sampling period
  double cpu_tdp_w = 0.0;        // CPU power for the energy estimate where no sensor exists (0 = default)
  std::string out_dir;           // checkpoint + results.json; empty = write nothing
  bool resume = false;
};

// Throws ipj::Error(usage) naming the flag for any invalid value.
void validate(const TrainConfig& config);

Json to_json(const TrainConfig& config);
// Reads a config back (from a checkpoint or results file); missing keys keep their defaults.
TrainConfig config_from_json(const Json& json);

// For --resume: the settings that must match for the continuation to equal an uninterrupted run.
// Throws ipj::Error(usage) naming the first differing flag.
void check_resumable(const TrainConfig& saved, const TrainConfig& requested);

}  // namespace ipj::train
