// Private to the train module: the results object of a training run (results.json, TrainResult::report)
// and the run folder's files (checkpoint.pt, model.pt, results.json), written atomically after every epoch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/energy/measurement.hpp"
#include "ipj/energy/meter.hpp"
#include "training_setup.hpp"

namespace ipj::train {

// Builds the report: the header (config, precision, threads, allocator, data set, model) once, the epochs as
// they come, and the final figures.
class TrainingReport {
 public:
  TrainingReport(const TrainingSetup& setup, const data::Dataset& dataset, const TrainHooks& hooks,
                 const TrainingStep& step);

  // What results.json holds after an epoch of an unfinished run ("complete": false, no "final").
  Json partial(const std::vector<EpochMetrics>& epochs) const;
  // The finished run: "final" (accuracy, throughput, energy, time and energy to the target) and "energy".
  Json complete(const TrainResult& result, const energy::Measurement& run_energy,
                const std::vector<energy::MeterStatus>& meters, std::int64_t dropped_batches) const;

 private:
  const TrainingSetup& setup_;
  Json header_;
};

// The run folder of config.out_dir; writes nothing without one, or when the hooks switch writing off.
class RunFolder {
 public:
  RunFolder(const TrainingSetup& setup, bool write_files);
  // checkpoint.pt (weights, optimizer, scaler, generator, epochs so far), model.pt of a user's TorchScript
  // model, and the partial results.json.
  void save_epoch(int completed_epochs, const std::vector<EpochMetrics>& epochs, const Json& partial_report);
  void save_results(const Json& report);

 private:
  const TrainingSetup& setup_;
  bool enabled_;
};

}  // namespace ipj::train
