// Model-source-dependent parts of a run: model_info, file fingerprints on resume, the generator state and
// the trained TorchScript file.
#include "ipj/train/model_setup.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <filesystem>
#include <mutex>

#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/models/script_classifier.hpp"

namespace ipj::train {

void fill_inputs_from_trained_info(const std::string& info_text, const std::string& path,
                                   std::vector<std::int64_t>& input_shape, std::vector<float>& mean,
                                   std::vector<float>& std) {
  if (info_text.empty()) return;
  try {
    const Json info = parse_json_text(info_text, "'" + path + "'");
    if (input_shape.empty() && info.contains("model_input_shape"))
      input_shape = info.at("model_input_shape").get<std::vector<std::int64_t>>();
    if (mean.empty() && std.empty() && info.contains("mean") && info.contains("std")) {
      mean = info.at("mean").get<std::vector<float>>();
      std = info.at("std").get<std::vector<float>>();
    }
  } catch (const std::exception& error) {  // not JSON, too deep (ipj::Error), or a wrong type
    fail(ErrorCategory::invalid_input, "'" + path + "': its " + std::string(kTorchScriptInfoName) +
                                           " (written by ipj train) is damaged: " + error.what() +
                                           "; give --input-shape, --mean and --std, or retrain");
  }
}

data::DataRecord trained_data_record(const Json& model_info, const Json& config, const std::string& path) {
  const std::string where = "'" + path + "'";
  if (model_info.is_object() && model_info.contains("data"))
    return data::data_record_from_json(model_info["data"], where);
  data::DataRecord record;
  if (!config.is_object() || !config.contains("data")) return record;
  try {
    record.directory = config.at("data").get<std::string>();
    record.options = data::data_options_from_json(config.value("data_options", Json::object()));
    if (model_info.is_object()) {
      record.num_classes = model_info.value("num_classes", 0);
      const auto shape = model_info.value("input_shape", std::vector<std::int64_t>{});
      if (shape.size() == 3) record.channels = static_cast<int>(shape[0]);
    }
  } catch (const Json::exception& error) {
    fail(ErrorCategory::invalid_input, where + ": its config or model_info is damaged (" +
                                           std::string(error.what()) + "); retrain it with this ipj");
  }
  return record;
}

data::DataRecord trained_data_record(const std::string& info_text, const std::string& path) {
  if (info_text.empty()) return {};
  Json info;
  try {
    info = Json::parse(info_text);
  } catch (const Json::exception& error) {
    fail(ErrorCategory::invalid_input, "'" + path + "': its " + std::string(kTorchScriptInfoName) +
                                           " (written by ipj train) is damaged: " + error.what() +
                                           "; give --input-shape, --mean and --std, or retrain");
  }
  return trained_data_record(info, Json(nullptr), path);
}

models::InputShape image_shape(const data::Dataset& dataset) {
  return {dataset.train.channels, dataset.train.height, dataset.train.width};
}

Json describe_model_source(const models::ModelSource& source, const data::Dataset& dataset) {
  const models::InputShape shape = image_shape(dataset);
  Json info{{"name", source.label()},
            {"input_shape", {shape.channels, shape.height, shape.width}},
            {"num_classes", dataset.num_classes},
            {"mean", dataset.normalization.mean},
            {"std", dataset.normalization.std}};
  if (!dataset.class_names.empty()) info["classes"] = dataset.class_names;  // image folders: index -> name
  info["data"] = data::to_json(data::data_record(dataset));  // the default data of bench, prune, ...
  if (source.is_file()) {
    const models::FileFingerprint fingerprint = models::fingerprint_file(source.file);
    info["source"] = "torchscript";
    info["file"] = source.file;
    info["file_bytes"] = fingerprint.bytes;
    info["file_xxh3_64"] = fingerprint.xxh3_64;
    info["model_input_shape"] = source.input_shape.empty() ? info["input_shape"] : Json(source.input_shape);
  }
  return info;
}

models::ModelSource model_source_from_info(const Json& model_info) {
  if (model_info.value("source", std::string("zoo")) != "torchscript")
    return models::ModelSource(model_info.at("name").get<std::string>());
  return models::ModelSource::torchscript(
      model_info.at("file").get<std::string>(),
      model_info.at("model_input_shape").get<std::vector<std::int64_t>>());
}

void check_same_model_file(const Json& saved_info, const models::ModelSource& requested,
                           const std::string& checkpoint_path) {
  if (saved_info.value("source", std::string("zoo")) != "torchscript" || !requested.is_file()) return;
  const std::string& file = requested.file;
  const models::FileFingerprint now = models::fingerprint_file(file);
  const auto saved_bytes = saved_info.at("file_bytes").get<std::int64_t>();
  const auto saved_hash = saved_info.at("file_xxh3_64").get<std::string>();
  if (now.bytes == saved_bytes && now.xxh3_64 == saved_hash) {
    const Json resolved =
        requested.input_shape.empty() ? saved_info.at("input_shape") : Json(requested.input_shape);
    if (resolved == saved_info.at("model_input_shape")) return;
    fail(ErrorCategory::usage, "--resume: --input-shape was " + saved_info.at("model_input_shape").dump() +
                                   " (what the model takes per sample) in the run in '" + checkpoint_path +
                                   "' but is " + resolved.dump() + " now; use the same value");
  }
  fail(ErrorCategory::usage, "--model '" + file + "' is not the file that the run in '" + checkpoint_path +
                                 "' started from (" + std::to_string(saved_bytes) + " bytes, XXH3 " +
                                 saved_hash + "; now " + std::to_string(now.bytes) + " bytes, XXH3 " +
                                 now.xxh3_64 + "); give that file, or start a new --out folder");
}

CheckpointState resume_checkpoint(const std::string& checkpoint_path, const models::ModelSource& source,
                                  models::Classifier& model, torch::optim::Optimizer& optimizer,
                                  const torch::Device& device) {
  if (source.is_file())
    check_same_model_file(read_checkpoint_state(checkpoint_path).model_info, source, checkpoint_path);
  CheckpointState state = load_checkpoint(checkpoint_path, model, optimizer, device);
  restore_cpu_generator_state(state.generator_state);
  return state;
}

torch::Tensor cpu_generator_state() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void restore_cpu_generator_state(const torch::Tensor& state) {
  if (!state.defined()) return;  // a checkpoint of an older ipj: nothing saved (zoo models draw nothing)
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state.cpu());
}

void fail_user_model_step(const TrainConfig& config, const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  const std::string text = c10_error ? c10_error->what_without_backtrace() : error.what();
  const std::string reason = text.substr(0, text.find('\n'));
  const std::string hint = config.precision == Precision::fp32
                               ? "check that the model trains in PyTorch with the same settings"
                               : "with --precision " + choice_name(config.precision) +
                                     " some operators lack reduced-precision kernels in this LibTorch (e.g. "
                                     "ReLU6's backward in bf16): use --precision fp32";
  fail(ErrorCategory::unsupported, "training the TorchScript model '" + config.model.file +
                                       "' failed inside LibTorch: " + reason + "; " + hint);
}

void write_trained_torchscript(const std::string& out_dir, const models::Classifier& model,
                               const Json& model_info) {
  const auto* script = dynamic_cast<const models::ScriptClassifier*>(&model);
  if (script == nullptr) return;
  script->save_torchscript((std::filesystem::path(out_dir) / kTrainedTorchScriptFileName).string(),
                           {{kTorchScriptInfoName, model_info.dump()}});
}

}  // namespace ipj::train
