// The settings of one training run (`ipj train` flags), their validation and their JSON form. Choices are
// enums (training_choices.hpp), parsed where text enters; JSON keeps their spellings, so files of earlier ipj
// versions load. LibTorch-free: the CLI and results code use it without LibTorch headers.
#pragma once

#include <cstdint>
#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/models/model_source.hpp"
#include "ipj/train/training_choices.hpp"

namespace ipj::train {

struct TrainConfig {
  // A zoo name (`config.model = "cnn"`) or a user's TorchScript file (models::parse_model_source at the CLI).
  models::ModelSource model = "mlp";
  std::string data_dir = data::kDefaultDataDirectory;
  data::DataOptions data_options;  // --resize/--channels/--mean/--std/--skip-bad-images (docs/DATA.md)
  int epochs = 1;
  std::int64_t batch_size = 128;
  double learning_rate = 0.01;
  OptimizerKind optimizer = OptimizerKind::sgd;
  double momentum = 0.9;  // sgd only
  double weight_decay = 0.0;
  ScheduleKind schedule = ScheduleKind::none;
  int step_size = 0;  // step schedule: epochs per decay (0 = max(1, epochs/3))
  double step_gamma = 0.1;
  double warmup_epochs = 0.0;  // linear learning-rate warmup over this many epochs (fractions allowed)
  std::uint64_t seed = 0;
  int threads = 0;  // cores to use (0 = all)
  // python: Python torch's default thread settings (the seed recipe). JSON: "thread_plan" (older files:
  // "tune_threads" true | false, still read).
  ThreadPlanChoice thread_plan = ThreadPlanChoice::tuned;
  AllocatorChoice allocator = AllocatorChoice::tuned;  // glibc malloc settings (device/allocator.hpp)
  std::int64_t limit = 0;                              // first N training samples (0 = all)
  std::int64_t test_limit = 0;                         // first N test samples (0 = all)
  bool augment = false;
  int prefetch_batches = 4;  // background loader depth (0 = load on the training thread)
  std::int64_t eval_batch_size = 1000;
  DeviceSpec device;                                // cpu (default) | cuda | cuda:N
  Precision precision = Precision::fp32;            // automatic: the fastest native precision here
  LossScaling loss_scale = LossScaling::automatic;  // automatic: dynamic for fp16, none otherwise
  int accum = 1;                                    // gradient accumulation: micro-batches per optimizer step
  // contiguous | channels_last: 4-D weights and input batches in NHWC, oneDNN's fast layout for convolutions
  // and pooling on the CPU (no effect on models without 4-D weights).
  MemoryFormat memory_format = MemoryFormat::contiguous;
  // fused | torch: SGD through CapturableSgd (one-pass momentum, gradients set to none) or torch::optim::SGD.
  OptimizerImpl optimizer_impl = OptimizerImpl::fused;
  CompileMode compile = CompileMode::none;  // jit: frozen TorchScript evaluation; graphs: CUDA graphs
  double target_acc = 0.0;                  // stop once test accuracy reaches it (0 = train all epochs)
  bool measure_energy = true;    // false: no meters (for overhead comparisons); energy_source "none"
  int energy_interval_ms = 100;  // energy meter sampling period
  double cpu_tdp_w = 0.0;        // CPU power for the energy estimate where no sensor exists (0 = default)
  std::string out_dir;           // checkpoint + results.json; empty = write nothing
  bool resume = false;
  // Processes training together (set by data-parallel training, not a flag; batch_size is their global
  // batch). Recorded in results; --resume may change it.
  int world_size = 1;
};

// Throws ipj::Error(usage) naming the flag for any invalid value or combination.
void validate(const TrainConfig& config);

// The JSON form, the resume check and the flags come from one table: train_settings.hpp (defined in
// train_settings.cpp).
Json to_json(const TrainConfig& config);
// Reads a config back (from a checkpoint or results file, a recipe or a tuner's trial); missing or null keys
// keep their defaults; older keys are still read ("tune_threads"). Throws ipj::Error(invalid_input) naming
// the key for a value of the wrong JSON type or a choice it does not know.
TrainConfig config_from_json(const Json& json);

// For --resume: the settings that must match (the table's resumable rows) for the continuation to equal an
// uninterrupted run. Throws ipj::Error(usage) naming the first differing flag.
void check_resumable(const TrainConfig& saved, const TrainConfig& requested);

}  // namespace ipj::train
