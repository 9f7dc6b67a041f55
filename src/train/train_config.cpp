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
  require(config.accumulation_steps >= 1 && config.accumulation_steps <= 4096, "--accum must be in 1..4096");
#ifdef IPJ_WITH_CUDA
  if (config.compile == CompileMode::graphs) {
    if (!config.device.cuda)
      fail(ErrorCategory::unsupported,
           "--compile graphs records the training step as a CUDA graph: use it with --device cuda (on the "
           "CPU use --compile jit or none)");
    require(config.optimizer == OptimizerKind::sgd, "--compile graphs supports --optimizer sgd only, got '" +
                                                        choice_name(config.optimizer) +
                                                        "' (use --compile none for adamw)");
    require(config.accumulation_steps == 1,
            "--compile graphs records one optimizer step per batch: it cannot be combined with --accum " +
                std::to_string(config.accumulation_steps) + " (raise --batch instead)");
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

Json to_json(const TrainConfig& config) {
  return Json{{"model", config.model.label()},
              {"model_source", config.model.is_file() ? "torchscript" : "zoo"},
              {"input_shape", config.model.input_shape},
              {"data", config.data_dir},
              {"data_options", data::to_json(config.data_options)},
              {"epochs", config.epochs},
              {"batch", config.batch_size},
              {"lr", config.learning_rate},
              {"optimizer", choice_name(config.optimizer)},
              {"momentum", config.momentum},
              {"weight_decay", config.weight_decay},
              {"schedule", choice_name(config.schedule)},
              {"step_size", config.step_size},
              {"step_gamma", config.step_gamma},
              {"warmup_epochs", config.warmup_epochs},
              {"seed", config.seed},
              {"threads", config.threads},
              {"tune_threads", config.thread_plan == ThreadPlanChoice::tuned},
              {"allocator", choice_name(config.allocator)},
              {"limit", config.limit},
              {"test_limit", config.test_limit},
              {"augment", config.augment},
              {"prefetch", config.prefetch_batches},
              {"eval_batch", config.eval_batch_size},
              {"device", device_name(config.device)},
              {"precision", choice_name(config.precision)},
              {"loss_scale", choice_name(config.loss_scale)},
              {"accum", config.accumulation_steps},
              {"memory_format", choice_name(config.memory_format)},
              {"optimizer_impl", choice_name(config.optimizer_impl)},
              {"compile", choice_name(config.compile)},
              {"target_acc", config.target_acc},
              {"measure_energy", config.measure_energy},
              {"energy_interval_ms", config.energy_interval_ms},
              {"cpu_tdp_w", config.cpu_tdp_w},
              {"out", config.out_dir},
              {"world_size", config.world_size}};
}

TrainConfig config_from_json(const Json& json) {
  TrainConfig config;
  auto read = [&](const char* key, auto& field) {
    if (json.contains(key) && !json[key].is_null()) field = json[key].get<std::decay_t<decltype(field)>>();
  };
  auto read_choice = [&](const char* key, auto& field) {
    if (json.contains(key) && !json[key].is_null())
      field = parse_choice<std::decay_t<decltype(field)>>(json[key].get<std::string>(), key);
  };
  std::string model = config.model.zoo_name, model_source = "zoo";
  std::vector<std::int64_t> input_shape;
  read("model", model);
  read("model_source", model_source);
  read("input_shape", input_shape);
  config.model = model_source == "torchscript" ? models::ModelSource::torchscript(model, input_shape)
                                               : models::ModelSource(model);
  read("data", config.data_dir);
  if (json.contains("data_options")) config.data_options = data::data_options_from_json(json["data_options"]);
  read("epochs", config.epochs);
  read("batch", config.batch_size);
  read("lr", config.learning_rate);
  read_choice("optimizer", config.optimizer);
  read("momentum", config.momentum);
  read("weight_decay", config.weight_decay);
  read_choice("schedule", config.schedule);
  read("step_size", config.step_size);
  read("step_gamma", config.step_gamma);
  read("warmup_epochs", config.warmup_epochs);
  read("seed", config.seed);
  read("threads", config.threads);
  bool tune_threads = true;
  read("tune_threads", tune_threads);
  config.thread_plan = tune_threads ? ThreadPlanChoice::tuned : ThreadPlanChoice::python;
  read_choice("allocator", config.allocator);
  read("limit", config.limit);
  read("test_limit", config.test_limit);
  read("augment", config.augment);
  read("prefetch", config.prefetch_batches);
  read("eval_batch", config.eval_batch_size);
  std::string device = "cpu";
  read("device", device);
  config.device = parse_device(device, "device");
  read_choice("precision", config.precision);
  read_choice("loss_scale", config.loss_scale);
  read("accum", config.accumulation_steps);
  read_choice("memory_format", config.memory_format);
  read_choice("optimizer_impl", config.optimizer_impl);
  read_choice("compile", config.compile);
  read("target_acc", config.target_acc);
  read("measure_energy", config.measure_energy);
  read("energy_interval_ms", config.energy_interval_ms);
  read("cpu_tdp_w", config.cpu_tdp_w);
  read("out", config.out_dir);
  read("world_size", config.world_size);
  return config;
}

void check_resumable(const TrainConfig& saved, const TrainConfig& requested) {
  const Json before = to_json(saved);
  const Json now = to_json(requested);
  // Flags that may change on resume: more epochs, threads, prefetch depth, eval batch, folder spelling.
  for (const char* key :
       {"model",      "model_source",  "input_shape", "data",         "data_options", "batch",
        "lr",         "optimizer",     "momentum",    "weight_decay", "schedule",     "step_size",
        "step_gamma", "warmup_epochs", "seed",        "limit",        "test_limit",   "augment",
        "precision",  "loss_scale",    "accum"}) {
    // Files: the path may be spelt differently and --input-shape 1,28,28 equals leaving it out; the trainer
    // compares the file's fingerprint and the resolved input shape instead (check_same_model_file).
    const bool both_files = saved.model.is_file() && requested.model.is_file();
    if (both_files && (std::string(key) == "model" || std::string(key) == "input_shape")) continue;
    if (before[key] != now[key]) {
      std::string flag = key;  // JSON keys spell flags with '_' where the CLI has '-'
      std::replace(flag.begin(), flag.end(), '_', '-');
      if (flag == "data-options") flag = "resize/--channels/--mean/--std/--skip-bad-images";
      fail(ErrorCategory::usage, "--resume: --" + flag + " was " + before[key].dump() +
                                     " in the saved run but is " + now[key].dump() +
                                     " now; use the same value or start a new --out folder");
    }
  }
  if (saved.schedule != ScheduleKind::none && saved.epochs != requested.epochs) {
    fail(ErrorCategory::usage, "--resume: --epochs changes the " + choice_name(saved.schedule) +
                                   " learning-rate schedule; use --epochs " + std::to_string(saved.epochs));
  }
}

}  // namespace ipj::train
