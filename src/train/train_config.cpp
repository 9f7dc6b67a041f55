// TrainConfig validation (the JSON form and the resume check are generated from the settings table:
// train_settings.cpp).
#include "ipj/train/train_config.hpp"

#include <cmath>

#include "ipj/core/error.hpp"
#include "ipj/models/catalog.hpp"

namespace ipj::train {
namespace {

void require(bool condition, const std::string& message) {
  if (!condition) fail(ErrorCategory::usage, message);
}

}  // namespace

DeviceSpec parse_device(const std::string& text, const std::string& setting) {
  if (text == "cpu") return DeviceSpec{};
  if (text == "cuda") return DeviceSpec{true, -1};
  const bool indexed = text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() <= 9 &&
                       text.find_first_not_of("0123456789", 5) == std::string::npos;
  if (!indexed) fail(ErrorCategory::usage, setting + " must be cpu, cuda or cuda:N, got '" + text + "'");
  return DeviceSpec{true, std::stoi(text.substr(5))};
}

std::string device_name(const DeviceSpec& device) {
  if (!device.cuda) return "cpu";
  return device.index < 0 ? "cuda" : "cuda:" + std::to_string(device.index);
}

void validate(const TrainConfig& config) {
  if (config.model.is_file()) {
    require(!config.model.file.empty(), "--model: empty file name");
    if (config.compile == CompileMode::jit)
      fail(
          ErrorCategory::unsupported,
          "--compile jit builds ipj's own TorchScript program of mlp/cnn; a TorchScript model from a file is "
          "evaluated as it is: use --compile none");
  } else {
    models::require_known_model(config.model.zoo_name);
  }
  require(config.epochs >= 1, "--epochs must be at least 1, got " + std::to_string(config.epochs));
  require(config.batch_size >= 1, "--batch must be at least 1, got " + std::to_string(config.batch_size));
  require(std::isfinite(config.learning_rate) && config.learning_rate > 0.0 && config.learning_rate <= 100.0,
          "--lr must be a positive number up to 100, got " + std::to_string(config.learning_rate));
  require(config.momentum >= 0.0 && config.momentum < 1.0, "--momentum must be in [0, 1)");
  require(config.weight_decay >= 0.0 && config.weight_decay <= 1.0, "--weight-decay must be in [0, 1]");
  require(config.step_size >= 0, "--step-size must be >= 0");
  require(config.step_gamma > 0.0 && config.step_gamma <= 1.0, "--step-gamma must be in (0, 1]");
  require(std::isfinite(config.warmup_epochs) && config.warmup_epochs >= 0.0 &&
              config.warmup_epochs <= config.epochs,
          "--warmup-epochs must be in 0..--epochs (" + std::to_string(config.epochs) + "), got " +
              std::to_string(config.warmup_epochs));
  require(config.threads >= 0 && config.threads <= 4096, "--threads must be in 0..4096 (0 = all cores)");
  require(config.limit >= 0, "--limit must be >= 0 (0 = all training samples)");
  require(config.test_limit >= 0, "--test-limit must be >= 0 (0 = all test samples)");
  require(config.prefetch_batches >= 0 && config.prefetch_batches <= 64, "--prefetch must be in 0..64");
  require(config.eval_batch_size >= 1, "--eval-batch must be at least 1");
  require(config.energy_interval_ms >= 1 && config.energy_interval_ms <= 10000,
          "--energy-interval-ms must be in 1..10000");
  require(config.cpu_tdp_w >= 0.0 && config.cpu_tdp_w <= 1e5,
          "--cpu-tdp-w must be in 0..100000 W (0 = default estimate)");
  require(config.accum >= 1 && config.accum <= 4096, "--accum must be in 1..4096");
#ifdef IPJ_WITH_CUDA
  if (config.compile == CompileMode::graphs) {
    if (!config.device.cuda)
      fail(ErrorCategory::unsupported,
           "--compile graphs records the training step as a CUDA graph: use it with --device cuda (on the "
           "CPU use --compile jit or none)");
    require(config.optimizer == OptimizerKind::sgd, "--compile graphs supports --optimizer sgd only, got '" +
                                                        choice_name(config.optimizer) +
                                                        "' (use --compile none for adamw)");
    require(config.accum == 1,
            "--compile graphs records one optimizer step per batch: it cannot be combined with --accum " +
                std::to_string(config.accum) + " (raise --batch instead)");
    require(config.loss_scale != LossScaling::dynamic,
            "--compile graphs runs without loss scaling: use --precision bf16 or fp32 instead of "
            "--loss-scale dynamic");
  }
#else
  if (config.compile == CompileMode::graphs)
    fail(ErrorCategory::unsupported,
         "--compile graphs captures the training step with CUDA graphs, which needs --device cuda on an "
         "IPJ_WITH_CUDA build with a GPU; this build/run has none (use --compile jit or none on CPU)");
#endif
  require(config.target_acc >= 0.0 && config.target_acc <= 1.0,
          "--target-acc must be a fraction in 0..1 (0 = none)");
  require(!config.resume || !config.out_dir.empty(), "--resume needs --out DIR (the run folder to continue)");
  require(config.world_size >= 1, "WORLD_SIZE must be at least 1");
}

}  // namespace ipj::train
