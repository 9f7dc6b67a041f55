// Repeated training runs and their median/range summary.
#include "ipj/train/repeat.hpp"

#include <algorithm>
#include <filesystem>

#include "ipj/core/error.hpp"

namespace ipj::train {

Json spread(const std::vector<Json>& values) {
  std::vector<double> numbers;
  for (const auto& value : values)
    if (value.is_number()) numbers.push_back(value.get<double>());
  if (numbers.empty()) return nullptr;
  std::sort(numbers.begin(), numbers.end());
  const size_t middle = numbers.size() / 2;
  const double median = numbers.size() % 2 ? numbers[middle] : 0.5 * (numbers[middle - 1] + numbers[middle]);
  return Json{
      {"median", median}, {"min", numbers.front()}, {"max", numbers.back()}, {"count", numbers.size()}};
}

Json run_repeated(const TrainConfig& config, int repeats, const data::Dataset& dataset,
                  const TrainHooks& hooks) {
  if (repeats < 1 || repeats > 100) fail(ErrorCategory::usage, "--repeat must be in 1..100");
  if (config.resume) fail(ErrorCategory::usage, "--repeat cannot be combined with --resume");
  Json runs = Json::array();
  std::vector<Json> accuracy, time_to_target, energy_to_target, throughput;
  int missed = 0;
  for (int index = 0; index < repeats; ++index) {
    TrainConfig run = config;
    run.seed = config.seed + static_cast<std::uint64_t>(index);
    if (!config.out_dir.empty())
      run.out_dir = (std::filesystem::path(config.out_dir) / ("seed-" + std::to_string(run.seed))).string();
    const TrainResult result = run_training(run, dataset, hooks);
    const Json& final_json = result.report["final"];
    runs.push_back({{"seed", run.seed}, {"final", final_json}});
    accuracy.push_back(final_json["test_acc"]);
    throughput.push_back(final_json["samples_per_s"]);
    time_to_target.push_back(final_json["time_to_target_s"]);
    energy_to_target.push_back(final_json["energy_to_target_j"]);
    if (config.target_acc > 0.0 && final_json["time_to_target_s"].is_null()) ++missed;
  }
  Json report;
  report["schema_version"] = kResultsSchemaVersion;
  report["kind"] = "train-repeat";
  report["config"] = to_json(config);
  report["environment"] = hooks.environment;
  report["runs"] = runs;
  report["summary"] = {{"repeats", repeats},
                       {"target_acc", config.target_acc > 0.0 ? Json(config.target_acc) : Json(nullptr)},
                       {"missed_target", missed},
                       {"test_acc", spread(accuracy)},
                       {"samples_per_s", spread(throughput)},
                       {"time_to_target_s", spread(time_to_target)},
                       {"energy_to_target_j", spread(energy_to_target)}};
  if (!config.out_dir.empty())
    write_json_file((std::filesystem::path(config.out_dir) / "repeat.json").string(), report);
  return report;
}

}  // namespace ipj::train
