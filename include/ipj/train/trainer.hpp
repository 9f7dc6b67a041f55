// The training loop behind `ipj train`: data, model, optimizer, schedule, per-epoch evaluation, atomic
// checkpoints and results, bit-for-bit resume. CPU fp32 in this module; precisions come with the AMP work.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/models/classifier.hpp"
#include "ipj/train/evaluate.hpp"
#include "ipj/train/train_config.hpp"

namespace ipj::train {

struct EpochMetrics {
  int epoch = 0;           // 1-based
  double loss = 0.0;       // mean training cross-entropy
  double train_acc = 0.0;  // 0..1, on the training batches as seen (augmented, train mode)
  double test_acc = 0.0;   // 0..1
  double test_loss = 0.0;
  double learning_rate = 0.0;  // at the end of the epoch
  std::int64_t samples = 0;
  double train_wall_s = 0.0;  // optimisation only
  double eval_wall_s = 0.0;
  double wall_s = 0.0;         // train + eval
  double samples_per_s = 0.0;  // samples / train_wall_s
  double energy_j = 0.0;       // train + eval of this epoch
  std::string energy_source;   // counter | integrated | estimated
};

Json to_json(const EpochMetrics& metrics);
EpochMetrics epoch_metrics_from_json(const Json& json);

struct TrainResult {
  std::vector<EpochMetrics> epochs;  // including epochs restored from a checkpoint
  double test_acc = 0.0;
  double samples_per_s = 0.0;  // over the epochs run in this process
  double wall_s = 0.0;         // this process: training + evaluation
  double train_wall_s = 0.0;
  std::int64_t samples = 0;  // trained in this process
  int resumed_from_epoch = 0;
  double energy_j = 0.0;  // this process: training + evaluation
  std::string energy_source;
  models::ClassifierPtr model;
  Json report;  // the full results object (what results.json holds)
};

struct TrainHooks {
  bool show_progress = true;                              // progress bar / lines on stderr
  std::function<void(const EpochMetrics&)> on_epoch_end;  // after evaluation and checkpoint
  // After on_epoch_end: true ends the run after this epoch (`ipj tune` stops trials that cannot win); the
  // results then hold the epochs run so far, as for a run that reached --target-acc.
  std::function<bool(const EpochMetrics&)> should_stop;
  Json environment;  // `ipj devices` report to embed in results
  // --compile jit: evaluates with a compiled copy of the model (frozen TorchScript, built by the infer module
  // from the model and its normalisation). Required when config.compile == "jit".
  std::function<EvalResult(models::Classifier&, const data::Dataset&, std::int64_t batch_size)>
      compiled_evaluate;
};

// Runs training on an already loaded data set. Writes <out>/checkpoint.pt and <out>/results.json after every
// epoch when config.out_dir is set; with config.resume continues from <out>/checkpoint.pt.
// Throws ipj::Error (usage for bad flags, runtime when the loss diverges, io for unwritable folders).
TrainResult run_training(const TrainConfig& config, const data::Dataset& dataset,
                         const TrainHooks& hooks = {});

}  // namespace ipj::train
