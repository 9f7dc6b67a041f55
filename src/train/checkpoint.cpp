// Checkpoint archives via torch::serialize, written through ipj's atomic file replacement and sealed with an
// xxh64 checksum (core/checked_file.hpp) that every load verifies first.
#include "ipj/train/checkpoint.hpp"

#include <torch/serialize.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <filesystem>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/train/model_setup.hpp"

namespace ipj::train {
namespace {

// `checksum`: what verify_zip_archive found before LibTorch read the file.
CheckpointState read_state(torch::serialize::InputArchive& archive, const std::string& path,
                           ChecksumStatus checksum) {
  c10::IValue format, epochs, config, metrics;
  if (!archive.try_read("ipj_checkpoint_format", format) || !format.isInt()) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is not an ipj training checkpoint (no ipj_checkpoint_format)");
  }
  if (format.toInt() < 1 || format.toInt() > kCheckpointFormatVersion) {
    fail(ErrorCategory::invalid_input, "'" + path + "' has checkpoint format " +
                                           std::to_string(format.toInt()) + ", this ipj reads formats 1 to " +
                                           std::to_string(kCheckpointFormatVersion));
  }
  require_checksum_for_format(path, "checkpoint", checksum, format.toInt());
  archive.read("completed_epochs", epochs);
  archive.read("config_json", config);
  archive.read("metrics_json", metrics);
  CheckpointState state;
  state.completed_epochs = static_cast<int>(epochs.toInt());
  state.config = parse_json_text(config.toStringRef(), "'" + path + "' config_json");
  state.epoch_metrics = parse_json_text(metrics.toStringRef(), "'" + path + "' metrics_json");
  c10::IValue model_info;
  if (archive.try_read("model_info_json", model_info) && model_info.isString())
    state.model_info = parse_json_text(model_info.toStringRef(), "'" + path + "' model_info_json");
  c10::IValue scale, tracker;
  if (archive.try_read("grad_scaler_scale", scale) &&
      archive.try_read("grad_scaler_growth_tracker", tracker)) {
    state.loss_scale = scale.toDouble();
    state.scaler_growth_tracker = tracker.toInt();
  }
  archive.try_read("cpu_generator_state", state.generator_state);
  return state;
}

constexpr const char* kWhat = "ipj checkpoint";

// Verifies the checksum (a damaged sealed file is refused here) and loads; returns whether it was sealed.
ChecksumStatus load_archive(torch::serialize::InputArchive& archive, const std::string& path,
                            const torch::Device& device = torch::kCPU) {
  const ChecksumStatus checksum = verify_zip_archive(path);
  try {
    archive.load_from(path, device);
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is not a readable checkpoint: " + error.what_without_backtrace());
  }
  return checksum;
}

// The model of a checkpoint: a zoo name, or the user's TorchScript file it was trained from (checked to be
// the same file), or, when that file is gone, the run's own model.pt next to the checkpoint.
models::ModelSource trained_model_source(const Json& info, const std::string& checkpoint_path) {
  models::ModelSource source = model_source_from_info(info);
  if (!source.is_file()) return source;
  const auto sibling = std::filesystem::path(checkpoint_path).parent_path() / kTrainedTorchScriptFileName;
  if (!std::filesystem::exists(source.file) && std::filesystem::exists(sibling)) {
    source.file = sibling.string();
    return source;
  }
  check_same_model_file(info, source, checkpoint_path);
  return source;
}

}  // namespace

void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const CheckpointState& state) {
  torch::serialize::OutputArchive archive;
  archive.write("ipj_checkpoint_format", c10::IValue(static_cast<std::int64_t>(kCheckpointFormatVersion)));
  archive.write("completed_epochs", c10::IValue(static_cast<std::int64_t>(state.completed_epochs)));
  archive.write("config_json", c10::IValue(state.config.dump()));
  archive.write("metrics_json", c10::IValue(state.epoch_metrics.dump()));
  archive.write("grad_scaler_scale", c10::IValue(state.loss_scale));
  archive.write("grad_scaler_growth_tracker", c10::IValue(state.scaler_growth_tracker));
  if (!state.model_info.is_null()) archive.write("model_info_json", c10::IValue(state.model_info.dump()));
  if (state.generator_state.defined()) archive.write("cpu_generator_state", state.generator_state);
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  archive.write("model", model_archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  replace_file_atomically(path, [&](const std::string& temporary) {
    try {
      write_through_memory(temporary, path, [&](std::ostream& out) { archive.save_to(out); });
    } catch (const c10::Error& error) {
      fail(ErrorCategory::io, "cannot write checkpoint '" + path + "': " + error.what_without_backtrace());
    }
    seal_zip_archive(temporary);
  });
}

CheckpointState load_checkpoint(const std::string& path, torch::nn::Module& model,
                                torch::optim::Optimizer& optimizer, const torch::Device& device) try {
  torch::serialize::InputArchive archive;
  const ChecksumStatus checksum = load_archive(archive, path, device);
  CheckpointState state = read_state(archive, path, checksum);
  try {
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
    torch::serialize::InputArchive optimizer_archive;
    archive.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input,
         "checkpoint '" + path + "' does not fit this model/optimizer: " + error.what_without_backtrace());
  }
  return state;
} catch (...) {
  rethrow_as_load_error(path, kWhat);
}

CheckpointState load_checkpoint_weights(const std::string& path, torch::nn::Module& model) try {
  torch::serialize::InputArchive archive;
  const ChecksumStatus checksum = load_archive(archive, path);
  CheckpointState state = read_state(archive, path, checksum);
  try {
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model.load(model_archive);
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input,
         "checkpoint '" + path + "' does not fit its model: " + error.what_without_backtrace());
  }
  return state;
} catch (...) {
  rethrow_as_load_error(path, kWhat);
}

CheckpointState read_checkpoint_state(const std::string& path) try {
  torch::serialize::InputArchive archive;
  const ChecksumStatus checksum = load_archive(archive, path);
  return read_state(archive, path, checksum);
} catch (...) {
  rethrow_as_load_error(path, kWhat);
}

TrainedModel load_trained_model(const std::string& path) try {
  TrainedModel result;
  std::error_code error;  // error_code forms: a symbolic-link loop is an error message, not an exception
  result.path = std::filesystem::is_directory(path, error)
                    ? (std::filesystem::path(path) / kCheckpointFileName).string()
                    : path;
  if (!std::filesystem::exists(result.path, error))
    fail(ErrorCategory::io, "no model at '" + result.path + "'" + (error ? ": " + error.message() : "") +
                                " (give a checkpoint.pt or a run folder)");
  const CheckpointState state = read_checkpoint_state(result.path);
  const Json& info = state.model_info;
  if (!info.is_object() || !info.contains("name") || !info.contains("input_shape"))
    fail(ErrorCategory::invalid_input,
         "checkpoint '" + result.path +
             "' has no model_info (written by an older ipj): retrain it to use it "
             "for inference");
  const auto shape = info.at("input_shape").get<std::vector<int>>();
  if (shape.size() != 3)
    fail(ErrorCategory::invalid_input, "checkpoint '" + result.path + "': bad input_shape");
  result.model = models::build_classifier(trained_model_source(info, result.path),
                                          models::InputShape{shape[0], shape[1], shape[2]},
                                          info.at("num_classes").get<int>());
  result.state = load_checkpoint_weights(result.path, *result.model);
  result.model->eval();
  return result;
} catch (...) {
  rethrow_as_load_error(path, kWhat);
}

}  // namespace ipj::train
