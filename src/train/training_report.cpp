// The results object of a training run and its run folder.
#include "training_report.hpp"

#include <filesystem>

#include "ipj/energy/energy_report.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/model_setup.hpp"

namespace ipj::train {
namespace {

Json model_description(const TrainConfig& config, models::Classifier& model, const models::InputShape& shape,
                       const torch::Device& device) {
  const models::ModelCounts counts = models::count_model(model, shape, device);
  return Json{{"name", config.model.label()},
              {"source", config.model.is_file() ? "torchscript" : "zoo"},
              {"parameters", counts.parameters},
              {"forward_flops_per_sample", counts.forward_flops_per_sample},
              {"input_shape", {shape.channels, shape.height, shape.width}}};
}

Json epochs_json(const std::vector<EpochMetrics>& epochs) {
  Json list = Json::array();
  for (const auto& metrics : epochs)
    list.push_back(to_json(metrics));
  return list;
}

std::string results_path(const TrainConfig& config) {
  return (std::filesystem::path(config.out_dir) / "results.json").string();
}

}  // namespace

TrainingReport::TrainingReport(const TrainingSetup& setup, const data::Dataset& dataset,
                               const TrainHooks& hooks, const TrainingStep& step)
    : setup_(setup) {
  const TrainConfig& config = setup.config;
  const device::ThreadPlan& threads = setup.process_settings.threads();
  const device::AllocatorPlan& allocator = setup.process_settings.allocator();
  header_["schema_version"] = kResultsSchemaVersion;
  header_["kind"] = "train";
  header_["config"] = to_json(config);
  header_["precision"] = {{"requested", choice_name(config.precision)},
                          {"used", choice_name(setup.precision.precision)},
                          {"reason", setup.precision.reason},
                          {"loss_scaling", setup.loss_scaling ? "dynamic" : "none"}};
  header_["training_step"] = step.name();
  header_["training_step_detail"] = step.detail();
  header_["environment"] = hooks.environment;
  header_["threads"] = device::to_json(threads);  // torch, blas, reason + plan, available_cpus, quota
  header_["allocator"] = {
      {"plan", choice_name(config.allocator)}, {"applied", allocator.applied}, {"reason", allocator.reason}};
  header_["dataset"] = data::to_json(dataset);
  header_["model"] = model_description(config, *setup.model, setup.shape, setup.device);
}

Json TrainingReport::partial(const std::vector<EpochMetrics>& epochs) const {
  Json report = header_;
  report["complete"] = false;
  report["epochs"] = epochs_json(epochs);
  return report;
}

Json TrainingReport::complete(const TrainResult& result, const energy::Measurement& run_energy,
                              const std::vector<energy::MeterStatus>& meters,
                              std::int64_t dropped_batches) const {
  const TrainConfig& config = setup_.config;
  // Time and energy to the target: cumulative train + eval wall time and energy up to the first epoch that
  // reached it (over every recorded epoch, including restored ones).
  Json time_to_target = nullptr, energy_to_target = nullptr;
  double cumulative_s = 0.0, cumulative_j = 0.0;
  for (const auto& metrics : result.epochs) {
    cumulative_s += metrics.wall_s;
    cumulative_j += metrics.energy_j;
    if (config.target_acc > 0.0 && time_to_target.is_null() && metrics.test_acc >= config.target_acc) {
      time_to_target = cumulative_s;
      energy_to_target = config.measure_energy ? Json(cumulative_j) : Json(nullptr);
    }
  }
  const GradScaler& scaler = setup_.scaler;
  Json report = header_;
  report["complete"] = true;
  report["epochs"] = epochs_json(result.epochs);
  report["final"] = {{"test_acc", result.test_acc},
                     {"samples_per_s", result.samples_per_s},
                     {"wall_s", result.wall_s},
                     {"train_wall_s", result.train_wall_s},
                     {"samples", result.samples},
                     {"epochs_completed", static_cast<int>(result.epochs.size())},
                     {"resumed_from_epoch", result.resumed_from_epoch},
                     {"loss", result.epochs.empty() ? 0.0 : result.epochs.back().loss},
                     {"energy_j", result.energy_j},
                     {"energy_source", energy::reported_source_name(result.energy_source)},
                     {"j_per_sample", result.samples > 0 ? result.energy_j / result.samples : 0.0},
                     {"acc_per_kj", energy::accuracy_per_kj(result.test_acc, result.energy_j)},
                     {"precision", choice_name(setup_.precision.precision)},
                     {"target_acc", config.target_acc > 0.0 ? Json(config.target_acc) : Json(nullptr)},
                     {"time_to_target_s", time_to_target},
                     {"energy_to_target_j", energy_to_target},
                     {"skipped_steps", scaler.skipped_steps()},
                     {"dropped_batches", dropped_batches},
                     {"loss_scale", setup_.loss_scaling ? Json(scaler.current_scale()) : Json(nullptr)}};
  Json energy_json = energy::to_json(run_energy);
  energy_json["meters"] = energy::to_json(meters);
  report["energy"] = energy_json;
  return report;
}

RunFolder::RunFolder(const TrainingSetup& setup, bool write_files)
    : setup_(setup), enabled_(write_files && !setup.config.out_dir.empty()) {}

void RunFolder::save_epoch(int completed_epochs, const std::vector<EpochMetrics>& epochs,
                           const Json& partial_report) {
  if (!enabled_) return;
  CheckpointState state;
  state.completed_epochs = completed_epochs;
  state.config = to_json(setup_.config);
  state.model_info = setup_.model_info;
  state.generator_state = cpu_generator_state();
  state.epoch_metrics = epochs_json(epochs);
  if (setup_.loss_scaling) {
    state.loss_scale = setup_.scaler.current_scale();
    state.scaler_growth_tracker = setup_.scaler.growth_tracker();
  }
  save_checkpoint(setup_.checkpoint_path(), *setup_.model, *setup_.optimizer, state);
  write_trained_torchscript(setup_.config.out_dir, *setup_.model,
                            setup_.model_info);  // user models: model.pt
  // Results so far, so that an interrupted run still leaves a readable results.json ("complete": false).
  write_json_file(results_path(setup_.config), partial_report);
}

void RunFolder::save_results(const Json& report) {
  if (enabled_) write_json_file(results_path(setup_.config), report);
}

}  // namespace ipj::train
