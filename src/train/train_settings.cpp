// The settings table of `ipj train` and what is generated from it in the library: TrainConfig's JSON form
// (to_json, config_from_json with the older keys still read) and the --resume check. Rows are in the order of
// the JSON form; the CLI (apps/ipj/train_flags.cpp) adds the flags in the same order.
#include "ipj/train/train_settings.hpp"

#include <algorithm>
#include <type_traits>

#include "ipj/core/error.hpp"

namespace ipj::train {
namespace {

[[noreturn]] void fail_json_type(const std::string& key, const char* expected, const Json& value) {
  fail(ErrorCategory::invalid_input, "\"" + key + "\" must be a " + expected + ", got " + value.dump());
}

template <typename T>
const char* json_type_name() {
  if constexpr (std::is_same_v<T, bool>) return "boolean";
  if constexpr (std::is_arithmetic_v<T>) return "number";
  if constexpr (std::is_same_v<T, std::string> || std::is_enum_v<T>) return "string";
  return "array";
}

// A text from a file that does not parse (a choice, a device) is bad input naming the key, not a bad flag.
template <typename Parse>
auto parse_from_file(Parse parse) {
  try {
    return parse();
  } catch (const Error& error) {
    if (error.category() != ErrorCategory::usage) throw;
    fail(ErrorCategory::invalid_input, error.what());
  }
}

// `json[key]` into `field`; absent or null keeps the field as it is.
template <typename T>
void read_key(const Json& json, const std::string& key, T& field) {
  if (!json.contains(key) || json[key].is_null()) return;
  const Json& value = json[key];
  if constexpr (std::is_enum_v<T>) {
    if (!value.is_string()) fail_json_type(key, "string", value);
    field = parse_from_file([&] { return parse_choice<T>(value.get<std::string>(), key); });
  } else {
    try {
      field = value.get<T>();
    } catch (const nlohmann::json::exception&) {
      fail_json_type(key, json_type_name<T>(), value);
    }
  }
}

Json write_field(const TrainConfig& config, const TrainSetting& setting) {
  return std::visit(
      [&](auto pointer) -> Json {
        if constexpr (std::is_same_v<decltype(pointer), std::monostate>) {
          fail(ErrorCategory::internal, "setting " + setting.key + " has neither a field nor a writer");
        } else {
          const auto& value = config.*pointer;
          if constexpr (std::is_enum_v<std::decay_t<decltype(value)>>) {
            return choice_name(value);
          } else {
            return value;
          }
        }
      },
      setting.field);
}

void read_field(TrainConfig& config, const TrainSetting& setting, const Json& json) {
  std::visit(
      [&](auto pointer) {
        if constexpr (!std::is_same_v<decltype(pointer), std::monostate>)
          read_key(json, setting.key, config.*pointer);
      },
      setting.field);
}

// The composite values: the model (three keys, read together), the data options and the device.
Json write_model(const TrainConfig& config) {
  return config.model.label();
}
Json write_model_source(const TrainConfig& config) {
  return config.model.is_file() ? "torchscript" : "zoo";
}
Json write_input_shape(const TrainConfig& config) {
  return config.model.input_shape;
}
void read_model(TrainConfig& config, const Json& json) {
  std::string model = config.model.zoo_name, source = "zoo";
  std::vector<std::int64_t> input_shape;
  read_key(json, "model", model);
  read_key(json, "model_source", source);
  read_key(json, "input_shape", input_shape);
  config.model = source == "torchscript" ? models::ModelSource::torchscript(model, input_shape)
                                         : models::ModelSource(model);
}
Json write_data_options(const TrainConfig& config) {
  return data::to_json(config.data_options);
}
void read_data_options(TrainConfig& config, const Json& json) {
  if (!json.contains("data_options") || json["data_options"].is_null()) return;
  try {
    config.data_options = data::data_options_from_json(json["data_options"]);
  } catch (const nlohmann::json::exception&) {
    fail_json_type("data_options", "object", json["data_options"]);
  }
}
Json write_device(const TrainConfig& config) {
  return device_name(config.device);
}
void read_device(TrainConfig& config, const Json& json) {
  std::string device = "cpu";
  read_key(json, "device", device);
  config.device = parse_from_file([&] { return parse_device(device, "device"); });
}
// Before "thread_plan", results and recipes held "tune_threads": true (tuned) | false (python).
Json thread_plan_from_tune_threads(const Json& value) {
  if (value.is_null()) return value;
  if (!value.is_boolean()) fail_json_type("tune_threads", "boolean", value);
  return choice_name(value.get<bool>() ? ThreadPlanChoice::tuned : ThreadPlanChoice::python);
}

ValueRange whole_in(double min, double max) {
  return {ValueRange::Kind::whole, min, max};
}
ValueRange finite_in(double min, double max) {
  return {ValueRange::Kind::number, min, max};
}
ValueRange positive_up_to(double max) {
  return {ValueRange::Kind::positive, 0.0, max};
}

TrainSetting field_row(std::string key, std::string flag, std::string help, SettingField field,
                       unsigned roles, ValueRange range = {}) {
  TrainSetting setting;
  setting.key = std::move(key);
  setting.flag = std::move(flag);
  setting.help = std::move(help);
  setting.field = field;
  setting.roles = roles;
  setting.range = range;
  return setting;
}

TrainSetting composite_row(std::string key, std::string flag, std::string help, unsigned roles,
                           Json (*write)(const TrainConfig&), void (*read)(TrainConfig&, const Json&),
                           std::string label = "") {
  TrainSetting setting = field_row(std::move(key), std::move(flag), std::move(help), std::monostate{}, roles);
  setting.write = write;
  setting.read = read;
  setting.label = std::move(label);
  return setting;
}

constexpr unsigned kShow = kShowDefault;
constexpr unsigned kTuned = kRecipe | kTunable;  // a recipe setting ipj tune may change

// Which model, on which data.
void add_what_rows(std::vector<TrainSetting>& rows) {
  using C = TrainConfig;
  rows.push_back(
      composite_row("model", "--model",
                    "mlp | cnn | resnet18 | resnet50, or a TorchScript file (torch.jit.script/trace .save); "
                    "a file's trained weights go to OUT/model.pt",
                    kResumable | kRecipe | kShow, write_model, read_model));
  rows.push_back(
      composite_row("model_source", "", "", kResumable | kRecipe, write_model_source, nullptr, "--model"));
  rows.push_back(
      composite_row("input_shape", "--input-shape", "", kResumable | kRecipe, write_input_shape, nullptr));
  rows.push_back(
      field_row("data", "--data",
                "Data folder: IDX (.gz/plain), CIFAR-10 binary, or images in DIR/train/<class>/*.png|jpg "
                "and DIR/test/<class>/",
                &C::data_dir, kResumable | kShow));
  rows.push_back(composite_row("data_options", "", "", kResumable, write_data_options, read_data_options,
                               "--resize/--channels/--mean/--std/--skip-bad-images"));
}

// How it trains: the optimisation.
void add_optimisation_rows(std::vector<TrainSetting>& rows) {
  using C = TrainConfig;
  const unsigned same = kResumable | kTuned | kShow;  // must match on --resume
  rows.push_back(
      field_row("epochs", "--epochs", "Training epochs", &C::epochs, kTuned | kShow, whole_in(1, 1000000)));
  rows.push_back(
      field_row("batch", "--batch", "Mini-batch size", &C::batch_size, same, whole_in(1, kMaxBatchFlag)));
  rows.push_back(field_row("lr", "--lr", "Learning rate", &C::learning_rate, same, positive_up_to(100.0)));
  rows.push_back(field_row("optimizer", "--optimizer", "sgd | adamw", &C::optimizer, same));
  rows.push_back(
      field_row("momentum", "--momentum", "SGD momentum", &C::momentum, same, finite_in(0.0, 0.9999)));
  rows.push_back(field_row("weight_decay", "--weight-decay", "Weight decay", &C::weight_decay, same,
                           finite_in(0.0, 1.0)));
  rows.push_back(field_row("schedule", "--schedule", "none | step | cosine", &C::schedule, same));
  rows.push_back(field_row("step_size", "--step-size", "Step schedule: epochs per decay (0 = epochs/3)",
                           &C::step_size, kResumable | kTuned, whole_in(0, 1000000)));
  rows.push_back(field_row("step_gamma", "--step-gamma", "Step schedule: decay factor", &C::step_gamma, same,
                           positive_up_to(1.0)));
  rows.push_back(field_row("warmup_epochs", "--warmup-epochs",
                           "Linear learning-rate warmup over this many epochs (fractions allowed; 0 = none)",
                           &C::warmup_epochs, same, finite_in(0.0, 1000000.0)));
  rows.push_back(field_row("seed", "--seed", "Seed for initialisation, shuffling and augmentation", &C::seed,
                           kResumable | kShow, {ValueRange::Kind::seed, 0.0, 0.0}));
}

// How fast it runs, and on what.
void add_speed_rows(std::vector<TrainSetting>& rows) {
  using C = TrainConfig;
  rows.push_back(field_row("threads", "--threads", "Cores to use (0 = all)", &C::threads, kTuned | kShow,
                           whole_in(0, 4096)));
  TrainSetting plan = field_row("thread_plan", "--thread-plan",
                                "tuned (per precision and model) | python (Python torch's default)",
                                &C::thread_plan, kTuned | kShow);
  plan.alias = "tune_threads";
  plan.from_alias = thread_plan_from_tune_threads;
  rows.push_back(plan);
  rows.push_back(
      field_row("allocator", "--allocator",
                "tuned (reuse large freed blocks: no page faults per batch) | system (glibc defaults)",
                &C::allocator, kTuned | kShow));
  rows.push_back(field_row("limit", "--limit", "Use only the first N training samples (0 = all)", &C::limit,
                           kResumable, whole_in(0, kMaxSampleFlag)));
  rows.push_back(field_row("test_limit", "--test-limit", "Use only the first N test samples (0 = all)",
                           &C::test_limit, kResumable, whole_in(0, kMaxSampleFlag)));
  rows.push_back(field_row("augment", "--augment", "Random crop (pad 4) + horizontal flip", &C::augment,
                           kResumable | kTuned));
  rows.push_back(field_row("prefetch", "--prefetch",
                           "Batches prepared ahead on a background thread (0 = off)", &C::prefetch_batches,
                           kTuned | kShow, whole_in(0, 64)));
  rows.push_back(field_row("eval_batch", "--eval-batch", "Evaluation batch size", &C::eval_batch_size,
                           kTuned | kShow, whole_in(1, kMaxBatchFlag)));
  rows.push_back(composite_row("device", "--device",
                               "cpu | cuda | cuda:N (CUDA needs an IPJ_WITH_CUDA build)", kRecipe | kShow,
                               write_device, read_device));
  rows.push_back(
      field_row("precision", "--precision",
                "fp32 | bf16 | fp16 | auto (fastest precision native here: bf16 with AVX512_BF16/AMX)",
                &C::precision, kResumable | kTuned | kShow));
  rows.push_back(field_row("loss_scale", "--loss-scale",
                           "none | dynamic | auto (dynamic GradScaler for fp16)", &C::loss_scale,
                           kResumable | kTuned | kShow));
  rows.push_back(field_row("accum", "--accum", "Gradient accumulation: micro-batches per optimizer step",
                           &C::accum, kResumable | kTuned | kShow, whole_in(1, 4096)));
  rows.push_back(
      field_row("memory_format", "--memory-format",
                "contiguous | channels_last (NHWC weights and batches: faster convolutions and pooling)",
                &C::memory_format, kTuned | kShow));
  rows.push_back(field_row(
      "optimizer_impl", "--optimizer-impl",
      "fused (SGD: a hand-written step for chains of Linear layers such as the mlp on the CPU, else "
      "autograd) | autograd (autograd, then SGD with one-pass momentum and gradients set to none) | "
      "torch (torch::optim as is)",
      &C::optimizer_impl, kTuned | kShow));
  rows.push_back(field_row(
      "compile", "--compile",
      "none | jit (evaluate through frozen TorchScript: mlp, cnn) | graphs (CUDA graphs, GPU builds)",
      &C::compile, kTuned | kShow));
}

// When to stop, what to measure, where to write.
void add_run_rows(std::vector<TrainSetting>& rows) {
  using C = TrainConfig;
  rows.push_back(field_row("target_acc", "--target-acc",
                           "Stop once test accuracy reaches this fraction (0 = off)", &C::target_acc, kRecipe,
                           finite_in(0.0, 1.0)));
  rows.push_back(field_row("measure_energy", "--no-energy",
                           "Do not measure energy (overhead comparisons); energy_source is \"none\"",
                           &C::measure_energy, 0));
  rows.push_back(field_row("energy_interval_ms", "--energy-interval-ms", "Energy meter sampling period",
                           &C::energy_interval_ms, kShow, whole_in(1, 10000)));
  rows.push_back(field_row("cpu_tdp_w", "--cpu-tdp-w",
                           "CPU power at full load for the energy estimate (0 = default)", &C::cpu_tdp_w, 0,
                           finite_in(0.0, 100000.0)));
  rows.push_back(field_row("out", "--out",
                           "Run folder for checkpoint.pt and results.json (default runs/MODEL-TIME)",
                           &C::out_dir, 0));
  rows.push_back(field_row("world_size", "", "", &C::world_size, 0));  // set by data-parallel training
  rows.push_back(
      field_row("", "--resume", "Continue the run in --out from its last checkpoint", &C::resume, 0));
}

}  // namespace

std::string TrainSetting::name() const {
  if (!flag.empty()) return flag;
  if (!label.empty()) return label;
  std::string name = key;  // JSON keys spell flags with '_' where the CLI has '-'
  std::replace(name.begin(), name.end(), '_', '-');
  return "--" + name;
}

const std::vector<TrainSetting>& train_settings() {
  static const std::vector<TrainSetting> rows = [] {
    std::vector<TrainSetting> all;
    add_what_rows(all);
    add_optimisation_rows(all);
    add_speed_rows(all);
    add_run_rows(all);
    return all;
  }();
  return rows;
}

const TrainSetting* find_setting(const std::string& key) {
  if (key.empty()) return nullptr;
  for (const TrainSetting& setting : train_settings())
    if (setting.key == key || setting.alias == key) return &setting;
  return nullptr;
}

std::vector<std::string> setting_keys(SettingRole role) {
  std::vector<std::string> keys;
  for (const TrainSetting& setting : train_settings())
    if (setting.has(role) && !setting.key.empty()) keys.push_back(setting.key);
  return keys;
}

Json with_current_keys(const Json& settings, bool lists) {
  if (!settings.is_object()) return settings;
  Json current = Json::object();
  for (const auto& [key, value] : settings.items()) {
    const TrainSetting* setting = find_setting(key);
    if (setting == nullptr || setting->alias != key) {
      current[key] = value;
      continue;
    }
    if (settings.contains(setting->key)) continue;  // the current key wins
    if (!lists || !value.is_array()) {
      current[setting->key] = setting->from_alias(value);
      continue;
    }
    Json values = Json::array();
    for (const Json& item : value)
      values.push_back(setting->from_alias(item));
    current[setting->key] = values;
  }
  return current;
}

Json to_json(const TrainConfig& config) {
  Json json = Json::object();
  for (const TrainSetting& setting : train_settings())
    if (!setting.key.empty())
      json[setting.key] = setting.write ? setting.write(config) : write_field(config, setting);
  return json;
}

TrainConfig config_from_json(const Json& json) {
  const Json current = with_current_keys(json);
  TrainConfig config;
  for (const TrainSetting& setting : train_settings()) {
    if (setting.key.empty()) continue;
    if (setting.read)
      setting.read(config, current);
    else
      read_field(config, setting, current);
  }
  return config;
}

void check_resumable(const TrainConfig& saved, const TrainConfig& requested) {
  const Json before = to_json(saved);
  const Json now = to_json(requested);
  const bool both_files = saved.model.is_file() && requested.model.is_file();
  for (const TrainSetting& setting : train_settings()) {
    if (!setting.has(kResumable) || setting.key.empty()) continue;
    // Files: the path may be spelt differently and --input-shape 1,28,28 equals leaving it out; the trainer
    // compares the file's fingerprint and the resolved input shape instead (check_same_model_file).
    if (both_files && (setting.key == "model" || setting.key == "input_shape")) continue;
    if (before[setting.key] != now[setting.key])
      fail(ErrorCategory::usage, "--resume: " + setting.name() + " was " + before[setting.key].dump() +
                                     " in the saved run but is " + now[setting.key].dump() +
                                     " now; use the same value or start a new --out folder");
  }
  if (saved.schedule != ScheduleKind::none && saved.epochs != requested.epochs) {
    fail(ErrorCategory::usage, "--resume: --epochs changes the " + choice_name(saved.schedule) +
                                   " learning-rate schedule; use --epochs " + std::to_string(saved.epochs));
  }
}

}  // namespace ipj::train
