// TrainConfig validation and JSON round trip.
#include "ipj/train/train_config.hpp"

#include <algorithm>
#include <cmath>

#include "ipj/core/error.hpp"
#include "ipj/models/catalog.hpp"

namespace ipj::train {
namespace {

void require(bool condition, const std::string& message) {
  if (!condition) fail(ErrorCategory::usage, message);
}

}  // namespace

void validate(const TrainConfig& config) {
  if (config.model.is_file()) {
    require(!config.model.file.empty(), "--model: empty file name");
    if (config.compile == "jit")
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
  require(config.optimizer == "sgd" || config.optimizer == "adamw",
          "--optimizer must be sgd or adamw, got '" + config.optimizer + "'");
  require(config.momentum >= 0.0 && config.momentum < 1.0, "--momentum must be in [0, 1)");
  require(config.weight_decay >= 0.0 && config.weight_decay <= 1.0, "--weight-decay must be in [0, 1]");
  require(config.schedule == "none" || config.schedule == "step" || config.schedule == "cosine",
          "--schedule must be none, step or cosine, got '" + config.schedule + "'");
  require(config.step_size >= 0, "--step-size must be >= 0");
  require(config.step_gamma > 0.0 && config.step_gamma <= 1.0, "--step-gamma must be in (0, 1]");
  require(config.allocator == "tuned" || config.allocator == "system",
          "--allocator must be tuned or system, got '" + config.allocator + "'");
  require(config.threads >= 0 && config.threads <= 4096, "--threads must be in 0..4096 (0 = all cores)");
  require(config.limit >= 0, "--limit must be >= 0 (0 = all training samples)");
  require(config.test_limit >= 0, "--test-limit must be >= 0 (0 = all test samples)");
  require(config.prefetch_batches >= 0 && config.prefetch_batches <= 64, "--prefetch must be in 0..64");
  require(config.eval_batch_size >= 1, "--eval-batch must be at least 1");
  require(config.energy_interval_ms >= 1 && config.energy_interval_ms <= 10000,
          "--energy-interval-ms must be in 1..10000");
  require(config.cpu_tdp_w >= 0.0 && config.cpu_tdp_w <= 1e5,
          "--cpu-tdp-w must be in 0..100000 W (0 = default estimate)");
  require(config.precision == "fp32" || config.precision == "bf16" || config.precision == "fp16" ||
              config.precision == "auto",
          "--precision must be fp32, bf16, fp16 or auto, got '" + config.precision + "'");
  require(config.device == "cpu" || config.device == "cuda" ||
              (config.device.rfind("cuda:", 0) == 0 && config.device.size() > 5 &&
               config.device.find_first_not_of("0123456789", 5) == std::string::npos),
          "--device must be cpu, cuda or cuda:N, got '" + config.device + "'");
  require(config.loss_scale == "none" || config.loss_scale == "dynamic" || config.loss_scale == "auto",
          "--loss-scale must be none, dynamic or auto, got '" + config.loss_scale + "'");
  require(config.accumulation_steps >= 1 && config.accumulation_steps <= 4096, "--accum must be in 1..4096");
  require(config.memory_format == "contiguous" || config.memory_format == "channels_last",
          "--memory-format must be contiguous or channels_last, got '" + config.memory_format + "'");
  require(config.optimizer_impl == "fused" || config.optimizer_impl == "torch",
          "--optimizer-impl must be fused or torch, got '" + config.optimizer_impl + "'");
  require(config.compile == "none" || config.compile == "jit" || config.compile == "graphs",
          "--compile must be none, jit or graphs, got '" + config.compile + "'");
#ifdef IPJ_WITH_CUDA
  if (config.compile == "graphs") {
    if (config.device.rfind("cuda", 0) != 0)
      fail(ErrorCategory::unsupported,
           "--compile graphs records the training step as a CUDA graph: use it with --device cuda (on the "
           "CPU use --compile jit or none)");
    require(config.optimizer == "sgd", "--compile graphs supports --optimizer sgd only, got '" +
                                           config.optimizer + "' (use --compile none for adamw)");
    require(config.accumulation_steps == 1,
            "--compile graphs records one optimizer step per batch: it cannot be combined with --accum " +
                std::to_string(config.accumulation_steps) + " (raise --batch instead)");
    require(config.loss_scale != "dynamic",
            "--compile graphs runs without loss scaling: use --precision bf16 or fp32 instead of "
            "--loss-scale dynamic");
  }
#else
  if (config.compile == "graphs")
    fail(ErrorCategory::unsupported,
         "--compile graphs captures the training step with CUDA graphs, which needs --device cuda on an "
         "IPJ_WITH_CUDA build with a GPU; this build/run has none (use --compile jit or none on CPU)");
#endif
  require(config.target_acc >= 0.0 && config.target_acc <= 1.0,
          "--target-acc must be a fraction in 0..1 (0 = none)");
  require(!config.resume || !config.out_dir.empty(), "--resume needs --out DIR (the run folder to continue)");
}

Json to_json(const TrainConfig& config) {
  return Json{{"model", config.model.label()},
              {"model_source", config.model.is_file() ? "torchscript" : "zoo"},
              {"input_shape", config.model.input_shape},
              {"data", config.data_dir},
              {"epochs", config.epochs},
              {"batch", config.batch_size},
              {"lr", config.learning_rate},
              {"optimizer", config.optimizer},
              {"momentum", config.momentum},
              {"weight_decay", config.weight_decay},
              {"schedule", config.schedule},
              {"step_size", config.step_size},
              {"step_gamma", config.step_gamma},
              {"seed", config.seed},
              {"threads", config.threads},
              {"tune_threads", config.tune_threads},
              {"allocator", config.allocator},
              {"limit", config.limit},
              {"test_limit", config.test_limit},
              {"augment", config.augment},
              {"prefetch", config.prefetch_batches},
              {"eval_batch", config.eval_batch_size},
              {"device", config.device},
              {"precision", config.precision},
              {"loss_scale", config.loss_scale},
              {"accum", config.accumulation_steps},
              {"memory_format", config.memory_format},
              {"optimizer_impl", config.optimizer_impl},
              {"compile", config.compile},
              {"target_acc", config.target_acc},
              {"measure_energy", config.measure_energy},
              {"energy_interval_ms", config.energy_interval_ms},
              {"cpu_tdp_w", config.cpu_tdp_w},
              {"out", config.out_dir}};
}

TrainConfig config_from_json(const Json& json) {
  TrainConfig config;
  auto read = [&](const char* key, auto& field) {
    if (json.contains(key) && !json[key].is_null()) field = json[key].get<std::decay_t<decltype(field)>>();
  };
  std::string model = config.model.zoo_name, model_source = "zoo";
  std::vector<std::int64_t> input_shape;
  read("model", model);
  read("model_source", model_source);
  read("input_shape", input_shape);
  config.model = model_source == "torchscript" ? models::ModelSource::torchscript(model, input_shape)
                                               : models::ModelSource(model);
  read("data", config.data_dir);
  read("epochs", config.epochs);
  read("batch", config.batch_size);
  read("lr", config.learning_rate);
  read("optimizer", config.optimizer);
  read("momentum", config.momentum);
  read("weight_decay", config.weight_decay);
  read("schedule", config.schedule);
  read("step_size", config.step_size);
  read("step_gamma", config.step_gamma);
  read("seed", config.seed);
  read("threads", config.threads);
  read("tune_threads", config.tune_threads);
  read("allocator", config.allocator);
  read("limit", config.limit);
  read("test_limit", config.test_limit);
  read("augment", config.augment);
  read("prefetch", config.prefetch_batches);
  read("eval_batch", config.eval_batch_size);
  read("device", config.device);
  read("precision", config.precision);
  read("loss_scale", config.loss_scale);
  read("accum", config.accumulation_steps);
  read("memory_format", config.memory_format);
  read("optimizer_impl", config.optimizer_impl);
  read("compile", config.compile);
  read("target_acc", config.target_acc);
  read("measure_energy", config.measure_energy);
  read("energy_interval_ms", config.energy_interval_ms);
  read("cpu_tdp_w", config.cpu_tdp_w);
  read("out", config.out_dir);
  return config;
}

void check_resumable(const TrainConfig& saved, const TrainConfig& requested) {
  const Json before = to_json(saved);
  const Json now = to_json(requested);
  // Flags that may change on resume: more epochs, threads, prefetch depth, eval batch, folder spelling.
  for (const char* key : {"model", "model_source", "input_shape", "data", "batch", "lr", "optimizer",
                          "momentum", "weight_decay", "schedule", "step_size", "step_gamma", "seed", "limit",
                          "test_limit", "augment", "precision", "loss_scale", "accum"}) {
    // Files: the path may be spelt differently and --input-shape 1,28,28 equals leaving it out; the trainer
    // compares the file's fingerprint and the resolved input shape instead (check_same_model_file).
    const bool both_files = saved.model.is_file() && requested.model.is_file();
    if (both_files && (std::string(key) == "model" || std::string(key) == "input_shape")) continue;
    if (before[key] != now[key]) {
      std::string flag = key;  // JSON keys spell flags with '_' where the CLI has '-'
      std::replace(flag.begin(), flag.end(), '_', '-');
      fail(ErrorCategory::usage, "--resume: --" + flag + " was " + before[key].dump() +
                                     " in the saved run but is " + now[key].dump() +
                                     " now; use the same value or start a new --out folder");
    }
  }
  if (saved.schedule != "none" && saved.epochs != requested.epochs) {
    fail(ErrorCategory::usage, "--resume: --epochs changes the " + saved.schedule +
                                   " learning-rate schedule; use --epochs " + std::to_string(saved.epochs));
  }
}

}  // namespace ipj::train
